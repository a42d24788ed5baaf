"""When is a faster candidate really faster? Bootstrap intervals and the acceptance rule.

A candidate is timed interleaved with the incumbent (the current best, or the baseline) in
the same worker, on every timed case. The speedup statistic is

    S = exp( mean over cases c of  log( median(incumbent_c) / median(candidate_c) ) )

(the geometric mean of the per-case ratios of medians). Its confidence interval comes from a
percentile bootstrap: each case's samples of both are resampled with replacement, ``B`` times.

The rule (:func:`decide`):

1. ``lower bound < 1 + min_gain`` (or the point estimate itself below it): not significant;
   the incumbent stays. A candidate whose point estimate is below the bar is decided without
   its bootstrap (:func:`speedup_point`, tens of milliseconds saved per evaluation: most
   candidates are slower than the incumbent).
2. ``S > suspicious_speedup`` (default 10x): held for re-verification, never accepted
   automatically, and flagged (speedups that large are more often bugs than wins).
3. otherwise the candidate is re-measured in a fresh worker, interleaved again, and accepted
   only if that second interval's lower bound also clears ``1 + min_gain``.

Where the entry declares a ``roofline`` and the GPU model's peaks are measured, a candidate
whose time on some timed case implies more than ``roofline_hold`` times the measured peak
bandwidth or FLOP rate is also held (the campaign checks this, :mod:`tuned.search`): it is
faster than the hardware allows, so it skips work. The default 1.5 leaves room for kernels
that beat the peaks' own measurement (a device copy, a large matmul) by using the caches.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["AcceptanceSettings", "Interval", "decide", "speedup_interval", "speedup_point"]


_NO_RATIO = 50.0  # a bootstrap resample without a ratio: a log-speedup of -50 (see below)


@dataclass(frozen=True)
class AcceptanceSettings:
    min_gain: float = 0.01  # the lower bound must exceed 1 + min_gain (docs/decisions.md)
    confidence: float = 0.95  # two-sided; the lower bound is the (1 - confidence) / 2 quantile
    resamples: int = 2000
    suspicious_speedup: float = 10.0
    remeasure: bool = True
    roofline_hold: float = 1.5  # achieved / measured peak above this: held (see above)


@dataclass(frozen=True)
class Interval:
    speedup: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float]:
        return {"speedup": self.speedup, "low": self.low, "high": self.high}


def comparable(
    candidate: Mapping[str, Sequence[float]], incumbent: Mapping[str, Sequence[float]]
) -> bool:
    """Whether the two have a timed case in common and every common case's median is
    positive on both sides (a zero median is no time: nothing to divide by)."""
    labels = sorted(set(candidate) & set(incumbent))
    return bool(labels) and not _timeless(candidate, incumbent, labels)


def _timeless(
    candidate: Mapping[str, Sequence[float]],
    incumbent: Mapping[str, Sequence[float]],
    labels: Sequence[str],
) -> list[str]:
    """The ``labels`` without a positive median time on one side or the other."""
    return [
        label
        for label in labels
        if not all(len(s[label]) and float(np.median(s[label])) > 0 for s in (candidate, incumbent))
    ]


def _check_comparable(
    candidate: Mapping[str, Sequence[float]], incumbent: Mapping[str, Sequence[float]]
) -> list[str]:
    labels = sorted(set(candidate) & set(incumbent))
    if not labels:
        raise ValueError("no timed case in common between candidate and incumbent")
    timeless = _timeless(candidate, incumbent, labels)
    if timeless:
        raise ValueError(
            "a timed case has no positive median time on one side: " + ", ".join(timeless)
        )
    return labels


def speedup_point(
    candidate: Mapping[str, Sequence[float]], incumbent: Mapping[str, Sequence[float]]
) -> float:
    """The speedup statistic ``S`` alone (:func:`speedup_interval`'s point estimate)."""
    labels = _check_comparable(candidate, incumbent)
    logs = [
        math.log(float(np.median(incumbent[label])) / float(np.median(candidate[label])))
        for label in labels
    ]
    return math.exp(sum(logs) / len(logs))


def speedup_interval(
    candidate: Mapping[str, Sequence[float]],
    incumbent: Mapping[str, Sequence[float]],
    rng: np.random.Generator,
    settings: AcceptanceSettings = AcceptanceSettings(),
) -> Interval:
    """Point estimate and bootstrap interval of the incumbent/candidate speedup."""
    labels = _check_comparable(candidate, incumbent)
    point = 0.0
    boot = np.zeros(settings.resamples)
    for label in labels:
        c = np.asarray(candidate[label], dtype=float)
        i = np.asarray(incumbent[label], dtype=float)
        point += math.log(float(np.median(i)) / float(np.median(c)))
        c_idx = rng.integers(0, len(c), size=(settings.resamples, len(c)))
        i_idx = rng.integers(0, len(i), size=(settings.resamples, len(i)))
        mi, mc = np.median(i[i_idx], axis=1), np.median(c[c_idx], axis=1)
        # A resample whose median is zero on either side (samples of zero: the judge's fixed
        # cost ate a call) has no ratio; it counts as evidence against the candidate, never as
        # an infinite or undefined speedup (NaN bounds would pass every comparison).
        with np.errstate(divide="ignore", invalid="ignore"):
            boot += np.where((mi > 0) & (mc > 0), np.log(mi / mc), -_NO_RATIO)
    n = len(labels)
    tail = (1.0 - settings.confidence) / 2
    low, high = np.quantile(boot / n, [tail, 1.0 - tail])
    return Interval(
        speedup=math.exp(point / n), low=math.exp(float(low)), high=math.exp(float(high))
    )


def decide(first: Interval, settings: AcceptanceSettings, second: Interval | None = None) -> str:
    """The decision: ``not_significant``, ``held``, ``remeasure`` (then call again with
    ``second``), ``accepted`` or ``not_confirmed``."""
    bar = 1.0 + settings.min_gain
    if not _finite(first) or first.low < bar or first.speedup < bar:
        return "not_significant"
    if first.speedup > settings.suspicious_speedup:
        return "held"
    if not settings.remeasure:
        return "accepted"
    if second is None:
        return "remeasure"
    return (
        "accepted"
        if _finite(second) and min(second.low, second.speedup) >= bar
        else "not_confirmed"
    )


def _finite(interval: Interval) -> bool:
    return all(math.isfinite(x) for x in (interval.speedup, interval.low, interval.high))
