"""The strategy catalog: KernelBand's six optimization strategies plus parametric ``config``.

A strategy names the hardware resource it relieves (its *target*, used for masking), the
*knob groups* a parametric move under it may change, and the instruction an LLM proposer is
given when it applies the strategy by rewriting code.

Knob groups are declared by the registry entry (``knob_groups=`` of :func:`knob_groups`) or
inferred from each knob's name (case-insensitive, first matching rule wins) and values:

====================  =====================================================================
group                 rule (regular expression searched in the lower-cased name)
====================  =====================================================================
``stages``            ``stage|pipeline|prefetch|buffer`` (``num_stages``)
``warps``             ``warp|thread`` (``num_warps``, ``num_threads``)
``group``             ``group|swizzle|raster`` (``GROUP_SIZE_M``)
``unroll``            ``unroll``
``vector``            ``vec|simd|pack`` (``VEC``, ``vector_width``)
``order``             ``stride|order|transpose|major|permut|interleave`` (access order)
``work``              ``tile_size|per_thread|work|coarsen|outputs`` (work per thread/program)
``block``             ``block|tile|bs|chunk|size`` and ``b[mnk]`` / ``block_[mnk]`` shapes
``layout``            ``use_|read_only|pad|layout|shmem|smem|cmem|cache|evict``, or any
                      knob whose values are all booleans or exactly ``{0, 1}``
``other``             everything else
====================  =====================================================================

Only knobs with more than one value can move; a strategy none of whose groups has a movable
knob has no parametric move in that space (it may still be applied by an LLM).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from policies.base import KnobValue, SearchSpace

__all__ = [
    "CONFIG",
    "KNOB_GROUPS",
    "LLM_PREFIX",
    "RESOURCES",
    "STRATEGIES",
    "Strategy",
    "infer_knob_group",
    "knob_groups",
    "llm_base_strategy",
    "llm_strategy_name",
    "strategy_by_name",
    "strategy_knobs",
]

#: Resources a strategy can target; ``latency`` means "no specific resource" (never masked).
RESOURCES = ("sm", "dram", "l2", "latency")

#: Knob groups, in inference order.
KNOB_GROUPS = (
    "stages",
    "warps",
    "group",
    "unroll",
    "vector",
    "order",
    "work",
    "block",
    "layout",
    "other",
)

_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("stages", re.compile(r"stage|pipeline|prefetch|buffer")),
    ("warps", re.compile(r"warp|thread")),
    ("group", re.compile(r"group|swizzle|raster")),
    ("unroll", re.compile(r"unroll")),
    ("vector", re.compile(r"vec|simd|pack")),
    ("order", re.compile(r"stride|order|transpose|major|permut|interleave")),
    ("work", re.compile(r"tile_size|per_thread|work|coarsen|outputs")),
    ("block", re.compile(r"block|tile|(^|_)bs|chunk|size|^b[mnk]$|_b[mnk]$")),
    ("layout", re.compile(r"use_|read_only|pad|layout|shmem|smem|cmem|cache|evict")),
)


@dataclass(frozen=True)
class Strategy:
    """One optimization strategy: a level-1 arm of the hierarchical bandit, with a cluster."""

    name: str
    target: str
    knob_groups: tuple[str, ...]
    instruction: str

    def __post_init__(self) -> None:
        if self.target not in RESOURCES:
            raise ValueError(f"strategy {self.name!r}: target {self.target!r} not in {RESOURCES}")
        unknown = set(self.knob_groups) - set(KNOB_GROUPS)
        if unknown:
            raise ValueError(f"strategy {self.name!r}: unknown knob groups {sorted(unknown)}")


CONFIG = Strategy(
    name="config",
    target="latency",
    knob_groups=KNOB_GROUPS,
    instruction="Change only launch and compile-time parameters (the knobs); keep the code.",
)

#: KernelBand's six strategies, then ``config``. Order is the tie-break order of arms.
STRATEGIES: tuple[Strategy, ...] = (
    Strategy(
        name="tiling",
        target="l2",
        knob_groups=("block", "group"),
        instruction=(
            "Retile the computation: change the block/tile shape each program handles and the "
            "order programs visit tiles (grouped or swizzled launch) so that operands are "
            "reused from L2 and shared memory instead of being fetched again."
        ),
    ),
    Strategy(
        name="vectorization",
        target="dram",
        knob_groups=("vector",),
        instruction=(
            "Widen memory accesses: load and store contiguous, aligned vectors (128-bit where "
            "possible), hint contiguity and alignment (tl.multiple_of, tl.max_contiguous) so "
            "each DRAM transaction moves more useful bytes."
        ),
    ),
    Strategy(
        name="fusion",
        target="dram",
        knob_groups=("work", "unroll"),
        instruction=(
            "Fuse work: compute more outputs per program or fuse consecutive operations so "
            "intermediates stay in registers or shared memory instead of a DRAM round trip."
        ),
    ),
    Strategy(
        name="pipeline",
        target="sm",
        knob_groups=("stages", "warps"),
        instruction=(
            "Pipeline the main loop: overlap loads of the next tile with compute on the "
            "current one (software pipelining, num_stages), and balance warps per program to "
            "keep the SMs' issue slots busy."
        ),
    ),
    Strategy(
        name="reordering",
        target="sm",
        knob_groups=("order", "unroll"),
        instruction=(
            "Reorder computation: change loop order, unrolling and the order of independent "
            "instructions to remove dependency stalls and redundant index arithmetic."
        ),
    ),
    Strategy(
        name="access_layout",
        target="dram",
        knob_groups=("layout", "vector"),
        instruction=(
            "Change the data access layout: coalesce global accesses, stage data through "
            "shared memory or read-only caches, pad to avoid bank conflicts, transpose on load."
        ),
    ),
    CONFIG,
)

_BY_NAME = {s.name: s for s in STRATEGIES}


def strategy_by_name(name: str) -> Strategy:
    """The catalog entry called ``name``; an unknown name lists the valid ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        valid = ", ".join(_BY_NAME)
        raise ValueError(f"unknown strategy {name!r}; valid strategies: {valid}") from None


