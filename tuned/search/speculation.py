"""Speculation: candidates the policy is likely to propose soon, compiled ahead by
:mod:`tuned.pipeline`. Guesses, never decisions: the policy's state is not touched.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Collection, Mapping, Sequence

import numpy as np

from policies import (
    Policy,
    SearchSpace,
    Suggestion,
    propose_batch,
)
from policies.strategies import llm_base_strategy
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.registry.spec import KnobValue
from tuned.search.base import as_policy_trial, trial_row
from tuned.search.proposals import ProposingCampaign
from tuned.store.base import TrialRow

log = logging.getLogger(__name__)


class SpeculatingCampaign(ProposingCampaign):
    """Guesses of the next candidates."""

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

    def original_ahead(self) -> Candidate | None:
        """The original, for the pool to compile while other kernels are measured
        (:meth:`tuned.pipeline.CampaignPipeline.run_all`): the GPU worker measures it itself,
        and without this compiled every kernel of it there (on the H200, Liger's DyT: 12.6 s
        of compile phase, its autotuner's configs one after another). ``None`` once it has a
        result, and for a reference entry (its baseline is PyTorch's)."""
        if self.spec.reference_only:
            return None
        if any(t.provenance is Provenance.ORIGINAL for t in self._trials()):
            return None
        return self._baseline_candidate()

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
        provisional = trial_row(
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
        policy_trials = [as_policy_trial(t, known.get(t.candidate_id)) for t in trials]
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
