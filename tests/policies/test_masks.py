"""Hardware-aware masking: masked arms are never chosen, one arm always stays open."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policies import HierarchicalPolicy, SearchSpace
from policies.arms import BanditState
from policies.masks import MaskSettings, open_arms, saturation_margin
from policies.strategies import STRATEGIES, strategy_by_name
from policies.ucb import UCBSelector
from tests.policies.conftest import Loop

RESOURCE_METRICS = st.fixed_dictionaries(
    {},
    optional={
        "sol_sm": st.floats(0, 1),
        "sol_dram": st.floats(0, 1),
        "sol_l2": st.floats(0, 1),
    },
)


def test_defaults_match_the_design() -> None:
    masks = MaskSettings()
    assert (masks.sm, masks.dram, masks.l2) == (0.80, 0.70, 0.75)
    assert masks.threshold("latency") is None


def test_no_profile_masks_nothing() -> None:
    arms = [(c, s) for c in range(3) for s in STRATEGIES]
    assert open_arms(arms, {}, MaskSettings()) == arms


def test_saturated_target_is_masked_others_open() -> None:
    arms = [(0, s) for s in STRATEGIES]
    kept = open_arms(arms, {0: {"sol_dram": 0.9, "sol_sm": 0.1, "sol_l2": 0.1}}, MaskSettings())
    names = {s.name for _, s in kept}
    assert names == {"tiling", "pipeline", "reordering", "config"}


@settings(max_examples=200, deadline=None, database=None)
@given(
    metrics=st.dictionaries(st.integers(0, 3), RESOURCE_METRICS, max_size=4),
    names=st.lists(st.sampled_from([s.name for s in STRATEGIES]), min_size=1, unique=True),
    clusters=st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True),
    seed=st.integers(0, 1000),
)
def test_masked_arms_are_never_chosen_and_one_stays_open(
    metrics: dict[int, dict[str, float]], names: list[str], clusters: list[int], seed: int
) -> None:
    masks = MaskSettings()
    arms = [(c, strategy_by_name(n)) for c in clusters for n in names]
    kept = open_arms(arms, metrics, masks)
    assert kept, "at least one arm always stays open"
    margins = {(c, s.name): saturation_margin(s, metrics.get(c, {}), masks) for c, s in arms}
    unmasked = [a for a in arms if (m := margins[(a[0], a[1].name)]) is None or m < 0]
    if unmasked:
        assert kept == unmasked
    else:  # everything saturated: only the least saturated arms open
        least = min(m for m in margins.values() if m is not None)
        assert all(margins[(c, s.name)] == least for c, s in kept)
    chosen = UCBSelector().select(
        BanditState(), [f"{c}/{s.name}" for c, s in kept], np.random.default_rng(seed)
    )
    assert chosen in {f"{c}/{s.name}" for c, s in kept}


def test_policy_never_pulls_an_arm_whose_target_is_saturated() -> None:
    """Every candidate saturates DRAM: no DRAM strategy (fusion, access_layout, ...) runs."""
    space = SearchSpace(
        knobs={
            "BLOCK_M": (16, 32, 64, 128, 256),
            "num_warps": (1, 2, 4, 8),
            "num_stages": (1, 2, 3, 4),
            "VEC": (1, 2, 4),
            "use_shmem": (0, 1),
        }
    )
    loop = Loop(
        space,
        HierarchicalPolicy(),
        seed=2,
        metrics=lambda c: {"sol_dram": 0.95, "sol_sm": 0.2, "sol_l2": 0.1},
    )
    loop.run(80)
    strategies = {s.strategy for s in loop.suggestions if s.arm is not None}
    assert strategies, "the bandit made choices"
    dram = {s.name for s in STRATEGIES if s.target == "dram"}
    assert not strategies & dram
    assert strategies <= {"tiling", "pipeline", "reordering", "config"}


def test_policy_keeps_an_arm_open_when_everything_is_saturated() -> None:
    space = SearchSpace(knobs={"BLOCK_M": (16, 32, 64, 128), "num_warps": (1, 2, 4, 8)})
    loop = Loop(
        space,
        HierarchicalPolicy(),
        seed=4,
        metrics=lambda c: {"sol_dram": 0.99, "sol_sm": 0.99, "sol_l2": 0.99},
    )
    loop.run(16)
    assert len(loop.trials) == 16
    assert any(s.arm is not None for s in loop.suggestions)
