"""The LLM proposer: a parent candidate and a strategy in, a rewritten candidate out.

The campaign calls :meth:`LlmProposer.open_strategies` before each decision (the strategies
whose LLM arms may be offered to the policy: none when the budget cannot cover one more
request, when a final API error paused the proposer, or for a replay entry) and
:meth:`LlmProposer.propose` when the policy chose an LLM arm. ``propose`` builds the prompt
(:mod:`tuned.llm.prompts`), asks (:mod:`tuned.llm.chat`, inside the ledger), parses the
reply (:mod:`tuned.llm.parse`) and returns a :class:`~tuned.outcomes.Candidate` with
provenance ``llm``, the arm's strategy and the parent's knobs; the campaign evaluates it
through the one evaluation path (the LLM static gate first). Every proposal is recorded in
the attempt log (:mod:`tuned.store.llm_attempts`), also when no candidate came out of it.

For a reference entry (``kind: reference``) whose parent is its baseline (the PyTorch
reference), ``propose`` asks for the *first* Triton module instead: the prompt shows the
reference, not a parent's Triton source, the launcher's signature is the reference's plus
optional knobs, and the candidate's knobs are the defaults of the knobs discovered in the
reply's module (:mod:`tuned.registry.discovery`), so parametric moves can start from it.

:meth:`LlmProposer.refresh_strategies` asks, now and then, for new strategies
(:mod:`tuned.llm.proposed`); the accepted ones are offered with the catalog's by
``open_strategies``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from policies.strategies import STRATEGIES, Strategy, llm_strategy_name
from tuned.llm.chat import ChatClient, LlmError
from tuned.llm.gate import launcher_signature
from tuned.llm.parse import parse_reply
from tuned.llm.prompts import (
    Attempt,
    PromptContext,
    StrategyContext,
    build_messages,
    build_strategy_messages,
)
from tuned.llm.proposed import (
    DraftStrategy,
    ProposedStrategy,
    StrategyBook,
    duplicate_of,
    parse_strategies,
)
from tuned.llm.settings import LlmSettings
from tuned.outcomes import Candidate, Provenance
from tuned.registry.spec import KernelSpec, KnobValue
from tuned.store.ledger import BudgetExceeded, TokenLedger
from tuned.store.llm_attempts import AttemptLog

__all__ = [
    "LLM_STRATEGIES",
    "LlmProposer",
    "ParentInfo",
    "Proposal",
    "StrategyRequest",
    "discovered_defaults",
    "module_knobs",
]

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


@dataclass(frozen=True)
class StrategyRequest:
    """What one request for new strategies gave: the accepted ones, and the status."""

    status: str
    reason: str
    accepted: tuple[ProposedStrategy, ...] = ()
    tokens: int = 0


def module_knobs(
    source: str, launcher: str
) -> tuple[dict[str, tuple[KnobValue, ...]], dict[str, KnobValue]]:
    """The knobs discovered in ``source`` (a reference entry's LLM-written module, by the
    rules of :mod:`tuned.registry.discovery`) and their launcher defaults: its space and
    its own baseline configuration. Empty when it has none or does not parse (the static
    gate then says why)."""
    from tuned.registry.discovery import discover_knobs
    from tuned.registry.problems import Problems
    from tuned.registry.source import launcher_defaults, outline_module

    out = Problems(Path("llm.py"))
    outline = outline_module(source, Path("llm.py"), out)
    if outline is None or launcher not in outline.functions:
        return {}, {}
    fn = outline.functions[launcher]
    found = discover_knobs(outline, fn, "llm.py")
    params = {k: v for k, v in found.knobs.items() if k not in found.baseline}  # not injected
    defaults = launcher_defaults(fn, params, "llm.py", out)
    return ({}, {}) if out.items else (dict(found.knobs), {**defaults, **found.baseline})


def discovered_defaults(source: str, launcher: str) -> dict[str, KnobValue]:
    """The launcher defaults of the knobs discovered in ``source`` (:func:`module_knobs`)."""
    return module_knobs(source, launcher)[1]


class LlmProposer:
    """Rewrites kernels with an LLM under the ledger's caps (see the module docstring)."""

    def __init__(
        self,
        *,
        settings: LlmSettings,
        ledger: TokenLedger,
        client: ChatClient,
        attempts: AttemptLog,
        book: StrategyBook | None = None,
        gpu: Mapping[str, str] | None = None,
        strategies: Sequence[Strategy] = LLM_STRATEGIES,
        pause_after_final_s: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.client = client
        self.attempts = attempts
        #: Accepted LLM-proposed strategies (``None``: proposals off).
        self.book = book
        self.gpu = dict(gpu or {})
        self.strategies = tuple(strategies)
        self.pause_after_final_s = pause_after_final_s
        self._clock = clock
        self._paused_until = 0.0
        self.paused_reason = ""
        self._proposed: dict[str, tuple[ProposedStrategy, ...]] = {}

    def close(self) -> None:
        """Close the client and the ledger's, cache's, attempt log's and book's connections."""
        self.client.close()
        self.client.cache.close()
        self.ledger.close()
        self.attempts.close()
        if self.book is not None:
            self.book.close()

    def proposed(self, kernel: str) -> tuple[ProposedStrategy, ...]:
        """The kernel's accepted LLM-proposed strategies (read once, then kept current)."""
        if self.book is None:
            return ()
        if kernel not in self._proposed:
            self._proposed[kernel] = tuple(self.book.for_kernel(kernel))
        return self._proposed[kernel]

    def strategy_named(self, name: str, kernel: str | None = None) -> Strategy | None:
        """The offered strategy called ``name``: a catalog one, or one proposed for
        ``kernel`` (``None``: not offered)."""
        found = next((s for s in self.strategies if s.name == name), None)
        if found is None and kernel is not None:
            found = next(
                (p.strategy for p in self.proposed(kernel) if p.strategy.name == name), None
            )
        return found

    def open_strategies(self, spec: KernelSpec) -> tuple[Strategy, ...]:
        """Strategies whose LLM arms may be pulled for ``spec`` now (empty: all masked): the
        catalog's and the kernel's LLM-proposed ones."""
        if spec.replay is not None or not spec.module_source:
            return ()
        if self._clock() < self._paused_until:
            return ()
        if self.ledger.shortfall(spec.name, self.settings.request_tokens_floor()) is not None:
            return ()
        return self.strategies + tuple(p.strategy for p in self.proposed(spec.name))

    def _title(self, kernel: str, strategy: Strategy) -> str:
        """How a prompt names ``strategy``: a proposed one by the name the LLM gave it."""
        for p in self.proposed(kernel):
            if p.strategy.name == strategy.name:
                return p.name
        return strategy.name

    # -- LLM-proposed strategies

    def strategy_request_due(self, spec: KernelSpec) -> str | None:
        """Why new strategies should be asked for ``spec`` now (``None``: not due): after
        ``strategy_every`` rewrites since the last ask, or ``strategy_stall`` without a new
        best; never past ``max_strategies``, without a book, or while LLM arms are masked."""
        s = self.settings
        if self.book is None or s.max_strategies <= 0:
            return None
        if len(self.proposed(spec.name)) >= s.max_strategies or not self.open_strategies(spec):
            return None
        since = self.attempts.rewrites_since_strategy_request(spec.name)
        if s.strategy_every and len(since) >= s.strategy_every:
            return f"{len(since)} rewrites since the last request"
        if (
            s.strategy_stall
            and len(since) >= s.strategy_stall
            and not self.attempts.any_accepted(spec.name, since[-s.strategy_stall :])
        ):
            return f"stalled: the last {s.strategy_stall} rewrites gave no new best"
        return None

    def refresh_strategies(
        self,
        spec: KernelSpec,
        best: ParentInfo | None,
        *,
        baseline_time_s: float | None = None,
    ) -> StrategyRequest | None:
        """Ask for new strategies for ``spec`` if due (:meth:`strategy_request_due`);
        ``None`` when not due. ``best`` is the kernel's best version (source, time,
        profile) the prompt describes."""
        trigger = self.strategy_request_due(spec)
        if trigger is None:
            return None
        return self.request_strategies(spec, best, baseline_time_s=baseline_time_s, trigger=trigger)

    def request_strategies(
        self,
        spec: KernelSpec,
        best: ParentInfo | None,
        *,
        baseline_time_s: float | None = None,
        trigger: str = "requested",
    ) -> StrategyRequest:
        """One request for new strategies (through the ledger, caps and cache), its reply
        parsed, deduplicated and capped; accepted ones are stored and offered from now on."""
        assert self.book is not None, "strategy proposals need a StrategyBook"
        room = max(0, self.settings.max_strategies - len(self.proposed(spec.name)))
        existing = [(s.name, s.target, s.instruction) for s in self.strategies] + [
            (p.name, p.target, p.instruction) for p in self.proposed(spec.name)
        ]
        messages = build_strategy_messages(
            StrategyContext(
                kernel=spec.name,
                existing=existing,
                wanted=max(1, min(room, 3)),
                gpu=self.gpu,
                best_source=""
                if best is None
                or (best.candidate.provenance is Provenance.ORIGINAL and spec.reference_only)
                else best.candidate.source,
                best_time_s=None if best is None else best.time_s,
                baseline_time_s=baseline_time_s,
                timing_kind="" if best is None else best.timing_kind,
                profile=dict((best.profile if best is not None else None) or {}),
                shapes=[dict(x.dims) for x in spec.shapes],
                dtypes=list(spec.dtypes),
                history=self._history(spec, self.settings.history * 2),
                earlier=[
                    Attempt("strategies", r.status, r.reason)
                    for r in self.attempts.recent(spec.name, n=4, purpose="strategy")
                ],
            )
        )

        def record(r: StrategyRequest, key: str | None = None, cached: bool = False) -> int:
            return self.attempts.record(
                kernel=spec.name,
                generation=spec.generation,
                strategy="strategies",
                status=r.status,
                reason=r.reason,
                tokens=r.tokens,
                purpose="strategy",
                prompt_key=key,
                cached=cached,
            )

        try:
            reply = self.client.complete(
                messages,
                kernel=spec.name,
                purpose="strategy",
                max_tokens=self.settings.strategy_max_tokens,
            )
        except BudgetExceeded as exc:
            result = StrategyRequest("budget", str(exc))
            record(result)
            return result
        except LlmError as exc:
            self._llm_failed(exc)
            result = StrategyRequest("llm_error", f"{exc.kind}: {exc}", tokens=exc.charged)
            record(result)
            return result
        status, reason, drafts = parse_strategies(reply.text, reply.finish_reason)
        if status != "ok":
            log.info("%s: strategy reply unusable (%s: %s)", spec.name, status, reason)
            result = StrategyRequest(status, reason, tokens=reply.charged)
            record(result, reply.prompt_key, reply.cached)
            return result
        fresh: list[DraftStrategy] = []
        notes = [reason] if reason else []
        known = list((n, i) for n, _, i in existing)
        capped = 0
        for draft in drafts:
            twin = duplicate_of(draft, known)
            if twin is not None:
                notes.append(f"{draft.name!r} duplicates {twin!r}")
                continue
            if len(fresh) >= room:
                capped += 1
                notes.append(f"{draft.name!r} over the cap of {self.settings.max_strategies}")
                continue
            fresh.append(draft)
            known.append((draft.name, draft.instruction))
        status = "accepted" if fresh else ("capped" if capped else "duplicate")
        summary = "; ".join(n for n in notes if n) or f"{len(fresh)} accepted"
        attempt_id = record(
            StrategyRequest(status, summary, tokens=reply.charged), reply.prompt_key, reply.cached
        )
        accepted = tuple(
            self.book.add(
                spec.name,
                draft,
                generation=spec.generation,
                model=self.settings.model,
                trigger=trigger,
                attempt_id=attempt_id,
                prompt_key=reply.prompt_key,
            )
            for draft in fresh
        )
        self._proposed.pop(spec.name, None)
        for p in accepted:
            log.info(
                "%s: new LLM-proposed strategy %s = %r (target %s)",
                spec.name,
                llm_strategy_name(p.strategy.name),
                p.name,
                p.target,
            )
        return StrategyRequest(status, summary, accepted, reply.charged)

    def _llm_failed(self, exc: LlmError) -> None:
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
        # A reference entry's baseline is PyTorch: the first Triton module is written from it.
        from_reference = spec.reference_only and parent.candidate.provenance is Provenance.ORIGINAL
        if from_reference:
            ref_signature = launcher_signature(spec.module_source, spec.reference or "")
            signature = (
                f"{spec.launcher}{ref_signature[len(spec.reference or '') :]}"
                if ref_signature
                else f"{spec.launcher}(...)"
            )
        else:
            signature = (
                launcher_signature(spec.module_source, spec.launcher)
                or launcher_signature(parent.candidate.source, spec.launcher)
                or f"{spec.launcher}(...)"
            )
        ctx = PromptContext(
            kernel=spec.name,
            launcher=spec.launcher,
            signature=signature,
            parent_source="" if from_reference else parent.candidate.source,
            parent_knobs=dict(parent.candidate.knobs),
            strategy=self._title(spec.name, strategy),
            instruction=strategy.instruction,
            gpu=self.gpu,
            parent_time_s=parent.time_s,
            baseline_time_s=baseline_time_s,
            timing_kind=parent.timing_kind,
            profile=dict(parent.profile or {}),
            shapes=[dict(s.dims) for s in spec.shapes],
            dtypes=list(spec.dtypes),
            history=self._history(spec, self.settings.history),
            reference_source=spec.module_source if from_reference else "",
            reference=spec.reference or "",
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
            self._llm_failed(exc)
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
            # From a reference: the module's own knob defaults (its discovered baseline).
            knobs=discovered_defaults(parsed.source, spec.launcher)
            if from_reference
            else dict(parent.candidate.knobs),
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

    def _history(self, spec: KernelSpec, n: int) -> list[Attempt]:
        titles = {llm_strategy_name(p.strategy.name): p.name for p in self.proposed(spec.name)}
        out = []
        for row in self.attempts.recent(spec.name, spec.generation, n):
            detail = row.outcome_reason if row.outcome else row.reason
            out.append(Attempt(titles.get(row.strategy, row.strategy), row.final_status, detail))
        return out
