"""The shared memory a judge and its runner exchange tensors through (the arena).

The judge (:mod:`tuned.evaluation.judge`) owns every byte: it lays a call's inputs and the
reference's output shapes out in one arena (:func:`plan`), copies pristine inputs in before
each call, poisons the output places, and after the call reads the outputs back and checks the
inputs itself. A runner (:mod:`tuned.evaluation.runner`) maps the same memory and sees plain
tensor views of it; what it says about them travels as JSON, never as pickles.

- CPU (Triton's interpreter): an anonymous ``memfd`` the judge creates per runner and passes
  at spawn; both sides ``mmap`` it (grown with ``ftruncate``, mapped again by both).
- GPU: a ``uint8`` CUDA tensor of the judge's, shared by CUDA IPC
  (``torch.multiprocessing.reductions.reduce_tensor``; the judge keeps it alive).

A layout entry is ``{"tensor": {"offset", "shape", "strides", "dtype"}}`` or ``{"value": v}``
(a JSON scalar: an ``int``, ``float``, ``bool``, ``str`` or ``None`` argument),
``{"tuple": [v, ...]}`` or ``{"list": [v, ...]}`` (a tuple or list of such scalars:
``normalized_shape=(D,)``) or ``{"dtype": name}`` (a ``torch.dtype`` argument).
"""

from __future__ import annotations

import base64
import contextlib
import math
import mmap
import os
import pickle
from collections.abc import Sequence
from typing import Any

from tuned.evaluation.checks import CaseFailure, as_tuple

__all__ = ["ALIGN", "Arena", "MappedArena", "dtype_name", "plan", "poison_fill", "span_bytes"]

ALIGN = 256  # bytes; every place starts aligned (CUDA vector loads, any dtype)
_SCALARS = (bool, int, float, str, type(None))
#: Items of a tuple or list input (a shape, a kernel size), at most: not a way to pass data.
_ITEMS = 64


def _plain(x: Any) -> bool:
    """A JSON scalar argument: ``int``, ``bool``, finite ``float``, ``str`` or ``None``."""
    return isinstance(x, _SCALARS) and not (isinstance(x, float) and not math.isfinite(x))


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_of(name: str) -> Any:
    import torch

    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise CaseFailure("crash", f"the runner named an unknown dtype {name!r}")
    return dtype


def span_bytes(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> int:
    """Bytes a strided tensor spans (0 when it has no elements)."""
    if any(n == 0 for n in shape):
        return 0
    return (1 + sum((n - 1) * s for n, s in zip(shape, strides))) * itemsize


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _strides_of(x: Any) -> tuple[int, ...]:
    """The strides ``x`` keeps in the arena: its own when they overlap nothing, else dense."""
    strides = tuple(int(s) for s in x.stride())
    if x.is_contiguous() or (all(s > 0 for s in strides) and len(set(strides)) == len(strides)):
        return strides
    return tuple(int(s) for s in x.contiguous().stride())


def plan(inputs: Sequence[Any], outputs: Any) -> tuple[list[dict[str, Any]], list[Any], int]:
    """Places for ``inputs`` (tensors and JSON scalars) and for outputs shaped like
    ``outputs`` (the reference's: tensors get a dense place, other values ``None``); the
    arena size they need."""
    import torch

    cursor = 0
    placed: list[dict[str, Any]] = []
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            strides = _strides_of(x)
            nbytes = span_bytes(tuple(x.shape), strides, x.element_size())
            spec = {"offset": cursor, "shape": list(x.shape), "strides": list(strides)}
            placed.append({"tensor": {**spec, "dtype": dtype_name(x.dtype)}})
            cursor += _aligned(nbytes)
        elif _plain(x):
            placed.append({"value": x})
        elif isinstance(x, (tuple, list)) and len(x) <= _ITEMS and all(map(_plain, x)):
            # ``normalized_shape=(D,)``, ``kernel_size=(3, 3)``: a JSON list, typed back
            placed.append({"tuple" if isinstance(x, tuple) else "list": list(x)})
        elif isinstance(x, torch.dtype):  # a launcher's dtype argument (a quantizer's)
            placed.append({"dtype": dtype_name(x)})
        else:
            raise CaseFailure(
                "rejected_static",
                f"invalid entry: input {i} is a {type(x).__name__}; inputs must be tensors, "
                "plain scalars (int, float, bool, str, None), tuples or lists of up to "
                f"{_ITEMS} of them, or torch dtypes to reach the runner",
            )
    out_places: list[Any] = []
    for o in as_tuple(outputs):
        if isinstance(o, torch.Tensor):
            strides = tuple(_dense_strides(tuple(o.shape)))
            nbytes = span_bytes(tuple(o.shape), strides, o.element_size())
            spec = {"offset": cursor, "shape": list(o.shape), "strides": list(strides)}
            out_places.append({**spec, "dtype": dtype_name(o.dtype)})
            cursor += _aligned(nbytes)
        else:
            out_places.append(None)
    return placed, out_places, max(cursor, ALIGN)


def _dense_strides(shape: tuple[int, ...]) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return list(reversed(strides))


def poison_fill(t: Any, sentinel: float | None = None) -> None:
    """NaN (or ``sentinel``) for floating tensors, the largest value for integers, True for
    booleans: memory nobody wrote is seen."""
    import torch

    if t.is_floating_point():
        t.fill_(float("nan") if sentinel is None else sentinel)
    elif t.dtype == torch.bool:
        t.fill_(True)
    elif not t.is_complex():
        t.fill_(torch.iinfo(t.dtype).max)


class _Views:
    """Tensor views of a ``uint8`` base tensor by layout entry."""

    base: Any = None

    def view(self, spec: dict[str, Any]) -> Any:
        import torch

        dtype = dtype_of(spec["dtype"])
        shape = tuple(int(n) for n in spec["shape"])
        strides = tuple(int(s) for s in spec["strides"])
        itemsize = torch.empty(0, dtype=dtype).element_size()
        nbytes = span_bytes(shape, strides, itemsize)
        offset = int(spec["offset"])
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype, device=self.base.device)
        if offset < 0 or offset % ALIGN or offset + nbytes > self.base.numel():
            raise CaseFailure("crash", f"a place outside the arena ({offset}+{nbytes})")
        return self.base[offset : offset + nbytes].view(dtype).as_strided(shape, strides)


