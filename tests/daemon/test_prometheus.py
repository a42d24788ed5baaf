"""A real Prometheus scrapes a real `ktuned run`: every dashboard and alert expression works.

Needs Debian's `prometheus` package (scripts/test.sh installs it where apt-get is available).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import WriteEntry
from tests.daemon.conftest import ROOT, StartDaemon, free_port, wait_for

DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "ktuned.json"
ALERTS = ROOT / "deploy" / "prometheus" / "ktuned-alerts.yml"

needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="Prometheus is not installed (Debian package `prometheus`; scripts/test.sh installs "
    "it with apt-get when it can)",
)


#: Metrics that exist only on a GPU with Nsight Compute profiles or measured peaks
#: (docs/profiling.md): this test's interpreter-mode daemon cannot have series for them.
#: tests/profilers/test_dashboard.py checks their panels against recorded profiles.
GPU_ONLY_METRICS = (
    "ktuned_kernel_best_sol_ratio",
    "ktuned_kernel_best_occupancy_ratio",
    "ktuned_kernel_best_roofline_ratio",
)


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL with the dashboard's variables filled in) for every target."""
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel["targets"]:
            expr = (
                target["expr"]
                .replace("$__rate_interval", "1m")
                .replace("$instance", ".*")
                .replace("$kernel", ".*")
            )
            out.append((panel["title"], expr))
    return out


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def all_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_dashboard_names_its_panels() -> None:
    dash = json.loads(DASHBOARD.read_text())
    titles = " | ".join(p["title"] for p in dash["panels"]).lower()
    for needed in (
        "geometric-mean speedup",
        "speedup per kernel",
        "candidates per hour by outcome",
        "strategy pulls",
        "mean reward",
        "token budget",
        "daemon state",
        "gpu",
        "time since last improvement",
        "invalid registry entries",
        "held candidates",
        "stale bests",
        "llm tokens per kernel",
        "throttled measurements",
        "worker starts by reason",
    ):
        assert needed in titles
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    provisioning = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/dashboards/ktuned.yaml").read_text()
    )
    assert provisioning["providers"][0]["type"] == "file"


@needs_prometheus
def test_promtool_checks_the_rules() -> None:
    run = subprocess.run(
        ["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{len(all_rules())} rules found" in run.stdout


@needs_prometheus
def test_promtool_checks_the_scrape_config(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    assert [j["job_name"] for j in doc["scrape_configs"]] == ["ktuned"]  # the alerts' job
    doc["rule_files"] = [str(ALERTS)]  # installed under /etc/prometheus/rules/ in production
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(doc))
    run = subprocess.run(
        ["promtool", "check", "config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stdout + run.stderr


class Prometheus:
    def __init__(self, workdir: Path, target_port: int) -> None:
        self.port = free_port()
        config = workdir / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(ALERTS)],
                    "scrape_configs": [
                        {
                            "job_name": "ktuned",
                            "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}],
                        }
                    ],
                }
            )
        )
        self.log = (workdir / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=self.log,
        )

    def get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        url = f"http://127.0.0.1:{self.port}{path}" + (f"?{query}" if query else "")
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())

    def query(self, expr: str) -> list[Any]:
        answer = self.get("/api/v1/query", query=expr)
        assert answer["status"] == "success", (expr, answer)
        return list(answer["data"]["result"])

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.mark.slow
@needs_prometheus
def test_prometheus_scrapes_ktuned_and_every_panel_and_alert_has_series(
    tmp_path: Path, write_entry: WriteEntry, start_daemon: StartDaemon
) -> None:
    registry = write_entry("add").parent
    write_entry("add2")
    broken = registry / "broken"
    broken.mkdir()
    (broken / "kernel.yaml").write_text("name: broken\nmodule: missing.py\n")
    d = start_daemon(registry)
    d.notify.wait("READY", "1", timeout=180)
    wait_for(lambda: len(d.evaluations()) >= 4, 120, "a few evaluations")

    body = d.metrics()
    lint = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, text=True, timeout=60
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr

    prom = Prometheus(tmp_path, d.port)
    try:
        wait_for(prom.ready, 60, "Prometheus to be ready")
        wait_for(
            lambda: prom.query('count_over_time(up{job="ktuned"}[5m]) >= 4'),
            60,
            "four scrapes of ktuned",
        )
        assert prom.query('up{job="ktuned"} == 1')
        empty = [
            (title, expr)
            for title, expr in dashboard_queries()
            if not prom.query(expr) and not any(m in expr for m in GPU_ONLY_METRICS)
        ]
        assert not empty, f"dashboard expressions without series: {empty}"
        for rule in alert_rules():
            prom.query(rule["expr"])  # valid PromQL that evaluates
            names = set(re.findall(r"\b(ktuned_[a-z0-9_]+|up)\b", rule["expr"]))
            assert names, rule["alert"]
            for name in names:
                assert prom.query(f'{{__name__="{name}", job="ktuned"}}'), (rule["alert"], name)

        def rules_healthy() -> bool:
            groups = prom.get("/api/v1/rules")["data"]["groups"]
            rules = [r for g in groups for r in g["rules"]]
            return (
                len(rules) == len(all_rules())
                and all(
                    r["health"] == "ok" and r.get("lastEvaluation", "").startswith("2") is not None
                    for r in rules
                )
                and all(r["health"] == "ok" for r in rules)
            )

        wait_for(rules_healthy, 30, "every alert rule evaluated without error")
        firing = prom.get("/api/v1/alerts")["data"]["alerts"]
        assert [a["labels"]["alertname"] for a in firing if a["state"] == "firing"] == []
        # Values Prometheus sees match the store: the invalid entry and the kernels' states.
        invalid = prom.query("ktuned_registry_invalid_entries")
        assert invalid and invalid[0]["value"][1] == "1"
        states = prom.query("ktuned_kernel_state == 1")
        assert {s["metric"]["kernel"] for s in states} == {"add", "add2"}
    finally:
        prom.stop()
    t0 = time.monotonic()
    assert d.stop() == 0
    assert time.monotonic() - t0 < 10
