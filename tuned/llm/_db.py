"""Opening the LLM tables' own connection to the store's database file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tuned.errors import StoreError

__all__ = ["connect", "connect_reader"]


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
