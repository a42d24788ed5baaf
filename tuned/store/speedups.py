"""The one speedup a kernel's best is shown and shipped with: measured side by side.

Every speedup that ``ktuned status``, ``ktuned best``, the metrics, the report and the export
manifest display comes from :func:`measured_speedup`, never from a ratio of two times
measured in different evaluations (on a busy host those disagreed by up to 3x with the
acceptance rule's own measurement). In order of preference, the speedup of candidate ``c``
over the original on a fingerprint is:

1. ``referee``: the latest re-measurement of ``c`` interleaved against the original in a
   fresh process (``ktuned referee``, stored as an acceptance row with status ``refereed``
   whose incumbent is the original);
2. ``vs_original``: when ``c`` was accepted against an earlier best, the campaign times it
   against the original too, twice (an acceptance row ``vs_original``): its confirming
   second interval;
3. ``acceptance``: the interval of the acceptance that made ``c`` the best (its confirming
   second measurement when there is one, else its first); when that acceptance timed ``c``
   against an earlier best rather than the original (and no ``vs_original`` row exists: an
   older store), the product along the chain of acceptances back to the original (each
   factor an interleaved comparison; the interval's bounds multiply, so it widens);
4. the original itself: exactly 1.

``None`` when no such measurement exists (a best that was never accepted under the rule).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MeasuredSpeedup", "measured_speedup"]


@dataclass(frozen=True)
class MeasuredSpeedup:
    """A speedup over the original with its interval; ``source`` says where it comes from
    (``referee``, ``vs_original``, ``acceptance``, ``original``) and ``steps`` how many
    acceptances it chains."""

    speedup: float
    low: float
    high: float
    source: str
    steps: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "speedup": self.speedup,
            "low": self.low,
            "high": self.high,
            "source": self.source,
            "steps": self.steps,
        }


def _interval(record: Mapping[str, Any] | None) -> tuple[float, float, float] | None:
    if not record or "speedup" not in record:
        return None
    s = float(record["speedup"])
    return s, float(record.get("low", s)), float(record.get("high", s))


def measured_speedup(
    acceptances: Sequence[Mapping[str, Any]], baseline_id: str, candidate_id: str
) -> MeasuredSpeedup | None:
    """The speedup of ``candidate_id`` over ``baseline_id`` (see the module docstring) from
    ``acceptances``: the rows of one kernel, generation and fingerprint, oldest first, each
    with ``candidate_id``, ``incumbent_id``, ``status``, ``first`` and ``second``."""
    if candidate_id == baseline_id:
        return MeasuredSpeedup(1.0, 1.0, 1.0, "original")
    for status, source in (("refereed", "referee"), ("vs_original", "vs_original")):
        for row in reversed(acceptances):
            if (
                row["status"] == status
                and row["candidate_id"] == candidate_id
                and row["incumbent_id"] == baseline_id
            ):
                found = _interval(row.get("second")) or _interval(row["first"])
                if found is not None:
                    return MeasuredSpeedup(*found, source=source)
    s, low, high, steps = 1.0, 1.0, 1.0, 0
    current, seen = candidate_id, set()
    while current != baseline_id:
        if current in seen:  # pragma: no cover - acceptances never form a cycle
            return None
        seen.add(current)
        row = next(
            (
                r
                for r in reversed(acceptances)
                if r["status"] == "accepted" and r["candidate_id"] == current
            ),
            None,
        )
        if row is None:
            return None
        found = _interval(row.get("second")) or _interval(row["first"])
        if found is None:
            return None
        s, low, high = s * found[0], low * found[1], high * found[2]
        steps += 1
        current = str(row["incumbent_id"])
    return MeasuredSpeedup(s, low, high, "acceptance", steps)
