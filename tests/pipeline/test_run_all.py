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

    def __init__(self, slow: set[str]) -> None:
        self.slow = slow
        self.held: list[tuple[Future[Precompiled], str]] = []

    def submit(self, spec: Any, candidate: Candidate, speculative: bool = False) -> Any:
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
