"""The SQLite store on real database files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.conftest import WriteEntry
from tuned.errors import StoreError
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.registry import KernelSpec, load_entry
from tuned.store import SCHEMA_VERSION, SqliteStore

FP = {"gpu_model": "none", "mode": "interpreter", "triton": "3.9.0", "torch": "2.13.0"}


@pytest.fixture
def spec(write_entry: WriteEntry) -> KernelSpec:
    return load_entry(write_entry())


def _cand(
    spec: KernelSpec, block: int, provenance: Provenance = Provenance.PARAMETRIC
) -> Candidate:
    return Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=spec.module_source,
        knobs={"BLOCK": block, "num_warps": 4},
        provenance=provenance,
    )


def _ok(t: float) -> EvalResult:
    return EvalResult(
        Outcome.OK, time_s=t, timings={"N=3000/float16": t}, timing_kind="interpreter"
    )


def test_records_and_reads_back_after_reopen(tmp_path: Path, spec: KernelSpec) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    assert store.sync_kernel(spec) is True
    assert store.sync_kernel(spec) is False  # same generation
    fid = store.record_fingerprint(FP)
    base, fast = _cand(spec, 256, Provenance.ORIGINAL), _cand(spec, 1024)
    broken = _cand(spec, 100)
    for c, r in (
        (base, _ok(2.0)),
        (fast, _ok(0.5)),
        (broken, EvalResult(Outcome.COMPILE_ERROR, reason="arange", phase="compile")),
    ):
        store.add_candidate(c)
        store.record_evaluation(c, fid, r, started_at=0.0, wall_s=1.0)
    store.close()

    store = SqliteStore(tmp_path / "s.sqlite")
    trials = store.trials(spec.name, spec.generation, fid)
    assert [t.candidate_id for t in trials] == [base.id, fast.id, broken.id]
    assert trials[2].result.outcome is Outcome.COMPILE_ERROR
    assert trials[2].result.reason == "arange"
    # Faster is not better until accepted: the incumbent is still the baseline.
    best = store.best(spec.name)
    assert best is not None and best.candidate_id == base.id and best.speedup == 1.0
    interval = {"speedup": 4.0, "low": 3.8, "high": 4.2}
    store.record_acceptance(
        fast, fid, incumbent_id=base.id, status="held", first=interval, second=None
    )
    assert store.best(spec.name).candidate_id == base.id  # type: ignore[union-attr]
    store.record_acceptance(
        fast, fid, incumbent_id=base.id, status="accepted", first=interval, second=interval
    )
    best = store.best(spec.name)
    assert best is not None
    assert best.candidate_id == fast.id and best.knobs == {"BLOCK": 1024, "num_warps": 4}
    assert best.speedup == pytest.approx(4.0)
    assert [a["status"] for a in store.acceptances(spec.name)] == ["held", "accepted"]
    assert store.candidate(fast.id, spec.generation) == fast
    assert store.source(best.source_hash) == spec.module_source
    assert store.fingerprint(fid) == FP


def test_a_changed_entry_starts_a_new_generation(
    tmp_path: Path, write_entry: WriteEntry, spec: KernelSpec
) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    store.sync_kernel(spec)
    fid = store.record_fingerprint(FP)
    c = _cand(spec, 256, Provenance.ORIGINAL)
    store.add_candidate(c)
    store.record_evaluation(c, fid, _ok(1.0), started_at=0.0, wall_s=1.0)
    changed = load_entry(write_entry(source=spec.module_source + "\n# edited\n"))
    assert changed.generation != spec.generation
    assert store.sync_kernel(changed) is True
    assert store.trials(spec.name, changed.generation, fid) == []
    assert len(store.trials(spec.name, spec.generation, fid)) == 1  # history kept
    assert store.best(spec.name) is None  # best is per current generation


def test_invalid_entries_are_remembered_and_cleared(tmp_path: Path, spec: KernelSpec) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    store.sync_kernel(spec)
    store.record_invalid(str(spec.directory), "kernel.yaml: field 'dtypes': bad")
    assert store.kernels()[0].state == "invalid"
    assert store.invalid_entries() == {str(spec.directory): "kernel.yaml: field 'dtypes': bad"}
    store.sync_kernel(spec)
    assert store.kernels()[0].state == "active"
    assert store.invalid_entries() == {}


def test_policy_state_round_trips(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    assert store.policy_state("k", "g", "f", "ucb") is None
    store.save_policy_state("k", "g", "f", "ucb", {"pulls": [1, 2], "t": 3})
    store.save_policy_state("k", "g", "f", "ucb", {"pulls": [1, 3], "t": 4})
    assert store.policy_state("k", "g", "f", "ucb") == {"pulls": [1, 3], "t": 4}


def test_wal_mode_lets_a_reader_see_committed_writes(tmp_path: Path, spec: KernelSpec) -> None:
    writer = SqliteStore(tmp_path / "s.sqlite")
    reader = SqliteStore(tmp_path / "s.sqlite")
    writer.sync_kernel(spec)
    assert [k.name for k in reader.kernels()] == ["add"]
    mode = sqlite3.connect(tmp_path / "s.sqlite").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "s.sqlite")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer ktuned"):
        SqliteStore(tmp_path / "s.sqlite")


def test_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "s.sqlite").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=r"is damaged .*file is not a database.*move it aside"):
        SqliteStore(tmp_path / "s.sqlite")
    assert (tmp_path / "s.sqlite").read_bytes() == b"this is not sqlite" * 100


def test_a_failed_write_saves_nothing_and_says_so(tmp_path: Path, spec: KernelSpec) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    store.sync_kernel(spec)
    # A write that fails part-way (here: a constraint) must roll back entirely.
    c = _cand(spec, 256)
    store.add_candidate(c)
    store._db.execute(
        "CREATE TRIGGER fail BEFORE INSERT ON evaluations BEGIN "
        "SELECT RAISE(ABORT, 'database or disk is full'); END"
    )
    with pytest.raises(StoreError, match="nothing of this write was saved"):
        store.record_evaluation(c, "f", _ok(1.0), started_at=0.0, wall_s=1.0)
    assert store.trials(spec.name, spec.generation, "f") == []
