"""Checks of ``knobs``: the declared search space, and the values Triton accepts."""

from __future__ import annotations

import math

from tuned.registry.problems import Problems, show
from tuned.registry.spec import KnobValue
from tuned.registry.validate import is_identifier, is_int

__all__ = ["check_knobs"]

#: Largest number of elements of one Triton tensor (``triton.language.TRITON_MAX_TENSOR_NUMEL``).
_MAX_BLOCK = 1 << 20


def _power_of_two(value: KnobValue, low: int, high: int) -> bool:
    return is_int(value) and low <= value <= high and value & (value - 1) == 0


def _triton_rule(name: str, value: KnobValue) -> str | None:
    """Why Triton would reject ``value`` for the knob ``name``, or None."""
    if name == "num_warps" and not _power_of_two(value, 1, 32):
        return "num_warps must be a power of two between 1 and 32"
    if name in ("num_stages", "num_ctas") and not (is_int(value) and value >= 1):
        return f"{name} must be an integer >= 1"
    if name == "maxnreg" and not (is_int(value) and 1 <= value <= 255):
        return "maxnreg must be an integer between 1 and 255"
    if name.upper().startswith("BLOCK") and not _power_of_two(value, 1, _MAX_BLOCK):
        return f"{name} is a block size: tl.arange needs a power of two between 1 and {_MAX_BLOCK}"
    return None


def _knob_kind(value: KnobValue) -> str:
    if isinstance(value, bool):
        return "booleans"
    return "strings" if isinstance(value, str) else "numbers"


def check_knobs(value: object, out: Problems) -> dict[str, tuple[KnobValue, ...]]:
    """The declared search space (empty when ``knobs`` is absent)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        out.add(
            "knobs",
            "must be a mapping of knob name to a list of values, e.g. "
            f"{{BLOCK_SIZE: [256, 512], num_warps: [4, 8]}}, got {show(value)}",
        )
        return {}
    knobs: dict[str, tuple[KnobValue, ...]] = {}
    for name, values in value.items():
        where = f"knobs.{name}"
        if not is_identifier(name):
            out.add(
                "knobs",
                f"knob name {show(name)} is not a Python identifier; knobs are "
                "passed to the launcher as keyword arguments",
            )
            continue
        if not isinstance(values, list) or not values:
            out.add(
                where, f"must be a non-empty list of values, e.g. [1, 2, 4], got {show(values)}"
            )
            continue
        scalars: list[KnobValue] = []
        first_at: dict[tuple[str, KnobValue], int] = {}
        for j, v in enumerate(values):
            at = f"{where}[{j}]"
            if not isinstance(v, (bool, int, float, str)):
                out.add(at, f"must be a scalar (int, float, bool or string), got {show(v)}")
            elif isinstance(v, float) and not math.isfinite(v):
                out.add(at, f"must be a finite number, got {v}")
            elif (_knob_kind(v), v) in first_at:
                out.add(
                    at,
                    f"duplicates {where}[{first_at[(_knob_kind(v), v)]}] ({show(v)}); "
                    "list each value once",
                )
            else:
                first_at[(_knob_kind(v), v)] = j
                scalars.append(v)
                rule = _triton_rule(name, v)
                if rule is not None:
                    out.add(at, f"{rule}, got {show(v)}")
        kinds = sorted({_knob_kind(v) for v in scalars})
        if len(kinds) > 1:
            out.add(
                where,
                f"values mix {' and '.join(kinds)}; the values of one knob must be "
                "all numbers, all strings or all booleans",
            )
        knobs[name] = tuple(scalars)
    return knobs
