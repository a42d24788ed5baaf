"""The hierarchical policy: arms, rewards, level 2, priors, ablations."""

from __future__ import annotations

import json

import numpy as np
import pytest

from policies import HierarchicalPolicy, HierarchicalSettings, SearchSpace, Trial, make_policy
from policies.history import TrialLog
from policies.parents import headroom_choice
from policies.space_index import SpaceIndex
from tests.policies.conftest import Loop

SPACE = SearchSpace(
    knobs={
        "BLOCK_M": (16, 32, 64, 128, 256),
        "BLOCK_N": (16, 32, 64, 128),
        "num_warps": (1, 2, 4, 8),
        "num_stages": (1, 2, 3, 4),
        "EVEN_K": (False, True),
    }
)


def test_arms_are_cluster_strategy_pairs_and_earn_the_parent_relative_reward() -> None:
    policy = HierarchicalPolicy()
    loop = Loop(SPACE, policy, seed=1)
    loop.run(60)
    bandit = policy.state.bandit
    assert bandit.arms, "arms were pulled"
    for arm in bandit.arms:
        cluster, strategy = arm.split("/")
        assert 0 <= int(cluster) < 3
        assert strategy in {"tiling", "pipeline", "access_layout", "config"}
    by_id = {t.candidate_id: t for t in loop.trials}
    expected: dict[str, list[float]] = {}
    for suggestion, trial in zip(loop.suggestions, loop.trials[1:]):
        if suggestion.arm is None:
            continue
        parent = by_id[suggestion.parent_id or ""]
        assert parent.time_s == suggestion.parent_time_s
        r = 0.0 if trial.time_s is None else max(0.0, 1 - trial.time_s / (parent.time_s or 1))
        expected.setdefault(suggestion.arm, []).append(r)
    for arm, rewards in expected.items():
        assert bandit.arms[arm].pulls == len(rewards)
        assert bandit.arms[arm].reward_sum == pytest.approx(sum(rewards))


def test_first_evaluations_are_random_then_the_bandit_takes_over() -> None:
    loop = Loop(SPACE, HierarchicalPolicy(), seed=2)
    loop.run(30)
    first = HierarchicalSettings().initial_random - 1  # the baseline is the first trial
    assert all(s.arm is None for s in loop.suggestions[:first])
    assert any(s.arm is not None for s in loop.suggestions[first:])


def test_parent_is_inside_the_arms_cluster() -> None:
    policy = HierarchicalPolicy()
    loop = Loop(SPACE, policy, seed=3)
    loop.run(40)
    suggestion = loop.step()
    assert suggestion is not None and suggestion.arm is not None
    cluster = int(suggestion.arm.split("/")[0])
    assert policy._queues is not None and policy._log is not None
    position = next(
        i for i, e in enumerate(policy._log.ok) if e.candidate_id == suggestion.parent_id
    )
    assert policy._queues.labels[position] == cluster


def test_representatives_are_the_fastest_member_of_each_cluster() -> None:
    policy = HierarchicalPolicy()
    loop = Loop(SPACE, policy, seed=4)
    loop.run(40)
    reps = policy.representatives()
    assert reps and set(reps) <= {0, 1, 2}
    fastest = min((t for t in loop.trials if t.ok), key=lambda t: t.time_s or 0)
    assert fastest.candidate_id in reps.values()


def test_prior_seeds_new_arms_and_is_persisted() -> None:
    policy = HierarchicalPolicy(prior={"tiling": (3.0, 0.6)})
    loop = Loop(SPACE, policy, seed=5)
    loop.run(30)
    state = json.loads(json.dumps(policy.to_dict()))
    assert state["prior"] == {"tiling": [3.0, 0.6]}
    tiling = [a for a in policy.state.bandit.arms if a.endswith("/tiling")]
    assert tiling
    for arm in tiling:
        assert policy.state.bandit.arms[arm].pulls >= 3.0


def test_without_clustering_everything_is_cluster_zero() -> None:
    policy = make_policy("hierarchical_nocluster")
    loop = Loop(SPACE, policy, seed=6)
    loop.run(40)
    assert all(s.arm is None or s.arm.startswith("0/") for s in loop.suggestions)
    assert policy.to_dict()["clusters"] is None


def test_flat_ucb_moves_only_from_the_incumbent() -> None:
    loop = Loop(SPACE, make_policy("ucb"), seed=7)
    for _ in range(50):
        best = min((t for t in loop.trials if t.ok), key=lambda t: t.time_s or 0, default=None)
        suggestion = loop.step()
        assert suggestion is not None
        if suggestion.arm is not None and best is not None:
            assert suggestion.parent_id == best.candidate_id


def test_level_two_prefers_headroom_when_profiled() -> None:
    log = TrialLog(SpaceIndex(SPACE))
    configs = [SPACE.config_at(i) for i in (0, 1, 2)]
    log.sync(
        [
            Trial("a", configs[0], "ok", 1.00, metrics={"sol_dram": 0.95}),
            Trial("b", configs[1], "ok", 1.01, metrics={"sol_dram": 0.20}),
            Trial("c", configs[2], "ok", 1.50, metrics={"sol_dram": 0.00}),
        ]
    )
    # b is 1 % slower than a but has far more DRAM headroom; c is far slower.
    assert headroom_choice(log, [0, 1, 2], "sol_dram", weight=0.1) == 1
    assert headroom_choice(log, [0, 1, 2], None, weight=0.1) == 0  # no profile: latency
    assert headroom_choice(log, [0, 1, 2], "sol_sm", weight=0.1) == 0


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="unknown selector"):
        HierarchicalSettings(selector="epsilon")
    with pytest.raises(ValueError, match="unknown or no strategies"):
        HierarchicalSettings(strategies=("teleport",))


def test_thompson_and_discounted_variants_run_hierarchically() -> None:
    for selector in ("thompson", "discounted_ucb"):
        policy = HierarchicalPolicy(settings=HierarchicalSettings(selector=selector))
        loop = Loop(SPACE, policy, seed=8)
        loop.run(40)
        assert sum(a.pulls for a in policy.state.bandit.arms.values()) > 0
        restored = HierarchicalPolicy.from_dict(
            policy.to_dict(), settings=HierarchicalSettings(selector=selector)
        )
        assert restored.to_dict() == policy.to_dict()
        rng = np.random.default_rng(0)
        assert restored.suggest(SPACE, loop.trials, rng) is not None
