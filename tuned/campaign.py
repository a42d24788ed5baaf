"""Tuning one kernel generation on one machine: baseline, then policy-chosen candidates.

Resumable by construction: everything is read back from the store, a candidate is recorded
before it is evaluated and its result after, and the random generator of step ``n`` is seeded
from ``(seed, n)``. A killed run, started again, evaluates exactly the candidates that have no
result yet, and never one that has.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from policies import DEFAULT_POLICY, Policy, SearchSpace, Trial, make_policy, restore_policy
from tuned.acceptance import AcceptanceSettings, Interval, decide, speedup_interval
from tuned.evaluation.client import WorkerClient
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.registry.spec import KernelSpec
from tuned.store.base import TrialRow
from tuned.store.sqlite import SqliteStore

__all__ = ["Campaign", "CampaignSummary", "TuneSettings"]


@dataclass(frozen=True)
class TuneSettings:
    """``budget``: evaluated candidates (besides the baseline) each kernel generation should
    have on this machine's fingerprint; a rerun continues up to it. ``None``: no limit (the
    daemon), until the knob space is exhausted."""

    budget: int | None
    policy: str = DEFAULT_POLICY
    seed: int = 0


@dataclass
class CampaignSummary:
    kernel: str
    baseline_s: float | None = None
    best_s: float | None = None
    best_knobs: dict[str, object] = field(default_factory=dict)
    evaluations: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    worker_seconds: float = 0.0
    timing_kind: str = ""
    note: str = ""

    @property
    def speedup(self) -> float | None:
        if self.baseline_s is None or self.best_s is None:
            return None
        return self.baseline_s / self.best_s

    @property
    def failures(self) -> dict[str, int]:
        return {k: v for k, v in sorted(self.outcomes.items()) if k != Outcome.OK.value}


OnResult = Callable[[KernelSpec, Candidate, EvalResult, "CampaignSummary"], None]


class Campaign:
    """Drives the policy for one kernel, one evaluation per :meth:`step`."""

    def __init__(
        self,
        *,
        spec: KernelSpec,
        store: SqliteStore,
        client: WorkerClient,
        fingerprint: str,
        settings: TuneSettings,
        on_result: OnResult | None = None,
        acceptance: AcceptanceSettings | None = None,
    ) -> None:
        self.spec = spec
        self.store = store
        self.client = client
        self.fingerprint = fingerprint
        self.settings = settings
        self.on_result = on_result
        self.acceptance = acceptance or AcceptanceSettings()
        self.note = ""
        self._policy: Policy | None = None

    def remaining(self) -> int:
        """Evaluations still to do (baseline included), at most; the space may end earlier."""
        trials = self._trials()
        has_baseline = any(t.provenance is Provenance.ORIGINAL for t in trials)
        done = sum(1 for t in trials if t.provenance is not Provenance.ORIGINAL)
        space = self.spec.space_size() if self.spec.knobs else 0
        budget = space if self.settings.budget is None else min(self.settings.budget, space)
        todo = max(0, budget - done)
        return todo + (0 if has_baseline else 1)

    def step(self) -> TrialRow | None:
        """Evaluate one more candidate (the baseline first) and return it.

        ``None`` when this campaign is finished: budget reached, knob space exhausted, or the
        original itself fails (``self.note`` says which). The policy is created or restored
        on the first step and its state saved after every update.
        """
        trials = self._trials()
        baseline = next((t for t in trials if t.provenance is Provenance.ORIGINAL), None)
        if baseline is None:
            return self.evaluate(self._baseline_candidate())
        if baseline.result.outcome is not Outcome.OK:
            self.note = (
                f"the original fails ({baseline.result.outcome.value}: "
                f"{baseline.result.reason}); fix the entry, nothing was tuned"
            )
            return None
        done = sum(1 for t in trials if t.provenance is not Provenance.ORIGINAL)
        if self.settings.budget is not None and done >= self.settings.budget:
            return None
        if self._policy is None:
            self._policy = self._load_policy()
        rng = np.random.default_rng([self.settings.seed, len(trials)])
        space = SearchSpace(knobs=self.spec.knobs)
        suggestion = self._policy.suggest(space, [_as_policy_trial(t) for t in trials], rng)
        if suggestion is None:
            self.note = "knob space exhausted"
            return None
        candidate = Candidate(
            kernel=self.spec.name,
            generation=self.spec.generation,
            source=self.spec.module_source,
            knobs=dict(suggestion.knobs),
            provenance=Provenance.PARAMETRIC,
            strategy=suggestion.strategy,
            parent_id=suggestion.parent_id,
        )
        row = self.evaluate(candidate)
        self._policy.observe(suggestion, _as_policy_trial(row))
        self.store.save_policy_state(
            self.spec.name,
            self.spec.generation,
            self.fingerprint,
            self.settings.policy,
            self._policy.to_dict(),
        )
        return row

    def run(self) -> CampaignSummary:
        """Step until finished; the summary covers every evaluation in the store."""
        while self.step() is not None:
            pass
        return self.summary()

    # -- steps

    def _trials(self) -> list[TrialRow]:
        return self.store.trials(self.spec.name, self.spec.generation, self.fingerprint)

    def _baseline_candidate(self) -> Candidate:
        return Candidate(
            kernel=self.spec.name,
            generation=self.spec.generation,
            source=self.spec.module_source,
            knobs=dict(self.spec.baseline_knobs),
            provenance=Provenance.ORIGINAL,
            strategy="original",
        )

    def evaluate(self, candidate: Candidate) -> TrialRow:
        """Record, evaluate and store one candidate (the path every candidate takes).

        A correct candidate is timed interleaved with the incumbent; if it looks faster, the
        acceptance rule (:mod:`tuned.acceptance`) decides, re-measuring it in a fresh worker.
        """
        self.store.add_candidate(candidate)
        incumbent = None
        if candidate.provenance is not Provenance.ORIGINAL:
            incumbent = self._incumbent()
        result, wall = self._measure(candidate, incumbent)
        if incumbent is not None and result.outcome is Outcome.OK:
            self._judge(candidate, incumbent, result)
        if self.on_result is not None:
            self.on_result(self.spec, candidate, result, self.summary())
        return TrialRow(
            candidate_id=candidate.id,
            knobs=candidate.knobs,
            provenance=candidate.provenance,
            strategy=candidate.strategy,
            parent_id=candidate.parent_id,
            source_hash="",
            result=result,
            wall_s=wall,
        )

    def _measure(
        self, candidate: Candidate, incumbent: Candidate | None, *, remeasure: bool = False
    ) -> tuple[EvalResult, float]:
        started = time.time()
        t0 = time.monotonic()
        original = candidate.provenance is Provenance.ORIGINAL
        result = self.client.evaluate(
            self.spec,
            candidate,
            incumbent,
            derived_skip=() if original else self._derived_unusable(),
            lenient_derived=original,
        )
        wall = time.monotonic() - t0
        if remeasure:
            result = replace(result, metadata={**result.metadata, "remeasure": True})
        self.store.record_evaluation(
            candidate, self.fingerprint, result, started_at=started, wall_s=wall
        )
        return result, wall

    def _derived_unusable(self) -> list[str]:
        """Derived shapes the original itself fails on: not checked for candidates."""
        for t in self._trials():
            if t.provenance is Provenance.ORIGINAL:
                return list(t.result.metadata.get("derived_unusable", ()))
        return []

    def _incumbent(self) -> Candidate | None:
        cid = self.store.incumbent(self.spec.name, self.spec.generation, self.fingerprint)
        if cid is not None:
            return self.store.candidate(cid, self.spec.generation)
        return self._baseline_candidate()

    def _judge(self, candidate: Candidate, incumbent: Candidate, result: EvalResult) -> None:
        first = _interval(result, self.acceptance, self.settings.seed)
        if first is None:
            return
        status = decide(first, self.acceptance)
        second = None
        if status == "remeasure":
            self.client.close()  # the next evaluation starts a fresh worker
            again, _ = self._measure(candidate, incumbent, remeasure=True)
            second = _interval(again, self.acceptance, self.settings.seed + 1)
            status = "not_confirmed" if second is None else decide(first, self.acceptance, second)
        if status == "not_significant":
            return
        self.store.record_acceptance(
            candidate,
            self.fingerprint,
            incumbent_id=incumbent.id,
            status=status,
            first=first.to_dict(),
            second=None if second is None else second.to_dict(),
        )

    def _load_policy(self) -> Policy:
        state = self.store.policy_state(
            self.spec.name, self.spec.generation, self.fingerprint, self.settings.policy
        )
        if state is not None:
            return restore_policy(self.settings.policy, state)
        return make_policy(self.settings.policy)

    def summary(self) -> CampaignSummary:
        """Figures from the store: every evaluation of this generation on this fingerprint;
        the best is the accepted incumbent (the baseline until a candidate is accepted)."""
        summary = CampaignSummary(kernel=self.spec.name, note=self.note)
        for t in self._trials():
            summary.outcomes[t.result.outcome.value] += 1
            summary.worker_seconds += t.wall_s
            if t.provenance is not Provenance.ORIGINAL:
                summary.evaluations += 1
        best = self.store.best(self.spec.name, self.fingerprint)
        if best is not None:
            summary.baseline_s, summary.best_s = best.baseline_time_s, best.time_s
            summary.best_knobs = dict(best.knobs)
            summary.timing_kind = best.timing_kind
        return summary


def _interval(result: EvalResult, settings: AcceptanceSettings, seed: int) -> Interval | None:
    samples = result.metadata.get("samples") or {}
    incumbent = result.metadata.get("incumbent_samples") or {}
    if result.outcome is not Outcome.OK or not incumbent:
        return None
    return speedup_interval(samples, incumbent, np.random.default_rng(seed), settings)


def _as_policy_trial(row: TrialRow) -> Trial:
    return Trial(
        candidate_id=row.candidate_id,
        knobs=row.knobs,
        outcome=row.result.outcome.value,
        time_s=row.result.time_s,
        strategy=row.strategy or row.provenance.value,
        parent_id=row.parent_id,
    )
