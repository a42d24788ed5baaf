"""Wall-clock timing on the host, the way the benchmarks report it."""

from __future__ import annotations

import time


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
