"""The run-time core shared by ``tuned.runtime.load`` and exported directories.

This module imports nothing from ktuned (only the standard library, and torch lazily), because
``ktuned export`` copies it verbatim into every exported directory as ``_ktuned_runtime.py``:
a directory that runs without ktuned installed runs the very code that ``load`` runs.

It holds:

- the device and software **fingerprint** (a copy of the evaluation worker's, kept equal by a
  test) and the rules that compare two fingerprints (:func:`equivalent`, :func:`same_device`);
- **verified imports**: a module file is imported only if its SHA-256 is the recorded one;
- the **shape model**: how a call's arguments map onto the registry's named dimensions,
  learnt by calling the entry's ``make_inputs`` at two tiny probe shapes;
- the **bucketing rule** (:func:`nearest_bucket`) and :class:`TunedKernel`, the callable that
  routes each call to the variant of the nearest timed shape (docs/runtime.md);
- :func:`load_export`, the loader of an exported directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import linecache
import logging
import math
import os
import platform
import re
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "Bucket",
    "ShapeModel",
    "TamperedSourceError",
    "TunedKernel",
    "Variant",
    "differences",
    "equivalent",
    "fingerprint",
    "import_verified",
    "load_export",
    "nearest_bucket",
    "parse_label",
    "runtime_device",
    "same_device",
    "sha256_text",
]

#: Fingerprint keys naming the device; a best found on another device does not apply here.
DEVICE_KEYS = ("mode", "gpu_model", "cpu")
#: Software keys: a change makes the bests of this device stale until re-validated. The
#: Python version is recorded but not compared: Triton compiles the same kernels under any.
SOFTWARE_KEYS = ("driver", "cuda", "triton", "torch")

#: Shape keys remembered per kernel; beyond this, calls are routed without the cache.
ROUTE_CACHE_SIZE = 4096


class TamperedSourceError(Exception):
    """A module file or stored source does not match its recorded SHA-256: it is refused."""


# ----------------------------------------------------------------------------- fingerprints


def runtime_device() -> str:
    """``"cpu"`` when kernels run in Triton's interpreter (``TRITON_INTERPRET=1``) or no CUDA
    device is usable, else ``"cuda"``: the worker's rule, plus the no-GPU case."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def fingerprint(device: str) -> dict[str, str]:
    """The device and software this process runs kernels with.

    The same function as ``tuned.evaluation.worker.fingerprint`` (a test keeps them equal),
    copied so that exported directories need no ktuned.
    """
    import torch
    import triton

    fp = {
        "torch": str(torch.__version__),
        "triton": str(triton.__version__),
        "python": platform.python_version(),
    }
    if device == "cuda":
        fp["gpu_model"] = torch.cuda.get_device_name()
        fp["cuda"] = str(torch.version.cuda)
        fp["driver"] = _driver_version()
        fp["mode"] = "gpu"
    else:
        fp["gpu_model"] = "none"
        fp["cpu"] = platform.machine()
        fp["mode"] = "interpreter"
    return fp


def _driver_version() -> str:
    try:
        import pynvml
    except ImportError:
        return "unknown"
    try:
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except pynvml.NVMLError:
        return "unknown"


