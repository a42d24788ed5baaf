"""The store's read models for metrics and reports, on a real SQLite file."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import WriteEntry
from tuned.errors import StoreError
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.registry import KernelSpec, load_entry
from tuned.store.sqlite import SqliteStore

FP = {"gpu_model": "none", "mode": "interpreter"}


def _record(
    store: SqliteStore,
    spec: KernelSpec,
    fid: str,
    block: int,
    t: float | None,
    *,
    original: bool = False,
    outcome: Outcome = Outcome.OK,
    at: float = 1000.0,
    phases: dict[str, float] | None = None,
) -> Candidate:
    c = Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=spec.module_source,
        knobs={"BLOCK": block, "num_warps": 4},
        provenance=Provenance.ORIGINAL if original else Provenance.PARAMETRIC,
        strategy="original" if original else "config",
    )
    store.add_candidate(c)
    result = EvalResult(
        outcome,
        time_s=t,
        timing_kind="interpreter",
        phase_seconds=phases or {"load": 0.2, "benchmark": 2.0},
    )
    store.record_evaluation(c, fid, result, started_at=at, wall_s=1.0)
    return c


def _accept(store: SqliteStore, candidate: Candidate, fid: str, speedup: float = 2.0) -> None:
    """Record that the acceptance rule made ``candidate`` the incumbent (timed against the
    original, measured ``speedup`` side by side)."""
    base = next(
        t
        for t in store.trials(candidate.kernel, candidate.generation, fid)
        if t.provenance is Provenance.ORIGINAL
    )
    store.record_acceptance(
        candidate,
        fid,
        incumbent_id=base.candidate_id,
        status="accepted",
        first={"speedup": speedup, "low": 0.9 * speedup, "high": 1.1 * speedup},
        second=None,
    )


@pytest.fixture
def filled(tmp_path: Path, write_entry: WriteEntry) -> tuple[SqliteStore, KernelSpec, str]:
    store = SqliteStore(tmp_path / "s.sqlite")
    spec = load_entry(write_entry("add"))
    store.sync_kernel(spec)
    fid = store.record_fingerprint(FP)
    _record(store, spec, fid, 256, 1.0, original=True, at=100)
    assert store.kernel_progress()[0].best_at == 101.0  # the baseline is the first best
    _accept(store, _record(store, spec, fid, 64, 0.5, at=200), fid)
    _record(store, spec, fid, 128, None, outcome=Outcome.COMPILE_ERROR, at=300)
    _record(store, spec, fid, 512, 0.45, at=400)  # faster, but not accepted (noise)
    return store, spec, fid


def test_kernel_progress(filled: tuple[SqliteStore, KernelSpec, str]) -> None:
    store, _spec, fid = filled
    [k] = store.kernel_progress()
    assert (k.name, k.state, k.fingerprint, k.evaluations) == ("add", "active", fid, 4)
    assert (k.baseline_s, k.best_s, k.speedup) == (1.0, 0.5, 2.0)
    assert k.best_at is not None and k.best_at > 1e9  # when the 0.5 s one was accepted
    assert k.timing_kind == "interpreter"


def test_evaluation_totals_are_incremental(filled: tuple[SqliteStore, KernelSpec, str]) -> None:
    store, spec, fid = filled
    bounds = (0.5, 1.0, 5.0)
    first = store.evaluation_totals(0, bounds)
    assert first.outcomes == {("add", "ok"): 3, ("add", "compile_error"): 1}
    assert first.phases["benchmark"] == (4, 8.0, (0, 0, 4))
    assert first.phases["load"] == (4, pytest.approx(0.8), (4, 4, 4))
    pulls, reward = first.arms[("add", "config")]
    # Rewards against the baseline (1.0 s): 0.5, 0 (failure), 0.55.
    assert pulls == 3 and reward == pytest.approx(1.05)
    assert ("add", "original") not in first.arms
    _record(store, spec, fid, 1024, 2.0, at=500)  # slower than the baseline: reward 0
    second = store.evaluation_totals(first.upto_seq, bounds)
    assert second.outcomes == {("add", "ok"): 1}
    assert second.arms[("add", "config")] == (1, 0.0)
    assert store.evaluation_totals(second.upto_seq, bounds).outcomes == {}


def test_timeline_lifecycle_and_reader(
    filled: tuple[SqliteStore, KernelSpec, str], tmp_path: Path
) -> None:
    store, spec, fid = filled
    rows = store.timeline()
    assert [r.outcome for r in rows] == ["ok", "ok", "compile_error", "ok"]
    assert rows[0].provenance is Provenance.ORIGINAL and rows[1].strategy == "config"
    assert store.last_evaluated_at("add", spec.generation, fid) == 401.0
    reader = SqliteStore.open_reader(store.path)
    store.retire_kernel("add")
    assert reader.kernel_progress()[0].state == "retired"  # the reader sees new writes
    with pytest.raises(StoreError):
        reader.retire_kernel("add")  # read-only
    reader.close()
    store.record_invalid("/r/bad", "kernel.yaml: field 'x': bad")
    store.forget_invalid("/r/bad")
    assert store.invalid_entries() == {}
    store.checkpoint()
    assert (
        not (tmp_path / "s.sqlite-wal").exists() or (tmp_path / "s.sqlite-wal").stat().st_size == 0
    )
    with pytest.raises(StoreError, match="cannot read the store"):
        SqliteStore.open_reader(tmp_path / "missing.sqlite")
    assert math.isfinite(rows[-1].finished_at)
