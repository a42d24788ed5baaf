"""Value checks shared by the configuration sections (the daemon's and the LLM's).

A check takes a raw YAML value and returns ``(value, None)`` when it is allowed (converted),
else ``(None, what is allowed)``: the error message names the key, and says what to write.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Check", "boolean", "number"]

Check = Callable[[object], "tuple[Any, str | None]"]


def number(low: float, high: float | None = None, *, integer: bool = False) -> Check:
    """A number (an integer with ``integer``) in ``[low, high]``; booleans are refused."""
    kind = "an integer" if integer else "a number"
    allowed = f"{kind} >= {low:g}" + (f" and <= {high:g}" if high is not None else "")

    def check(value: object) -> tuple[Any, str | None]:
        ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok_type:
            return None, allowed
        assert isinstance(value, (int, float))
        if value < low or (high is not None and value > high):
            return None, allowed
        return (int(value) if integer else float(value)), None

    return check


def boolean(value: object) -> tuple[Any, str | None]:
    """``true`` or ``false``."""
    return (value, None) if isinstance(value, bool) else (None, "true or false")
