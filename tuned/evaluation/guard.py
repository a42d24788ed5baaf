"""Runtime integrity checks around every call of candidate code (runs inside the worker).

While candidate code runs, :class:`Guard` is installed:

- **launch hook**: counts launches of Triton kernels defined in the candidate's own module
  (``run`` of Triton's ``JITFunction`` and of the interpreter's ``InterpretedFunction``). A
  call that launched none of them did not run a Triton kernel of the candidate. A launch
  counts only when it has work (:func:`launch_has_work`): a grid of at least one program, a
  non-empty tensor argument, and no size-like integer argument (``n``, ``N``, ``M``, ``K``,
  ``numel``, ``n_*``, ``*_size``, ``*_elements``, ...) equal to 0; empty launches are counted
  apart (``empty_launches``), so a module that computes with PyTorch and launches a kernel of
  zero elements to satisfy the hook is named.
- **poisoned allocations**: ``torch.empty``, ``empty_like``, ``empty_strided`` and
  ``Tensor.new_empty`` return memory filled with a poison value (NaN for floating dtypes, the
  largest value for integers; or a finite sentinel on a second call), so an output element the
  kernel never wrote is seen, instead of whatever an earlier computation (the reference!) left
  in a reused allocator block.
- **forbidden effects**: starting processes, signalling processes, opening sockets, side
  CUDA streams, reading the clock from candidate code, and opening files for writing outside
  the worker's directories are refused (``PermissionError``) and recorded. Processes and file
  writes asked for by Triton, PyTorch or NumPy themselves (Triton runs ``ptxas`` and writes its
  cache while compiling a kernel the candidate launches) are let through: what decides is the
  nearest caller outside the standard library.

These are Python-level fences against the known ways benchmark kernels cheat; the static gate
(for LLM-written modules) and the worker's process isolation are the other layers.
"""

from __future__ import annotations

import builtins
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["POISON_SENTINEL", "Guard", "TimerSnapshot", "launch_has_work", "poison_sentinel"]

POISON_SENTINEL = 7776.0  # exactly representable in float16, bfloat16 and float32


def poison_sentinel(dtype: Any) -> float:
    """The sentinel a floating tensor of ``dtype`` is poisoned with, as that dtype holds it:
    :data:`POISON_SENTINEL`, or half the largest finite value where that is out of reach
    (float8_e4m3fn ends at 448: filling 7776 raised "cannot be converted ... without
    overflow", and every kernel writing float8 into ``torch.empty`` failed as the original)."""
    import torch

    finite = torch.finfo(dtype).max
    value = POISON_SENTINEL if finite >= 2 * POISON_SENTINEL else finite / 2
    return float(torch.tensor(value).to(dtype).float())  # rounded as the dtype stores it


_PROCESS_FUNCS = (
    "fork",
    "forkpty",
    "system",
    "popen",
    "posix_spawn",
    "posix_spawnp",
    "execv",
    "execve",
    "execvp",
    "execvpe",
    "execl",
    "execle",
    "execlp",
)
_SIGNAL_FUNCS = ("kill", "killpg")
_CLOCK_FUNCS = (
    "time",
    "time_ns",
    "perf_counter",
    "perf_counter_ns",
    "monotonic",
    "monotonic_ns",
    "process_time",
    "process_time_ns",
)
_SIZE_NAMES = frozenset({"n", "m", "k", "numel", "size", "rows", "cols", "length", "nelem"})


def _size_like(name: str) -> bool:
    if name in {"N", "M", "K"}:
        return True
    if name.isupper():  # BLOCK_SIZE and other constexprs
        return False
    low = name.lower()
    return (
        low in _SIZE_NAMES
        or low.startswith(("n_", "num_"))
        or low.endswith(("_size", "numel", "_elements", "_rows", "_cols"))
    )


