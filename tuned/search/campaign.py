"""Tuning one kernel generation on one machine: baseline, then policy-chosen candidates.

Resumable by construction: everything is read back from the store, a candidate is recorded
before it is evaluated and its result after, and the random generator of step ``n`` is seeded
from ``(seed, n)``. A killed run, started again, evaluates exactly the candidates that have no
result yet, and never one that has.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from policies import (
    Suggestion,
    propose_batch,
)
from policies.strategies import llm_strategy_name
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.search.base import CampaignSummary, as_policy_trial, nothing_evaluated
from tuned.search.speculation import SpeculatingCampaign
from tuned.store.base import TrialRow

#: What Triton's interpreter says when an autotuner with several configs benchmarks them.
_NO_DRIVER = "active drivers"
#: A campaign's note when ``TuneSettings.deadline`` passed (``ktuned tune --time-limit``).
_OUT_OF_TIME = "stopped by the time limit after {done} candidate(s); a rerun continues"


def original_fails(outcome: Outcome, reason: str, phase: str = "", module: str = "") -> str:
    """The campaign's note when the original does not run: what to do about it. ``phase``:
    the worker's phase it failed in (``load``: importing the module); ``module``: the module
    the worker's copies are made of (:func:`copy_places`)."""
    reason = copy_places(reason, module)
    if _NO_DRIVER in reason and phase == "load":
        return (
            f"the original fails ({outcome.value}: {reason.strip()}) while its module is "
            "imported: module-level code asks for a GPU driver (e.g. triton.runtime.driver."
            "active.get_active_torch_device(), or a test or benchmark run at import), which "
            "Triton's interpreter does not have: tune this entry on a GPU, or move that code "
            'under `if __name__ == "__main__":`; nothing was tuned'
        )
    if _NO_DRIVER in reason:
        return (
            f"the original fails ({outcome.value}: {reason}); Triton's interpreter cannot "
            "run an autotuner with several configs (benchmarking them needs a GPU driver): "
            "tune this entry on a GPU, or pin one config; nothing was tuned"
        )
    if _INTERPRETER_SCALAR.search(reason):
        return (
            f"the original fails ({outcome.value}: {reason.strip()}); a known limit of "
            "Triton's interpreter, not of the entry: a Python int or float argument that the "
            "kernel uses as a tensor (Liger's and flash-linear-attention's kernels hit it); "
            "tune this entry on a GPU; nothing was tuned"
        )
    where = _installed_location(reason)
    if where is not None:
        package, place = where
        return (
            f"the original fails ({outcome.value}: {reason}); it fails inside the installed "
            f"package {package} ({place}), not in the entry's code: check that {package} runs "
            "here as installed (its supported devices, PyTorch and Triton versions) and that "
            "the entry's inputs are what it expects; nothing was tuned"
        )
    if phase == "load":  # its module (or one it imports) raised while it was imported
        return (
            f"the original fails ({outcome.value}: {reason.strip()}) while its module is "
            "imported: make the module importable here (module-level code that needs a GPU "
            'or runs tests belongs under `if __name__ == "__main__":`); nothing was tuned'
        )
    return f"the original fails ({outcome.value}: {reason}); fix the entry, nothing was tuned"


#: Triton's interpreter on a scalar kernel argument it treats as a tensor (a GPU compiles it).
_INTERPRETER_SCALAR = re.compile(
    r"InterpreterError: AttributeError: '(int|float|bool)' object has no attribute"
)

#: Where a worker's failure reason says it was raised: ``(at /path/file.py:455 in fn)``.
_AT = re.compile(r"\(at (?P<path>[^()]+?\.py):(?P<line>\d+) in (?P<fn>[\w<>.]+)\)")


#: A place in a worker's copy of the tuned module (``ktuned_candidate_<hash>.py``, under the
#: worker's directory: ``/ktuned/modules/...`` in the sandbox).
_COPY_AT = re.compile(
    r"\(at (?P<path>[^()]*?ktuned_candidate_[0-9a-f]+\.py):(?P<line>\d+) in (?P<fn>[\w<>.]+)\)"
)


