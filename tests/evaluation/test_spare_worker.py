"""The spare worker: a fresh worker without waiting for one to start, and per-client env."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.conftest import ADD_SOURCE, WriteEntry, has_gpu
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.evaluation import client as client_module
from tuned.evaluation.client import PREPARED_SPARES
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.registry import load_entry
from tuned.registry.spec import KernelSpec


def _candidate(spec: KernelSpec, source: str, block: int) -> Candidate:
    return Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=source,
        knobs={"BLOCK": block},
        provenance=Provenance.PARAMETRIC,
        strategy="test",
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        Path(f"/proc/{pid}").exists()
        and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    )


def _wait_prepared(client: WorkerClient) -> None:
    """Until every spare has answered every request to prepare (a new kernel goes to a
    spare only then; one still preparing is not waited for)."""
    deadline = time.monotonic() + 120
    while not all(client._prepared_all(spare) for spare in client._spares):
        assert time.monotonic() < deadline, "a spare never finished preparing"
        time.sleep(0.2)


def test_a_fresh_worker_is_the_waiting_spare_and_a_new_spare_follows(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    spec = load_entry(write_entry())
    settings = EvaluationSettings(interpreter=True)
    good = _candidate(spec, spec.module_source, 128)
    aborts = _candidate(spec, ADD_SOURCE + "\nimport os\nos.abort()\n", 128)
    client = WorkerClient(workdir=tmp_path / "w", settings=settings, spares=2)
    try:
        client.start()
        first = client.pids()
        assert len(first) == 3  # the worker and its two spares
        cold = client.evaluate(spec, good)
        assert cold.outcome is Outcome.OK

        spare = client.spare_pid
        assert spare in first
        client.fresh()  # what the acceptance rule does before a re-measurement
        assert len(client.pids()) == 2 and client.pids() < first  # only the spares are left
        warm = client.evaluate(spec, good)  # measured by the spare
        assert warm.outcome is Outcome.OK
        assert client.spare_takeovers == 1 and spare in client.pids()
        # The spare prepared for the kernel (the original through correctness, and the timed
        # input sets) before it took over: the same candidate found every case made, the
        # timed ones included, where the cold worker made them.
        cold_cache, warm_cache = cold.metadata["case_cache"], warm.metadata["case_cache"]
        assert cold_cache["misses_here"] > 0 and warm_cache["misses_here"] == 0
        assert warm_cache["misses"] == cold_cache["misses"] > 0
        assert warm_cache["hits"] >= cold_cache["hits"] + cold_cache["misses"]
        now = client.pids()
        assert len(now) == 3 and len(now - first) == 1  # a new spare waits

        # A crash of candidate code ends its runner, not the worker (the judge): the next
        # evaluation runs in the same worker, no spare takes over, nothing new starts.
        crash = client.evaluate(spec, aborts)
        assert crash.outcome is Outcome.CRASH, crash
        assert "the runner was killed by SIGABRT" in crash.reason
        assert client.evaluate(spec, good).outcome is Outcome.OK
        assert client.spare_takeovers == 1 and client.starts == 4
        # Each process wrote its own stderr log.
        for name in ("spare-0", "spare-1"):
            assert (tmp_path / "w" / name / "stderr.log").exists()
        everyone = first | now | client.pids()
    finally:
        client.close()
    assert client.pids() == set()
    assert not any(_alive(p) for p in everyone)


def test_a_spare_prepares_for_every_kernel_the_client_evaluates(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    """A registry is tuned kernel after kernel by one client: a spare prepared only for the
    first one made every case of a later kernel's re-measurement (10 to 26 s on the H100)."""
    first = load_entry(write_entry("add_a"))
    second = load_entry(write_entry("add_b", source=ADD_SOURCE + "\n# another kernel\n"))
    client = WorkerClient(
        workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True), spares=1
    )
    try:
        for spec in (first, second):
            assert client.evaluate(spec, _candidate(spec, spec.module_source, 128)).outcome is (
                Outcome.OK
            )
        client.fresh()  # the second kernel's re-measurement: in the spare
        warm = client.evaluate(second, _candidate(second, second.module_source, 128))
        assert warm.outcome is Outcome.OK, warm.reason
        assert client.spare_takeovers == 1
        assert warm.metadata["case_cache"]["misses_here"] == 0  # made when it prepared
        # Requests are written before a spare reads them: never more than its pipe holds.
        spare = client._spares[0]
        assert spare.room >= 64 * 1024  # Linux's default, grown where allowed
        spare.room = spare.queued  # full
        third = load_entry(write_entry("add_c", source=ADD_SOURCE + "\n# a third\n"))
        result = client.evaluate(third, _candidate(third, third.module_source, 128))
        assert result.outcome is Outcome.OK
        assert "add_c" not in spare.prepared
    finally:
        client.close()


