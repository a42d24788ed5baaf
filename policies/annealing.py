"""Simulated annealing, after Kernel Tuner's ``simulated_annealing`` strategy (a baseline).

From the current position, a random neighbour is drawn: with probability 0.2 a Hamming
neighbour (one knob, any other value), else a *strictly adjacent* one (every knob moves by
at most one step in its value list, at least one moves). It is accepted with::

    P(accept) = 1                                 if t_new < t_old
              = 0                                 if the new configuration failed
              = exp(((t_old - t_new) / t_old) / T) otherwise

and the temperature follows Kernel Tuner's schedule scaled to the evaluation count ``c``:
``T = T_start * alpha ** (c * max_iter / anneal_evaluations)`` with
``max_iter = ceil(ln(T_min) / ln(alpha))``, so ``T`` reaches ``T_min`` after
``anneal_evaluations`` evaluations (Kernel Tuner uses the budget; a daemon has none).
A neighbour already evaluated costs no evaluation: its recorded time decides acceptance at
once, as Kernel Tuner's cache does. After ``stuck_limit`` such free steps in a row, the walk
restarts from a random configuration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from policies.base import Policy, SearchSpace, Suggestion, Trial
from policies.history import TrialLog
from policies.space_index import SpaceIndex

__all__ = ["AnnealingSettings", "AnnealingState", "SimulatedAnnealingPolicy"]


@dataclass(frozen=True)
class AnnealingSettings:
    """Kernel Tuner's defaults, plus the length of the schedule in evaluations."""

    t_start: float = 1.0
    t_min: float = 0.001
    alpha: float = 0.995
    anneal_evaluations: int = 200
    hamming_prob: float = 0.2
    stuck_limit: int = 100

    def __post_init__(self) -> None:
        if not (0 < self.t_min < self.t_start and 0 < self.alpha < 1):
            raise ValueError("annealing needs 0 < t_min < t_start and 0 < alpha < 1")
        if self.anneal_evaluations < 1 or self.stuck_limit < 1:
            raise ValueError("anneal_evaluations and stuck_limit must be >= 1")


@dataclass
class AnnealingState:
    """The walk's position (knob values and time) and the acceptance draw in flight."""

    position: dict[str, Any] | None = None
    position_time_s: float | None = None
    draw: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "position_time_s": self.position_time_s,
            "draw": self.draw,
        }

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> AnnealingState:
        return cls(
            position=state.get("position"),
            position_time_s=state.get("position_time_s"),
            draw=float(state.get("draw", 0.0)),
        )


class SimulatedAnnealingPolicy(Policy):
    """Kernel Tuner-style simulated annealing (see the module docstring)."""

    name: ClassVar[str] = "simulated_annealing"

    def __init__(
        self, *, settings: AnnealingSettings | None = None, state: AnnealingState | None = None
    ) -> None:
        self.settings = settings or AnnealingSettings()
        self.state = state or AnnealingState()
        self._log: TrialLog | None = None
        self._evaluations = 0
        s = self.settings
        self._max_iter = math.ceil(math.log(s.t_min) / math.log(s.alpha))

    def temperature(self, evaluations: int) -> float:
        s = self.settings
        exponent = self._max_iter * min(evaluations, s.anneal_evaluations) / s.anneal_evaluations
        value: float = s.t_start * s.alpha**exponent
        return max(value, s.t_min)

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
        self._evaluations = log.n_trials
        taken = log.pending_codes(pending)
        index = log.index
        position = None if self.state.position is None else index.encode(self.state.position)
        if position is None:
            position, self.state.position_time_s = self._start(log)
        self.state.position = None if position is None else index.decode(position)
        temperature = self.temperature(log.n_trials)
        for _ in range(self.settings.stuck_limit):
            if position is None:
                break
            code = self._neighbour(index, position, rng)
            if code is None:
                break
            if code in taken or not index.admits(code):
                continue
            if code not in log.seen:
                self.state.draw = float(rng.random())
                return Suggestion(knobs=index.decode(code))
            new_time = log.times.get(code)  # evaluated before: free step
            if self._accept(self.state.position_time_s, new_time, temperature, rng.random()):
                position, self.state.position_time_s = code, new_time
                self.state.position = index.decode(code)
        code = index.random_free(rng, log.seen | taken)
        if code is None:
            return None
        self.state.position, self.state.position_time_s = None, None  # restart there
        self.state.draw = 0.0
        return Suggestion(knobs=index.decode(code))

    def observe(self, suggestion: Suggestion, trial: Trial) -> None:
        new_time = trial.time_s if trial.ok else None
        temperature = self.temperature(self._evaluations + 1)
        if self.state.position is None or self._accept(
            self.state.position_time_s, new_time, temperature, self.state.draw
        ):
            self.state.position = dict(suggestion.knobs)
            self.state.position_time_s = new_time

    def to_dict(self) -> dict[str, Any]:
        return self.state.to_dict()

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> SimulatedAnnealingPolicy:
        return cls(state=AnnealingState.from_dict(state))

    # -- internals --------------------------------------------------------------------------

    @staticmethod
    def _accept(old: float | None, new: float | None, temperature: float, draw: float) -> bool:
        if old is None:
            return True  # an invalid position is always left
        if new is None:
            return False
        if new < old:
            return True
        return bool(math.exp(((old - new) / old) / temperature) > draw)

    def _start(self, log: TrialLog) -> tuple[int | None, float | None]:
        """Continue from the fastest configuration so far (the baseline at first)."""
        best = log.best
        if best is None or best.code is None:
            return None, None
        return best.code, best.time_s

    def _neighbour(self, index: SpaceIndex, code: int, rng: np.random.Generator) -> int | None:
        movable = [j for j, card in enumerate(index.cards) if card > 1]
        if not movable:
            return None
        if rng.random() < self.settings.hamming_prob:
            j = movable[int(rng.integers(len(movable)))]
            digit = index.digits(code)[j]
            other = int(rng.integers(index.cards[j] - 1))
            return index.with_digit(code, j, other + (other >= digit))
        digits = index.digits(code)
        for _ in range(64):
            moved = list(digits)
            for j in movable:
                moved[j] = min(max(digits[j] + int(rng.integers(-1, 2)), 0), index.cards[j] - 1)
            if moved != digits:
                return index.code_of(moved)
        return None
