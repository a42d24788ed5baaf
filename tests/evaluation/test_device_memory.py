"""What a judge, its runners and its spares leave on a GPU they share (issue 20, item 1).

On an H100 the example registry's layer_norm (16384x8192, float32) ran out of memory: every
runner killed while it mapped an arena of the judge's (CUDA IPC) left that arena held in the
judge, about 1 GiB a runner, until nothing was free.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conftest import has_gpu
from tuned.evaluation import worker
from tuned.evaluation.case_cache import CaseCache
from tuned.evaluation.runner import Runner, serve
from tuned.evaluation.runners import RunnerPool
from tuned.evaluation.shm import MappedArena


class _Channel:
    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages, self.sent = messages, []  # type: list[dict[str, Any]]

    def receive(self) -> dict[str, Any] | None:
        return self.messages.pop(0) if self.messages else None

    def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def pending_bytes(self) -> bytes:  # nothing queued (a spare asks before it prepares)
        return b""


def test_a_runner_lets_go_of_the_arena_and_says_so_before_it_exits(tmp_path: Path) -> None:
    fd = os.memfd_create("arena")
    try:
        runner = Runner(MappedArena(fd), tmp_path, tmp_path, "cpu")
        runner.arena.base = torch.zeros(16, dtype=torch.uint8)
        runner.stable["k"] = [runner.arena.base[:8]]
        channel = _Channel([{"op": "exit", "id": 7}])
        serve(channel, runner)  # type: ignore[arg-type]
    finally:
        os.close(fd)
    assert channel.sent == [{"ok": True, "id": 7}]  # the judge's close waits for this
    assert runner.arena.base is None and runner.stable == {} and runner.slots == {}


def test_a_judge_holding_memory_astray_retires(monkeypatch: pytest.MonkeyPatch) -> None:
    gib = 1 << 30
    allocated = {"now": 6 * gib}
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocated["now"])
    cache = CaseCache()
    cache.stats.resident_bytes = 2 * gib  # cached cases are not astray
    pool = RunnerPool(Path("/nonexistent"), "cuda")
    assert not worker._holds_stray_memory("cuda", cache, pool)  # 4 GiB: at the bound
    allocated["now"] = 7 * gib
    assert worker._holds_stray_memory("cuda", cache, pool)
    assert not worker._holds_stray_memory("cpu", cache, pool)  # the interpreter: never


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")
def test_closing_a_runner_that_mapped_an_arena_frees_the_arena_in_the_judge(
    tmp_path: Path,
) -> None:
    pool = RunnerPool(tmp_path / "runners", "cuda", writable=tmp_path)
    try:
        pool.start_ahead()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        for _ in range(3):
            runner = pool.fresh()
            runner.grow(256 << 20, "load")  # the runner maps it (CUDA IPC)
            assert torch.cuda.memory_allocated() >= before + (256 << 20)
            pool.release(runner, reusable=False)
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() - before < (64 << 20)
    finally:
        pool.close()


def test_a_closed_runner_lets_go_before_the_kill(tmp_path: Path) -> None:
    """The judge's side of the handshake: after `exit` it waits for the runner's answer, so
    the runner has let go of the arena when the judge's SIGKILL comes."""
    device = "cuda" if has_gpu() else "cpu"
    pool = RunnerPool(tmp_path / "runners", device, writable=tmp_path)
    try:
        pool.start_ahead()
        runner = pool.fresh()
        runner.grow(1 << 20, "load")
        assert not runner.let_go
        pool.release(runner, reusable=False)
        assert runner.let_go and not runner.alive
    finally:
        pool.close()


def test_a_spare_prepares_one_timed_input_set_at_a_time() -> None:
    """A spare makes a case's timed sets (up to 2 GiB of inputs) and their references ahead:
    with four spares preparing at once, holding every set of a case until the last was made
    ran the H100 out of memory. Each set is let go before the next is made."""
    from types import SimpleNamespace

    from profilers.timing import TimingSettings
    from tuned.evaluation.judge import Case
    from tuned.evaluation.timing_judge import JudgedTiming

    alive: list[Any] = []  # weak references to every set made
    most = 0

    def inputs_of(case: Case) -> list[Any]:
        nonlocal most
        import weakref

        most = max(most, sum(ref() is not None for ref in alive))
        inputs = [torch.full((256,), float(case.seed))]
        alive.append(weakref.ref(inputs[0]))
        return inputs

    referenced: list[int] = []
    seeds = list(range(101, 121))
    evaluation = SimpleNamespace(
        device="cpu",
        timing_seeds=lambda case, count: seeds[:count],
        reference_outputs=lambda case, inputs: referenced.append(int(inputs[0][0])),
    )
    timing = JudgedTiming(evaluation, TimingSettings(interpreter_reps=6))  # type: ignore[arg-type]
    timing.prepare(Case({"N": 256}, "float32", 0, True), inputs_of)
    assert referenced == seeds[:6]  # every timed set of the case, each with its reference
    assert most <= 1  # and never two sets held at once (the sizing set included)


