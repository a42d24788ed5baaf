"""Hardware-aware masking (KernelBand): skip strategies whose target resource is saturated.

A strategy is masked for a cluster when the cluster's representative already uses its
target resource at or above the threshold, as a speed-of-light (SOL) fraction in ``[0, 1]``
read from ``Trial.metrics`` (``sol_sm``, ``sol_dram``, ``sol_l2``)::

    masked(cluster, s) = SOL_{target(s)}(representative(cluster)) >= threshold_{target(s)}

Relieving a resource that is not the bottleneck cannot help much, so those arms are not
worth a pull. Strategies that target plain ``latency`` (``config``) are never masked, nothing
is masked without a profile, and at least one arm always stays open: when every arm would be
masked, the least saturated ones (smallest ``SOL - threshold``) are opened.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from policies.strategies import Strategy

__all__ = ["METRIC_OF", "MaskSettings", "open_arms", "saturation_margin"]

#: The ``Trial.metrics`` key holding each resource's SOL fraction.
METRIC_OF = {"sm": "sol_sm", "dram": "sol_dram", "l2": "sol_l2"}

C = TypeVar("C", bound=Hashable)


@dataclass(frozen=True)
class MaskSettings:
    """Saturation thresholds (SOL fractions) per resource; KernelBand's defaults."""

    sm: float = 0.80
    dram: float = 0.70
    l2: float = 0.75

    def __post_init__(self) -> None:
        for name in ("sm", "dram", "l2"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"mask threshold {name} must be in (0, 1], got {value}")

    def threshold(self, resource: str) -> float | None:
        """The threshold of a resource; ``None`` for ``latency`` (never masked)."""
        return {"sm": self.sm, "dram": self.dram, "l2": self.l2}.get(resource)


def saturation_margin(
    strategy: Strategy, metrics: Mapping[str, float], settings: MaskSettings
) -> float | None:
    """``SOL - threshold`` of the strategy's target (``>= 0``: masked); ``None``: unknown."""
    threshold = settings.threshold(strategy.target)
    if threshold is None:
        return None
    value = metrics.get(METRIC_OF[strategy.target])
    if value is None:
        return None
    return float(value) - threshold


def open_arms(
    arms: Sequence[tuple[C, Strategy]],
    representative_metrics: Mapping[C, Mapping[str, float]],
    settings: MaskSettings,
) -> list[tuple[C, Strategy]]:
    """The arms ``(cluster, strategy)`` that are not masked, in their given order.

    ``representative_metrics`` maps a cluster to what is known of its representative; a
    cluster absent from it has no profile and none of its arms is masked. Never empty when
    ``arms`` is not: if every arm is masked, the least saturated ones stay open.
    """
    margins: list[float | None] = [
        saturation_margin(strategy, representative_metrics.get(cluster, {}), settings)
        for cluster, strategy in arms
    ]
    kept = [arm for arm, m in zip(arms, margins) if m is None or m < 0]
    if kept or not arms:
        return kept
    least = min(m for m in margins if m is not None)
    return [arm for arm, m in zip(arms, margins) if m == least]
