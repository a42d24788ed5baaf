"""Batched proposals: no duplicates, nothing pending again, and no piling onto one arm."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import (
    HierarchicalPolicy,
    HierarchicalSettings,
    SearchSpace,
    Suggestion,
    config_key,
    make_policy,
    propose_batch,
)
from policies.arms import ArmStats, BanditState
from policies.discounted import DiscountedUCBSelector, DiscountedUCBSettings
from policies.thompson import ThompsonSelector
from policies.ucb import UCBSelector, UCBSettings
from tests.policies.conftest import ALL_POLICIES, Loop, spaces, valid_configs

PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(
    name=st.sampled_from(ALL_POLICIES),
    space=spaces(),
    steps=st.integers(0, 14),
    in_flight=st.integers(0, 3),
    size=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_a_batch_holds_no_duplicate_nothing_pending_and_nothing_evaluated(
    name: str, space: SearchSpace, steps: int, in_flight: int, size: int, seed: int
) -> None:
    loop = Loop(space=space, policy=make_policy(name), seed=seed)
    loop.run(steps)
    rng = np.random.default_rng(seed)
    pending = propose_batch(loop.policy, space, loop.trials, rng, in_flight)
    batch = propose_batch(loop.policy, space, loop.trials, rng, size, pending=pending)
    keys = [config_key(s.knobs) for s in batch]
    assert len(keys) == len(set(keys)), "a batch proposed the same configuration twice"
    taken = {config_key(t.knobs) for t in loop.trials} | {config_key(s.knobs) for s in pending}
    assert not taken & set(keys)
    assert all(space.admits(s.knobs) for s in batch)
    free = len(valid_configs(space)) - len(taken)
    assert len(batch) == min(size, free), "the policy stopped before the space was exhausted"


def test_a_negative_batch_size_is_refused() -> None:
    space = SearchSpace(knobs={"BLOCK": (1, 2)})
    with pytest.raises(ValueError, match="batch size"):
        propose_batch(make_policy("random"), space, [], np.random.default_rng(0), -1)


# -- the correction itself, on the selectors


def _identical(k: int, pulls: float, reward_sum: float) -> BanditState:
    arms = {f"a{i}": ArmStats(pulls, reward_sum) for i in range(k)}
    return BanditState(arms=arms, total_pulls=k * pulls)


def _batch(selector: object, state: BanditState, arms: list[str], size: int) -> Counter[str]:
    rng = np.random.default_rng(0)
    chosen: Counter[str] = Counter()
    for _ in range(size):
        pick = selector.select(state.with_pending(chosen), arms, rng)  # type: ignore[attr-defined]
        chosen[pick] += 1
    return chosen


@PROPERTY
@given(
    k=st.integers(2, 6),
    pulls=st.integers(0, 30),
    mean=st.floats(0.0, 1.0),
    size=st.integers(1, 24),
    c=st.floats(0.05, 2.0),
    discounted=st.booleans(),
)
def test_a_batch_spreads_evenly_over_arms_that_look_alike(
    k: int, pulls: int, mean: float, size: int, c: float, discounted: bool
) -> None:
    """UCB with pending pulls: between equal arms, picks differ by at most one per arm; without
    the correction every pick of a batch would go to one arm (the index would not move)."""
    state = _identical(k, float(pulls), mean * pulls)
    selector = (
        DiscountedUCBSelector(settings=DiscountedUCBSettings(c=c))
        if discounted
        else UCBSelector(settings=UCBSettings(c=c))
    )
    arms = sorted(state.arms)
    counts = _batch(selector, state, arms, size)
    spread = [counts.get(a, 0) for a in arms]
    assert max(spread) - min(spread) <= 1, counts
    assert sum(spread) == size


@PROPERTY
@given(
    pulls=st.integers(1, 50),
    reward=st.floats(0.0, 1.0),
    others=st.integers(0, 200),
    pending=st.integers(1, 8),
    c=st.floats(0.05, 2.0),
)
def test_a_pending_pull_lowers_its_arms_index_and_posterior_mean(
    pulls: int, reward: float, others: int, pending: int, c: float
) -> None:
    state = BanditState(
        arms={"a": ArmStats(float(pulls), reward * pulls)}, total_pulls=float(pulls + others)
    )
    ucb = UCBSelector(settings=UCBSettings(c=c))
    before, after = ucb.index(state, "a"), ucb.index(state.with_pending({"a": pending}), "a")
    total = pulls + others
    # The bonus c*sqrt(ln t / n) shrinks as pending pulls add to both n and t once ln t > 1
    # (t >= 3) before them: with t = 1 there is no bonus yet to shrink (hypothesis found
    # pulls=1, others=0: the index 0.0 before, 0.61 after).
    if total >= 3:
        assert after < before
    moved = state.with_pending({"a": pending}).stats("a")
    assert moved.pulls == pulls + pending and moved.reward_sum == pytest.approx(reward * pulls)
    # Thompson: the pending pulls are pseudo-failures, so the posterior mean drops.
    prior = ThompsonSelector().settings
    mean_before = (prior.prior_alpha + reward * pulls) / (
        prior.prior_alpha + prior.prior_beta + pulls
    )
    mean_after = (prior.prior_alpha + moved.reward_sum) / (
        prior.prior_alpha + prior.prior_beta + moved.pulls
    )
    assert mean_after < mean_before
    assert state.stats("a").pulls == pulls  # the real state is left as it was
    assert not math.isnan(after)


# -- the hierarchical policy


@PROPERTY
@given(seed=st.integers(0, 2**16), size=st.integers(2, 6))
def test_the_hierarchical_policy_spreads_a_batch_over_its_open_arms(seed: int, size: int) -> None:
    """Right after the random start no arm has been pulled: each open arm's index is infinite
    until it has a pull in flight, so a batch takes an arm not in the batch yet whenever one is
    open (an arm closes when the batch took its last free move)."""
    space = SearchSpace(
        knobs={
            "BLOCK_M": (16, 32, 64, 128),
            "BLOCK_N": (16, 32, 64, 128),
            "num_warps": (1, 2, 4, 8),
            "num_stages": (1, 2, 3, 4),
        }
    )
    settings_ = HierarchicalSettings(initial_random=6, clustering=None)
    loop = Loop(space=space, policy=HierarchicalPolicy(settings=settings_), seed=seed)
    loop.run(5)  # baseline + 5 random: the bandit starts now
    assert len(loop.trials) == 6
    batch = propose_batch(loop.policy, space, loop.trials, np.random.default_rng(seed), size)
    assert len(batch) == size
    spread = 0
    for i, suggestion in enumerate(batch):
        before = {s.arm for s in batch[:i]}
        # Which arms are still open and untried given what is pending, as fresh policies
        # (same history, same pending) reveal them: an untried arm has an infinite index.
        untried = set()
        for draw in range(12):
            probe = HierarchicalPolicy(settings=settings_).suggest(
                space, loop.trials, np.random.default_rng([seed, i, draw]), pending=batch[:i]
            )
            if probe is not None and probe.arm is not None:
                untried.add(probe.arm)
        if untried - before:
            assert suggestion.arm not in before, (i, suggestion.arm, [s.arm for s in batch])
            spread += 1
    assert spread >= 2, "the test needs histories with several open arms"


def test_pending_suggestions_without_an_arm_change_no_statistics() -> None:
    state = BanditState(arms={"a": ArmStats(3.0, 1.0)}, total_pulls=3.0)
    same = state.with_pending(Counter(s.arm for s in [Suggestion(knobs={})] if s.arm))
    assert same.to_dict() == state.to_dict()
