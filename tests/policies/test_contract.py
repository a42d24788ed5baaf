"""The contract every policy in ``POLICIES`` keeps, checked on generated spaces."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import (
    DEFAULT_POLICY,
    POLICIES,
    SearchSpace,
    Suggestion,
    Trial,
    config_key,
    make_policy,
    restore_policy,
)
from tests.policies.conftest import ALL_POLICIES, Loop, spaces, valid_configs

FAST = settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def test_default_policy_is_registered() -> None:
    assert DEFAULT_POLICY in POLICIES
    assert DEFAULT_POLICY == "hierarchical"
    for name in ("ucb", "thompson", "discounted_ucb", "hierarchical", "random"):
        assert name in POLICIES
    assert {"simulated_annealing", "greedy_ls"} <= set(POLICIES)


def test_unknown_policy_lists_valid_names() -> None:
    with pytest.raises(ValueError, match=r"valid policies: .*hierarchical"):
        make_policy("nope")


@FAST
@given(space=spaces(), seed=st.integers(0, 2**16), name=st.sampled_from(ALL_POLICIES))
def test_never_reproposes_and_none_only_when_exhausted(
    space: SearchSpace, seed: int, name: str
) -> None:
    loop = Loop(space, make_policy(name), seed)
    total = len(valid_configs(space))
    loop.run(total + 2)
    keys = loop.keys()
    assert len(keys) == len(set(keys)), "a configuration was proposed twice"
    assert all(space.admits(t.knobs) for t in loop.trials)
    # It stopped (returned None) only once every valid configuration was evaluated.
    assert len(keys) == total


@FAST
@given(space=spaces(), seed=st.integers(0, 2**16), name=st.sampled_from(ALL_POLICIES))
def test_same_seed_same_choices(space: SearchSpace, seed: int, name: str) -> None:
    first, second = Loop(space, make_policy(name), seed), Loop(space, make_policy(name), seed)
    first.run(30)
    second.run(30)
    assert first.keys() == second.keys()
    assert [s.arm for s in first.suggestions] == [s.arm for s in second.suggestions]


@FAST
@given(
    space=spaces(),
    seed=st.integers(0, 2**16),
    steps=st.integers(0, 20),
    name=st.sampled_from(ALL_POLICIES),
)
def test_state_round_trips_and_restored_policy_continues_the_same(
    space: SearchSpace, seed: int, steps: int, name: str
) -> None:
    loop = Loop(space, make_policy(name), seed)
    loop.run(steps)
    state = loop.policy.to_dict()
    text = json.dumps(state)  # JSON-safe
    restored = restore_policy(name, json.loads(text))
    assert restored.to_dict() == json.loads(text)
    trials = list(loop.trials) or None
    if trials is None:
        return
    rng_a = np.random.default_rng([seed, 7])
    rng_b = np.random.default_rng([seed, 7])
    a = loop.policy.suggest(space, trials, rng_a)
    b = restored.suggest(space, trials, rng_b)
    assert (a is None) == (b is None)
    if a is not None and b is not None:
        assert config_key(a.knobs) == config_key(b.knobs)
        assert (a.arm, a.strategy, a.parent_id) == (b.arm, b.strategy, b.parent_id)


@pytest.mark.parametrize("name", ALL_POLICIES)
def test_pending_suggestions_are_not_proposed_again(name: str) -> None:
    space = SearchSpace(knobs={"BLOCK": (16, 32, 64, 128), "num_warps": (1, 2, 4, 8)})
    loop = Loop(space, make_policy(name), seed=3)
    loop.run(12)
    policy, trials = loop.policy, list(loop.trials)
    pending: list[Suggestion] = []
    for i in range(space.size() - len(trials)):
        s = policy.suggest(space, trials, np.random.default_rng(i), pending=pending)
        assert s is not None
        assert config_key(s.knobs) not in {config_key(p.knobs) for p in pending}
        assert config_key(s.knobs) not in {config_key(t.knobs) for t in trials}
        pending.append(s)
    assert policy.suggest(space, trials, np.random.default_rng(0), pending=pending) is None


@pytest.mark.parametrize("name", ALL_POLICIES)
def test_fresh_equal_space_object_each_call_is_fine(name: str) -> None:
    """The daemon builds a new (equal) SearchSpace on every step."""
    knobs = {"BLOCK": (16, 32, 64), "num_warps": (2, 4), "num_stages": (1, 2, 3)}
    policy = make_policy(name)
    loop = Loop(SearchSpace(knobs=knobs), policy, seed=5)
    for _ in range(10):
        loop.space = SearchSpace(knobs=dict(knobs))
        loop.step()
    keys = loop.keys()
    assert len(keys) == len(set(keys))


def test_policies_share_no_global_rng_state() -> None:
    """Choices depend on the rng passed in, not on numpy's or random's global state."""
    space = SearchSpace(knobs={"BLOCK": (16, 32, 64, 128), "num_warps": (1, 2, 4, 8, 16)})
    runs = []
    for global_seed in (1, 2):
        np.random.seed(global_seed)
        import random

        random.seed(global_seed)
        loop = Loop(space, make_policy(DEFAULT_POLICY), seed=11)
        loop.run(15)
        runs.append(loop.keys())
    assert runs[0] == runs[1]


@pytest.mark.parametrize("name", ALL_POLICIES)
def test_broken_times_count_as_failures_never_as_a_crash(name: str) -> None:
    """A successful outcome with a time of 0, below 0, NaN or infinity (a broken
    measurement) is a failed trial for every policy: the search goes on around it."""
    space = SearchSpace(knobs={"a": (1, 2, 4, 8, 16), "b": (1, 2, 4, 8), "c": (0, 1)})
    broken = (0.0, -1.0, float("nan"), float("inf"))
    policy = make_policy(name)
    rng = np.random.default_rng(0)
    trials: list[Trial] = []
    while len(trials) < 30:
        suggestion = policy.suggest(space, trials, rng)
        assert suggestion is not None
        i = len(trials)
        t = broken[i // 3 % 4] if i % 3 == 0 else 1.0 + 0.01 * int(suggestion.knobs["a"])
        trial = Trial(candidate_id=f"c{i}", knobs=suggestion.knobs, outcome="ok", time_s=t)
        assert trial.ok == (i % 3 != 0)
        policy.observe(suggestion, trial)
        json.dumps(policy.to_dict())
        trials.append(trial)
    keys = [config_key(t.knobs) for t in trials]
    assert len(set(keys)) == len(keys)


@pytest.mark.parametrize("name", ALL_POLICIES)
def test_a_space_beyond_int64_is_searched(name: str) -> None:
    """20 knobs of 10 values: 10**20 configurations, more than numpy draws in one go."""
    space = SearchSpace(knobs={f"k{i}": tuple(range(10)) for i in range(20)})
    policy = make_policy(name)
    rng = np.random.default_rng(1)
    trials: list[Trial] = []
    while len(trials) < 15:
        suggestion = policy.suggest(space, trials, rng)
        assert suggestion is not None and space.contains(suggestion.knobs)
        t = 1.0 + 0.01 * sum(int(str(v)) for v in suggestion.knobs.values())
        i = len(trials)
        trial = Trial(candidate_id=f"c{i}", knobs=suggestion.knobs, outcome="ok", time_s=t)
        policy.observe(suggestion, trial)
        trials.append(trial)
    assert len({config_key(t.knobs) for t in trials}) == 15
