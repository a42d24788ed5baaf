"""A daemon with several GPUs: one worker per GPU, pinned by its UUID, all busy at once."""

from __future__ import annotations

import threading
from collections.abc import Collection
from pathlib import Path

import pytest

from tests.conftest import WriteEntry
from tests.daemon.conftest import evaluation_count, free_port, wait_for
from tuned.daemon.config import (
    ConfigError,
    DaemonConfig,
    EvaluationConfig,
    GpuConfig,
    MetricsConfig,
    RegistryConfig,
    parse_config,
)
from tuned.daemon.gpu import GpuDevice, ThrottleMark
from tuned.daemon.service import Daemon
from tuned.metrics import LiveStatus
from tuned.pipeline import MultiGpuPipeline
from tuned.store.sqlite import SqliteStore


class FakeGpu:
    """An idle GPU at ``index`` (NVML's view, as the daemon's monitor sees it)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.asked_with: list[set[int]] = []

    def devices(self) -> tuple[GpuDevice, ...]:
        return (GpuDevice(index=self.index, uuid=f"GPU-fake-{self.index}", model="Fake GPU"),)

    def foreign_work(self, own_pids: Collection[int]) -> str | None:
        self.asked_with.append(set(own_pids))
        return None

    def throttle_mark(self) -> ThrottleMark:
        return ThrottleMark()

    def throttled_since(self, mark: ThrottleMark) -> str | None:
        return None

    def close(self) -> None:
        pass


def test_gpu_indexes_are_checked() -> None:
    assert parse_config({"gpu": {"indexes": [0, 2]}}, source="t").gpu.lanes == (0, 2)
    assert parse_config({"gpu": {"index": 3}}, source="t").gpu.lanes == (3,)
    assert parse_config({"gpu": {"index": 1, "indexes": []}}, source="t").gpu.lanes == (1,)
    for bad in ([0, 0], [-1], "0,1", [True]):
        with pytest.raises(ConfigError, match=r"gpu\.indexes"):
            parse_config({"gpu": {"indexes": bad}}, source="t")


@pytest.mark.slow
def test_a_daemon_measures_on_every_gpu_it_is_given(
    tmp_path: Path, write_entry: WriteEntry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    registry = write_entry("add").parent
    gpus = {i: FakeGpu(i) for i in (0, 1)}
    config = DaemonConfig(
        state_dir=tmp_path / "state",
        device="interpreter",
        registry=RegistryConfig(path=registry, poll_interval_s=0.3),
        gpu=GpuConfig(indexes=(0, 1), check_interval_s=0.1),
        evaluation=EvaluationConfig(compile_workers=1),
        metrics=MetricsConfig(listen=f"127.0.0.1:{free_port()}"),
    )
    live = LiveStatus()
    daemon = Daemon(config, monitor_factory=lambda cfg, interp: gpus[cfg.gpu.index], live=live)
    db = tmp_path / "state" / "ktuned.sqlite"
    seen: dict[str, object] = {}

    def evaluations() -> int:
        return evaluation_count(db)

    def control() -> None:
        try:
            wait_for(lambda: evaluations() >= 7, 240, "seven evaluations")
            pipeline = daemon._pipeline
            assert isinstance(pipeline, MultiGpuPipeline)
            seen["measured"] = list(pipeline.measured)
            seen["pinned"] = [
                Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                for lane in daemon._lanes
                for pid in sorted(lane.worker_pids())  # inside their sandboxes
            ]
            seen["gpus"] = [g.gpu for g in live.snapshot().gpus]
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
    measured = seen["measured"]
    assert isinstance(measured, list) and all(n >= 1 for n in measured), measured
    environs = seen["pinned"]
    assert isinstance(environs, list) and len(environs) == 2
    for i, environ in enumerate(environs):
        assert f"CUDA_VISIBLE_DEVICES=GPU-fake-{i}".encode() in environ
    assert seen["gpus"] == ["0", "1"]
    # Each GPU's monitor counted every lane's worker as the daemon's own, not foreign work.
    assert any(len(p) >= 3 for p in gpus[1].asked_with)
    store = SqliteStore.open_reader(db)
    try:
        rows = store._query("SELECT candidate_id, result_json FROM evaluations")
    finally:
        store.close()
    # No candidate measured twice (but for the acceptance rule's re-measurements).
    ids = [r["candidate_id"] for r in rows if '"remeasure": true' not in r["result_json"]]
    assert len(rows) >= 7 and len(ids) == len(set(ids))
