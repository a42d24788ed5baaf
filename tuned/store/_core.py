"""What every store engine provides to the shared SQL: transactions and queries.

The store's statements live in the engine-neutral modules (:mod:`tuned.store.records`,
:mod:`tuned.store.reads`, :mod:`tuned.store.claims`); an engine (:class:`SqliteStore`,
:class:`PostgresStore`) subclasses :class:`tuned.store.api.Store` and implements the three
hooks below. Statements use ``?`` placeholders; the engine rewrites them
(:meth:`tuned.store.dialect.Dialect.sql`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Protocol

from tuned.store.dialect import Dialect

__all__ = ["Row", "SqlCore", "Tx"]


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
