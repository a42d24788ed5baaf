"""The optional policy hooks the campaign calls on every policy (policies/base.py): a policy
without clusters, profiles or LLM arms takes them as no-ops and suggests exactly as before."""

from __future__ import annotations

import pytest

from policies import SearchSpace, make_policy
from policies.strategies import STRATEGIES
from tests.policies.conftest import ALL_POLICIES, Loop

SPACE = {"BLOCK": (16, 32, 64, 128), "num_warps": (1, 2, 4, 8)}


@pytest.mark.parametrize("name", ALL_POLICIES)
def test_every_policy_takes_the_hooks(name: str) -> None:
    loop = Loop(SearchSpace(knobs=SPACE), make_policy(name), seed=2)
    loop.run(6)
    policy = loop.policy
    policy.update_metrics({t.candidate_id: {"sm": 0.5} for t in loop.trials})
    reps = policy.representatives()
    assert set(reps.values()) <= {t.candidate_id for t in loop.trials}
    policy.set_llm_strategies(())  # no LLM arm open
    loop.run(4)  # still suggests after the hooks
    keys = loop.keys()
    assert len(keys) == len(set(keys)) == 11


@pytest.mark.parametrize("name", ["random", "simulated_annealing", "greedy_ls"])
def test_the_no_op_hooks_change_nothing(name: str) -> None:
    """Same seed, same choices, with or without the hooks called in between."""
    plain = Loop(SearchSpace(knobs=SPACE), make_policy(name), seed=4)
    hooked = Loop(SearchSpace(knobs=SPACE), make_policy(name), seed=4)
    plain.run(8)
    hooked.run(4)
    hooked.policy.update_metrics({t.candidate_id: {"dram": 0.9} for t in hooked.trials})
    hooked.policy.set_llm_strategies(STRATEGIES[:2])
    assert hooked.policy.representatives() == {} and not hooked.policy.llm_arms
    hooked.run(4)
    assert plain.keys() == hooked.keys()


def test_the_hierarchical_bandit_has_llm_arms() -> None:
    assert make_policy("hierarchical").llm_arms
