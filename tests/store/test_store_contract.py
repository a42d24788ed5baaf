"""The store contract: every engine (SQLite file, real PostgreSQL server) behaves the same.

Each test runs once per engine (``engine`` is parametrized in conftest.py): a SQLite file,
a real PostgreSQL server, and the fleet's outbox store over that server.
"""

from __future__ import annotations

import pytest

from tests.store.conftest import StoreFactory
from tuned.errors import StoreError
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.registry import KernelSpec
from tuned.store import Store
from tuned.store.outbox import OutboxStore

FP = {"gpu_model": "none", "mode": "interpreter", "triton": "3.9.0"}
FP2 = {"gpu_model": "none", "mode": "interpreter", "triton": "3.9.1"}


def cand(
    spec: KernelSpec, block: int, *, original: bool = False, parent: str | None = None
) -> Candidate:
    return Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=spec.module_source,
        knobs={"BLOCK": block, "num_warps": 4},
        provenance=Provenance.ORIGINAL if original else Provenance.PARAMETRIC,
        strategy="original" if original else "config",
        parent_id=parent,
    )


def record(
    store: Store,
    c: Candidate,
    fid: str,
    t: float | None,
    *,
    outcome: Outcome = Outcome.OK,
    at: float = 1000.0,
) -> None:
    store.add_candidate(c)
    result = EvalResult(
        outcome,
        time_s=t,
        timings={} if t is None else {"N=3000/float16": t},
        timing_kind="interpreter",
        phase_seconds={"load": 0.2, "benchmark": 2.0},
        metadata={"samples": {} if t is None else {"N=3000/float16": [t, t]}},
    )
    store.record_evaluation(c, fid, result, started_at=at, wall_s=1.0)


#: The interval every acceptance of these tests records (not the ratio of the stored times).
INTERVAL = {"speedup": 1.25, "low": 1.1, "high": 1.4}


def accept(
    store: Store, c: Candidate, fid: str, status: str = "accepted", incumbent: str = "baseline"
) -> None:
    store.record_acceptance(
        c, fid, incumbent_id=incumbent, status=status, first=INTERVAL, second=None
    )


def test_records_round_trip_and_survive_reopening(open_any: StoreFactory, spec: KernelSpec) -> None:
    store = open_any()
    assert store.sync_kernel(spec) is True
    assert store.sync_kernel(spec) is False
    fid = store.record_fingerprint(FP)
    assert store.record_fingerprint(FP) == fid
    base, fast, broken = cand(spec, 256, original=True), cand(spec, 1024), cand(spec, 100)
    record(store, base, fid, 2.0, at=100)
    record(store, fast, fid, 0.5, at=200)
    record(store, broken, fid, None, outcome=Outcome.COMPILE_ERROR, at=300)
    record(store, fast, fid, 0.6, at=400)  # a re-measurement: trials keep the first
    store.save_policy_state(spec.name, spec.generation, fid, "ucb", {"t": 1})
    store.save_policy_state(spec.name, spec.generation, fid, "ucb", {"t": 2})
    store.close()

    store = open_any()
    trials = store.trials(spec.name, spec.generation, fid)
    assert [(t.candidate_id, t.result.time_s) for t in trials] == [
        (base.id, 2.0),
        (fast.id, 0.5),
        (broken.id, None),
    ]
    assert trials[2].result.outcome is Outcome.COMPILE_ERROR
    best = store.best(spec.name)
    assert best is not None and best.candidate_id == base.id  # faster is not accepted yet
    accept(store, fast, fid, "held", incumbent=base.id)
    accept(store, fast, fid, incumbent=base.id)
    best = store.best(spec.name)
    # The speedup shown is the acceptance's side-by-side ratio, not 2.0 s / 0.5 s.
    assert best is not None and best.candidate_id == fast.id and best.speedup == 1.25
    assert best.measured is not None and best.measured.source == "acceptance"
    assert best.knobs == {"BLOCK": 1024, "num_warps": 4}
    assert store.incumbent(spec.name, spec.generation, fid) == fast.id
    assert [a["status"] for a in store.acceptances(spec.name)] == ["held", "accepted"]
    assert store.held_counts() == {spec.name: 1}
    assert store.candidate(fast.id, spec.generation) == fast
    assert store.source(best.source_hash) == spec.module_source
    assert store.fingerprint(fid) == FP
    assert store.known_fingerprints() == {fid: FP}
    assert store.policy_state(spec.name, spec.generation, fid, "ucb") == {"t": 2}
    assert store.last_evaluated_at(spec.name, spec.generation, fid) == 401.0
    info = store.generation_info(spec.generation)
    assert info is not None and info[1]["launcher"] == "add"


