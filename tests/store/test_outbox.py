"""The local outbox of a fleet store: tuning goes on through a PostgreSQL outage, and every
result reaches the database exactly once when it is back, even after a crash mid-sync.

The outage is real: the session's PostgreSQL server (tests/store/conftest.py) is stopped
with ``pg_ctl`` and started again on the same port.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.conftest import wait_for
from tests.store.conftest import PostgresServer
from tests.store.test_fleet_daemon import (
    StartDaemon,
    _duplicates,
    _evaluations,
    _rows,
    start,  # noqa: F401 (the fixture that runs real daemons)
)
from tests.store.test_store_contract import FP, cand, record
from tuned.registry import KernelSpec
from tuned.store import Store
from tuned.store.outbox import OUTBOX_READS, OUTBOX_WRITES, REGISTRY_WRITES, OutboxStore
from tuned.store.postgres import PostgresStore
from tuned.store.sqlite import SqliteStore

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def outage(postgres_server: PostgresServer) -> Iterator[PostgresServer]:
    """The session's server, started again after the test whatever happens."""
    try:
        yield postgres_server
    finally:
        with contextlib.suppress(RuntimeError):  # already running
            postgres_server.start()


def _counts(url: str) -> dict[str, int]:
    db = PostgresStore(url)
    try:
        return {
            t: int(db._query(f"SELECT COUNT(*) AS n FROM {t}")[0]["n"])
            for t in ("candidates", "evaluations", "acceptances", "policy_state")
        }
    finally:
        db.close()


def test_every_store_method_is_routed() -> None:
    """A new Store method must be classified here on purpose: a write taken for a read
    would go to the outbox and never be replayed."""
    public = {n for n in dir(Store) if not n.startswith("_") and callable(getattr(Store, n))}
    assert OUTBOX_WRITES | REGISTRY_WRITES | OUTBOX_READS | {"close", "checkpoint"} == public
    expected = {
        "acceptances", "best", "best_hardware", "candidate", "case_timings", "changes_since",
        "claim_counts", "comparisons", "evaluated_fingerprints", "evaluation_totals",
        "fingerprint", "generation_info", "hardware_token", "held_counts", "incumbent",
        "invalid_entries", "kernel", "kernel_progress", "kernels", "known_fingerprints",
        "last_evaluated_at", "measured_speedup",
        "open_claims", "peaks", "policy_state", "profiles", "profiling_attempted",
        "profiling_totals", "rooflines", "source", "stale_bests", "timeline", "trials",
    }  # fmt: skip
    assert expected == OUTBOX_READS


