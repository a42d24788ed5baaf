"""The campaign's state and what every part of it reads back from the store: the trials, the
incumbent, the knob space, the policy (created or restored) and the summary.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

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
    restore_policy,
)
from policies.masks import MaskSettings
from tuned.acceptance import (
    AcceptanceSettings,
)
from tuned.evaluation.evaluator import Evaluator
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.profiling import HardwareFeedback, merge_metrics
from tuned.registry.spec import KernelSpec, KnobValue
from tuned.store.api import Store
from tuned.store.base import TrialRow
from tuned.store.claims import ClaimSettings

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # the LLM client is imported only where an LLM is configured
    from tuned.llm.proposer import LlmProposer


@dataclass(frozen=True)
class TuneSettings:
    """``budget``: evaluated candidates (besides the baseline) each kernel generation should
    have on this machine's fingerprint; a rerun continues up to it. ``None``: no limit (the
    daemon), until the knob space is exhausted. ``deadline``: a :func:`time.monotonic` time
    after which no campaign proposes or starts anything more (``ktuned tune --time-limit``):
    what is in flight finishes, and the run ends as if every budget were reached."""

    budget: int | None
    policy: str = DEFAULT_POLICY
    seed: int = 0
    deadline: float | None = None

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


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
    #: The best's speedup over the original as measured side by side (BestRow.speedup,
    #: :mod:`tuned.store.speedups`), never ``baseline_s / best_s`` (two moments).
    measured_speedup: float | None = None

    @property
    def speedup(self) -> float | None:
        return self.measured_speedup

    @property
    def failures(self) -> dict[str, int]:
        return {k: v for k, v in sorted(self.outcomes.items()) if k != Outcome.OK.value}


OnResult = Callable[[KernelSpec, Candidate, EvalResult, "CampaignSummary"], None]


class CampaignBase:
    """State of one campaign (:class:`~tuned.search.Campaign`) and its reads of the store."""

    def __init__(
        self,
        *,
        spec: KernelSpec,
        store: Store,
        client: Evaluator,
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
        self._retired: set[str] = set()  # notes of retired knobs already logged
        self._marked_needs_llm = False

    def _trials(self) -> list[TrialRow]:
        return self.store.trials(self.spec.name, self.spec.generation, self.fingerprint)

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
            return self._unretired(trials)
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

    def _baseline_candidate(self) -> Candidate:
        if self.spec.reference_only:
            trials = self._trials()
            row = next((t for t in trials if t.provenance is Provenance.ORIGINAL), None)
            if row is not None:
                stored = self.store.candidate(row.candidate_id, self.spec.generation)
                if stored is not None:
                    return stored
            from tuned.evaluation.reference import baseline_source

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

    def _incumbent(self) -> Candidate | None:
        cid = self.store.incumbent(self.spec.name, self.spec.generation, self.fingerprint)
        if cid is not None:
            return self.store.candidate(cid, self.spec.generation)
        return self._baseline_candidate()

    def _unretired(
        self, trials: Sequence[TrialRow] | None = None
    ) -> Mapping[str, tuple[KnobValue, ...]]:
        """The entry's space, a discovered knob that fails correctness on most of the values
        tried pinned to its baseline (:func:`tuned.registry.retirement.retired_knobs`, logged
        once). Declared knobs are the user's word: never retired."""
        if self.spec.knobs_declared or not self.spec.knobs:
            return self.spec.knobs
        from tuned.registry.retirement import retired_knobs

        rows = self._trials() if trials is None else trials
        moves = [
            (t.knobs, t.result.outcome.value)
            for t in rows
            if t.provenance is Provenance.PARAMETRIC  # knob moves of the original's code
        ]
        space, notes = retired_knobs(self.spec.knobs, self.spec.baseline_knobs, moves)
        for note in notes:
            if note not in self._retired:
                self._retired.add(note)
                log.info("%s: %s", self.spec.name, note)
        return space

    def _space(self, trials: Sequence[TrialRow] | None = None) -> SearchSpace:
        """The knob space; an evaluator that knows which configurations exist (a replay of a
        recorded cache: ``admits``) restricts it, so no evaluation is spent outside it."""
        admits = getattr(self.client, "admits", None)
        return SearchSpace(knobs=self._knobs(trials), is_valid=admits if callable(admits) else None)

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
                feature_row(float(t.result.time_s), as_policy_trial(t).metrics)
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
        if self._policy is not None:
            wanted += self._policy.representatives().values()
        rows = [trials[cid] for cid in dict.fromkeys(wanted) if cid in trials]
        self.hardware.refresh(self.spec, self.fingerprint, rows)

    def observe(self, suggestion: Suggestion, row: TrialRow) -> None:
        """Credit the policy with the evaluated ``row`` of a batch's ``suggestion`` and save
        its state (what :meth:`step` does after its own evaluation)."""
        if self._policy is None:
            self._policy = self._load_policy()
        self._policy.observe(suggestion, as_policy_trial(row))
        self.store.save_policy_state(
            self.spec.name,
            self.spec.generation,
            self.fingerprint,
            self.settings.policy,
            self._policy.to_dict(),
        )
        self._hardware_feedback()

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
            summary.measured_speedup = best.speedup
            summary.best_knobs = dict(best.knobs)
            summary.timing_kind = best.timing_kind
        return summary


def trial_row(candidate: Candidate, result: EvalResult, wall_s: float) -> TrialRow:
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


def nothing_evaluated(suggestion: Suggestion) -> Trial:
    """The policy's view of an LLM pull whose reply held nothing to evaluate: a failure."""
    return Trial(
        candidate_id="",
        knobs=suggestion.knobs,
        outcome="no_candidate",
        time_s=None,
        strategy=suggestion.strategy,
        parent_id=suggestion.parent_id,
    )


def as_policy_trial(row: TrialRow, profile: Mapping[str, float] | None = None) -> Trial:
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
