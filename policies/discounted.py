"""Discounted UCB (Garivier & Moulines, 2008) for rewards that drift as tuning progresses."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from policies.arms import ArmStats, BanditState, argmax_random_tie

__all__ = ["DiscountedUCBSelector", "DiscountedUCBSettings"]


@dataclass(frozen=True)
class DiscountedUCBSettings:
    """``gamma``: per-pull discount (memory of about ``1 / (1 - gamma)`` pulls); ``c``: bonus."""

    gamma: float = 0.95
    c: float = 0.5

    def __post_init__(self) -> None:
        if not 0 < self.gamma <= 1:
            raise ValueError(f"discount gamma must be in (0, 1], got {self.gamma}")
        if not self.c >= 0:
            raise ValueError(f"exploration constant c must be >= 0, got {self.c}")


class DiscountedUCBSelector:
    """UCB on exponentially discounted statistics::

        N_a(t) = sum_{s<=t} gamma^(t-s) 1[a_s = a]          (discounted pulls)
        S_a(t) = sum_{s<=t} gamma^(t-s) r_s 1[a_s = a]      (discounted reward sum)
        a_t = argmax_{a open}  S_a / N_a + c * sqrt(ln n_t / N_a),   n_t = sum_a N_a(t)

    Old rewards fade, so an arm that stopped paying off (its knob group converged) loses its
    lead, and one neglected for long regains exploration bonus. ``gamma = 1`` is plain UCB.
    """

    name: ClassVar[str] = "discounted_ucb"

    def __init__(self, *, settings: DiscountedUCBSettings | None = None) -> None:
        self.settings = settings or DiscountedUCBSettings()

    def index(self, state: BanditState, arm: str) -> float:
        stats = state.stats(arm)
        if stats.pulls <= 1e-12:
            return math.inf
        n = max(state.total_pulls, 1.0)
        bonus = math.sqrt(max(math.log(n), 0.0) / stats.pulls)
        return stats.mean + self.settings.c * bonus

    def select(self, state: BanditState, arms: Sequence[str], rng: np.random.Generator) -> str:
        if not arms:
            raise ValueError("discounted UCB needs at least one open arm")
        return arms[argmax_random_tie([self.index(state, a) for a in arms], rng)]

    def update(self, state: BanditState, arm: str, reward: float) -> None:
        gamma = self.settings.gamma
        for stats in state.arms.values():
            stats.pulls *= gamma
            stats.reward_sum *= gamma
        stats = state.arms.setdefault(arm, ArmStats())
        stats.pulls += 1.0
        stats.reward_sum += reward
        state.total_pulls = sum(s.pulls for s in state.arms.values())
