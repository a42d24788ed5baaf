"""A real PostgreSQL server for the store tests, and store factories for every engine.

The server is started once per test session with ``initdb`` and ``pg_ctl`` in a temporary
directory, listening on 127.0.0.1 on a free port (trust authentication, loopback only).
initdb refuses to run as root (CI runs as root): then the server runs as the ``postgres``
system user if there is one, else as ``nobody``, through ``runuser``. Each test gets its own
database. Without the binaries or psycopg the PostgreSQL cases are skipped, saying why.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import WriteEntry
from tuned.registry import KernelSpec, load_entry
from tuned.store import Store, open_store

ENGINES = ("sqlite", "postgresql")

StoreFactory = Callable[[], Store]


def _pg_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    return Path(candidates[-1]).parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as() -> list[str]:
    """The command prefix that runs initdb/pg_ctl as an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return []
    for user in ("postgres", "nobody"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            continue
        return ["runuser", "-u", user, "--"]
    pytest.skip("running as root without a 'postgres' or 'nobody' user: initdb refuses root")


class PostgresServer:
    """A throw-away PostgreSQL cluster; :meth:`new_database` gives each test its own."""

    def __init__(self, bindir: Path, root: Path) -> None:
        self.bindir = bindir
        self.root = root
        self.data = root / "data"
        self.port = _free_port()
        self.prefix = _run_as()
        if self.prefix:
            user = self.prefix[2]
            entry = pwd.getpwnam(user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        self._pg(
            "initdb", "-D", str(self.data), "-A", "trust", "-U", "ktuned", "--no-sync", "-E", "UTF8"
        )
        self.start()

    def _pg(self, tool: str, *args: str) -> None:
        proc = subprocess.run(
            [*self.prefix, str(self.bindir / tool), *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.root,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")

    def start(self) -> None:
        # fsync off: test data need not survive a power cut, and it keeps the suite fast.
        options = f"-h 127.0.0.1 -p {self.port} -k {self.root} -F -c max_connections=200"
        self._pg(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "log"),
            "-w",
            "start",
        )

    def stop(self) -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://ktuned@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bindir = _pg_bin()
    if bindir is None or not (bindir / "initdb").exists():
        pytest.skip(
            "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in "
            "/usr/lib/postgresql/*/bin: install postgresql to run these tests"
        )
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed: pip install 'ktuned[fleet]'")
    root = Path(tempfile.mkdtemp(prefix="ktuned-pg-"))
    server = PostgresServer(bindir, root)
    try:
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh, empty database on the session's server."""
    return postgres_server.new_database()


@pytest.fixture(params=ENGINES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store of each engine, as a store URL."""
    if request.param == "sqlite":
        return f"sqlite:///{(tmp_path / 'ktuned.sqlite').as_posix().lstrip('/')}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()


@pytest.fixture
def open_any(store_url: str) -> Iterator[StoreFactory]:
    """Opens (again) the test's store; every store opened is closed after the test."""
    opened: list[Store] = []

    def factory() -> Store:
        store = open_store(store_url)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def spec(write_entry: WriteEntry) -> KernelSpec:
    """The tiny ``add`` entry of tests/conftest.py."""
    return load_entry(write_entry("add"))
