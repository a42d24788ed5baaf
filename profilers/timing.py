"""Timing a kernel launch: CUDA events with the L2 flushed (GPU), or wall clock (interpreter).

:func:`gpu_median_seconds` follows ``triton.testing.do_bench``: estimate one call's time,
choose the number of repetitions for a target total, then time every repetition with its own
pair of CUDA events after overwriting an L2-sized buffer, so no run is served from the cache
warmed by the previous one. The statistic is the median.

:func:`wall_median_seconds` is for Triton's interpreter on a CPU: its numbers only rank
candidates on the same machine and are never GPU results.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Interleaved",
    "TimingSettings",
    "gpu_median_seconds",
    "interleaved_samples",
    "interleaved_timing",
    "wall_median_seconds",
]


@dataclass(frozen=True)
class TimingSettings:
    """How long and how often to time one case."""

    target_ms: float = 100.0  # total timed duration aimed for, per case
    warmup_ms: float = 25.0
    min_reps: int = 10
    max_reps: int = 1000
    flush_bytes: int = 256 * 1024 * 1024  # larger than any current GPU's L2
    interpreter_reps: int = 3
    #: Screening (:func:`interleaved_timing`): a first round of this many milliseconds per
    #: function (0: none), which ends the measurement when the candidate's median is above
    #: ``screen_slower`` times the incumbent's.
    screen_ms: float = 20.0
    screen_slower: float = 1.05
    #: Interleaved timing on a GPU through CUDA graphs (:func:`interleaved_timing`): each
    #: function's repetitions of a round are captured once and replayed, so the host (a busy
    #: CPU, the compile pool) cannot open gaps between the timed events. Capture failing (the
    #: function synchronizes, or PyTorch lacks timing events in graphs) falls back to eager.
    cuda_graphs: bool = True
    graph_rounds: int = 10  # interleaved rounds (replays per function); samples split evenly


def gpu_median_seconds(
    fn: Callable[[], Any], settings: TimingSettings = TimingSettings()
) -> tuple[float, list[float]]:
    """Median seconds of ``fn()`` on the current CUDA device, L2 flushed before each call.

    Returns the median and all samples (seconds). ``fn`` must already be compiled.
    """
    import torch

    flush = torch.empty(settings.flush_bytes // 4, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()

    # Estimate the cost of one call (flush included) to size warm-up and repetitions.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate_ms = max(start.elapsed_time(end) / 5, 1e-3)
    warmup = max(1, int(settings.warmup_ms / estimate_ms))
    reps = int(settings.target_ms / estimate_ms)
    reps = max(settings.min_reps, min(settings.max_reps, reps))

    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]
    del flush
    return statistics.median(samples), samples


def wall_median_seconds(
    fn: Callable[[], Any], settings: TimingSettings = TimingSettings()
) -> tuple[float, list[float]]:
    """Median wall-clock seconds of ``fn()`` over ``interpreter_reps`` calls (CPU only)."""
    samples = []
    for _ in range(max(1, settings.interpreter_reps)):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), samples


def interleaved_samples(
    fns: Sequence[Callable[[], Any]], *, gpu: bool, settings: TimingSettings = TimingSettings()
) -> list[list[float]]:
    """Seconds of every repetition of each of ``fns``, timed interleaved (ABAB, then BABA, ...).

    Interleaving puts clock and thermal drift on all functions alike, so their ratio is fair.
    On a GPU each call is timed by its own CUDA events after an L2 flush; on a CPU (Triton's
    interpreter) by wall clock, ``interpreter_reps`` rounds.
    """
    return interleaved_timing(fns, gpu=gpu, settings=settings).samples


@dataclass(frozen=True)
class Interleaved:
    """What :func:`interleaved_timing` measured: seconds per repetition of each function, and
    whether the screening round ended it (``fns[0]`` clearly slower than another)."""

    samples: list[list[float]]
    screened: bool = False
    graphs: bool = False  # timed through CUDA graphs (profilers.graph_timing)


def interleaved_timing(
    fns: Sequence[Callable[[], Any]],
    *,
    gpu: bool,
    settings: TimingSettings = TimingSettings(),
    screen: bool = False,
    poison: Callable[[], None] | None = None,
) -> Interleaved:
    """:func:`interleaved_samples`, with an optional screening round on a GPU.

    With ``screen`` (the evaluation worker: ``fns[0]`` is the candidate, the others the
    incumbent), a short interleaved round of ``screen_ms`` per function comes first. If the
    candidate's median there is above ``screen_slower`` times another function's, the round's
    samples are the result: a candidate that much slower cannot clear the acceptance rule's
    minimum gain, and timing it for the full ``target_ms`` would only refine how much slower
    it is. Otherwise the full measurement follows (the screening samples are dropped), exactly
    as without ``screen``. Every candidate is still timed interleaved with the incumbent.

    On a GPU with ``settings.cuda_graphs``, the rounds are captured in CUDA graphs and
    replayed (:mod:`profilers.graph_timing`: a busy host cannot move the figures); ``poison``
    is called after capture, before the timed replays (it overwrites the outputs the graphs
    must write again). Where capture fails, the eager path below times them.
    """
    if not gpu:
        samples: list[list[float]] = [[] for _ in fns]
        for rep in range(max(1, settings.interpreter_reps)):
            order = range(len(fns)) if rep % 2 == 0 else reversed(range(len(fns)))
            for i in order:
                t0 = time.perf_counter()
                fns[i]()
                samples[i].append(time.perf_counter() - t0)
        return Interleaved(samples)
    return _interleaved_gpu(fns, settings, screen=screen and len(fns) > 1, poison=poison)


def _interleaved_gpu(
    fns: Sequence[Callable[[], Any]],
    settings: TimingSettings,
    *,
    screen: bool,
    poison: Callable[[], None] | None = None,
) -> Interleaved:
    if settings.cuda_graphs:
        from profilers.graph_timing import graph_interleaved

        timed = graph_interleaved(fns, settings, screen=screen, poison=poison)
        if timed is not None:
            return Interleaved(timed.samples, screened=timed.screened, graphs=True)
    return _interleaved_eager(fns, settings, screen=screen)


def _interleaved_eager(
    fns: Sequence[Callable[[], Any]], settings: TimingSettings, *, screen: bool
) -> Interleaved:
    import torch

    flush = torch.empty(settings.flush_bytes // 4, dtype=torch.int32, device="cuda")
    # A first call of each outside the estimate: it may load or compile (an incumbent's first
    # launch in a fresh worker), which would size the repetitions down to ``min_reps``.
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    # One call of each (flush included), averaged over a few, sizes warm-up and repetitions.
    estimates = [_estimate_ms(fn, flush) for fn in fns]
    per_round_ms = max(sum(estimates), 1e-3)
    warmup_rounds = max(1, int(settings.warmup_ms / per_round_ms))
    for _ in range(warmup_rounds):
        for fn in fns:
            fn()
    reps = int(settings.target_ms * len(fns) / per_round_ms)
    reps = max(settings.min_reps, min(settings.max_reps, reps))
    if screen and settings.screen_ms > 0:
        short = int(settings.screen_ms * len(fns) / per_round_ms)
        short = max(settings.min_reps, min(reps, short))
        if short < reps:
            first = _timed_rounds(fns, flush, short)
            medians = [statistics.median(s) for s in first]
            if medians[0] > settings.screen_slower * min(medians[1:]):
                del flush
                return Interleaved(first, screened=True)
    samples = _timed_rounds(fns, flush, reps)
    del flush
    return Interleaved(samples)


def _estimate_ms(fn: Callable[[], Any], flush: Any, calls: int = 5) -> float:
    """Milliseconds of one flush and call of ``fn``, averaged over ``calls``."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        flush.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    return max(float(start.elapsed_time(end)) / calls, 1e-3)


def _timed_rounds(fns: Sequence[Callable[[], Any]], flush: Any, reps: int) -> list[list[float]]:
    """``reps`` rounds over ``fns`` (alternating order), each call after an L2 flush and
    between its own pair of CUDA events; seconds per call."""
    import torch

    events = [
        [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(reps)
        ]
        for _ in fns
    ]
    for rep in range(reps):
        order = range(len(fns)) if rep % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            flush.zero_()
            start, end = events[i][rep]
            start.record()
            fns[i]()
            end.record()
    torch.cuda.synchronize()
    return [[s.elapsed_time(e) / 1e3 for s, e in per_fn] for per_fn in events]
