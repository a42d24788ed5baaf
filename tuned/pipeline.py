"""Pipelined evaluation: the compile pool works on the next candidates while the GPU measures.

Without it, a campaign does everything for one candidate, then the next: import, compile
every specialization, check, time. With it::

    policy ──batch──> compile pool (N CPU processes) ──ready, FIFO──> GPU worker (one at a time)
       ▲                    │ failures: recorded, never reach the GPU                 │
       └──── observe ───────┴─────────────────────────────────────────────────────────┘

- The policy proposes a small batch at a time (:meth:`Campaign.propose_batch`); what is
  compiling or waiting for the GPU counts as *pending*: never proposed again, and counted as
  pulls in flight by the bandit (:func:`policies.propose_batch`).
- Up to ``lookahead`` candidates are in flight per campaign (default 2: one on the GPU,
  the next compiled and waiting). Each decision made before the results ahead of it are
  known is a less informed one: replayed on recorded spaces (``bench/lookahead_replay.py``,
  bench/RESULTS.md), evaluations to 99 % of the optimum grow with the look-ahead (on the
  H100 matmul space: 26.9 at 1, 30.2 at 2, 35.9 at 4, 61.4 at 17). So the look-ahead
  stays short, and the pool's idle processes compile *speculatively* instead: the
  candidates the policy is likely to propose next (:meth:`Campaign.likely_next`: the
  unevaluated neighbours of the fastest candidates), at a priority below every proposed
  one. When the policy proposes one of them, it is compiled already
  (:class:`~tuned.evaluation.compile_pool.CompilePool`, "speculative"), and the GPU does
  not wait for its compile. Speculation decides nothing: it only moves compile work
  earlier, onto processes that would be idle. Each goes to the pool
  (:class:`~tuned.evaluation.compile_pool.CompilePool`), which imports and compiles it into
  the Triton cache the GPU worker reads; a failure there (static rejection, import error,
  hang, compiler crash, compile error) is recorded as the candidate's evaluation at once.
- The GPU worker takes ready candidates in the order they were proposed (deterministic for a
  given history) and evaluates them one at a time, exactly as :meth:`Campaign.evaluate` does:
  benchmarks are never concurrent on a GPU, so timings are not disturbed; the pool's
  compiling overlaps with the worker's correctness runs and benchmarks.
- Each result's ``phase_seconds`` gains ``compile_queue`` (waiting for a compile process),
  ``precompile`` (import and compile in the pool) and ``gpu_queue`` (compiled, waiting for
  the worker), next to the worker's ``load``, ``compile`` (now mostly a cache hit),
  ``correctness`` and ``benchmark``: the store exports them as the phase histogram.

Candidates in flight are not persisted: a run stopped with some in flight evaluates what the
policy proposes when it starts again (never a candidate that has a result).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AbstractContextManager
from dataclasses import dataclass

from policies import Suggestion
from tuned.campaign import Campaign, CampaignSummary
from tuned.evaluation.client import WorkerClient
from tuned.evaluation.compile_pool import (
    CompilePool,
    CompileTarget,
    Precompiled,
    default_compile_workers,
)
from tuned.outcomes import Candidate, EvalResult, Outcome
from tuned.registry.spec import KernelSpec
from tuned.store.base import TrialRow

__all__ = [
    "GPU_QUEUE_PHASE",
    "CampaignPipeline",
    "PipelineSettings",
    "compile_workers_for",
    "evaluate_ahead",
    "pipeline_for",
]

log = logging.getLogger(__name__)

#: Seconds between "compiled" and "the GPU worker starts on it".
GPU_QUEUE_PHASE = "gpu_queue"


@dataclass(frozen=True)
class PipelineSettings:
    """``batch_size``: suggestions asked of the policy at once. ``lookahead``: candidates in
    flight per campaign (compiling, compiled and waiting, or on the GPU); see the module
    docstring for why it is short. ``speculate``: give idle compile processes the
    candidates the policy is likely to propose next."""

    batch_size: int = 4
    lookahead: int = 2
    speculate: bool = True

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.lookahead < 1:
            raise ValueError(f"lookahead must be >= 1, got {self.lookahead}")


@dataclass
class _InFlight:
    suggestion: Suggestion
    candidate: Candidate
    future: Future[Precompiled]


class CampaignPipeline:
    """Runs campaigns' evaluations through a compile pool (see the module docstring).

    One pipeline serves every campaign of a daemon (the pool is shared); each campaign has
    its own queue of candidates in flight. Not thread-safe: one :meth:`step` at a time.
    """

    def __init__(
        self,
        *,
        pool: CompilePool,
        settings: PipelineSettings | None = None,
        interruptible: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
    ) -> None:
        self.pool = pool
        self.settings = settings or PipelineSettings()
        self.lookahead = self.settings.lookahead
        self.interruptible = interruptible
        self._queues: dict[str, tuple[Campaign, deque[_InFlight]]] = {}
        #: Per kernel: candidate ids given to the pool speculatively (never twice).
        self._speculated: dict[str, set[str]] = {}

    def step(self, campaign: Campaign) -> TrialRow | None:
        """Evaluate the campaign's next candidate on the GPU worker (or record its failure in
        the pool) and return it; ``None`` when the campaign is finished (``campaign.note``).

        The baseline, and anything a batch cannot give, goes through :meth:`Campaign.step`.
        """
        queue = self._queue(campaign)
        self._fill(campaign, queue, evaluating=None)
        if not queue:
            return campaign.step()
        item = queue.popleft()
        precompiled = self._wait(item)
        self._fill(campaign, queue, evaluating=item)  # the pool works while the GPU measures
        gpu_queue = time.monotonic() - precompiled.finished_at
        phases = {**precompiled.result.phase_seconds, GPU_QUEUE_PHASE: gpu_queue}
        if precompiled.ready:
            row = campaign.evaluate(item.candidate, phases=phases)
        else:
            result = _with_phases(precompiled.result, phases)
            row = campaign.record(item.candidate, result, wall_s=sum(phases.values()))
        campaign.observe(item.suggestion, row)
        return row

    def run(self, campaign: Campaign) -> CampaignSummary:
        """Step until finished; the summary covers every evaluation in the store."""
        while self.step(campaign) is not None:
            pass
        self.forget(campaign.spec.name)
        return campaign.summary()

    def forget(self, kernel: str) -> None:
        """Drop a kernel's candidates in flight (its entry changed or left the registry);
        their compile jobs finish in the pool and are ignored."""
        self._queues.pop(kernel, None)
        self._speculated.pop(kernel, None)

    def close(self) -> None:
        self._queues.clear()
        self._speculated.clear()
        self.pool.close()

    # -- internals

    def _queue(self, campaign: Campaign) -> deque[_InFlight]:
        known = self._queues.get(campaign.spec.name)
        if known is None or known[0] is not campaign:  # a new generation: a new campaign
            known = (campaign, deque())
            self._queues[campaign.spec.name] = known
        return known[1]

    def _fill(
        self, campaign: Campaign, queue: deque[_InFlight], evaluating: _InFlight | None
    ) -> None:
        while len(queue) < self.lookahead:
            pending = [i.suggestion for i in queue]
            if evaluating is not None:
                pending.append(evaluating.suggestion)
            want = min(self.settings.batch_size, self.lookahead - len(queue))
            batch = campaign.propose_batch(want, pending)
            if not batch:
                return
            for suggestion, candidate in batch:
                queue.append(
                    _InFlight(suggestion, candidate, self._submit(campaign.spec, candidate))
                )
        if self.settings.speculate:
            self._speculate(campaign, queue, evaluating)

    def _speculate(
        self, campaign: Campaign, queue: deque[_InFlight], evaluating: _InFlight | None
    ) -> None:
        """Give the pool's idle processes the candidates the policy is likely to propose
        next (each candidate once per campaign), keeping ``lookahead`` processes free for
        the proposed ones (a speculative compile that runs cannot be pre-empted)."""
        room = self.pool.workers - self.lookahead - self.pool.pending()
        if room <= 0:
            return
        done = self._speculated.setdefault(campaign.spec.name, set())
        if len(done) > 50_000:  # a long-lived campaign: forget (the Triton cache remembers)
            done.clear()
        exclude = {i.candidate.id for i in queue} | done
        if evaluating is not None:
            exclude.add(evaluating.candidate.id)
        from tuned.llm.gate import gate_result

        in_flight = [i.suggestion for i in queue]
        if evaluating is not None:
            in_flight.append(evaluating.suggestion)
        for candidate in campaign.likely_next(room, in_flight, exclude):
            done.add(candidate.id)
            if gate_result(campaign.spec, candidate) is None:
                self.pool.submit(campaign.spec, candidate, speculative=True)

    def _submit(self, spec: KernelSpec, candidate: Candidate) -> Future[Precompiled]:
        from tuned.llm.gate import gate_result

        if gate_result(spec, candidate) is not None:  # refused anyway: compiling is wasted
            return _done(candidate, "the static gate decides in the campaign")
        return self.pool.submit(spec, candidate)

    def _wait(self, item: _InFlight) -> Precompiled:
        """The pool's answer; bounded even if the pool itself failed (then: not compiled)."""
        s = self.pool.settings
        bound = s.startup_timeout_s + s.load_timeout_s + s.compile_timeout_s + 60.0
        deadline = time.monotonic() + bound
        with self.interruptible():
            while True:
                try:
                    return item.future.result(
                        timeout=min(1.0, max(0.0, deadline - time.monotonic()))
                    )
                except FutureTimeout:
                    if time.monotonic() >= deadline:
                        log.warning(
                            "compile pool gave no answer in %.0f s; compiling on the GPU worker",
                            bound,
                        )
                        return _done(item.candidate, "the compile pool gave no answer").result()


