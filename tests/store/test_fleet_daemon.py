"""Fleet mode, daemons: real ``ktuned run`` processes on one real PostgreSQL store.

They tune the replay example (examples/replay: recorded measurements, milliseconds per
evaluation), so what is tested is the daemon's own wiring: the store URL, claims, the
metrics collector reading PostgreSQL, and a dead daemon's work moving to a live one.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.daemon.conftest import wait_for
from tests.store.conftest import FleetDaemon, launch_fleet_daemon, stop_fleet_daemons
from tuned.errors import StoreError
from tuned.store.postgres import PostgresStore

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = ROOT / "examples" / "replay"
KERNEL = "convolution-a6000-replay"

pytestmark = pytest.mark.timeout(240)


StartDaemon = Callable[..., FleetDaemon]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[StartDaemon]:
    started: list[FleetDaemon] = []

    def run(url: str, name: str, *, lease_s: float = 60.0) -> FleetDaemon:
        daemon = launch_fleet_daemon(tmp_path, url, name, registry=REGISTRY, lease_s=lease_s)
        started.append(daemon)
        return daemon

    yield run
    stop_fleet_daemons(started)


def _rows(url: str, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    store = PostgresStore(url)
    try:
        return [tuple(r[i] for i in range(len(r.keys()))) for r in store._query(sql, args)]
    finally:
        store.close()


def _evaluations(url: str) -> int:
    try:
        rows = _rows(url, "SELECT COUNT(*) FROM evaluations WHERE kernel=?", (KERNEL,))
    except StoreError:  # the daemon has not created the tables yet
        return 0
    return int(str(rows[0][0]))


def _first_measurements(url: str) -> list[tuple[str, str]]:
    """(candidate, fingerprint) of every evaluation but the acceptance rule's own
    re-measurements of a candidate (rows marked ``remeasure``)."""
    rows = _rows(url, "SELECT candidate_id, fingerprint, result_json FROM evaluations")
    return [
        (str(c), str(f))
        for c, f, result in rows
        if not json.loads(str(result)).get("metadata", {}).get("remeasure")
    ]


def _duplicates(url: str) -> list[str]:
    """Candidates evaluated twice on one fingerprint."""
    first = _first_measurements(url)
    return sorted({c for c, f in first if first.count((c, f)) > 1})


def test_the_daemon_tunes_on_postgresql_and_metrics_read_it(
    postgres_url: str, start: StartDaemon
) -> None:
    d = start(postgres_url, "a")
    d.notify.wait("READY", "1", timeout=180)
    wait_for(lambda: _evaluations(postgres_url) >= 20, 120, "20 evaluations in PostgreSQL")
    body = d.metrics()
    in_db = _evaluations(postgres_url)
    counted = sum(
        float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith(f'ktuned_candidates_evaluated_total{{kernel="{KERNEL}"')
    )
    assert 20 <= counted <= in_db  # the collector reads PostgreSQL, not a local file
    assert f'ktuned_kernel_best_speedup_ratio{{kernel="{KERNEL}"}}' in body
    assert not (d.state / "ktuned.sqlite").exists()  # no local store beside PostgreSQL
    assert "fleet mode: claims as" in d.output()
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=60) == 0, d.output()
    assert _duplicates(postgres_url) == []
    # Every evaluation the daemon made went through a claim, now done.
    open_claims = _rows(postgres_url, "SELECT COUNT(*) FROM claims WHERE done=0")
    assert open_claims == [(0,)]


def _holding(url: str, pid: int) -> list[str]:
    """Candidate ids the daemon with ``pid`` holds an unfinished claim on."""
    rows = _rows(
        url,
        "SELECT candidate_id, owner FROM claims WHERE done=0",
    )
    return [str(c) for c, owner in rows if str(owner).split(":")[1] == str(pid)]


def test_two_daemons_share_the_work_and_a_killed_ones_claim_moves(
    postgres_url: str, start: StartDaemon
) -> None:
    a = start(postgres_url, "a", lease_s=2.0)
    b = start(postgres_url, "b", lease_s=2.0)
    a.notify.wait("READY", "1", timeout=180)
    b.notify.wait("READY", "1", timeout=180)
    wait_for(lambda: _evaluations(postgres_url) >= 30, 120, "30 evaluations in PostgreSQL")

    def workers() -> set[str]:
        by = _rows(postgres_url, "SELECT owner FROM claims WHERE done=1")
        return {str(o).split(":")[1] for (o,) in by}

    # Both have recorded work of their own before one is killed (on a loaded machine one
    # daemon can start seconds after the other).
    wait_for(lambda: str(a.proc.pid) in workers(), 120, "an evaluation of daemon a")
    # Freeze `a` until it is caught holding a claim (between claiming a candidate and
    # recording its result), then kill it there: SIGKILL, no cleanup.
    orphan: list[str] = []
    for _ in range(400):
        os.killpg(a.proc.pid, signal.SIGSTOP)
        orphan = _holding(postgres_url, a.proc.pid)
        if orphan:
            break
        os.killpg(a.proc.pid, signal.SIGCONT)
        time.sleep(0.005 * (1 + _ % 7))
    assert orphan, "daemon a was never caught holding a claim"
    os.killpg(a.proc.pid, signal.SIGKILL)
    a.proc.wait()
    # The survivor takes the claim over once the lease ran out, and evaluates it.
    wait_for(
        lambda: (
            _rows(
                postgres_url,
                "SELECT COUNT(*) FROM evaluations WHERE candidate_id=?",
                (orphan[0],),
            )
            == [(1,)]
        ),
        90,
        "the orphaned candidate's evaluation by the survivor",
    )
    owners = _rows(
        postgres_url,
        "SELECT owner, takeovers, done FROM claims WHERE candidate_id=?",
        (orphan[0],),
    )
    assert len(owners) == 1 and str(owners[0][0]).split(":")[1] == str(b.proc.pid)
    assert owners[0][1:] == (1, 1)
    b.proc.send_signal(signal.SIGTERM)
    assert b.proc.wait(timeout=60) == 0, b.output()
    # No candidate was evaluated twice, and every result's claim is done.
    assert _duplicates(postgres_url) == []
    done = _rows(postgres_url, "SELECT COUNT(*) FROM claims WHERE done=1")[0][0]
    assert done == len(_first_measurements(postgres_url))
    assert workers() == {str(a.proc.pid), str(b.proc.pid)}  # both did work
