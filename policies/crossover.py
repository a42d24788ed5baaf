"""Recombination: children of two of the best evaluated configurations (issue 24, opt-in).

A genetic algorithm reaches optima that one-knob moves reach only through a slower
configuration: a child that takes some knobs from one good parent and the rest from another
combines what each got right (a categorical switch from one, a tile size from the other).
:class:`CrossoverProposer` does that over the evaluated history, for the hierarchical
policy's *crossover* arm (:mod:`policies.hierarchical`):

1. The parents are the ``parents`` fastest evaluated configurations (distinct codes).
2. Pairs ``(a, b)`` are visited in order of rank sum (the two fastest first), ``a`` the
   faster. The *units* on which they differ are single knobs (``"uniform"``: uniform
   crossover) or whole knob groups (``"group"``: a block shape, a tile shape, the layout
   flags are inherited together, see :mod:`policies.strategies`).
3. A child is ``a`` with a non-empty proper subset of the differing units taken from ``b``:
   every subset when there are at most ``max_units`` differing units, else
   ``max_units`` random ones (so a child is never one of its parents).
4. Only *free* children count: valid (the space's restriction, the same index the policy
   uses), neither evaluated nor pending. At most ``max_children`` of them are collected;
   the one chosen is the child its evaluated one-step neighbours vouch for best
   (``select="score"``, the proposer's local regression, ties at random) or a uniformly
   random one (``select="random"``, as a GA would).

Deterministic given the ``rng`` (one or no draw per decision besides ties). Cost: at most
``parents * (parents - 1) / 2`` pairs and ``max_children`` scored children, independent of
the history's length. (Also measured and not kept, docs/decisions.md: an "elite" pool of the
fastest configuration per value of each short knob, and children at least two knobs from
both parents.)
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from policies.history import TrialLog
from policies.moves import NeighbourProposer

__all__ = ["CrossoverProposer", "CrossoverSettings"]

_UNITS = ("uniform", "group")
_SELECT = ("score", "random")


@dataclass(frozen=True)
class CrossoverSettings:
    """How many parents, what a unit of inheritance is, how many children are considered."""

    parents: int = 8
    units: str = "group"
    select: str = "score"
    #: Every subset of the differing units is a child when at most this many differ;
    #: above, this many random subsets.
    max_units: int = 6
    max_children: int = 48

    def __post_init__(self) -> None:
        if self.parents < 2:
            raise ValueError(f"crossover needs at least 2 parents, got {self.parents}")
        if self.units not in _UNITS:
            raise ValueError(f"unknown crossover units {self.units!r}; valid: {_UNITS}")
        if self.select not in _SELECT:
            raise ValueError(f"unknown crossover select {self.select!r}; valid: {_SELECT}")
        if self.max_units < 1 or self.max_children < 1:
            raise ValueError("max_units and max_children must be >= 1")


class CrossoverProposer:
    """Children of pairs of the fastest evaluated configurations; stateless."""

    def __init__(
        self, *, settings: CrossoverSettings | None = None, proposer: NeighbourProposer
    ) -> None:
        self.settings = settings or CrossoverSettings()
        self.proposer = proposer

    def parents(self, log: TrialLog) -> list[int]:
        """Codes of the ``parents`` fastest evaluated configurations, fastest first."""
        out: list[int] = []
        for _, i in log.ranked:
            code = log.ok[i].code
            if code is not None and code not in out:
                out.append(code)
                if len(out) == self.settings.parents:
                    break
        return out

    def children(
        self,
        log: TrialLog,
        groups: Sequence[tuple[int, ...]],
        rng: np.random.Generator,
        pending: set[int],
    ) -> list[int]:
        """Free children of the fastest pairs, at most ``max_children``, in pair order.

        ``groups``: the knob positions inherited together (``units="group"``); knobs in no
        group are units of their own.
        """
        s = self.settings
        index = log.index
        parents = self.parents(log)
        if len(parents) < 2:
            return []
        units = self._units(index.cards, groups)
        digits = [index.digits(c) for c in parents]
        pairs = sorted(itertools.combinations(range(len(parents)), 2), key=lambda p: (sum(p), p))
        out: list[int] = []
        found: set[int] = set()
        for i, j in pairs:
            a, b = digits[i], digits[j]
            differing = [u for u in units if any(a[k] != b[k] for k in u)]
            if len(differing) < 2:
                continue  # every child would be a or b
            for subset in self._subsets(len(differing), rng):
                child = list(a)
                for u in subset:
                    for k in differing[u]:
                        child[k] = b[k]
                code = index.code_of(child)
                if code not in found and log.is_free(code, pending):
                    found.add(code)
                    out.append(code)
                    if len(out) >= s.max_children:
                        return out
        return out

    def propose(
        self,
        log: TrialLog,
        groups: Sequence[tuple[int, ...]],
        rng: np.random.Generator,
        pending: set[int],
    ) -> int | None:
        """One free child (see the module docstring); ``None`` when there is none."""
        options = self.children(log, groups, rng, pending)
        if not options:
            return None
        if len(options) == 1:
            return options[0]
        if self.settings.select == "random":
            return options[int(rng.integers(len(options)))]
        return self.proposer.best(log, options, rng)

    def _units(
        self, cards: Sequence[int], groups: Sequence[tuple[int, ...]]
    ) -> list[tuple[int, ...]]:
        movable = [k for k, card in enumerate(cards) if card > 1]
        if self.settings.units == "uniform":
            return [(k,) for k in movable]
        out: list[tuple[int, ...]] = []
        covered: set[int] = set()
        for group in groups:
            unit = tuple(k for k in group if k not in covered and cards[k] > 1)
            if unit:
                out.append(unit)
                covered.update(unit)
        out += [(k,) for k in movable if k not in covered]
        return out

    def _subsets(self, n: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
        """Non-empty proper subsets of ``range(n)``: all of them, smallest first, for
        ``n <= max_units``; else ``max_units`` random ones."""
        if n <= self.settings.max_units:
            return [
                subset for size in range(1, n) for subset in itertools.combinations(range(n), size)
            ]
        out = []
        for _ in range(self.settings.max_units):
            mask = rng.random(n) < 0.5
            if mask.all():
                mask[int(rng.integers(n))] = False
            elif not mask.any():
                mask[int(rng.integers(n))] = True
            out.append(tuple(int(k) for k in np.flatnonzero(mask)))
        return out
