"""Which variant may run on a timed shape: only one confirmed against the original there.

A per-shape best ships (``tuned.runtime.load`` dispatches it, ``ktuned export`` writes it)
only when it has won side-by-side comparisons against the original *on that shape* under
the acceptance rule (:func:`tuned.acceptance.decide`): the last two interleaved measurements
of the candidate against the original on the case (:meth:`tuned.store.Store.comparisons`:
the campaign's evaluations timed against the original, and ``ktuned referee``'s
re-measurements) give the first and the confirming interval of the one case; the claim is
``confirmed`` when the rule says ``accepted``. With one measurement only, the rule asks for
another (``remeasure``): not confirmed yet. Comparing two candidates' times measured in
different evaluations (what shipped 3 slower-than-original variants of 14 on a corpus run) is
never enough.

On each timed shape the variant is: the incumbent if it is confirmed there, unless another
confirmed candidate's conservative speedup (the lower of its two point estimates) is above the
incumbent's by more than ``switch_gain``; else the confirmed candidate with the highest
conservative speedup; else the original.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tuned.acceptance import (
    AcceptanceSettings,
    Interval,
    comparable,
    decide,
    speedup_interval,
)
from tuned.store.base import ComparisonRow

__all__ = ["CLAIM_SETTINGS", "ShapeClaim", "pick_variants", "shape_claims"]

#: The acceptance rule's settings for one case (fewer resamples: many cases are read at once).
CLAIM_SETTINGS = AcceptanceSettings(resamples=1000)


@dataclass(frozen=True)
class ShapeClaim:
    """A candidate's claim on one case against the original: the rule's verdict on its last
    two side-by-side measurements there (``unmeasured``: none)."""

    candidate_id: str
    label: str
    status: str
    first: Interval | None
    second: Interval | None
    measurements: int

    @property
    def confirmed(self) -> bool:
        return self.status == "accepted"

    @property
    def speedup(self) -> float | None:
        """The conservative speedup: the lower point estimate of the two measurements."""
        points = [i.speedup for i in (self.first, self.second) if i is not None]
        return min(points) if points else None

    @property
    def interval(self) -> Interval | None:
        """The confirming interval (the later measurement's)."""
        return self.second or self.first


def shape_claims(
    comparisons: Sequence[ComparisonRow],
    original_id: str,
    settings: AcceptanceSettings = CLAIM_SETTINGS,
    seed: int = 0,
) -> dict[tuple[str, str], ShapeClaim]:
    """The claim of every candidate measured against the original, per case label."""
    ordered = sorted(comparisons, key=lambda c: (c.source == "referee", c.seq))
    per: dict[tuple[str, str], list[tuple[list[float], list[float]]]] = {}
    for c in ordered:
        if c.incumbent_id != original_id or c.candidate_id == original_id:
            continue
        for label, mine in c.samples.items():
            theirs = c.incumbent_samples.get(label)
            if mine and theirs and comparable({label: mine}, {label: theirs}):
                per.setdefault((c.candidate_id, label), []).append((list(mine), list(theirs)))
    rng = np.random.default_rng(seed)
    out: dict[tuple[str, str], ShapeClaim] = {}
    for (cid, label), runs in per.items():
        intervals = [speedup_interval({label: a}, {label: b}, rng, settings) for a, b in runs[-2:]]
        first = intervals[0]
        second = intervals[1] if len(intervals) > 1 else None
        status = decide(first, settings, second)
        out[(cid, label)] = ShapeClaim(cid, label, status, first, second, len(runs))
    return out


def pick_variants(
    labels: Iterable[str],
    claims: Mapping[tuple[str, str], ShapeClaim],
    incumbent_id: str,
    original_id: str,
    switch_gain: float = 0.05,
) -> dict[str, tuple[str, ShapeClaim | None]]:
    """Per label: the candidate to run there and the claim that allows it (``None``: the
    original, which needs none)."""
    out: dict[str, tuple[str, ShapeClaim | None]] = {}
    for label in labels:
        confirmed = [c for (_, lab), c in claims.items() if lab == label and c.confirmed]
        if not confirmed:
            out[label] = (original_id, None)
            continue
        best = max(confirmed, key=lambda c: c.speedup or 0.0)
        mine = claims.get((incumbent_id, label))
        if (
            mine is not None
            and mine.confirmed
            and (best.speedup or 0.0) <= (mine.speedup or 0.0) * (1.0 + switch_gain)
        ):
            best = mine
        out[label] = (best.candidate_id, best)
    return out