def test_tuning_goes_on_through_an_outage_and_syncs_exactly_once(
    outage: PostgresServer,
    postgres_url: str,
    spec: KernelSpec,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tuned.store.outbox")
    store = OutboxStore(postgres_url, tmp_path / "outbox.sqlite", retry_s=0.0)
    store.sync_kernel(spec)
    fid = store.record_fingerprint(FP)
    base = cand(spec, 256, original=True)
    record(store, base, fid, 1.0, at=1.0)
    assert [t.candidate_id for t in store.trials(spec.name, spec.generation, fid)] == [base.id]
    mid = cand(spec, 512, parent=base.id)
    record(store, mid, fid, 0.8, at=1.5)  # written after the campaign's last read

    outage.stop()
    fast, slow = cand(spec, 64, parent=base.id), cand(spec, 128, parent=base.id)
    assert store.claim(fast, fid, {"arm": "config"}, owner="me", lease_s=60.0)
    record(store, fast, fid, 0.5, at=2.0)
    record(store, slow, fid, 0.9, at=3.0)
    store.record_acceptance(
        fast, fid, incumbent_id=base.id, status="accepted", first={"lo": 0.4}, second=None
    )
    store.save_policy_state(spec.name, spec.generation, fid, "ucb", {"pulls": 2})
    assert store.offline and store.outbox_rows() > 0
    # The campaign sees what it measured before and during the outage: nothing is redone.
    trials = store.trials(spec.name, spec.generation, fid)
    assert [t.candidate_id for t in trials] == [base.id, mid.id, fast.id, slow.id]
    assert store.incumbent(spec.name, spec.generation, fid) == fast.id
    assert store.policy_state(spec.name, spec.generation, fid, "ucb") == {"pulls": 2}
    assert store.candidate(fast.id, spec.generation) == fast
    store.sync_kernel(spec)  # a registry write: applied to the outbox, its statements journaled

    outage.start()
    assert len(store.trials(spec.name, spec.generation, fid)) == 4  # this call syncs first
    assert not store.offline and store.outbox_rows() == 0
    assert _counts(postgres_url) == {
        "candidates": 4, "evaluations": 4, "acceptances": 1, "policy_state": 1,
    }  # fmt: skip
    assert store.sync() == {}  # nothing left to replay
    assert store.incumbent(spec.name, spec.generation, fid) == fast.id
    store.close()

    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    infos = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(warnings) == 1 and "outbox" in warnings[0].getMessage()
    assert len(infos) == 1 and "2 evaluations" in infos[0].getMessage()


def test_a_store_opened_during_an_outage_syncs_when_the_database_returns(
    outage: PostgresServer, postgres_url: str, spec: KernelSpec, tmp_path: Path
) -> None:
    PostgresStore(postgres_url).close()  # the schema exists, as in a fleet that ran before
    gauge: list[int] = []
    outage.stop()
    store = OutboxStore(
        postgres_url, tmp_path / "outbox.sqlite", retry_s=0.0, on_change=gauge.append
    )
    assert store.offline
    fid = store.record_fingerprint(FP)
    record(store, cand(spec, 64), fid, 0.5, at=5.0)
    assert gauge[-1] > 0
    outage.start()
    assert store.sync()["evaluations"] == 1
    assert gauge[-1] == 0
    assert _counts(postgres_url)["evaluations"] == 1
    store.close()


_CRASH_AFTER_COMMIT = """
import os, sys
from pathlib import Path
from tuned.store.outbox import replay
from tuned.store.postgres import PostgresStore
from tuned.store.sqlite import SqliteStore
from tuned.store.sqlite import SqliteStore
print(replay(SqliteStore(Path(sys.argv[1])), PostgresStore(sys.argv[2]))["evaluations"])
sys.stdout.flush()
os.kill(os.getpid(), 9)  # killed after the database committed, before the outbox is emptied
"""


def test_a_crash_mid_sync_then_a_restart_leaves_one_copy(
    outage: PostgresServer, postgres_url: str, spec: KernelSpec, tmp_path: Path
) -> None:
    path = tmp_path / "outbox.sqlite"
    store = OutboxStore(postgres_url, path, retry_s=3600.0)
    store.sync_kernel(spec)
    fid = store.record_fingerprint(FP)
    outage.stop()
    for i, block in enumerate((32, 64, 128)):
        record(store, cand(spec, block), fid, 0.1 * (i + 1), at=10.0 + i)
    store.record_acceptance(
        cand(spec, 32), fid, incumbent_id="x", status="held", first={}, second=None
    )
    store.close()  # this run stops with the outbox full
    outage.start()

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", _CRASH_AFTER_COMMIT, str(path), postgres_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -9, proc.stderr
    assert proc.stdout.strip() == "3"  # the crashed sync had committed its copy
    assert _counts(postgres_url)["evaluations"] == 3

    restarted = OutboxStore(postgres_url, path)  # start-up replays the outbox again
    assert restarted.outbox_rows() == 0 and not restarted.offline
    assert _counts(postgres_url) == {
        "candidates": 3, "evaluations": 3, "acceptances": 1, "policy_state": 0,
    }  # fmt: skip
    assert len(restarted.trials(spec.name, spec.generation, fid)) == 3
    restarted.close()


def _outbox_evaluations(path: Path) -> list[tuple[str, float]]:
    outbox = SqliteStore.open_reader(path)
    try:
        rows = outbox._query("SELECT candidate_id, started_at FROM evaluations")
        return [(str(r["candidate_id"]), float(r["started_at"])) for r in rows]
    finally:
        outbox.close()


@pytest.mark.timeout(240)
def test_a_daemon_tunes_through_an_outage_and_loses_nothing(
    outage: PostgresServer,
    postgres_url: str,
    start: StartDaemon,  # noqa: F811 (the fixture imported above)
) -> None:
    d = start(postgres_url, "a")
    d.notify.wait("READY", "1", timeout=180)
    wait_for(lambda: _evaluations(postgres_url) >= 10, 120, "10 evaluations in PostgreSQL")
    outage.stop()
    outbox = d.state / "outbox.sqlite"
    wait_for(lambda: len(_outbox_evaluations(outbox)) >= 10, 120, "10 evaluations in the outbox")
    assert d.proc.poll() is None, d.output()
    kept = _outbox_evaluations(outbox)
    outage.start()
    wait_for(lambda: "synced the outbox" in d.output(), 60, "the outbox synced")
    before = _evaluations(postgres_url)
    wait_for(lambda: _evaluations(postgres_url) > before, 60, "tuning into PostgreSQL again")
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=60) == 0, d.output()

    in_db = _rows(postgres_url, "SELECT candidate_id, started_at FROM evaluations")
    for candidate_id, started_at in kept:  # every result of the outage, exactly once
        assert in_db.count((candidate_id, started_at)) == 1, candidate_id
    dups = _duplicates(postgres_url)
    detail = [
        (r, (str(r[0]), float(str(r[1]))) in kept)
        for c in dups
        for r in _rows(
            postgres_url,
            "SELECT candidate_id, started_at, outcome, seq, result_json FROM evaluations"
            " WHERE candidate_id=?",
            (c,),
        )
    ]
    assert dups == [], (detail, kept, d.output()[-6000:])  # no earlier work was redone
    assert _outbox_evaluations(outbox) == []
    out = d.output()
    assert out.count("is unreachable") == 1, out
    assert "unexpected error in the main loop" not in out, out
