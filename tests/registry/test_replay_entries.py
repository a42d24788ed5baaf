"""Replay entries: a recorded Kernel Tuner cache drives the whole loop (store, policy,
acceptance, CLI), evaluated by :class:`tuned.evaluation.replay.ReplayClient`.

The recorded space is ``tests/fixtures/convolution_A6000_small.json.gz`` (real measurements,
see ``tests/fixtures/README.md``); the outcome mapping is checked on a small cache written
here, which has one configuration of every kind.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli.test_cli import ktuned
from tests.daemon.conftest import StartDaemon, start_daemon, wait_for  # noqa: F401 (fixture)
from tuned.errors import RegistryError
from tuned.evaluation.replay import REPLAY_CASE, ReplayClient
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import KernelSpec, Problem, load_entry
from tuned.registry.replay import read_cache

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "convolution_A6000_small.json.gz"
EXAMPLE = ROOT / "examples" / "replay"


def small_cache() -> dict[str, Any]:
    """Two knobs, one configuration of each recorded kind; (4, 1) and (4, 2) are absent."""
    entries = {
        (1, 1): {"time": 2.0, "times": [2.0, 2.2, 1.9, 2.1]},
        (1, 2): {"time": 1.0, "times": [1.0, 1.1, 0.9, 1.0]},
        (2, 1): {"time": "CompilationFailedConfig"},
        (2, 2): {"time": "RuntimeFailedConfig"},
        (3, 1): {"time": "InvalidConfig"},
        (3, 2): {"time": 0.5, "times": [0.5, 0.6, 0.4, 0.5]},
    }
    cache = {f"{a},{b}": {"block": a, "tile": b, **value} for (a, b), value in entries.items()}
    return {
        "device_name": "Test GPU",
        "kernel_name": "toy",
        "tune_params_keys": ["block", "tile"],
        "tune_params": {"block": [1, 2, 3, 4], "tile": [1, 2]},
        "cache": cache,
    }


def write_replay(directory: Path, doc: dict[str, Any], cache: dict[str, Any] | None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    if cache is not None:
        (directory / "toy.json").write_text(json.dumps(cache))
    (directory / "kernel.yaml").write_text(yaml.safe_dump(doc))
    return directory


def toy(tmp_path: Path, **fields: Any) -> KernelSpec:
    doc = {"name": "toy", "kind": "replay", "cache": "toy.json", **fields}
    return load_entry(write_replay(tmp_path / "toy", doc, small_cache()))


def candidate(spec: KernelSpec, **knobs: Any) -> Candidate:
    return Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=spec.module_source,
        knobs=knobs,
        provenance=Provenance.PARAMETRIC,
    )


# -- the entry


def test_a_replay_entry_reads_its_space_from_the_cache(tmp_path: Path) -> None:
    spec = load_entry(EXAMPLE / "convolution_a6000")
    assert spec.replay is not None and spec.replay.cache.resolve() == FIXTURE.resolve()
    cache, digest = read_cache(FIXTURE.read_bytes())
    assert spec.replay.sha256 == digest and spec.replay.device == "NVIDIA RTX A6000"
    assert list(spec.knobs) == list(cache.keys)
    assert spec.knobs["block_size_x"] == (16, 32, 64, 128, 256)
    assert spec.space_size() == 900 and len(cache.records) == 424  # restricted space
    # The default baseline is a configuration that ran, drawn with the entry's seed.
    record = cache.lookup(spec.baseline_knobs)
    assert record is not None and record.status == "ok"
    assert spec.replay.noise == "recorded" and spec.shapes == () and spec.launcher == ""

    # The cache is part of the generation: a changed recording is a new generation.
    copy = tmp_path / "copy"
    shutil.copytree(EXAMPLE / "convolution_a6000", copy)
    shutil.copy(FIXTURE, copy / "c.json.gz")
    text = (copy / "kernel.yaml").read_text()
    (copy / "kernel.yaml").write_text(text.replace(spec.module, "c.json.gz"))
    first = load_entry(copy).generation
    data = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    next(iter(data["cache"].values()))["time"] = 99.0
    (copy / "c.json.gz").write_bytes(gzip.compress(json.dumps(data).encode()))
    assert load_entry(copy).generation != first


def test_baseline_seed_and_explicit_baseline(tmp_path: Path) -> None:
    working = {(1, 1), (1, 2), (3, 2)}
    drawn = {tuple(toy(tmp_path / str(s), seed=s).baseline_knobs.values()) for s in range(12)}
    assert drawn <= working and len(drawn) > 1
    spec = toy(tmp_path / "b", baseline={"block": 1, "tile": 1})
    assert spec.baseline_knobs == {"block": 1, "tile": 1}


@pytest.mark.parametrize(
    ("fields", "cache", "field", "fragment"),
    [
        ({"cache": None}, True, "cache", "required"),
        ({"cache": "nowhere.json"}, True, "cache", "file not found"),
        ({}, "not json", "cache", "not a Kernel Tuner cache file: not JSON"),
        ({}, {"tune_params_keys": ["a"]}, "cache", "tune_params must map"),
        ({"noise": "loud"}, True, "noise", "none, recorded"),
        ({"seed": -1}, True, "seed", "integer >= 0"),
        ({"baseline": {"block": 4, "tile": 1}}, True, "baseline", "not recorded"),
        ({"baseline": {"block": 2, "tile": 1}}, True, "baseline", "CompilationFailedConfig"),
        ({"baseline": {"block": 1}}, True, "baseline", "missing tile"),
        ({"module": "x.py"}, True, "module", "unknown key for a replay entry"),
        ({"kind": "cuda"}, True, "kind", "triton (the default), reference or replay"),
        ({"weight": 0}, True, "weight", "must be a number > 0"),
    ],
)
def test_bad_replay_entries_are_reported(
    tmp_path: Path, fields: dict[str, Any], cache: object, field: str, fragment: str
) -> None:
    doc = {"name": "toy", "kind": "replay", "cache": "toy.json", **fields}
    doc = {k: v for k, v in doc.items() if v is not None}
    directory = write_replay(tmp_path / "e", doc, small_cache() if cache is True else None)
    if isinstance(cache, str):
        (directory / "toy.json").write_text(cache)
    elif isinstance(cache, dict):
        (directory / "toy.json").write_text(json.dumps(cache))
    with pytest.raises(RegistryError) as info:
        load_entry(directory)
    problems = [p for p in info.value.problems if isinstance(p, Problem)]
    assert any(p.field == field and fragment in p.reason for p in problems), problems


# -- the client


def test_recorded_outcomes_map_to_outcomes(tmp_path: Path) -> None:
    spec = toy(tmp_path, noise="none")
    client = ReplayClient(spec)
    fingerprint = client.start()
    assert fingerprint["mode"] == "replay" and fingerprint["gpu_model"] == "Test GPU"

    ok = client.evaluate(spec, candidate(spec, block=1, tile=1))
    assert ok.outcome is Outcome.OK and ok.timing_kind == "replay"
    assert ok.time_s == pytest.approx(2.05e-3)  # the median recorded run, in seconds
    assert ok.metadata["samples"] == {REPLAY_CASE: [pytest.approx(2.05e-3)]}
    expected = {
        (2, 1): (Outcome.COMPILE_ERROR, "compile", "CompilationFailedConfig"),
        (3, 1): (Outcome.COMPILE_ERROR, "compile", "InvalidConfig"),
        (2, 2): (Outcome.RUNTIME_ERROR, "benchmark", "RuntimeFailedConfig"),
        (4, 1): (Outcome.REJECTED_STATIC, "static", "not in the recorded space"),
    }
    for (block, tile), (outcome, phase, fragment) in expected.items():
        result = client.evaluate(spec, candidate(spec, block=block, tile=tile))
        assert (result.outcome, result.phase) == (outcome, phase)
        assert fragment in result.reason and result.time_s is None
    assert client.admits({"block": 2, "tile": 1}) and not client.admits({"block": 4, "tile": 1})
    wrong = client.evaluate(spec, candidate(spec, block=1))
    assert (
        wrong.outcome is Outcome.REJECTED_STATIC and "not the recorded parameters" in wrong.reason
    )

    # With an incumbent, its samples come along: what the acceptance rule compares.
    paired = client.evaluate(
        spec, candidate(spec, block=3, tile=2), candidate(spec, block=1, tile=2)
    )
    assert paired.metadata["incumbent_samples"] == {REPLAY_CASE: [pytest.approx(1.0e-3)]}


def test_noise_draws_are_seeded_per_candidate_and_measurement(tmp_path: Path) -> None:
    def samples(seed: int, spec_dir: str, repeats: int = 2) -> list[list[float]]:
        spec = toy(tmp_path / spec_dir, noise="recorded", seed=seed)
        client = ReplayClient(spec)
        out = []
        for _ in range(repeats):
            result = client.evaluate(
                spec, candidate(spec, block=1, tile=1), candidate(spec, block=1, tile=2)
            )
            out += [result.metadata["samples"][REPLAY_CASE]]
            out += [result.metadata["incumbent_samples"][REPLAY_CASE]]
        return out

    first = samples(7, "a")
    assert first == samples(7, "b")  # same seed, same draws, in a fresh client
    assert first != samples(8, "c")
    cand0, inc0, cand1, _ = first
    assert cand0 != cand1  # a re-measurement draws afresh
    assert len(cand0) == 4 and {round(v * 1e3, 9) for v in cand0} <= {2.0, 2.2, 1.9, 2.1}
    assert {round(v * 1e3, 9) for v in inc0} <= {1.0, 1.1, 0.9}


# -- the whole loop, through the command line


def _first_measurements(state: Path) -> list[tuple[str, str, float | None]]:
    db = sqlite3.connect(state / "ktuned.sqlite")
    try:
        rows = db.execute(
            "SELECT candidate_id, outcome, time_s, result_json FROM evaluations ORDER BY seq"
        ).fetchall()
    finally:
        db.close()
    return [(c, o, t) for c, o, t, r in rows if not json.loads(r)["metadata"].get("remeasure")]


def _registry(tmp_path: Path, noise: str, seed: int = 0) -> Path:
    entry = tmp_path / "registry" / "conv"
    entry.mkdir(parents=True)
    doc = {
        "name": "conv",
        "kind": "replay",
        "cache": str(FIXTURE),
        "noise": noise,
        "seed": seed,
    }
    (entry / "kernel.yaml").write_text(yaml.safe_dump(doc))
    return entry.parent


def test_tune_runs_to_its_budget_and_finds_the_best_evaluated(tmp_path: Path) -> None:
    registry, state = _registry(tmp_path, "none"), tmp_path / "state"
    run = ktuned("tune", registry, "--budget", "30", state=state)
    assert run.returncode == 0, run.stderr
    assert "Device: none, replayed measurements of NVIDIA RTX A6000" in run.stdout
    evaluated = _first_measurements(state)
    assert len(evaluated) == 31 and len({c for c, _, _ in evaluated}) == 31
    assert {o for _, o, _ in evaluated} <= {
        "ok",
        "compile_error",
        "runtime_error",
        "rejected_static",
    }

    best = json.loads(ktuned("best", "conv", "--json", state=state).stdout)
    assert best["timing_kind"] == "replay"
    fastest = min(t for _, o, t in evaluated if o == "ok" and t is not None)
    # Accepted bests must beat the incumbent by the acceptance rule's 1 %: the final best is
    # within 1 % of the fastest evaluated configuration (exact without noise).
    assert fastest <= best["time_s"] <= fastest * 1.01
    cache, _ = read_cache(FIXTURE.read_bytes())
    record = cache.lookup(best["knobs"])
    assert record is not None and record.median_ms == pytest.approx(best["time_s"] * 1e3)

    # Resume: a larger budget continues where the store stands, evaluating nothing twice.
    more = ktuned("tune", registry, "--budget", "45", state=state)
    assert more.returncode == 0, more.stderr
    after = _first_measurements(state)
    assert after[:31] == evaluated and len(after) == 46 and len({c for c, _, _ in after}) == 46
    again = ktuned("tune", registry, "--budget", "45", state=state)
    assert again.returncode == 0 and len(_first_measurements(state)) == 46


def test_noisy_replays_are_reproducible(tmp_path: Path) -> None:
    def run(name: str, seed: int) -> list[tuple[str, str, float | None]]:
        registry, state = _registry(tmp_path / name, "recorded", seed), tmp_path / name / "s"
        done = ktuned("tune", registry, "--budget", "12", state=state)
        assert done.returncode == 0, done.stderr
        return _first_measurements(state)

    first = run("a", 1)
    assert first == run("b", 1)
    assert first != run("c", 2)


def test_the_daemon_tunes_a_replay_entry(start_daemon: StartDaemon) -> None:  # noqa: F811
    d = start_daemon(EXAMPLE, poll=0.5)
    d.notify.wait("READY", "1", timeout=180)
    wait_for(lambda: len(d.evaluations()) >= 25, 60, "25 replayed evaluations")
    # Metrics are read from the store: the replayed kernel's best speedup is published.
    assert 'ktuned_kernel_best_speedup_ratio{kernel="convolution-a6000-replay"}' in d.metrics()
    assert d.stop() == 0
    fingerprints = d.query(
        "SELECT DISTINCT f.json FROM evaluations e JOIN fingerprints f ON f.id = e.fingerprint"
    )
    assert [json.loads(str(f))["mode"] for (f,) in fingerprints] == ["replay"]
    kinds = d.query("SELECT DISTINCT timing_kind FROM evaluations WHERE outcome = 'ok'")
    assert kinds == [("replay",)]