def test_only_the_spares_first_in_line_prepare_and_the_next_one_once_it_moves_up(
    tmp_path: Path, write_entry: WriteEntry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each preparation makes all of a kernel's cases in holds of the GPU turn that the
    worker's timing waits for: a spare that will not take over soon does not prepare yet."""
    monkeypatch.setattr(client_module, "PREPARED_SPARES", 1)
    spec = load_entry(write_entry())
    client = WorkerClient(
        workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True), spares=2
    )
    try:
        assert client.evaluate(spec, _candidate(spec, spec.module_source, 128)).outcome is (
            Outcome.OK
        )
        first, second = client._spares
        assert first.prepared == [spec.name] and second.prepared == []
        client.fresh()  # a re-measurement: the first spare takes over
        warm = client.evaluate(spec, _candidate(spec, spec.module_source, 128))
        assert warm.outcome is Outcome.OK and client.spare_takeovers == 1
        assert warm.metadata["case_cache"]["misses_here"] == 0  # it had prepared
        assert client._spares[0] is second and second.prepared == [spec.name]
        assert client._spares[1].prepared == []  # the new spare, last in line
    finally:
        client.close()


def test_a_kernel_prepared_ahead_is_first_evaluated_by_the_spare_that_prepared_it(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    """While a registry's kernel is tuned, the spares prepare the next one: its first
    evaluation (the baseline) finds every case made (20 to 27 s of making them per kernel of
    the example registry on the H100)."""
    first = load_entry(write_entry("add_a"))
    second = load_entry(write_entry("add_b", source=ADD_SOURCE + "\n# another kernel\n"))
    third = load_entry(write_entry("add_c", source=ADD_SOURCE + "\n# a third kernel\n"))
    client = WorkerClient(
        workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True), spares=1
    )
    try:
        assert client.evaluate(first, _candidate(first, first.module_source, 128)).outcome is (
            Outcome.OK
        )
        client.prepare_ahead(second)
        _wait_prepared(client)
        result = client.evaluate(second, _candidate(second, second.module_source, 128))
        assert result.outcome is Outcome.OK, result.reason
        assert client.spare_takeovers == 1  # the spare that prepared took the new kernel
        assert result.metadata["case_cache"]["misses_here"] == 0
        # A kernel nobody prepared stays with the running worker.
        result = client.evaluate(third, _candidate(third, third.module_source, 128))
        assert result.outcome is Outcome.OK and client.spare_takeovers == 1
        assert result.metadata["case_cache"]["misses_here"] > 0
    finally:
        client.close()


def test_spares_that_prepared_ahead_prepare_again_once_the_kernel_is_tuned(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    """Prepared ahead, a spare keeps the next kernel's cases only in the room the tuned one
    leaves (``CaseCache.guest``); once that kernel is evaluated, the spares that prepared
    only ahead are asked again, as hosts, so its re-measurements find their cases."""
    first = load_entry(write_entry("add_a"))
    second = load_entry(write_entry("add_b", source=ADD_SOURCE + "\n# another kernel\n"))
    client = WorkerClient(
        workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True), spares=2
    )
    try:
        assert client.evaluate(first, _candidate(first, first.module_source, 128)).outcome is (
            Outcome.OK
        )
        client.prepare_ahead(second)
        assert all("add_b" in spare.ahead for spare in client._spares)
        _wait_prepared(client)
        result = client.evaluate(second, _candidate(second, second.module_source, 128))
        assert result.outcome is Outcome.OK and client.spare_takeovers == 1, result.reason
        waited = [s for s in client._spares if s.prepared.count("add_b") == 2]
        assert waited, [s.prepared for s in client._spares]  # asked ahead, then as a host
        assert not any("add_b" in spare.ahead for spare in client._spares)
        client.fresh()  # a re-measurement in the spare that answered both requests
        warm = client.evaluate(second, _candidate(second, second.module_source, 256))
        assert warm.outcome is Outcome.OK, warm.reason
        assert client.spare_takeovers == 2
        assert warm.metadata["case_cache"]["misses_here"] == 0
    finally:
        client.close()


