"""Proposing a small batch of suggestions at once, for callers that evaluate ahead.

When candidates are compiled ahead (several at a time) while the GPU benchmarks one, the
policy must propose the next ones before the results of the previous ones are known. A batch
is made by asking the policy ``size`` times, each time with everything already proposed and
not yet observed as ``pending``::

    B = []
    for i in 1..size:
        s_i = policy.suggest(space, trials, rng, pending = in_flight + B)
        B.append(s_i)

Two rules of the :class:`~policies.base.Policy` protocol make this a good batch: a policy
never proposes a configuration that is pending (no duplicates, within the batch or with what
is in flight), and bandit policies count each pending suggestion as a pull of its arm with
reward 0 (:meth:`policies.arms.BanditState.with_pending`), so the batch spreads over the arms
rather than piling onto the one that led when it started. When their results arrive, the
real rewards are observed as usual (:meth:`Policy.observe`) and replace the virtual ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from policies.base import Policy, SearchSpace, Suggestion, Trial

__all__ = ["propose_batch"]


def propose_batch(
    policy: Policy,
    space: SearchSpace,
    trials: Sequence[Trial],
    rng: np.random.Generator,
    size: int,
    *,
    pending: Sequence[Suggestion] = (),
) -> list[Suggestion]:
    """Up to ``size`` suggestions, none of them in ``trials``, ``pending`` or each other.

    Fewer when the policy runs out (the space is exhausted apart from what is pending).
    """
    if size < 0:
        raise ValueError(f"batch size must be >= 0, got {size}")
    batch: list[Suggestion] = []
    in_flight = list(pending)
    for _ in range(size):
        suggestion = policy.suggest(space, trials, rng, pending=in_flight)
        if suggestion is None:
            break
        batch.append(suggestion)
        in_flight.append(suggestion)
    return batch
