"""Connections of their own to the store's database, for the tables kept beside the store's
(the LLM's token ledger, response cache, attempt log and strategy book): the store's SQLite
file, or (fleet mode, the token ledger only) the fleet's PostgreSQL store through
:class:`SharedDb`.

Their schemas are templates in the store's spelling (``{serial}``, ``{real}``: see
:class:`~tuned.store.dialect.Dialect`), and their statements use ``?`` placeholders; the
store's dialects render both, so these tables follow the same SQL rules as the store's own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tuned.errors import StoreError
from tuned.store.dialect import POSTGRES, SQLITE

__all__ = ["SharedDb", "connect", "connect_reader", "is_postgres_url"]


def connect(path: Path, schema: str, *, what: str) -> sqlite3.Connection:
    """A writable connection (WAL, ``synchronous=FULL``) with ``schema`` (a template, see the
    module's docstring) created if missing."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(path), timeout=60.0, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA busy_timeout=60000")
        db.executescript(f"BEGIN IMMEDIATE; {SQLITE.ddl(schema)} COMMIT;")
    except (sqlite3.Error, OSError) as exc:
        raise StoreError(
            f"cannot open the {what} in {path}: {exc}; check the state directory's "
            "permissions and free disk space"
        ) from exc
    return db


def connect_reader(path: Path) -> sqlite3.Connection | None:
    """A read-only connection, or ``None`` if the database does not exist yet."""
    if not path.exists():
        return None
    try:
        return sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro",
            uri=True,
            timeout=30.0,
            isolation_level=None,
            check_same_thread=False,
        )
    except sqlite3.Error:
        return None


def is_postgres_url(location: object) -> bool:
    """Whether ``location`` names a PostgreSQL database (a fleet's shared store)."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


#: ``pg_advisory_xact_lock`` key of creating the ``llm_*`` tables ("ktllm" in ASCII).
_SCHEMA_LOCK = 0x6B746C6C6D


class SharedDb:
    """The LLM tables in a fleet's PostgreSQL store, spoken to like a :mod:`sqlite3`
    connection: ``execute(sql, args)`` with ``?`` placeholders returns a cursor with
    ``fetchone``, ``fetchall``, ``rowcount`` and ``description``.

    One psycopg connection in autocommit mode; :meth:`transaction` opens a transaction that
    first takes ``lock`` (``LOCK TABLE ...``), so writers serialize as SQLite's
    ``BEGIN IMMEDIATE`` serializes them on one box. ``schema`` (a template) is created
    under an advisory lock, so boxes starting together create it once; ``None``: a reader
    (``/metrics``, ``ktuned budget``) that writes nothing, not even the tables.
    ``connect_timeout_s``: how long connecting may take (``None``: libpq's default).
    """

    def __init__(
        self,
        url: str,
        schema: str | None,
        *,
        what: str,
        connect_timeout_s: float | None = None,
    ) -> None:
        import psycopg

        from tuned.store.postgres import redact

        self.location = redact(url)
        self.what = what
        try:
            options: dict[str, Any] = {}
            if connect_timeout_s is not None:  # else libpq's default (PGCONNECT_TIMEOUT)
                options["connect_timeout"] = max(1, round(connect_timeout_s))
            self._conn = psycopg.connect(
                url, autocommit=True, application_name="ktuned-llm", **options
            )
            if schema is not None:
                with self._conn.transaction():
                    self._conn.execute(f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK})")
                    for statement in POSTGRES.ddl(schema).split(";"):
                        if statement.strip():
                            self._conn.execute(statement)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot open the {what} in {self.location}: {exc}; check that PostgreSQL "
                "runs and accepts this box (host, port, pg_hba.conf, user and password)"
            ) from exc

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        """Run one statement (``?`` placeholders); its psycopg cursor."""
        return self._conn.execute(POSTGRES.sql(sql), tuple(args))

    @contextmanager
    def transaction(self, lock: str) -> Iterator[SharedDb]:
        """One transaction holding ``lock`` (a ``LOCK TABLE`` statement) until it ends;
        psycopg errors become :class:`StoreError` (nothing of it was saved)."""
        import psycopg

        try:
            with self._conn.transaction():
                self._conn.execute(lock)
                yield self
        except psycopg.Error as exc:
            raise StoreError(
                f"writing the {self.what} in {self.location} failed: {exc}; nothing of this "
                "write was saved (check that PostgreSQL is reachable)"
            ) from exc

    def close(self) -> None:
        self._conn.close()