def test_registry_lifecycle(open_any: StoreFactory, spec: KernelSpec) -> None:
    store = open_any()
    store.sync_kernel(spec)
    store.record_invalid(str(spec.directory), "kernel.yaml: bad")
    store.record_invalid(str(spec.directory), "kernel.yaml: worse")
    assert store.kernels()[0].state == "invalid"
    assert store.invalid_entries() == {str(spec.directory): "kernel.yaml: worse"}
    store.sync_kernel(spec)
    assert store.kernel(spec.name) is not None
    assert store.kernels()[0].state == "active" and store.invalid_entries() == {}
    store.retire_kernel(spec.name)
    assert store.kernels()[0].state == "retired"
    store.record_invalid("/elsewhere", "x")
    store.forget_invalid("/elsewhere")
    assert store.invalid_entries() == {}


def test_read_models(open_any: StoreFactory, spec: KernelSpec) -> None:
    store = open_any()
    store.sync_kernel(spec)
    fid = store.record_fingerprint(FP)
    base, fast = cand(spec, 256, original=True), cand(spec, 64)
    record(store, base, fid, 1.0, at=100)
    [k] = store.kernel_progress()
    assert (k.baseline_s, k.best_s, k.best_at, k.evaluations) == (1.0, 1.0, 101.0, 1)
    record(store, fast, fid, 0.5, at=200)
    accept(store, fast, fid, incumbent=base.id)
    record(store, cand(spec, 128), fid, None, outcome=Outcome.COMPILE_ERROR, at=300)
    record(store, cand(spec, 512, parent=fast.id), fid, 0.4, at=400)
    [k] = store.kernel_progress([spec.name])
    assert (k.fingerprint, k.evaluations, k.baseline_s, k.best_s, k.speedup) == (
        fid,
        4,
        1.0,
        0.5,
        1.25,  # the acceptance's ratio (the stored times say 2.0)
    )
    assert store.kernel_progress([]) == []

    totals = store.evaluation_totals(0, (0.5, 5.0))
    assert totals.outcomes == {(spec.name, "ok"): 3, (spec.name, "compile_error"): 1}
    assert totals.phases["load"][:2] == (4, pytest.approx(0.8))
    assert totals.phases["load"][2] == (4, 4) and totals.phases["benchmark"][2] == (0, 4)
    # Arms: fast (0.5 vs baseline 1.0: reward 0.5), compile error (0), child of fast (0.2).
    assert totals.arms[(spec.name, "config")][0] == 3
    assert totals.arms[(spec.name, "config")][1] == pytest.approx(0.7)
    later = store.evaluation_totals(totals.upto_seq)
    assert later.outcomes == {} and later.upto_seq == totals.upto_seq

    names, eval_seq, acc_seq = store.changes_since(0, 0)
    assert names == {spec.name} and eval_seq == totals.upto_seq and acc_seq >= 1
    assert store.changes_since(eval_seq, acc_seq)[0] == set()
    timeline = store.timeline()
    assert [t.outcome for t in timeline] == ["ok", "ok", "compile_error", "ok"]
    assert timeline[0].finished_at == 101.0 and timeline[0].strategy == "original"
    timings = store.case_timings(spec.name, spec.generation, fid)
    assert [t.candidate_id for t in timings][:2] == [base.id, fast.id]
    assert timings[1].statuses == frozenset({"accepted"})
    assert timings[1].samples == {"N=3000/float16": [0.5, 0.5]}
    assert store.evaluated_fingerprints(spec.name, spec.generation) == [(fid, 401.0)]

    # The best accepted on FP is stale on FP2 until it is measured there.
    fid2 = store.record_fingerprint(FP2)
    assert store.stale_bests([fid2], [fid]) == {spec.name: [fast.id]}
    record(store, fast, fid2, 0.5, at=500)
    assert store.stale_bests([fid2], [fid]) == {}
    assert store.stale_bests([fid2], []) == {}


