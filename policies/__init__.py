"""Search policies: which configuration to evaluate next. A library: never imports ``tuned``.

``POLICIES`` maps each name to its class; :data:`DEFAULT_POLICY` is the one the daemon
uses unless configured otherwise.

===========================  ==============================================================
name                         policy
===========================  ==============================================================
``hierarchical``             KernelBand: (runtime cluster x strategy) masked UCB, then a
                             parent inside the cluster, then a parametric move; plus a
                             model arm (a Gaussian process of the whole space,
                             :mod:`policies.surrogate`) open only while the incumbent's
                             evaluated one-knob neighbours are a plateau (default)
``hierarchical_nocluster``   the same with a single cluster (ablation)
``hierarchical_gp``          the same with the model arm open from the first decision on
``hierarchical_flat_gp``     the same as ``hierarchical`` (its settings before they became
                             the default; the name stays for campaigns stored under it)
``hierarchical_crossover``   without the model arm, with a crossover arm: children of two
                             of the fastest configurations (:mod:`policies.crossover`)
``hierarchical_reach1``      the default with the reach bound it had until 2026-11-29
                             (``reach_scale`` 1.0; ablation, issue 24)
``ucb``                      flat masked UCB over strategies, moves from the incumbent
                             (the flat bandits have no model arm)
``thompson``                 flat Thompson sampling over strategies
``discounted_ucb``           flat discounted UCB over strategies (non-stationary rewards)
``random``                   uniform random search without replacement (the floor)
``simulated_annealing``      Kernel Tuner-style simulated annealing (baseline)
``greedy_ls``                Kernel Tuner-style greedy multi-start local search (baseline)
===========================  ==============================================================
"""

from __future__ import annotations

from typing import Any

from policies.annealing import SimulatedAnnealingPolicy
from policies.base import Config, KnobValue, Policy, SearchSpace, Suggestion, Trial, config_key
from policies.batch import propose_batch
from policies.flat import (
    CrossoverHierarchicalPolicy,
    DiscountedUCBPolicy,
    FlatGatedModelArmHierarchicalPolicy,
    ModelArmHierarchicalPolicy,
    ThompsonPolicy,
    UCBPolicy,
    UnclusteredHierarchicalPolicy,
    WideReachHierarchicalPolicy,
)
from policies.hierarchical import HierarchicalPolicy, HierarchicalSettings, HierarchicalState
from policies.local_search import GreedyLocalSearchPolicy
from policies.random_search import RandomPolicy

__all__ = [
    "DEFAULT_POLICY",
    "POLICIES",
    "Config",
    "CrossoverHierarchicalPolicy",
    "DiscountedUCBPolicy",
    "FlatGatedModelArmHierarchicalPolicy",
    "GreedyLocalSearchPolicy",
    "HierarchicalPolicy",
    "HierarchicalSettings",
    "HierarchicalState",
    "KnobValue",
    "ModelArmHierarchicalPolicy",
    "Policy",
    "RandomPolicy",
    "SearchSpace",
    "SimulatedAnnealingPolicy",
    "Suggestion",
    "ThompsonPolicy",
    "Trial",
    "UCBPolicy",
    "UnclusteredHierarchicalPolicy",
    "WideReachHierarchicalPolicy",
    "config_key",
    "make_policy",
    "propose_batch",
    "restore_policy",
]

#: Name -> class. Every policy has ``from_dict(state)`` as a classmethod.
POLICIES: dict[str, Any] = {
    cls.name: cls
    for cls in (
        HierarchicalPolicy,
        UnclusteredHierarchicalPolicy,
        ModelArmHierarchicalPolicy,
        FlatGatedModelArmHierarchicalPolicy,
        CrossoverHierarchicalPolicy,
        WideReachHierarchicalPolicy,
        UCBPolicy,
        ThompsonPolicy,
        DiscountedUCBPolicy,
        RandomPolicy,
        SimulatedAnnealingPolicy,
        GreedyLocalSearchPolicy,
    )
}

#: The policy the daemon uses unless configured otherwise.
DEFAULT_POLICY = HierarchicalPolicy.name


def _lookup(name: str) -> Any:
    try:
        return POLICIES[name]
    except KeyError:
        valid = ", ".join(sorted(POLICIES))
        raise ValueError(f"unknown policy {name!r}; valid policies: {valid}") from None


def make_policy(name: str) -> Policy:
    """A new policy with its default settings."""
    policy: Policy = _lookup(name)()
    return policy


def restore_policy(name: str, state: dict[str, Any]) -> Policy:
    """A policy restored from ``to_dict()`` output."""
    policy: Policy = _lookup(name).from_dict(state)
    return policy
