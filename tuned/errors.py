"""The one exception hierarchy of ktuned.

Every error a user can cause (a bad registry entry, a bad command line, an unusable state
directory) is a :class:`TunedError` whose message says what went wrong, where, and what to do.
The command line turns these into exit code 2 without a traceback.
"""

from __future__ import annotations

__all__ = [
    "BadInputError",
    "RegistryError",
    "StoreError",
    "TunedError",
    "WorkerError",
]


class TunedError(Exception):
    """Root of every error ktuned raises on purpose."""


class BadInputError(TunedError):
    """Input given by the user cannot be used (command-line values, paths, names)."""


class RegistryError(BadInputError):
    """A registry entry is invalid. ``problems`` lists every problem found, not only the first."""

    def __init__(self, problems: list[object]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class StoreError(TunedError):
    """The state store cannot be opened or written (permissions, full disk, newer schema)."""


class WorkerError(TunedError):
    """An evaluation worker could not be started at all (not: a candidate that failed)."""
