"""The alert rules: `promtool test rules` for every alert, and a real Prometheus that pages on a
crashing candidate but not on a healthy tuning burst of fresh-worker re-measurements.

Needs Debian's `prometheus` package (scripts/test.sh installs it where apt-get is available).
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from tests.conftest import ADD_SOURCE, WriteEntry
from tests.daemon.conftest import ROOT, wait_for
from tests.daemon.test_prometheus import ALERTS, Prometheus, needs_prometheus
from tuned.daemon.gated import GatedWorkerClient
from tuned.daemon.gpu import NoGpuMonitor
from tuned.evaluation import EvaluationSettings
from tuned.metrics import LiveStatus, MetricsServer, StoreCollector
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import KernelSpec, load_entry
from tuned.store.sqlite import SqliteStore

RULE_TESTS = ROOT / "deploy" / "prometheus" / "ktuned-alerts.test.yml"
RUNBOOK = ROOT / "docs" / "runbook.md"


def _alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_has_a_firing_unit_test_and_a_runbook_section() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {
        case["alertname"]
        for t in tests
        for case in t.get("alert_rule_test", [])
        if case["exp_alerts"]
    }
    names = {r["alert"] for r in _alerts()}
    assert names - fired == set(), "alerts without a test in which they fire"
    anchors = {
        _anchor(line.lstrip("#"))
        for line in RUNBOOK.read_text().splitlines()
        if line.startswith("## ")
    }
    for rule in _alerts():
        url = rule["annotations"]["runbook_url"]
        assert url.startswith("file:///usr/share/doc/ktuned/runbook.md#"), url
        assert url.split("#", 1)[1] in anchors, (rule["alert"], url)
    crash = next(r for r in _alerts() if r["alert"] == "KtunedWorkerCrashLoop")
    assert 'reason="crash"' in crash["expr"]


@needs_prometheus
def test_promtool_unit_tests_of_every_alert_pass() -> None:
    run = subprocess.run(
        ["promtool", "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


# -- a real Prometheus, the daemon's real worker lanes and metrics endpoint


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[LiveStatus, int]]:
    """The daemon's collector and ``/metrics`` server over an empty store; its live status."""
    SqliteStore(tmp_path / "ktuned.sqlite").close()
    live = LiveStatus()
    live.update(daemon_state="tuning")
    registry = CollectorRegistry()
    collector = StoreCollector(tmp_path / "ktuned.sqlite", live)
    registry.register(collector)
    server = MetricsServer("127.0.0.1", 0, registry)
    server.start()
    try:
        yield live, server.port
    finally:
        server.stop()
        collector.close()


def _candidate(spec: KernelSpec, source: str, block: int) -> Candidate:
    return Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=source,
        knobs={"BLOCK": block},
        provenance=Provenance.PARAMETRIC,
    )


def _crash_alerts(prom: Prometheus) -> list[Any]:
    return [
        a
        for a in prom.get("/api/v1/alerts")["data"]["alerts"]
        if a["labels"]["alertname"] == "KtunedWorkerCrashLoop"
    ]


@pytest.mark.slow
@pytest.mark.timeout(900)
@needs_prometheus
def test_a_healthy_burst_does_not_page_and_a_crashing_candidate_does(
    tmp_path: Path, write_entry: WriteEntry, served: tuple[LiveStatus, int]
) -> None:
    live, port = served
    spec = load_entry(write_entry())
    settings = EvaluationSettings(
        interpreter=True, compile_timeout_s=30.0, correctness_timeout_s=60.0
    )
    lane = GatedWorkerClient(
        workdir=tmp_path / "worker",
        settings=settings,
        monitor=NoGpuMonitor("interpreter mode"),
        retries=0,
    )
    prom = Prometheus(tmp_path, port)
    try:
        wait_for(prom.ready, 60, "Prometheus to be ready")
        wait_for(
            lambda: prom.query('ktuned_worker_starts_total{reason="confirm"} == 0'),
            60,
            "a first scrape before the burst",
        )
        # A healthy burst as the acceptance rule makes it: each candidate re-measured in a
        # fresh worker (Campaign._judge calls fresh()), every evaluation ok.
        for block in (64, 128, 256, 512, 1024, 64, 128):
            lane.fresh()
            result = lane.evaluate(spec, _candidate(spec, ADD_SOURCE, block))
            assert result.outcome is Outcome.OK, result.reason
            live.update(worker_starts=dict(lane.starts_by_reason))
        assert lane.starts_by_reason["confirm"] == 6
        assert lane.starts_by_reason["crash"] == 0
        wait_for(
            lambda: prom.query('ktuned_worker_starts_total{reason="confirm"} == 6'),
            60,
            "Prometheus to see the six fresh workers",
        )
        # The old rule (every start after the first) would page on this burst.
        assert prom.query('sum(increase(ktuned_worker_starts_total{reason!="start"}[15m])) > 5')
        time.sleep(5)  # several rule evaluations (1 s apart) over the whole burst
        assert _crash_alerts(prom) == []
        assert prom.query("ktuned_worker_restarts_total == 0")  # deprecated: crashes only

        # A candidate that crashes only ends its runner (the judge carries on); what pages is
        # the worker itself dying, as a driver fault or the OOM killer would end it: here the
        # candidate kills its judge (the runners' zygote's parent) with posix.kill.
        kill_judge = (
            "import os, posix; "
            "posix.kill(int(open(f'/proc/{os.getppid()}/stat').read().rpartition(')')[2]"
            ".split()[1]), 9); out = torch.empty_like(x)"
        )
        crash = ADD_SOURCE.replace("out = torch.empty_like(x)", kill_judge)
        for block in (64, 128, 256, 512, 1024, 64, 128):
            result = lane.evaluate(spec, _candidate(spec, crash, block))
            assert result.outcome is Outcome.CRASH, result.reason
            live.update(worker_starts=dict(lane.starts_by_reason))
        # Each crash's replacement starts at the next evaluation: six after seven crashes.
        assert lane.starts_by_reason["crash"] == 6
        wait_for(
            lambda: any(a["state"] == "firing" for a in _crash_alerts(prom)),
            60,
            "KtunedWorkerCrashLoop to fire",
        )
        wait_for(lambda: prom.query("ktuned_worker_restarts_total == 6"), 30, "restarts == crashes")
    finally:
        prom.stop()
        lane.close()