#: Arms that apply a strategy by an LLM rewrite carry ``"llm:<strategy>"`` as their strategy.
LLM_PREFIX = "llm:"


def llm_strategy_name(name: str) -> str:
    """The strategy name of an LLM rewrite under strategy ``name`` (``"llm:tiling"``)."""
    return f"{LLM_PREFIX}{name}"


def llm_base_strategy(name: str | None) -> str | None:
    """``"tiling"`` for ``"llm:tiling"``; ``None`` for a parametric strategy name."""
    if name is None or not name.startswith(LLM_PREFIX):
        return None
    return name[len(LLM_PREFIX) :]


def _is_flag(values: Sequence[KnobValue]) -> bool:
    if values and all(isinstance(v, bool) for v in values):
        return True
    return len(values) == 2 and {v for v in values if not isinstance(v, str)} == {0, 1}


def infer_knob_group(name: str, values: Sequence[KnobValue] = ()) -> str:
    """The knob group of one knob, by the rules in this module's docstring."""
    lowered = name.lower()
    for group, pattern in _RULES:
        if group == "layout" and _is_flag(values):
            return "layout"
        if pattern.search(lowered):
            return group
    return "layout" if _is_flag(values) else "other"


def knob_groups(
    space: SearchSpace, declared: Mapping[str, str] | None = None
) -> dict[str, tuple[str, ...]]:
    """Group -> knob names of ``space``; ``declared`` (knob -> group) overrides inference."""
    declared = declared or {}
    out: dict[str, list[str]] = {}
    for name, values in space.knobs.items():
        group = declared.get(name) or infer_knob_group(name, tuple(values))
        if group not in KNOB_GROUPS:
            raise ValueError(f"knob {name!r}: unknown knob group {group!r}; valid: {KNOB_GROUPS}")
        out.setdefault(group, []).append(name)
    return {g: tuple(names) for g, names in out.items()}


def strategy_knobs(strategy: Strategy, groups: Mapping[str, Iterable[str]]) -> tuple[str, ...]:
    """The knob names a parametric move under ``strategy`` may change."""
    return tuple(name for g in strategy.knob_groups for name in groups.get(g, ()))
