"""Fixtures for the daemon's tests: a real `ktuned run` subprocess and a real notify socket."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tuned.errors import StoreError
from tuned.store.sqlite import SqliteStore

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


class NotifySocket:
    """A datagram socket playing systemd's part: it collects every notify message."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.messages: list[dict[str, str]] = []

    def drain(self, timeout: float = 0.0) -> None:
        self.sock.settimeout(timeout if timeout > 0 else 0.001)
        while True:
            try:
                data = self.sock.recv(65536)
            except (TimeoutError, BlockingIOError):
                return
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if line)
            self.messages.append(fields)
            self.sock.settimeout(0.001)

    def wait(self, key: str, value: str | None = None, timeout: float = 120.0) -> dict[str, str]:
        """The first message (not yet returned by wait) with ``key`` (= ``value``)."""
        deadline = time.monotonic() + timeout
        start = getattr(self, "_cursor", 0)
        while True:
            for i, m in enumerate(self.messages[start:], start):
                if key in m and (value is None or m[key] == value):
                    self._cursor = i + 1
                    return m
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no {key}={value} notification in {timeout} s: {self.messages}"
                )
            self.drain(0.1)

    def close(self) -> None:
        self.sock.close()


@dataclass
class DaemonProc:
    proc: subprocess.Popen[bytes]
    state: Path
    registry: Path
    config: Path
    port: int
    notify: NotifySocket
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url, timeout=10) as response:
            return str(response.read().decode())

    def evaluations(self) -> list[tuple[str, str, str]]:
        db = sqlite3.connect(self.state / "ktuned.sqlite")
        try:
            rows = db.execute(
                "SELECT kernel, candidate_id, outcome FROM evaluations ORDER BY seq"
            ).fetchall()
        except sqlite3.OperationalError:
            return []
        finally:
            db.close()
        return [(str(a), str(b), str(c)) for a, b, c in rows]

    def query(self, sql: str) -> list[tuple[object, ...]]:
        db = sqlite3.connect(self.state / "ktuned.sqlite")
        try:
            return list(db.execute(sql).fetchall())
        finally:
            db.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)


StartDaemon = Callable[..., DaemonProc]


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[StartDaemon]:
    started: list[DaemonProc] = []

    def start(
        registry: Path,
        *,
        poll: float = 0.5,
        state: Path | None = None,
        port: int | None = None,
        extra: str = "",
        env: dict[str, str] | None = None,
        name: str = "d",
    ) -> DaemonProc:
        state = state or tmp_path / "state"
        port = port or free_port()
        config = tmp_path / f"{name}.yaml"
        config.write_text(
            f"state_dir: {state}\ndevice: interpreter\n"
            f"registry: {{path: {registry}, poll_interval_s: {poll}}}\n"
            f'metrics: {{listen: "127.0.0.1:{port}"}}\n' + extra
        )
        sock_path = tmp_path / f"{name}-{len(started)}.sock"
        notify = NotifySocket(sock_path)
        full_env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TRITON_INTERPRET": "1",
            "NOTIFY_SOCKET": str(sock_path),
            **(env or {}),
        }
        log = tmp_path / f"{name}-{len(started)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tuned.cli", "run", "--config", str(config)],
                env=full_env,
                cwd=ROOT,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        daemon = DaemonProc(proc, state, registry, config, port, notify, log, full_env)
        started.append(daemon)
        return daemon

    yield start
    for d in started:
        if d.proc.poll() is None:
            os.killpg(d.proc.pid, signal.SIGKILL)
            d.proc.wait()
        d.notify.close()


def evaluation_count(db: Path) -> int:
    """Evaluations in a daemon's SQLite store (0 before the store, or its tables, exist)."""
    try:
        store = SqliteStore.open_reader(db)
    except StoreError:
        return 0
    try:
        return sum(store.evaluation_totals().outcomes.values())
    finally:
        store.close()
