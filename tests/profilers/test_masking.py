"""Masking decisions made from the captured H100 profiles: from the CSV to the open arms, and
through a real hierarchical policy whose profiles arrive after the trials (as in the loop)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from policies import HierarchicalPolicy, HierarchicalSettings, SearchSpace, Trial
from policies.masks import MaskSettings, open_arms
from policies.strategies import STRATEGIES
from tests.profilers.test_parser import profile_of

ALL = {s.name for s in STRATEGIES}


DEFAULTS = MaskSettings()


def _open(metrics: dict[str, float], settings: MaskSettings = DEFAULTS) -> set[str]:
    arms = [(0, s) for s in STRATEGIES]
    return {s.name for _, s in open_arms(arms, {0: metrics}, settings)}


@pytest.mark.parametrize(
    ("kernel", "masked"),
    [
        # DRAM 82 % >= 70 % and L2 82 % >= 75 %: only the SM strategies and config stay.
        ("vector_add", {"vectorization", "fusion", "access_layout", "tiling"}),
        ("swiglu", {"vectorization", "fusion", "access_layout", "tiling"}),
        # The 64x64 matmul baseline keeps L2 busy (88 %): retiling for L2 reuse is masked.
        ("matmul", {"tiling"}),
        ("rms_norm", {"tiling"}),  # L2 76 %
        # Nothing saturated (SM 71 %, DRAM 58 %, L2 74 %): nothing masked.
        ("softmax", set()),
        ("layer_norm", set()),
    ],
)
def test_default_thresholds_on_the_captured_profiles(kernel: str, masked: set[str]) -> None:
    assert _open(profile_of(kernel).metrics()) == ALL - masked


def test_thresholds_are_configurable() -> None:
    softmax = profile_of("softmax").metrics()
    assert _open(softmax, MaskSettings(sm=0.7)) == ALL - {"pipeline", "reordering"}
    assert _open(profile_of("vector_add").metrics(), MaskSettings(dram=0.9, l2=0.9)) == ALL


def test_masks_are_per_cluster_and_never_close_everything() -> None:
    arms = [(c, s) for c in (0, 1) for s in STRATEGIES if s.name != "config"]
    representative = {0: profile_of("vector_add").metrics(), 1: profile_of("softmax").metrics()}
    kept = {(c, s.name) for c, s in open_arms(arms, representative, MaskSettings())}
    assert (0, "tiling") not in kept and (1, "tiling") in kept
    assert (0, "pipeline") in kept
    everything = MaskSettings(sm=0.01, dram=0.01, l2=0.01)
    assert open_arms(arms, representative, everything)  # the least saturated stay open


def _time(knobs: dict[str, object]) -> float:
    """A smooth synthetic landscape over the knobs of the example norms."""
    block = math.log2(float(knobs["BLOCK_SIZE"]))  # type: ignore[arg-type]
    warps = math.log2(float(knobs["num_warps"]))  # type: ignore[arg-type]
    return 1e-4 * (
        1
        + 0.1 * (block - 10) ** 2
        + 0.05 * (warps - 2) ** 2
        + 0.01
        * float(
            knobs["num_stages"]  # type: ignore[arg-type]
        )
    )


def _strategies_pulled(profile: dict[str, float] | None, seed: int) -> list[str]:
    space = SearchSpace(
        knobs={
            "BLOCK_SIZE": (256, 512, 1024, 2048, 4096, 8192),
            "num_warps": (2, 4, 8, 16),
            "num_stages": (1, 2, 3, 4),
        }
    )
    policy = HierarchicalPolicy(settings=HierarchicalSettings(initial_random=8))
    rng = np.random.default_rng(seed)
    trials: list[Trial] = []
    pulled: list[str] = []
    for step in range(40):
        # As the campaign does: every trial profiled so far carries its profile, and the
        # policy's digest of earlier trials is brought up to date first.
        if profile is not None:
            policy.update_metrics({t.candidate_id: profile for t in trials})
        known = [dataclasses.replace(t, metrics=profile or {}) for t in trials]
        suggestion = policy.suggest(space, known, rng)
        if suggestion is None:
            break
        knobs = dict(suggestion.knobs)
        trial = Trial(
            candidate_id=f"c{step}",
            knobs=knobs,
            outcome="ok",
            time_s=_time(knobs),
            strategy=suggestion.strategy,
        )
        policy.observe(suggestion, trial)
        trials.append(trial)
        if suggestion.arm is not None:
            pulled.append(suggestion.strategy)
    return pulled


def test_a_saturated_l2_closes_tiling_in_a_running_policy() -> None:
    """With vector_add's profile (L2 82 %) on every representative, the policy never pulls
    tiling (target L2); without profiles it does. Knobs: BLOCK_SIZE is tiling's, warps and
    stages are pipeline's (SM 8 %: open); config is never masked."""
    profile = profile_of("vector_add").metrics()
    masked = [s for seed in range(3) for s in _strategies_pulled(profile, seed)]
    unmasked = [s for seed in range(3) for s in _strategies_pulled(None, seed)]
    assert masked and "tiling" not in masked
    assert "tiling" in unmasked


def test_profiles_taken_after_a_trial_was_read_reach_the_policy() -> None:
    """The policy digests history incrementally; a profile taken later (a representative
    profiled after re-clustering) must still reach it, without overriding compile metadata."""
    profile = profile_of("vector_add").metrics()
    space = SearchSpace(knobs={"BLOCK_SIZE": (256, 512, 1024), "num_warps": (2, 4)})
    policy = HierarchicalPolicy(settings=HierarchicalSettings(initial_random=2))
    trials = [
        Trial(
            candidate_id=f"c{i}", knobs=k, outcome="ok", time_s=1.0 + i, metrics={"registers": 99.0}
        )
        for i, k in enumerate(
            [{"BLOCK_SIZE": 256, "num_warps": 2}, {"BLOCK_SIZE": 512, "num_warps": 4}]
        )
    ]
    assert policy.suggest(space, trials, np.random.default_rng(0)) is not None
    policy.update_metrics({"c0": profile})
    assert policy._log is not None
    seen = policy._log.by_id["c0"].metrics
    assert seen["sol_l2"] == profile["sol_l2"] and seen["registers"] == 99.0
    assert "sol_l2" not in policy._log.by_id["c1"].metrics
    assert policy._profiled == {"sol_sm", "sol_dram", "sol_l2"}
