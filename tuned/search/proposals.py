"""Proposals: the candidate of a policy suggestion, a knob move of its parent's module or the
LLM proposer's rewrite, and the LLM arms offered to the policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies import (
    Suggestion,
)
from policies.strategies import llm_base_strategy
from tuned.outcomes import Candidate, Provenance
from tuned.search.claims import ClaimingCampaign
from tuned.store.base import TrialRow


class ProposingCampaign(ClaimingCampaign):
    """Suggestions made into candidates."""

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
        if self._policy is not None and self._policy.llm_arms:
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
