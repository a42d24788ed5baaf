"""Schema versions: older databases are migrated with their rows, newer ones refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.store.test_store_contract import FP, cand, record
from tuned.errors import StoreError
from tuned.registry import KernelSpec
from tuned.store import SCHEMA_VERSION, SqliteStore
from tuned.store.dialect import SQLITE
from tuned.store.postgres import PostgresStore
from tuned.store.schema import MIGRATIONS


def test_a_version_1_sqlite_store_keeps_its_rows(tmp_path: Path, spec: KernelSpec) -> None:
    path = tmp_path / "ktuned.sqlite"
    # A store as ktuned 0.1 wrote it: the first migration only, user_version 1.
    old = SqliteStore.__new__(SqliteStore)
    old.path = path
    old._db = sqlite3.connect(str(path), isolation_level=None)
    old._db.executescript(SQLITE.ddl(MIGRATIONS[0]) + "PRAGMA user_version=1;")
    old._db.execute("DROP TABLE IF EXISTS claims")
    old.sync_kernel(spec)
    fid = old.record_fingerprint(FP)
    base = cand(spec, 256, original=True)
    old.add_candidate(base)
    old._db.execute(
        "INSERT INTO evaluations (candidate_id, generation, kernel, fingerprint, outcome,"
        " time_s, timing_kind, result_json, started_at, wall_s) VALUES (?, ?, ?, ?, 'ok', 1.0,"
        ' \'interpreter\', \'{"outcome": "ok", "time_s": 1.0}\', 0.0, 1.0)',
        (base.id, spec.generation, spec.name, fid),
    )
    old._db.close()

    store = SqliteStore(path)
    assert int(store._db.execute("PRAGMA user_version").fetchone()[0]) == SCHEMA_VERSION
    assert [t.candidate_id for t in store.trials(spec.name, spec.generation, fid)] == [base.id]
    best = store.best(spec.name)
    assert best is not None and best.time_s == 1.0
    fast = cand(spec, 64)
    store.add_candidate(fast)
    assert store.claim(fast, fid, {}, owner="A", lease_s=60) is True  # the new table
    record(store, fast, fid, 0.5)
    store.close()


def test_a_newer_postgres_schema_is_refused(postgres_url: str) -> None:
    PostgresStore(postgres_url).close()
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE ktuned_schema SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match="newer ktuned"):
        PostgresStore(postgres_url)


def test_postgres_migrates_once_and_reopens(postgres_url: str, spec: KernelSpec) -> None:
    first, second = PostgresStore(postgres_url), PostgresStore(postgres_url)
    first.sync_kernel(spec)
    assert [k.name for k in second.kernels()] == [spec.name]
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT version FROM ktuned_schema").fetchall()
    assert rows == [(SCHEMA_VERSION,)]
    first.close()
    second.close()


def test_an_unreachable_postgres_is_a_clear_error() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(StoreError, match=r"cannot connect to the store .*:\*\*\*@"):
        PostgresStore("postgresql://u:secret@127.0.0.1:1/db", connect_timeout_s=1)
