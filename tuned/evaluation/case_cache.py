"""Inputs and reference outputs kept across evaluations in one worker process.

Building a case's inputs (``make_inputs``) and running the reference dominated an evaluation
on a GPU: on an H100, layer_norm at 16384x8192 float32 spent 13 to 16 s per candidate there,
not in the candidate. Both depend only on the kernel's original module and the case (shape,
dtype, seed), never on the candidate, so a long-lived worker computes them once per case and
device, and keeps them.

Where they are kept (two tiers):

- **Resident** (on the device the case was made on): as much as fits in the free device
  memory minus a margin for the candidate's own work (``margin_fraction`` of the device's
  memory, at least ``margin_bytes``), read from ``torch.cuda.mem_get_info`` (plus what
  PyTorch's allocator holds unused) at each admission, never above ``share`` of the device's
  memory less that margin (a worker and its spares each keep a cache on one GPU: each gets its
  share, so together they leave the margin free; on an H100 five caches that each took all
  the free memory left 366 MiB and the next candidate ran out of memory), and never above
  ``capacity_bytes`` when one is given. On a CPU the resident tier is host memory bounded by
  ``capacity_bytes``.
- **Spilled** (host memory, pinned when the case lives on a GPU, so copying it back runs at
  the bus's full rate): what does not fit resident, up to ``spill_bytes`` (16 GiB, or a
  sixteenth of the host's memory if less). A hit copies it to
  the device; it is never rebuilt.

No thrashing: an evaluation visits the same cases in the same order as the one before it, and
a least-recently-used cache smaller than that cycle evicts exactly the entry that is needed
next (0 hits on the example registry's perf shapes). Here an entry, once admitted, stays
where it is while its group (the first item of a tuple key: the worker's kernel) is the one
in use; room is made only by evicting entries of *other* groups (a kernel the worker no longer
serves), least recently used first. What still does not fit goes to the spill tier, or, when
neither has room, is handed out and not kept (it is made again next time: a ``miss``).
A *guest* group (``guest = True`` while it is served: a spare preparing the registry's next
kernel ahead) evicts nothing of the others: it gets only the room left over, so the kernel
being tuned keeps its cases for its re-measurements in that spare (on the H100, spares that
had prepared the next kernel made 52 to 81 cases per re-measurement, 10 to 33 s).

Integrity is kept by three rules:

- **Candidate code never sees a cached tensor.** :meth:`CaseCache.inputs` returns fresh
  copies of the pristine inputs on every call; a candidate that writes into its inputs
  changes its own copy only.
- **Cached tensors are verified on every hit.** A cheap signature of each pristine input
  (float64 sum and a strided sample) is stored with it; when it no longer matches (something
  in the process reached the cached tensor), the entry and the references computed from it
  are dropped and rebuilt, and ``tampered`` is counted.
- **Memory is bounded**, as above.

Not thread-safe: the worker serves one evaluation at a time.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_CAPACITY_BYTES",
    "DEFAULT_SPILL_BYTES",
    "CacheStats",
    "CaseCache",
]

#: Bound of the resident tier when none is given and the cases are not on a GPU (a GPU's is
#: sized from its free memory). ``0`` passed to :meth:`CaseCache.resize` means "automatic".
DEFAULT_CAPACITY_BYTES = 2 << 30


def _host_bytes() -> int | None:
    """The host's physical memory, or ``None`` where there is no way to ask (not POSIX)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _default_spill_bytes() -> int:
    """16 GiB, or a sixteenth of the host's memory if less (a GPU box runs a worker and its
    spares, each with its own cache)."""
    host = _host_bytes()
    return 16 << 30 if host is None else min(16 << 30, host // 16)


def _host_only_spill_bytes() -> int:
    """The spill bound of a cache whose kernel keeps its cases in host memory only
    (:meth:`CaseCache.keep_on_host`): a quarter of the host's memory. With a sixteenth, on the
    H200 box (128 GiB), Liger's cross entropy forward and backward kept 8.4 of its 23 GB of
    cases and made about 50 again for every candidate (11.4 s a candidate)."""
    host = _host_bytes()
    return 16 << 30 if host is None else host // 4


#: Bound of the host spill tier (pinned memory when the cases live on a GPU).
DEFAULT_SPILL_BYTES = _default_spill_bytes()


@dataclass
class CacheStats:
    """Counters since the worker started (reported in each result's metadata).

    ``hits`` counts every hit (``spill_hits`` of them served from the spill tier);
    ``misses`` every entry made or computed again.
    """

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    tampered: int = 0
    spill_hits: int = 0
    spilled: int = 0  # entries placed in the spill tier
    promoted: int = 0  # spilled entries moved back to the resident tier
    resident_bytes: int = 0
    spill_bytes: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "tampered": self.tampered,
            "spill_hits": self.spill_hits,
            "spilled": self.spilled,
            "promoted": self.promoted,
            "resident_bytes": self.resident_bytes,
            "spill_bytes": self.spill_bytes,
        }


