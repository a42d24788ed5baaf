"""A campaign on a real kernel: baseline first, interleaved timing, accepted new bests."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import WriteEntry
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import load_entry
from tuned.search import Campaign, TuneSettings
from tuned.store import SqliteStore


def test_a_clearly_faster_candidate_is_accepted_after_a_fresh_remeasurement(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    spec = load_entry(write_entry())  # baseline: BLOCK=256, 12 programs at N=3000
    store = SqliteStore(tmp_path / "s.sqlite")
    store.sync_kernel(spec)
    with WorkerClient(workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True)) as c:
        fid = store.record_fingerprint(c.start())
        campaign = Campaign(
            spec=spec, store=store, client=c, fingerprint=fid, settings=TuneSettings(budget=None)
        )
        baseline = campaign.step()
        assert baseline is not None and baseline.provenance is Provenance.ORIGINAL
        assert baseline.result.outcome is Outcome.OK
        assert store.best(spec.name) is not None
        assert store.best(spec.name).candidate_id == baseline.candidate_id  # type: ignore[union-attr]

        def candidate(block: int) -> Candidate:
            return Candidate(
                kernel=spec.name,
                generation=spec.generation,
                source=spec.module_source,
                knobs={"BLOCK": block, "num_warps": 4},
                provenance=Provenance.PARAMETRIC,
            )

        # In the interpreter each program instance costs the same: 64 -> 47 programs, slower.
        slow = campaign.evaluate(candidate(64))
        assert slow.result.outcome is Outcome.OK
        assert slow.result.metadata["incumbent_samples"]  # timed against the incumbent
        assert store.acceptances(spec.name) == []
        # 1024 -> 3 programs: several times faster, accepted once re-measured in a new worker.
        starts = c.starts
        fast = campaign.evaluate(candidate(1024))
        decisions = store.acceptances(spec.name)
        assert [d["status"] for d in decisions] == ["accepted"], decisions
        assert decisions[0]["candidate_id"] == fast.candidate_id
        assert decisions[0]["incumbent_id"] == baseline.candidate_id
        assert decisions[0]["first"]["low"] > 1.01 and decisions[0]["second"]["low"] > 1.01
        assert c.starts == starts + 1
        best = store.best(spec.name)
        assert best is not None and best.candidate_id == fast.candidate_id
        assert best.speedup is not None and best.speedup > 1.5
        # The next candidate is timed against the new incumbent.
        assert campaign._incumbent() == candidate(1024)
        summary = campaign.summary()
        assert summary.best_knobs == {"BLOCK": 1024, "num_warps": 4}
        assert summary.evaluations == 2  # the re-measurement is not a new candidate


def test_a_later_best_is_measured_against_the_original_side_by_side(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    """Baseline BLOCK=128 (24 programs at N=3000), then 256 (12) accepted against it, then
    1024 (3) accepted against 256: the campaign times 1024 against the original too, twice,
    so its displayed speedup and its per-shape claims are side by side with the original."""
    from tests.conftest import ADD_SOURCE
    from tuned.runtime.plan import plan_on

    spec = load_entry(write_entry(source=ADD_SOURCE.replace("BLOCK=256", "BLOCK=128")))
    store = SqliteStore(tmp_path / "s.sqlite")
    store.sync_kernel(spec)
    with WorkerClient(workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True)) as c:
        fid = store.record_fingerprint(c.start())
        campaign = Campaign(
            spec=spec, store=store, client=c, fingerprint=fid, settings=TuneSettings(budget=None)
        )
        baseline = campaign.step()
        assert baseline is not None and baseline.provenance is Provenance.ORIGINAL

        def candidate(block: int) -> Candidate:
            return Candidate(
                kernel=spec.name,
                generation=spec.generation,
                source=spec.module_source,
                knobs={"BLOCK": block, "num_warps": 4},
                provenance=Provenance.PARAMETRIC,
            )

        middle = campaign.evaluate(candidate(256))
        fast = campaign.evaluate(candidate(1024))
    decisions = [
        (d["candidate_id"], d["incumbent_id"], d["status"]) for d in store.acceptances(spec.name)
    ]
    assert decisions == [
        (middle.candidate_id, baseline.candidate_id, "accepted"),
        (fast.candidate_id, middle.candidate_id, "accepted"),
        (fast.candidate_id, baseline.candidate_id, "vs_original"),
    ], decisions
    best = store.best(spec.name)
    assert best is not None and best.measured is not None
    assert best.measured.source == "vs_original" and best.speedup is not None
    assert best.speedup > 1.5  # 24 programs against 3 (under 10x: not held)
    # Every side-by-side measurement names what it was timed against.
    versus = {
        (r.candidate_id, r.incumbent_id) for r in store.comparisons(spec.name, spec.generation, fid)
    }
    assert (fast.candidate_id, baseline.candidate_id) in versus
    assert (fast.candidate_id, middle.candidate_id) in versus
    # Confirmed against the original on its timed cases: the best runs there.
    plan = plan_on(store, spec.name, fid)
    assert plan.shapes and all(s.candidate_id == fast.candidate_id for s in plan.shapes)
    store.close()


def test_a_not_confirmed_second_measurement_is_kept_in_full() -> None:
    """The confirming measurement's interval is computed even below the bar (the bootstrap
    is skipped only for first measurements), so a not_confirmed decision stores both."""
    from tuned.acceptance import AcceptanceSettings, decide
    from tuned.outcomes import EvalResult
    from tuned.search.judging import _interval

    slower = EvalResult(
        Outcome.OK,
        time_s=1.0,
        metadata={
            "samples": {"c": [1.00 + 0.001 * i for i in range(10)]},
            "incumbent_samples": {"c": [0.99 + 0.001 * i for i in range(10)]},
        },
    )
    settings = AcceptanceSettings()
    assert _interval(slower, settings, 0) is None  # a first measurement: decided at once
    second = _interval(slower, settings, 0, full=True)
    assert second is not None and second.speedup < 1.0
    first = _interval(
        EvalResult(
            Outcome.OK,
            time_s=1.0,
            metadata={"samples": {"c": [0.5] * 10}, "incumbent_samples": {"c": [1.0] * 10}},
        ),
        settings,
        0,
    )
    assert first is not None and decide(first, settings, second) == "not_confirmed"
