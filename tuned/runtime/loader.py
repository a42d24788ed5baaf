"""``tuned.runtime.load``: the daemon's results in a user's program, in one line.

::

    from tuned.runtime import load
    softmax = load("softmax")          # once, at start-up
    y = softmax(x)                     # the launcher's signature; tuned knobs per shape

``load`` reads the store (read-only), picks the results measured on this process's device and
software (:func:`~tuned.runtime.plan.plan_for`), verifies every source against its SHA-256,
imports the variants and returns a :class:`~tuned.runtime.standalone.TunedKernel`. Whenever
no validated variant can run (no result for this GPU, stale results, a tampered source, a
variant that does not import) it runs the original at its declared knobs and says so in one
log line (``fallback="error"`` raises instead). All work happens in ``load``; a call only
routes (a dict lookup when the best differs by shape) and launches.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from tuned.errors import StoreError, TunedError
from tuned.paths import resolve_store_path
from tuned.registry.injection import materialize
from tuned.registry.private_ops import private_ops
from tuned.runtime.plan import Plan, plan_for
from tuned.runtime.shapes import DEFAULT_SHAPE_SETTINGS, ShapeSettings
from tuned.runtime.standalone import (
    Bucket,
    TamperedSourceError,
    TunedKernel,
    Variant,
    fingerprint,
    import_verified,
    parse_label,
    route_model,
    runtime_device,
    sha256_text,
)
from tuned.store.api import Store
from tuned.store.sqlite import SqliteStore
from tuned.text import printable

__all__ = [
    "Fallback",
    "NoGpuDriverError",
    "RuntimeLoadError",
    "current_fingerprint",
    "load",
    "resolve_store_path",
]

log = logging.getLogger("tuned.runtime")

#: ``"original"`` (run the original, log once), ``"error"`` (raise), or a callable to run.
Fallback = str | Callable[..., Any]


class RuntimeLoadError(TunedError):
    """``load`` cannot give a callable: unknown kernel, missing store, a tampered original,
    or (with ``fallback="error"``) no validated variant to run."""


class NoGpuDriverError(RuntimeLoadError):
    """No GPU driver and no Triton interpreter: no Triton kernel, the original included, can
    run in this process."""


def require_device() -> None:
    """Raise :class:`NoGpuDriverError` when Triton kernels cannot run here: no usable CUDA
    device and ``TRITON_INTERPRET=1`` not set (Triton would fail at the first call)."""
    if runtime_device() == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise NoGpuDriverError(
            "no GPU driver: torch.cuda.is_available() is False and TRITON_INTERPRET is not "
            "1, so no Triton kernel can run in this process; run on a machine with an NVIDIA "
            "GPU and its driver, or set TRITON_INTERPRET=1 (before importing triton) to run "
            "the kernels in Triton's interpreter on the CPU"
        )


@functools.lru_cache(maxsize=1)
def current_fingerprint() -> dict[str, str]:
    """This process's fingerprint, computed once (the evaluation worker's function: the copy
    in :mod:`tuned.runtime.standalone`, which a test keeps equal to it)."""
    return fingerprint(runtime_device())


def load(
    name: str,
    *,
    store: str | os.PathLike[str] | Store | None = None,
    fallback: Fallback = "original",
    shape_of: Callable[..., Mapping[str, int]] | None = None,
    settings: ShapeSettings = DEFAULT_SHAPE_SETTINGS,
) -> TunedKernel:
    """A callable with kernel ``name``'s launcher signature running its best validated
    variant for this device and software, per timed shape (module docstring).

    ``store``: a state directory, a database file, a ``postgresql://`` URL or an open
    store. ``shape_of``: maps a call's positional arguments to the registry's named dimensions
    (``{"M": ..., "N": ...}``), for kernels whose shapes cannot be learnt from
    ``make_inputs``. Raises :class:`RuntimeLoadError` (a :class:`~tuned.errors.TunedError`)
    when the kernel or the store is unknown, or the stored original fails its hash check;
    :class:`NoGpuDriverError` (one) when this process has neither a GPU driver nor
    ``TRITON_INTERPRET=1``.
    """
    if not (fallback in ("original", "error") or callable(fallback)):
        raise RuntimeLoadError(
            f"fallback={fallback!r}: use 'original', 'error' or a callable to run instead"
        )
    require_device()
    if isinstance(store, Store):
        return _load(store, name, fallback, shape_of, settings)
    if isinstance(store, str) and store.startswith(("postgresql://", "postgres://")):
        from tuned.store.url import open_store

        try:
            fleet = open_store(store)
        except StoreError as exc:
            raise RuntimeLoadError(str(exc)) from exc
        try:
            return _load(fleet, name, fallback, shape_of, settings)
        finally:
            fleet.close()
    path = resolve_store_path(store)
    if not path.exists():
        raise RuntimeLoadError(
            f"no ktuned store at {path}: tune first (ktuned tune / ktuned run), pass "
            "store= the state directory used there, or set KTUNED_STATE_DIR"
        )
    try:
        reader = SqliteStore.open_reader(path)
    except StoreError as exc:
        raise RuntimeLoadError(str(exc)) from exc
    try:
        return _load(reader, name, fallback, shape_of, settings)
    finally:
        reader.close()


def _load(
    store: Store,
    name: str,
    fallback: Fallback,
    shape_of: Callable[..., Mapping[str, int]] | None,
    settings: ShapeSettings,
) -> TunedKernel:
    try:
        plan = plan_for(store, name, current_fingerprint(), settings)
    except TunedError as exc:
        raise RuntimeLoadError(str(exc)) from exc
    extra = _extra_files(store, plan)
    try:
        original_module, base_knobs = _import_stored(
            store, plan, plan.original_hash, extra, plan.baseline_knobs
        )
    except TamperedSourceError as exc:
        raise RuntimeLoadError(
            f"{printable(name, 80)}: the stored original does not match its hash ({exc}); "
            f"the store at {store.location} was modified: sync the entry again (ktuned tune) "
            "before loading"
        ) from exc
    original = Variant(getattr(original_module, plan.launcher), base_knobs, "original", "original")
    shown = printable(name, 80)
    where = f"store {printable(store.location)}"

    def fall_back(status: str, reason: str, level: int) -> TunedKernel:
        if fallback == "error":
            raise RuntimeLoadError(f"{shown}: no validated variant to run: {reason}")
        runs = original if not callable(fallback) else Variant(fallback, {}, "fallback", "fallback")
        log.log(level, "%s: running the %s: %s", shown, runs.label, reason)
        return TunedKernel(
            name=name, status=status, reason=reason, variants=[runs], info=_info(plan)
        )

    if plan.status in ("none", "stale"):
        return fall_back(plan.status, plan.reason, logging.WARNING)
    if plan.status == "refused":  # stored rows failed their checks (plan.notes)
        return fall_back("refused", f"{plan.reason} ({where})", logging.WARNING)
    for note in plan.notes:  # refused variants: the next validated one runs in their place
        log.warning("%s: %s (%s)", shown, note, where)
    variants = []
    for ref in plan.variants:
        knobs = dict(ref.knobs)
        if ref.source_hash == plan.original_hash and knobs.keys() <= base_knobs.keys():
            fn = original.launcher
        else:
            try:
                module, knobs = _import_stored(store, plan, ref.source_hash, extra, knobs)
                fn = getattr(module, plan.launcher)
            except TamperedSourceError as exc:
                return fall_back(
                    "refused", f"candidate {ref.candidate_id} refused: {exc}", logging.ERROR
                )
            except Exception as exc:  # noqa: BLE001 - a stored variant that no longer imports
                return fall_back(
                    "error",
                    f"candidate {ref.candidate_id} does not import here: "
                    f"{type(exc).__name__}: {exc}",
                    logging.ERROR,
                )
        variants.append(Variant(fn, knobs, ref.candidate_id, ref.provenance))
    buckets = []
    for shape, index in zip(plan.shapes, plan.shape_variant):
        dims, dtype = parse_label(shape.label)
        buckets.append(Bucket(shape.label, dims, dtype, index))
    model = None
    if shape_of is None:
        make_inputs = getattr(original_module, plan.inputs, None)
        model = route_model(buckets, plan.default, make_inputs, log, name)
    kernel = TunedKernel(
        name=name,
        status=plan.status,
        reason=plan.reason,
        variants=variants,
        buckets=buckets,
        default=plan.default,
        model=model,
        shape_of=shape_of,
        info=_info(plan),
    )
    log.debug("%s: %s; %d variant(s), %d shape(s)", shown, plan.reason, len(variants), len(buckets))
    return kernel


def _info(plan: Plan) -> dict[str, Any]:
    return {
        "kernel": plan.kernel,
        "generation": plan.generation,
        "fingerprint": dict(plan.fingerprint),
        "timing_kind": plan.timing_kind,
        "speedup": plan.best.speedup if plan.best is not None else None,
    }


# ----------------------------------------------------------------------------- module files

#: Held while a stored source is rewritten, written and imported. CPython 3.11 keeps the AST
#: constructor's recursion depth per interpreter, not per thread: ``ast.parse`` in two threads
#: at once can fail with "SystemError: AST constructor recursion depth mismatch" (CPython
#: gh-106905; CI saw it when eight threads loaded at once). Loading is once per kernel and
#: process, so one at a time costs nothing; reentrant for a module that loads while imported.
_import_lock = threading.RLock()
_module_root: Path | None = None


def _root() -> Path:
    """A private directory (0700) for this process's module files, removed at exit."""
    global _module_root
    if _module_root is None:
        _module_root = Path(tempfile.mkdtemp(prefix="ktuned-runtime-"))
        atexit.register(shutil.rmtree, _module_root, True)
    return _module_root


