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
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ADD_SOURCE, ADD_YAML, WriteEntry
from tests.daemon.conftest import NotifySocket, free_port
from tuned.registry import KernelSpec, load_entry
from tuned.store import Store, open_store
from tuned.store.outbox import OutboxStore

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
            # The data directory of a session's hundreds of databases takes seconds to remove
            # on a loaded machine, and a session fixture's teardown counts against the last
            # test's timeout: moved aside at once, removed by a detached process.
            doomed = root.with_name(root.name + "-removed")
            root.rename(doomed)
            subprocess.Popen(["rm", "-rf", str(doomed)], start_new_session=True)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh, empty database on the session's server."""
    return postgres_server.new_database()


@pytest.fixture(params=(*ENGINES, "outbox"))
def engine(request: pytest.FixtureRequest) -> str:
    """Each engine; ``outbox``: the fleet store with its outbox (:class:`OutboxStore`) over a
    reachable PostgreSQL server, which only tests through :func:`open_any` get."""
    if request.param == "outbox" and "open_any" not in request.fixturenames:
        pytest.skip("the outbox engine is tested through open_any (its URL is PostgreSQL's)")
    return str(request.param)


@pytest.fixture
def store_url(engine: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store of each engine, as a store URL."""
    if engine == "sqlite":
        return f"sqlite:///{(tmp_path / 'ktuned.sqlite').as_posix().lstrip('/')}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()


@pytest.fixture
def open_any(engine: str, store_url: str, tmp_path: Path) -> Iterator[StoreFactory]:
    """Opens (again) the test's store; every store opened is closed after the test. The
    outbox engine's stores share one outbox file, as a daemon's restarts do."""
    opened: list[Store] = []

    def factory() -> Store:
        store: Store
        if engine == "outbox":
            store = OutboxStore(store_url, tmp_path / "outbox.sqlite", retry_s=0.0)
        else:
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


# -- fleet daemons on a real (slow) kernel: claim release at SIGTERM, lease renewal

#: The ``add`` kernel whose launcher sleeps once per knob configuration in each process:
#: every evaluation takes at least that long (in the worker, as a slow kernel would).
SLOW_ADD_SOURCE = ADD_SOURCE.replace(
    "def add(x, y, BLOCK=256, num_warps=4):\n",
    "import time\n\nSLEEP_S = {slow}\n_SLEPT = set()\n\n\n"
    "def add(x, y, BLOCK=256, num_warps=4):\n"
    "    if (BLOCK, num_warps) not in _SLEPT:\n"
    "        _SLEPT.add((BLOCK, num_warps))\n"
    "        time.sleep(SLEEP_S.get(BLOCK, {default}))\n",
)


@dataclass
class FleetDaemon:
    """A ``ktuned run`` process of a fleet test, with its notify socket, log and metrics."""

    proc: subprocess.Popen[bytes]
    port: int
    notify: NotifySocket
    log: Path
    state: Path

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            return str(r.read().decode())

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Wait for READY=1; fail at once, with the daemon's log, if it exits first."""
        deadline = time.monotonic() + timeout
        while not any(m.get("READY") == "1" for m in self.notify.messages):
            assert self.proc.poll() is None, self.output()
            assert time.monotonic() < deadline, f"no READY=1 in {timeout} s:\n{self.output()}"
            self.notify.drain(0.1)


StartFleetDaemon = Callable[..., FleetDaemon]


def launch_fleet_daemon(
    tmp_path: Path, url: str, name: str, *, registry: Path, lease_s: float
) -> FleetDaemon:
    """Start ``ktuned run`` (interpreter mode) on ``registry`` and the store ``url``, with its
    own state directory, metrics port and notify socket. The daemon never converges: it
    keeps stepping its kernels while the test runs."""
    state, port = tmp_path / name, free_port()
    config = tmp_path / f"{name}.yaml"
    config.write_text(
        f"state_dir: {state}\ndevice: interpreter\nstore: {url}\n"
        f"fleet_lease_s: {lease_s}\n"
        f"registry: {{path: {registry}, poll_interval_s: 5}}\n"
        "scheduler: {converge_after: 100000}\n"
        f'metrics: {{listen: "127.0.0.1:{port}"}}\n'
    )
    notify = NotifySocket(tmp_path / f"{name}.sock")
    log = tmp_path / f"{name}.log"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "NOTIFY_SOCKET": str(notify.path)}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tuned.cli", "run", "--config", str(config)],
            env=env,
            cwd=root,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    return FleetDaemon(proc, port, notify, log, state)


def stop_fleet_daemons(started: list[FleetDaemon]) -> None:
    """Kill every daemon of a test still running, and close their sockets."""
    for d in started:
        if d.proc.poll() is None:
            os.killpg(d.proc.pid, signal.SIGKILL)
            d.proc.wait()
        d.notify.close()


@pytest.fixture
def start_fleet(tmp_path: Path) -> Iterator[StartFleetDaemon]:
    """Starts ``ktuned run`` daemons on one registry holding the slow ``add`` kernel:
    ``slow`` maps a BLOCK value to its evaluation's sleep (seconds), ``default_s`` the rest.
    Every daemon still running after the test is killed."""
    started: list[FleetDaemon] = []
    registry = tmp_path / "registry"

    def run(
        url: str,
        name: str,
        *,
        lease_s: float,
        slow: dict[int, float],
        default_s: float = 1.0,
    ) -> FleetDaemon:
        entry = registry / "add"
        if not entry.exists():
            entry.mkdir(parents=True)
            (entry / "add.py").write_text(
                SLOW_ADD_SOURCE.format(slow=repr(slow), default=repr(default_s))
            )
            (entry / "kernel.yaml").write_text(ADD_YAML.format(name="add"))
        daemon = launch_fleet_daemon(tmp_path, url, name, registry=registry, lease_s=lease_s)
        started.append(daemon)
        return daemon

    yield run
    stop_fleet_daemons(started)
