"""Hardware figures at scrape time, and the dashboard's profiling panels on a real Prometheus."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from profilers.ncu import parse_raw_csv, profile_from_launches
from tests.conftest import WriteEntry
from tests.daemon.conftest import free_port, wait_for
from tests.daemon.test_collector import _samples
from tests.daemon.test_prometheus import DASHBOARD, Prometheus, needs_prometheus
from tests.daemon.test_store_reads import _accept, _record
from tests.profilers.test_ncu_run import REPORT
from tuned.metrics import LiveStatus, MetricsServer, StoreCollector
from tuned.registry import load_entry
from tuned.store.sqlite import SqliteStore

GPU_FP = {"gpu_model": "NVIDIA H100 80GB HBM3", "mode": "gpu"}
PROFILE = profile_from_launches(parse_raw_csv(REPORT))
assert PROFILE is not None


def _filled(tmp_path: Path, write_entry: WriteEntry) -> SqliteStore:
    """A kernel with a baseline and an accepted best; only the best is profiled."""
    store = SqliteStore(tmp_path / "s.sqlite")
    spec = load_entry(write_entry("add"))
    store.sync_kernel(spec)
    fid = store.record_fingerprint(GPU_FP)
    baseline = _record(store, spec, fid, 256, 1.0, original=True)
    best = _record(store, spec, fid, 64, 0.5)
    _accept(store, best, fid)
    for status, wall in (("ok", 2.0), ("timeout", 300.0)):
        store.record_profiling_run(
            kernel="add",
            generation=spec.generation,
            candidate_id=best.id,
            gpu_model=GPU_FP["gpu_model"],
            status=status,
            reason="",
            wall_s=wall,
            started_at=time.time(),
            profile=PROFILE.to_dict() if status == "ok" else None,
        )
    store.record_roofline(
        kernel="add",
        generation=spec.generation,
        fingerprint=fid,
        candidate_id=best.id,
        fraction=0.42,
        figures={},
    )
    assert store.best("add") is not None and store.best("add").candidate_id == best.id  # type: ignore[union-attr]
    assert baseline.id != best.id
    return store


def test_a_scrape_shows_the_incumbents_hardware_figures(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    store = _filled(tmp_path, write_entry)
    live = LiveStatus()
    live.update(profiling_state="enabled")
    registry = CollectorRegistry()
    registry.register(StoreCollector(store.path, live))
    s = _samples(registry)
    assert PROFILE.sol_dram is not None and PROFILE.sol_sm is not None
    assert s[("ktuned_kernel_best_sol_ratio", (("kernel", "add"), ("resource", "dram")))] == (
        pytest.approx(PROFILE.sol_dram)
    )
    assert s[("ktuned_kernel_best_sol_ratio", (("kernel", "add"), ("resource", "sm")))] == (
        pytest.approx(PROFILE.sol_sm)
    )
    assert s[("ktuned_kernel_best_roofline_ratio", (("kernel", "add"),))] == 0.42
    assert s[("ktuned_kernel_best_occupancy_ratio", (("kernel", "add"),))] == 0.5
    assert s[("ktuned_profiling_enabled", ())] == 1.0
    assert s[("ktuned_profiling_state", (("state", "enabled"),))] == 1.0
    assert s[("ktuned_profiling_runs_total", (("status", "ok"),))] == 1
    assert s[("ktuned_profiling_runs_total", (("status", "timeout"),))] == 1
    assert s[("ktuned_profiling_runs_total", (("status", "failed"),))] == 0
    assert s[("ktuned_profiling_duration_seconds_count", ())] == 2
    assert s[("ktuned_profiling_duration_seconds_sum", ())] == 302.0
    assert s[("ktuned_profiling_duration_seconds_bucket", (("le", "2.5"),))] == 1

    # Profiling turned off: the gauge says so, the history stays.
    live.update(profiling_state="unavailable")
    s = _samples(registry)
    assert s[("ktuned_profiling_enabled", ())] == 0.0
    assert s[("ktuned_profiling_runs_total", (("status", "ok"),))] == 1

    # A new incumbent without a profile: its SOL figures are unknown, not the old best's.
    spec = load_entry(write_entry("add"))
    fid = store.record_fingerprint(GPU_FP)
    newer = _record(store, spec, fid, 1024, 0.25)
    _accept(store, newer, fid, speedup=4.0)
    s = _samples(registry)
    assert ("ktuned_kernel_best_sol_ratio", (("kernel", "add"), ("resource", "dram"))) not in s
    assert ("ktuned_kernel_best_roofline_ratio", (("kernel", "add"),)) not in s
    assert s[("ktuned_kernel_best_speedup_ratio", (("kernel", "add"),))] == 4.0


@pytest.mark.slow
@needs_prometheus
def test_every_profiling_panel_has_series_on_a_gpu_store(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    store = _filled(tmp_path, write_entry)
    live = LiveStatus()
    live.update(profiling_state="enabled")
    registry = CollectorRegistry()
    registry.register(StoreCollector(store.path, live))
    server = MetricsServer(host="127.0.0.1", port=free_port(), registry=registry)
    server.start()
    prom = Prometheus(tmp_path, server.port)
    try:
        wait_for(prom.ready, 60, "Prometheus to be ready")
        wait_for(
            lambda: prom.query('count_over_time(up{job="ktuned"}[5m]) >= 3'), 60, "three scrapes"
        )
        panels = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["id"] >= 16]
        assert {p["title"] for p in panels} >= {
            "Profiling enabled",
            "Best candidate: speed of light by resource",
            "Roofline fraction per kernel",
        }
        for panel in panels:
            for target in panel["targets"]:
                expr = (
                    target["expr"]
                    .replace("$__rate_interval", "1m")
                    .replace("$instance", ".*")
                    .replace("$kernel", ".*")
                )
                assert prom.query(expr), (panel["title"], expr)
    finally:
        prom.stop()
        server.stop()
