"""Bests per timed shape, derived from the per-case timings the store already holds.

Every successful evaluation records, per timed case (shape x dtype, e.g.
``M=4096xN=4096/float16``), the median time and the samples behind it. The kernel's best (the
*incumbent*: the latest accepted candidate, else the baseline) wins on the objective, the
geometric mean over the cases; on one case another validated candidate may be faster. The
rule for case ``c``:

1. The challenger is the validated candidate with the lowest median on ``c``: outcome ``ok``
   (correct on every shape, dtype and seed) and never ``held`` or ``not_confirmed`` by the
   acceptance rule.
2. It replaces the incumbent on ``c`` only if the percentile-bootstrap interval of
   ``median(incumbent_c) / median(challenger_c)`` (:func:`tuned.acceptance.speedup_interval`
   on that one case) has its lower bound at or above ``1 + min_gain`` and its point estimate
   at most ``suspicious_speedup``. The two were measured in different evaluations (not
   interleaved), so ``min_gain`` defaults to 5 %, above the acceptance rule's 1 %.

Speedups against the baseline, with an interval computed the same way, are reported per case.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tuned.acceptance import AcceptanceSettings, Interval, speedup_interval
from tuned.store.sqlite import CaseTimingRow

__all__ = ["DEFAULT_SHAPE_SETTINGS", "ShapeBest", "ShapeSettings", "shape_bests"]

_UNTRUSTED = frozenset({"held", "not_confirmed"})


@dataclass(frozen=True)
class ShapeSettings:
    """How a per-shape best is chosen (see the module docstring)."""

    min_gain: float = 0.05
    confidence: float = 0.95
    resamples: int = 1000
    suspicious_speedup: float = 10.0
    seed: int = 0


DEFAULT_SHAPE_SETTINGS = ShapeSettings()


@dataclass(frozen=True)
class ShapeBest:
    """The best validated candidate on one timed case.

    ``vs_incumbent``: the interval that made it replace the incumbent here (``None`` when the
    incumbent itself is best). ``vs_baseline``: its speedup over the original on this case
    (``None`` when the samples are missing).
    """

    label: str
    candidate_id: str
    time_s: float
    baseline_s: float | None
    vs_incumbent: Interval | None
    vs_baseline: Interval | None

    @property
    def speedup(self) -> float | None:
        if self.baseline_s is None or self.time_s <= 0:
            return None
        return self.baseline_s / self.time_s


def _interval(
    label: str,
    mine: CaseTimingRow,
    theirs: CaseTimingRow,
    settings: ShapeSettings,
    rng: np.random.Generator,
) -> Interval | None:
    a, b = mine.samples.get(label), theirs.samples.get(label)
    if not a or not b:
        return None
    stats = AcceptanceSettings(confidence=settings.confidence, resamples=settings.resamples)
    return speedup_interval({label: a}, {label: b}, rng, stats)


def shape_bests(
    rows: Sequence[CaseTimingRow],
    incumbent_id: str,
    settings: ShapeSettings = ShapeSettings(),
) -> list[ShapeBest]:
    """The best per timed case of the incumbent, in label order (empty if the incumbent has
    no timings)."""
    by_id: Mapping[str, CaseTimingRow] = {r.candidate_id: r for r in rows}
    incumbent = by_id.get(incumbent_id)
    if incumbent is None:
        return []
    baseline = next((r for r in rows if r.provenance.value == "original"), None)
    rng = np.random.default_rng(settings.seed)
    bar = 1.0 + settings.min_gain
    out = []
    for label in sorted(incumbent.timings):
        pick, against = incumbent, None
        trusted = [
            r
            for r in rows
            if label in r.timings and r.timings[label] > 0 and not (r.statuses & _UNTRUSTED)
        ]
        challenger = min(trusted, key=lambda r: r.timings[label], default=None)
        if challenger is not None and challenger.candidate_id != incumbent_id:
            interval = _interval(label, challenger, incumbent, settings, rng)
            if (
                interval is not None
                and interval.low >= bar
                and interval.speedup <= settings.suspicious_speedup
            ):
                pick, against = challenger, interval
        base_s = baseline.timings.get(label) if baseline is not None else None
        out.append(
            ShapeBest(
                label=label,
                candidate_id=pick.candidate_id,
                time_s=pick.timings[label],
                baseline_s=base_s,
                vs_incumbent=against,
                vs_baseline=(
                    None
                    if baseline is None or pick is baseline
                    else _interval(label, pick, baseline, settings, rng)
                ),
            )
        )
    return out
