"""Thompson sampling over arms with Beta posteriors on fractional (``[0, 1]``) rewards."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from policies.arms import BanditState, argmax_random_tie

__all__ = ["ThompsonSelector", "ThompsonSettings"]


@dataclass(frozen=True)
class ThompsonSettings:
    """Beta prior ``Beta(prior_alpha, prior_beta)`` of every arm's mean reward."""

    prior_alpha: float = 1.0
    prior_beta: float = 1.0

    def __post_init__(self) -> None:
        if not (self.prior_alpha > 0 and self.prior_beta > 0):
            raise ValueError("Thompson prior_alpha and prior_beta must be > 0")


class ThompsonSelector:
    """Samples each open arm's mean from its posterior and plays the largest sample::

        theta_a ~ Beta(alpha_0 + s_a, beta_0 + n_a - s_a),   a_t = argmax_{a open} theta_a

    with ``s_a`` the arm's reward sum and ``n_a`` its pulls (a reward ``r`` in ``[0, 1]``
    counts as ``r`` successes and ``1 - r`` failures, the usual Bernoulli relaxation).
    """

    name: ClassVar[str] = "thompson"

    def __init__(self, *, settings: ThompsonSettings | None = None) -> None:
        self.settings = settings or ThompsonSettings()

    def select(self, state: BanditState, arms: Sequence[str], rng: np.random.Generator) -> str:
        if not arms:
            raise ValueError("Thompson sampling needs at least one open arm")
        samples = []
        for arm in arms:
            stats = state.stats(arm)
            alpha = self.settings.prior_alpha + stats.reward_sum
            beta = self.settings.prior_beta + max(stats.pulls - stats.reward_sum, 0.0)
            samples.append(float(rng.beta(alpha, beta)))
        return arms[argmax_random_tie(samples, rng)]

    def update(self, state: BanditState, arm: str, reward: float) -> None:
        state.record(arm, reward)
