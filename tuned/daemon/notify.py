"""systemd's notify protocol, spoken directly (no libsystemd): one datagram per message.

``Type=notify`` services tell the manager ``READY=1`` when they serve, ``STATUS=...`` for
``systemctl status``, ``WATCHDOG=1`` at least every ``WATCHDOG_USEC / 2``, ``RELOADING=1`` with
``MONOTONIC_USEC`` while reloading and ``STOPPING=1`` when shutting down. The socket is the
``$NOTIFY_SOCKET`` path, or a Linux abstract socket when it starts with ``@``. Without
``$NOTIFY_SOCKET`` (run by hand) every call does nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping

from tuned.metrics.live import LiveSnapshot

__all__ = ["Notifier", "Watchdog", "status_line"]

log = logging.getLogger(__name__)


class Notifier:
    """Sends notify messages to ``$NOTIFY_SOCKET`` (read once, from ``environ``)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        path = env.get("NOTIFY_SOCKET", "")
        self.address: str | bytes | None = None
        if path.startswith("@"):
            self.address = b"\0" + path[1:].encode()
        elif path.startswith("/"):
            self.address = path
        elif path:
            log.warning("ignoring NOTIFY_SOCKET=%r: neither a path nor an @abstract name", path)
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        watchdog_ok = usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid()))
        #: Seconds within which systemd expects ``WATCHDOG=1``; ``None`` when not asked.
        self.watchdog_s: float | None = int(usec) / 1e6 if watchdog_ok else None
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, **fields: str | int) -> bool:
        """Send ``KEY=value`` lines (``ready=1`` -> ``READY=1``); True if a datagram went out."""
        if self.address is None:
            return False
        message = "\n".join(f"{k.upper()}={v}" for k, v in fields.items()).encode()
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.socket(
                        socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC
                    )
                # Never block the daemon on a manager that does not read: drop the message.
                self._sock.sendto(message, socket.MSG_DONTWAIT, self.address)
            except OSError as exc:
                # The manager went away, its queue is full, or the socket is gone: the
                # service still works.
                log.debug("sd_notify to %r failed: %s", self.address, exc)
                return False
        return True

    def ready(self, status: str) -> bool:
        return self.send(ready=1, status=status)

    def status(self, status: str) -> bool:
        return self.send(status=status)

    def reloading(self) -> bool:
        return self.send(
            reloading=1, monotonic_usec=time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        )

    def stopping(self, status: str = "stopping") -> bool:
        return self.send(stopping=1, status=status)

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    self._sock.close()
                self._sock = None


class Watchdog:
    """``WATCHDOG=1`` from the main loop, and on its behalf while it waits on an evaluation.

    The main loop calls :meth:`beat` every iteration; it pings when a third of the watchdog
    period has passed since the last ping. An evaluation blocks the loop for up to its phase
    deadlines, which the worker client enforces itself, so around one the loop uses
    :meth:`busy` with that bound: a small thread then pings until the bound passes. A loop that
    hangs past it stops the pings and systemd restarts the service, as intended.
    """

    def __init__(self, notifier: Notifier, clock: Callable[[], float] = time.monotonic) -> None:
        self.notifier = notifier
        self.clock = clock
        self.interval = notifier.watchdog_s
        self.pings = 0
        self._last_ping = float("-inf")
        self._busy_until = float("-inf")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        """Called by the main loop: ping if a third of the period has passed."""
        if self.interval is not None and self.clock() - self._last_ping >= self.interval / 3:
            self._ping()

    @contextlib.contextmanager
    def busy(self, seconds: float) -> Iterator[None]:
        """Keep pinging for at most ``seconds`` while the main loop blocks inside this block."""
        if self.interval is None:
            yield
            return
        self.beat()
        self._busy_until = self.clock() + seconds
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ktuned-watchdog", daemon=True)
            self._thread.start()
        try:
            yield
        finally:
            self._busy_until = float("-inf")
            self.beat()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _ping(self) -> None:
        with self._lock:
            if self.notifier.send(watchdog=1):
                self.pings += 1
            self._last_ping = self.clock()

    def _run(self) -> None:
        assert self.interval is not None
        period = max(self.interval / 3, 0.01)
        while not self._stop.wait(period):
            if self.clock() <= self._busy_until:
                self._ping()


def status_line(snap: LiveSnapshot, busy_reason: str | None) -> str:
    """The ``STATUS=`` text of ``systemctl status``: what the daemon does, kernels by state."""
    counts: dict[str, int] = {}
    for state in snap.kernel_states.values():
        counts[state] = counts.get(state, 0) + 1
    kernels = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no kernels"
    if snap.daemon_state == "paused_gpu_busy":
        doing = f"paused: {busy_reason}"
    elif snap.daemon_state == "tuning":
        doing = f"tuning {snap.current_kernel}"
    else:
        doing = snap.daemon_state
    return f"{doing}; kernels: {kernels}"