@dataclass
class _Entry:
    value: Any
    nbytes: int
    group: Hashable
    spilled: bool = False
    #: The device the value was made on (``None``: CPU); a spilled value goes back there.
    device: Any = None
    signature: tuple[float, ...] = ()
    #: Keys of reference entries computed from these inputs (dropped with them).
    dependents: set[Hashable] = field(default_factory=set)


def _tensors(value: Any) -> list[Any]:
    import torch

    items = value if isinstance(value, (list, tuple)) else (value,)
    return [x for x in items if isinstance(x, torch.Tensor)]


def _nbytes(value: Any) -> int:
    return sum(int(t.numel()) * int(t.element_size()) for t in _tensors(value))


def _device_of(value: Any) -> Any:
    """The CUDA device of the first CUDA tensor of ``value`` (``None``: none on a GPU)."""
    for t in _tensors(value):
        if t.is_cuda:
            return t.device
    return None


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


def _map(value: Any, fn: Callable[[Any], Any]) -> Any:
    """``value`` with ``fn`` applied to each tensor (a sequence stays a list)."""
    import torch

    if isinstance(value, (list, tuple)):
        return [fn(x) if isinstance(x, torch.Tensor) else x for x in value]
    return fn(value) if isinstance(value, torch.Tensor) else value


def _to_host(value: Any, pin: bool) -> Any:
    import torch

    def move(t: Any) -> Any:
        if not pin:
            return t.detach().to("cpu", copy=True)
        # Straight into pinned memory: one copy at the bus's rate, not a pageable copy and
        # pin_memory's second one (a spare makes its cases inside holds of the GPU turn).
        host = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
        if t.stride() != host.stride():
            return t.detach().to("cpu", copy=True).pin_memory()
        return host.copy_(t.detach())

    return _map(value, move)


def _to_device(value: Any, device: Any) -> Any:
    return _map(value, lambda t: t.to(device, non_blocking=True, copy=True))


