"""``CampaignPipeline.run_all``: several kernels' campaigns on one GPU worker, which measures
another kernel's compiled candidates while one kernel's are still compiling."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from tuned.evaluation.compile_pool import Precompiled
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.pipeline import CampaignPipeline, PipelineSettings

_RESCUE_S = 5.0  # a slow compile's future is done after this at the latest (never a hang)


class _Pool:
    """Compiles at once, except the kernels in ``slow``: those when the test says so."""

    workers = 4
    settings = SimpleNamespace(startup_timeout_s=1.0, load_timeout_s=1.0, compile_timeout_s=1.0)

    def __init__(self, slow: set[str], gpu: list[str] | None = None) -> None:
        self.slow = slow
        self.held: list[tuple[Future[Precompiled], str]] = []
        self.gpu = gpu  # where the test logs what the GPU measured, to log submits beside
        self.speculated: list[str] = []

    def submit(self, spec: Any, candidate: Candidate, speculative: bool = False) -> Any:
        if speculative and self.gpu is not None:
            self.gpu.append(f"pool:{candidate.kernel}:{candidate.strategy}")
        future: Future[Precompiled] = Future()
        if candidate.kernel in self.slow:
            self.held.append((future, candidate.id))
            rescue = threading.Timer(_RESCUE_S, self._finish, (future, candidate.id))
            rescue.daemon = True
            rescue.start()
        else:
            self._finish(future, candidate.id)
        return future

    def release(self) -> None:
        for future, cid in self.held:
            self._finish(future, cid)

    @staticmethod
    def _finish(future: Future[Precompiled], cid: str) -> None:
        if not future.done():
            result = EvalResult(Outcome.OK, metadata={"precompiled": True})
            future.set_result(Precompiled(cid, result, time.monotonic()))

    def pending(self) -> int:
        return 0

    def close(self) -> None:
        pass


@dataclass
class _Campaign:
    """Proposes ``budget`` candidates after its baseline; logs what the GPU measured."""

    name: str
    budget: int
    gpu: list[str]
    on_done: Any = None
    proposed: int = 0
    baseline: bool = False
    evaluated: int = 0
    spec: Any = field(init=False)

    def __post_init__(self) -> None:
        self.spec = SimpleNamespace(name=self.name)

    def _candidate(self, i: int) -> Candidate:
        return Candidate(self.name, "g", f"# {self.name}", {"B": i}, Provenance.PARAMETRIC)

    def propose_batch(self, size: int, pending: Any = ()) -> list[tuple[Any, Candidate]]:
        if not self.baseline:
            return []
        out = []
        while len(out) < size and self.proposed < self.budget:
            self.proposed += 1
            out.append((self.proposed, self._candidate(self.proposed)))
        return out

    def step(self) -> Any:
        if self.baseline:
            return None  # the budget is spent (nothing was in flight)
        self.baseline = True
        self.gpu.append(f"{self.name}:baseline")
        return "row"

    def evaluate(self, candidate: Candidate, phases: Any = None, precompile: Any = None) -> str:
        self.gpu.append(f"{self.name}:{candidate.knobs['B']}")
        self.evaluated += 1
        if self.evaluated == self.budget and self.on_done is not None:
            self.on_done()
        return "row"

    def observe(self, suggestion: Any, row: Any) -> None:
        pass

    def original_ahead(self) -> Candidate | None:
        if self.baseline:
            return None
        return Candidate(self.name, "g", f"# {self.name}", {}, Provenance.ORIGINAL, "original")

    def likely_first(self, limit: int) -> list[Candidate]:
        return []

    def likely_next(self, limit: int, pending: Any = (), exclude: Any = ()) -> list[Candidate]:
        return []

    def summary(self) -> str:
        return f"{self.name} done"


def test_the_gpu_measures_a_ready_kernel_while_another_compiles() -> None:
    gpu: list[str] = []
    pool = _Pool(slow={"matmul"})
    matmul = _Campaign("matmul", 2, gpu)
    layer_norm = _Campaign("layer_norm", 3, gpu, on_done=pool.release)
    pipeline = CampaignPipeline(pool=pool, settings=PipelineSettings(speculate=False))  # type: ignore[arg-type]
    first_steps: list[str] = []
    started = time.monotonic()
    summaries = pipeline.run_all(
        [matmul, layer_norm],  # type: ignore[list-item]
        on_first_step=lambda c: first_steps.append(c.spec.name),
    )
    assert summaries == ["matmul done", "layer_norm done"]  # in the order given
    assert first_steps == ["matmul", "layer_norm"]
    # matmul's candidates compile until layer_norm is done: the GPU measures layer_norm's
    # meanwhile (run one after the other, it would have waited for matmul's compiles).
    assert gpu == [
        "matmul:baseline",
        "layer_norm:baseline",
        "layer_norm:1",
        "layer_norm:2",
        "layer_norm:3",
        "matmul:1",
        "matmul:2",
    ]
    assert time.monotonic() - started < _RESCUE_S  # released by layer_norm, not the timer


def test_the_kernel_on_the_gpu_keeps_it_while_its_candidates_are_ready() -> None:
    gpu: list[str] = []
    pool = _Pool(slow=set())
    a, b = _Campaign("a", 3, gpu), _Campaign("b", 2, gpu)
    pipeline = CampaignPipeline(pool=pool, settings=PipelineSettings(speculate=False))  # type: ignore[arg-type]
    pipeline.run_all([a, b])  # type: ignore[list-item]
    assert gpu == ["a:baseline", "a:1", "a:2", "a:3", "b:baseline", "b:1", "b:2"]


def test_the_pool_compiles_the_next_kernels_originals_while_one_is_measured() -> None:
    """The GPU worker measures each kernel's original itself; the pool compiles the
    originals of the next two kernels ahead (speculatively), each once, none of a kernel
    already begun: on the H200, Liger's DyT original compiled its autotuner's configs in the
    worker, 12.6 s of compile phase (and every other original its kernels)."""
    gpu: list[str] = []
    pool = _Pool(slow=set(), gpu=gpu)
    campaigns = [_Campaign(name, 1, gpu) for name in ("a", "b", "c", "d")]
    pipeline = CampaignPipeline(pool=pool, settings=PipelineSettings())  # type: ignore[arg-type]
    pipeline.run_all(campaigns)  # type: ignore[arg-type]
    sent = [e for e in gpu if e.startswith("pool:")]
    assert sent == ["pool:b:original", "pool:c:original", "pool:d:original"]
    for name in ("b", "c", "d"):  # compiled ahead, before the worker measures it
        assert gpu.index(f"pool:{name}:original") < gpu.index(f"{name}:baseline")
    assert gpu.index("pool:d:original") > gpu.index("a:baseline")  # two ahead, not all

    gpu.clear()
    quiet = CampaignPipeline(pool=pool, settings=PipelineSettings(speculate=False))  # type: ignore[arg-type]
    quiet.run_all([_Campaign(name, 1, gpu) for name in ("e", "f")])  # type: ignore[arg-type]
    assert not [e for e in gpu if e.startswith("pool:")]


def test_under_a_time_limit_each_kernel_gets_its_share_of_the_gpu() -> None:
    """``ktuned tune --time-limit``: a kernel that has had its share (the time over the
    kernels) gives the GPU to one that has not. On the H200 the example registry's last
    kernel was never reached in 300 s, each kernel before it keeping the GPU to its budget."""

    class _Slow(_Campaign):
        def evaluate(self, candidate: Candidate, phases: Any = None, precompile: Any = None) -> str:
            time.sleep(0.01)
            return super().evaluate(candidate, phases, precompile)

    gpu: list[str] = []
    campaigns = [_Slow(name, 60, gpu) for name in ("a", "b", "c")]
    pipeline = CampaignPipeline(pool=_Pool(slow=set()), settings=PipelineSettings(speculate=False))  # type: ignore[arg-type]
    pipeline.run_all(campaigns, deadline=time.monotonic() + 0.6)  # type: ignore[arg-type]
    # Each had about 0.2 s (some 20 of its 60 candidates at 0.01 s each); without the shares
    # the first would have kept the GPU to its 60 and the others had none. Past the
    # deadline each campaign's next step ends it.
    counts = {n: sum(1 for e in gpu if e.startswith(f"{n}:") and e[2:].isdigit()) for n in "abc"}
    assert all(5 <= c < 60 for c in counts.values()), (counts, gpu)
    assert gpu.index("c:baseline") < len(gpu) - 5, gpu  # reached early, not at the end

    gpu.clear()  # without a deadline the kernel on the GPU keeps it, as before
    pipeline.run_all([_Slow(name, 5, gpu) for name in ("a", "b")])  # type: ignore[arg-type]
    assert gpu == ["a:baseline", *(f"a:{i}" for i in range(1, 6)), "b:baseline"] + [
        f"b:{i}" for i in range(1, 6)
    ]


def test_past_the_time_limit_no_queued_candidate_starts_and_no_compile_is_awaited() -> None:
    """``ktuned tune --time-limit``: what is on the GPU finishes, but the candidates queued
    behind it (compiled, or still compiling) never start, and the run does not wait for the
    pool. On the H200 the queued candidates of six Liger entries ran 80 s past a 220 s
    limit."""

    @dataclass
    class _Limited(_Campaign):  # a real Campaign proposes and starts nothing past its deadline
        deadline: float = 0.0

        def propose_batch(self, size: int, pending: Any = ()) -> list[tuple[Any, Candidate]]:
            return [] if time.monotonic() >= self.deadline else super().propose_batch(size)

        def step(self) -> Any:
            return None if time.monotonic() >= self.deadline else super().step()

        def evaluate(self, candidate: Candidate, phases: Any = None, precompile: Any = None) -> str:
            time.sleep(0.05)
            return super().evaluate(candidate, phases, precompile)

    gpu: list[str] = []
    deadline = time.monotonic() + 0.12
    a = _Limited("a", 20, gpu, deadline=deadline)
    b = _Limited("b", 20, gpu, deadline=deadline)  # its candidates compile for _RESCUE_S
    pool = _Pool(slow={"b"})
    pipeline = CampaignPipeline(pool=pool, settings=PipelineSettings(speculate=False))  # type: ignore[arg-type]
    started = time.monotonic()
    pipeline.run_all([a, b], deadline=deadline)  # type: ignore[list-item]
    ended = time.monotonic()
    assert ended - started < _RESCUE_S / 2, gpu  # b's compiles were not awaited
    a_done = [e for e in gpu if e.startswith("a:") and e != "a:baseline"]
    assert 1 <= len(a_done) <= 3, gpu  # what was on the GPU at the limit, nothing queued
    assert not [e for e in gpu if e.startswith("b:") and e != "b:baseline"], gpu
    assert a.proposed > a.evaluated  # queued candidates were dropped, not measured


def test_time_left_when_every_kernel_has_had_its_share_is_shared_again() -> None:
    """A kernel whose original took more than its share (Liger's autotuned DyT forward and
    backward: 89 s of a 54 s share, its autotuner benchmarking every config on each shape)
    had no candidate measured in the 300 s left: once every kernel had had its share, the
    first kernel in the registry took all the time that remained."""
    deadline = 0.0
    before: dict[str, int] = {}

    class _Slow(_Campaign):
        def step(self) -> Any:
            if not self.baseline and self.name == "dyt":
                time.sleep(0.3)  # more than its share (0.9 s over three kernels)
            return super().step()

        def evaluate(self, candidate: Candidate, phases: Any = None, precompile: Any = None) -> str:
            time.sleep(0.01)
            if time.monotonic() < deadline:
                before[self.name] = before.get(self.name, 0) + 1
            return super().evaluate(candidate, phases, precompile)

    gpu: list[str] = []
    campaigns = [_Slow("first", 150, gpu), _Slow("dyt", 150, gpu), _Slow("rope", 5, gpu)]
    pipeline = CampaignPipeline(pool=_Pool(slow=set()), settings=PipelineSettings(speculate=False))  # type: ignore[arg-type]
    deadline = time.monotonic() + 0.9
    pipeline.run_all(campaigns, deadline=deadline)  # type: ignore[arg-type]
    # The 0.25 s left after "first" (0.3), "dyt" (0.3, its original) and "rope" (done early)
    # is shared again: "dyt" has candidates measured before the deadline.
    assert before.get("dyt", 0) >= 3, (before, gpu[:12])
    assert before.get("first", 0) >= 20, before
