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
