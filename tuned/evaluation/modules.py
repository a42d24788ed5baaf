"""What both sides of the evaluation worker share: importing an entry's modules, the JSON-lines
channel, and the process limits.

The judge (:mod:`tuned.evaluation.judge`) imports the entry's *original* module with
:class:`ModuleLoader` (the user's own code: inputs and reference); a runner
(:mod:`tuned.evaluation.runner`) imports candidate modules with it, under the guard.
"""

from __future__ import annotations

import contextlib
import faulthandler
import hashlib
import importlib
import importlib.util
import json
import os
import resource
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import IO, Any

from tuned.evaluation.channel import LineReader, parse_message
from tuned.evaluation.checks import CaseFailure
from tuned.evaluation.guard import Guard
from tuned.registry.private_ops import private_ops

__all__ = [
    "Channel",
    "ModuleLoader",
    "entry_key",
    "import_candidate",
    "inputs_module",
    "limit_resources",
    "refuse_tracing",
]

#: The longest line either side reads from the other (a runner's reply is untrusted).
MAX_LINE = 1 << 22


class Channel:
    """JSON lines over a pair of pipe file descriptors. Read through a
    :class:`~tuned.evaluation.channel.LineReader`, so that :meth:`waiting` can see, without
    blocking, what was sent and not yet received: a spare worker skips preparations once the
    client has taken it over (``worker._serve``)."""

    def __init__(self, in_fd: int, out_fd: int) -> None:
        self._in = LineReader(in_fd, limit=MAX_LINE)
        self._out: IO[str] = os.fdopen(out_fd, "w", encoding="utf-8")

    def send(self, message: Mapping[str, Any]) -> None:
        self._out.write(json.dumps(message) + "\n")
        self._out.flush()

    def receive(self) -> dict[str, Any] | None:
        """The next message; ``None`` once the other side closed (a cut-off line too)."""
        while (line := self._in.read_line(3600.0)) is None:
            pass  # no deadline: a worker waits for its next request as long as it takes
        if len(line) > MAX_LINE:
            raise ValueError(f"a message longer than {MAX_LINE} bytes")
        if not line:
            return None
        message: dict[str, Any] = json.loads(line)
        return message

    def pending_bytes(self) -> bytes:
        """What was sent and not yet received, read without blocking (it stays to be
        received)."""
        self._in.complete_lines(limit=MAX_LINE)
        return bytes(self._in.buffer)

    def waiting(self) -> list[dict[str, Any]]:
        """The complete messages sent and not yet received, read without blocking; they
        stay to be received (lines that are no JSON object are left out here)."""
        messages = []
        for line in self.pending_bytes().split(b"\n")[:-1]:
            message, _ = parse_message(line)
            if message is not None:
                messages.append(message)
        return messages


_PR_SET_DUMPABLE = 4