def same_device(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    """Both fingerprints name the same device: mode, GPU model (and CPU architecture)."""
    return all(a.get(k, "") == b.get(k, "") for k in DEVICE_KEYS)


def equivalent(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    """A best measured under ``a`` is valid under ``b``: same device and same driver, CUDA,
    Triton and PyTorch (the design's fingerprint; the Python version is not compared)."""
    return same_device(a, b) and all(a.get(k, "") == b.get(k, "") for k in SOFTWARE_KEYS)


def differences(old: Mapping[str, str], new: Mapping[str, str]) -> str:
    """What changed between two fingerprints, e.g. ``triton 3.6.0 -> 3.9.0``."""
    changed = [
        f"{k} {old.get(k, '-')} -> {new.get(k, '-')}"
        for k in (*DEVICE_KEYS, *SOFTWARE_KEYS)
        if old.get(k, "") != new.get(k, "")
    ]
    return ", ".join(changed) or "nothing"


# ----------------------------------------------------------------------------- verified imports


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


_import_lock = threading.Lock()


def import_verified(path: Path, expected_sha256: str, module_name: str) -> ModuleType:
    """Import the module file at ``path`` under ``module_name`` if its text hashes to
    ``expected_sha256``; else raise :class:`TamperedSourceError` (nothing is executed).

    Triton reads a kernel's source from its file, so modules are always imported from files.
    The verified text is what executes and what Triton reads as the kernels' source, so a
    file changed after the check changes nothing. The file's directory is put first on
    ``sys.path`` while the module executes, so a multi-file entry finds its sibling modules.
    Imports are serialized (thread-safe).
    """
    with _import_lock:
        if module_name in sys.modules:
            return sys.modules[module_name]
        text = path.read_text(encoding="utf-8")
        actual = sha256_text(text)
        if actual != expected_sha256:
            raise TamperedSourceError(
                f"{path} has SHA-256 {actual[:16]}..., not the recorded {expected_sha256[:16]}..."
            )
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        # Run the verified text, not the file read again, and serve that text to
        # inspect.getsource (Triton compiles a kernel from its source lines): an entry without
        # an mtime is never re-read from disk by linecache.
        filename = str(path)
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        code = compile(text, filename, "exec")
        sys.modules[module_name] = module
        sys.path.insert(0, str(path.parent))
        try:
            exec(code, module.__dict__)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
        finally:
            with contextlib.suppress(ValueError):
                sys.path.remove(str(path.parent))
        return module


# ----------------------------------------------------------------------------- shapes

_DIM_SEPARATOR = re.compile(r"(?<=\d)x(?=[A-Za-z_])")

#: Probe dimensions: two sets of primes whose ratios differ for every position, so an axis of
#: size ``c * dim`` is attributed to exactly one named dimension with one coefficient ``c``.
_PROBES = (
    (5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43),
    (11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53),
)


def parse_label(label: str) -> tuple[dict[str, int], str]:
    """``"M=4096xN=512/float16"`` -> ``({"M": 4096, "N": 512}, "float16")``."""
    dims_text, _, dtype = label.rpartition("/")
    dims: dict[str, int] = {}
    for part in _DIM_SEPARATOR.split(dims_text):
        name, _, value = part.partition("=")
        dims[name] = int(value)
    return dims, dtype


def _dtype_name(dtype: object) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class ShapeModel:
    """Where each named dimension is found in a call's arguments.

    ``axes``: ``(dimension, argument index, axis, coefficient)``: the dimension is
    ``args[index].shape[axis] // coefficient``. ``dtype_arg``: the argument whose dtype is the
    case's dtype (the first tensor).
    """

    axes: tuple[tuple[str, int, int, int], ...]
    dtype_arg: int

    @classmethod
    def probe(
        cls, make_inputs: Callable[..., Sequence[Any]], dims: Sequence[str], dtype: str
    ) -> ShapeModel | None:
        """Learn the model by calling ``make_inputs`` on the CPU at two tiny prime shapes;
        ``None`` when it refuses them or no dimension can be attributed to an axis."""
        import torch

        if not dims or len(dims) > len(_PROBES[0]):
            return None
        calls = []
        for primes in _PROBES:
            shape = dict(zip(dims, primes))
            try:
                inputs = make_inputs(shape, getattr(torch, dtype), "cpu", 0)
            except Exception:  # noqa: BLE001 - a maker that refuses tiny shapes: no model
                return None
            calls.append([tuple(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs])
        tensors = [i for i, s in enumerate(calls[0]) if s is not None]
        if not tensors:
            return None
        axes: list[tuple[str, int, int, int]] = []
        for j, name in enumerate(dims):
            p, q = _PROBES[0][j], _PROBES[1][j]
            for i in tensors:
                first, second = calls[0][i], calls[1][i]
                if second is None or first is None or len(first) != len(second):
                    continue
                found = next(
                    (
                        a
                        for a, (u, v) in enumerate(zip(first, second))
                        if u % p == 0 and v % q == 0 and u // p == v // q
                    ),
                    None,
                )
                if found is not None:
                    axes.append((name, i, found, first[found] // p))
                    break
        return cls(axes=tuple(axes), dtype_arg=tensors[0]) if axes else None

    def key(self, args: Sequence[Any]) -> tuple[Any, ...]:
        """The routing key of a call: the mapped axis sizes and the dtype."""
        return (
            *(args[i].shape[a] for _, i, a, _ in self.axes),
            args[self.dtype_arg].dtype,
        )

    def dims(self, key: tuple[Any, ...]) -> tuple[dict[str, int], str]:
        """Named dimensions and dtype name of a routing key."""
        dims = {name: int(key[n]) // c for n, (name, _, _, c) in enumerate(self.axes)}
        return dims, _dtype_name(key[-1])


@dataclass(frozen=True)
class Bucket:
    """A timed shape (case) and the index of the variant that is best there."""

    label: str
    dims: Mapping[str, int]
    dtype: str
    variant: int


def nearest_bucket(buckets: Sequence[Bucket], dims: Mapping[str, int], dtype: str) -> Bucket:
    """The bucketing rule: among the timed cases of the call's dtype (all cases when none has
    it), the one nearest in log2 space over the dimensions both know,
    ``sum_d (log2 n_d - log2 case_d)^2``; ties go to the larger case (more work), then to
    the label. ``buckets`` must not be empty."""
    pool = [b for b in buckets if b.dtype == dtype] or list(buckets)

    def rank(b: Bucket) -> tuple[float, int, str]:
        distance = sum(
            (math.log2(max(dims[d], 1)) - math.log2(max(b.dims[d], 1))) ** 2
            for d in b.dims
            if d in dims
        )
        return (round(distance, 9), -math.prod(b.dims.values()), b.label)

    return min(pool, key=rank)


# ----------------------------------------------------------------------------- the callable


@dataclass(frozen=True)
class Variant:
    """A runnable variant: its launcher, the knobs it is called with, where it came from."""

    launcher: Callable[..., Any]
    knobs: Mapping[str, Any]
    candidate_id: str
    label: str = ""  # "original", "tuned", ...


@dataclass
class TunedKernel:
    """Callable with the launcher's signature: runs the variant chosen for the call's shape.

    ``status``: ``tuned`` (validated variants run), ``original`` (tuned, and the original at
    its declared knobs was best), or a fallback to the original: ``none`` (no result for this
    device and software), ``stale`` (results for older software), ``refused`` (a source did
    not match its hash), ``error`` (a variant could not be loaded). ``reason`` says why.

    Calls are thread-safe: routing state is a dict of immutable entries, written whole. Knobs
    given by the caller override the tuned ones.
    """

    name: str
    status: str
    reason: str
    variants: Sequence[Variant]
    buckets: Sequence[Bucket] = ()
    default: int = 0
    model: ShapeModel | None = None
    shape_of: Callable[..., Mapping[str, int]] | None = None
    info: Mapping[str, Any] = field(default_factory=dict)
    _routes: dict[tuple[Any, ...], Variant] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        used = {b.variant for b in self.buckets} | {self.default}
        routed = len(used) > 1 and (self.model is not None or self.shape_of is not None)
        self._single: Variant | None = None if routed else self.variants[self.default]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        v = self._single or self.route(args)
        if kwargs:
            return v.launcher(*args, **{**v.knobs, **kwargs})
        return v.launcher(*args, **v.knobs)

    def route(self, args: Sequence[Any]) -> Variant:
        """The variant a call with these positional arguments runs."""
        if self._single is not None:
            return self._single
        try:
            if self.shape_of is not None:
                dims = dict(self.shape_of(*args))
                key: tuple[Any, ...] = (*sorted(dims.items()), _first_dtype(args))
            else:
                assert self.model is not None
                key = self.model.key(args)
        except (IndexError, AttributeError, TypeError, KeyError):
            return self.variants[self.default]  # not shaped as the registry declares
        hit = self._routes.get(key)
        if hit is None:
            if self.shape_of is not None:
                dims, dtype = dict(key[:-1]), _dtype_name(key[-1])
            else:
                assert self.model is not None
                dims, dtype = self.model.dims(key)
            hit = self.variants[nearest_bucket(self.buckets, dims, dtype).variant]
            if len(self._routes) < ROUTE_CACHE_SIZE:
                self._routes[key] = hit
        return hit

    def bucket_for(self, args: Sequence[Any]) -> Bucket | None:
        """The timed shape whose variant a call runs (``None`` without shape routing)."""
        if self._single is not None:
            return None
        if self.shape_of is not None:
            dims, dtype = dict(self.shape_of(*args)), _dtype_name(_first_dtype(args))
        else:
            assert self.model is not None
            dims, dtype = self.model.dims(self.model.key(args))
        return nearest_bucket(self.buckets, dims, dtype)


def _first_dtype(args: Sequence[Any]) -> object:
    return next((a.dtype for a in args if hasattr(a, "dtype")), "")


def route_model(
    buckets: Sequence[Bucket],
    default: int,
    make_inputs: Callable[..., Sequence[Any]] | None,
    log: logging.Logger,
    name: str,
) -> ShapeModel | None:
    """The shape model when the buckets need routing (their variants differ), else None."""
    if len({b.variant for b in buckets} | {default}) <= 1 or make_inputs is None:
        return None
    dims = list(dict.fromkeys(d for b in buckets for d in b.dims))
    model = ShapeModel.probe(make_inputs, dims, buckets[0].dtype)
    if model is None:
        log.info(
            "%s: the best differs by shape, but the call's shape cannot be read from its "
            "arguments (make_inputs refused the probe shapes); every call runs the overall "
            "best (pass shape_of= to route by shape)",
            name,
        )
    return model


# ----------------------------------------------------------------------------- exports

MANIFEST = "manifest.json"
EXPORT_FORMAT = 1


def load_export(directory: Path, *, logger: str = "ktuned.export") -> TunedKernel:
    """Load an exported directory (``ktuned export``): verify every file against the
    manifest's SHA-256, check that this process runs on the device and software the bests
    were measured on, and return the routing callable; fall back to the original (one log
    line) when the fingerprint differs or a variant's file was tampered with."""
    log = logging.getLogger(logger)
    manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    if manifest.get("format") != EXPORT_FORMAT:
        raise ValueError(
            f"{directory / MANIFEST}: format {manifest.get('format')!r}; this loader reads "
            f"format {EXPORT_FORMAT}: export again with the ktuned that reads it"
        )
    name = str(manifest["kernel"])
    prefix = f"ktuned_export_{re.sub(r'[^0-9a-zA-Z_]', '_', name)}"

    def module(entry: Mapping[str, str]) -> ModuleType:
        return import_verified(
            directory / entry["file"], entry["sha256"], f"{prefix}_{entry['sha256'][:16]}"
        )

    for extra in manifest.get("extra_files", ()):  # siblings: verified before anything runs
        text = (directory / extra["file"]).read_text(encoding="utf-8")
        if sha256_text(text) != extra["sha256"]:
            raise TamperedSourceError(f"{directory / extra['file']} does not match its hash")
    original_module = module(manifest["original"])  # a tampered original is an error
    launcher_name = str(manifest["launcher"])
    original = Variant(
        getattr(original_module, launcher_name),
        dict(manifest["original"]["knobs"]),
        "original",
        "original",
    )

    def fall_back(status: str, reason: str, level: int) -> TunedKernel:
        log.log(level, "%s: running the original: %s", name, reason)
        return TunedKernel(name=name, status=status, reason=reason, variants=[original])

    current = fingerprint(runtime_device())
    tuned_on = manifest["fingerprint"]
    if not equivalent(tuned_on, current):
        if same_device(tuned_on, current):
            return fall_back(
                "stale", f"exported bests are stale ({differences(tuned_on, current)})", 30
            )
        return fall_back(
            "none",
            f"exported for {tuned_on.get('gpu_model')} ({tuned_on.get('mode')}), this is "
            f"{current.get('gpu_model')} ({current.get('mode')})",
            20,
        )
    variants = []
    try:
        for v in manifest["variants"]:
            if v.get("file") == manifest["original"]["file"]:
                fn = original.launcher
            else:
                fn = getattr(module(v), launcher_name)
            variants.append(Variant(fn, dict(v["knobs"]), str(v["candidate"]), "tuned"))
    except TamperedSourceError as exc:
        return fall_back("refused", f"a variant was refused: {exc}", 40)
    buckets = [
        Bucket(s["label"], dict(s["dims"]), str(s["dtype"]), int(s["variant"]))
        for s in manifest["shapes"]
    ]
    default = int(manifest["default"])
    make_inputs = getattr(original_module, str(manifest.get("inputs", "")), None)
    return TunedKernel(
        name=name,
        status=str(manifest.get("status", "tuned")),
        reason="exported bests",
        variants=variants,
        buckets=buckets,
        default=default,
        model=route_model(buckets, default, make_inputs, log, name),
        info=manifest,
    )
