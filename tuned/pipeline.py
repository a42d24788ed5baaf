"""Pipelined evaluation: the compile pool works on the next candidates while the GPU measures.

Without it, a campaign does everything for one candidate, then the next: import, compile
every specialization, check, time. With it::

    policy ──batch──> compile pool (N CPU processes) ──ready, FIFO──> GPU worker (one at a time)
       ▲                    │ failures: recorded, never reach the GPU                 │
       └──── observe ───────┴─────────────────────────────────────────────────────────┘

- The policy proposes a small batch at a time (:meth:`Campaign.propose_batch`); what is
  compiling or waiting for the GPU counts as *pending*: never proposed again, and counted as
  pulls in flight by the bandit (:func:`policies.propose_batch`).
- Up to ``lookahead`` candidates wait per campaign beside the one on the GPU (default 2),
  plus up to ``compiling`` (default 4) more while proposed ones are still compiling: then
  the GPU would wait anyway, and the policy knows no more by waiting. Each decision made
  before the results ahead of it are
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
- Before the baseline is measured (on the GPU worker), the pool compiles what the policy
  will propose first (:meth:`Campaign.likely_first`), so the GPU need not wait for those.
  With several kernels (:meth:`CampaignPipeline.run_all`), the originals of the next two
  kernels are compiled ahead likewise (:meth:`Campaign.original_ahead`), so the worker's
  first launches of each, its autotuner's configs included, hit the cache.
- The GPU worker takes the first candidate, in the order proposed, that the pool is done
  with (``in_order``: only the first proposed; deterministic for a given history, which
  the default is only when compiles keep ahead) and evaluates them one at a time, exactly
  as :meth:`Campaign.evaluate` does:
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
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from policies import Suggestion
from tuned.evaluation.client import WorkerClient
from tuned.evaluation.compile_pool import (
    CompilePool,
    CompileTarget,
    Precompiled,
    default_compile_workers,
)
from tuned.evaluation.evaluator import Evaluator
from tuned.outcomes import Candidate, EvalResult, Outcome
from tuned.registry.spec import KernelSpec
from tuned.search import Campaign, CampaignSummary, Prepared
from tuned.store.base import TrialRow

__all__ = [
    "GPU_QUEUE_PHASE",
    "CampaignPipeline",
    "MultiGpuPipeline",
    "PipelineSettings",
    "compile_workers_for",
    "evaluate_ahead",
    "pipeline_for",
]

log = logging.getLogger(__name__)

#: Seconds between "compiled" and "the GPU worker starts on it".
GPU_QUEUE_PHASE = "gpu_queue"

#: Kernels not yet started whose originals the pool compiles ahead (see ``_originals_ahead``).
ORIGINALS_AHEAD = 2


@dataclass(frozen=True)
class PipelineSettings:
    """``batch_size``: suggestions asked of the policy at once. ``lookahead``: candidates
    waiting per campaign beside the one on the GPU; see the module docstring for why it is
    short. ``compiling``: up to this many more while proposed candidates are still
    compiling. ``in_order``: the GPU takes candidates strictly in the order proposed (by
    default, the first compiled). ``speculate``: give idle compile processes the
    candidates the policy is likely to propose next (and, before the baseline, those it
    will propose first)."""

    batch_size: int = 4
    lookahead: int = 2
    compiling: int = 4
    in_order: bool = False
    speculate: bool = True

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.lookahead < 1:
            raise ValueError(f"lookahead must be >= 1, got {self.lookahead}")
        if self.compiling < 0:
            raise ValueError(f"compiling must be >= 0, got {self.compiling}")


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
        #: Kernels whose first proposals were guessed before their baseline (once each).
        self._guessed_first: set[str] = set()
        #: Kernels whose originals were given to the pool ahead (once each).
        self._originals_sent: set[str] = set()
        #: :meth:`run_all`'s ``deadline`` while it runs.
        self._deadline: float | None = None

    def step(self, campaign: Campaign) -> TrialRow | None:
        """Evaluate the campaign's next candidate on the GPU worker (or record its failure in
        the pool) and return it; ``None`` when the campaign is finished (``campaign.note``).

        The baseline, and anything a batch cannot give, goes through :meth:`Campaign.step`.
        """
        queue = self._queue(campaign)
        if self._past_deadline():
            # --time-limit: nothing queued starts, compiled or not (on the H200 the queued
            # candidates of six Liger entries ran 80 s past a 220 s limit, one compiling for
            # 17 s in the worker), nothing more is compiled; the campaign ends as its own
            # deadline says.
            queue.clear()
            return campaign.step()
        self._fill(campaign, queue, evaluating=None)
        if not queue:
            self._speculate_first(campaign)
            return campaign.step()
        item, precompiled = self._next(queue)
        self._fill(campaign, queue, evaluating=item)  # the pool works while the GPU measures
        gpu_queue = time.monotonic() - precompiled.finished_at
        phases = {**precompiled.result.phase_seconds, GPU_QUEUE_PHASE: gpu_queue}
        if precompiled.ready:
            row = campaign.evaluate(
                item.candidate, phases=phases, precompile=precompiled.result.metadata
            )
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

    def run_all(
        self,
        campaigns: Sequence[Campaign],
        on_first_step: Callable[[Campaign], None] | None = None,
        deadline: float | None = None,
    ) -> list[CampaignSummary]:
        """Step every campaign until each is finished (summaries in ``campaigns``' order),
        on one GPU worker, never idle while any campaign has work ready: the campaign being
        stepped keeps the GPU while it has a compiled candidate (its case data stays
        resident); when all of its candidates are still compiling, another campaign that
        has one, or that needs its baseline measured, takes over. On the H100 the worker
        otherwise waited 75 of 190 s for compiles (a matmul configuration compiles in up to
        80 s) with the next kernels' work ready. ``on_first_step(campaign)``: called before a
        campaign's first step (to prepare the kernels after it).

        ``deadline`` (``ktuned tune --time-limit``, a :func:`time.monotonic` time): each
        campaign's fair share of the time is what is left over the campaigns; one that has
        had its share gives the GPU to a ready campaign that has not (on the H200 the example
        registry's last kernel was never reached in 300 s: each kernel before it kept the GPU
        for its whole budget); past it, no queued candidate starts: each campaign's next
        step ends it (:attr:`~tuned.search.TuneSettings.deadline`)."""
        self._deadline = deadline
        try:
            return self._run_all(campaigns, on_first_step, deadline)
        finally:
            self._deadline = None

    def _run_all(
        self,
        campaigns: Sequence[Campaign],
        on_first_step: Callable[[Campaign], None] | None,
        deadline: float | None,
    ) -> list[CampaignSummary]:
        active = list(campaigns)
        summaries: dict[int, CampaignSummary] = {}
        started: set[int] = set()
        used: dict[int, float] = {}  # seconds each campaign's steps took
        share = None if deadline is None else (deadline - time.monotonic()) / max(1, len(active))

        def owed(c: Campaign) -> bool:  # not yet had its share
            return share is None or used.get(id(c), 0.0) < share

        current = active[0] if active else None
        while active:
            if share is not None and deadline is not None and not any(owed(c) for c in active):
                # Every kernel has had its share: the time left is shared again, so it does
                # not all go to the first ready kernel (Liger's autotuned DyT original took
                # 89 s of a 54 s share, then the first kernel kept the 300 s that were left).
                least = min(used.get(id(c), 0.0) for c in active)
                share = max(share, least) + max(deadline - time.monotonic(), 0.0) / len(active)
            campaign = (
                current if current is not None and owed(current) and self._ready(current) else None
            )
            campaign = campaign or next((c for c in active if owed(c) and self._ready(c)), None)
            campaign = campaign or next((c for c in active if self._ready(c)), None)
            if campaign is None:
                futures = [i.future for c in active for i in self._queue(c)]
                with self.interruptible():
                    self._wait_any(futures, 1.0)
                continue
            current = campaign
            if id(campaign) not in started:
                started.add(id(campaign))
                self._originals_ahead([c for c in active if id(c) not in started])
                if on_first_step is not None:
                    on_first_step(campaign)
            stepped = time.monotonic()
            done = self.step(campaign) is None
            used[id(campaign)] = used.get(id(campaign), 0.0) + time.monotonic() - stepped
            if done:
                active.remove(campaign)
                self.forget(campaign.spec.name)
                summaries[id(campaign)] = campaign.summary()
                current = active[0] if active else None
        return [summaries[id(c)] for c in campaigns]

    def _ready(self, campaign: Campaign) -> bool:
        """Whether :meth:`step` would start on the GPU at once: a candidate is compiled (the
        first proposed, ``in_order``), or nothing is in flight (the baseline, an evaluation
        without the pool, or the end)."""
        if self._past_deadline():
            return True  # its next step ends it: no compile to wait for
        queue = self._queue(campaign)
        self._fill(campaign, queue, evaluating=None)
        items = list(queue)[:1] if self.settings.in_order else list(queue)
        return not items or any(i.future.done() for i in items)

    def _past_deadline(self) -> bool:
        """Whether :meth:`run_all`'s deadline (``ktuned tune --time-limit``) has passed."""
        return self._deadline is not None and time.monotonic() >= self._deadline

    def forget(self, kernel: str) -> None:
        """Drop a kernel's candidates in flight (its entry changed or left the registry);
        their compile jobs finish in the pool and are ignored."""
        self._queues.pop(kernel, None)
        self._speculated.pop(kernel, None)
        self._guessed_first.discard(kernel)
        self._originals_sent.discard(kernel)

    def close(self) -> None:
        self._queues.clear()
        self._speculated.clear()
        self._guessed_first.clear()
        self._originals_sent.clear()
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
        busy = [] if evaluating is None else [evaluating]
        self._top_up(campaign, queue, busy, self.lookahead + len(busy))

    def _top_up(
        self, campaign: Campaign, queue: deque[_InFlight], busy: list[_InFlight], cap: int
    ) -> None:
        """Propose until ``cap`` of the campaign's candidates are in flight (``busy``: on a
        GPU, or measured and not observed yet), not counting up to ``compiling`` of those
        the pool is still compiling, then speculate."""
        while True:
            compiling = sum(1 for i in queue if not i.future.done())
            counted = len(queue) + len(busy) - min(compiling, self.settings.compiling)
            want = min(self.settings.batch_size, cap - counted)
            if want <= 0:
                break
            pending = [i.suggestion for i in [*queue, *busy]]
            batch = campaign.propose_batch(want, pending)
            if not batch:
                break
            for suggestion, candidate in batch:
                queue.append(
                    _InFlight(suggestion, candidate, self._submit(campaign.spec, candidate))
                )
        if self.settings.speculate:
            self._speculate(campaign, queue, busy)

    def _speculate(
        self, campaign: Campaign, queue: deque[_InFlight], busy: list[_InFlight]
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
        exclude = {i.candidate.id for i in [*queue, *busy]} | done
        from tuned.llm.gate import gate_result

        in_flight = [i.suggestion for i in [*queue, *busy]]
        for candidate in campaign.likely_next(room, in_flight, exclude):
            done.add(candidate.id)
            if gate_result(campaign.spec, candidate) is None:
                self.pool.submit(campaign.spec, candidate, speculative=True)

    def _originals_ahead(self, waiting: Sequence[Campaign]) -> None:
        """Give the pool the originals of the next :data:`ORIGINALS_AHEAD` kernels not yet
        started, speculatively (on processes nothing else needs), so that the GPU worker's
        first launches of each find its kernels compiled. A few at a time: the pool's
        processes are the current kernel's first."""
        if not self.settings.speculate:
            return
        from tuned.llm.gate import gate_result

        for campaign in waiting[:ORIGINALS_AHEAD]:
            name = campaign.spec.name
            if name in self._originals_sent:
                continue
            self._originals_sent.add(name)
            original = campaign.original_ahead()
            if original is not None and gate_result(campaign.spec, original) is None:
                self.pool.submit(campaign.spec, original, speculative=True)

    def _speculate_first(self, campaign: Campaign) -> None:
        """Before the baseline is measured (on the GPU worker, not in the pool): give the
        pool what the policy will likely propose first (:meth:`Campaign.likely_first`), so
        those are compiled by the time the baseline's result lets the policy propose."""
        name = campaign.spec.name
        if not self.settings.speculate or name in self._guessed_first:
            return
        self._guessed_first.add(name)
        from tuned.llm.gate import gate_result

        done = self._speculated.setdefault(name, set())
        room = self.pool.workers - self.lookahead - self.pool.pending()
        for candidate in campaign.likely_first(room):
            done.add(candidate.id)
            if gate_result(campaign.spec, candidate) is None:
                self.pool.submit(campaign.spec, candidate, speculative=True)

    def _next(
        self, queue: deque[_InFlight], *, interruptible: bool = True
    ) -> tuple[_InFlight, Precompiled]:
        """Take the next candidate for the GPU worker from ``queue``: the first, in the order
        proposed, that the pool is done with, waiting for one when none is (only the first
        with ``in_order``): the GPU never waits for a compile while a compiled candidate
        waits. Bounded even if the pool itself failed (then: not compiled)."""
        items = list(queue)[:1] if self.settings.in_order else list(queue)
        s = self.pool.settings
        bound = s.startup_timeout_s + s.load_timeout_s + s.compile_timeout_s + 60.0
        deadline = time.monotonic() + bound
        with self.interruptible() if interruptible else contextlib.nullcontext():
            while True:
                item = next((i for i in items if i.future.done()), None)
                if item is not None:
                    queue.remove(item)
                    return item, item.future.result()
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning(
                        "compile pool gave no answer in %.0f s; compiling on the GPU worker",
                        bound,
                    )
                    item = items[0]
                    queue.remove(item)
                    return item, _done(item.candidate, "the compile pool gave no answer").result()
                self._wait_any([i.future for i in items], min(1.0, left))

    def _wait_any(self, futures: Sequence[Future[Precompiled]], timeout: float) -> None:
        """Until one of ``futures`` is done, or ``timeout`` seconds."""
        wait(futures, timeout=timeout, return_when=FIRST_COMPLETED)

    def _submit(self, spec: KernelSpec, candidate: Candidate) -> Future[Precompiled]:
        from tuned.llm.gate import gate_result

        if gate_result(spec, candidate) is not None:  # refused anyway: compiling is wasted
            return _done(candidate, "the static gate decides in the campaign")
        return self.pool.submit(spec, candidate)

    def _wait(self, item: _InFlight, *, interruptible: bool = True) -> Precompiled:
        """The pool's answer for ``item`` alone (:meth:`_next`'s bound). ``interruptible``:
        a stop request interrupts the wait (the calling thread only)."""
        return self._next(deque([item]), interruptible=interruptible)[1]


@dataclass
class _Running:
    """A candidate on a GPU lane: compiling, then measured by that lane's worker."""

    campaign: Campaign
    item: _InFlight
    prepared: Prepared
    lane: int
    future: Future[tuple[Precompiled, EvalResult | None, float]]


class MultiGpuPipeline(CampaignPipeline):
    """Several GPUs of one box: one worker per GPU (``lanes``, each pinned to its GPU by its
    client's ``CUDA_VISIBLE_DEVICES``), all fed by the one compile pool.

    Each lane measures one candidate at a time, on a thread of its own that touches nothing
    but that lane's worker client; everything that reads or writes the store (proposals,
    :meth:`Campaign.prepare`, :meth:`Campaign.finish` with the acceptance rule's
    re-measurement on the lane that measured, :meth:`Campaign.observe`) stays on the
    calling thread. So benchmarks never share a GPU, and lanes measure in parallel.

    Differences from one GPU: an idle lane takes the first candidate the pool is done
    with (lanes in turn), so a lane never waits for a compile while a compiled candidate
    waits; results are observed in the order they finish, not the order proposed (the GPUs
    race); ``lookahead`` grows by one per extra lane (one candidate in flight per lane, and
    ``lookahead`` waiting). A result of another campaign that finishes
    while this one is stepped is kept and recorded at that campaign's next step (its lane
    goes on meanwhile). Lane 0's client is the campaigns' own (``Campaign.client``): the
    baseline and anything else a campaign measures itself run there, and the hardware
    feedback's profiling (on the daemon's first GPU) waits until lane 0 is idle.
    """

    def __init__(
        self,
        *,
        pool: CompilePool,
        lanes: Sequence[Evaluator],
        settings: PipelineSettings | None = None,
        interruptible: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
    ) -> None:
        if len(lanes) < 1:
            raise ValueError("a multi-GPU pipeline needs at least one lane")
        super().__init__(pool=pool, settings=settings, interruptible=interruptible)
        self.lanes = list(lanes)
        self.lookahead = self.settings.lookahead + len(self.lanes) - 1
        self._threads = [
            ThreadPoolExecutor(1, thread_name_prefix=f"gpu-lane-{i}") for i in range(len(lanes))
        ]
        self._running: dict[int, _Running] = {}
        self._held: dict[str, deque[_Running]] = {}
        #: Evaluations measured per lane (for status and tests).
        self.measured = [0] * len(self.lanes)
        self._next_lane = 0

    def step(self, campaign: Campaign) -> TrialRow | None:
        queue = self._queue(campaign)
        while True:
            self._collect()
            held = self._held.get(campaign.spec.name)
            if held:
                row = self._finish(held.popleft())
                self._fill(campaign, queue, evaluating=None)
                self._dispatch(campaign, queue)
                return row
            self._fill(campaign, queue, evaluating=None)
            self._dispatch(campaign, queue)
            mine = [r.future for r in self._running.values() if r.campaign is campaign]
            if not mine and not queue:  # the baseline, or nothing left: lane 0's client
                self._speculate_first(campaign)
                self._drain(0)
                return campaign.step()
            idle = len(self._running) < len(self.lanes)
            compiling = [i.future for i in queue] if idle else []
            others = [r.future for r in self._running.values()]
            self._wait_for([*mine, *compiling] or others)

    def forget(self, kernel: str) -> None:
        super().forget(kernel)
        self._held.pop(kernel, None)

    def close(self) -> None:
        for thread in self._threads:
            thread.shutdown(wait=False, cancel_futures=True)
        self._running.clear()
        self._held.clear()
        super().close()

    # -- internals

    def _fill(
        self, campaign: Campaign, queue: deque[_InFlight], evaluating: _InFlight | None
    ) -> None:
        """As one GPU's, with every candidate of this campaign on a lane or held pending."""
        name = campaign.spec.name
        busy = [r.item for r in self._running.values() if r.campaign is campaign]
        busy += [r.item for r in self._held.get(name, ())]
        # One measuring per lane, and `lookahead` waiting.
        self._top_up(campaign, queue, busy, self.settings.lookahead + len(self.lanes))

    def _dispatch(self, campaign: Campaign, queue: deque[_InFlight]) -> None:
        """Give idle lanes this campaign's candidates the pool is done with, in the order
        proposed (a lane never waits for a compile while a compiled candidate waits)."""
        n = len(self.lanes)
        for lane in [(self._next_lane + k) % n for k in range(n)]:  # round robin
            if lane in self._running:
                continue
            item = next((i for i in queue if i.future.done()), None)
            if item is None:
                return
            queue.remove(item)
            self._next_lane = (lane + 1) % n
            prepared = campaign.prepare(item.candidate)
            future = self._threads[lane].submit(self._measure, lane, item, prepared)
            self._running[lane] = _Running(campaign, item, prepared, lane, future)

    def _measure(
        self, lane: int, item: _InFlight, prepared: Prepared
    ) -> tuple[Precompiled, EvalResult | None, float]:
        """On lane ``lane``'s thread: wait for the pool, then measure (or not, on failure)."""
        precompiled = self._wait(item, interruptible=False)  # signals are the caller's
        gpu_queue = max(0.0, time.monotonic() - precompiled.finished_at)
        if not precompiled.ready:
            return precompiled, None, gpu_queue
        return precompiled, prepared.measure(self.lanes[lane]), gpu_queue

    def _collect(self) -> None:
        """Move finished measurements to their campaign's held results (frees the lanes)."""
        for lane, running in list(self._running.items()):
            if running.future.done():
                del self._running[lane]
                self._held.setdefault(running.campaign.spec.name, deque()).append(running)

    def _wait_for(self, futures: Sequence[Future[Any]]) -> None:
        """Until one of ``futures`` is done (a measurement, or a compile an idle lane wants)."""
        with self.interruptible():
            while futures and not any(f.done() for f in futures):
                wait(futures, timeout=1.0, return_when=FIRST_COMPLETED)

    def _drain(self, lane: int) -> None:
        """Wait until ``lane`` measures nothing (its result is held for its campaign)."""
        running = self._running.get(lane)
        if running is not None:
            self._wait_for([running.future])
            self._collect()

    def _finish(self, running: _Running) -> TrialRow:
        campaign, item = running.campaign, running.item
        precompiled, result, gpu_queue = running.future.result()
        phases = {**precompiled.result.phase_seconds, GPU_QUEUE_PHASE: gpu_queue}
        self.measured[running.lane] += result is not None
        if result is None:
            failed = _with_phases(precompiled.result, phases)
            row = campaign.record(item.candidate, failed, wall_s=sum(phases.values()))
        else:
            running.prepared.phases.update(phases)
            running.prepared.keep_precompile(precompiled.result.metadata)
            # A re-measurement runs on the lane that measured, once it is idle again.
            self._drain(running.lane)
            row = campaign.finish(running.prepared, result, client=self.lanes[running.lane])
        if campaign.hardware is not None:
            self._drain(0)  # profiling runs on the first GPU: never beside a measurement
        campaign.observe(item.suggestion, row)
        return row


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
    lanes: Sequence[WorkerClient] = (),
) -> CampaignPipeline:
    """A pipeline whose pool compiles for ``client``'s GPU (``client.start()`` first: the
    worker reports its target) into the Triton cache directory the worker reads.

    ``lanes``: with more than one (``client`` first, every one reading ``client``'s cache
    directory), a :class:`MultiGpuPipeline` measuring on all of them."""
    target = CompileTarget.from_dict(client.target) if client.target else None
    pool = CompilePool(
        workdir=client.workdir.parent / f"{client.workdir.name}-compile",
        cache_dir=client.cache_dir,
        settings=client.settings,
        workers=workers,
        target=target,
    )
    if len(lanes) > 1:
        if lanes[0] is not client or any(c.cache_dir != client.cache_dir for c in lanes):
            pool.close()
            raise ValueError("lanes start with the client and share its Triton cache")
        return MultiGpuPipeline(
            pool=pool, lanes=lanes, settings=settings, interruptible=interruptible
        )
    return CampaignPipeline(pool=pool, settings=settings, interruptible=interruptible)


def evaluate_ahead(
    spec: KernelSpec,
    candidates: Iterable[Candidate],
    *,
    client: Evaluator,
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