class CaseCache:
    """Pristine inputs per ``(kernel, shape, dtype, seed)`` and reference outputs per case.

    ``capacity_bytes``: bound of the resident tier (``None``: from the device's free memory
    on a GPU, :data:`DEFAULT_CAPACITY_BYTES` otherwise); ``spill_bytes``: of the host tier;
    ``share``: the fraction of the device (less the margin) this cache may hold resident.
    """

    def __init__(
        self,
        capacity_bytes: int | None = None,
        *,
        spill_bytes: int = DEFAULT_SPILL_BYTES,
        margin_fraction: float = 0.2,
        margin_bytes: int = 4 << 30,
        share: float = 1.0,
    ) -> None:
        self.capacity_bytes = capacity_bytes
        self.share = share
        self.spill_bytes = spill_bytes
        self.margin_fraction = margin_fraction
        self.margin_bytes = margin_bytes
        self.stats = CacheStats()
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._group: Hashable = None  # the group of the latest request
        #: The group in use evicts no other group's entries (see the module docstring).
        self.guest = False
        #: ``False``: nothing is admitted to, or moved back into, the device tier (an
        #: evaluation retried after it ran out of device memory: its cases go to host memory,
        #: so the judge's own work, a PyTorch reference's intermediates, has the room).
        self.resident = True
        #: Groups whose cases stay in host memory for the rest of this cache's life (see
        #: :meth:`keep_on_host`).
        self._host_groups: set[Hashable] = set()

    def keep_on_host(self) -> None:
        """From now on, the latest request's group (the kernel being evaluated) keeps its
        cases in host memory (its resident ones are dropped by :meth:`release_device`): an
        evaluation of it ran out of device memory with its cases resident. On the H100,
        Liger's cross entropy forward and backward at a 128k vocabulary did so on every
        candidate, each time paying a failed first try, when the cases went back to the
        device after each retry. The spill tier grows to :func:`_host_only_spill_bytes` (never
        shrinks) to hold them: that kernel gave up its room on the device."""
        self._host_groups.add(self._group)
        self.spill_bytes = max(self.spill_bytes, _host_only_spill_bytes())

    @property
    def _device_tier(self) -> bool:
        """Whether the latest request's cases may be kept on the device."""
        return self.resident and self._group not in self._host_groups

    @property
    def held_bytes(self) -> int:
        """Bytes of the tensors kept resident."""
        return self.stats.resident_bytes

    def resize(
        self,
        capacity_bytes: int | None,
        spill_bytes: int | None = None,
        share: float | None = None,
    ) -> None:
        """Change the bounds (``None`` or ``0``: automatic); evicts at once when over (the
        device share is applied at the next admission)."""
        self.capacity_bytes = capacity_bytes if capacity_bytes else None
        if share is not None:
            self.share = min(1.0, max(0.0, share))
        if spill_bytes is not None:
            self.spill_bytes = max(0, spill_bytes)
        for spilled in (False, True):
            while self._over(spilled) and self._victim(spilled, any_group=True) is not None:
                self._evict(spilled, any_group=True)

    def clear(self) -> None:
        self._entries.clear()
        self.stats.resident_bytes = self.stats.spill_bytes = 0

    def release_device(self) -> int:
        """Drop every resident entry (spilled ones stay); the bytes freed. After a candidate
        ran out of device memory: the retry gets the room the cache held."""
        freed = self.stats.resident_bytes
        for key in [k for k, e in self._entries.items() if not e.spilled]:
            self._drop(key)
        return freed

    def inputs(self, key: Hashable, make: Callable[[], Sequence[Any]]) -> list[Any]:
        """Fresh copies of the pristine inputs under ``key``, made with ``make()`` on a miss.

        ``make`` raising propagates and caches nothing. The caller owns what it gets back.
        """
        self._group = _group_of(key)
        full = ("inputs", key)
        entry = self._get(full)
        if entry is not None:
            handed = (
                _to_device(entry.value, entry.device)
                if entry.spilled
                else _map(entry.value, lambda t: t.clone())
            )
            # Checked on what is handed out for a spilled entry (a fresh device copy of it).
            if _signature(handed) == entry.signature:
                self._hit(entry)
                if entry.spilled:
                    self._promote(full, entry, lambda: _to_device(entry.value, entry.device))
                return list(handed)
            self.stats.tampered += 1
            self._drop(full)
        self.stats.misses += 1
        pristine = list(make())
        handed = _map(pristine, lambda t: t.clone())
        self._put(full, pristine, _signature(pristine))
        return list(handed)

    def reference(self, inputs_key: Hashable, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The reference outputs under ``key``, computed from the inputs under ``inputs_key``.

        The outputs are returned as stored (resident) or as a fresh device copy (spilled): the
        caller only reads them (compares, never hands them to candidate code). They are
        dropped whenever their inputs are.
        """
        self._group = _group_of(inputs_key)
        full = ("reference", inputs_key, key)
        entry = self._get(full)
        if entry is not None:
            self._hit(entry)
            if not entry.spilled:
                return entry.value
            copy = _to_device(entry.value, entry.device)
            self._promote(full, entry, lambda: copy)  # only ever read: the copy can stay
            return copy
        self.stats.misses += 1
        value = compute()
        parent_key = ("inputs", inputs_key)
        if parent_key not in self._entries:  # inputs not kept: neither is their reference
            return value
        if self._put(full, value, ()):
            self._entries[parent_key].dependents.add(full)
        return value

    # -- internals

    def _hit(self, entry: _Entry) -> None:
        self.stats.hits += 1
        if entry.spilled:
            self.stats.spill_hits += 1

    def _get(self, key: Hashable) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def _promote(self, key: Hashable, entry: _Entry, on_device: Callable[[], Any]) -> None:
        """Move a spilled entry back to the resident tier when it fits there now (room made
        from other kernels' entries only): a spare that prepared with a small share, then took
        over with the running worker's, gets its cases resident on their first use."""
        if not self._device_tier:
            return
        while not self._fits(entry.nbytes, False, entry.device) and self._victim(False) is not None:
            self._evict(False)
        if key not in self._entries or not self._fits(entry.nbytes, False, entry.device):
            return
        entry.value = on_device()
        entry.spilled = False
        self.stats.spill_bytes -= entry.nbytes
        self.stats.resident_bytes += entry.nbytes
        self.stats.promoted += 1

    def _put(self, key: Hashable, value: Any, signature: tuple[float, ...]) -> bool:
        """Keep ``value`` resident if it fits, else spilled if that fits; ``False``: neither."""
        self._drop(key)
        nbytes = _nbytes(value)
        device = _device_of(value)
        group = self._group
        for spilled in (False, True) if self._device_tier else (True,):
            while not self._fits(nbytes, spilled, device) and self._victim(spilled) is not None:
                self._evict(spilled)
            if self._fits(nbytes, spilled, device):
                stored = _to_host(value, pin=device is not None) if spilled else value
                self._entries[key] = _Entry(
                    stored, nbytes, group, spilled=spilled, device=device, signature=signature
                )
                if spilled:
                    self.stats.spill_bytes += nbytes
                    self.stats.spilled += 1
                else:
                    self.stats.resident_bytes += nbytes
                return True
        return False

    def _fits(self, nbytes: int, spilled: bool, device: Any) -> bool:
        if spilled:
            return self.stats.spill_bytes + nbytes <= self.spill_bytes
        if self.capacity_bytes is not None and (
            self.stats.resident_bytes + nbytes > self.capacity_bytes
        ):
            return False
        if device is None:
            limit = DEFAULT_CAPACITY_BYTES if self.capacity_bytes is None else self.capacity_bytes
            return self.stats.resident_bytes + nbytes <= limit
        return nbytes <= self._device_room(device)

    def _device_room(self, device: Any) -> int:
        """Bytes the device can still give the cache: free memory (with what PyTorch's
        allocator holds unused) minus the margin left to the candidate."""
        import torch

        free, total = torch.cuda.mem_get_info(device)
        unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        margin = max(self.margin_bytes, int(self.margin_fraction * total))
        mine = int(self.share * (total - margin)) - self.stats.resident_bytes
        return min(int(free + unused - margin), mine)

    def _over(self, spilled: bool) -> bool:
        if spilled:
            return self.stats.spill_bytes > self.spill_bytes
        return self.capacity_bytes is not None and self.stats.resident_bytes > self.capacity_bytes

    def _victim(self, spilled: bool, *, any_group: bool = False) -> Hashable | None:
        """The least recently used entry of the tier that may go: never one of the group in
        use (unless ``any_group``), never a reference whose inputs stay; none for a guest."""
        if self.guest and not any_group:
            return None
        for key, entry in self._entries.items():
            if entry.spilled != spilled:
                continue
            if not any_group and entry.group == self._group:
                continue
            return key
        return None

    def _evict(self, spilled: bool, *, any_group: bool = False) -> None:
        key = self._victim(spilled, any_group=any_group)
        if key is not None:
            self.stats.evictions += 1
            self._drop(key)

    def _drop(self, key: Hashable) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        if entry.spilled:
            self.stats.spill_bytes -= entry.nbytes
        else:
            self.stats.resident_bytes -= entry.nbytes
        for dependent in entry.dependents:
            self._drop(dependent)


def _group_of(key: Hashable) -> Hashable:
    """The group of a key: the first item of a tuple key (the worker's kernel), else the key."""
    return key[0] if isinstance(key, tuple) and key else key
