"""What every store engine provides to the shared SQL: transactions and queries.

The store's statements live in the engine-neutral modules (:mod:`tuned.store.records`,
:mod:`tuned.store.reads`, :mod:`tuned.store.claims`); an engine (:class:`SqliteStore`,
:class:`PostgresStore`) subclasses :class:`tuned.store.api.Store` and implements the three
hooks below. Statements use ``?`` placeholders; the engine rewrites them
(:meth:`tuned.store.dialect.Dialect.sql`).
"""

from __future__ import annotations

import functools
import math
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import fields, is_dataclass
from typing import Any, ClassVar, Protocol, TypeVar, cast

from tuned.errors import StoreError
from tuned.store.dialect import Dialect

__all__ = [
    "Row",
    "SqlCore",
    "Tx",
    "damaged_store_error",
    "is_damage",
    "reads_stored",
    "stored_type_problem",
]

_F = TypeVar("_F", bound=Callable[..., Any])


class Row(Protocol):
    """A result row, read by column name (``r["kernel"]``) or position (``r[0]``)."""

    def __getitem__(self, key: int | str, /) -> Any: ...

    def keys(self) -> list[str]: ...


class Tx(Protocol):
    """The statements of one transaction (see :meth:`SqlCore._transaction`)."""

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one statement; the number of rows it changed."""
        ...

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        """Run one query; every row of its result."""
        ...


class SqlCore:
    """The hooks an engine implements. Not thread-safe: one store object per thread (the
    daemon's metrics collector opens its own)."""

    dialect: ClassVar[Dialect]

    @property
    def location(self) -> str:
        """Where the data lives, for messages (a path, or a URL without its password)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def checkpoint(self, wait_s: float = 2.0) -> None:
        """Make what was written durable in the engine's main files (before a clean stop);
        a no-op where the engine does that itself."""

    def _transaction(self) -> AbstractContextManager[Tx]:
        """One transaction: everything in it is saved, or (on any error) nothing.

        Engine errors become :class:`tuned.errors.StoreError` saying that nothing of this
        write was saved. Writers are serialized (SQLite's write lock; PostgreSQL's row locks
        and ``SELECT ... FOR UPDATE``)."""
        raise NotImplementedError

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        """One read outside any write transaction."""
        raise NotImplementedError


def marks(n: int) -> str:
    """``?, ?, ...`` for an ``IN (...)`` list of ``n`` values."""
    return ",".join("?" * n)


def chunks(values: Sequence[str], size: int = 400) -> Iterator[Sequence[str]]:
    """``values`` in slices short enough for SQLite's host-parameter limit."""
    for i in range(0, len(values), size):
        yield values[i : i + size]


#: SQLite's words for a file whose bytes are not a sound database.
_DAMAGE = ("malformed", "not a database", "could not decode", "disk image", "corrupt")


def is_damage(exc: BaseException) -> bool:
    """Whether ``exc`` says a SQLite file's bytes are damaged (not: locked, full, ...)."""
    if isinstance(exc, UnicodeDecodeError):
        return True  # text that is not UTF-8 where ktuned only writes UTF-8
    return isinstance(exc, sqlite3.DatabaseError) and any(
        word in str(exc).lower() for word in _DAMAGE
    )


def damaged_store_error(location: str, exc: BaseException) -> StoreError:
    """The error for a store whose stored bytes are damaged: what, where, and what to do.

    Raised before anything is written: a damaged store is never written to by ktuned."""
    detail = str(exc).encode("utf-8", "replace").decode("utf-8", "replace")
    detail = detail if len(detail) <= 120 else detail[:117] + "..."
    return StoreError(
        f"the store {location} is damaged ({type(exc).__name__}: {detail}); ktuned wrote "
        "nothing to it. Stop every ktuned using it and move it aside (SQLite: "
        f"mv {location} {location}.damaged, with its -wal and -shm files), then restore it "
        "from a backup or start afresh (a new store is created); `sqlite3 FILE .recover` "
        "may salvage its rows"
    )


def reads_stored(method: _F) -> _F:
    """Mark a read method that decodes stored rows (JSON, enums, columns by name): data
    that does not decode (flipped bytes, a damaged schema) or decodes to the wrong types
    (knobs that are not an object of scalars, a time that is not a finite number >= 0)
    raises :func:`damaged_store_error` instead of a ``ValueError``/``KeyError`` traceback."""

    @functools.wraps(method)
    def wrapper(self: SqlCore, *args: Any, **kwargs: Any) -> Any:
        try:
            result = method(self, *args, **kwargs)
        except (ValueError, KeyError, IndexError, TypeError) as exc:  # JSON, enum, Row, shape
            raise damaged_store_error(self.location, exc) from exc
        problem = stored_type_problem(result)
        if problem:
            raise damaged_store_error(self.location, ValueError(problem))
        return result

    return cast(_F, wrapper)


#: Read-model fields holding a stored time in seconds, and the column they come from.
_TIME_FIELDS = {
    "time_s": "evaluations.time_s",
    "baseline_time_s": "evaluations.time_s",
    "baseline_s": "evaluations.time_s",
    "best_s": "evaluations.time_s",
    "wall_s": "evaluations.wall_s",
}
_SCALARS = (bool, int, float, str)


def _bad_time(value: Any) -> bool:
    """Whether ``value`` is not a time: ``None`` or a finite number >= 0."""
    if value is None:
        return False
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    return not (math.isfinite(value) and value >= 0)


def _bad_knobs(value: Any) -> bool:
    """Whether ``value`` is not knob values: an object of names to scalars (finite numbers)."""
    if not isinstance(value, Mapping):
        return True
    return any(
        not isinstance(k, str)
        or not isinstance(v, _SCALARS)
        or (isinstance(v, float) and not math.isfinite(v))
        for k, v in value.items()
    )


def _row_id(row: Any) -> str:
    for name in ("candidate_id", "name", "id", "seq"):
        value = getattr(row, name, None)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            what = "kernel" if name == "name" else name.replace("_id", "")
            return f"{what} {str(value)[:40]!r}"
    return "?"


def stored_type_problem(value: Any, depth: int = 0) -> str:
    """What in a read model (a dataclass, or lists/tuples/dicts of them) has a decoded
    type ktuned never stores, naming the table, column and row; "" when all is well."""
    if depth > 4:
        return ""
    if is_dataclass(value) and not isinstance(value, type):
        where = _row_id(value)
        if _timeless_ok(value):  # ktuned stores a time with every successful evaluation
            return f"evaluations.time_s of {where} is NULL, but its outcome is ok"
        for f in fields(value):
            v = getattr(value, f.name)
            if f.name == "knobs" and _bad_knobs(v):
                return f"candidates.knobs_json of {where} is {_short(v)}, not an object of scalars"
            if f.name in _TIME_FIELDS and _bad_time(v):
                return f"{_TIME_FIELDS[f.name]} of {where} is {_short(v)}, not a finite number >= 0"
            if f.name == "timings" and isinstance(v, Mapping):
                bad = next((k for k, t in v.items() if _bad_time(t)), None)
                if bad is not None:
                    return (
                        f"evaluations.result_json of {where} has timing {_short(bad)} = "
                        f"{_short(v[bad])}, not a finite number >= 0"
                    )
            elif f.name == "result":  # an EvalResult decoded from evaluations.result_json
                times = [("time_s", getattr(v, "time_s", None))]
                timings = getattr(v, "timings", {})
                times += list(timings.items()) if isinstance(timings, Mapping) else []
                if _timeless_ok(v):
                    return f"evaluations.result_json of {where} is ok without a time_s"
                for label, t in times:
                    if _bad_time(t):
                        return (
                            f"evaluations.result_json of {where} has {label} {_short(t)}, "
                            "not a finite number >= 0"
                        )
            elif isinstance(v, (list, tuple)) or (is_dataclass(v) and not isinstance(v, type)):
                found = stored_type_problem(v, depth + 1)
                if found:
                    return found
        return ""
    if isinstance(value, (list, tuple)):
        for item in value:
            if is_dataclass(item) or isinstance(item, (list, tuple)):
                found = stored_type_problem(item, depth + 1)
                if found:
                    return found
    return ""


def _timeless_ok(row: Any) -> bool:
    """Whether ``row`` (a read model with ``outcome`` and ``time_s``) is a successful
    evaluation without a time."""
    outcome = getattr(row, "outcome", None)
    return getattr(outcome, "value", outcome) == "ok" and (
        hasattr(row, "time_s") and row.time_s is None
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
