"""Good citizen on a shared GPU: pause while foreign work runs, redo throttled measurements."""

from __future__ import annotations

import threading
import time
from collections.abc import Collection
from pathlib import Path

import pytest

from tests.conftest import WriteEntry
from tests.daemon.conftest import evaluation_count, free_port, wait_for
from tuned.daemon.config import (
    DaemonConfig,
    EvaluationConfig,
    GpuConfig,
    MetricsConfig,
    RegistryConfig,
)
from tuned.daemon.gated import GatedWorkerClient
from tuned.daemon.gpu import GpuDevice, ThrottleMark
from tuned.daemon.service import Daemon
from tuned.evaluation.client import EvaluationSettings, WorkerClient
from tuned.metrics import LiveStatus
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.registry import KernelSpec, load_entry


class FakeGpu:
    """A GPU whose foreign load and clock throttling the test controls."""

    def __init__(self) -> None:
        self.busy_reason: str | None = None
        self.throttled: list[str | None] = []
        self.asked_with: list[set[int]] = []

    def devices(self) -> tuple[GpuDevice, ...]:
        return (GpuDevice(index=0, uuid="GPU-fake-0000", model="Fake GPU"),)

    def foreign_work(self, own_pids: Collection[int]) -> str | None:
        self.asked_with.append(set(own_pids))
        return self.busy_reason

    def throttle_mark(self) -> ThrottleMark:
        return ThrottleMark()

    def throttled_since(self, mark: ThrottleMark) -> str | None:
        return self.throttled.pop(0) if self.throttled else None

    def close(self) -> None:
        pass


@pytest.mark.slow
def test_the_daemon_waits_while_foreign_work_uses_the_gpu(
    tmp_path: Path, write_entry: WriteEntry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    registry = write_entry("add").parent
    gpu = FakeGpu()
    gpu.busy_reason = "1 other process on GPU 0 (pid 4242; 3.0 GiB)"
    config = DaemonConfig(
        state_dir=tmp_path / "state",
        device="interpreter",
        registry=RegistryConfig(path=registry, poll_interval_s=0.3),
        gpu=GpuConfig(check_interval_s=0.1),
        evaluation=EvaluationConfig(),
        metrics=MetricsConfig(listen=f"127.0.0.1:{free_port()}"),
    )
    live = LiveStatus()
    daemon = Daemon(config, monitor_factory=lambda cfg, interp: gpu, live=live)
    db = tmp_path / "state" / "ktuned.sqlite"
    seen: dict[str, object] = {}

    def evaluations() -> int:
        return evaluation_count(db)

    def control() -> None:
        try:
            wait_for(lambda: live.snapshot().daemon_state == "paused_gpu_busy", 120, "a pause")
            time.sleep(1.5)
            seen["while_busy"] = evaluations()
            seen["busy_flag"] = dict(live.snapshot().gpu_busy)
            seen["metrics"] = _scrape(daemon)
            gpu.busy_reason = None
            wait_for(lambda: evaluations() >= 2, 120, "evaluations once the GPU is free")
            seen["after"] = evaluations()
            seen["state_after"] = live.snapshot().gpu_busy
        except BaseException as exc:  # hand any failure to the main thread
            seen["error"] = exc
        finally:
            daemon.request_stop()

    thread = threading.Thread(target=control)
    thread.start()
    daemon.run()
    thread.join()
    if "error" in seen:
        raise seen["error"]  # type: ignore[misc]
    assert seen["while_busy"] == 0  # nothing measured while foreign work ran
    assert seen["busy_flag"] == {"0": True}
    metrics = str(seen["metrics"])
    assert 'ktuned_daemon_state{state="paused_gpu_busy"} 1.0' in metrics
    assert 'ktuned_gpu_busy{UUID="GPU-fake-0000",gpu="0"} 1.0' in metrics
    assert seen["after"] >= 2 and seen["state_after"] == {"0": False}
    # the daemon's and its worker's pids (sandboxed: bwrap, its init and the worker itself)
    assert any(len(p) >= 2 for p in gpu.asked_with)


def _scrape(daemon: Daemon) -> str:
    import urllib.request

    assert daemon.server is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.server.port}/metrics") as r:
        return str(r.read().decode())


def _gpu_result(t: float) -> EvalResult:
    return EvalResult(Outcome.OK, time_s=t, timing_kind="gpu", timings={"N=1/float16": t})


def _candidate(spec: KernelSpec) -> Candidate:
    return Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=spec.module_source,
        knobs=dict(spec.baseline_knobs),
        provenance=Provenance.ORIGINAL,
    )


