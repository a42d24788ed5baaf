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
A policy never suggests a configuration present in ``trials`` or ``pending``.

Batches: ``pending`` holds the suggestions made but not observed yet (a batch being proposed,
candidates compiling ahead or queued for the GPU). Besides never being proposed again, they
count as pulls in flight for bandit policies: each is a pull of its arm with reward 0 until
its trial is observed (``BanditState.with_pending``), so a batch does not pile onto the arm
that led when it started. :func:`policies.batch.propose_batch` makes a batch this way.

All randomness comes from the ``rng`` passed in. Policies are not thread-safe; the caller
serializes calls. This library never imports ``tuned``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
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
    """The knob space: each knob's allowed values, in declaration order.

    ``is_valid`` (optional) restricts the space to the configurations it accepts, like Kernel
    Tuner's restrictions: policies propose only configurations for which it returns ``True``.
    ``None`` means every combination of the knob values is part of the space. It must be a
    pure function of the configuration (policies cache its answers).
    """

    knobs: Mapping[str, tuple[KnobValue, ...]]
    is_valid: Callable[[Config], bool] | None = field(default=None, compare=False, repr=False)

    def size(self) -> int:
        n = 1
        for values in self.knobs.values():
            n *= len(values)
        return n

    def contains(self, config: Config) -> bool:
        return set(config) == set(self.knobs) and all(
            config[k] in values for k, values in self.knobs.items()
        )

    def admits(self, config: Config) -> bool:
        """``contains(config)`` and, when a restriction is set, ``is_valid(config)``."""
        return self.contains(config) and (self.is_valid is None or self.is_valid(config))

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

    @property
    def ok(self) -> bool:
        """Whether the trial produced a usable time: ``outcome == "ok"`` with a finite,
        positive time. Anything else (no time, 0, negative, NaN, infinity: a broken
        measurement) counts as a failed trial for every policy, never as a crash."""
        t = self.time_s
        return self.outcome == "ok" and t is not None and math.isfinite(t) and t > 0


@dataclass(frozen=True)
class Suggestion:
    """What to evaluate next: knob values, and for bandits the arm and parent they came from.

    ``parent_time_s`` is the parent's time when the suggestion was made, so that the reward of
    the child (its relative latency reduction versus the parent) can be computed from the
    suggestion and the trial alone, also after a restart.
    """

    knobs: Config
    strategy: str = "config"
    parent_id: str | None = None
    arm: str | None = None
    parent_time_s: float | None = None


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

    # -- optional hooks, no-ops here: a policy that subclasses Policy inherits these; the
    # -- hierarchical bandit implements them (clusters, profiles, LLM arms).

    #: Whether the policy has LLM arms (``set_llm_strategies`` means something to it).
    llm_arms: ClassVar[bool] = False

    def set_llm_strategies(self, strategies: Sequence[Any]) -> None:
        """The LLM strategies (:class:`policies.strategies.Strategy`) open from the next
        :meth:`suggest` on; ``()``: none. Ignored by a policy without LLM arms."""

    def update_metrics(self, metrics: Mapping[str, Mapping[str, float]]) -> None:
        """Profile metrics (candidate id -> metrics) that arrived after their trials were
        observed. Ignored by a policy that does not use them."""

    def representatives(self) -> dict[int, str]:
        """Group id -> candidate id of the candidates whose profiles the policy wants first;
        none by default."""
        return {}