def test_a_runner_gives_back_what_its_allocator_holds_unused_past_a_gibibyte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the H200 a runner of Liger's cross entropy forward and backward held 90.7 GiB through
    one request's cases and the judge ran out of memory for 7.8 GiB: after each call a runner
    on a GPU now empties PyTorch's cache once more than ``UNUSED_BYTES`` of it is unused
    (:func:`tuned.evaluation.modules.release_unused`, the judge's too)."""
    from tuned.evaluation import modules

    emptied: list[int] = []
    held = {"reserved": 3 << 30, "allocated": 1 << 30}
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: held["reserved"])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: held["allocated"])
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    modules.release_unused("cuda")
    assert emptied == [1]  # 2 GiB unused
    held["reserved"] = held["allocated"] + modules.UNUSED_BYTES
    modules.release_unused("cuda")
    assert emptied == [1]  # at the limit: kept (the next call reuses it)
    held["reserved"] = 10 << 30
    modules.release_unused("cpu")
    assert emptied == [1]  # the interpreter's tensors are host memory


def test_a_runner_keeps_the_cuda_graphs_of_the_current_case_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each CUDA graph holds its own memory pool: a slot kept every case's graphs through a
    request (83-106 GiB in a runner of Liger's cross entropy forward and backward on the H200).
    A new case drops the previous case's graphs. Within a case every timed set keeps its
    graph (ten sets, one per round, and the calibration's lengths): with four kept, the
    rounds cycled through the sets and captured again on every timed call. A case whose
    capture fails (the launcher reads on the host) is not captured again."""
    import contextlib

    from tuned.evaluation import runner as runner_module

    captured: list[int] = []
    capturing = {"now": False, "fail": False}

    class FakeGraph:
        def replay(self) -> None:
            pass

    @contextlib.contextmanager
    def graph(g: Any) -> Any:
        capturing["now"] = True
        try:
            yield
        finally:
            capturing["now"] = False

    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    runner = Runner.__new__(Runner)
    slot = runner_module.Slot(launcher=None, knobs={}, module="m")  # type: ignore[arg-type]

    def fn(*args: Any) -> int:
        if capturing["now"] and capturing["fail"]:
            raise RuntimeError("operation not permitted when stream is capturing")
        captured.append(1)
        return len(captured)

    sets = [[i] for i in range(10)]  # one per round
    for reps in (2, 12):  # the calibration's lengths on the first set
        runner._graph_reps(slot, fn, sets[0], reps, "M=1")
    for inputs in sets:  # the untimed call of the timed length, then the rounds
        runner._graph_reps(slot, fn, inputs, 16, "M=1")
    before = len(captured)
    for _ in range(3):  # the timed rounds replay, never capture again
        for inputs in sets:
            _, replayed, was_captured = runner._graph_reps(slot, fn, inputs, 16, "M=1")
            assert replayed and not was_captured
    assert len(captured) == before
    runner._graph_reps(slot, fn, sets[0], 16, "M=2")  # the next case
    assert list(slot.graphs) == [f"{id(sets[0])}:16"] and slot.graph_case == "M=2"

    capturing["fail"] = True
    attempts = len(captured)
    assert runner._graph_reps(slot, fn, sets[0], 16, "M=3") == (None, False, False)
    assert "M=3" in slot.uncapturable
    capturing["fail"] = False  # would capture now: the case stays eager all the same
    assert runner._graph_reps(slot, fn, sets[1], 16, "M=3") == (None, False, False)
    assert len(captured) == attempts  # no second attempt ran the launcher


def test_a_long_timed_call_replays_one_graph_of_graph_unit_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A short kernel's timed length is hundreds of calls; capturing all of them ran the
    launcher's Python for each (the largest part of Liger's RMSNorm benchmark phase on the
    H200). A multiple of ``GRAPH_UNIT`` captures one graph of that many calls and replays it;
    other lengths (the calibration's, a short kernel's) are captured whole."""
    import contextlib

    from tuned.evaluation import runner as runner_module

    unit = runner_module.GRAPH_UNIT
    launched: list[int] = []
    replays: list[int] = []

    class FakeGraph:
        def replay(self) -> None:
            replays.append(1)

    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", lambda g: contextlib.nullcontext())
    runner = Runner.__new__(Runner)
    slot = runner_module.Slot(launcher=None, knobs={}, module="m")  # type: ignore[arg-type]
    inputs = [0]

    def fn(*args: Any) -> int:
        launched.append(1)
        return len(launched)

    out, replayed, captured = runner._graph_reps(slot, fn, inputs, 3 * unit, "M=1")
    assert replayed and captured and len(launched) == unit and len(replays) == 3
    assert out == unit  # the outputs of the graph's last captured call
    runner._graph_reps(slot, fn, inputs, 5 * unit, "M=1")  # the same graph, five times
    assert len(launched) == unit and len(replays) == 8
    runner._graph_reps(slot, fn, inputs, unit + 1, "M=1")  # not a multiple: captured whole
    assert len(launched) == 2 * unit + 1 and len(replays) == 9
