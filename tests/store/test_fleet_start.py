"""A fleet daemon that starts while PostgreSQL is down: it registers its kernels and tunes
into the local outbox, and when the database answers everything reaches it exactly once.

The outage is real (``pg_ctl stop`` before the daemon starts, ``start`` later), the daemon a
real ``ktuned run`` process on the replay example, as in tests/store/test_outbox.py.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

import pytest

from tests.daemon.conftest import wait_for
from tests.store.conftest import PostgresServer
from tests.store.test_fleet_daemon import (
    KERNEL,
    StartDaemon,
    _duplicates,
    _evaluations,
    _rows,
    start,  # noqa: F401 (the fixture that runs real daemons)
)
from tests.store.test_outbox import _outbox_evaluations, outage  # noqa: F401 (a fixture)
from tests.store.test_store_contract import FP, cand, record
from tuned.registry import KernelSpec
from tuned.store.outbox import OutboxStore, replay
from tuned.store.postgres import PostgresStore
from tuned.store.sqlite import SqliteStore

pytestmark = pytest.mark.timeout(240)


def test_registry_writes_made_offline_reach_the_database_once(
    outage: PostgresServer,  # noqa: F811 (the fixture imported above)
    postgres_url: str,
    spec: KernelSpec,
    tmp_path: Path,
) -> None:
    """Registration, invalid entries and retirement made offline are replayed in order."""
    PostgresStore(postgres_url).close()  # the schema exists, as in a fleet that ran before
    outage.stop()
    store = OutboxStore(postgres_url, tmp_path / "outbox.sqlite", retry_s=0.0)
    assert store.offline
    assert store.sync_kernel(spec)  # new to this store: registered in the outbox
    assert [k.name for k in store.kernels()] == [spec.name]  # offline reads see it
    store.record_invalid("/registry/broken", "kernel.yaml: no name")
    store.record_invalid("/registry/gone", "kernel.yaml: no module")
    store.forget_invalid("/registry/gone")
    store.set_kernel_state(spec.name, "needs_llm", "no module yet")
    store.set_kernel_state(spec.name, "active")
    fid = store.record_fingerprint(FP)
    record(store, cand(spec, 64, original=True), fid, 1.0, at=1.0)
    assert store.outbox_rows() >= 6  # five registry writes (journaled statements), results
    copy = tmp_path / "copy.sqlite"  # the outbox as a box killed after the commit leaves it
    with sqlite3.connect(tmp_path / "outbox.sqlite") as src, sqlite3.connect(copy) as dst:
        src.backup(dst)

    outage.start()
    added = store.sync()
    assert added["registry writes"] >= 5 and added["evaluations"] == 1
    assert not store.offline and store.outbox_rows() == 0
    store.close()
    db = PostgresStore(postgres_url)
    try:
        for again in (False, True):  # replaying the same outbox again changes nothing
            if again:
                assert replay(SqliteStore(copy), db)["evaluations"] == 0
            kernel = db.kernel(spec.name)
            assert kernel is not None
            assert (kernel.generation, kernel.state) == (spec.generation, "active")
            assert db.invalid_entries() == {"/registry/broken": "kernel.yaml: no name"}
            assert db.fingerprint(fid) == FP
            trials = db.trials(spec.name, spec.generation, fid)
            assert [t.candidate_id for t in trials] == [cand(spec, 64, original=True).id]
            assert len(db._query("SELECT * FROM evaluations")) == 1
    finally:
        db.close()


def test_a_daemon_started_during_an_outage_tunes_and_syncs_once(
    outage: PostgresServer,  # noqa: F811 (the fixture imported above)
    postgres_url: str,
    start: StartDaemon,  # noqa: F811 (the fixture imported above)
) -> None:
    outage.stop()  # down before the daemon starts: a fresh fleet database, never reached
    d = start(postgres_url, "a")
    d.wait_ready()
    outbox = d.state / "outbox.sqlite"
    wait_for(lambda: len(_outbox_evaluations(outbox)) >= 10, 120, "10 evaluations in the outbox")
    assert d.proc.poll() is None, d.output()
    kept = _outbox_evaluations(outbox)
    outage.start()
    wait_for(lambda: "synced the outbox" in d.output(), 60, "the outbox synced")
    wait_for(lambda: _evaluations(postgres_url) >= len(kept), 30, "the outage's results")
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=60) == 0, d.output()

    # The registry, the fingerprint and every result of the outage are there, once each.
    assert _rows(postgres_url, "SELECT name, state FROM kernels") == [(KERNEL, "active")]
    fingerprints = [
        json.loads(str(j)) for (j,) in _rows(postgres_url, "SELECT json FROM fingerprints")
    ]
    modes = sorted(f["mode"] for f in fingerprints)  # the worker's, and the replay entry's
    assert modes == ["interpreter", "replay"], fingerprints
    in_db = _rows(postgres_url, "SELECT candidate_id, started_at FROM evaluations")
    for candidate_id, started_at in kept:
        assert in_db.count((candidate_id, started_at)) == 1, candidate_id
    assert _duplicates(postgres_url) == []
    assert _outbox_evaluations(outbox) == []
    out = d.output()
    assert out.count("is unreachable") == 1, out
    assert "unexpected error in the main loop" not in out, out