class Arena(_Views):
    """The judge's side: creates and grows the memory, writes inputs, reads outputs."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.size = 0
        self.fd = os.memfd_create("ktuned-arena") if device == "cpu" else -1
        self._keep: list[Any] = []  # earlier mappings (views may still point into them)

    def ensure(self, nbytes: int) -> dict[str, Any] | None:
        """Grow to at least ``nbytes``; the message that tells the runner, when it grew."""
        import torch

        if nbytes <= self.size:
            return None
        size = max(_aligned(nbytes), 2 * self.size, 1 << 20)
        if self.device == "cpu":
            os.ftruncate(self.fd, size)
            mapped = mmap.mmap(self.fd, size)
            self._keep.append(mapped)
            self.base = torch.frombuffer(mapped, dtype=torch.uint8)
            self.size = size
            return {"op": "arena", "size": size}
        from torch.multiprocessing.reductions import reduce_tensor

        self.base = torch.empty(size, dtype=torch.uint8, device="cuda")
        self._keep.append(self.base)
        self.size = size
        shared = reduce_tensor(self.base)  # type: ignore[no-untyped-call]
        handle = base64.b64encode(pickle.dumps(shared)).decode()
        return {"op": "arena", "size": size, "cuda": handle}

    def write(self, places: Sequence[dict[str, Any]], values: Sequence[Any]) -> None:
        """Fresh copies of ``values`` (the pristine inputs) into their places."""
        for place, value in zip(places, values):
            if "tensor" in place:
                self.view(place["tensor"]).copy_(value)

    def poison(self, places: Sequence[Any]) -> None:
        for place in places:
            if place is not None:
                poison_fill(self.view(place))

    def changed_input(self, places: Sequence[dict[str, Any]], values: Sequence[Any]) -> int | None:
        """The first input whose place no longer holds its pristine value."""
        import torch

        for i, (place, value) in enumerate(zip(places, values)):
            if "tensor" in place and not torch.equal(self.view(place["tensor"]), value):
                return i
        return None

    def read(self, place: dict[str, Any]) -> Any:
        return self.view(place).clone()

    def sync(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    @property
    def held_bytes(self) -> int:
        """Device bytes this arena keeps allocated (every mapping since it was made)."""
        return sum(int(t.numel()) for t in self._keep) if self.device == "cuda" else 0

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.device == "cuda" and self._keep:
            import torch

            self.base = None
            self._keep.clear()
            # Frees what the runner, having let go, no longer maps (not on a broken context:
            # the worker is replaced then anyway).
            with contextlib.suppress(RuntimeError):
                torch.cuda.ipc_collect()  # type: ignore[no-untyped-call]


class MappedArena(_Views):
    """The runner's side: maps what the judge created; views by layout entry."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.size = 0
        self._keep: list[Any] = []

    def remap(self, message: dict[str, Any]) -> None:
        import torch

        size = int(message["size"])
        if message.get("cuda"):
            rebuild, args = pickle.loads(base64.b64decode(message["cuda"]))  # the judge's own
            self.base = rebuild(*args)
        else:
            mapped = mmap.mmap(self.fd, size)
            self._keep.append(mapped)
            self.base = torch.frombuffer(mapped, dtype=torch.uint8)
        self.size = size

    def value(self, place: dict[str, Any]) -> Any:
        if "dtype" in place:
            return dtype_of(place["dtype"])
        if "tuple" in place:
            return tuple(place["tuple"])
        if "list" in place:
            return list(place["list"])
        return self.view(place["tensor"]) if "tensor" in place else place.get("value")

    def owner_of(self, tensor: Any, places: Sequence[dict[str, Any]]) -> int | None:
        """The input whose place ``tensor``'s elements overlap (a view of an input)."""
        import torch

        if self.base is None or tensor.device != self.base.device:
            return None
        base = int(self.base.data_ptr())
        start = int(tensor.data_ptr())
        end = start + span_bytes(tuple(tensor.shape), tuple(tensor.stride()), tensor.element_size())
        for j, place in enumerate(places):
            if "tensor" not in place:
                continue
            spec = place["tensor"]
            lo = base + int(spec["offset"])
            itemsize = torch.empty(0, dtype=dtype_of(spec["dtype"])).element_size()
            hi = lo + span_bytes(spec["shape"], spec["strides"], itemsize)
            if start < hi and lo < end:
                return j
        return None
