"""Interleaved GPU timing through CUDA graphs: figures a busy host cannot move.

With eager launches, each timed call is ``flush; start event; fn(); end event`` enqueued by
the host. When the host is slow to enqueue ``fn()`` (its Python launcher, or a CPU shared
with the compile pool's processes), the GPU reaches the start event first and waits, and the
wait is timed as the kernel's: on a corpus of short kernels, figures came out up to 5.8x too
slow while 15 compile processes kept the CPU busy.

Here each function's repetitions of a round (``flush; start; fn(); end``, ``per_graph``
times) are captured once into a CUDA graph and replayed: the whole round reaches the GPU in
one launch, so nothing the host does between the events can appear between them. The events
are *external* timing events (``torch.cuda.Event(enable_timing=True, external=True)``), which
CUDA records as event nodes inside the graph. Rounds alternate the functions' order (ABAB,
BABA), as the eager path does, and every call still follows an L2 flush.

:func:`graph_interleaved` returns ``None`` when a function cannot be captured (it
synchronizes, reads a value on the host, uses another stream, or this PyTorch lacks external
events): the caller falls back to eager timing.

Outputs made while timed are the ones the graph writes: ``poison`` (given by the caller that
checks them, the evaluation worker) overwrites them after capture and before the first replay,
so a function that launches nothing while captured (and returns outputs it made earlier)
leaves poisoned outputs behind, and fails the check.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from profilers.timing import TimingSettings

__all__ = ["GraphTimed", "graph_interleaved", "poison_outputs"]


@dataclass(frozen=True)
class GraphTimed:
    samples: list[list[float]]
    screened: bool
    per_graph: int


def graph_interleaved(
    fns: Sequence[Callable[[], Any]],
    settings: TimingSettings,
    *,
    screen: bool,
    poison: Callable[[], None] | None = None,
) -> GraphTimed | None:
    """Seconds of every timed call of each of ``fns`` (see the module docstring), or ``None``
    when capture is not possible. With ``screen``, as :func:`profilers.timing.interleaved_timing`:
    the first rounds (``screen_ms`` per function) end the measurement when ``fns[0]``'s median
    is above ``screen_slower`` times another's."""
    import torch

    from profilers.timing import _estimate_ms

    flush = torch.empty(settings.flush_bytes // 4, dtype=torch.int32, device="cuda")
    for fn in fns:  # a first call outside everything: it may load or compile
        fn()
    torch.cuda.synchronize()
    estimates = [_estimate_ms(fn, flush) for fn in fns]
    per_round_ms = max(sum(estimates), 1e-3)
    reps = int(settings.target_ms * len(fns) / per_round_ms)
    reps = max(settings.min_reps, min(settings.max_reps, reps))
    rounds = max(2, min(settings.graph_rounds, reps))
    per_graph = max(1, math.ceil(reps / rounds))
    warmup = max(1, int(settings.warmup_ms / per_round_ms))
    for _ in range(warmup):
        for fn in fns:
            fn()
    torch.cuda.synchronize()

    captured = [_capture(fn, flush, per_graph) for fn in fns]
    if any(c is None for c in captured):
        return None
    graphs = [c for c in captured if c is not None]
    if poison is not None:
        poison()
        torch.cuda.synchronize()
    samples: list[list[float]] = [[] for _ in fns]
    screen_rounds = 0
    if screen and settings.screen_ms > 0 and len(fns) > 1:
        screen_rounds = max(1, math.ceil(settings.screen_ms * len(fns) / per_round_ms / per_graph))
    for r in range(rounds):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            graphs[i][0].replay()
        torch.cuda.synchronize()
        for i, (_, events) in enumerate(graphs):
            samples[i].extend(s.elapsed_time(e) / 1e3 for s, e in events)
        if screen_rounds and r + 1 == screen_rounds and r + 1 < rounds:
            medians = [statistics.median(s) for s in samples]
            if medians[0] > settings.screen_slower * min(medians[1:]):
                return GraphTimed(samples, screened=True, per_graph=per_graph)
    del flush
    return GraphTimed(samples, screened=False, per_graph=per_graph)


def _capture(fn: Callable[[], Any], flush: Any, calls: int) -> tuple[Any, list[Any]] | None:
    """A graph of ``calls`` x (flush, start event, ``fn()``, end event), and its events;
    ``None`` when ``fn`` cannot be captured."""
    import torch

    event: Any = torch.cuda.Event  # ``external`` (timing inside a graph): PyTorch >= 2.9
    try:
        events = [
            (event(enable_timing=True, external=True), event(enable_timing=True, external=True))
            for _ in range(calls)
        ]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            for start, end in events:
                flush.zero_()
                start.record()
                fn()
                end.record()
        graph.replay()  # a first replay: instantiation and upload outside the timed rounds
        torch.cuda.synchronize()
    except (RuntimeError, TypeError, AttributeError):  # capture refused: time eagerly
        torch.cuda.synchronize()
        return None
    return graph, events


def poison_outputs(value: Any, keep: Sequence[Any] = ()) -> None:
    """Make every element of the tensors in ``value`` wrong (NaN for floating point, every bit
    flipped for integers, negated for booleans), except tensors sharing storage with one of
    ``keep`` (the inputs, which an in-place kernel writes itself)."""
    import torch

    kept = {t.untyped_storage().data_ptr() for t in keep if isinstance(t, torch.Tensor)}
    items = value if isinstance(value, (list, tuple)) else (value,)
    for t in items:
        if not isinstance(t, torch.Tensor) or t.untyped_storage().data_ptr() in kept:
            continue
        if t.is_floating_point() or t.is_complex():
            t.fill_(float("nan"))
        elif t.dtype is torch.bool:
            t.logical_not_()
        else:
            t.bitwise_not_()