def launch_has_work(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a Triton launch does work: a grid of at least one program (a callable grid is
    taken as such), some non-empty tensor argument, and no size-like integer argument (by the
    kernel's parameter name) that is 0."""
    grid = kwargs.get("grid")
    if isinstance(grid, (tuple, list)):
        if any(isinstance(g, int) and g <= 0 for g in grid):
            return False
    elif isinstance(grid, int) and grid <= 0:
        return False
    names = list(getattr(kernel, "arg_names", []) or [])
    bound = dict(zip(names, args))
    bound.update({k: v for k, v in kwargs.items() if k in names})
    tensors = [v for v in bound.values() if hasattr(v, "data_ptr") and hasattr(v, "numel")]
    if tensors and not any(int(t.numel()) > 0 for t in tensors):
        return False
    for name, value in bound.items():
        zero = isinstance(value, int) and not isinstance(value, bool) and value == 0
        if zero and _size_like(name):
            return False
    return True


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _caller_module(depth: int = 2) -> str:
    frame = sys._getframe(depth)
    return str(frame.f_globals.get("__name__", ""))


# Libraries whose own effects are not the candidate's: Triton runs ptxas in a subprocess and
# writes its cache while compiling a kernel the candidate launches.
_TRUSTED_LIBRARIES = frozenset({"triton", "torch", "numpy"})


def compile_facts(compiled: Any) -> dict[str, float] | None:
    """Registers, spills, shared memory, warps and stages of a compiled Triton kernel (what
    ``JITFunction.run`` returns on a GPU); ``None`` for anything else (the interpreter)."""
    regs = getattr(compiled, "n_regs", None)
    metadata = getattr(compiled, "metadata", None)
    if not isinstance(regs, int) or metadata is None:
        return None
    facts = {"registers": float(regs), "spills": float(getattr(compiled, "n_spills", 0) or 0)}
    for key, name in (("shared", "shared_bytes"), ("num_warps", "num_warps")):
        value = getattr(metadata, key, None)
        if isinstance(value, (int, float)):
            facts[name] = float(value)
    stages = getattr(metadata, "num_stages", None)
    if isinstance(stages, (int, float)):
        facts["num_stages"] = float(stages)
    return facts


def _library_is_acting() -> bool:
    """Whether the nearest caller outside the standard library (and this module) is a
    trusted library rather than candidate code or the worker."""
    frame = sys._getframe(2)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        top = module.split(".")[0]
        if top in _TRUSTED_LIBRARIES:
            return True
        if module != __name__ and top not in sys.stdlib_module_names:
            return False
        frame = frame.f_back  # type: ignore[assignment]
    return False


class Guard:
    """Context manager; ``violations`` and ``launches`` are read after it exits."""

    def __init__(
        self,
        *,
        candidate_modules: Iterable[str],
        writable: Iterable[Path],
        poison: str | None = "nan",
    ) -> None:
        self.candidate_modules = frozenset(candidate_modules)
        self.writable = tuple(str(p.resolve()) for p in writable)
        self.poison = poison
        self.violations: list[str] = []
        self.launches = 0
        self.empty_launches = 0  # launches of the candidate's kernels that had no work
        #: Modules of the kernels launched that are not the candidate's (another module
        #: of a library: what a user should register instead).
        self.foreign_launches: set[str] = set()
        #: Compile metadata of the candidate modules' kernels that ran, by (module, function).
        self.compiled: dict[tuple[str, str], dict[str, float]] = {}
        self._undo: list[tuple[Any, str, Any, Any]] = []

    # -- helpers

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        if hasattr(owner, name):
            self._undo.append((owner, name, getattr(owner, name), replacement))
            setattr(owner, name, replacement)

    def _refuse(self, what: str, original: Any = None) -> Callable[..., Any]:
        """A stand-in that refuses when candidate code asks, and (given ``original``) lets a
        trusted library through (Triton starting ptxas, say)."""

        def refused(*args: Any, **kwargs: Any) -> Any:
            if original is not None and _library_is_acting():
                return original(*args, **kwargs)
            self.violations.append(what)
            raise PermissionError(f"ktuned worker: {what} is not allowed in candidate code")

        return refused

    def _from_candidate(self) -> bool:
        return _caller_module(3) in self.candidate_modules

    # -- install

    def __enter__(self) -> Guard:
        self._patch_launches()
        if self.poison is not None:
            self._patch_allocations()
        for name in _PROCESS_FUNCS:
            what = f"starting a process (os.{name})"
            self._patch(os, name, self._refuse(what, getattr(os, name, None)))
        what = "starting a process (subprocess)"
        self._patch(subprocess.Popen, "__init__", self._refuse(what, subprocess.Popen.__init__))
        for name in _SIGNAL_FUNCS:
            self._patch(os, name, self._refuse(f"signalling a process (os.{name})"))
        self._patch(socket.socket, "__init__", self._refuse("opening a socket"))
        self._patch_streams()
        self._patch_clocks()
        self._patch_files()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        while self._undo:
            owner, name, original, replacement = self._undo.pop()
            if getattr(owner, name, None) is not replacement:
                self.violations.append(f"replacing {getattr(owner, '__name__', owner)}.{name}")
            setattr(owner, name, original)

    def _patch_launches(self) -> None:
        classes = []
        try:
            from triton.runtime.jit import JITFunction

            classes.append(JITFunction)
        except ImportError:  # pragma: no cover - triton is always there in a worker
            pass
        try:
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        except ImportError:  # pragma: no cover
            pass
        for cls in classes:
            original = cls.run

            def run(kernel: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
                fn = getattr(kernel, "fn", None)
                module = getattr(fn, "__module__", "")
                ours = not kwargs.get("warmup") and module in self.candidate_modules
                if not ours and module and not kwargs.get("warmup"):
                    self.foreign_launches.add(str(module))
                if ours and launch_has_work(kernel, args, kwargs):
                    self.launches += 1
                elif ours:
                    self.empty_launches += 1
                compiled = _original(kernel, *args, **kwargs)
                facts = compile_facts(compiled) if ours else None
                if facts is not None:
                    self.compiled[(module, getattr(fn, "__name__", "?"))] = facts
                return compiled

            self._patch(cls, "run", run)
        self._patch_compiled_launches()

    def _patch_compiled_launches(self) -> None:
        """Launches of a ``CompiledKernel`` (what ``kernel.warmup(...)`` returns; launched as
        ``compiled[grid](...)``, as Triton's fused-softmax tutorial does) skip
        ``JITFunction.run``: they are counted here, by the module of the kernel compiled."""
        try:
            from triton.compiler.compiler import CompiledKernel
        except ImportError:  # pragma: no cover - every supported Triton has it
            return
        original = CompiledKernel.__getitem__

        def getitem(compiled: Any, grid: Any, _original: Any = original) -> Any:
            launch = _original(compiled, grid)
            jit = getattr(getattr(compiled, "src", None), "fn", None)
            fn = getattr(jit, "fn", None)
            module = str(getattr(fn, "__module__", "") or "")
            if module not in self.candidate_modules:
                if module:
                    self.foreign_launches.add(module)
                return launch

            def counted(*args: Any, **kwargs: Any) -> Any:
                if launch_has_work(jit, args, {"grid": grid}):
                    self.launches += 1
                else:
                    self.empty_launches += 1
                facts = compile_facts(compiled)
                if facts is not None:
                    self.compiled[(module, getattr(fn, "__name__", "?"))] = facts
                return launch(*args, **kwargs)

            return counted

        self._patch(CompiledKernel, "__getitem__", getitem)

    def _patch_allocations(self) -> None:
        import torch

        sentinel = self.poison != "nan"

        def poisoned(t: torch.Tensor) -> torch.Tensor:
            if t.is_floating_point():
                t.fill_(poison_sentinel(t.dtype) if sentinel else float("nan"))
            elif t.dtype == torch.bool:
                t.fill_(True)
            elif not t.is_complex():  # in range for every integer dtype (int8 ends at 127)
                info = torch.iinfo(t.dtype)
                t.fill_(min(int(POISON_SENTINEL), info.max // 2 + 1) if sentinel else info.max)
            return t

        for name in ("empty", "empty_like", "empty_strided"):
            original = getattr(torch, name)

            def alloc(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                return poisoned(_original(*args, **kwargs))

            self._patch(torch, name, alloc)
        new_empty = torch.Tensor.new_empty

        def tensor_new_empty(t: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            return poisoned(new_empty(t, *args, **kwargs))

        self._patch(torch.Tensor, "new_empty", tensor_new_empty)

    def _patch_streams(self) -> None:
        import torch

        # PyTorch itself builds Stream objects (``torch.cuda.current_stream()``, which every
        # ``Event.record()`` calls): those pass, candidate code asking directly does not.
        for name in ("Stream", "stream", "set_stream", "ExternalStream"):
            what = f"a side CUDA stream (torch.cuda.{name})"
            self._patch(torch.cuda, name, self._refuse(what, getattr(torch.cuda, name, None)))
        stream = getattr(torch, "Stream", None)
        self._patch(torch, "Stream", self._refuse("a side stream (torch.Stream)", stream))

    def _patch_clocks(self) -> None:
        for name in _CLOCK_FUNCS:
            original = getattr(time, name)

            def clock(*args: Any, _original: Any = original, _name: str = name) -> Any:
                if self._from_candidate():
                    self.violations.append(f"reading the clock (time.{_name})")
                    raise PermissionError("ktuned worker: candidate code may not read the clock")
                return _original(*args)

            self._patch(time, name, clock)

    def _patch_files(self) -> None:
        original_open = builtins.open
        original_os_open = os.open

        def allowed(path: Any) -> bool:
            try:
                resolved = str(Path(os.fsdecode(path)).resolve())
            except (TypeError, ValueError):
                return False
            return any(resolved == w or resolved.startswith(w + os.sep) for w in self.writable)

        def guarded_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            writes = any(c in mode for c in "wax+")
            if (
                isinstance(file, (str, bytes, os.PathLike))
                and writes
                and not allowed(file)
                and not _library_is_acting()
            ):
                self.violations.append(f"writing a file outside the worker ({os.fsdecode(file)})")
                raise PermissionError(f"ktuned worker: may not write {file!r}")
            return original_open(file, mode, *args, **kwargs)

        def guarded_os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> Any:
            if flags & _WRITE_FLAGS and not allowed(path) and not _library_is_acting():
                self.violations.append(f"writing a file outside the worker ({os.fsdecode(path)})")
                raise PermissionError(f"ktuned worker: may not write {path!r}")
            return original_os_open(path, flags, *args, **kwargs)

        self._patch(builtins, "open", guarded_open)
        self._patch(os, "open", guarded_os_open)


class TimerSnapshot:
    """The functions measurements rely on, captured at worker start, to detect patching."""

    def __init__(self, extra: dict[str, Any] | None = None) -> None:
        import torch

        self.items: dict[str, tuple[Any, str, Any]] = {}
        for name in _CLOCK_FUNCS:
            self._add(f"time.{name}", time, name)
        for name in ("synchronize", "Event"):
            self._add(f"torch.cuda.{name}", torch.cuda, name)
        for name in ("elapsed_time", "record", "synchronize"):
            self._add(f"torch.cuda.Event.{name}", torch.cuda.Event, name)
        for name in ("equal", "isclose", "isnan", "allclose", "empty", "empty_like"):
            self._add(f"torch.{name}", torch, name)
        for label, (owner, name) in (extra or {}).items():
            self._add(label, owner, name)

    def _add(self, label: str, owner: Any, name: str) -> None:
        if hasattr(owner, name):
            self.items[label] = (owner, name, getattr(owner, name))

    def tampered(self) -> list[str]:
        """Labels of the functions that were replaced; restores them."""
        changed = []
        for label, (owner, name, original) in self.items.items():
            if getattr(owner, name, None) is not original:
                changed.append(label)
                setattr(owner, name, original)
        return changed