def compile_workers_for(configured: int | None, *, interpreter: bool) -> int:
    """Compile processes to run: ``configured``, or when ``None`` (auto) the machine's cores
    minus one on a GPU and none in the interpreter (nothing is compiled there, and an
    evaluation is dominated by running the kernel on the CPU)."""
    if configured is not None:
        if configured < 0:
            raise ValueError(f"compile_workers must be >= 0, got {configured}")
        return configured
    return 0 if interpreter else default_compile_workers()


def pipeline_for(
    client: WorkerClient,
    *,
    workers: int,
    settings: PipelineSettings | None = None,
    interruptible: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
) -> CampaignPipeline:
    """A pipeline whose pool compiles for ``client``'s GPU (``client.start()`` first: the
    worker reports its target) into the Triton cache directory the worker reads."""
    target = CompileTarget.from_dict(client.target) if client.target else None
    pool = CompilePool(
        workdir=client.workdir.parent / f"{client.workdir.name}-compile",
        cache_dir=client.workdir / "triton-cache",
        settings=client.settings,
        workers=workers,
        target=target,
    )
    return CampaignPipeline(pool=pool, settings=settings, interruptible=interruptible)


def evaluate_ahead(
    spec: KernelSpec,
    candidates: Iterable[Candidate],
    *,
    client: WorkerClient,
    pool: CompilePool,
    lookahead: int | None = None,
    incumbent: Candidate | None = None,
) -> Iterator[tuple[Candidate, EvalResult]]:
    """Evaluate ``candidates`` in order on ``client``, compiling up to ``lookahead`` ahead in
    ``pool``: a sweep (no policy, no store). Results carry the pipeline's phases."""
    ahead = lookahead or pool.workers + 2
    todo = iter(candidates)
    queue: deque[tuple[Candidate, Future[Precompiled]]] = deque()

    def refill() -> None:
        while len(queue) < ahead:
            candidate = next(todo, None)
            if candidate is None:
                return
            queue.append((candidate, pool.submit(spec, candidate)))

    refill()
    while queue:
        candidate, future = queue.popleft()
        precompiled = future.result()
        refill()
        phases = {
            **precompiled.result.phase_seconds,
            GPU_QUEUE_PHASE: time.monotonic() - precompiled.finished_at,
        }
        if precompiled.ready:
            result = client.evaluate(spec, candidate, incumbent)
            yield candidate, _with_phases(result, phases, before=True)
        else:
            yield candidate, _with_phases(precompiled.result, phases)


def _with_phases(
    result: EvalResult, phases: dict[str, float], *, before: bool = False
) -> EvalResult:
    merged = {**phases, **result.phase_seconds} if before else {**result.phase_seconds, **phases}
    return EvalResult.from_dict({**result.to_dict(), "phase_seconds": merged})


def _done(candidate: Candidate, note: str) -> Future[Precompiled]:
    future: Future[Precompiled] = Future()
    result = EvalResult(
        Outcome.OK, phase="precompile", metadata={"precompiled": False, "note": note}
    )
    future.set_result(Precompiled(candidate.id, result, time.monotonic()))
    return future
