"""Small operator promises: `HEAD /metrics` and `/healthz` answer 200, and a worker replaced
by a fresh one (a re-measurement) is reaped at once, never left a zombie."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import ADD_SOURCE, WriteEntry
from tuned.daemon.gated import GatedWorkerClient
from tuned.daemon.gpu import NoGpuMonitor
from tuned.evaluation import EvaluationSettings
from tuned.metrics import LiveStatus, MetricsServer, StoreCollector
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import load_entry
from tuned.store.sqlite import SqliteStore


def _request(url: str, method: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), b""


def test_head_and_healthz(tmp_path: Path) -> None:
    SqliteStore(tmp_path / "s.sqlite").close()
    registry = CollectorRegistry()
    registry.register(StoreCollector(tmp_path / "s.sqlite", LiveStatus()))
    server = MetricsServer("127.0.0.1", 0, registry)
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        status, headers, body = _request(f"{base}/metrics", "GET")
        assert status == 200 and b"ktuned_build_info" in body
        status, head_headers, head_body = _request(f"{base}/metrics", "HEAD")
        assert status == 200 and head_body == b""
        assert head_headers["Content-Type"] == headers["Content-Type"]
        assert int(head_headers["Content-Length"]) > 0
        assert _request(f"{base}/healthz", "GET")[::2] == (200, b"ok\n")
        assert _request(f"{base}/healthz", "HEAD")[::2] == (200, b"")
        assert _request(f"{base}/nope", "GET")[0] == 404
    finally:
        server.stop()


def _state(pid: int) -> str:
    """The process state letter (Z: a zombie), or "" when the pid is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


@pytest.mark.slow
def test_a_replaced_worker_is_reaped(tmp_path: Path, write_entry: WriteEntry) -> None:
    spec = load_entry(write_entry())
    lane = GatedWorkerClient(
        workdir=tmp_path / "w",
        settings=EvaluationSettings(interpreter=True),
        monitor=NoGpuMonitor("interpreter mode"),
        retries=0,
    )
    candidate = Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=ADD_SOURCE,
        knobs={"BLOCK": 128},
        provenance=Provenance.PARAMETRIC,
    )
    try:
        assert lane.evaluate(spec, candidate).outcome is Outcome.OK
        [old] = lane.pids()
        lane.fresh()  # killed, not waited for: the next worker starts at once
        deadline = time.monotonic() + 20
        while _state(old) not in ("",) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(old) == "", f"worker {old} left in state {_state(old)!r}"
        assert lane.evaluate(spec, candidate).outcome is Outcome.OK
        assert lane.starts_by_reason == {
            "start": 1,
            "crash": 0,
            "timeout": 0,
            "confirm": 1,
            "recycle": 0,
        }
    finally:
        lane.close()
