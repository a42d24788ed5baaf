"""Bandit state (per-arm statistics) and the protocol of the arm selectors that update it.

State and algorithm are kept apart, as in KernelBand: :class:`BanditState` is a plain,
JSON-safe dataclass that the daemon persists after every update; a selector
(:class:`~policies.ucb.UCBSelector`, :class:`~policies.thompson.ThompsonSelector`,
:class:`~policies.discounted.DiscountedUCBSelector`) reads it to choose an arm and writes it
on :meth:`ArmSelector.update`. Arms are named by strings (for the hierarchical policy
``"<cluster>/<strategy>"``). Masking is the caller's job: ``select`` only ever sees the arms
that are open, and there is always at least one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

__all__ = ["ArmSelector", "ArmStats", "BanditState", "clipped_reward"]


def clipped_reward(parent_time_s: float | None, child_time_s: float | None) -> float:
    """KernelBand's reward: the child's relative latency reduction versus its parent.

    ``r = max(0, (t_parent - t_child) / t_parent)``, in ``[0, 1)``. A failed child
    (``child_time_s is None``) or an unknown parent time gives ``0``: a pull without reward.
    """
    if parent_time_s is None or child_time_s is None or parent_time_s <= 0:
        return 0.0
    return max(0.0, (parent_time_s - child_time_s) / parent_time_s)


@dataclass
class ArmStats:
    """Pull count ``n`` and reward sum ``s`` of one arm (both discounted by D-UCB)."""

    pulls: float = 0.0
    reward_sum: float = 0.0

    @property
    def mean(self) -> float:
        return self.reward_sum / self.pulls if self.pulls > 0 else 0.0


@dataclass
class BanditState:
    """Statistics of every arm pulled so far, and the total pull count ``t``."""

    arms: dict[str, ArmStats] = field(default_factory=dict)
    total_pulls: float = 0.0

    def stats(self, arm: str) -> ArmStats:
        """The arm's statistics (zero for an arm never pulled; not inserted)."""
        return self.arms.get(arm) or ArmStats()

    def record(self, arm: str, reward: float) -> None:
        """One more pull of ``arm`` with ``reward`` (undiscounted)."""
        stats = self.arms.setdefault(arm, ArmStats())
        stats.pulls += 1.0
        stats.reward_sum += reward
        self.total_pulls += 1.0

    def with_pending(self, pending: Mapping[str, int]) -> BanditState:
        """A copy in which each arm's suggestions still being evaluated count as pulls with
        reward 0 (the batched-bandit correction; this state is left as it is).

        With ``p_a`` pulls of arm ``a`` in flight and ``P = sum_a p_a``::

            n'_a = n_a + p_a,   s'_a = s_a,   t' = t + P

        so UCB's index becomes ``s_a / (n_a + p_a) + c * sqrt(ln(t + P) / (n_a + p_a))`` and
        Thompson's posterior ``Beta(alpha_0 + s_a, beta_0 + n_a + p_a - s_a)``: every pending
        pull lowers the arm's mean and its exploration bonus until its result is known, so a
        batch spreads over the arms instead of piling onto the one that led when it started.
        A pending pull counts as a failure would, pessimistically ("constant liar" with the
        worst reward); its real reward replaces it once observed.
        """
        arms = {a: ArmStats(s.pulls, s.reward_sum) for a, s in self.arms.items()}
        total = self.total_pulls
        for arm, count in pending.items():
            if count > 0:
                stats = arms.setdefault(arm, ArmStats())
                stats.pulls += count
                total += count
        return BanditState(arms=arms, total_pulls=total)

    def to_dict(self) -> dict[str, Any]:
        return {
            "arms": {a: [s.pulls, s.reward_sum] for a, s in sorted(self.arms.items())},
            "total_pulls": self.total_pulls,
        }

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> BanditState:
        arms = {
            str(a): ArmStats(float(v[0]), float(v[1])) for a, v in state.get("arms", {}).items()
        }
        return cls(arms=arms, total_pulls=float(state.get("total_pulls", 0.0)))


class ArmSelector(Protocol):
    """Chooses one of the open arms and learns from the reward of each pull."""

    name: ClassVar[str]

    def select(self, state: BanditState, arms: Sequence[str], rng: np.random.Generator) -> str:
        """One of ``arms`` (non-empty: the open arms, masks already applied)."""
        ...

    def update(self, state: BanditState, arm: str, reward: float) -> None:
        """Record a pull of ``arm`` with ``reward`` in ``[0, 1]``."""
        ...


def argmax_random_tie(scores: Sequence[float], rng: np.random.Generator) -> int:
    """Index of the largest score, ties broken uniformly at random."""
    values = np.asarray(scores, dtype=float)
    best = np.flatnonzero(values == values.max())
    return int(best[0]) if len(best) == 1 else int(best[rng.integers(len(best))])
