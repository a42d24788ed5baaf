"""Tuning one kernel generation on one machine: baseline, then policy-chosen candidates.

Resumable by construction: everything is read back from the store, a candidate is recorded
before it is evaluated and its result after, and the random generator of step ``n`` is seeded
from ``(seed, n)``. A killed run, started again, evaluates exactly the candidates that have no
result yet, and never one that has.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from clustering.features import feature_row
from clustering.kernels import cluster_kernels, peer_prior
from policies import (
    DEFAULT_POLICY,
    POLICIES,
    HierarchicalPolicy,
    Policy,
    SearchSpace,
    Suggestion,
    Trial,
    make_policy,
    propose_batch,
    restore_policy,
)
from policies.masks import MaskSettings
from policies.strategies import llm_base_strategy, llm_strategy_name
from profilers.classify import roofline_point
from profilers.peaks import Peaks
from tuned.acceptance import (
    AcceptanceSettings,
    Interval,
    decide,
    speedup_interval,
    speedup_point,
)
from tuned.evaluation.client import WorkerClient
from tuned.llm.gate import gate_result
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.profiling import case_label, merge_metrics
from tuned.registry.spec import KernelSpec, KnobValue
from tuned.store.api import Store
from tuned.store.base import TrialRow
from tuned.store.claims import ClaimSettings

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from tuned.llm.proposer import LlmProposer
    from tuned.profiling import HardwareFeedback

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


@dataclass
class Prepared:
    """One candidate ready to measure (:meth:`Campaign.prepare`); :meth:`measure` is the part
    that may run on another thread: it touches nothing but the worker client it is given."""

    spec: KernelSpec
    candidate: Candidate
    incumbent: Candidate | None
    gate: EvalResult | None  # the static gate's rejection: nothing to measure
    derived_skip: tuple[str, ...]
    lenient_derived: bool
    remeasure: bool = False
    phases: dict[str, float] = field(default_factory=dict)
    started_at: float = 0.0  # time.time() when measured
    wall_s: float = 0.0

    def measure(self, client: WorkerClient) -> EvalResult:
        self.started_at = time.time()
        t0 = time.monotonic()
        result = self.gate or client.evaluate(
            self.spec,
            self.candidate,
            self.incumbent,
            derived_skip=self.derived_skip,
            lenient_derived=self.lenient_derived,
        )
        self.wall_s = time.monotonic() - t0
        return result


class Campaign:
    """Drives the policy for one kernel, one evaluation per :meth:`step`."""

    def __init__(
        self,
        *,
        spec: KernelSpec,
        store: Store,
        client: WorkerClient,
        fingerprint: str,
        settings: TuneSettings,
        on_result: OnResult | None = None,
        acceptance: AcceptanceSettings | None = None,
        hardware: HardwareFeedback | None = None,
        masks: MaskSettings | None = None,
        llm: LlmProposer | None = None,
        claims: ClaimSettings | None = None,
    ) -> None:
        self.spec = spec
        self.store = store
        self.client = client
        self.fingerprint = fingerprint
        self.settings = settings
        self.on_result = on_result
        self.acceptance = acceptance or AcceptanceSettings()
        #: Profiles and roofline figures (docs/profiling.md); ``None``: none are taken.
        self.hardware = hardware
        #: Saturation thresholds of the hierarchical policies' masks (their defaults: None).
        self.masks = masks
        #: Rewrites for the policy's LLM arms (docs/llm.md); ``None``: LLM arms stay masked.
        self.llm = llm
        #: Fleet mode (docs/fleet.md): claim each candidate before evaluating it, so that
        #: processes sharing the store never evaluate one twice; ``None``: no claims.
        self.claims = claims
        self.note = ""
        #: Why a reference entry waits for the LLM (state ``needs_llm``); "" otherwise.
        self.needs_llm = ""
        self._policy: Policy | None = None
        self._seed: Candidate | None = None  # a reference entry's first correct LLM module
        self._marked_needs_llm = False

    def remaining(self) -> int:
        """Evaluations still to do (baseline included), at most; the space may end earlier."""
        trials = self._trials()
        has_baseline = any(t.provenance is Provenance.ORIGINAL for t in trials)
        done = sum(1 for t in trials if t.provenance is not Provenance.ORIGINAL)
        if self.spec.reference_only and not has_baseline and self._waiting_for_llm(trials):
            return 0
        knobs = self._knobs(trials)
        space = math.prod(len(v) for v in knobs.values()) if knobs else 0
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
        self.needs_llm = ""
        if self.spec.reference_only:
            waiting = self._waiting_for_llm(trials)
            if waiting:
                self._wait_for_llm(waiting)
                return None
            self._llm_resumed()
        if baseline is None:
            if self.spec.reference_only:
                return self._reference_baseline()
            first_candidate = self._baseline_candidate()
            first_claim = Suggestion(knobs=first_candidate.knobs, strategy="original")
            if not self._claim(first_candidate, first_claim):
                # Another process measures the baseline: wait for it (or for its lease to
                # run out), then decide again.
                return self.step() if self._wait_for_others() else None
            first = self.evaluate(first_candidate)
            self._hardware_feedback()
            return first
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
        taken = self._take_over()  # work a dead process left goes first
        if taken is not None:
            return taken
        pending = self._claimed_elsewhere()
        rng = np.random.default_rng([self.settings.seed, len(trials)])
        space = self._space()
        known = self.hardware.metrics(self.spec) if self.hardware is not None else {}
        if known and isinstance(self._policy, HierarchicalPolicy):
            self._policy.update_metrics(known)  # profiles taken since the trials were read
        policy_trials = [_as_policy_trial(t, known.get(t.candidate_id)) for t in trials]
        self._offer_llm_arms(trials=trials, known=known)
        suggestion = self._policy.suggest(space, policy_trials, rng, pending=pending)
        candidate = None if suggestion is None else self._propose(suggestion, trials, known)
        if suggestion is not None and candidate is None:
            # The LLM gave nothing to evaluate (recorded in its attempt log): a pull without
            # reward, then this step decides again with the LLM arms masked.
            self._policy.observe(suggestion, _nothing_evaluated(suggestion))
            self._offer_llm_arms(masked=True)
            suggestion = self._policy.suggest(space, policy_trials, rng, pending=pending)
            candidate = None if suggestion is None else self._propose(suggestion, trials, known)
        if (suggestion is None or candidate is None) and pending:
            # What is left is being evaluated elsewhere: wait for it, then decide again.
            return self.step() if self._wait_for_others() else None
        if suggestion is None or candidate is None:
            if self.spec.reference_only and self._seed_of(trials) is None:
                self._wait_for_llm(
                    "no correct Triton module yet and the last LLM reply gave none to "
                    "evaluate (docs/llm.md); asking again later"
                )
                return None
            self.note = "knob space exhausted"
            return None
        if not self._claim(candidate, suggestion):
            return self.step()  # another process took it a moment ago: it is pending now
        row = self.evaluate(candidate)
        self._policy.observe(suggestion, _as_policy_trial(row))
        self.store.save_policy_state(
            self.spec.name,
            self.spec.generation,
            self.fingerprint,
            self.settings.policy,
            self._policy.to_dict(),
        )
        self._hardware_feedback()
        return row

    def run(self) -> CampaignSummary:
        """Step until finished; the summary covers every evaluation in the store."""
        while self.step() is not None:
            pass
        return self.summary()

    def rewrite(self, strategy: str, parent_id: str | None = None) -> TrialRow | None:
        """One LLM rewrite of ``parent_id`` (default: the incumbent) under ``strategy``,
        evaluated like every candidate, outside the bandit (no arm is credited).

        ``None`` when no LLM is configured, the strategy is not offered, the parent has no
        successful evaluation, or the reply held nothing to evaluate (the attempt log says
        why)."""
        trials = self._trials()
        incumbent = self._incumbent()
        wanted = parent_id or (None if incumbent is None else incumbent.id)
        row = next((t for t in trials if t.candidate_id == wanted), None)
        if row is None or row.result.outcome is not Outcome.OK:
            return None
        suggestion = Suggestion(
            knobs=row.knobs, strategy=llm_strategy_name(strategy), parent_id=row.candidate_id
        )
        candidate = self._propose(suggestion, trials, {})
        return None if candidate is None else self.evaluate(candidate)

    # -- batches: tuned.pipeline compiles them ahead while the GPU evaluates one at a time

    def propose_batch(
        self, size: int, pending: Sequence[Suggestion] = ()
    ) -> list[tuple[Suggestion, Candidate]]:
        """Up to ``size`` more candidates, chosen now and evaluated later, with ``pending``
        (chosen earlier, not observed yet) counted as pulls in flight
        (:func:`policies.propose_batch`); observe each with :meth:`observe` once evaluated.

        Empty when the baseline has no result yet (:meth:`step` evaluates it), when the
        campaign is finished (``self.note`` says why), or when the budget is taken up by what
        is evaluated and pending. An LLM suggestion whose reply held nothing to evaluate is
        observed as a pull without reward and leaves a gap in the batch.
        """
        trials = self._trials()
        baseline = next((t for t in trials if t.provenance is Provenance.ORIGINAL), None)
        if baseline is None:
            return []
        if baseline.result.outcome is not Outcome.OK:
            self.note = (
                f"the original fails ({baseline.result.outcome.value}: "
                f"{baseline.result.reason}); fix the entry, nothing was tuned"
            )
            return []
        done = sum(1 for t in trials if t.provenance is not Provenance.ORIGINAL)
        if self.settings.budget is not None:
            size = min(size, self.settings.budget - done - len(pending))
        if size <= 0:
            return []
        if self._policy is None:
            self._policy = self._load_policy()
        rng = np.random.default_rng([self.settings.seed, len(trials), len(pending)])
        known = self.hardware.metrics(self.spec) if self.hardware is not None else {}
        if known and isinstance(self._policy, HierarchicalPolicy):
            self._policy.update_metrics(known)
        policy_trials = [_as_policy_trial(t, known.get(t.candidate_id)) for t in trials]
        self._offer_llm_arms(trials=trials, known=known)
        space = self._space()
        out = self._taken_over(size)  # fleet mode: work a dead process left goes first
        elsewhere = self._claimed_elsewhere()
        batch = propose_batch(
            self._policy,
            space,
            policy_trials,
            rng,
            size - len(out),
            pending=[*pending, *(s for s, _ in out), *elsewhere],
        )
        if not batch and not pending and not elsewhere and not out:
            self.note = "knob space exhausted"
        for suggestion in batch:
            candidate = self._propose(suggestion, trials, known)
            if candidate is None:
                self._policy.observe(suggestion, _nothing_evaluated(suggestion))
                continue
            if self._claim(candidate, suggestion):  # else: just claimed elsewhere, pending
                out.append((suggestion, candidate))
        return out

    def observe(self, suggestion: Suggestion, row: TrialRow) -> None:
        """Credit the policy with the evaluated ``row`` of a batch's ``suggestion`` and save
        its state (what :meth:`step` does after its own evaluation)."""
        if self._policy is None:
            self._policy = self._load_policy()
        self._policy.observe(suggestion, _as_policy_trial(row))
        self.store.save_policy_state(
            self.spec.name,
            self.spec.generation,
            self.fingerprint,
            self.settings.policy,
            self._policy.to_dict(),
        )
        self._hardware_feedback()

    def likely_next(
        self,
        limit: int,
        pending: Sequence[Suggestion] = (),
        exclude: Collection[str] = (),
    ) -> list[Candidate]:
        """Up to ``limit`` candidates the policy is likely to propose soon, for speculative
        compiles (:mod:`tuned.pipeline`). First what a copy of the policy proposes now,
        with ``pending`` in flight (the real policy proposes the same unless the next
        results change its mind; its LLM arms are left out: they cost tokens), then the
        unevaluated one-step neighbours (one knob moved to the next or previous value of
        its list) and twin-knob swaps of the fastest evaluated candidates. A knob move keeps
        its parent's module, so the ids agree with the candidates proposed later.
        ``exclude``: candidate ids not to return (in flight, or already speculated). A
        guess, never a decision: the policy's state is not touched."""
        if limit <= 0 or self._policy is None:
            return []
        trials = self._trials()
        knobs = self._knobs(trials)
        if not knobs:
            return []
        space = self._space()
        skip = {t.candidate_id for t in trials} | set(exclude)
        out = self._policy_guess(copy.deepcopy(self._policy), limit, pending, trials, space, skip)
        if len(out) >= limit:
            return out
        fastest = sorted(
            (t for t in trials if t.result.outcome is Outcome.OK and t.result.time_s),
            key=lambda t: float(t.result.time_s or 0.0),
        )
        for t in fastest[:SPECULATION_PARENTS]:
            parent = self.store.candidate(t.candidate_id, self.spec.generation)
            if parent is None:
                continue
            for config in _one_step_moves(parent.knobs, knobs):
                if not space.admits(config):
                    continue
                candidate = Candidate(
                    kernel=self.spec.name,
                    generation=self.spec.generation,
                    source=parent.source,
                    knobs=config,
                    provenance=Provenance.PARAMETRIC,
                    strategy="speculative",
                    parent_id=parent.id,
                )
                if candidate.id in skip:
                    continue
                skip.add(candidate.id)
                out.append(candidate)
                if len(out) >= limit:
                    return out
        return out

    def likely_first(self, limit: int) -> list[Candidate]:
        """Before the baseline has a result: up to ``limit`` candidates the policy is likely
        to propose first, for speculative compiles while the baseline is measured
        (:mod:`tuned.pipeline`). The policy's first proposals do not depend on the baseline's
        time (no arm has been pulled: every reward is still relative to nothing), so a
        provisional baseline result stands in for the real one; the first batch proposed
        after the baseline is the guess's first (tested). Empty once the baseline has a
        result, for a reference entry (its first module is the LLM's), or when nothing can
        be guessed. A guess, never a decision: nothing is recorded."""
        if limit <= 0 or self.spec.reference_only:
            return []
        trials = self._trials()
        if any(t.provenance is Provenance.ORIGINAL for t in trials):
            return []
        try:
            policy = self._load_policy()
        except Exception:  # a guess: never let it stop the real work
            log.debug("%s: no policy for a first guess", self.spec.name, exc_info=True)
            return []
        provisional = _trial_row(
            self._baseline_candidate(), EvalResult(Outcome.OK, time_s=1.0), wall_s=0.0
        )
        rows = [*trials, provisional]
        skip = {t.candidate_id for t in rows}
        return self._policy_guess(policy, limit, (), rows, self._space(), skip)

    def _policy_guess(
        self,
        policy: Policy,
        limit: int,
        pending: Sequence[Suggestion],
        trials: list[TrialRow],
        space: SearchSpace,
        skip: set[str],
    ) -> list[Candidate]:
        """:meth:`likely_next`'s first part: ``policy`` (a copy: it is changed) asked for a
        batch, as :meth:`propose_batch` would ask the real one."""
        # propose_batch's own seed and inputs: with no new result in between, the policy's
        # next proposal is the guess's first.
        rng = np.random.default_rng([self.settings.seed, len(trials), len(pending)])
        known = self.hardware.metrics(self.spec) if self.hardware is not None else {}
        policy_trials = [_as_policy_trial(t, known.get(t.candidate_id)) for t in trials]
        out: list[Candidate] = []
        try:
            batch = propose_batch(policy, space, policy_trials, rng, limit, pending=pending)
        except Exception:  # a guess: never let it stop the real work
            log.debug("%s: no speculative guess", self.spec.name, exc_info=True)
            return out
        for suggestion in batch:
            if llm_base_strategy(suggestion.strategy) is not None:
                continue
            parent = None
            if suggestion.parent_id is not None:
                parent = self.store.candidate(suggestion.parent_id, self.spec.generation)
            candidate = Candidate(
                kernel=self.spec.name,
                generation=self.spec.generation,
                source=self._module_source(trials) if parent is None else parent.source,
                knobs=dict(suggestion.knobs),
                provenance=Provenance.PARAMETRIC,
                strategy="speculative",
                parent_id=suggestion.parent_id,
            )
            if candidate.id not in skip:
                skip.add(candidate.id)
                out.append(candidate)
        return out

    def record(self, candidate: Candidate, result: EvalResult, *, wall_s: float) -> TrialRow:
        """Record ``result`` as ``candidate``'s evaluation without running it in the worker:
        the outcome of a failure found before the GPU (the compile pool's)."""
        self.store.add_candidate(candidate)
        self.store.record_evaluation(
            candidate, self.fingerprint, result, started_at=time.time() - wall_s, wall_s=wall_s
        )
        if self.on_result is not None:
            self.on_result(self.spec, candidate, result, self.summary())
        return _trial_row(candidate, result, wall_s)

    # -- fleet mode: claims on candidates (tuned.store.claims, docs/fleet.md)

    def _claim(self, candidate: Candidate, suggestion: Suggestion) -> bool:
        """Take the lease on evaluating ``candidate`` (always True without claims)."""
        if self.claims is None:
            return True
        self.store.add_candidate(candidate)  # whoever takes the claim over can rebuild it
        return self.store.claim(
            candidate,
            self.fingerprint,
            _suggestion_payload(suggestion),
            owner=self.claims.owner,
            lease_s=self.claims.lease_s,
        )

    def _claimed_elsewhere(self) -> list[Suggestion]:
        """Suggestions other processes are evaluating (live claims): pending for the policy,
        so it neither proposes them again nor loses track of the pulls in flight."""
        if self.claims is None:
            return []
        return [
            _suggestion_from(c.payload)
            for c in self.store.open_claims(
                self.spec.name,
                self.spec.generation,
                self.fingerprint,
                exclude_owner=self.claims.owner,
            )
        ]

    def _take_over(self) -> TrialRow | None:
        """Evaluate one candidate whose claim expired unfinished (its owner died), crediting
        the arm its owner's policy pulled; ``None`` when there is none."""
        if self.claims is None:
            return None
        for claim in self.store.take_over(
            self.spec.name,
            self.spec.generation,
            self.fingerprint,
            owner=self.claims.owner,
            lease_s=self.claims.lease_s,
        ):
            candidate = self.store.candidate(claim.candidate_id, self.spec.generation)
            if candidate is None:  # cannot happen: claims are taken after add_candidate
                continue
            row = self.evaluate(candidate)
            if candidate.provenance is not Provenance.ORIGINAL:
                self.observe(_suggestion_from(claim.payload), row)
            return row
        return None

    def _taken_over(self, limit: int) -> list[tuple[Suggestion, Candidate]]:
        """Up to ``limit`` candidates whose claims expired unfinished, now this process's."""
        if self.claims is None or limit <= 0:
            return []
        out = []
        for claim in self.store.take_over(
            self.spec.name,
            self.spec.generation,
            self.fingerprint,
            owner=self.claims.owner,
            lease_s=self.claims.lease_s,
            limit=limit,
        ):
            candidate = self.store.candidate(claim.candidate_id, self.spec.generation)
            if candidate is not None and candidate.provenance is not Provenance.ORIGINAL:
                out.append((_suggestion_from(claim.payload), candidate))
        return out

    def _wait_for_others(self) -> bool:
        """Wait while other processes hold every open claim of this generation, until one
        finishes or expires (True: decide again) or ``claims.max_wait_s`` passes (False,
        ``self.note`` says why)."""
        assert self.claims is not None
        deadline = time.monotonic() + self.claims.max_wait_s
        seen = len(self._trials())
        while True:
            open_claims = self.store.open_claims(
                self.spec.name,
                self.spec.generation,
                self.fingerprint,
                exclude_owner=self.claims.owner,
            )
            if not open_claims or any(c.expires_in <= 0 for c in open_claims):
                return True
            if len(self._trials()) != seen:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                self.note = (
                    f"waiting for {len(open_claims)} candidate(s) other processes are "
                    "evaluating (fleet mode)"
                )
                return False
            soonest = min(c.expires_in for c in open_claims)
            time.sleep(max(0.01, min(self.claims.poll_s, soonest + 0.01, left)))

    # -- proposals (the parametric move, or the LLM proposer's rewrite)

    def _offer_llm_arms(
        self,
        *,
        masked: bool = False,
        trials: Sequence[TrialRow] | None = None,
        known: Mapping[str, Mapping[str, float]] | None = None,
    ) -> None:
        """Tell the policy which LLM arms are open: none without an LLM, when masked, or
        when the proposer cannot afford a request (the token budget is spent). With
        ``trials``, first ask the LLM for new strategies when that is due (docs/llm.md)."""
        if isinstance(self._policy, HierarchicalPolicy):
            if not masked and self.llm is not None and trials is not None:
                self._refresh_strategies(trials, known or {})
            offered = () if masked or self.llm is None else self.llm.open_strategies(self.spec)
            self._policy.set_llm_strategies(offered)

    def _refresh_strategies(
        self, trials: Sequence[TrialRow], known: Mapping[str, Mapping[str, float]]
    ) -> None:
        """Have the proposer ask for new strategies if due, describing the best version."""
        assert self.llm is not None
        if self.llm.strategy_request_due(self.spec) is None:
            return
        from tuned.llm.proposer import ParentInfo

        incumbent = self._incumbent()
        rows = {t.candidate_id: t for t in trials}
        row = None if incumbent is None else rows.get(incumbent.id)
        baseline = next((t for t in trials if t.provenance is Provenance.ORIGINAL), None)
        best = None
        if incumbent is not None:
            best = ParentInfo(
                candidate=incumbent,
                time_s=None if row is None else row.result.time_s,
                timing_kind="" if row is None else row.result.timing_kind,
                profile=known.get(incumbent.id),
            )
        self.llm.refresh_strategies(
            self.spec, best, baseline_time_s=None if baseline is None else baseline.result.time_s
        )

    def _propose(
        self,
        suggestion: Suggestion,
        trials: list[TrialRow],
        known: Mapping[str, Mapping[str, float]],
    ) -> Candidate | None:
        """The candidate of ``suggestion``: a knob move of its parent's module, or for an LLM
        arm (strategy ``llm:<name>``) the LLM's rewrite of the parent (``None``: the reply
        held nothing to evaluate)."""
        parent = None
        if suggestion.parent_id is not None:
            parent = self.store.candidate(suggestion.parent_id, self.spec.generation)
        base = llm_base_strategy(suggestion.strategy)
        if base is None:
            return Candidate(
                kernel=self.spec.name,
                generation=self.spec.generation,
                # A move from an LLM-written parent keeps the parent's code.
                source=self._module_source(trials) if parent is None else parent.source,
                knobs=dict(suggestion.knobs),
                provenance=Provenance.PARAMETRIC,
                strategy=suggestion.strategy,
                parent_id=suggestion.parent_id,
            )
        strategy = None if self.llm is None else self.llm.strategy_named(base, self.spec.name)
        if parent is None or strategy is None or self.llm is None:
            return None
        from tuned.llm.proposer import ParentInfo

        rows = {t.candidate_id: t for t in trials}
        parent_row = rows.get(parent.id)
        baseline = next((t for t in trials if t.provenance is Provenance.ORIGINAL), None)
        proposal = self.llm.propose(
            self.spec,
            ParentInfo(
                candidate=parent,
                time_s=None if parent_row is None else parent_row.result.time_s,
                timing_kind="" if parent_row is None else parent_row.result.timing_kind,
                profile=known.get(parent.id),
            ),
            strategy,
            baseline_time_s=None if baseline is None else baseline.result.time_s,
            known=lambda cid: self.store.candidate(cid, self.spec.generation) is not None,
        )
        return proposal.candidate

    # -- steps

    def _trials(self) -> list[TrialRow]:
        return self.store.trials(self.spec.name, self.spec.generation, self.fingerprint)

    # -- reference entries (kind: reference): no Triton module until the LLM writes one

    def _seed_of(self, trials: Sequence[TrialRow] | None = None) -> Candidate | None:
        """A reference entry's *seed*: its first LLM-written module that evaluated correctly
        (``None``: none yet). Its launcher signature is kept by later rewrites, its
        discovered knobs are the space of parametric moves."""
        if self._seed is not None or not self.spec.reference_only:
            return self._seed
        for t in self._trials() if trials is None else trials:
            if t.provenance is Provenance.LLM and t.result.outcome is Outcome.OK:
                self._seed = self.store.candidate(t.candidate_id, self.spec.generation)
                break
        return self._seed

    def _knobs(
        self, trials: Sequence[TrialRow] | None = None
    ) -> Mapping[str, tuple[KnobValue, ...]]:
        """The knob space: the entry's, or for a reference entry its seed's discovered knobs
        (none before a seed, or when discovery finds none: LLM arms only)."""
        if not self.spec.reference_only:
            return self.spec.knobs
        seed = self._seed_of(trials)
        if seed is None:
            return {}
        from tuned.llm.proposer import module_knobs

        return module_knobs(seed.source, self.spec.launcher)[0]

    def _module_source(self, trials: Sequence[TrialRow] | None = None) -> str:
        """The module a parametric move without a parent runs: the entry's, or a reference
        entry's seed."""
        seed = self._seed_of(trials) if self.spec.reference_only else None
        return self.spec.module_source if seed is None else seed.source

    def _waiting_for_llm(self, trials: Sequence[TrialRow]) -> str:
        """Why a reference entry cannot go on without the LLM now ("" when it can: it has a
        seed, or the LLM may be asked)."""
        if self._seed_of(trials) is not None:
            return ""
        if self.llm is None:
            return (
                "no LLM is configured (llm.base_url, llm.model): a reference entry waits for "
                "one to write its first Triton module"
            )
        if not self.llm.open_strategies(self.spec):
            why = self.llm.paused_reason or "its token budget cannot cover one more request"
            return f"the LLM cannot be asked now ({why}); waiting"
        return ""

    def _wait_for_llm(self, reason: str) -> None:
        self.needs_llm = reason
        self.note = f"needs_llm: {reason}"
        if not self._marked_needs_llm:
            self.store.set_kernel_state(self.spec.name, "needs_llm", reason)
            self._marked_needs_llm = True

    def _llm_resumed(self) -> None:
        if self._marked_needs_llm:
            self.store.set_kernel_state(self.spec.name, "active", "")
            self._marked_needs_llm = False

    def _reference_baseline(self) -> TrialRow:
        """Measure a reference entry's baseline, the faster of eager PyTorch and
        ``torch.compile`` (:mod:`tuned.llm.reference`), and record it as the original."""
        from tuned.llm.reference import baseline_source, measure_reference

        s = self.client.settings
        result, wall = measure_reference(
            self.spec,
            workdir=self.client.workdir.parent / "reference",
            interpreter=s.interpreter,
            seeds=s.seeds,
            interpreter_max_size=s.interpreter_max_size,
            timing=dataclasses.asdict(s.timing),
            compile_reference=self.llm is not None and self.llm.settings.compile_reference,
            timeout_s=s.startup_timeout_s + s.compile_timeout_s + s.benchmark_timeout_s,
        )
        impl = str(result.metadata.get("reference_baseline", {}).get("impl", "eager"))
        candidate = replace(self._baseline_candidate(), source=baseline_source(self.spec, impl))
        return self.record(candidate, result, wall_s=wall)

    def _baseline_candidate(self) -> Candidate:
        if self.spec.reference_only:
            trials = self._trials()
            row = next((t for t in trials if t.provenance is Provenance.ORIGINAL), None)
            if row is not None:
                stored = self.store.candidate(row.candidate_id, self.spec.generation)
                if stored is not None:
                    return stored
            from tuned.llm.reference import baseline_source

            return Candidate(
                kernel=self.spec.name,
                generation=self.spec.generation,
                source=baseline_source(self.spec, "eager"),
                knobs={},
                provenance=Provenance.ORIGINAL,
                strategy="original",
            )
        return Candidate(
            kernel=self.spec.name,
            generation=self.spec.generation,
            source=self.spec.module_source,
            knobs=dict(self.spec.baseline_knobs),
            provenance=Provenance.ORIGINAL,
            strategy="original",
        )

    def evaluate(
        self, candidate: Candidate, *, phases: Mapping[str, float] | None = None
    ) -> TrialRow:
        """Record, evaluate and store one candidate (the path every candidate takes).

        A correct candidate is timed interleaved with the incumbent; if it looks faster, the
        acceptance rule (:mod:`tuned.acceptance`) decides, re-measuring it in a fresh worker.
        ``phases``: seconds the candidate spent before the worker (compile pool, queue), kept
        with the worker's own in the result's ``phase_seconds``.

        In three parts for a pipeline with several GPUs (:mod:`tuned.pipeline`): what needs
        the store before (:meth:`prepare`, this thread), the measurement on a GPU's worker
        (:meth:`Prepared.measure`, any thread: it touches its client alone), and what needs
        the store after (:meth:`finish`, this thread again).
        """
        prepared = self.prepare(candidate, phases=phases)
        return self.finish(prepared, prepared.measure(self.client))

    def prepare(
        self, candidate: Candidate, *, phases: Mapping[str, float] | None = None
    ) -> Prepared:
        """Record ``candidate`` and fix what its measurement needs (the incumbent to time it
        against, the derived shapes to skip, the static gate's verdict)."""
        self.store.add_candidate(candidate)
        incumbent = None
        if candidate.provenance is not Provenance.ORIGINAL:
            incumbent = self._incumbent()
        return self._prepared(candidate, incumbent, phases=phases)

    def finish(
        self, prepared: Prepared, result: EvalResult, *, client: WorkerClient | None = None
    ) -> TrialRow:
        """Store the measured ``result`` and apply the acceptance rule; a re-measurement
        runs on ``client`` (the worker of the GPU that measured it; default: the campaign's)."""
        result = self._record(prepared, result)
        incumbent = prepared.incumbent
        if incumbent is not None and result.outcome is Outcome.OK:
            client = client or self.client
            current = self._incumbent()
            if current is not None and current.id != incumbent.id:
                # Another GPU's candidate became the best while this one was measured: if
                # it looked faster than the old best, time it again against the new one.
                first = _interval(result, self.acceptance, self.settings.seed)
                if first is None or decide(first, self.acceptance) == "not_significant":
                    incumbent = None
                else:
                    incumbent = current
                    again = self._prepared(prepared.candidate, current, remeasure=True)
                    result = self._record(again, again.measure(client))
            if incumbent is not None and result.outcome is Outcome.OK:
                self._judge(prepared.candidate, incumbent, result, client)
        if self.on_result is not None:
            self.on_result(self.spec, prepared.candidate, result, self.summary())
        return _trial_row(prepared.candidate, result, prepared.wall_s)

    def _prepared(
        self,
        candidate: Candidate,
        incumbent: Candidate | None,
        *,
        remeasure: bool = False,
        phases: Mapping[str, float] | None = None,
    ) -> Prepared:
        original = candidate.provenance is Provenance.ORIGINAL
        # LLM-written modules pass the full static gate first (tuned.llm.gate); a reference
        # entry's later modules keep its seed's launcher signature.
        seed = self._seed_of() if self.spec.reference_only else None
        original_source = None if seed is None else seed.source
        return Prepared(
            spec=self.spec,
            candidate=candidate,
            incumbent=incumbent,
            gate=gate_result(self.spec, candidate, original_source=original_source),
            derived_skip=() if original else tuple(self._derived_unusable()),
            lenient_derived=original,
            remeasure=remeasure,
            phases=dict(phases or {}),
        )

    def _record(self, prepared: Prepared, result: EvalResult) -> EvalResult:
        if prepared.remeasure:
            result = replace(result, metadata={**result.metadata, "remeasure": True})
        if prepared.phases:
            result = replace(result, phase_seconds={**prepared.phases, **result.phase_seconds})
        self.store.record_evaluation(
            prepared.candidate,
            self.fingerprint,
            result,
            started_at=prepared.started_at,
            wall_s=prepared.wall_s,
        )
        return result

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

    def _judge(
        self, candidate: Candidate, incumbent: Candidate, result: EvalResult, client: WorkerClient
    ) -> None:
        first = _interval(result, self.acceptance, self.settings.seed)
        if first is None:
            return
        status = decide(first, self.acceptance)
        second = None
        first_record: dict[str, object] = dict(first.to_dict())
        if status in ("remeasure", "accepted"):
            floor = self._below_roofline_floor(result)
            if floor is not None:
                status, first_record["held_reason"] = "held", floor
        if status == "remeasure":
            client.fresh()  # the next evaluation runs in a fresh worker
            prepared = self._prepared(candidate, incumbent, remeasure=True)
            again = self._record(prepared, prepared.measure(client))
            second = _interval(again, self.acceptance, self.settings.seed + 1)
            status = "not_confirmed" if second is None else decide(first, self.acceptance, second)
        if status == "not_significant":
            return
        self.store.record_acceptance(
            candidate,
            self.fingerprint,
            incumbent_id=incumbent.id,
            status=status,
            first=first_record,
            second=None if second is None else second.to_dict(),
        )

    def _below_roofline_floor(self, result: EvalResult) -> str | None:
        """Why a GPU timing is faster than the hardware allows (``None``: it is not, or no
        roofline/peaks are known): some timed case implies more than ``roofline_hold`` x the
        measured peak bandwidth or FLOP rate of this GPU model."""
        roof = self.spec.roofline
        if roof is None or result.timing_kind != "gpu":
            return None
        model = self.store.fingerprint(self.fingerprint).get("gpu_model", "")
        stored = self.store.peaks(model) if model else None
        if stored is None:
            return None
        peaks = Peaks.from_dict(stored)
        for shape in self.spec.shapes:
            for dtype in self.spec.dtypes:
                label = case_label(shape.dims, dtype)
                seconds = result.timings.get(label)
                if seconds is None or not seconds > 0:
                    continue
                point = roofline_point(
                    bytes_expr=roof.bytes,
                    flops_expr=roof.flops,
                    dims=shape.dims,
                    dtype=dtype,
                    time_s=seconds,
                    peak_bytes_per_s=peaks.bytes_per_s,
                    peak_flops_per_s=peaks.flops_per_s,
                )
                if point is not None and point.fraction > self.acceptance.roofline_hold:
                    return (
                        f"{label}: {seconds * 1e6:.3g} us is {point.fraction:.2f}x the "
                        f"{model} roofline (measured peaks), above the "
                        f"{self.acceptance.roofline_hold:g}x hold threshold"
                    )
        return None

    def _space(self) -> SearchSpace:
        """The knob space; an evaluator that knows which configurations exist (a replay of a
        recorded cache: ``admits``) restricts it, so no evaluation is spent outside it."""
        admits = getattr(self.client, "admits", None)
        return SearchSpace(knobs=self._knobs(), is_valid=admits if callable(admits) else None)

    def _load_policy(self) -> Policy:
        state = self.store.policy_state(
            self.spec.name, self.spec.generation, self.fingerprint, self.settings.policy
        )
        cls = POLICIES.get(self.settings.policy)
        if isinstance(cls, type) and issubclass(cls, HierarchicalPolicy):
            settings = cls.default_settings
            if self.masks is not None:
                settings = replace(settings, masks=self.masks)
            if state:
                return cls.from_dict(state, settings=settings)
            return cls(settings=settings, prior=self._peer_prior())
        if state is not None:
            return restore_policy(self.settings.policy, state)
        return make_policy(self.settings.policy)

    def _peer_prior(self) -> dict[str, tuple[float, float]]:
        """Strategy statistics of the kernels that behave like this one (design.md,
        "Clustering"): every kernel with a measured original on this fingerprint is
        summarized by its original's runtime features (latency, and compile metadata on a
        GPU: like is compared with like, a kernel tuned for a week and one just measured
        alike), the kernels are clustered, and this kernel's new arms start from its cluster
        peers' pooled (pulls, reward) per strategy (:func:`clustering.kernels.peer_prior`).
        Empty while the kernel has fewer peers than clusters."""
        rows_by_kernel: dict[str, list[dict[str, float]]] = {}
        for row in self.store.kernels():
            generation = self.spec.generation if row.name == self.spec.name else row.generation
            trials = self.store.trials(row.name, generation, self.fingerprint)
            rows = [
                feature_row(float(t.result.time_s), _as_policy_trial(t).metrics)
                for t in trials
                if t.provenance is Provenance.ORIGINAL
                and t.result.outcome is Outcome.OK
                and t.result.time_s
            ]
            if rows:
                rows_by_kernel[row.name] = rows
        if self.spec.name not in rows_by_kernel or len(rows_by_kernel) < 2:
            return {}
        clusters = cluster_kernels(rows_by_kernel, seed=self.settings.seed)
        stats: dict[str, dict[str, tuple[float, float]]] = {}
        for (kernel, strategy), (pulls, reward) in self.store.evaluation_totals().arms.items():
            stats.setdefault(kernel, {})[strategy] = (float(pulls), float(reward))
        prior = peer_prior(self.spec.name, clusters, stats)
        if prior:
            log.info(
                "%s: strategy arms start from %d peer kernel(s)' statistics",
                self.spec.name,
                sum(1 for k, c in clusters.items() if c == clusters[self.spec.name]) - 1,
            )
        return prior

    def _hardware_feedback(self) -> None:
        """Profiles and roofline figures of the candidates whose hardware figures matter: the
        incumbent (the baseline at first), then each cluster's representative (its profile
        decides the cluster's masks). Cached per candidate and GPU model, so each is taken
        once; :class:`~tuned.profiling.HardwareFeedback` bounds the runs per step."""
        if self.hardware is None:
            return
        trials = {t.candidate_id: t for t in self._trials()}
        wanted: list[str] = []
        incumbent = self.store.incumbent(self.spec.name, self.spec.generation, self.fingerprint)
        baseline = next((t for t in trials.values() if t.provenance is Provenance.ORIGINAL), None)
        wanted.append(incumbent or (baseline.candidate_id if baseline else ""))
        if isinstance(self._policy, HierarchicalPolicy):
            wanted += self._policy.representatives().values()
        rows = [trials[cid] for cid in dict.fromkeys(wanted) if cid in trials]
        self.hardware.refresh(self.spec, self.fingerprint, rows)

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
    """The acceptance interval of ``result`` against the incumbent it was timed with;
    ``None`` when it was not timed against one, or when its point estimate is below the bar
    (not significant whatever its interval, :func:`~tuned.acceptance.decide`: the bootstrap
    is skipped)."""
    samples = result.metadata.get("samples") or {}
    incumbent = result.metadata.get("incumbent_samples") or {}
    if result.outcome is not Outcome.OK or not incumbent:
        return None
    if speedup_point(samples, incumbent) < 1.0 + settings.min_gain:
        return None
    return speedup_interval(samples, incumbent, np.random.default_rng(seed), settings)


