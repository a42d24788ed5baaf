"""LLM arms in the hierarchical bandit: offered, masked, chosen, credited."""

from __future__ import annotations

import numpy as np

from policies import HierarchicalPolicy, SearchSpace, Trial, UCBPolicy
from policies.strategies import llm_base_strategy, llm_strategy_name, strategy_by_name
from tuned.llm.proposer import LLM_STRATEGIES

SPACE = SearchSpace(knobs={"BLOCK": (64, 128, 256), "num_warps": (1, 2)})


def history(n: int) -> list[Trial]:
    """``n`` successful trials; BLOCK=256 is fastest."""
    out = [Trial("base", {"BLOCK": 128, "num_warps": 1}, "ok", 20.0, strategy="original")]
    for i, (b, w) in enumerate([(64, 1), (64, 2), (128, 2), (256, 1), (256, 2)][: n - 1]):
        out.append(Trial(f"c{i}", {"BLOCK": b, "num_warps": w}, "ok", 1000.0 / b + w))
    return out


def test_names() -> None:
    assert llm_strategy_name("tiling") == "llm:tiling"
    assert llm_base_strategy("llm:tiling") == "tiling" and llm_base_strategy("tiling") is None
    assert "config" not in {s.name for s in LLM_STRATEGIES}


def test_an_exhausted_space_goes_on_with_llm_arms_only_when_offered() -> None:
    trials = history(6)  # the whole space
    rng = np.random.default_rng(0)
    policy = UCBPolicy()  # flat: the parent is the incumbent
    assert policy.suggest(SPACE, trials, rng) is None  # no LLM: finished
    policy.set_llm_strategies(LLM_STRATEGIES)
    s = policy.suggest(SPACE, trials, rng)
    assert s is not None and s.strategy.startswith("llm:")
    assert s.arm is not None and s.arm.endswith(s.strategy)
    # The parent is the fastest candidate, and the suggestion keeps its knobs.
    assert s.parent_id == "c3" and dict(s.knobs) == {"BLOCK": 256, "num_warps": 1}
    assert s.parent_time_s == trials[4].time_s
    # A failed rewrite is a pull with reward 0; a faster one is rewarded.
    policy.observe(s, Trial("", s.knobs, "no_candidate", None, strategy=s.strategy))
    assert policy.state.bandit.stats(s.arm).pulls == 1.0
    assert policy.state.bandit.stats(s.arm).reward_sum == 0.0
    s2 = policy.suggest(SPACE, trials, rng)
    assert s2 is not None and s2.arm is not None
    policy.observe(s2, Trial("x", s2.knobs, "ok", (s2.parent_time_s or 1.0) / 2))
    assert policy.state.bandit.stats(s2.arm).reward_sum == 0.5
    # Masked again (budget spent): nothing left.
    policy.set_llm_strategies(())
    assert policy.suggest(SPACE, trials, rng) is None
    # The arm statistics survive a restart.
    restored = UCBPolicy.from_dict(policy.to_dict())
    assert restored.state.bandit.stats(s2.arm).reward_sum == 0.5


def test_hierarchical_llm_arms_take_their_clusters_fastest_parent() -> None:
    trials = history(6)
    policy = HierarchicalPolicy()
    policy.set_llm_strategies(LLM_STRATEGIES)
    rng = np.random.default_rng(3)
    parents = set()
    for _ in range(12):
        s = policy.suggest(SPACE, trials, rng)
        assert s is not None and s.strategy.startswith("llm:")
        parents.add(s.parent_id)
        policy.observe(s, Trial("", s.knobs, "no_candidate", None, strategy=s.strategy))
    assert "c3" in parents  # the fastest overall heads its cluster
    assert parents <= {t.candidate_id for t in trials}


def test_llm_arms_compete_with_parametric_arms_and_are_masked_by_saturation() -> None:
    space = SearchSpace(
        knobs={"BLOCK": tuple(2**i for i in range(4, 14)), "num_warps": (1, 2, 4, 8)}
    )
    profile = {"sol_dram": 0.95, "sol_sm": 0.1, "sol_l2": 0.1}
    trials = [
        Trial(f"c{i}", {"BLOCK": 2 ** (4 + i % 10), "num_warps": 2 ** (i % 4)}, "ok",
              10.0 + i, metrics=profile)
        for i in range(12)
    ]  # fmt: skip
    policy = UCBPolicy()
    policy.set_llm_strategies([strategy_by_name(n) for n in ("vectorization", "pipeline")])
    seen = set()
    rng = np.random.default_rng(1)
    for _ in range(40):
        s = policy.suggest(space, trials, rng)
        assert s is not None
        seen.add(s.strategy)
        policy.observe(s, Trial("", s.knobs, "failed", None, strategy=s.strategy))
    # DRAM is saturated: the vectorization rewrite (a DRAM strategy) is never offered.
    assert "llm:pipeline" in seen and "llm:vectorization" not in seen
    assert seen - {"llm:pipeline"}  # parametric arms are pulled too
