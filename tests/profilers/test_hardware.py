"""Hardware feedback in the loop: a real campaign (Triton's interpreter, SQLite) whose
profiles come from a fake ``ncu`` writing a report in the raw page's layout."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from policies import HierarchicalPolicy
from policies.masks import MaskSettings
from tests.conftest import ADD_YAML, WriteEntry
from tests.profilers.conftest import MakeNcu
from tests.profilers.test_ncu_run import REPORT
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.outcomes import Provenance
from tuned.profiling import HardwareFeedback, jit_kernel_names, merge_metrics
from tuned.registry import load_entry
from tuned.search import Campaign, TuneSettings
from tuned.settings import ProfilingConfig
from tuned.store import SqliteStore

MODEL = "TEST GPU"
ROOFLINE_YAML = ADD_YAML.format(name="add") + 'roofline: {bytes: "3*N*elem", flops: "N"}\n'
PEAKS = {
    "gpu_model": MODEL,
    "bytes_per_s": 3.0e12,
    "flops_per_s": 7.0e14,
    "copy_bytes": 1 << 30,
    "matmul_n": 8192,
    "measured_at": 0.0,
}


def _hardware(
    tmp_path: Path, store: SqliteStore, ncu: Path | str, **config: object
) -> HardwareFeedback:
    hw = HardwareFeedback(
        store=store,
        config=ProfilingConfig(ncu=str(ncu), **config),  # type: ignore[arg-type]
        workdir=tmp_path / "hw",
        interpreter=False,  # the worker interprets; the fake ncu stands in for the GPU
    )
    hw.set_fingerprint({"gpu_model": MODEL})
    return hw


def _runs(store: SqliteStore) -> list[tuple[str, str]]:
    return [
        (r["candidate_id"], r["status"])
        for r in store._query("SELECT candidate_id, status FROM profiling_runs ORDER BY seq")
    ]


def test_the_baseline_is_profiled_and_the_policy_sees_its_profile(
    tmp_path: Path, write_entry: WriteEntry, make_ncu: MakeNcu
) -> None:
    spec = load_entry(write_entry(yaml=ROOFLINE_YAML))
    store = SqliteStore(tmp_path / "s.sqlite")
    store.sync_kernel(spec)
    store.record_peaks(MODEL, PEAKS)
    ncu = make_ncu(f"open(log_file, 'w').write({REPORT!r})\n")
    hw = _hardware(tmp_path, store, ncu)
    assert hw.state == "enabled"
    with WorkerClient(workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True)) as c:
        fid = store.record_fingerprint(c.start())
        campaign = Campaign(
            spec=spec,
            store=store,
            client=c,
            fingerprint=fid,
            settings=TuneSettings(budget=3),
            hardware=hw,
            masks=MaskSettings(dram=0.6),
        )
        baseline = campaign.step()
        assert baseline is not None and baseline.provenance is Provenance.ORIGINAL
        assert _runs(store) == [(baseline.candidate_id, "ok")]
        profile = store.profiles(spec.name, spec.generation, MODEL)[baseline.candidate_id]
        assert profile["sol_dram"] == pytest.approx(0.70)
        fraction = store.rooflines(spec.name, spec.generation, fid)[baseline.candidate_id]
        n = 3000  # the perf shape; roofline bytes 3*N*elem, flops N; mean over the dtypes
        expected = [
            max(
                3 * n * elem / baseline.result.timings[f"N={n}/{dtype}"] / PEAKS["bytes_per_s"],
                n / baseline.result.timings[f"N={n}/{dtype}"] / PEAKS["flops_per_s"],
            )
            for dtype, elem in (("float16", 2), ("float32", 4))
        ]
        assert fraction == pytest.approx(sum(expected) / 2)
        while campaign.step() is not None:
            pass
        policy = campaign._policy
        assert isinstance(policy, HierarchicalPolicy)
        assert policy.settings.masks.dram == 0.6  # the configured thresholds reach it
        assert policy._log is not None
        seen = policy._log.by_id[baseline.candidate_id].metrics
        assert seen["sol_dram"] == pytest.approx(0.70) and seen["sol_sm"] == pytest.approx(0.10)
    runs = _runs(store)
    assert len({cid for cid, _ in runs}) == len(runs), "a candidate was profiled twice"
    assert len(runs) <= 4  # at most per_step (1) per step, 4 steps


def test_without_ncu_tuning_goes_on_unmasked_with_one_log_line(
    tmp_path: Path,
    write_entry: WriteEntry,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    spec = load_entry(write_entry())
    store = SqliteStore(tmp_path / "s.sqlite")
    store.sync_kernel(spec)
    with caplog.at_level(logging.WARNING, logger="tuned.profiling"):
        hw = _hardware(tmp_path, store, "ncu")
    assert hw.state == "unavailable" and not hw.enabled
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "profiling is off" in lines[0] and "ncu" in lines[0]
    with WorkerClient(workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True)) as c:
        fid = store.record_fingerprint(c.start())
        campaign = Campaign(
            spec=spec,
            store=store,
            client=c,
            fingerprint=fid,
            settings=TuneSettings(budget=2),
            hardware=hw,
        )
        summary = campaign.run()
    assert summary.evaluations == 2
    assert _runs(store) == []
    assert hw.metrics(spec) == {}


def test_a_permission_error_turns_profiling_off_after_one_run(
    tmp_path: Path, write_entry: WriteEntry, make_ncu: MakeNcu
) -> None:
    spec = load_entry(write_entry())
    store = SqliteStore(tmp_path / "s.sqlite")
    store.sync_kernel(spec)
    ncu = make_ncu("print('==ERROR== ERR_NVGPUCTRPERM - no permission')\nsys.exit(1)\n")
    hw = _hardware(tmp_path, store, ncu)
    with WorkerClient(workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True)) as c:
        fid = store.record_fingerprint(c.start())
        campaign = Campaign(
            spec=spec,
            store=store,
            client=c,
            fingerprint=fid,
            settings=TuneSettings(budget=2),
            hardware=hw,
        )
        assert campaign.run().evaluations == 2
    assert [status for _, status in _runs(store)] == ["unavailable"]
    assert hw.state == "unavailable" and "NVreg_RestrictProfilingToAdminUsers" in hw.reason


def test_a_failed_profile_is_recorded_and_not_retried(
    tmp_path: Path, write_entry: WriteEntry, make_ncu: MakeNcu
) -> None:
    spec = load_entry(write_entry())
    store = SqliteStore(tmp_path / "s.sqlite")
    store.sync_kernel(spec)
    ncu = make_ncu("print('boom')\nsys.exit(2)\n")
    hw = _hardware(tmp_path, store, ncu)
    with WorkerClient(workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True)) as c:
        fid = store.record_fingerprint(c.start())
        campaign = Campaign(
            spec=spec,
            store=store,
            client=c,
            fingerprint=fid,
            settings=TuneSettings(budget=1),
            hardware=hw,
        )
        baseline = campaign.step()
        assert baseline is not None
        hw.refresh(spec, fid, [baseline])  # asked again: already attempted
    assert _runs(store) == [(baseline.candidate_id, "failed")]
    assert hw.state == "enabled"  # a candidate's failure does not turn profiling off


def test_interpreter_mode_takes_no_profiles(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    hw = HardwareFeedback(store=store, config=ProfilingConfig(), workdir=tmp_path, interpreter=True)
    assert hw.state == "interpreter" and not hw.enabled
    disabled = HardwareFeedback(
        store=store, config=ProfilingConfig(enabled=False), workdir=tmp_path, interpreter=False
    )
    assert disabled.state == "disabled"


def test_kernel_names_for_the_filter_come_from_the_source() -> None:
    source = (
        "import triton\nfrom triton import jit\n"
        "@triton.jit\ndef _a(x): pass\n"
        "@jit\ndef _b(x): pass\n"
        "@triton.autotune(configs=[], key=[])\n@triton.jit\ndef _c(x): pass\n"
        "def launcher(x): pass\n"
    )
    assert jit_kernel_names(source) == ["_a", "_b", "_c"]
    assert jit_kernel_names("def (") == []


def test_compile_metadata_and_profiles_merge_without_duplicates() -> None:
    compile_metrics = {"registers": 40.0, "shared_bytes": 0.0, "num_warps": 4.0}
    profile_metrics = {"registers": 42.0, "sol_dram": 0.9, "occupancy": 0.5}
    merged = merge_metrics(compile_metrics, profile_metrics)
    assert merged == {
        "registers": 40.0,
        "shared_bytes": 0.0,
        "num_warps": 4.0,
        "sol_dram": 0.9,
        "occupancy": 0.5,
    }
    assert merge_metrics({}, profile_metrics)["registers"] == 42.0
