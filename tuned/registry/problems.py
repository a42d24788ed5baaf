"""What the loader reports about a bad registry entry: :class:`Problem` and its rendering."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Problem", "Problems", "format_problems", "show"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a registry entry: which file, which field, and why.

    ``field`` is a dotted and indexed path into ``kernel.yaml`` (``shapes[1].N``,
    ``knobs.num_warps[2]``), or ``""`` when the problem concerns a whole file.
    """

    file: Path
    field: str
    reason: str

    def __str__(self) -> str:
        reason = self.reason.replace("\n", " ")
        if self.field:
            return f"{self.file}: field '{self.field}': {reason}"
        return f"{self.file}: {reason}"


def format_problems(problems: Iterable[Problem]) -> str:
    """One line per problem, in the order given (the order they were found)."""
    return "\n".join(str(p) for p in problems)


class Problems:
    """The problems of one entry, in the order found; ``file`` is where fields live."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.items: list[Problem] = []

    def add(self, field: str, reason: str, *, file: Path | None = None) -> None:
        self.items.append(
            Problem(file=self.file if file is None else file, field=field, reason=reason)
        )

    def __len__(self) -> int:
        return len(self.items)


def show(value: object) -> str:
    """A short, single-line rendering of a user-given value for a message."""
    if value is None:
        return "null"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