def test_throttled_measurements_are_discarded_and_redone(
    tmp_path: Path, write_entry: WriteEntry, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_entry(write_entry("add"))
    measured = iter([0.9, 0.5, 0.4])
    monkeypatch.setattr(WorkerClient, "evaluate", lambda self, s, c: _gpu_result(next(measured)))
    gpu = FakeGpu()
    gpu.throttled = ["clocks throttled: hardware thermal slowdown", None]
    client = GatedWorkerClient(
        workdir=tmp_path / "w",
        settings=EvaluationSettings(interpreter=False),
        monitor=gpu,
        retries=3,
    )
    result = client.evaluate(spec, _candidate(spec))
    assert result.time_s == 0.5 and client.discarded == 1  # the throttled 0.9 never counts


def test_a_gpu_that_always_throttles_yields_gpu_busy(
    tmp_path: Path, write_entry: WriteEntry, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_entry(write_entry("add"))
    monkeypatch.setattr(WorkerClient, "evaluate", lambda self, s, c: _gpu_result(0.5))
    gpu = FakeGpu()
    gpu.throttled = ["clocks throttled: power cap"] * 3
    client = GatedWorkerClient(
        workdir=tmp_path / "w",
        settings=EvaluationSettings(interpreter=False),
        monitor=gpu,
        retries=2,
    )
    result = client.evaluate(spec, _candidate(spec))
    assert result.outcome is Outcome.GPU_BUSY and "power cap" in result.reason
    assert client.discarded == 3


def test_interpreter_results_are_never_second_guessed(
    tmp_path: Path, write_entry: WriteEntry, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_entry(write_entry("add"))
    interp = EvalResult(Outcome.OK, time_s=0.5, timing_kind="interpreter")
    monkeypatch.setattr(WorkerClient, "evaluate", lambda self, s, c: interp)
    gpu = FakeGpu()
    gpu.throttled = ["clocks throttled: power cap"]
    client = GatedWorkerClient(
        workdir=tmp_path / "w",
        settings=EvaluationSettings(interpreter=True),
        monitor=gpu,
        retries=2,
    )
    assert client.evaluate(spec, _candidate(spec)) is interp and client.discarded == 0


class FakeNvml:
    """pynvml's surface as NvmlMonitor uses it, with values the test sets."""

    class NVMLError(Exception):
        pass

    NVML_PERF_POLICY_POWER = 0
    NVML_PERF_POLICY_THERMAL = 1

    def __init__(self) -> None:
        self.processes: list[object] = []
        self.utilization = 0
        self.memory_used = 0
        self.reasons = 0x1  # idle: harmless
        self.violation = 0

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetUUID(self, h: str) -> bytes:
        return b"GPU-1234"

    def nvmlDeviceGetName(self, h: str) -> str:
        return "NVIDIA H100"

    def nvmlDeviceGetComputeRunningProcesses(self, h: str) -> list[object]:
        return self.processes

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: str) -> list[object]:
        raise self.NVMLError("not supported")

    def nvmlDeviceGetUtilizationRates(self, h: str) -> object:
        return type("U", (), {"gpu": self.utilization})()

    def nvmlDeviceGetMemoryInfo(self, h: str) -> object:
        return type("M", (), {"used": self.memory_used})()

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int:
        return self.reasons

    def nvmlDeviceGetViolationStatus(self, h: str, policy: int) -> object:
        return type("V", (), {"violationTime": self.violation})()


def test_nvml_monitor_reads_processes_utilization_memory_and_throttling() -> None:
    from tuned.daemon.gpu import NvmlMonitor

    nvml = FakeNvml()
    m = NvmlMonitor(index=0, busy_utilization_percent=10, busy_memory_bytes=1 << 30, nvml=nvml)
    assert m.devices() == (GpuDevice(0, "GPU-1234", "NVIDIA H100"),)
    proc = lambda pid, mem: type("P", (), {"pid": pid, "usedGpuMemory": mem})()
    nvml.processes = [proc(100, 2 << 30)]
    assert m.foreign_work({100}) is None  # our own worker
    reason = m.foreign_work({1})
    assert reason is not None and "pid 100" in reason and "2.0 GiB" in reason
    nvml.processes, nvml.utilization = [], 55
    assert "utilization 55 %" in str(m.foreign_work({1}))
    nvml.utilization, nvml.memory_used = 0, 3 << 30
    assert "3.0 GiB" in str(m.foreign_work({1}))
    nvml.memory_used = 0
    mark = m.throttle_mark()
    assert m.throttled_since(mark) is None
    nvml.reasons = 0x40
    assert "hardware thermal" in str(m.throttled_since(mark))
    nvml.reasons, nvml.violation = 0x1, 10
    assert "violation" in str(m.throttled_since(mark))


def test_a_kernel_handed_to_the_spare_that_prepared_it_is_a_recycle_not_a_confirm(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    """Only the acceptance rule's re-measurement is a ``confirm``: a new kernel going to the
    spare that prepared for it is a ``recycle`` (neither may look like a crash loop)."""
    from tests.conftest import ADD_SOURCE
    from tuned.daemon.gpu import NoGpuMonitor

    first = load_entry(write_entry("add_a"))
    second = load_entry(write_entry("add_b", source=ADD_SOURCE + "\n# another kernel\n"))
    client = GatedWorkerClient(
        workdir=tmp_path / "w",
        settings=EvaluationSettings(interpreter=True),
        monitor=NoGpuMonitor("interpreter mode"),
        retries=0,
        spares=1,
    )
    try:
        assert client.evaluate(first, _candidate(first)).outcome is Outcome.OK
        client.prepare_ahead(second)
        deadline = time.monotonic() + 120  # a spare still preparing is not handed the kernel
        while not client._prepared_all(client._spares[0]):
            assert time.monotonic() < deadline, "the spare never finished preparing"
            time.sleep(0.2)
        assert client.evaluate(second, _candidate(second)).outcome is Outcome.OK
        assert client.spare_takeovers == 1
        assert client.starts_by_reason["recycle"] == 1 and client.starts_by_reason["confirm"] == 0
    finally:
        client.close()
