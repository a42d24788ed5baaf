"""The fleet store: one PostgreSQL database shared by every daemon of a fleet.

Needs psycopg 3 (``pip install 'ktuned[fleet]'``), imported when a store is opened. The
schema version is the ``ktuned_schema`` table; migrations (:mod:`tuned.store.schema`) run
under a transaction-scoped advisory lock, so daemons starting together migrate once. Each
store object holds one connection in autocommit mode; every write method runs in its own
transaction (``READ COMMITTED``), claims lock their rows with ``FOR UPDATE SKIP LOCKED``.
Lost connections are reopened on the next call; the write that failed raises
:class:`StoreError` (nothing of it was saved).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

from tuned.errors import StoreError
from tuned.store._core import Row
from tuned.store.api import Store
from tuned.store.dialect import POSTGRES, Dialect
from tuned.store.schema import SCHEMA_VERSION, statements

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresStore", "redact"]

#: ``pg_advisory_xact_lock`` key of schema migrations ("ktuned" in ASCII).
_MIGRATION_LOCK = 0x6B74756E6564


def redact(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


class PgRow:
    """A result row readable by column name or position (like :class:`sqlite3.Row`)."""

    __slots__ = ("_index", "_values")

    def __init__(self, index: dict[str, int], values: Sequence[Any]) -> None:
        self._index = index
        self._values = tuple(values)

    def __getitem__(self, key: int | str, /) -> Any:
        return self._values[self._index[key] if isinstance(key, str) else key]

    def keys(self) -> list[str]:
        return list(self._index)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"PgRow({dict(zip(self._index, self._values, strict=True))!r})"


def _row_factory(cursor: Any) -> Callable[[Sequence[Any]], PgRow]:
    index = {d.name: i for i, d in enumerate(cursor.description or ())}
    return lambda values: PgRow(index, values)


class _PgTx:
    """:class:`tuned.store._core.Tx` over a psycopg connection inside a transaction."""

    def __init__(self, conn: psycopg.Connection[Any], dialect: Dialect) -> None:
        self._conn = conn
        self._dialect = dialect

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        cur = self._conn.execute(self._dialect.sql(sql), tuple(args))
        return max(cur.rowcount, 0)

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        cur = self._conn.cursor(row_factory=_row_factory)
        cur.execute(self._dialect.sql(sql), tuple(args))
        return list(cur.fetchall())


class PostgresStore(Store):
    """Store in the PostgreSQL database at ``url`` (``postgresql://user:pw@host:port/db``).

    ``connect_timeout_s``: how long opening a connection may take before :class:`StoreError`.
    """

    dialect: ClassVar[Dialect] = POSTGRES

    def __init__(self, url: str, *, connect_timeout_s: float = 10.0) -> None:
        self.url = url
        self.connect_timeout_s = connect_timeout_s
        self._conn: psycopg.Connection[Any] | None = None
        try:
            with self._transaction() as db:
                db.execute(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
                db.execute("CREATE TABLE IF NOT EXISTS ktuned_schema (version INTEGER NOT NULL)")
                rows = db.rows("SELECT MAX(version) AS v FROM ktuned_schema")
                version = int(rows[0]["v"] or 0)
                if version > SCHEMA_VERSION:
                    raise StoreError(
                        f"the store {self.location} was written by a newer ktuned (schema "
                        f"{version}, this one knows {SCHEMA_VERSION}); upgrade ktuned on "
                        "this box (every box of a fleet runs the same version)"
                    )
                for statement in statements(self.dialect, version):
                    db.execute(statement)
                if version < SCHEMA_VERSION:
                    db.execute("DELETE FROM ktuned_schema")
                    db.execute("INSERT INTO ktuned_schema VALUES (?)", (SCHEMA_VERSION,))
        except StoreError:
            self.close()
            raise

    @property
    def location(self) -> str:
        return redact(self.url)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> psycopg.Connection[Any]:
        import psycopg

        if self._conn is not None and not self._conn.closed:
            return self._conn
        try:
            self._conn = psycopg.connect(
                self.url,
                autocommit=True,
                connect_timeout=max(1, round(self.connect_timeout_s)),
                application_name="ktuned",
            )
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot connect to the store {self.location}: {exc}; check that PostgreSQL "
                "runs and accepts this box (host, port, pg_hba.conf, user and password)"
            ) from exc
        return self._conn

    @contextmanager
    def _transaction(self) -> Iterator[_PgTx]:
        import psycopg

        conn = self._connection()
        try:
            with conn.transaction():
                yield _PgTx(conn, self.dialect)
        except psycopg.Error as exc:
            self._drop_if_broken(conn)
            raise StoreError(
                f"writing the store {self.location} failed: {exc}; nothing of this write was "
                "saved (check that PostgreSQL is reachable and has disk space)"
            ) from exc

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        import psycopg

        conn = self._connection()
        try:
            return _PgTx(conn, self.dialect).rows(sql, args)
        except psycopg.Error as exc:
            self._drop_if_broken(conn)
            raise StoreError(f"reading the store {self.location} failed: {exc}") from exc

    def _drop_if_broken(self, conn: psycopg.Connection[Any]) -> None:
        """Forget a connection the server or network closed: the next call opens a new one."""
        if conn.closed or conn.broken:
            self.close()