def test_a_spare_that_cannot_start_falls_back_to_a_cold_start(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    spec = load_entry(write_entry())
    client = WorkerClient(
        workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True), spares=1
    )
    try:
        client.start()
        assert client.spare_pid is not None
        os.killpg(client.spare_pid, 9)  # the spare (its sandbox too) dies while waiting
        client.fresh()
        result = client.evaluate(spec, _candidate(spec, spec.module_source, 256))
        assert result.outcome is Outcome.OK, result.reason
        # first, spare (dead), the cold start instead, and its own new spare
        assert client.spare_takeovers == 0 and client.starts == 4
        assert client.spare_pid is not None and len(client.pids()) == 2
    finally:
        client.close()


@pytest.mark.parametrize("device", ["3"])
def test_a_client_pins_its_worker_with_its_own_environment(tmp_path: Path, device: str) -> None:
    client = WorkerClient(
        workdir=tmp_path / "w",
        settings=EvaluationSettings(interpreter=True),
        env={"CUDA_VISIBLE_DEVICES": device},
    )
    try:
        client.start()
        (pid,) = client.worker_pids()  # the worker itself, inside its sandbox
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"CUDA_VISIBLE_DEVICES={device}".encode() in environ
    finally:
        client.close()


def test_the_running_worker_gets_most_of_the_device_share_for_cases(tmp_path: Path) -> None:
    """Together half the device (less the margin); the running worker, which evaluates nearly
    every candidate, most of it (equal shares of a tenth left layer_norm's cases spilled)."""
    settings = EvaluationSettings(interpreter=True)
    four = WorkerClient(workdir=tmp_path / "a", settings=settings, spares=4)
    running, spare = four._cache_share(spare=False), four._cache_share(spare=True)
    # Only the spares that prepare (the first PREPARED_SPARES in line) keep cases.
    assert running + PREPARED_SPARES * spare == pytest.approx(0.5) and running > 5 * spare
    alone = WorkerClient(workdir=tmp_path / "b", settings=settings)
    assert alone._cache_share(spare=False) == pytest.approx(0.5)


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")
def test_tune_makes_the_next_kernels_cases_while_one_is_tuned(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    """`ktuned tune` of a registry: the second kernel's first evaluation (its baseline) runs
    in a spare that prepared for it, every case made (on the H100 each kernel's first
    evaluation spent 20 to 27 s making them)."""
    from tuned.registry import scan_registry
    from tuned.search import TuneSettings
    from tuned.store import SqliteStore
    from tuned.tuning import tune_registry

    write_entry("add_a")
    registry = write_entry("add_b", source=ADD_SOURCE + "\n# another kernel\n").parent
    store = SqliteStore(tmp_path / "s.sqlite")
    report = tune_registry(
        registry,
        store=store,
        state_dir=tmp_path / "state",
        settings=TuneSettings(budget=1, seed=3),
        evaluation=EvaluationSettings(interpreter=False),
    )
    fid = store.record_fingerprint(report.fingerprint)
    second = next(s for s in scan_registry(registry).entries if s.name == "add_b")
    baseline = store.trials(second.name, second.generation, fid)[0]
    assert baseline.result.outcome is Outcome.OK, baseline.result.reason
    assert baseline.result.metadata["case_cache"]["misses_here"] == 0
    store.close()


_OUT_OF_MEMORY = (
    ADD_SOURCE
    + """

def add(x, y, BLOCK=256, num_warps=4):  # as a kernel whose working set finds no room
    raise RuntimeError("CUDA out of memory. Tried to allocate 7.83 GiB (GPU 0; 5.35 GiB free)")
"""
)


def test_out_of_memory_with_spares_running_is_evaluated_again_without_them(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    """On the H100, Liger's KL divergence (128k vocabulary) ran out of memory in the judge
    with 5 GiB of 80 free: the spares' cases, arenas and contexts held the rest. An
    evaluation that runs out of memory with spares running is tried again with them stopped;
    a candidate that runs out of memory alone too leaves its kernel's spares as they were."""
    hungry = load_entry(write_entry("hungry"))
    client = WorkerClient(
        workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True), spares=2
    )
    try:
        client.start()
        assert len(client.pids()) == 3
        result = client.evaluate(hungry, _candidate(hungry, _OUT_OF_MEMORY, 128))
        assert result.outcome is Outcome.RUNTIME_ERROR and "out of memory" in result.reason
        assert str(result.metadata["retried_alone"]).startswith(
            "out of GPU memory with 2 spares running"
        )
        assert client.alone == set()  # alone it failed too: the candidate's own want
        assert len(client.pids()) == 1  # the spares stopped for the retry...
        client.fresh()
        fine = client.evaluate(hungry, _candidate(hungry, hungry.module_source, 64))
        assert fine.outcome is Outcome.OK and "retried_alone" not in fine.metadata
        assert len(client.pids()) == 3  # ...and back with the next worker
    finally:
        client.close()


def test_a_kernel_that_fits_only_without_spares_is_evaluated_alone(
    tmp_path: Path, write_entry: WriteEntry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker answers as a kernel whose working set fits only once the spares are gone
    (the real processes run; only the worker's answer is scripted)."""
    hungry, other = load_entry(write_entry("hungry")), load_entry(write_entry("other"))
    client = WorkerClient(
        workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True), spares=2
    )
    real = client._evaluate
    tries: list[int] = []

    def scripted(spec: KernelSpec, *args: object) -> EvalResult:
        tries.append(len(client._spares))
        if spec.name == "hungry" and client._spares:
            return EvalResult(Outcome.RUNTIME_ERROR, reason="CUDA out of memory. Tried to ...")
        return real(spec, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(client, "_evaluate", scripted)
    try:
        client.start()
        first = client.evaluate(hungry, _candidate(hungry, hungry.module_source, 128))
        assert first.outcome is Outcome.OK and "retried_alone" in first.metadata
        assert tries == [2, 0] and client.alone == {"hungry"}
        client.fresh()  # a re-measurement: a new worker, and no spare started for it
        again = client.evaluate(hungry, _candidate(hungry, hungry.module_source, 64))
        assert again.outcome is Outcome.OK and "retried_alone" not in again.metadata
        assert tries[2:] == [0] and len(client.pids()) == 1
        client.fresh()  # another kernel: its worker starts with spares again
        other_result = client.evaluate(other, _candidate(other, other.module_source, 128))
        assert other_result.outcome is Outcome.OK
        assert len(client.pids()) == 3
    finally:
        client.close()


_SLOW_INPUTS = ADD_SOURCE.replace(
    "def make_inputs(shape, dtype, device, seed):\n",
    "def make_inputs(shape, dtype, device, seed):\n    import time\n\n    time.sleep(0.5)\n",
)


def test_a_new_kernel_is_not_handed_to_a_spare_still_preparing(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    """With the kernels tuned together, a kernel's first evaluation comes while the spare
    that prepares for it may still be making cases (on the H100 it waited up to 33 s): the
    running worker evaluates it then; a spare done preparing still takes a new kernel over."""
    assert "time.sleep(0.5)" in _SLOW_INPUTS
    first, slow, third = (
        load_entry(write_entry("first")),
        load_entry(write_entry("slow", _SLOW_INPUTS)),
        load_entry(write_entry("third")),
    )
    client = WorkerClient(
        workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True), spares=1
    )
    try:
        client.start()
        assert client.evaluate(first, _candidate(first, first.module_source, 128)).outcome is (
            Outcome.OK
        )
        client.prepare_ahead(slow)  # its cases take the spare seconds to make
        result = client.evaluate(slow, _candidate(slow, slow.module_source, 128))
        assert result.outcome is Outcome.OK
        assert client.spare_takeovers == 0  # the running worker did it, nobody waited
        client.prepare_ahead(third)
        _wait_prepared(client)
        result = client.evaluate(third, _candidate(third, third.module_source, 128))
        assert result.outcome is Outcome.OK and client.spare_takeovers == 1
    finally:
        client.close()


def test_a_spare_taken_over_skips_the_preparations_it_has_not_begun(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    """A re-measurement goes to a spare (``fresh``) that may still have the cases of several
    kernels queued to make (on the H100 one waited 56 s for five kernels prepared ahead):
    taken over, it skips those it has not begun, and the evaluation makes what it needs."""
    first = load_entry(write_entry("first"))
    slow = [load_entry(write_entry(f"slow{i}", _SLOW_INPUTS)) for i in range(4)]
    client = WorkerClient(
        workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True), spares=1
    )
    try:
        client.start()
        assert client.evaluate(first, _candidate(first, first.module_source, 128)).outcome is (
            Outcome.OK
        )
        for spec in slow:  # each makes 8 cases at 0.5 s: 16 s of preparations queued
            client.prepare_ahead(spec)
        client.fresh()
        began = time.monotonic()
        result = client.evaluate(first, _candidate(first, first.module_source, 256))
        elapsed = time.monotonic() - began
        assert result.outcome is Outcome.OK
        assert client.spare_takeovers == 1
        assert client.preparations_skipped >= 3  # at most the first had begun
        assert elapsed < 12, f"the take-over waited {elapsed:.1f} s"
        # A kernel it skipped is new to it: evaluated there, its cases made on demand.
        result = client.evaluate(slow[3], _candidate(slow[3], slow[3].module_source, 128))
        assert result.outcome is Outcome.OK
    finally:
        client.close()


def test_a_spare_taken_over_gives_up_the_preparation_it_has_begun(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    """A spare taken over for another kernel while it makes a kernel's cases gives that
    preparation up before its next case (on the H200 re-measurements waited 5 to 11 s for
    a spare to finish the preparation it had begun); the cases it made stay."""
    slower = _SLOW_INPUTS.replace("time.sleep(0.5)", "time.sleep(1.5)")
    first, slow = load_entry(write_entry("first")), load_entry(write_entry("slow", slower))
    client = WorkerClient(
        workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True), spares=1
    )
    try:
        client.start()
        assert client.evaluate(first, _candidate(first, first.module_source, 128)).outcome is (
            Outcome.OK
        )
        _wait_prepared(client)  # "ready" and its answer for the first kernel
        client.prepare_ahead(slow)  # 8 cases at 1.5 s: 12 s of preparation
        time.sleep(3.0)  # well into it
        client.fresh()
        began = time.monotonic()
        result = client.evaluate(first, _candidate(first, first.module_source, 256))
        elapsed = time.monotonic() - began
        assert result.outcome is Outcome.OK
        assert client.spare_takeovers == 1
        assert client.preparations_skipped == 1  # the one it had begun
        assert elapsed < 7, f"the take-over waited {elapsed:.1f} s"
    finally:
        client.close()


def test_a_measurement_the_hosts_noise_hid_is_made_again_before_it_is_recorded(
    tmp_path: Path, write_entry: WriteEntry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gpu_busy`` is no property of the candidate (on the H200, two 2-3 us originals
    beside a busy compile pool; recorded, a busy original stops its kernel for good): the
    client evaluates again, up to ``BUSY_RETRIES`` times, and says so in the result. The real
    worker runs; only its first answers are scripted."""
    spec = load_entry(write_entry("tiny"))
    client = WorkerClient(workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True))
    real = client._evaluate
    busy = {"left": 1}

    def scripted(*args: object) -> EvalResult:
        if busy["left"] > 0:
            busy["left"] -= 1
            return EvalResult(Outcome.GPU_BUSY, reason="timing: ... twice", phase="benchmark")
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(client, "_evaluate", scripted)
    monkeypatch.setattr(client_module, "BUSY_PAUSE_S", 0.0)
    original = Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=spec.module_source,
        knobs=dict(spec.baseline_knobs),
        provenance=Provenance.ORIGINAL,
    )
    try:
        client.start()
        result = client.evaluate(spec, original)
        assert result.outcome is Outcome.OK, result.reason
        assert "1 measurement(s) before this one not taken" in str(result.metadata["busy"])
        busy["left"] = client_module.BUSY_RETRIES + 1  # busy every time: then it is the result
        result = client.evaluate(spec, original)
        assert result.outcome is Outcome.GPU_BUSY and busy["left"] == 0
    finally:
        client.close()
