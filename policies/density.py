"""The model arm's proposer: a density-ratio (TPE-style) model over knob values.

Local moves climb from good parents; when the optimum lies in another basin (another value
of a categorical method switch, a tile size many steps away) they stall, filling the
plateau around a local optimum. This proposer looks at the whole history instead, as the
Tree-structured Parzen Estimator (Bergstra et al., 2011) does, with one independent
categorical density per knob:

* the successful trials, fastest first, are split into a *good* set (the fastest
  ``gamma * n``, at least ``min_good``) and a *bad* set (the rest, plus every failure);
* per knob ``j`` and value position ``v``, smoothed densities of the two sets::

      l_j(v) = (prior + sum_{x in good} K(x_j, v)) / Z_l
      g_j(v) = (prior + sum_{x in bad} K(x_j, v)) / Z_g

  where ``K(u, v) = 1`` for ``u = v`` and ``neighbour_weight`` for ``|u - v| = 1`` (values
  next to each other in a knob's ordered list behave alike) on a knob with more than
  ``smooth_above`` values, ``0`` otherwise;
* ``candidates`` configurations are drawn knob by knob from ``l`` (and ``uniform_share``
  of them uniformly among free configurations, so no value is ever starved), and the free
  one with the largest ``sum_j ln l_j(x_j) - ln g_j(x_j)`` is proposed.

It is a proposer, not a policy: the hierarchical bandit offers it as one more arm
(``model``), credited like any other with the child's gain over its parent, the incumbent.
All randomness comes from the ``rng`` passed in; a decision costs ``O(knobs * values +
candidates * knobs)`` after an ``O(new trials)`` update of the digit table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from policies.history import TrialLog

__all__ = ["DensityProposer", "DensitySettings"]


@dataclass(frozen=True)
class DensitySettings:
    """The model arm's constants (generic; TPE's usual values)."""

    gamma: float = 0.15
    min_good: int = 2
    max_good: int = 25
    prior: float = 1.0
    neighbour_weight: float = 0.5
    smooth_above: int = 1
    candidates: int = 48
    uniform_share: float = 0.25

    def __post_init__(self) -> None:
        if not 0 < self.gamma < 1:
            raise ValueError(f"gamma must be in (0, 1), got {self.gamma}")
        if self.min_good < 1 or self.max_good < self.min_good:
            raise ValueError("need 1 <= min_good <= max_good")
        if self.prior <= 0 or not 0 <= self.neighbour_weight <= 1:
            raise ValueError("prior must be > 0 and neighbour_weight in [0, 1]")
        if self.candidates < 1 or not 0 <= self.uniform_share <= 1:
            raise ValueError("candidates must be >= 1 and uniform_share in [0, 1]")


class DensityProposer:
    """Proposes a free configuration the good trials' densities favour; see the module."""

    def __init__(self, *, settings: DensitySettings | None = None) -> None:
        self.settings = settings or DensitySettings()
        self._log: TrialLog | None = None
        self._epoch = -1
        self._digits = np.zeros((0, 0), dtype=np.int64)  # digits of log.codes, row by row
        self._times = np.zeros(0)  # their times; nan for failures
        self._read = 0

    def _table(self, log: TrialLog) -> tuple[np.ndarray, np.ndarray]:
        """Digits of every evaluated code (rows) and its time (nan: failed); appended to
        incrementally (a code's time never changes once recorded), capacity doubled."""
        index = log.index
        if log is not self._log or log.epoch != self._epoch:
            self._log, self._epoch, self._read = log, log.epoch, 0
            self._digits = np.zeros((64, len(index.cards)), dtype=np.int64)
            self._times = np.full(64, math.nan)
        n = len(log.codes)
        if n > len(self._times):
            size = max(n, 2 * len(self._times))
            digits = np.zeros((size, len(index.cards)), dtype=np.int64)
            digits[: self._read] = self._digits[: self._read]
            times = np.full(size, math.nan)
            times[: self._read] = self._times[: self._read]
            self._digits, self._times = digits, times
        for i in range(self._read, n):
            code = log.codes[i]
            self._digits[i] = index.digits(code)
            self._times[i] = log.times.get(code, math.nan)
        self._read = n
        return self._digits[:n], self._times[:n]

    def propose(self, log: TrialLog, rng: np.random.Generator, pending: set[int]) -> int | None:
        """A free code chosen by the density ratio; ``None`` when nothing is free."""
        index = log.index
        s = self.settings
        digits, times = self._table(log)
        ok = np.flatnonzero(~np.isnan(times))
        if len(ok) < 2:
            return None
        order = ok[np.argsort(times[ok], kind="stable")]
        n_good = min(max(s.min_good, math.ceil(s.gamma * len(ok))), s.max_good, len(ok) - 1)
        good = np.zeros(len(times), dtype=bool)
        good[order[:n_good]] = True
        log_ratio = []
        for j, card in enumerate(index.cards):
            column = digits[:, j]
            lg = self._density(column[good], card)
            bg = self._density(column[~good], card)
            log_ratio.append(np.log(lg) - np.log(bg))
        taken = log.seen | pending if pending else log.seen
        n_uniform = round(s.candidates * s.uniform_share)
        n_model = s.candidates - n_uniform
        draws = np.empty((n_model, len(index.cards)), dtype=np.int64)
        for j, card in enumerate(index.cards):
            density = self._density(digits[good, j], card)
            draws[:, j] = rng.choice(card, size=n_model, p=density / density.sum())
        options: list[int] = []
        for row in draws:
            code = index.code_of([int(d) for d in row])
            if code not in taken and index.admits(code):
                options.append(code)
        for _ in range(n_uniform):
            uniform = index.random_free(rng, taken)
            if uniform is None:
                break
            options.append(uniform)
        if not options:
            return index.random_free(rng, taken)
        unique = list(dict.fromkeys(options))
        scores = [
            sum(float(log_ratio[j][d]) for j, d in enumerate(index.digits(c))) for c in unique
        ]
        best = max(scores)
        top = [c for c, v in zip(unique, scores) if v >= best - 1e-12]
        return top[int(rng.integers(len(top)))]

    def _density(self, column: np.ndarray, card: int) -> np.ndarray:
        s = self.settings
        counts = np.bincount(column, minlength=card).astype(float)
        if card > s.smooth_above and s.neighbour_weight > 0:
            smoothed = counts.copy()
            smoothed[1:] += s.neighbour_weight * counts[:-1]
            smoothed[:-1] += s.neighbour_weight * counts[1:]
            counts = smoothed
        density: np.ndarray = counts + s.prior
        normalized: np.ndarray = density / density.sum()
        return normalized
