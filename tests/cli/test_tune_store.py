"""``ktuned tune --store URL``: a bounded run into a fleet's PostgreSQL store (or any store URL).

Run as a user runs it (a subprocess), on a real kernel in Triton's interpreter, against a real
PostgreSQL server on loopback (tests/store/conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import WriteEntry
from tests.store.conftest import postgres_server, postgres_url  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)


def ktuned(*args: str | Path, state: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tuned.cli", *map(str, args), "--state-dir", str(state)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)


def _evaluations(url: str) -> list[str]:
    """Candidate ids of every first measurement in the PostgreSQL store (re-measurements of
    apparent new bests left out)."""
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT candidate_id, result_json FROM evaluations ORDER BY seq")
        return [c for c, r in rows if not json.loads(r)["metadata"].get("remeasure")]


def _claims(url: str) -> tuple[int, int]:
    """Claims taken, and claims still open."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT COUNT(*), SUM(1 - done) FROM claims").fetchone()
    assert row is not None
    return int(row[0]), int(row[1] or 0)


def test_tune_writes_a_postgresql_store_and_a_rerun_continues(
    postgres_url: str,  # noqa: F811
    tmp_path: Path,
    write_entry: WriteEntry,
) -> None:
    entry = write_entry("add")
    state = tmp_path / "state"
    args = ("tune", entry, "--device", "interpreter", "--store", postgres_url)
    run = ktuned(*args, "--budget", "2", state=state)
    assert run.returncode == 0, run.stderr
    assert "store: postgresql://ktuned@127.0.0.1" in run.stdout
    first = _evaluations(postgres_url)
    assert len(first) == 3 and len(set(first)) == 3  # the baseline and 2 candidates
    assert _claims(postgres_url) == (3, 0)  # each candidate was claimed, every claim closed
    assert not (state / "ktuned.sqlite").exists()  # nothing in the state directory's store
    # A rerun with a larger budget continues in the same store: one more, nothing redone.
    again = ktuned(*args, "--budget", "3", state=state)
    assert again.returncode == 0, again.stderr
    second = _evaluations(postgres_url)
    assert second[: len(first)] == first and len(second) == 4 and len(set(second)) == 4
    # Every reader of the fleet's store sees the run.
    status = ktuned("status", "--store", postgres_url, state=state)
    assert status.returncode == 0 and "add" in status.stdout, status.stderr


def test_tune_rejects_an_unknown_store_url(tmp_path: Path, write_entry: WriteEntry) -> None:
    entry = write_entry("add")
    run = ktuned("tune", entry, "--store", "mysql://x/y", state=tmp_path / "state")
    assert run.returncode == 2
    assert "sqlite:///ABSOLUTE/PATH.sqlite" in run.stderr and "postgresql://" in run.stderr


def test_two_tune_runs_on_one_postgresql_store_share_the_work(
    postgres_url: str,  # noqa: F811
    tmp_path: Path,
    write_entry: WriteEntry,
) -> None:
    """Two boxes tuning the same entry at once: claims keep either from evaluating what the
    other took, the baseline included."""
    entry = write_entry("add")
    cmd = [sys.executable, "-m", "tuned.cli", "tune", str(entry), "--device", "interpreter",
           "--store", postgres_url, "--budget", "6"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [*cmd, "--state-dir", str(tmp_path / f"box{i}")],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in (1, 2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
    done = _evaluations(postgres_url)
    assert len(done) == len(set(done))  # no candidate evaluated twice
    assert 7 <= len(done) <= 8  # baseline + budget; a race at the end may add one
    taken, still_open = _claims(postgres_url)
    assert taken == len(done) and still_open == 0
