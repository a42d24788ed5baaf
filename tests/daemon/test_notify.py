"""sd_notify over a real AF_UNIX datagram socket: paths, abstract names, the watchdog."""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

from tuned.daemon.notify import Notifier, Watchdog


def _recv(sock: socket.socket, timeout: float = 2.0) -> dict[str, str]:
    sock.settimeout(timeout)
    data = sock.recv(4096).decode()
    return dict(line.split("=", 1) for line in data.splitlines())


def test_messages_reach_a_path_socket(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        n = Notifier({"NOTIFY_SOCKET": str(path)})
        assert n.enabled and n.watchdog_s is None
        assert n.ready("all good")
        assert _recv(sock) == {"READY": "1", "STATUS": "all good"}
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        n.reloading()
        msg = _recv(sock)
        assert msg["RELOADING"] == "1" and int(msg["MONOTONIC_USEC"]) >= before
        n.stopping()
        assert _recv(sock)["STOPPING"] == "1"
        n.close()


def test_abstract_socket_names_start_with_at() -> None:
    name = f"ktuned-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(b"\0" + name.encode())
        n = Notifier({"NOTIFY_SOCKET": "@" + name})
        assert n.status("tuning softmax")
        assert _recv(sock) == {"STATUS": "tuning softmax"}


def test_without_notify_socket_nothing_is_sent() -> None:
    n = Notifier({})
    assert not n.enabled and not n.ready("x")


def test_watchdog_pings_from_the_loop_and_while_busy_only(tmp_path: Path) -> None:
    path = tmp_path / "wd.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        env = {
            "NOTIFY_SOCKET": str(path),
            "WATCHDOG_USEC": "300000",
            "WATCHDOG_PID": str(os.getpid()),
        }
        n = Notifier(env)
        assert n.watchdog_s == 0.3
        wd = Watchdog(n)
        wd.beat()
        assert _recv(sock) == {"WATCHDOG": "1"}
        wd.beat()  # too soon after the last ping
        with wd.busy(0.5):  # a blocking evaluation: the thread pings for up to 0.5 s
            time.sleep(1.2)
        pings = wd.pings
        assert 3 <= pings <= 6  # about 0.5 s / 0.1 s, then it stops: a hung loop is noticed
        time.sleep(0.5)
        assert wd.pings == pings  # no loop beat, no busy block: silence
        wd.stop()


def test_watchdog_for_another_pid_is_ignored() -> None:
    n = Notifier({"NOTIFY_SOCKET": "/nonexistent", "WATCHDOG_USEC": "1000", "WATCHDOG_PID": "1"})
    assert n.watchdog_s is None