def copy_places(reason: str, module: str) -> str:
    """``reason`` with each place in a worker's copy said as a line of ``module`` (the entry's
    module file, or an installed module's dotted name): the copy's path is inside the worker's
    directory (the sandbox's ``/ktuned/modules/...``), which nobody outside it can open. A
    copy has the knobs written in, which can add lines: the line is the copy's."""
    if not module:
        return reason
    return _COPY_AT.sub(
        lambda m: f"(at line {m['line']} of ktuned's copy of {module}, in {m['fn']})", reason
    )


#: Packages whose own code raises what their callers got wrong (a shape, a dtype): a failure
#: located there still says "fix the entry".
_FRAMEWORKS = frozenset({"torch", "triton", "numpy"})


def _installed_location(reason: str) -> tuple[str, str] | None:
    """(package, ``package/file.py:line in fn``) when ``reason`` was raised in an installed
    package (under ``site-packages`` or ``dist-packages``; PyTorch, Triton and NumPy aside),
    else None."""
    found = list(_AT.finditer(reason))
    if not found:
        return None
    at = found[-1]
    parts = at["path"].replace("\\", "/").split("/")
    marks = [i for i, p in enumerate(parts) if p in ("site-packages", "dist-packages")]
    if not marks or marks[-1] + 1 >= len(parts):
        return None
    rest = parts[marks[-1] + 1 :]
    package = rest[0].removesuffix(".py")
    if package in _FRAMEWORKS:
        return None
    return package, f"{'/'.join(rest)}:{at['line']} in {at['fn']}"


class Campaign(SpeculatingCampaign):
    """Drives the policy for one kernel, one evaluation per :meth:`step`."""

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
            if self.settings.out_of_time():
                self.note = _OUT_OF_TIME.format(done=0)
                return None
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
            self.note = original_fails(
                baseline.result.outcome,
                baseline.result.reason,
                baseline.result.phase,
                self.spec.installed_module or str(self.spec.directory / self.spec.module),
            )
            return None
        done = sum(1 for t in trials if t.provenance is not Provenance.ORIGINAL)
        if self.settings.budget is not None and done >= self.settings.budget:
            return None
        if self.settings.out_of_time():
            self.note = _OUT_OF_TIME.format(done=done)
            return None
        if self._policy is None:
            self._policy = self._load_policy()
        taken = self._take_over()  # work a dead process left goes first
        if taken is not None:
            return taken
        pending = self._claimed_elsewhere()
        rng = np.random.default_rng([self.settings.seed, len(trials)])
        space = self._space(trials)
        known = self.hardware.metrics(self.spec) if self.hardware is not None else {}
        if known:
            self._policy.update_metrics(known)  # profiles taken since the trials were read
        policy_trials = [as_policy_trial(t, known.get(t.candidate_id)) for t in trials]
        self._offer_llm_arms(trials=trials, known=known)
        suggestion = self._policy.suggest(space, policy_trials, rng, pending=pending)
        candidate = None if suggestion is None else self._propose(suggestion, trials, known)
        if suggestion is not None and candidate is None:
            # The LLM gave nothing to evaluate (recorded in its attempt log): a pull without
            # reward, then this step decides again with the LLM arms masked.
            self._policy.observe(suggestion, nothing_evaluated(suggestion))
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
        self.observe(suggestion, row)  # credit the policy, save its state, profiles
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
            self.note = original_fails(
                baseline.result.outcome,
                baseline.result.reason,
                baseline.result.phase,
                self.spec.installed_module or str(self.spec.directory / self.spec.module),
            )
            return []
        done = sum(1 for t in trials if t.provenance is not Provenance.ORIGINAL)
        if self.settings.out_of_time():
            self.note = _OUT_OF_TIME.format(done=done)
            return []
        if self.settings.budget is not None:
            size = min(size, self.settings.budget - done - len(pending))
        if size <= 0:
            return []
        if self._policy is None:
            self._policy = self._load_policy()
        rng = np.random.default_rng([self.settings.seed, len(trials), len(pending)])
        known = self.hardware.metrics(self.spec) if self.hardware is not None else {}
        if known:
            self._policy.update_metrics(known)
        policy_trials = [as_policy_trial(t, known.get(t.candidate_id)) for t in trials]
        self._offer_llm_arms(trials=trials, known=known)
        space = self._space(trials)
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
                self._policy.observe(suggestion, nothing_evaluated(suggestion))
                continue
            if self._claim(candidate, suggestion):  # else: just claimed elsewhere, pending
                out.append((suggestion, candidate))
        return out
