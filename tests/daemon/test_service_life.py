"""The service's life, run as systemd runs it: a real `ktuned run` and a real notify socket."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ADD_SOURCE, WriteEntry
from tests.daemon.conftest import ROOT, StartDaemon, wait_for

pytestmark = pytest.mark.slow


def test_ready_only_after_metrics_answer_then_status_and_watchdog(
    tmp_path: Path, write_entry: WriteEntry, start_daemon: StartDaemon
) -> None:
    registry = write_entry("add").parent
    d = start_daemon(registry, env={"WATCHDOG_USEC": "600000"})
    ready = d.notify.wait("READY", "1", timeout=180)
    # The instant READY arrives, /metrics must already answer with the daemon's figures.
    body = d.metrics()
    assert "ktuned_build_info" in body and 'ktuned_kernel_state{kernel="add"' in body
    assert "kernels:" in ready["STATUS"]
    before = [m for m in d.notify.messages if "READY" in m]
    assert len(before) == 1
    # STATUS names the kernel being tuned; WATCHDOG=1 keeps coming from the main loop.
    d.notify.wait("STATUS", "tuning add; kernels: 1 new", timeout=60)
    time.sleep(1.5)
    d.notify.drain()
    pings = [m for m in d.notify.messages if m.get("WATCHDOG") == "1"]
    assert len(pings) >= 3
    assert d.stop() == 0
    d.notify.wait("STOPPING", "1", timeout=5)


def test_sighup_reloads_and_picks_up_a_registry_change(
    tmp_path: Path, write_entry: WriteEntry, start_daemon: StartDaemon
) -> None:
    registry = write_entry("add").parent
    # Polling once an hour: only the reload can find the new entry in time.
    d = start_daemon(registry, poll=3600)
    d.notify.wait("READY", "1", timeout=180)
    wait_for(lambda: d.evaluations(), 60, "a first evaluation")
    write_entry("add_late")
    time.sleep(0.5)
    assert "add_late" not in d.metrics()
    d.proc.send_signal(signal.SIGHUP)
    reloading = d.notify.wait("RELOADING", "1", timeout=30)
    assert int(reloading["MONOTONIC_USEC"]) > 0
    d.notify.wait("READY", "1", timeout=60)
    assert 'ktuned_kernel_state{kernel="add_late",state="new"} 1.0' in d.metrics() or any(
        k == "add_late" for k, _, _ in d.evaluations()
    )
    wait_for(lambda: any(k == "add_late" for k, _, _ in d.evaluations()), 60, "add_late tuned")
    assert d.stop() == 0


def slow_when_marked(marker: Path) -> str:
    """The add kernel, whose launcher hangs for 2 minutes while ``marker`` exists."""
    return ADD_SOURCE.replace(
        "def add(x, y, BLOCK=256, num_warps=4):\n",
        "def add(x, y, BLOCK=256, num_warps=4):\n"
        "    import os, time\n"
        f"    if os.path.exists({str(marker)!r}):\n"
        "        time.sleep(120)\n",
    )


def _pids_in_group(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:
                pids.append(int(entry))
    return pids


def test_sigterm_mid_evaluation_exits_fast_and_the_next_start_loses_nothing(
    tmp_path: Path, write_entry: WriteEntry, start_daemon: StartDaemon
) -> None:
    marker = tmp_path / "SLOW"
    registry = write_entry("slow", source=slow_when_marked(marker)).parent
    # The marker is a host file, which the workers' sandbox hides from candidate code (the
    # launcher would never see it): this test is about stopping, so no sandbox.
    d = start_daemon(registry, extra="evaluation: {sandbox: none}\n")
    d.notify.wait("READY", "1", timeout=180)
    wait_for(lambda: len(d.evaluations()) >= 3, 120, "three evaluations")
    # From now on every evaluation hangs in the launcher (inside the worker).
    marker.write_text("")
    pending_sql = (
        "SELECT c.id FROM candidates c WHERE NOT EXISTS (SELECT 1 FROM evaluations e"
        " WHERE e.candidate_id = c.id AND e.generation = c.generation)"
    )
    # In flight: a new candidate (recorded, no result yet) or the acceptance rule's
    # re-measurement of one; either way the evaluation count stops moving.
    seen = [len(d.evaluations()), time.monotonic()]

    def stuck() -> bool:
        n = len(d.evaluations())
        if n != seen[0]:
            seen[:] = [n, time.monotonic()]
        return time.monotonic() - seen[1] > 3.0

    wait_for(stuck, 90, "an evaluation in flight")
    before = d.evaluations()
    workers = [
        int(p) for p in Path(f"/proc/{d.proc.pid}/task/{d.proc.pid}/children").read_text().split()
    ]
    assert workers, "the daemon has no worker process"
    t0 = time.monotonic()
    assert d.stop(signal.SIGTERM, timeout=30) == 0
    assert time.monotonic() - t0 < 10  # well within TimeoutStopSec=30
    d.notify.wait("STOPPING", "1", timeout=5)
    wait_for(lambda: not any(_pids_in_group(w) for w in workers), 5, "the worker group gone")
    assert d.evaluations() == before  # the abandoned evaluation left no result
    in_flight = d.query(pending_sql)
    assert len(in_flight) <= 1

    marker.unlink()
    again = start_daemon(registry, name="again")
    again.notify.wait("READY", "1", timeout=180)
    wait_for(lambda: len(again.evaluations()) > len(before) + 1, 120, "tuning to go on")
    after = again.evaluations()
    assert after[: len(before)] == before  # nothing lost or rewritten
    twice = again.query(
        "SELECT candidate_id FROM evaluations WHERE json_extract(result_json,"
        " '$.metadata.remeasure') IS NULL GROUP BY candidate_id HAVING COUNT(*) > 1"
    )
    assert twice == []  # nothing evaluated twice (the acceptance rule's re-measures aside)
    if in_flight:  # the abandoned candidate was evaluated after the restart
        assert in_flight[0][0] in {cid for _, cid, _ in after}
    assert again.stop() == 0


def test_port_in_use_is_a_clear_error(tmp_path: Path, write_entry: WriteEntry) -> None:
    registry = write_entry("add").parent
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = tmp_path / "c.yaml"
        config.write_text(
            f"state_dir: {tmp_path / 's'}\ndevice: interpreter\nregistry: {{path: {registry}}}\n"
            f'metrics: {{listen: "127.0.0.1:{port}"}}\n'
        )
        run = subprocess.run(
            [sys.executable, "-m", "tuned.cli", "run", "--config", str(config)],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert run.returncode == 1
    assert f"127.0.0.1:{port}" in run.stderr and "already in use" in run.stderr
    assert "metrics.listen" in run.stderr and "Traceback" not in run.stderr