def _import_stored(
    store: Store,
    plan: Plan,
    source_hash: str,
    extra: Mapping[str, str],
    knobs: Mapping[str, Any],
) -> tuple[ModuleType, dict[str, Any]]:
    """Import the stored source ``source_hash`` after checking the text against the hash, as
    the generated copy with ``knobs``' injected values written in (issue 19); returns it and
    the knobs its launcher takes."""
    text = store.source(source_hash)
    if text is None or sha256_text(text) != source_hash:
        got = "missing" if text is None else f"SHA-256 {sha256_text(text)[:16]}..."
        raise TamperedSourceError(f"stored source {source_hash[:16]}... is {got}")
    with _import_lock:
        return _import_text(plan, text, extra, knobs)


def _import_text(
    plan: Plan, text: str, extra: Mapping[str, str], knobs: Mapping[str, Any]
) -> tuple[ModuleType, dict[str, Any]]:
    text, rest = materialize(text, plan.launcher, knobs, sources=extra)
    text = private_ops(text, always=True)  # the user's module keeps its operators' names
    source_hash = sha256_text(text)
    # Names of files and modules derive from stored text: reduced to [0-9a-zA-Z_] so that
    # none can leave the private directory (a generation "/../../x" would).
    safe = re.sub(r"[^0-9a-zA-Z_]", "_", plan.kernel)
    generation = re.sub(r"[^0-9a-zA-Z_]", "_", plan.generation[:16])
    module_name = f"ktuned_runtime_{safe}_{source_hash[:16]}"
    root = _root().resolve()
    directory = root / f"{safe}_{generation}"
    directory.mkdir(parents=True, exist_ok=True)
    for rel, content in extra.items():
        target = (directory / rel).resolve()
        if not target.is_relative_to(directory):
            raise TamperedSourceError(f"sibling module {printable(rel)!r} is outside its entry")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
    path = directory / f"{module_name}.py"
    path.write_text(text, encoding="utf-8")
    return import_verified(path, source_hash, module_name), rest


def _extra_files(store: Store, plan: Plan) -> dict[str, str]:
    """Sibling modules of a multi-file entry: the store keeps only the main module, so they
    are read from the entry's directory, and only while it still holds the generation that
    was tuned (the generation hashes every file of the entry)."""
    kernel = store.kernel(plan.kernel)
    if kernel is None or not Path(kernel.directory).is_dir():
        return {}
    from tuned.registry import load_entry

    try:
        spec = load_entry(kernel.directory)
    except TunedError:
        return {}
    return dict(spec.extra_files) if spec.generation == plan.generation else {}