def test_hardware_feedback(open_any: StoreFactory, spec: KernelSpec) -> None:
    store = open_any()
    store.sync_kernel(spec)
    fid = store.record_fingerprint(FP)
    base = cand(spec, 256, original=True)
    record(store, base, fid, 1.0)
    token = store.hardware_token()
    common = {"kernel": spec.name, "generation": spec.generation, "candidate_id": base.id}
    store.record_profiling_run(
        **common,
        gpu_model="none",
        status="ok",
        reason="",
        wall_s=2.0,
        started_at=10.0,
        profile={"sm": 0.5},
    )
    store.record_profiling_run(
        **common, gpu_model="none", status="timeout", reason="slow", wall_s=30.0, started_at=20.0
    )
    assert store.hardware_token() != token
    assert store.profiles(spec.name, spec.generation, "none") == {base.id: {"sm": 0.5}}
    assert store.profiling_attempted(spec.name, spec.generation, "none") == {base.id}
    upto, statuses, (n, total, below) = store.profiling_totals(0, (5.0, 60.0))
    assert (statuses, n, total, below) == ({"ok": 1, "timeout": 1}, 2, 32.0, (1, 2))
    assert store.profiling_totals(upto)[1] == {}
    store.record_peaks("none", {"flops": 1.0})
    store.record_peaks("none", {"flops": 2.0})
    assert store.peaks("none") == {"flops": 2.0} and store.peaks("other") is None
    token = store.hardware_token()
    store.record_roofline(
        kernel=spec.name,
        generation=spec.generation,
        fingerprint=fid,
        candidate_id=base.id,
        fraction=0.25,
        figures={"case": 1},
    )
    assert store.hardware_token() != token
    token = store.hardware_token()
    store.record_roofline(
        kernel=spec.name,
        generation=spec.generation,
        fingerprint=fid,
        candidate_id=base.id,
        fraction=0.5,
        figures={"case": 2},
    )
    assert store.rooflines(spec.name, spec.generation, fid) == {base.id: 0.5}
    assert store.best_hardware([spec.name]) == {spec.name: ({"sm": 0.5}, 0.5)}


def test_a_failed_transaction_saves_nothing(open_any: StoreFactory, spec: KernelSpec) -> None:
    store = open_any()
    if isinstance(store, OutboxStore):
        pytest.skip("the outbox store routes whole calls and runs no SQL of its own")
    with (
        pytest.raises(StoreError, match="nothing of this write was saved"),
        store._transaction() as db,
    ):
        db.execute("INSERT INTO invalid_entries VALUES (?, ?, ?)", ("/a", "p", 1.0))
        db.execute("INSERT INTO no_such_table VALUES (1)")
    assert store.invalid_entries() == {}
    store.record_invalid("/b", "still writable")
    assert store.invalid_entries() == {"/b": "still writable"}


def test_two_store_objects_see_each_others_writes(open_any: StoreFactory, spec: KernelSpec) -> None:
    writer, reader = open_any(), open_any()
    writer.sync_kernel(spec)
    fid = writer.record_fingerprint(FP)
    record(writer, cand(spec, 256, original=True), fid, 1.0)
    assert [k.name for k in reader.kernels()] == [spec.name]
    assert len(reader.trials(spec.name, spec.generation, fid)) == 1
