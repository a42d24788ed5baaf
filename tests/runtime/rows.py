"""Store rows with chosen per-case timings, written through the store's own API (real SQLite),
for the real example kernels: outcomes a tiny tuning run cannot be relied on to produce (a
best per shape, a stale best, an LLM-rewritten variant to tamper with)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tuned.acceptance import Interval
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.registry import KernelSpec, load_entry
from tuned.runtime import current_fingerprint
from tuned.store.sqlite import SqliteStore

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "registry"


def example(name: str) -> KernelSpec:
    return load_entry(EXAMPLES / name)


def _samples(median: float, n: int = 15) -> list[float]:
    """Samples spread +-1 % around ``median`` (deterministic)."""
    return [median * (1.0 + 0.01 * math.sin(i)) for i in range(n)]


@dataclass
class Rows:
    """Writes candidates and their evaluations of one kernel generation into a store."""

    store: SqliteStore
    spec: KernelSpec
    fingerprint: str
    #: Per-case medians of each candidate's first evaluation (for side-by-side records).
    medians: dict[str, Mapping[str, float]] = field(default_factory=dict)

    @classmethod
    def open(
        cls, state: Path, spec: KernelSpec, fingerprint: Mapping[str, str] | None = None
    ) -> Rows:
        store = SqliteStore(state / "ktuned.sqlite")
        store.sync_kernel(spec)
        fid = store.record_fingerprint(dict(fingerprint or current_fingerprint()))
        return cls(store, spec, fid)

    def on(self, fingerprint: Mapping[str, str]) -> Rows:
        return Rows(self.store, self.spec, self.store.record_fingerprint(dict(fingerprint)))

    def candidate(
        self,
        knobs: Mapping[str, object] | None = None,
        *,
        source: str | None = None,
        original: bool = False,
    ) -> Candidate:
        if original:
            provenance = Provenance.ORIGINAL
        else:
            provenance = Provenance.LLM if source else Provenance.PARAMETRIC
        return Candidate(
            kernel=self.spec.name,
            generation=self.spec.generation,
            source=source or self.spec.module_source,
            knobs=dict(self.spec.baseline_knobs if original else knobs or {}),  # type: ignore[arg-type]
            provenance=provenance,
            strategy="original" if original else "config",
        )

    def evaluate(self, candidate: Candidate, medians: Mapping[str, float]) -> Candidate:
        """Record a successful evaluation with these per-case medians (and samples)."""
        self.store.add_candidate(candidate)
        objective = math.exp(sum(math.log(t) for t in medians.values()) / len(medians))
        result = EvalResult(
            Outcome.OK,
            time_s=objective,
            timings=dict(medians),
            timing_kind="interpreter",
            metadata={"samples": {k: _samples(v) for k, v in medians.items()}},
        )
        self.store.record_evaluation(
            candidate, self.fingerprint, result, started_at=1.0e9, wall_s=1.0
        )
        self.medians[candidate.id] = dict(medians)
        return candidate

    def compare(
        self,
        candidate: Candidate,
        against: Candidate,
        medians: Mapping[str, float] | None = None,
        *,
        times: int = 1,
        against_medians: Mapping[str, float] | None = None,
    ) -> None:
        """Record ``times`` side-by-side measurements of ``candidate`` against ``against``
        (an evaluation timed interleaved with it, naming it): by default at both first
        evaluations' medians, on the cases both have."""
        mine = dict(medians or self.medians[candidate.id])
        theirs = dict(against_medians or self.medians[against.id])
        common = [k for k in mine if k in theirs]
        for _ in range(times):
            result = EvalResult(
                Outcome.OK,
                time_s=math.exp(sum(math.log(mine[k]) for k in common) / len(common)),
                timings={k: mine[k] for k in common},
                timing_kind="interpreter",
                metadata={
                    "samples": {k: _samples(mine[k]) for k in common},
                    "incumbent_samples": {k: _samples(theirs[k]) for k in common},
                    "incumbent_id": against.id,
                    "remeasure": True,
                },
            )
            self.store.record_evaluation(
                candidate, self.fingerprint, result, started_at=1.0e9, wall_s=1.0
            )

    def accept(self, candidate: Candidate, over: Candidate, speedup: float = 1.5) -> None:
        """Record the acceptance of ``candidate`` over ``over``, with the two side-by-side
        measurements it rests on (as the campaign records them)."""
        self.compare(candidate, over, times=2)
        interval = Interval(speedup, speedup * 0.9, speedup * 1.1).to_dict()
        self.store.record_acceptance(
            candidate,
            self.fingerprint,
            incumbent_id=over.id,
            status="accepted",
            first=interval,
            second=interval,
        )


def labels(dims: Sequence[int], dtype: str = "float32") -> list[str]:
    return [f"N={n}/{dtype}" for n in dims]
