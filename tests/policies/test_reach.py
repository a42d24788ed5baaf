"""Issue 24: the reach mask takes a quarter of the best recent gain, not all of it.

The fixture is a real recorded space (``tests/fixtures/convolution_A6000_reach.json.gz``, cut
down from the benchdata convolution_A6000 space: ``block_size_x`` 128, ``use_padding`` 0,
every value of the other knobs). A cluster's parent stays open while
``t_parent * (1 - reach_scale * r_max) < t_best``, ``r_max`` the best reward of the last 20
pulls. Early in a search that reward comes from a move of a slow parent (a gain of a half or
more), so with ``reach_scale`` 1.0 almost every cluster stays open and about a quarter of
evaluations 11-25 move parents that are not the incumbent (112 of 480 pulls over 32 seeds
when this was written; 63 with 0.25). Those are the evaluations the climb from the
incumbent to the optimum lacks: at 25 evaluations 21 of 32 seeds were at the optimum with
1.0 (mean 0.942 of it), 28 of 32 with 0.25 (mean 0.996).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from policies import POLICIES, HierarchicalPolicy, HierarchicalSettings
from tests.policies.conftest import fractions_at

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "convolution_A6000_reach.json.gz"
SEEDS = range(32)
BUDGET = 25


def test_the_default_reach_bound_takes_a_quarter_of_the_best_recent_gain() -> None:
    assert HierarchicalPolicy.default_settings.reach_scale == 0.25
    assert POLICIES["hierarchical_reach1"].default_settings.reach_scale == 1.0


def test_with_the_full_gain_fewer_seeds_reach_the_optimum_at_25() -> None:
    before = fractions_at(FIXTURE, BUDGET, SEEDS, HierarchicalSettings(reach_scale=1.0))
    default = fractions_at(FIXTURE, BUDGET, SEEDS)
    # When written: 21 of 32 at the optimum with reach_scale 1.0 (mean 0.942), 28 of 32 with
    # the default (mean 0.996).
    assert sum(f >= 0.999 for f in before) <= 23, before
    assert sum(f >= 0.999 for f in default) >= 26, default
    assert np.mean(default) >= np.mean(before) + 0.02


def test_reach_scale_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="reach_scale"):
        HierarchicalSettings(reach_scale=-0.1)
