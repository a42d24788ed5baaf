"""The candidate values of discovered knobs: which rule covers a knob, and its values.

A knob is a performance parameter: ``num_warps``, ``num_stages``, or a name that says block or
tile (sizes), group (swizzles) or split (work split over more programs). Booleans, floats and
strings never are (:func:`knob_rule`). Values are either absolute, on a ladder around a
literal baseline (:func:`candidate_values`), or transforms of a value the code computes from
the shape (:func:`scale_values`: ``x2``, ``/2``, ``x1`` the value itself), clamped to
:func:`bounds`, so that a knob stays valid on every shape.
"""

from __future__ import annotations

import re

__all__ = [
    "BLOCK_BOUNDS",
    "BLOCK_OCTAVES",
    "DOT_BLOCK_BOUNDS",
    "GROUPS",
    "LONE_BLOCK_REACH",
    "STAGES",
    "WARPS",
    "bounds",
    "candidate_values",
    "knob_rule",
    "ladder",
    "scale_values",
]

#: Octaves (factors of two) searched below and above a block size found in the source.
BLOCK_OCTAVES = 3
#: Where the ladder of a kernel's only block size reaches at least, when it calls no
#: ``tl.dot`` (:func:`candidate_values`).
LONE_BLOCK_REACH = 1024
#: Bounds of discovered block sizes: ``tl.arange`` takes powers of two, a block of 2^16
#: elements is already far past what one program holds in registers.
BLOCK_BOUNDS = (1, 1 << 16)
#: Bounds for block sizes of kernels that call ``tl.dot``: it needs every dimension >= 16, and
#: tiles past 256 exceed shared memory on current GPUs.
DOT_BLOCK_BOUNDS = (16, 256)
WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5)
GROUPS = (1, 2, 4, 8, 16)
#: Bounds of transformed num_warps / num_stages.
WARP_BOUNDS = (1, 32)
STAGE_BOUNDS = (1, 8)
_BLOCK_RE = re.compile(r"BLOCK|TILE", re.IGNORECASE)
#: The short block names of many libraries (``BD``, ``BK``, ``BT``, ``BV``: B and the
#: dimension's letter), upper case only.
_SHORT_BLOCK_RE = re.compile(r"^B[A-Z]{1,2}$")
_GROUP_RE = re.compile(r"GROUP", re.IGNORECASE)
_SPLIT_RE = re.compile(r"SPLIT", re.IGNORECASE)
#: A split named as a size (``SPLIT_SIZE``: the elements one program takes) is a block.
_SIZE_RE = re.compile(r"SIZE", re.IGNORECASE)


def knob_rule(names: set[str], baseline: object) -> str | None:
    """Which value rule covers a knob fed to ``names`` (kernel parameters or launch options).
    None: not a performance parameter (booleans, floats, strings and flags never are)."""
    if isinstance(baseline, bool) or not isinstance(baseline, int):
        return None
    if "num_warps" in names:
        return "warps"
    if "num_stages" in names:
        return "stages"
    if any(_SPLIT_RE.search(n) and not _SIZE_RE.search(n) for n in names):
        return "split"
    if any(_GROUP_RE.search(n) for n in names):
        return "group"
    if any(_BLOCK_RE.search(n) or _SHORT_BLOCK_RE.match(n) for n in names):
        return "block"
    if any(_SPLIT_RE.search(n) for n in names):
        return "block"  # a split named as a size: SPLIT_SIZE
    return None


def ladder(low: int, high: int) -> tuple[int, ...]:
    values, v = [], 1
    while v <= high:
        if v >= low:
            values.append(v)
        v <<= 1
    return tuple(values)


def candidate_values(
    rule: str, baseline: object, *, uses_dot: bool, shrink: bool = True, lone: bool = False
) -> tuple[int, ...]:
    """The absolute candidate values of a knob under ``rule`` around ``baseline``. A block
    that must not shrink starts at the baseline. The ``lone`` block of kernels without
    ``tl.dot`` (the one block size they take: elementwise and row kernels) reaches at least
    :data:`LONE_BLOCK_REACH`, however small its baseline: code written with ``BLOCK_SIZE=4``
    or ``16`` runs fastest near a thousand, more than three octaves away."""
    assert isinstance(baseline, int) and not isinstance(baseline, bool)
    if rule == "warps":
        return (*WARPS, 32) if baseline >= 16 else WARPS
    if rule == "stages":
        return STAGES
    if rule in ("group", "split") and baseline <= GROUPS[-1]:
        return GROUPS
    if rule in ("group", "split"):  # a count past the usual ones: the ladder around it
        centre = 1 << baseline.bit_length() - 1
        return ladder(max(1, centre >> BLOCK_OCTAVES), centre << BLOCK_OCTAVES)
    low, high = DOT_BLOCK_BOUNDS if uses_dot else BLOCK_BOUNDS
    centre = 1 << max(baseline, 1).bit_length() - 1  # the power of two at or below it
    low = max(low, centre >> BLOCK_OCTAVES if shrink else baseline)
    reach = LONE_BLOCK_REACH if lone and not uses_dot else 0
    high = min(high, max(centre << BLOCK_OCTAVES, reach))
    return ladder(low, high)


def scale_values(rule: str, *, shrink: bool) -> tuple[str, ...]:
    """The transforms of a computed value (``x1`` is the value itself, the baseline)."""
    if rule == "block":
        return ("/8", "/4", "/2", "x1", "x2", "x4", "x8") if shrink else ("x1", "x2")
    if rule == "warps":
        return ("/4", "/2", "x1", "x2", "x4")
    if rule == "stages":
        return ("/2", "x1", "x2")
    return ()


def bounds(rule: str, uses_dot: bool) -> tuple[int, int]:
    if rule == "warps":
        return WARP_BOUNDS
    if rule == "stages":
        return STAGE_BOUNDS
    return DOT_BLOCK_BOUNDS if uses_dot else BLOCK_BOUNDS
