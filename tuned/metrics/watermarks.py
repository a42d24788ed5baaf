"""How far a running sum over rows numbered by ``seq`` may be settled: a lagged watermark.

The collector keeps counters as running sums of the rows added since the previous scrape,
read as "rows with ``seq`` above the last one seen". On PostgreSQL, a ``seq`` is taken when a
row is inserted, not when its transaction commits: a transaction of another box that took
``seq`` 41 and commits after one that took 42 was invisible when 42 was seen, and a
watermark moved to 42 would never count it.

So the sums are split in two. *Settled* rows (``seq`` up to the watermark) are added once.
The *tail* (``seq`` above it) is re-read at every scrape and added to what is exported, never
kept. The watermark moves only to the newest ``seq`` seen at a scrape at least ``lag_s``
seconds ago: a row is missed only if its transaction stayed open longer than that after its
insert (ktuned's writes last milliseconds; an outbox replay, seconds). On SQLite one writer
at a time takes ``seq`` values and commits, so rows appear in ``seq`` order: a lag of 0 there
settles each tail as soon as it is read, which is the plain running sum.

History written before the collector started has no scrape to date it. The first scrape
reads it all; the next one settles all but its newest ``margin`` rows per table (a
transaction still open at the first scrape holds one of the newest ``seq`` values), so the
tail is small from then on instead of the whole history for ``lag_s`` seconds.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

__all__ = ["LaggedWatermark"]


class LaggedWatermark:
    """The settled ``seq`` values (one per table) and the maxima seen at recent scrapes."""

    def __init__(
        self,
        start: tuple[int, ...],
        *,
        lag_s: float,
        margin: int = 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if lag_s < 0 or margin < 0:
            raise ValueError(f"watermark lag_s and margin must be >= 0, got {lag_s} and {margin}")
        self.settled = start
        self.lag_s = lag_s
        self.margin = margin
        self.clock = clock
        self._marks: deque[tuple[float, tuple[int, ...]]] = deque()
        self._first = True

    def due(self) -> tuple[int, ...] | None:
        """The newest maxima seen at least ``lag_s`` ago, if beyond :attr:`settled`: settle
        the rows up to them, then call :meth:`settle`. ``None``: nothing to settle now."""
        now = self.clock()
        target: tuple[int, ...] | None = None
        while self._marks and now - self._marks[0][0] >= self.lag_s:
            target = self._marks.popleft()[1]
        if target is None:
            return None
        target = tuple(max(a, b) for a, b in zip(self.settled, target, strict=True))
        return None if target == self.settled else target

    def settle(self, seqs: tuple[int, ...]) -> None:
        self.settled = seqs

    def seen(self, seqs: tuple[int, ...]) -> bool:
        """Record the maxima a scrape read (the tail's upper ends). True: with no lag, the
        tail is settled at once (add it to the sums); False: it is re-read next time."""
        if self.lag_s == 0:
            self.settled = seqs
            return True
        now = self.clock()
        if self._first:  # the history before this collector: due at the next scrape
            self._first = False
            older = tuple(max(a, s - self.margin) for a, s in zip(self.settled, seqs, strict=True))
            self._marks.append((now - self.lag_s, older))
        self._marks.append((now, seqs))
        return False
