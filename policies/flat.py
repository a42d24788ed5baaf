"""Flat bandits over strategies: KernelBand's arms without the hierarchy (the ablations), and
the hierarchical policy with its opt-in model arm.

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
]


def _flat(selector: str) -> HierarchicalSettings:
    return HierarchicalSettings(selector=selector, clustering=None, parent="incumbent")


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
    """The hierarchical policy with the Gaussian-process model arm (opt-in, issue 24)."""

    name: ClassVar[str] = "hierarchical_gp"
    default_settings: ClassVar[HierarchicalSettings] = HierarchicalSettings(model="gp")


class FlatGatedModelArmHierarchicalPolicy(HierarchicalPolicy):
    """The GP model arm opened only while the incumbent sits on a plateau (opt-in, issue 24:
    ``HierarchicalSettings.flat_gate``)."""

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
        crossover=CrossoverSettings(units="uniform")
    )
