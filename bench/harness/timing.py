"""Wall-clock timing on the host, the way the benchmarks report it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


class Stopwatch:
    """Seconds since it was made (or last :meth:`lap`); ``lap`` returns them and restarts."""

    def __init__(self) -> None:
        self._start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self._start

    def lap(self) -> float:
        now = time.perf_counter()
        seconds, self._start = now - self._start, now
        return seconds


def median_s(fn: Callable[[], object], *, repeats: int, warmup: int = 1) -> float:
    """The median wall time of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones
    (host time: for GPU work, ``fn`` synchronizes itself or it measures launches)."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)
