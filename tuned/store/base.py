"""What the store keeps, as the rest of ktuned sees it.

The store holds kernels and their generations, candidate sources, candidates, evaluations
(one row per measurement; a candidate "has a result" on a fingerprint when it has a row),
fingerprints and policy state. Implementations: :class:`tuned.store.sqlite.SqliteStore`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from tuned.outcomes import EvalResult, Provenance
from tuned.registry.spec import KnobValue

__all__ = ["BestRow", "KernelRow", "TrialRow", "fingerprint_id"]


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

    @property
    def speedup(self) -> float | None:
        if self.baseline_time_s is None or self.time_s <= 0:
            return None
        return self.baseline_time_s / self.time_s
