"""Several GPUs in one box: one worker per GPU, pinned by its environment, fed by one compile
pool, measuring in parallel (in the interpreter here: each "GPU" is a worker process)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.conftest import WriteEntry
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.outcomes import Outcome, Provenance
from tuned.pipeline import MultiGpuPipeline, PipelineSettings, pipeline_for
from tuned.registry import load_entry
from tuned.search import Campaign, TuneSettings
from tuned.store import SqliteStore


def _environ(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")


def test_two_gpu_lanes_measure_in_parallel_each_pinned_and_nothing_twice(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    spec = load_entry(write_entry())
    store = SqliteStore(tmp_path / "state" / "ktuned.sqlite")
    store.sync_kernel(spec)
    settings = EvaluationSettings(interpreter=True)
    cache = tmp_path / "state" / "workers" / "0" / "triton-cache"
    lanes = [
        WorkerClient(
            workdir=tmp_path / "state" / "workers" / str(i),
            settings=settings,
            env={"CUDA_VISIBLE_DEVICES": f"GPU-lane-{i}"},
            cache_dir=cache,
        )
        for i in range(2)
    ]
    try:
        fid = store.record_fingerprint(lanes[0].start())
        assert lanes[1].start()  # the same software: the same fingerprint
        for i, lane in enumerate(lanes):  # each worker sees its own GPU only
            (pid,) = lane.worker_pids()  # the worker inside its sandbox
            assert f"CUDA_VISIBLE_DEVICES=GPU-lane-{i}".encode() in _environ(pid)
        campaign = Campaign(
            spec=spec,
            store=store,
            client=lanes[0],
            fingerprint=fid,
            settings=TuneSettings(budget=8),
        )
        pipeline = pipeline_for(
            lanes[0], workers=1, settings=PipelineSettings(batch_size=2), lanes=lanes
        )
        assert isinstance(pipeline, MultiGpuPipeline)
        try:
            summary = pipeline.run(campaign)
        finally:
            pipeline.close()
        assert pipeline.measured[0] >= 1 and pipeline.measured[1] >= 1  # both GPUs worked
    finally:
        for lane in lanes:
            lane.close()
    assert summary.evaluations == 8
    trials = store.trials(spec.name, spec.generation, fid)
    assert len(trials) == 9 and sum(t.provenance is Provenance.ORIGINAL for t in trials) == 1
    assert len({t.candidate_id for t in trials}) == 9  # nothing measured twice
    assert all(t.result.outcome is Outcome.OK for t in trials), [t.result.reason for t in trials]
    assert all("gpu_queue" in t.result.phase_seconds for t in trials[1:])
    # In parallel: some two measurements overlapped in time.
    rows = store._query(  # the raw evaluation rows, for their times
        "SELECT candidate_id, started_at, wall_s, result_json FROM evaluations"
    )
    spans = [(r["started_at"], r["started_at"] + r["wall_s"]) for r in rows]
    first = [r["candidate_id"] for r in rows if '"remeasure": true' not in r["result_json"]]
    assert len(first) == len(set(first)) == 9
    assert any(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in itertools.combinations(spans, 2))
    store.close()


def test_lanes_must_share_the_first_lanes_cache(tmp_path: Path) -> None:
    settings = EvaluationSettings(interpreter=True)
    a = WorkerClient(workdir=tmp_path / "a", settings=settings)
    b = WorkerClient(workdir=tmp_path / "b", settings=settings)
    with pytest.raises(ValueError, match="share"):
        pipeline_for(a, workers=1, lanes=[a, b])
