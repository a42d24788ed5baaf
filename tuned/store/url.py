"""Choosing a store engine from the config's store URL.

``sqlite:///abs/path/ktuned.sqlite``: the embedded store (the default is ``ktuned.sqlite``
in the state directory); ``postgresql://user:password@host:port/database`` (or
``postgres://``): the fleet store. Any other scheme is an error that lists these.
"""

from __future__ import annotations

from pathlib import Path

from tuned.errors import BadInputError
from tuned.store.api import Store

__all__ = ["STORE_SCHEMES", "check_store_url", "default_store_url", "open_store", "sqlite_path"]

STORE_SCHEMES = ("sqlite", "postgresql", "postgres")


def default_store_url(state_dir: Path) -> str:
    """``sqlite:///<state_dir>/ktuned.sqlite``."""
    return f"sqlite:///{(state_dir / 'ktuned.sqlite').as_posix().lstrip('/')}"


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL; ``None`` for other schemes."""
    scheme = check_store_url(url)
    if scheme != "sqlite":
        return None
    return Path("/" + url[len("sqlite:///") :].lstrip("/"))


def check_store_url(url: str) -> str:
    """The URL's scheme, after checking that ktuned knows it (:class:`BadInputError` if not)."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme not in STORE_SCHEMES or (scheme == "sqlite" and not url.startswith("sqlite:///")):
        raise BadInputError(
            f"store URL {url!r} is not one ktuned knows: use sqlite:///ABSOLUTE/PATH.sqlite "
            "(one box) or postgresql://USER:PASSWORD@HOST:PORT/DATABASE (a fleet)"
        )
    return scheme


def open_store(url: str) -> Store:
    """The store at ``url``, migrated to this ktuned's schema."""
    path = sqlite_path(url)
    if path is not None:
        from tuned.store.sqlite import SqliteStore

        return SqliteStore(path)
    from tuned.store.postgres import PostgresStore

    return PostgresStore(url)