def refuse_tracing() -> bool:
    """Make this process non-dumpable: a process of the same user without ``CAP_SYS_PTRACE``
    can then neither ptrace it nor read or write its memory (``/proc/<pid>/mem``,
    ``process_vm_readv``/``writev``). The judge calls it before it starts any runner: a
    candidate in a runner (same user, same sandbox, its capabilities dropped by ``bwrap``)
    opened the judge's ``/proc/<pid>/mem`` for writing through ``ctypes`` before. The daemon
    that started the sandbox still sees the judge: it owns the sandbox's user namespace.
    ``False`` where the call is not available (not Linux)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def dump_stacks_on_signal() -> None:
    """SIGUSR2 prints every thread's Python stack to this process's stderr log (and, in the
    zygote, to each runner's it forks): how an operator sees where a worker that makes no
    progress waits (docs/runbook.md, "KtunedNoProgress", says to which processes to send it).
    On the H200 a tune
    sat 190 s with no evaluation and no phase over its timeout, and nothing said where."""
    with contextlib.suppress(AttributeError, ValueError, OSError):  # no SIGUSR2, no stderr fd
        faulthandler.register(signal.SIGUSR2, all_threads=True)


#: What PyTorch's allocator may keep cached unused in the judge or a runner (see
#: :func:`release_unused`).
UNUSED_BYTES = 1 << 30


def release_unused(device: str) -> None:
    """Give back what PyTorch's allocator holds unused in this process once it passes
    :data:`UNUSED_BYTES`: the judge, the spares and their runners share one GPU. A reference
    (PyTorch eager, in float32 with its intermediates: a cross entropy over 8192 x 128256
    logits) leaves gigabytes cached in the judge (on the H100 a runner ran out of memory for
    2 GiB while another process held 66 GiB); a runner's calls likewise (on the H200 a runner
    of Liger's cross entropy forward and backward held 90.7 GiB, and the judge ran out of
    memory for 7.8 GiB)."""
    if device != "cuda":
        return
    import torch

    if torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > UNUSED_BYTES:
        torch.cuda.empty_cache()


def limit_resources() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    limit = os.environ.get("KTUNED_WORKER_MEMORY_BYTES")
    if limit:  # address-space cap: only in interpreter mode (CUDA reserves huge VA ranges)
        resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))


class ModuleLoader:
    """Imports module sources written to the worker's directory, under unique names."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._loaded: dict[str, ModuleType] = {}

    def _enter(self, directory: Path) -> None:
        """Make ``directory`` the only entry directory imports resolve from. Helper modules
        another entry imported (its ``utils.py``, say) leave ``sys.modules``, so an entry's
        ``import utils`` finds its own file, never a namesake's that stayed cached."""
        root, own = str(self.root), str(directory)
        sys.path[:] = [p for p in sys.path if not p.startswith(root)]
        sys.path.insert(0, own)
        for name, mod in list(sys.modules.items()):
            where = getattr(mod, "__file__", None) or ""
            foreign = where.startswith(root) and not where.startswith(own + os.sep)
            if foreign and not name.rpartition(".")[2].startswith("ktuned_candidate_"):
                del sys.modules[name]

    def load(
        self,
        source: str,
        *,
        directory_key: str,
        extra_files: Mapping[str, str],
        package: str = "",
    ) -> ModuleType:
        """``source`` imported as ``ktuned_candidate_<hash>``, or inside ``package`` (a copy of
        an installed package's module: its imports resolve as the original's do). Operators
        it defines that are already registered (by the original, or by an earlier copy) are
        registered under a private namespace (:func:`private_ops`)."""
        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        key = f"{directory_key}:{package}:{digest}"
        directory = self.root / f"entry_{directory_key}"
        self._enter(directory)
        if key in self._loaded:
            return self._loaded[key]
        directory.mkdir(parents=True, exist_ok=True)
        for rel, text in extra_files.items():
            path = directory / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        stem = name = f"ktuned_candidate_{digest}"
        if package:
            # The installed package first, as its module would be: its ``__init__`` may
            # import the module itself (``import torchao`` registers ``torchao::int_matmul``),
            # and only then does ``private_ops`` see those operators registered.
            importlib.import_module(package)
            name = f"{package}.{name}"
        path = directory / f"{stem}.py"
        path.write_text(private_ops(source), encoding="utf-8")
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise CaseFailure("runtime_error", f"cannot import the module from {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        if len(self._loaded) > 64:  # keep memory bounded in a long-lived worker
            for old in list(self._loaded)[:32]:
                sys.modules.pop(self._loaded.pop(old).__name__, None)
        self._loaded[key] = module
        return module


def entry_key(kernel: Mapping[str, Any]) -> str:
    """The directory key of an entry's modules: the hash of its original source and its other
    files (a changed helper is a new directory, never a stale import)."""
    files = json.dumps(
        [kernel["original_source"], kernel.get("extra_files", {}), kernel.get("inputs_source")],
        sort_keys=True,
    )
    return hashlib.sha256(files.encode()).hexdigest()[:16]


def inputs_module(loader: ModuleLoader, kernel: Mapping[str, Any], original: ModuleType) -> Any:
    """The module of the entry's inputs and reference: ``original``, or the entry's own module
    when the launcher is an installed package's (``inputs_source``)."""
    if not kernel.get("inputs_source"):
        return original
    extra = kernel.get("extra_files", {})
    key = entry_key(kernel)
    return loader.load(kernel["inputs_source"], directory_key=key, extra_files=extra)


def import_candidate(
    loader: ModuleLoader, kernel: Mapping[str, Any], source: str, guard: Guard
) -> tuple[ModuleType, ModuleType]:
    """The entry's original module, then ``source`` imported under ``guard``, both from the
    entry's own directory with its extra files. Something the guard refused at import is a
    ``cheat``; the caller checks ``guard`` for refusals the module swallowed."""
    key, extra = entry_key(kernel), kernel.get("extra_files", {})
    package = str(kernel.get("package") or "")
    original = loader.load(
        kernel["original_source"], directory_key=key, extra_files=extra, package=package
    )
    try:
        with guard:
            module = loader.load(source, directory_key=key, extra_files=extra, package=package)
    except Exception as exc:
        if guard.violations:
            raise CaseFailure("cheat", f"forbidden at import: {guard.violations[0]}") from exc
        raise
    return original, module