#: Parents whose neighbourhoods :meth:`Campaign.likely_next` offers (the fastest first).
SPECULATION_PARENTS = 3


def _one_step_moves(
    config: Mapping[str, KnobValue], knobs: Mapping[str, Sequence[KnobValue]]
) -> list[dict[str, KnobValue]]:
    """Every configuration one knob step from ``config`` (next or previous value in the
    knob's list), then those with the values of two twin knobs (the same value list)
    exchanged."""
    out: list[dict[str, KnobValue]] = []
    for name, values in knobs.items():
        if config.get(name) not in values:
            continue
        at = list(values).index(config[name])
        for j in (at - 1, at + 1):
            if 0 <= j < len(values):
                out.append({**config, name: values[j]})
    names = list(knobs)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            twins = list(knobs[a]) == list(knobs[b])
            if twins and a in config and b in config and config[a] != config[b]:
                out.append({**config, a: config[b], b: config[a]})
    return out


def _suggestion_payload(suggestion: Suggestion) -> dict[str, object]:
    """``suggestion`` as a claim's JSON payload (:func:`_suggestion_from` reads it back)."""
    return {
        "knobs": dict(suggestion.knobs),
        "strategy": suggestion.strategy,
        "parent_id": suggestion.parent_id,
        "arm": suggestion.arm,
        "parent_time_s": suggestion.parent_time_s,
    }


