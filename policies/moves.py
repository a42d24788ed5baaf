"""The parametric proposer: a knob move from a parent configuration, within a knob group.

Moves, in order of preference (``knobs`` are the positions the strategy may change):

1. *neighbour*: one knob stepped to the next or previous value of its ordered value list.
   Occasionally a rarer kind is tried first: with probability ``scale_prob`` a *scale* move
   (a numeric knob doubled or halved, when that value is in its list: sizes act on a log
   scale on GPUs, so 32 -> 64 is as natural a step as 32 -> 48), with ``two_knob_prob`` two
   knobs stepped at once, and with ``jump_prob`` a *jump* of one knob to any other value.
   When no one-step neighbour of the incumbent is free, a *swap* (``swaps``): the values
   of two twin knobs exchanged (twins: the same list of sizes, as ``BLOCK_M`` and
   ``BLOCK_N``), so the transposed tile shape of a local optimum is tried before the
   search moves on to slower parents; reaching it by single steps means going through a
   worse shape (a 256 x 256 tile) first. When no swap is free either, *any value*
   (``any_value_from_incumbent``): one knob of the incumbent set to any other value of its
   list (Kernel Tuner's Hamming neighbourhood), so a categorical switch whose good value is
   two list positions away (``method`` 2 -> 0, through a slow 1) is tried from the local
   optimum before the search settles for slower parents. When none of those is free
   either, *powers of two* (``powers_of_two_from_incumbent``): one longer knob of the
   incumbent (more than ``any_value_max_values`` values) set to another power of two of its
   list (``block_size_x`` 64 -> 128 among 16, 32, ..., 256 in steps of 16), for the knobs
   whose evaluated powers of two have run faster on average than their other values
   (mean ``ln t``, at least ``powers_of_two_min_evidence`` successes on each side): sizes
   GPU kernels favour, tried where the measurements so far say they pay and nowhere else.
2. *widened*: when no neighbour within ``knobs`` is free, a one-knob step of any knob.
3. *random*: when the parent's whole neighbourhood is taken, a uniformly random free
   configuration of the space.

Only free configurations are proposed: valid (the space's restriction), not evaluated, not
pending. ``None`` is returned only when the whole space is exhausted.

Among the free options of a kind, the proposer takes the one its evaluated one-step
neighbours vouch for best, a local (graph) regression of the latency::

    score(y) = mean_{z ~ y, z ok} ln t_z  +  failure_penalty * #{z ~ y : z failed}

(``z ~ y``: one step apart; ties, e.g. no evidence, are broken at random). Failures so
teach where the space is invalid: options next to failed configurations are pushed back,
and invalid regions (too many threads, too much shared memory) are contiguous in knob space.

*Twin shadowing* (``twin_tolerance``, issue 24): a parent ``p`` with an evaluated *twin*
``q``, a configuration that differs from it in one knob ``k`` and ran within
``twin_tolerance`` of its time (``k`` is inert there: ``use_padding`` without shared memory,
a stride no access pattern feels), gets no move that ``q``'s neighbourhood has already
answered: a move of ``p`` that changes only knobs of other groups than ``k``'s is skipped
when the same move of ``q`` (the move's configuration with ``k`` as in ``q``) was evaluated.
Within ``k``'s own group the twin says nothing (``read_only`` is inert with shared memory
and not without it), so those moves stay. Best-first expansion otherwise walks the whole
neighbourhood of every twin on a plateau, measuring each answer twice. Knob groups come
from the policy (:meth:`NeighbourProposer.set_knob_groups`); without them nothing is
shadowed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from policies.history import TrialLog
from policies.space_index import SpaceIndex

__all__ = ["Move", "MoveSettings", "NeighbourProposer"]


@dataclass(frozen=True)
class MoveSettings:
    """Probabilities of the rarer move kinds, how hard failures repel (log-latency),
    whether an incumbent with no free one-step neighbour may swap twin knobs and then set
    one knob to any other value."""

    scale_prob: float = 0.1
    two_knob_prob: float = 0.05
    jump_prob: float = 0.02
    failure_penalty: float = 0.05
    swaps: bool = True
    any_value_from_incumbent: bool = True
    #: Any-value moves of the incumbent only for knobs with at most this many values
    #: (categorical switches, short lists); 0: every knob.
    any_value_max_values: int = 4
    #: Then one longer knob of the incumbent set to another power of two of its list,
    #: for knobs where the evaluated powers of two are faster on average (issue 24).
    powers_of_two_from_incumbent: bool = True
    #: Successful evaluations needed on each side (powers of two, other values) of a knob
    #: before its powers of two are tried from the incumbent.
    powers_of_two_min_evidence: int = 3
    #: Twin shadowing: a parent's evaluated one-knob neighbour that ran within this
    #: log-latency of it is its twin (0: off). See the module docstring.
    twin_tolerance: float = 0.01

    def __post_init__(self) -> None:
        if self.scale_prob + self.two_knob_prob + self.jump_prob > 1:
            raise ValueError("scale_prob + two_knob_prob + jump_prob must be <= 1")
        for name in ("scale_prob", "two_knob_prob", "jump_prob"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if self.failure_penalty < 0:
            raise ValueError(f"failure_penalty must be >= 0, got {self.failure_penalty}")
        if self.twin_tolerance < 0:
            raise ValueError(f"twin_tolerance must be >= 0, got {self.twin_tolerance}")
        if self.powers_of_two_min_evidence < 1:
            raise ValueError(
                f"powers_of_two_min_evidence must be >= 1, got {self.powers_of_two_min_evidence}"
            )


@dataclass(frozen=True)
class Move:
    """A proposed configuration (its code) and how it was found."""

    code: int
    kind: str


class NeighbourProposer:
    """Proposes moves on a :class:`~policies.history.TrialLog`'s space; stateless but for
    a memo of per-knob statistics of the log it last read (a function of that log)."""

    def __init__(self, *, settings: MoveSettings | None = None) -> None:
        self.settings = settings or MoveSettings()
        self._pow2_log: TrialLog | None = None
        self._pow2_epoch = 0
        self._pow2_read = 0
        #: Knob -> [sum ln t, count] over powers of two, then over the other values.
        self._pow2_stats: dict[int, list[float]] = {}
        #: Knob position -> its group's number (twin shadowing; empty: no shadowing).
        self._group_of: dict[int, int] = {}
        self._group_knobs: list[tuple[int, ...]] = []
        self._twin_log: TrialLog | None = None
        self._twin_epoch = 0
        self._twin_read = 0
        #: Code -> its evaluated twins as (knob, code delta), read from the log so far.
        self._twins: dict[int, list[tuple[int, int]]] = {}

    def set_knob_groups(self, groups: Sequence[Sequence[int]]) -> None:
        """The knob groups (positions) of the space: twins shadow moves across groups."""
        self._group_of = {j: g for g, knobs in enumerate(groups) for j in knobs}
        self._group_knobs = [tuple(knobs) for knobs in groups]

    # -- the full chain ---------------------------------------------------------------------

    def propose(
        self,
        log: TrialLog,
        parent: int | None,
        knobs: Sequence[int],
        rng: np.random.Generator,
        pending: set[int],
    ) -> Move | None:
        """A move from ``parent`` within ``knobs``, widened then random when exhausted."""
        index = log.index
        if parent is not None:
            move = self.local(log, parent, knobs, rng, pending)
            if move is not None:
                return move
            everything = index.movable_positions
            if tuple(knobs) != everything:
                move = self.local(log, parent, everything, rng, pending)
                if move is not None:
                    return Move(move.code, "widened")
        return self.random(log, rng, pending)

    def random(self, log: TrialLog, rng: np.random.Generator, pending: set[int]) -> Move | None:
        """A uniformly random free configuration; ``None`` when the space is exhausted."""
        taken: set[int] = log.seen | pending if pending else log.seen
        code = log.index.random_free(rng, taken)
        return None if code is None else Move(code, "random")

    # -- moves from one parent --------------------------------------------------------------

    def local(
        self,
        log: TrialLog,
        parent: int,
        knobs: Sequence[int],
        rng: np.random.Generator,
        pending: set[int],
    ) -> Move | None:
        """A neighbour (or scale / two-knob / jump) move within ``knobs``; ``None`` if none."""
        if not knobs:
            return None
        move = self.rare(log, parent, knobs, rng, pending)
        if move is not None:
            return move
        return self.neighbour(log, parent, knobs, rng, pending)

    def neighbour(
        self,
        log: TrialLog,
        parent: int,
        knobs: Sequence[int],
        rng: np.random.Generator,
        pending: set[int],
    ) -> Move | None:
        """The free one-step neighbour within ``knobs`` its evaluated neighbours vouch for
        best; ``None`` if none is free."""
        index = log.index
        twins = self._twins_of(log, parent)

        def free(codes: list[int]) -> list[int]:
            out = [c for c in codes if log.is_free(c, pending)]
            return self._unshadowed(log, parent, out, twins) if twins and out else out

        options = free(index.adjacent(parent, knobs))
        if not options and self._swaps_from(log, parent):
            options = free(index.swapped(parent, knobs))
            if not options and self.settings.any_value_from_incumbent:
                options = free(index.hamming(parent, self._short(index, knobs)))
            if not options and self.settings.powers_of_two_from_incumbent:
                options = free(index.powers_of_two(parent, self._pow2_knobs(log, knobs)))
        if not options:
            return None
        return Move(self.best(log, options, rng), "neighbour")

    def any_value(
        self,
        log: TrialLog,
        parent: int,
        knobs: Sequence[int],
        rng: np.random.Generator,
        pending: set[int],
    ) -> Move | None:
        """The free configuration that differs from ``parent`` in one of ``knobs`` (any
        value: Kernel Tuner's Hamming neighbourhood) its evaluated neighbours vouch for
        best; ``None`` if none is free."""
        options = [c for c in log.index.hamming(parent, knobs) if log.is_free(c, pending)]
        if not options:
            return None
        return Move(self.best(log, options, rng), "hamming")

    def steps(self, log: TrialLog, parent: int, knobs: Sequence[int]) -> list[int]:
        """Every configuration :meth:`neighbour` may move ``parent`` to, free or not
        (shadowed moves left out: a parent whose other moves are all evaluated is exhausted;
        shadows only grow with the log, so it stays exhausted)."""
        index = log.index
        out = index.adjacent(parent, knobs)
        if self._swaps_from(log, parent):
            out += index.swapped(parent, knobs)
            if self.settings.any_value_from_incumbent:
                out += index.hamming(parent, self._short(index, knobs))
            if self.settings.powers_of_two_from_incumbent:
                out += index.powers_of_two(parent, self._pow2_knobs(log, knobs))
        twins = self._twins_of(log, parent)
        return self._unshadowed(log, parent, out, twins) if twins else out

    def _twins_of(self, log: TrialLog, parent: int) -> list[tuple[int, int]]:
        """``parent``'s evaluated twins as (knob, code delta from ``parent``): its one-knob
        (any value) neighbours that ran within ``twin_tolerance`` of it in log-latency.

        Read incrementally: each new successful code is compared once with its evaluated
        one-knob neighbours (O(sum of list lengths)), registering the pair both ways.
        """
        tolerance = self.settings.twin_tolerance
        if tolerance <= 0 or not self._group_of:
            return []
        if self._twin_log is not log or self._twin_epoch != log.epoch:
            self._twin_log, self._twin_epoch, self._twin_read = log, log.epoch, 0
            self._twins = {}
        if self._twin_read < len(log.codes):
            index = log.index
            times = log.times
            for code in log.codes[self._twin_read :]:
                t = times.get(code)
                if t is None:
                    continue
                lt = math.log(t)
                for j in self._group_of:
                    stride, card = index.strides[j], index.cards[j]
                    digit = (code // stride) % card
                    base = code - digit * stride
                    for d in range(card):
                        other = times.get(base + d * stride) if d != digit else None
                        if other is not None and abs(math.log(other) - lt) <= tolerance:
                            delta = (d - digit) * stride
                            self._twins.setdefault(code, []).append((j, delta))
                            self._twins.setdefault(code + delta, []).append((j, -delta))
            self._twin_read = len(log.codes)
        return self._twins.get(parent, [])

    def _unshadowed(
        self, log: TrialLog, parent: int, codes: list[int], twins: list[tuple[int, int]]
    ) -> list[int]:
        """``codes`` (moves of ``parent``) less those a twin of ``parent`` has answered:
        the move's image with the twin's value of its knob was evaluated, and the move
        changes no knob of that knob's group."""
        index = log.index
        seen = log.seen
        strides, cards = index.strides, index.cards
        out = []
        for c in codes:
            shadowed = False
            for j, delta in twins:
                if c + delta not in seen:
                    continue
                if all(
                    (c // strides[k]) % cards[k] == (parent // strides[k]) % cards[k]
                    for k in self._group_knobs[self._group_of[j]]
                ):
                    shadowed = True
                    break
            if not shadowed:
                out.append(c)
        return out

    def _short(self, index: SpaceIndex, knobs: Sequence[int]) -> list[int]:
        limit = self.settings.any_value_max_values
        return [j for j in knobs if not limit or index.cards[j] <= limit]

    def _pow2_knobs(self, log: TrialLog, knobs: Sequence[int]) -> list[int]:
        """The knobs of ``knobs`` longer than ``any_value_max_values`` whose evaluated
        powers of two ran faster on average (mean ``ln t``) than their other values, with
        at least ``powers_of_two_min_evidence`` successes on each side.

        The statistics are read incrementally (O(new trials x knobs) per call)."""
        index = log.index
        limit = self.settings.any_value_max_values
        long = [j for j in knobs if index.cards[j] > limit and index.pow2_digits[j]]
        if not long:
            return []
        if self._pow2_log is not log or self._pow2_epoch != log.epoch:
            self._pow2_log, self._pow2_epoch, self._pow2_read = log, log.epoch, 0
            self._pow2_stats = {}
        sized = [j for j in index.movable_positions if index.pow2_digits[j]]
        for code in log.codes[self._pow2_read :]:
            t = log.times.get(code)
            if t is None:
                continue
            lt = math.log(t)
            for j in sized:
                acc = self._pow2_stats.setdefault(j, [0.0, 0.0, 0.0, 0.0])
                side = (
                    0 if (code // index.strides[j]) % index.cards[j] in index.pow2_digits[j] else 2
                )
                acc[side] += lt
                acc[side + 1] += 1.0
        self._pow2_read = len(log.codes)
        need = self.settings.powers_of_two_min_evidence
        out = []
        for j in long:
            s_pow2, n_pow2, s_other, n_other = self._pow2_stats.get(j, [0.0, 0.0, 0.0, 0.0])
            if n_pow2 >= need and n_other >= need and s_pow2 / n_pow2 < s_other / n_other:
                out.append(j)
        return out

    def _swaps_from(self, log: TrialLog, parent: int) -> bool:
        """Swaps are tried from the incumbent only (a local optimum of the whole search)."""
        best = log.best
        return self.settings.swaps and best is not None and best.code == parent

    def rare(
        self,
        log: TrialLog,
        parent: int,
        knobs: Sequence[int],
        rng: np.random.Generator,
        pending: set[int],
    ) -> Move | None:
        """With the rare kinds' probabilities, a scale, two-knob or jump move; else ``None``.

        Draws one number from ``rng`` whatever the outcome (so callers stay reproducible).
        """
        index = log.index
        s = self.settings
        roll = rng.random()
        if not knobs:
            return None
        rare: tuple[str, list[int]] | None = None
        if roll < s.scale_prob:
            rare = ("scale", index.scaled(parent, knobs))
        elif roll < s.scale_prob + s.two_knob_prob and len(knobs) > 1:
            rare = ("two_knob", self._two_knob(index, parent, knobs, rng))
        elif roll < s.scale_prob + s.two_knob_prob + s.jump_prob:
            rare = ("jump", index.hamming(parent, knobs))
        if rare is not None:
            options = [c for c in rare[1] if log.is_free(c, pending)]
            if options:
                return Move(self.best(log, options, rng), rare[0])
        return None

    def exhausted(self, log: TrialLog, parent: int, knobs: Sequence[int]) -> bool:
        """No one-step neighbour within ``knobs`` is valid and unevaluated (pending aside).

        Permanent: the evaluated set only grows, so an exhausted parent stays exhausted.
        """
        index = log.index
        steps = self.steps(log, parent, knobs)
        return not any(c not in log.seen and index.admits(c) for c in steps)

    def _two_knob(
        self, index: SpaceIndex, parent: int, knobs: Sequence[int], rng: np.random.Generator
    ) -> list[int]:
        a, b = (int(k) for k in rng.choice(np.asarray(knobs), size=2, replace=False))
        return [
            both for first in index.adjacent(parent, (a,)) for both in index.adjacent(first, (b,))
        ]

    def score(self, log: TrialLog, code: int) -> float:
        """Predicted log-latency of ``code`` from its evaluated one-step neighbours.

        ``nan`` when none of them ran successfully (no evidence either way).
        """
        index = log.index
        logs: list[float] = []
        failed = 0
        for n in index.adjacent(code, index.movable_positions):
            t = log.times.get(n)
            if t is not None:
                logs.append(math.log(t))
            elif n in log.failed:
                failed += 1
        if not logs:
            return math.nan if not failed else self.settings.failure_penalty * failed
        return sum(logs) / len(logs) + self.settings.failure_penalty * failed

    def best(self, log: TrialLog, options: list[int], rng: np.random.Generator) -> int:
        """The option of ``options`` (non-empty) its evaluated one-step neighbours vouch
        for best: the lowest :meth:`score`; unscored ones count as average."""
        if len(options) == 1:
            return options[0]
        scores = np.array([self.score(log, c) for c in options])
        known = ~np.isnan(scores)
        if not known.any():
            return options[int(rng.integers(len(options)))]
        scores[~known] = float(np.mean(scores[known]))
        best = np.flatnonzero(scores <= scores.min() + 1e-12)
        return options[int(best[rng.integers(len(best))])]
