"""Masked UCB over arms, as in KernelBand (UCB1 with an exploration constant ``c``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from policies.arms import BanditState, argmax_random_tie

__all__ = ["UCBSelector", "UCBSettings"]


@dataclass(frozen=True)
class UCBSettings:
    """``c``: weight of the exploration bonus (rewards are relative latency reductions)."""

    c: float = 0.5

    def __post_init__(self) -> None:
        if not self.c >= 0:
            raise ValueError(f"UCB exploration constant c must be >= 0, got {self.c}")


class UCBSelector:
    """Chooses the open arm with the largest upper confidence bound::

        a_t = argmax_{a open}  mu_a + c * sqrt(ln t / n_a)

    where ``mu_a`` is arm ``a``'s mean reward, ``n_a`` its pulls and ``t`` all pulls so far.
    Arms never pulled (``n_a = 0``) come first; ties are broken at random.
    """

    name: ClassVar[str] = "ucb"

    def __init__(self, *, settings: UCBSettings | None = None) -> None:
        self.settings = settings or UCBSettings()

    def index(self, state: BanditState, arm: str) -> float:
        """``mu_a + c * sqrt(ln t / n_a)``; ``inf`` for an arm never pulled."""
        stats = state.stats(arm)
        if stats.pulls <= 0:
            return math.inf
        t = max(state.total_pulls, 1.0)
        return stats.mean + self.settings.c * math.sqrt(math.log(t) / stats.pulls)

    def select(self, state: BanditState, arms: Sequence[str], rng: np.random.Generator) -> str:
        if not arms:
            raise ValueError("UCB needs at least one open arm")
        return arms[argmax_random_tie([self.index(state, a) for a in arms], rng)]

    def update(self, state: BanditState, arm: str, reward: float) -> None:
        state.record(arm, reward)
