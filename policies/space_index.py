"""Integer codes for the configurations of a search space, and their neighbourhoods.

Every configuration of a :class:`~policies.base.SearchSpace` is a vector of *digits*, one
per knob: the position of its value in that knob's declared (ordered) value list. A
configuration's *code* is the mixed-radix number of its digits, first knob most significant,
the same order as :meth:`SearchSpace.config_at`. Policies work on codes (cheap to hash, to
store in sets and to step through), and decode only what they return.

*Adjacent* moves step a knob to the next or previous value of its list; this is the
neighbourhood of Kernel Tuner's ``strictly-adjacent`` and of the hill climbers in this package.
The optional validity predicate of the space is evaluated at most once per code (cached).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence

import numpy as np

from policies.base import Config, KnobValue, SearchSpace

__all__ = ["ENUMERATE_LIMIT", "SpaceIndex"]

#: Spaces up to this size may be enumerated (to find the last free configurations exactly);
#: larger ones are only ever sampled.
ENUMERATE_LIMIT = 250_000

# Rejection draws before enumerating (small spaces) or giving up (huge spaces).
_REJECTION_DRAWS = 64
#: Spaces of at least this many configurations are drawn knob by knob.
_ONE_DRAW_LIMIT = 2**63
_HUGE_SPACE_DRAWS = 20_000


def _scale_steps(values: Sequence[KnobValue]) -> tuple[tuple[int, ...], ...]:
    """Per value position: positions of twice and half the value, when not adjacent."""
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    position = {v: i for i, v in enumerate(values)} if numeric else {}
    out = []
    for i, v in enumerate(values):
        steps: list[int] = []
        if numeric and isinstance(v, (int, float)) and v > 0:
            for target in (v * 2, v / 2):
                j = position.get(target)
                if j is not None and abs(j - i) > 1:
                    steps.append(j)
        out.append(tuple(steps))
    return tuple(out)


def _powers_of_two(values: Sequence[KnobValue]) -> tuple[int, ...]:
    """Positions of the powers of two in an integer size list; ``()`` for other lists."""
    if not _is_size_list(values) or not all(type(v) is int for v in values):
        return ()
    return tuple(
        i for i, v in enumerate(values) if isinstance(v, int) and v > 0 and not v & (v - 1)
    )


def _is_size_list(values: Sequence[KnobValue]) -> bool:
    """Numeric values that are not just a flag (``{0, 1}``)."""
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    return numeric and not set(values) <= {0, 1}


class SpaceIndex:
    """Codes, digits and validity of one :class:`SearchSpace` (built once, then cheap)."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.names: tuple[str, ...] = tuple(space.knobs)
        self.values: tuple[tuple[KnobValue, ...], ...] = tuple(
            tuple(v) for v in space.knobs.values()
        )
        self.cards: tuple[int, ...] = tuple(len(v) for v in self.values)
        self.size: int = math.prod(self.cards)
        strides = [1] * len(self.cards)
        for j in range(len(self.cards) - 2, -1, -1):
            strides[j] = strides[j + 1] * self.cards[j + 1]
        self.strides: tuple[int, ...] = tuple(strides)
        self._position: tuple[dict[KnobValue, int], ...] = tuple(
            {value: i for i, value in enumerate(values)} for values in self.values
        )
        self._valid: dict[int, bool] = {}
        self._valid_codes: np.ndarray | None = None
        self.movable_positions: tuple[int, ...] = tuple(
            j for j, card in enumerate(self.cards) if card > 1
        )
        self._scaled_digits: tuple[tuple[tuple[int, ...], ...], ...] = tuple(
            _scale_steps(values) for values in self.values
        )
        #: Per knob, the value positions of its powers of two (integer size lists only,
        #: not flags): the sizes GPU kernels tend to favour.
        self.pow2_digits: tuple[tuple[int, ...], ...] = tuple(
            _powers_of_two(values) for values in self.values
        )
        #: Pairs of *twin* knobs: the same list of numeric values, not a flag
        #: (``BLOCK_M``/``BLOCK_N``, ``tile_size_x``/``tile_size_y``).
        sizes = [j for j in self.movable_positions if _is_size_list(self.values[j])]
        self.twins: tuple[tuple[int, int], ...] = tuple(
            (i, j) for i in sizes for j in sizes if i < j and self.values[i] == self.values[j]
        )

    def __deepcopy__(self, memo: dict[int, object]) -> SpaceIndex:
        """The index itself: it is a function of its space, and its caches (validity,
        enumeration) only memoize that function, so a copy of a policy shares it with
        the original. Neither the space's ``is_valid`` (often a method of an evaluator,
        e.g. a replay cache) nor what it has learnt is copied."""
        return self

    def matches(self, space: SearchSpace) -> bool:
        """Whether ``space`` is this index's space: the same knobs and restriction."""
        return space is self.space or (
            space.is_valid == self.space.is_valid and dict(space.knobs) == dict(self.space.knobs)
        )

    # -- encoding ---------------------------------------------------------------------------

    def encode(self, config: Config) -> int | None:
        """The code of ``config``; ``None`` when it is not a configuration of the space."""
        if len(config) != len(self.names):
            return None
        code = 0
        for name, stride, position in zip(self.names, self.strides, self._position):
            if name not in config:
                return None
            digit = position.get(config[name])
            if digit is None:
                return None
            code += digit * stride
        return code

    def decode(self, code: int) -> dict[str, KnobValue]:
        """The configuration of a code."""
        return {
            name: values[digit]
            for name, values, digit in zip(self.names, self.values, self.digits(code))
        }

    def digits(self, code: int) -> list[int]:
        """The value position of every knob, in knob order."""
        out = []
        for stride, card in zip(self.strides, self.cards):
            out.append((code // stride) % card)
        return out

    def code_of(self, digits: Sequence[int]) -> int:
        """The code of a digit vector (inverse of :meth:`digits`)."""
        return sum(d * s for d, s in zip(digits, self.strides))

    # -- validity ---------------------------------------------------------------------------

    def admits(self, code: int) -> bool:
        """Whether the configuration is part of the (possibly restricted) space."""
        if self.space.is_valid is None:
            return 0 <= code < self.size
        known = self._valid.get(code)
        if known is None:
            known = bool(self.space.is_valid(self.decode(code)))
            self._valid[code] = known
        return known

    def valid_codes(self) -> np.ndarray:
        """All codes of the space, ascending (enumerates; only for ``size <= ENUMERATE_LIMIT``)."""
        if self.size > ENUMERATE_LIMIT:
            raise ValueError(
                f"a space of {self.size} configurations is too large to enumerate "
                f"(limit {ENUMERATE_LIMIT}); sample it instead"
            )
        if self._valid_codes is None:
            codes = np.arange(self.size, dtype=np.int64)
            if self.space.is_valid is not None:
                codes = codes[[self.admits(int(c)) for c in codes]]
            self._valid_codes = codes
        return self._valid_codes

    # -- sampling and neighbourhoods --------------------------------------------------------

    def random_code(self, rng: np.random.Generator) -> int:
        """A uniformly random code of the cartesian space (valid or not). One draw below
        2**63 configurations; a draw per knob above (numpy's integers stop at int64)."""
        if self.size < _ONE_DRAW_LIMIT:
            return int(rng.integers(self.size))
        return self.code_of([int(rng.integers(card)) for card in self.cards])

    def random_free(self, rng: np.random.Generator, taken: Collection[int]) -> int | None:
        """A uniformly random valid code not in ``taken``; ``None`` when there is none.

        Rejection sampling first; small spaces are then enumerated, so ``None`` is exact for
        them. For spaces above :data:`ENUMERATE_LIMIT`, ``None`` means that many thousands of
        draws found nothing free, which is as close to "exhausted" as sampling can tell.
        """
        if self.size == 0:
            return None
        for _ in range(_REJECTION_DRAWS):
            code = self.random_code(rng)
            if code not in taken and self.admits(code):
                return code
        if self.size <= ENUMERATE_LIMIT:
            codes = self.valid_codes()
            if taken:
                codes = codes[~np.isin(codes, np.fromiter(taken, dtype=np.int64))]
            return int(codes[rng.integers(len(codes))]) if len(codes) else None
        for _ in range(_HUGE_SPACE_DRAWS):
            code = self.random_code(rng)
            if code not in taken and self.admits(code):
                return code
        return None

    def adjacent(self, code: int, knobs: Iterable[int]) -> list[int]:
        """Codes one step away in one of ``knobs`` (positions), valid or not."""
        out = []
        for j in knobs:
            stride, card = self.strides[j], self.cards[j]
            digit = (code // stride) % card
            if digit > 0:
                out.append(code - stride)
            if digit < card - 1:
                out.append(code + stride)
        return out

    def hamming(self, code: int, knobs: Iterable[int]) -> list[int]:
        """Codes that differ from ``code`` in exactly one of ``knobs``, any value."""
        out: list[int] = []
        for j in knobs:
            stride, card = self.strides[j], self.cards[j]
            digit = (code // stride) % card
            base = code - digit * stride
            out.extend(base + d * stride for d in range(card) if d != digit)
        return out

    def scaled(self, code: int, knobs: Iterable[int]) -> list[int]:
        """Codes with one of ``knobs`` doubled or halved (numeric values in the list only).

        Steps that are also adjacent (powers-of-two lists) are left to :meth:`adjacent`.
        """
        out: list[int] = []
        for j in knobs:
            stride, card = self.strides[j], self.cards[j]
            digit = (code // stride) % card
            out.extend(code + (d - digit) * stride for d in self._scaled_digits[j][digit])
        return out

    def powers_of_two(self, code: int, knobs: Iterable[int]) -> list[int]:
        """Codes with one of ``knobs`` set to another power of two of its list (see
        :attr:`pow2_digits`; knobs without powers of two give none)."""
        out: list[int] = []
        for j in knobs:
            stride, card = self.strides[j], self.cards[j]
            digit = (code // stride) % card
            out.extend(code + (d - digit) * stride for d in self.pow2_digits[j] if d != digit)
        return out

    def swapped(self, code: int, knobs: Iterable[int]) -> list[int]:
        """Codes with the values of two *twin* knobs of ``knobs`` exchanged (twins: knobs
        with the same value list, as the M and N tile sizes of a matmul); only where the
        two values differ. A transposed tile shape is one move, not two uphill steps."""
        wanted = set(knobs)
        out: list[int] = []
        for i, j in self.twins:
            if i in wanted and j in wanted:
                a = (code // self.strides[i]) % self.cards[i]
                b = (code // self.strides[j]) % self.cards[j]
                if a != b:
                    out.append(code + (b - a) * self.strides[i] + (a - b) * self.strides[j])
        return out

    def with_digit(self, code: int, knob: int, digit: int) -> int:
        """``code`` with knob ``knob`` set to value position ``digit``."""
        stride, card = self.strides[knob], self.cards[knob]
        return code + (digit - (code // stride) % card) * stride

    def movable(self, names: Iterable[str]) -> tuple[int, ...]:
        """Positions of the named knobs that have more than one value (others cannot move)."""
        wanted = set(names)
        return tuple(j for j, n in enumerate(self.names) if n in wanted and self.cards[j] > 1)
