"""The arm selectors implement their equations; their state round-trips."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.arms import BanditState, clipped_reward
from policies.discounted import DiscountedUCBSelector, DiscountedUCBSettings
from policies.thompson import ThompsonSelector
from policies.ucb import UCBSelector, UCBSettings


def test_reward_is_relative_latency_reduction_clipped_at_zero() -> None:
    assert clipped_reward(2.0, 1.5) == pytest.approx(0.25)
    assert clipped_reward(2.0, 3.0) == 0.0
    assert clipped_reward(2.0, None) == 0.0  # a failure: a pull without reward
    assert clipped_reward(None, 1.0) == 0.0


def test_ucb_index_is_mean_plus_bonus() -> None:
    state = BanditState()
    selector = UCBSelector(settings=UCBSettings(c=0.7))
    for arm, rewards in {"a": [0.1, 0.3], "b": [0.0, 0.0, 0.2]}.items():
        for r in rewards:
            selector.update(state, arm, r)
    t = 5
    assert selector.index(state, "a") == pytest.approx(0.2 + 0.7 * math.sqrt(math.log(t) / 2))
    expected_b = 0.2 / 3 + 0.7 * math.sqrt(math.log(t) / 3)
    assert selector.index(state, "b") == pytest.approx(expected_b)
    assert selector.index(state, "never") == math.inf


def test_ucb_tries_unpulled_arms_first() -> None:
    state = BanditState()
    selector = UCBSelector()
    rng = np.random.default_rng(0)
    pulled = set()
    for _ in range(4):
        arm = selector.select(state, ["a", "b", "c", "d"], rng)
        assert arm not in pulled
        pulled.add(arm)
        selector.update(state, arm, 0.0)


def test_thompson_prefers_the_arm_that_paid() -> None:
    state = BanditState()
    selector = ThompsonSelector()
    for _ in range(30):
        selector.update(state, "good", 0.9)
        selector.update(state, "bad", 0.0)
    rng = np.random.default_rng(1)
    picks = [selector.select(state, ["good", "bad"], rng) for _ in range(50)]
    assert picks.count("good") > 45


def test_discounted_statistics_fade() -> None:
    state = BanditState()
    selector = DiscountedUCBSelector(settings=DiscountedUCBSettings(gamma=0.5, c=0.0))
    selector.update(state, "a", 1.0)
    selector.update(state, "b", 0.0)
    selector.update(state, "b", 0.0)
    # a: one pull, discounted twice: N = 0.25, S = 0.25
    assert state.arms["a"].pulls == pytest.approx(0.25)
    assert state.arms["a"].reward_sum == pytest.approx(0.25)
    assert state.arms["b"].pulls == pytest.approx(1.5)
    assert state.total_pulls == pytest.approx(1.75)


@settings(max_examples=50, deadline=None, database=None)
@given(
    pulls=st.lists(st.tuples(st.sampled_from(["a", "b", "0/tiling"]), st.floats(0, 1)), max_size=30)
)
def test_bandit_state_round_trips(pulls: list[tuple[str, float]]) -> None:
    state = BanditState()
    for arm, reward in pulls:
        state.record(arm, reward)
    restored = BanditState.from_dict(state.to_dict())
    assert restored == state
    assert restored.to_dict() == state.to_dict()


@pytest.mark.parametrize("selector", [UCBSelector(), ThompsonSelector(), DiscountedUCBSelector()])
def test_selectors_refuse_an_empty_arm_list(selector: UCBSelector) -> None:
    with pytest.raises(ValueError, match="at least one open arm"):
        selector.select(BanditState(), [], np.random.default_rng(0))


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError):
        UCBSettings(c=-1)
    with pytest.raises(ValueError):
        DiscountedUCBSettings(gamma=0)