def _suggestion_from(payload: Mapping[str, Any]) -> Suggestion:
    return Suggestion(
        knobs=dict(payload.get("knobs") or {}),
        strategy=str(payload.get("strategy") or "config"),
        parent_id=payload.get("parent_id"),
        arm=payload.get("arm"),
        parent_time_s=payload.get("parent_time_s"),
    )


def _nothing_evaluated(suggestion: Suggestion) -> Trial:
    """The policy's view of an LLM pull whose reply held nothing to evaluate: a failure."""
    return Trial(
        candidate_id="",
        knobs=suggestion.knobs,
        outcome="no_candidate",
        time_s=None,
        strategy=suggestion.strategy,
        parent_id=suggestion.parent_id,
    )


def _trial_row(candidate: Candidate, result: EvalResult, wall_s: float) -> TrialRow:
    """The row :meth:`Store.trials` would return for ``candidate`` just recorded."""
    return TrialRow(
        candidate_id=candidate.id,
        knobs=candidate.knobs,
        provenance=candidate.provenance,
        strategy=candidate.strategy,
        parent_id=candidate.parent_id,
        source_hash="",
        result=result,
        wall_s=wall_s,
    )


def _as_policy_trial(row: TrialRow, profile: Mapping[str, float] | None = None) -> Trial:
    """The policy's view of a stored trial: its compile metadata (registers, spills, shared
    memory, warps, stages: GPU only) merged with ``profile``, its profile metrics if profiled."""
    return Trial(
        candidate_id=row.candidate_id,
        knobs=row.knobs,
        outcome=row.result.outcome.value,
        time_s=row.result.time_s,
        strategy=row.strategy or row.provenance.value,
        parent_id=row.parent_id,
        metrics=merge_metrics(row.result.metadata.get("compile") or {}, profile or {}),
    )
