"""Bests per timed shape: the variant each timed case runs, confirmed side by side.

Every successful evaluation records, per timed case (shape x dtype, e.g.
``M=4096xN=4096/float16``), the median time and the samples behind it; evaluations timed
against the original also record the original's samples, interleaved
(:meth:`tuned.store.Store.comparisons`, with ``ktuned referee``'s re-measurements). The kernel's
best (the *incumbent*: the latest accepted candidate, else the baseline) wins on the objective,
the geometric mean over the cases; on one case it may not beat the original, and another
candidate may beat both. The rule for case ``c`` (:mod:`tuned.runtime.confirmed`):

1. A candidate may run on ``c`` only if its last two side-by-side measurements against the
   original on ``c`` pass the acceptance rule (:func:`tuned.acceptance.decide`, ``min_gain``
   1 %, at most ``suspicious_speedup``): it is *confirmed* there. Candidates ``held`` or
   ``not_confirmed`` by the acceptance rule never run.
2. The incumbent runs on ``c`` if confirmed there, unless another confirmed candidate's
   conservative speedup (the lower of its two point estimates) is above the incumbent's by
   more than ``switch_gain`` (5 %); else the confirmed candidate with the highest; else the
   original.

Times measured in different evaluations are never compared (before, 3 of 14 per-shape bests
dispatched on a corpus run were slower than the original when re-measured side by side).
The speedup reported per case is the confirming side-by-side interval against the original.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tuned.acceptance import AcceptanceSettings, Interval
from tuned.runtime.confirmed import pick_variants, shape_claims
from tuned.store.base import CaseTimingRow, ComparisonRow

__all__ = ["DEFAULT_SHAPE_SETTINGS", "ShapeBest", "ShapeSettings", "shape_bests"]

_UNTRUSTED = frozenset({"held", "not_confirmed"})


@dataclass(frozen=True)
class ShapeSettings:
    """How a per-shape best is chosen (see the module docstring)."""

    min_gain: float = 0.01
    confidence: float = 0.95
    resamples: int = 1000
    suspicious_speedup: float = 10.0
    switch_gain: float = 0.05
    seed: int = 0


DEFAULT_SHAPE_SETTINGS = ShapeSettings()


@dataclass(frozen=True)
class ShapeBest:
    """The variant one timed case runs.

    ``vs_baseline``: the side-by-side interval against the original that confirms it there
    (``1.0`` exactly for the original itself); ``vs_incumbent``: kept for the manifest's
    format, always ``None`` (two candidates are never compared across evaluations).
    ``time_s``/``baseline_s``: their first measured medians, for information only.
    """

    label: str
    candidate_id: str
    time_s: float
    baseline_s: float | None
    vs_incumbent: Interval | None
    vs_baseline: Interval | None

    @property
    def speedup(self) -> float | None:
        """The confirmed side-by-side speedup over the original on this case."""
        return None if self.vs_baseline is None else self.vs_baseline.speedup


def shape_bests(
    rows: Sequence[CaseTimingRow],
    incumbent_id: str,
    settings: ShapeSettings = ShapeSettings(),
    *,
    comparisons: Sequence[ComparisonRow] = (),
) -> list[ShapeBest]:
    """The variant per timed case of the incumbent, in label order (empty if the incumbent
    or the original has no timings)."""
    by_id: Mapping[str, CaseTimingRow] = {r.candidate_id: r for r in rows}
    incumbent = by_id.get(incumbent_id)
    baseline = next((r for r in rows if r.provenance.value == "original"), None)
    if incumbent is None or baseline is None:
        return []
    trusted = [
        c
        for c in comparisons
        if c.candidate_id in by_id and not (by_id[c.candidate_id].statuses & _UNTRUSTED)
    ]
    rule = AcceptanceSettings(
        min_gain=settings.min_gain,
        confidence=settings.confidence,
        resamples=settings.resamples,
        suspicious_speedup=settings.suspicious_speedup,
    )
    claims = shape_claims(trusted, baseline.candidate_id, rule, settings.seed)
    labels = sorted(incumbent.timings)
    picks = pick_variants(labels, claims, incumbent_id, baseline.candidate_id, settings.switch_gain)
    out = []
    for label in labels:
        cid, claim = picks[label]
        pick = by_id.get(cid, baseline)
        if label not in pick.timings:
            pick, claim = baseline, None
        out.append(
            ShapeBest(
                label=label,
                candidate_id=pick.candidate_id,
                time_s=pick.timings.get(label, 0.0),
                baseline_s=baseline.timings.get(label),
                vs_incumbent=None,
                vs_baseline=Interval(1.0, 1.0, 1.0) if claim is None else claim.interval,
            )
        )
    return out
