"""Opening the LLM tables' own connection: the store's SQLite file, or (fleet mode, the
token ledger only) the fleet's PostgreSQL store through :class:`SharedDb`."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tuned.errors import StoreError

__all__ = ["SharedDb", "connect", "connect_reader", "is_postgres_url"]


def connect(path: Path, schema: str, *, what: str) -> sqlite3.Connection:
    """A writable connection (WAL, ``synchronous=FULL``) with ``schema`` created if missing."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(path), timeout=60.0, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA busy_timeout=60000")
        db.executescript(f"BEGIN IMMEDIATE; {schema} COMMIT;")
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
    ``BEGIN IMMEDIATE`` serializes them on one box. ``schema`` (SQLite spelling) is created
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
                    for statement in _postgres_schema(schema):
                        self._conn.execute(statement)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot open the {what} in {self.location}: {exc}; check that PostgreSQL "
                "runs and accepts this box (host, port, pg_hba.conf, user and password)"
            ) from exc

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        """Run one statement (``?`` placeholders); its psycopg cursor."""
        return self._conn.execute(sql.replace("%", "%%").replace("?", "%s"), tuple(args))

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


def _postgres_schema(schema: str) -> list[str]:
    """SQLite ``CREATE`` statements of the LLM tables in PostgreSQL's spelling."""
    text = schema.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
    text = re.sub(r"\bREAL\b", "DOUBLE PRECISION", text)
    return [s.strip() for s in text.split(";") if s.strip()]
