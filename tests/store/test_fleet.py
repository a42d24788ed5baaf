"""Fleet mode end to end: separate tuning processes share one real PostgreSQL store.

The processes tune the replay example (recorded measurements, no Triton, seconds per run)
with claims on (tests/store/fleet_worker.py); each logs the candidates it evaluated.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuned.registry import load_entry
from tuned.store.postgres import PostgresStore

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "examples" / "replay" / "convolution_a6000"


def _worker(url: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store.fleet_worker", url, str(ENTRY), str(log), *args],
        cwd=ROOT,
        env=env,
    )


def _evaluated(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def _first_results(url: str) -> tuple[list[str], int]:
    """Candidate ids with a result on the replay fingerprint, and open claims left."""
    store = PostgresStore(url)
    try:
        spec = load_entry(ENTRY)
        [fid] = store.known_fingerprints()
        ids = [t.candidate_id for t in store.trials(spec.name, spec.generation, fid)]
        left = len(store.open_claims(spec.name, spec.generation, fid))
        return ids, left
    finally:
        store.close()


@pytest.mark.timeout(180)
def test_two_processes_share_the_work_without_duplicates(postgres_url: str, tmp_path: Path) -> None:
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    barrier = tmp_path / "ready"
    barrier.mkdir()
    together = ("--barrier", str(barrier), "--parties", "2")  # both tune from the same moment
    procs = [_worker(postgres_url, log, "--budget", "40", *together) for log in logs]
    assert [p.wait(timeout=150) for p in procs] == [0, 0]
    a, b = (_evaluated(log) for log in logs)
    assert a and b  # both did work
    assert not set(a) & set(b)  # never the same candidate twice
    assert len(a) == len(set(a)) and len(b) == len(set(b))
    ids, left = _first_results(postgres_url)
    assert sorted(ids) == sorted(a + b)  # every result is one of theirs, none lost
    assert 41 <= len(ids) <= 43  # the baseline + the shared budget (+ a last one in flight)
    assert left == 0


@pytest.mark.timeout(180)
def test_a_killed_process_loses_nothing_its_claim_moves(postgres_url: str, tmp_path: Path) -> None:
    dead_log, live_log = tmp_path / "dead.log", tmp_path / "live.log"
    # The budget is shared through the store: the dying one's is the survivor's, so that it
    # cannot finish (exit 0) before its sixth claim when the survivor runs faster.
    dying = _worker(
        postgres_url, dead_log, "--budget", "120", "--lease", "1.0", "--die-after-claims", "6"
    )
    # The survivor tunes on well past the dead one's lease (a daemon never stops).
    living = _worker(postgres_url, live_log, "--budget", "120", "--lease", "1.0")
    assert dying.wait(timeout=150) == 9
    assert living.wait(timeout=150) == 0
    orphan = Path(f"{dead_log}.orphan").read_text()
    dead, live = _evaluated(dead_log), _evaluated(live_log)
    assert orphan not in dead and orphan in live  # taken over after its lease ran out
    assert not set(dead) & set(live)
    ids, left = _first_results(postgres_url)
    assert sorted(ids) == sorted(dead + live) and left == 0
    store = PostgresStore(postgres_url)
    try:
        rows = store._query(
            "SELECT owner, takeovers, done FROM claims WHERE candidate_id=?", (orphan,)
        )
        assert [(r["takeovers"], r["done"]) for r in rows] == [(1, 1)]
    finally:
        store.close()
