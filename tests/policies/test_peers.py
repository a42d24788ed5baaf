"""Smoke run of the peer comparison (bench/peers.py): Optuna and Kernel Tuner on a recorded
space, scored like search_replay (issue 24). Skipped where the bench extra is not installed."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("optuna")
pytest.importorskip("kernel_tuner")

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "pnpoly_3060_small.json.gz"
BUDGETS = (1, 10, 30)


@pytest.fixture(scope="module")
def peers() -> ModuleType:
    from bench import peers

    return peers


@pytest.mark.parametrize(
    "method", ["optuna_tpe", "optuna_random", "kt_genetic_algorithm", "kt_simulated_annealing"]
)
def test_peer_starts_from_the_baseline_and_counts_distinct_recorded_configs(
    peers: ModuleType, method: str
) -> None:
    space = peers.RecordedSpace(FIXTURE)
    seed = 4
    baseline = peers.baseline_key(space, seed)
    scorer = peers.Scorer(space, max(BUDGETS))
    scorer.evaluate(baseline)
    with contextlib.suppress(peers.BudgetSpent):
        peers.PEERS[method](space, scorer, seed)
    first = scorer.fractions[0]
    assert first == pytest.approx(space.t_opt / space.records[baseline].time_s)
    # The budget is spent on distinct configurations (Kernel Tuner's simulated annealing
    # ends its own schedule at about 3/4 of max_fevals distinct ones; the others use it all).
    assert max(BUDGETS) * 2 // 3 <= len(scorer.seen) <= max(BUDGETS)
    assert scorer.seen <= set(space.records)  # only recorded configurations count
    assert scorer.fractions == sorted(scorer.fractions)  # the best so far never worsens
    fractions = peers.run_method(space, method, seed, BUDGETS)
    assert fractions[0] == pytest.approx(first)
    assert fractions == scorer.at(BUDGETS)  # seeded: the same run twice


def test_policy_method_is_the_search_replay_score(peers: ModuleType) -> None:
    space = peers.RecordedSpace(FIXTURE)
    assert peers.run_method(space, "random", 2, BUDGETS) == peers.replay(
        space, "random", 2, budgets=BUDGETS
    )


def test_command_line_reports_means_and_paired_differences(
    peers: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    code = peers.main(
        [
            "--spaces",
            str(FIXTURE),
            "--seeds",
            "2",
            "--methods",
            "hierarchical,optuna_random,kt_genetic_algorithm",
            "--budgets",
            "5,20",
            "--jobs",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "| pnpoly_3060_small | kt_genetic_algorithm |" in out
    assert "| **mean** | hierarchical |" in out
    assert "| optuna_random | " in out and "+-" in out  # the paired difference row
