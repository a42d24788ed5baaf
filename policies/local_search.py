"""Greedy multi-start local search, after Kernel Tuner's ``greedy_mls`` (a baseline).

First-improvement hill climbing over the *Hamming* neighbourhood (one knob changed to any
other of its values), neighbours visited in random order, with random restarts:

1. start from a random configuration (the first climb starts from the baseline);
2. evaluate unvisited neighbours of the base in random order; the first one faster than the
   base becomes the new base (a neighbour evaluated earlier that is faster is taken at once,
   without an evaluation, as Kernel Tuner's cache does);
3. when every neighbour is evaluated and none is faster, the base is a local optimum:
   restart at step 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from policies.base import Policy, SearchSpace, Suggestion, Trial
from policies.history import TrialLog
from policies.space_index import SpaceIndex

__all__ = ["GreedyLocalSearchPolicy", "LocalSearchSettings", "LocalSearchState"]


@dataclass(frozen=True)
class LocalSearchSettings:
    """``neighbourhood``: ``"hamming"`` (Kernel Tuner's default) or ``"adjacent"``."""

    neighbourhood: str = "hamming"

    def __post_init__(self) -> None:
        if self.neighbourhood not in ("hamming", "adjacent"):
            raise ValueError(
                f"neighbourhood must be 'hamming' or 'adjacent', got {self.neighbourhood!r}"
            )


@dataclass
class LocalSearchState:
    """The base of the current climb (knob values and time); ``None`` before a (re)start."""

    base: dict[str, Any] | None = None
    base_time_s: float | None = None
    started: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base, "base_time_s": self.base_time_s, "started": self.started}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> LocalSearchState:
        return cls(
            base=state.get("base"),
            base_time_s=state.get("base_time_s"),
            started=bool(state.get("started", False)),
        )


class GreedyLocalSearchPolicy(Policy):
    """Kernel Tuner-style greedy multi-start local search (see the module docstring)."""

    name: ClassVar[str] = "greedy_ls"

    def __init__(
        self,
        *,
        settings: LocalSearchSettings | None = None,
        state: LocalSearchState | None = None,
    ) -> None:
        self.settings = settings or LocalSearchSettings()
        self.state = state or LocalSearchState()
        self._log: TrialLog | None = None

    def suggest(
        self,
        space: SearchSpace,
        trials: Sequence[Trial],
        rng: np.random.Generator,
        *,
        pending: Sequence[Suggestion] = (),
    ) -> Suggestion | None:
        log = self._log = TrialLog.for_space(self._log, space)
        log.sync(trials)
        index = log.index
        taken = log.pending_codes(pending)
        if not self.state.started and log.best is not None and log.best.code is not None:
            self.state.started = True
            self.state.base, self.state.base_time_s = index.decode(log.best.code), log.best.time_s
        base = None if self.state.base is None else index.encode(self.state.base)
        while base is not None and self.state.base_time_s is not None:
            neighbours = self._neighbours(index, base)
            faster = [
                c for c in neighbours if c in log.times and log.times[c] < self.state.base_time_s
            ]
            if faster:  # known to be better: move there without an evaluation
                base = faster[int(rng.integers(len(faster)))]
                self.state.base, self.state.base_time_s = index.decode(base), log.times[base]
                continue
            free = [c for c in neighbours if log.is_free(c, taken)]
            if free:
                return Suggestion(knobs=index.decode(free[int(rng.integers(len(free)))]))
            break  # a local optimum: restart
        code = index.random_free(rng, log.seen | taken)
        if code is None:
            return None
        self.state.base, self.state.base_time_s = None, None
        return Suggestion(knobs=index.decode(code))

    def observe(self, suggestion: Suggestion, trial: Trial) -> None:
        new_time = trial.time_s if trial.ok else None
        if new_time is None:
            return
        if self.state.base is None or (
            self.state.base_time_s is not None and new_time < self.state.base_time_s
        ):
            self.state.base, self.state.base_time_s = dict(suggestion.knobs), new_time

    def to_dict(self) -> dict[str, Any]:
        return self.state.to_dict()

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> GreedyLocalSearchPolicy:
        return cls(state=LocalSearchState.from_dict(state))

    def _neighbours(self, index: SpaceIndex, code: int) -> list[int]:
        movable = [j for j, card in enumerate(index.cards) if card > 1]
        if self.settings.neighbourhood == "adjacent":
            return [c for c in index.adjacent(code, movable) if index.admits(c)]
        return [c for c in index.hamming(code, movable) if index.admits(c)]
