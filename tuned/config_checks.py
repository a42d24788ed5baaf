"""Value checks shared by the configuration sections (the daemon's and the LLM's).

A check takes a raw YAML value and returns ``(value, None)`` when it is allowed (converted),
else ``(None, what is allowed)``: the error message names the key, and says what to write.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["Check", "boolean", "number"]

Check = Callable[[object], "tuple[Any, str | None]"]


#: The largest integer a setting may hold: what a 64-bit store column or C API takes.
MAX_INTEGER = (1 << 63) - 1


def number(low: float, high: float | None = None, *, integer: bool = False) -> Check:
    """A finite number (an integer with ``integer``) in ``[low, high]``; booleans, NaN,
    infinities and integers beyond a float (or beyond :data:`MAX_INTEGER`) are refused."""
    kind = "an integer" if integer else "a number"
    allowed = f"{kind} >= {low:g}" + (f" and <= {high:g}" if high is not None else "")

    def check(value: object) -> tuple[Any, str | None]:
        ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok_type:
            return None, allowed
        assert isinstance(value, (int, float))
        if isinstance(value, int) and abs(value) > (MAX_INTEGER if integer else sys.float_info.max):
            return None, f"{allowed} (this one is too large)"
        if not math.isfinite(value):  # NaN compares false with every bound: refuse it first
            return None, f"{allowed} (not NaN or infinity)"
        if value < low or (high is not None and value > high):
            return None, allowed
        return (int(value) if integer else float(value)), None

    return check


def boolean(value: object) -> tuple[Any, str | None]:
    """``true`` or ``false``."""
    return (value, None) if isinstance(value, bool) else (None, "true or false")
