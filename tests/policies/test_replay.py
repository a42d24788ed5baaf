"""Replays on a recorded, real tuning space (the shared benchdata), with few seeds."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from policies import DEFAULT_POLICY, POLICIES

ROOT = Path(__file__).resolve().parents[2]
BENCHDATA = ROOT.parent / "shared" / "benchdata"
SPACE_FILE = BENCHDATA / "convolution_A4000.json.gz"
# Random search's expected fraction of optimum at 50 evaluations on that file (benchdata
# README, 400 seeds).
RANDOM_FLOOR_AT_50 = 0.778

pytestmark = pytest.mark.skipif(
    not SPACE_FILE.exists(),
    reason=f"recorded tuning spaces not found at {BENCHDATA} (the shared benchdata checkout)",
)


@pytest.fixture(scope="module")
def replay_module():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import search_replay
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return search_replay


def test_default_policy_beats_the_random_floor_at_50(replay_module) -> None:  # type: ignore[no-untyped-def]
    space = replay_module.RecordedSpace(SPACE_FILE)
    fractions = [
        replay_module.replay(space, DEFAULT_POLICY, seed, budgets=(25, 50))[1] for seed in range(6)
    ]
    assert np.mean(fractions) > RANDOM_FLOOR_AT_50


def test_every_policy_replays_a_real_space_without_breaking_the_contract(replay_module) -> None:  # type: ignore[no-untyped-def]
    space = replay_module.RecordedSpace(SPACE_FILE)
    for name in POLICIES:
        # replay() raises if a policy proposes a restricted or repeated configuration.
        fractions = replay_module.replay(space, name, 0, budgets=(10, 40))
        assert 0 < fractions[0] <= fractions[1] <= 1


def test_command_line_prints_a_row_per_space_and_policy(replay_module, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / SPACE_FILE.name).symlink_to(SPACE_FILE)
    code = replay_module.main(
        ["--spaces", str(tmp_path), "--seeds", "1", "--policies", "random,greedy_ls", "--jobs", "1"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "| convolution_A4000 | random |" in out
    assert "| **mean** | greedy_ls |" in out


@pytest.mark.parametrize(
    ("cache", "field"),
    [
        (b"{not json", "not JSON"),
        (b'{"cache": {}}', "tune_params_keys"),
        (
            b'{"tune_params_keys": ["a"], "tune_params": {"a": [1, 2]},'
            b' "cache": {"1": {"a": 1, "time": NaN}, "2": {"a": 2, "time": 1.0}}}',
            "cache entry '1': time and times must be numbers > 0",
        ),
        (
            b'{"tune_params_keys": ["a"], "tune_params": {"a": [1, 2]},'
            b' "cache": {"1": {"a": 3, "time": 1.0}}}',
            "cache entry '1' has a value outside tune_params",
        ),
    ],
    ids=["not_json", "no_keys", "nan_time", "value_outside"],
)
def test_a_broken_space_file_ends_both_commands_with_its_name_and_field(  # type: ignore[no-untyped-def]
    replay_module, tmp_path, capsys, cache: bytes, field: str
) -> None:
    from bench import peers

    bad = tmp_path / "broken.json.gz"
    bad.write_bytes(cache)
    for main in (replay_module.main, peers.main):
        with pytest.raises(SystemExit) as exit_:
            main(["--spaces", str(bad), "--seeds", "1", "--jobs", "1"])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert f"{bad}: " in err and field in err, err


def test_first_seed_runs_the_held_out_seeds_it_names(replay_module, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """``--first-seed K --seeds 1`` reports seed K's run, not seed 0's: both commands."""
    from bench import peers

    (tmp_path / SPACE_FILE.name).symlink_to(SPACE_FILE)
    space = replay_module.RecordedSpace(SPACE_FILE)
    budgets = (5, 15)
    expected = {k: replay_module.replay(space, "random", k, budgets=budgets) for k in (0, 7)}
    assert expected[0] != expected[7]  # the two seeds tell apart
    common = ["--spaces", str(tmp_path), "--seeds", "1", "--jobs", "1", "--budgets", "5,15"]
    for main, flag in ((replay_module.main, "--policies"), (peers.main, "--methods")):
        assert main([*common, "--first-seed", "7", flag, "random"]) == 0
        out = capsys.readouterr().out
        row = next(line for line in out.splitlines() if line.startswith("| convolution_A4000"))
        assert row.endswith(" | ".join(f"{v:.3f}" for v in expected[7]) + " |"), row
        assert "(7-7)" in out
        with pytest.raises(SystemExit):
            main([*common, "--first-seed", "-1", flag, "random"])
        capsys.readouterr()
