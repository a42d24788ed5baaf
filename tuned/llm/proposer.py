"""The LLM proposer: a parent candidate and a strategy in, a rewritten candidate out.

The campaign calls :meth:`LlmProposer.open_strategies` before each decision (the strategies
whose LLM arms may be offered to the policy: none when the budget cannot cover one more
request, when a final API error paused the proposer, or for a replay entry) and
:meth:`LlmProposer.propose` when the policy chose an LLM arm. ``propose`` builds the prompt
(:mod:`tuned.llm.prompts`), asks (:mod:`tuned.llm.client`, inside the ledger), parses the
reply (:mod:`tuned.llm.parse`) and returns a :class:`~tuned.outcomes.Candidate` with
provenance ``llm``, the arm's strategy and the parent's knobs; the campaign evaluates it
through the one evaluation path (the LLM static gate first). Every proposal is recorded in
the attempt log (:mod:`tuned.llm.attempts`), also when no candidate came out of it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from policies.strategies import STRATEGIES, Strategy, llm_strategy_name
from tuned.llm.attempts import AttemptLog
from tuned.llm.client import ChatClient, LlmError
from tuned.llm.gate import launcher_signature
from tuned.llm.ledger import BudgetExceeded, TokenLedger
from tuned.llm.parse import parse_reply
from tuned.llm.prompts import Attempt, PromptContext, build_messages
from tuned.llm.settings import LlmSettings
from tuned.outcomes import Candidate, Provenance
from tuned.registry.spec import KernelSpec

__all__ = ["LLM_STRATEGIES", "LlmProposer", "ParentInfo", "Proposal"]

log = logging.getLogger(__name__)

#: The catalog strategies an LLM applies (``config`` only moves knobs: not a rewrite).
LLM_STRATEGIES: tuple[Strategy, ...] = tuple(s for s in STRATEGIES if s.name != "config")


@dataclass(frozen=True)
class Proposal:
    """What one request gave: a candidate, or ``status``/``reason`` saying why not."""

    candidate: Candidate | None
    status: str
    reason: str
    tokens: int = 0
    cached: bool = False


@dataclass(frozen=True)
class ParentInfo:
    """The parent as the prompt describes it."""

    candidate: Candidate
    time_s: float | None = None
    timing_kind: str = ""
    profile: Mapping[str, float] | None = None


class LlmProposer:
    """Rewrites kernels with an LLM under the ledger's caps (see the module docstring)."""

    def __init__(
        self,
        *,
        settings: LlmSettings,
        ledger: TokenLedger,
        client: ChatClient,
        attempts: AttemptLog,
        gpu: Mapping[str, str] | None = None,
        strategies: Sequence[Strategy] = LLM_STRATEGIES,
        pause_after_final_s: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.client = client
        self.attempts = attempts
        self.gpu = dict(gpu or {})
        self.strategies = tuple(strategies)
        self.pause_after_final_s = pause_after_final_s
        self._clock = clock
        self._paused_until = 0.0
        self.paused_reason = ""

    def close(self) -> None:
        """Close the client and the ledger's, cache's and attempt log's connections."""
        self.client.close()
        self.client.cache.close()
        self.ledger.close()
        self.attempts.close()

    def strategy_named(self, name: str) -> Strategy | None:
        """The offered strategy called ``name`` (``None``: not offered)."""
        return next((s for s in self.strategies if s.name == name), None)

    def open_strategies(self, spec: KernelSpec) -> tuple[Strategy, ...]:
        """Strategies whose LLM arms may be pulled for ``spec`` now (empty: all masked)."""
        if spec.replay is not None or not spec.module_source:
            return ()
        if self._clock() < self._paused_until:
            return ()
        if self.ledger.shortfall(spec.name, self.settings.request_tokens_floor()) is not None:
            return ()
        return self.strategies

    def propose(
        self,
        spec: KernelSpec,
        parent: ParentInfo,
        strategy: Strategy,
        *,
        baseline_time_s: float | None = None,
        known: Callable[[str], bool] = lambda cid: False,
    ) -> Proposal:
        """One rewrite of ``parent`` under ``strategy``; ``known(candidate_id)`` says whether
        a module was evaluated already (a duplicate is not evaluated again)."""
        arm = llm_strategy_name(strategy.name)
        original_signature = launcher_signature(spec.module_source, spec.launcher)
        ctx = PromptContext(
            kernel=spec.name,
            launcher=spec.launcher,
            signature=original_signature or f"{spec.launcher}(...)",
            parent_source=parent.candidate.source,
            parent_knobs=dict(parent.candidate.knobs),
            strategy=strategy.name,
            instruction=strategy.instruction,
            gpu=self.gpu,
            parent_time_s=parent.time_s,
            baseline_time_s=baseline_time_s,
            timing_kind=parent.timing_kind,
            profile=dict(parent.profile or {}),
            shapes=[dict(s.dims) for s in spec.shapes],
            dtypes=list(spec.dtypes),
            history=self._history(spec),
        )
        messages = build_messages(ctx)

        def record(p: Proposal, key: str | None = None) -> Proposal:
            self.attempts.record(
                kernel=spec.name,
                generation=spec.generation,
                strategy=arm,
                status=p.status if p.candidate is None else "candidate",
                reason=p.reason,
                tokens=p.tokens,
                parent_id=parent.candidate.id,
                candidate_id=None if p.candidate is None else p.candidate.id,
                prompt_key=key,
                cached=p.cached,
            )
            return p

        try:
            reply = self.client.complete(messages, kernel=spec.name)
        except BudgetExceeded as exc:
            log.info("%s: LLM request refused by the budget: %s", spec.name, exc)
            return record(Proposal(None, "budget", str(exc)))
        except LlmError as exc:
            if exc.final:
                self._paused_until = self._clock() + self.pause_after_final_s
                self.paused_reason = str(exc)
                log.error(
                    "%s; LLM strategies are paused for %.0f s (parametric tuning goes on)",
                    exc,
                    self.pause_after_final_s,
                )
            else:
                log.warning("%s", exc)
            return record(Proposal(None, "llm_error", f"{exc.kind}: {exc}", exc.charged))
        parsed = parse_reply(reply.text, reply.finish_reason, spec.launcher)
        tokens = reply.charged
        if parsed.source is None:
            log.info("%s: LLM reply without a module (%s)", spec.name, parsed.reason)
            return record(
                Proposal(None, parsed.status, parsed.reason, tokens, reply.cached),
                reply.prompt_key,
            )
        candidate = Candidate(
            kernel=spec.name,
            generation=spec.generation,
            source=parsed.source,
            knobs=dict(parent.candidate.knobs),
            provenance=Provenance.LLM,
            strategy=arm,
            parent_id=parent.candidate.id,
        )
        if known(candidate.id):
            return record(
                Proposal(
                    None,
                    "duplicate",
                    f"the reply's module was evaluated before ({candidate.id})",
                    tokens,
                    reply.cached,
                ),
                reply.prompt_key,
            )
        return record(
            Proposal(candidate, "candidate", parsed.reason, tokens, reply.cached),
            reply.prompt_key,
        )

    def _history(self, spec: KernelSpec) -> list[Attempt]:
        out = []
        for row in self.attempts.recent(spec.name, spec.generation, self.settings.history):
            detail = row.outcome_reason if row.outcome else row.reason
            out.append(Attempt(row.strategy, row.final_status, detail))
        return out
