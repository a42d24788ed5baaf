"""The collector: what a scrape shows, from the store and the daemon's live state."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import WriteEntry
from tests.daemon.test_store_reads import FP, _accept, _record
from tuned.metrics import GpuLabels, LiveStatus, StoreCollector
from tuned.metrics.exposition import render
from tuned.outcomes import Outcome
from tuned.registry import load_entry
from tuned.store.sqlite import SqliteStore


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_a_scrape_reads_the_store_and_the_live_state(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    spec = load_entry(write_entry("add"))
    store.sync_kernel(spec)
    fid = store.record_fingerprint(FP)
    _record(store, spec, fid, 256, 1.0, original=True)
    _accept(store, _record(store, spec, fid, 64, 0.25, phases={"compile": 3.0}), fid)
    live = LiveStatus()
    live.update(
        daemon_state="tuning",
        kernel_states={"add": "tuning"},
        gpus=(GpuLabels("0", "GPU-abc", "H100", "gpu"),),
        gpu_busy={"0": False},
        fingerprint={"triton": "3.9.0", "torch": "2.13.0"},
    )
    registry = CollectorRegistry()
    collector = StoreCollector(store.path, live)
    registry.register(collector)
    s = _samples(registry)
    k = (("kernel", "add"),)
    assert s[("ktuned_kernel_best_speedup_ratio", k)] == 2.0  # the acceptance's, not 1 / 0.25
    assert s[("ktuned_kernel_baseline_seconds", k)] == 1.0
    assert s[("ktuned_kernel_best_seconds", k)] == 0.25
    assert s[("ktuned_kernel_state", (("kernel", "add"), ("state", "tuning")))] == 1.0
    assert ("ktuned_kernel_state", (("kernel", "add"), ("state", "new"))) not in s
    assert s[("ktuned_candidates_evaluated_total", (("kernel", "add"), ("outcome", "ok")))] == 2
    assert s[("ktuned_arm_pulls_total", (("kernel", "add"), ("strategy", "config")))] == 1
    assert s[("ktuned_arm_mean_reward_ratio", (("kernel", "add"), ("strategy", "config")))] == 0.75
    assert s[("ktuned_daemon_state", (("state", "tuning"),))] == 1.0
    assert s[("ktuned_gpu_busy", (("UUID", "GPU-abc"), ("gpu", "0")))] == 0.0
    assert s[("ktuned_evaluation_phase_duration_seconds_count", (("phase", "compile"),))] == 1
    assert (
        s[
            (
                "ktuned_evaluation_phase_duration_seconds_bucket",
                (("le", "2.5"), ("phase", "compile")),
            )
        ]
        == 0
    )
    assert (
        s[
            (
                "ktuned_evaluation_phase_duration_seconds_bucket",
                (("le", "5.0"), ("phase", "compile")),
            )
        ]
        == 1
    )
    assert s[("ktuned_llm_tokens_total", (("kind", "prompt"),))] == 0
    build = [key for key in s if key[0] == "ktuned_build_info"]
    assert dict(build[0][1])["triton_version"] == "3.9.0"

    # Counters grow with new rows only (running sums), and survive a new collector (restart).
    _record(store, spec, fid, 128, None, outcome=Outcome.TIMEOUT)
    s = _samples(registry)
    assert (
        s[("ktuned_candidates_evaluated_total", (("kernel", "add"), ("outcome", "timeout")))] == 1
    )
    assert s[("ktuned_candidates_evaluated_total", (("kernel", "add"), ("outcome", "ok")))] == 2
    assert s[("ktuned_arm_pulls_total", (("kernel", "add"), ("strategy", "config")))] == 2
    fresh = CollectorRegistry()
    fresh.register(StoreCollector(store.path))  # no live state: `ktuned report`-style reader
    s2 = _samples(fresh)
    assert s2[("ktuned_candidates_evaluated_total", (("kernel", "add"), ("outcome", "ok")))] == 2
    assert ("ktuned_daemon_state", (("state", "tuning"),)) not in s2
    # Without a daemon, the state `ktuned status` derives from the store (tuned.store.overview).
    assert s2[("ktuned_kernel_state", (("kernel", "add"), ("state", "tuning")))] == 1.0

    store.retire_kernel("add")
    s = _samples(registry)
    assert s[("ktuned_kernel_state", (("kernel", "add"), ("state", "retired")))] == 1.0
    assert ("ktuned_kernel_best_speedup_ratio", k) not in s  # not in the geometric mean
    collector.close()


def test_the_fast_renderer_says_exactly_what_prometheus_client_says(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    spec = load_entry(write_entry("add"))
    store.sync_kernel(spec)
    fid = store.record_fingerprint(FP)
    _record(store, spec, fid, 256, 1.0, original=True)
    _accept(store, _record(store, spec, fid, 64, 0.25), fid)
    _record(store, spec, fid, 128, None, outcome=Outcome.NAN)
    store.record_invalid('/r/"odd"\\dir\n', "x")
    live = LiveStatus()
    live.update(gpus=(GpuLabels("0", 'GPU-"q"\\', "H100\nx", "gpu"),), gpu_busy={"0": True})
    registry = CollectorRegistry()
    registry.register(StoreCollector(store.path, live))
    ProcessCollector(registry=registry)

    def parsed(text: str) -> list[tuple[str, str, list[object]]]:
        return [
            (f.name, f.type, sorted((s.name, sorted(s.labels.items()), s.value) for s in f.samples))
            for f in text_string_to_metric_families(text)
        ]

    ours = parsed(render(registry).decode())
    theirs = parsed(generate_latest(registry).decode())
    volatile = {
        "process_cpu_seconds",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
    }
    ours = [f for f in ours if f[0] not in volatile]
    theirs = [f for f in theirs if f[0] not in volatile]
    assert ours == theirs


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_exposition(tmp_path: Path, write_entry: WriteEntry) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    spec = load_entry(write_entry("add"))
    store.sync_kernel(spec)
    fid = store.record_fingerprint(FP)
    _record(store, spec, fid, 256, 1.0, original=True)
    live = LiveStatus()
    live.update(gpus=(GpuLabels("interpreter", "", "none", "interpreter"),))
    registry = CollectorRegistry()
    registry.register(StoreCollector(store.path, live))
    body = render(registry).decode()
    lint = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, text=True, timeout=60
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
