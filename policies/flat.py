"""Flat bandits over strategies: KernelBand's arms without the hierarchy (the ablations), and
variants of the hierarchical policy's escape arms (issue 24).

Each arm is a strategy; every move starts from the incumbent (the fastest candidate so
far), there is no clustering and no level-2 parent choice. When the incumbent has no free
neighbour for any strategy, the proposer widens and then samples at random until something
beats the incumbent. The three selectors are those of :mod:`policies.ucb`,
:mod:`policies.thompson` and :mod:`policies.discounted`.
"""

from __future__ import annotations

from typing import ClassVar

from policies.crossover import CrossoverSettings
from policies.hierarchical import HierarchicalPolicy, HierarchicalSettings

__all__ = [
    "CrossoverHierarchicalPolicy",
    "DiscountedUCBPolicy",
    "FlatGatedModelArmHierarchicalPolicy",
    "ModelArmHierarchicalPolicy",
    "ThompsonPolicy",
    "UCBPolicy",
    "UnclusteredHierarchicalPolicy",
    "WideReachHierarchicalPolicy",
]


def _flat(selector: str) -> HierarchicalSettings:
    # Moves from the incumbent only, without the model arm: the flat bandits as measured.
    return HierarchicalSettings(
        selector=selector, clustering=None, parent="incumbent", model="none", flat_gate=0.0
    )


class UCBPolicy(HierarchicalPolicy):
    """Masked UCB over strategies, ``mu + c * sqrt(ln t / n)``, moving the incumbent."""

    name: ClassVar[str] = "ucb"
    default_settings: ClassVar[HierarchicalSettings] = _flat("ucb")


class ThompsonPolicy(HierarchicalPolicy):
    """Thompson sampling over strategies (Beta posteriors), moving the incumbent."""

    name: ClassVar[str] = "thompson"
    default_settings: ClassVar[HierarchicalSettings] = _flat("thompson")


class DiscountedUCBPolicy(HierarchicalPolicy):
    """Discounted UCB over strategies (non-stationary rewards), moving the incumbent."""

    name: ClassVar[str] = "discounted_ucb"
    default_settings: ClassVar[HierarchicalSettings] = _flat("discounted_ucb")


class UnclusteredHierarchicalPolicy(HierarchicalPolicy):
    """The hierarchical policy with a single cluster: strategy arms plus level-2 parents."""

    name: ClassVar[str] = "hierarchical_nocluster"
    default_settings: ClassVar[HierarchicalSettings] = HierarchicalSettings(clustering=None)


class ModelArmHierarchicalPolicy(HierarchicalPolicy):
    """The hierarchical policy with the Gaussian-process model arm open from the first
    decision on, without the flatness gate (issue 24)."""

    name: ClassVar[str] = "hierarchical_gp"
    default_settings: ClassVar[HierarchicalSettings] = HierarchicalSettings(
        model="gp", flat_gate=0.0
    )


class FlatGatedModelArmHierarchicalPolicy(HierarchicalPolicy):
    """The GP model arm opened only while the incumbent sits on a plateau: the default
    policy's settings since the twelfth session (issue 24); the name stays for campaigns
    stored under it."""

    name: ClassVar[str] = "hierarchical_flat_gp"
    default_settings: ClassVar[HierarchicalSettings] = HierarchicalSettings(
        model="gp", flat_gate=0.5, flat_tolerance=0.02
    )


class CrossoverHierarchicalPolicy(HierarchicalPolicy):
    """The hierarchical policy with the crossover arm (opt-in, issue 24): children of two of
    the 8 fastest configurations, uniform crossover, the child its neighbours vouch for best
    (``HierarchicalSettings.crossover``, :mod:`policies.crossover`)."""

    name: ClassVar[str] = "hierarchical_crossover"
    default_settings: ClassVar[HierarchicalSettings] = HierarchicalSettings(
        crossover=CrossoverSettings(units="uniform"), model="none", flat_gate=0.0
    )


class WideReachHierarchicalPolicy(HierarchicalPolicy):
    """The default policy with the reach mask's bound it had until 2026-11-29 (issue 24): a
    parent stays open while the best recent gain, at face value, could take it past the
    incumbent (``reach_scale`` 1.0; the default is 0.25). For paired benches."""

    name: ClassVar[str] = "hierarchical_reach1"
    default_settings: ClassVar[HierarchicalSettings] = HierarchicalSettings(reach_scale=1.0)
