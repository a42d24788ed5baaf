"""The embedded store: one SQLite database in WAL mode under the state directory.

Every write is one transaction, so a run killed at any point leaves the database as of its
last completed write; ``ktuned status`` can read while a tuning run writes. SQLite errors
(full disk, read-only directory, a file that is not a database) become :class:`StoreError`
with the path and what to do. The schema version is ``PRAGMA user_version``; opening an
older database applies the missing migrations (:mod:`tuned.store.schema`), keeping its rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from tuned.errors import BadInputError, StoreError
from tuned.store._core import Row, damaged_store_error, is_damage
from tuned.store.api import Store
from tuned.store.base import CaseTimingRow
from tuned.store.dialect import SQLITE, Dialect
from tuned.store.schema import SCHEMA_VERSION, statements

__all__ = ["SCHEMA_VERSION", "CaseTimingRow", "SqliteStore"]


class _SqliteTx:
    """:class:`tuned.store._core.Tx` over a connection inside ``BEGIN IMMEDIATE``."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        return self._db.execute(sql, tuple(args)).rowcount

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        cur = self._db.execute(sql, tuple(args))
        cur.row_factory = sqlite3.Row
        return list(cur.fetchall())


class SqliteStore(Store):
    """Store backed by ``path`` (created with its parent directory if missing)."""

    dialect: ClassVar[Dialect] = SQLITE

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.parent.exists() and not path.parent.is_dir():
            raise BadInputError(
                f"the state directory {path.parent} is not a directory (it holds the store "
                f"{path.name}); point --state-dir or state_dir to a directory"
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), timeout=30.0, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            if hasattr(self, "_db"):
                self._db.close()
            if is_damage(exc):
                raise damaged_store_error(str(path), exc) from None
            raise StoreError(
                f"cannot open the store {path}: {exc}; check the path, its "
                "permissions and free disk space, or choose --state-dir"
            ) from exc
        except OSError as exc:
            raise StoreError(
                f"cannot open the store {path}: {exc}; check the path, its "
                "permissions and free disk space, or choose --state-dir"
            ) from exc

    def _migrate(self) -> None:
        """Apply the migrations this database lacks, in one transaction (none, and no write,
        when it is current: a damaged file is never written to by opening it)."""
        if int(self._db.execute("PRAGMA user_version").fetchone()[0]) == SCHEMA_VERSION:
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} was written by a newer ktuned (schema {version}, this one "
                    f"knows {SCHEMA_VERSION}); upgrade ktuned or use another --state-dir"
                )
            for statement in statements(self.dialect, version):
                self._db.execute(statement)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    @property
    def location(self) -> str:
        return str(self.path)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[_SqliteTx]:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield _SqliteTx(self._db)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            if is_damage(exc):
                raise damaged_store_error(str(self.path), exc) from None
            raise StoreError(
                f"writing the store {self.path} failed: {exc}; nothing of this "
                "write was saved (check free disk space and permissions)"
            ) from exc

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        try:
            cur = self._db.execute(sql, tuple(args))
            cur.row_factory = sqlite3.Row
            return list(cur.fetchall())
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            if is_damage(exc):
                raise damaged_store_error(str(self.path), exc) from None
            raise StoreError(f"reading the store {self.path} failed: {exc}") from exc

    @classmethod
    def open_reader(cls, path: Path, *, missing_ok: bool = False) -> SqliteStore:
        """A read-only store on an existing database, usable from any thread (one at a time).

        For readers beside a writing daemon (the metrics collector) and the read commands
        (``ktuned status``, ``best``, ``report``, ``export``): it never takes the write lock,
        creates, migrates or checkpoints the database, nor removes its write-ahead log, and
        it sees what a concurrent writer has committed. A file that is not a ktuned store
        (empty, or another program's database) is refused as damaged; a store written by an
        older ktuned is read from a migrated copy in memory (its file is left as it is).
        ``missing_ok``: a missing file reads as an empty store (nothing is created).
        """
        store = cls.__new__(cls)
        store.path = path
        if missing_ok and not path.exists() and not path.is_symlink():
            store._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            store._migrate()
            return store
        try:
            store._db = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro",
                uri=True,
                timeout=30.0,
                isolation_level=None,
                check_same_thread=False,
            )
            store._check_reader()
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            if hasattr(store, "_db"):
                store._db.close()
            if is_damage(exc):
                raise damaged_store_error(str(path), exc) from None
            raise StoreError(
                f"cannot read the store {path}: {exc}; check that it exists and is readable"
            ) from exc
        except OSError as exc:
            raise StoreError(
                f"cannot read the store {path}: {exc}; check that it exists and is readable"
            ) from exc
        except StoreError:
            store._db.close()
            raise
        return store

    def _check_reader(self) -> None:
        """Refuse a database without ktuned's tables or of a newer schema; read an older one
        from a migrated copy in memory (a reader never writes the file)."""
        version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        tables = {
            str(r[0]) for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        if "kernels" not in tables:
            what = "an empty file" if not tables else f"{len(tables)} tables, none of ktuned's"
            raise damaged_store_error(
                str(self.path), ValueError(f"not a ktuned store: {what}, schema version {version}")
            )
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer ktuned (schema {version}, this one "
                f"knows {SCHEMA_VERSION}); upgrade ktuned or use another --state-dir"
            )
        if version < SCHEMA_VERSION:
            copy = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            self._db.backup(copy)
            self._db.close()
            self._db = copy
            self._migrate()
        self._db.execute("SELECT COUNT(*) FROM kernels").fetchall()

    def checkpoint(self, wait_s: float = 2.0) -> None:
        """Fold the write-ahead log into the database file (before a clean stop).

        Waits at most ``wait_s`` for readers; past that the log is left for the next start.
        """
        try:
            self._db.execute(f"PRAGMA busy_timeout={int(wait_s * 1000)}")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            self._db.execute("PRAGMA busy_timeout=30000")
        except sqlite3.Error as exc:
            raise StoreError(f"checkpointing the store {self.path} failed: {exc}") from exc
