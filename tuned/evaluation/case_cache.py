"""Inputs and reference outputs kept across evaluations in one worker process.

Building a case's inputs (``make_inputs`` draws them on the CPU from a seed, then copies them
to the device) and running the reference dominated an evaluation on a GPU: on an H100 a
matmul evaluation spent most of its ~5 s there, not in the candidate. Both depend only on the
kernel's original module and the case (shape, dtype, seed), never on the candidate, so a
long-lived worker computes them once.

Integrity is kept by three rules:

- **Candidate code never sees a cached tensor.** :meth:`CaseCache.inputs` returns fresh
  clones of the pristine inputs on every call; a candidate that writes into its inputs
  changes its own clone only.
- **Cached tensors are verified on every hit.** A cheap signature of each pristine input
  (float64 sum and a strided sample) is stored with it; when it no longer matches (something
  in the process reached the cached tensor), the entry and the references computed from it
  are dropped and rebuilt, and ``tampered`` is counted.
- **Memory is bounded.** Entries are evicted least recently used first so that the tensors
  held stay under ``capacity_bytes``; an entry larger than the capacity is not kept.

Not thread-safe: the worker serves one evaluation at a time.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEFAULT_CAPACITY_BYTES", "CacheStats", "CaseCache"]

#: Default bound of what one worker keeps (device memory on a GPU, host memory otherwise).
DEFAULT_CAPACITY_BYTES = 2 << 30


@dataclass
class CacheStats:
    """Counters since the worker started (reported in each result's metadata)."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    tampered: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "tampered": self.tampered,
        }


@dataclass
class _Entry:
    value: Any
    nbytes: int
    signature: tuple[float, ...] = ()
    #: Keys of reference entries computed from these inputs (dropped with them).
    dependents: set[Hashable] = field(default_factory=set)


def _tensors(value: Any) -> list[Any]:
    import torch

    items = value if isinstance(value, (list, tuple)) else (value,)
    return [x for x in items if isinstance(x, torch.Tensor)]


def _nbytes(value: Any) -> int:
    return sum(int(t.numel()) * int(t.element_size()) for t in _tensors(value))


def _signature(value: Any) -> tuple[float, ...]:
    """Float64 sum and up to 16 evenly spaced elements of every tensor; NaN-safe (repr)."""
    import torch

    out: list[float] = []
    for t in _tensors(value):
        if not t.numel() or t.is_complex():
            out.append(float(t.numel()))
            continue
        flat = t.detach().reshape(-1)
        step = max(1, flat.numel() // 16)
        total = torch.sum(flat, dtype=torch.float64)
        out.extend([float(total), *(float(v) for v in flat[::step][:16].double().tolist())])
    # NaN != NaN: compare a representation in which equal bit patterns are equal.
    return tuple(math.inf if v != v else v for v in out)


def _clone(value: Sequence[Any]) -> list[Any]:
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in value]


class CaseCache:
    """Pristine inputs per ``(kernel, shape, dtype, seed)`` and reference outputs per case."""

    def __init__(self, capacity_bytes: int = DEFAULT_CAPACITY_BYTES) -> None:
        self.capacity_bytes = capacity_bytes
        self.stats = CacheStats()
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._held = 0

    @property
    def held_bytes(self) -> int:
        """Bytes of the tensors currently kept."""
        return self._held

    def resize(self, capacity_bytes: int) -> None:
        """Change the bound; evicts at once when the cache holds more."""
        self.capacity_bytes = max(0, capacity_bytes)
        self._evict(0)

    def clear(self) -> None:
        self._entries.clear()
        self._held = 0

    def inputs(self, key: Hashable, make: Callable[[], Sequence[Any]]) -> list[Any]:
        """Clones of the pristine inputs under ``key``, made with ``make()`` on a miss.

        ``make`` raising propagates and caches nothing. The caller owns what it gets back.
        """
        entry = self._get(("inputs", key))
        if entry is not None and _signature(entry.value) != entry.signature:
            self.stats.tampered += 1
            self._drop(("inputs", key))
            entry = None
        if entry is None:
            self.stats.misses += 1
            pristine = list(make())
            handed = _clone(pristine)
            self._put(("inputs", key), _Entry(pristine, _nbytes(pristine), _signature(pristine)))
            return handed
        self.stats.hits += 1
        return _clone(entry.value)

    def reference(self, inputs_key: Hashable, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The reference outputs under ``key``, computed from the inputs under ``inputs_key``.

        The outputs are returned as stored: the caller only reads them (compares, never hands
        them to candidate code). They are dropped whenever their inputs are.
        """
        full = ("reference", inputs_key, key)
        entry = self._get(full)
        if entry is not None:
            self.stats.hits += 1
            return entry.value
        self.stats.misses += 1
        value = compute()
        parent_key = ("inputs", inputs_key)
        if self._get(parent_key) is None:  # inputs not kept: neither is their reference
            return value
        if self._put(full, _Entry(value, _nbytes(value))):
            parent = self._entries.get(parent_key)
            if parent is None:  # evicted to make room: the reference goes with it
                self._drop(full)
            else:
                parent.dependents.add(full)
        return value

    # -- internals

    def _get(self, key: Hashable) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def _put(self, key: Hashable, entry: _Entry) -> bool:
        if entry.nbytes > self.capacity_bytes:
            return False
        self._drop(key)
        self._evict(entry.nbytes)
        self._entries[key] = entry
        self._held += entry.nbytes
        return True

    def _evict(self, incoming: int) -> None:
        """Drop least recently used entries until ``incoming`` more bytes fit."""
        while self._entries and self._held + incoming > self.capacity_bytes:
            self.stats.evictions += 1
            self._drop(next(iter(self._entries)))

    def _drop(self, key: Hashable) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        self._held -= entry.nbytes
        for dependent in entry.dependents:
            self._drop(dependent)
