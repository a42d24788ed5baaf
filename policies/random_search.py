"""Uniform random search without replacement: the floor every other policy must beat."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from policies.base import Policy, SearchSpace, Suggestion, Trial
from policies.history import TrialLog

__all__ = ["RandomPolicy"]


@dataclass
class RandomPolicy(Policy):
    """Draws each configuration uniformly from the valid ones not yet evaluated or pending.

    Stateless apart from the history it is given, so ``to_dict`` is empty and a restarted
    run continues correctly from the store's trials alone. (The digest of the history it
    keeps in memory is only a cache.)
    """

    name: ClassVar[str] = "random"
    _log: TrialLog | None = field(default=None, init=False, repr=False, compare=False)

    def suggest(
        self,
        space: SearchSpace,
        trials: Sequence[Trial],
        rng: np.random.Generator,
        *,
        pending: Sequence[Suggestion] = (),
    ) -> Suggestion | None:
        self._log = TrialLog.for_space(self._log, space)
        self._log.sync(trials)
        taken = self._log.pending_codes(pending)
        code = self._log.index.random_free(rng, self._log.seen | taken if taken else self._log.seen)
        return None if code is None else Suggestion(knobs=self._log.index.decode(code))

    def observe(self, suggestion: Suggestion, trial: Trial) -> None:
        """Random search learns nothing."""

    def to_dict(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> RandomPolicy:
        return cls()
