"""What the store keeps, as the rest of ktuned sees it.

The store holds kernels and their generations, candidate sources, candidates, evaluations
(one row per measurement; a candidate "has a result" on a fingerprint when it has a row),
fingerprints and policy state, and the read models built on them. The interface is
:class:`tuned.store.Store`; engines: :class:`tuned.store.SqliteStore` (one box) and
:class:`tuned.store.PostgresStore` (a fleet).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuned.outcomes import EvalResult, Provenance
from tuned.registry.spec import KnobValue
from tuned.store.speedups import MeasuredSpeedup

__all__ = [
    "BestRow",
    "CaseTimingRow",
    "ComparisonRow",
    "EvaluationTotals",
    "KernelProgress",
    "KernelRow",
    "TimelineRow",
    "TrialRow",
    "fingerprint_id",
]


def fingerprint_id(fingerprint: Mapping[str, str]) -> str:
    """Stable short id of a software/hardware fingerprint (GPU model, driver, CUDA, versions)."""
    text = json.dumps(dict(fingerprint), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class KernelRow:
    name: str
    directory: str
    generation: str
    state: str  # active | invalid
    reason: str
    weight: float


@dataclass(frozen=True)
class TrialRow:
    """A candidate of a generation with its (first) evaluation result on one fingerprint."""

    candidate_id: str
    knobs: Mapping[str, KnobValue]
    provenance: Provenance
    strategy: str | None
    parent_id: str | None
    source_hash: str
    result: EvalResult
    wall_s: float


@dataclass(frozen=True)
class BestRow:
    kernel: str
    generation: str
    candidate_id: str
    knobs: Mapping[str, KnobValue]
    source_hash: str
    provenance: Provenance
    time_s: float
    baseline_time_s: float | None
    fingerprint: str
    timing_kind: str
    #: The speedup over the original as measured side by side (:mod:`tuned.store.speedups`).
    measured: MeasuredSpeedup | None = None

    @property
    def speedup(self) -> float | None:
        """The measured speedup (never ``baseline_time_s / time_s``: two moments)."""
        return None if self.measured is None else self.measured.speedup


# -- read models for the daemon, its metrics and `ktuned report` (issue 4)


@dataclass(frozen=True)
class KernelProgress:
    """A kernel's current generation on the fingerprint of its latest evaluation.

    The best is the incumbent (the latest accepted candidate, else the baseline); ``best_at``
    is when it was accepted, or the baseline measured (Unix seconds): the last improvement.
    Times are ``None`` until the baseline has a successful evaluation.
    """

    name: str
    state: str
    weight: float
    generation: str
    fingerprint: str | None
    evaluations: int
    baseline_s: float | None
    best_s: float | None
    best_at: float | None
    timing_kind: str
    #: The best's speedup over the original, measured side by side (:mod:`tuned.store.speedups`).
    measured: MeasuredSpeedup | None = None

    @property
    def speedup(self) -> float | None:
        """The measured speedup (never ``baseline_s / best_s``: two moments)."""
        return None if self.measured is None else self.measured.speedup


@dataclass
class EvaluationTotals:
    """Sums over the evaluations with ``after_seq < seq <= upto_seq`` (every kernel).

    ``outcomes[(kernel, outcome)]``: evaluations. ``phases[phase]``: (count, sum of seconds,
    cumulative counts at each upper bound asked for). ``arms[(kernel, strategy)]``: (pulls, sum
    of rewards), where a pull is an evaluated non-original candidate and its reward the
    relative latency reduction against its parent (the baseline when it has none), clipped at
    0; failures are pulls with reward 0.
    """

    after_seq: int
    upto_seq: int
    outcomes: dict[tuple[str, str], int]
    phases: dict[str, tuple[int, float, tuple[int, ...]]]
    arms: dict[tuple[str, str], tuple[int, float]]


@dataclass(frozen=True)
class TimelineRow:
    """One evaluation, for plots: when it finished and what it found."""

    kernel: str
    generation: str
    fingerprint: str
    candidate_id: str
    provenance: Provenance
    strategy: str
    outcome: str
    time_s: float | None
    finished_at: float


@dataclass(frozen=True)
class CaseTimingRow:
    """A successfully evaluated candidate's per-case figures (read model of the runtime).

    ``timings``: per-case median seconds (case label, e.g. ``M=4096xN=4096/float16``);
    ``samples``: the raw samples behind each median; ``statuses``: its acceptance decisions.
    """

    candidate_id: str
    knobs: Mapping[str, Any]
    source_hash: str
    provenance: Provenance
    timings: Mapping[str, float]
    samples: Mapping[str, list[float]]
    timing_kind: str
    statuses: frozenset[str]


@dataclass(frozen=True)
class ComparisonRow:
    """One side-by-side measurement of a candidate against another (read model of the
    runtime's per-shape confirmation, :mod:`tuned.runtime.confirmed`): per-case samples of
    both, timed interleaved in one process. ``source``: ``evaluation`` (the campaign's, with
    the incumbent it was timed against recorded) or ``referee`` (``ktuned referee``)."""

    candidate_id: str
    incumbent_id: str
    samples: Mapping[str, list[float]]
    incumbent_samples: Mapping[str, list[float]]
    source: str
    seq: int
