"""The search-policy protocol: what every policy (random, bandits) implements.

Call order, for one kernel generation::

    policy = SomePolicy.from_dict(saved) if saved else SomePolicy(settings=...)
    while budget left:
        s = policy.suggest(space, trials, rng, pending=())   # None: nothing left to try
        trial = evaluate(s)                                   # by the caller
        policy.observe(s, trial)
        save(policy.to_dict())                                # after every update

``trials`` is the whole evaluated history of the generation on this machine's fingerprint,
including the baseline (``strategy == "original"``) and every failure, in evaluation order.
A policy never suggests a configuration present in ``trials`` or ``pending``. All randomness
comes from the ``rng`` passed in. Policies are not thread-safe; the caller serializes calls.
This library never imports ``tuned``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

__all__ = ["Config", "KnobValue", "Policy", "SearchSpace", "Suggestion", "Trial", "config_key"]

KnobValue = int | float | str | bool
Config = Mapping[str, KnobValue]


def config_key(config: Config) -> tuple[tuple[str, KnobValue], ...]:
    """A hashable, order-independent key for a configuration."""
    return tuple(sorted(config.items()))


@dataclass(frozen=True)
class SearchSpace:
    """The knob space: each knob's allowed values, in declaration order."""

    knobs: Mapping[str, tuple[KnobValue, ...]]

    def size(self) -> int:
        n = 1
        for values in self.knobs.values():
            n *= len(values)
        return n

    def contains(self, config: Config) -> bool:
        return set(config) == set(self.knobs) and all(
            config[k] in values for k, values in self.knobs.items()
        )

    def config_at(self, index: int) -> dict[str, KnobValue]:
        """The configuration at a mixed-radix ``index`` in ``[0, size())``."""
        out: dict[str, KnobValue] = {}
        for name, values in reversed(list(self.knobs.items())):
            index, digit = divmod(index, len(values))
            out[name] = values[digit]
        return dict(reversed(list(out.items())))


@dataclass(frozen=True)
class Trial:
    """One evaluated candidate, as a policy sees it.

    ``time_s`` is the objective (lower is better) and is ``None`` unless ``outcome == "ok"``.
    ``metrics`` holds what is known of the candidate's runtime behaviour, by name (Triton
    compile metadata such as ``registers``, ``shared_bytes``, ``num_warps``; profiler ratios
    such as ``sol_sm``, ``sol_dram``, ``sol_l2`` in [0, 1]); absent keys are unknown.
    """

    candidate_id: str
    knobs: Config
    outcome: str
    time_s: float | None
    strategy: str = "config"
    parent_id: str | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Suggestion:
    """What to evaluate next: knob values, and for bandits the arm and parent they came from."""

    knobs: Config
    strategy: str = "config"
    parent_id: str | None = None
    arm: str | None = None


class Policy(Protocol):
    """A search policy. ``name`` is its key in :data:`policies.POLICIES`."""

    name: ClassVar[str]

    def suggest(
        self,
        space: SearchSpace,
        trials: Sequence[Trial],
        rng: np.random.Generator,
        *,
        pending: Sequence[Suggestion] = (),
    ) -> Suggestion | None: ...

    def observe(self, suggestion: Suggestion, trial: Trial) -> None: ...

    def to_dict(self) -> dict[str, Any]: ...
