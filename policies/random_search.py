"""Uniform random search without replacement: the floor every other policy must beat."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from policies.base import SearchSpace, Suggestion, Trial, config_key

__all__ = ["RandomPolicy"]

# Above this many configurations, rejection sampling replaces enumeration.
_ENUMERATE_LIMIT = 200_000


@dataclass
class RandomPolicy:
    """Draws each configuration uniformly from those not yet evaluated or pending.

    Stateless apart from the history it is given, so ``to_dict`` is empty and a restarted
    run continues correctly from the store's trials alone.
    """

    name: ClassVar[str] = "random"

    def suggest(
        self,
        space: SearchSpace,
        trials: Sequence[Trial],
        rng: np.random.Generator,
        *,
        pending: Sequence[Suggestion] = (),
    ) -> Suggestion | None:
        seen = {config_key(t.knobs) for t in trials}
        seen.update(config_key(s.knobs) for s in pending)
        size = space.size()
        if size <= _ENUMERATE_LIMIT:
            free = [i for i in range(size) if config_key(space.config_at(i)) not in seen]
            if not free:
                return None
            return Suggestion(knobs=space.config_at(int(free[rng.integers(len(free))])))
        for _ in range(10_000):
            config = space.config_at(int(rng.integers(size)))
            if config_key(config) not in seen:
                return Suggestion(knobs=config)
        return None

    def observe(self, suggestion: Suggestion, trial: Trial) -> None:
        """Random search learns nothing."""

    def to_dict(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> RandomPolicy:
        return cls()
