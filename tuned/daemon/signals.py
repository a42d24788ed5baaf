"""The daemon's signals: SIGTERM/SIGINT stop it, SIGHUP reloads it, and sleeps end at once.

:class:`SignalGate` turns signals into flags the main loop reads, wakes any
:meth:`~SignalGate.sleep` through a self-pipe, and, inside an
:meth:`~SignalGate.interruptible` section (the wait on an evaluation worker), raises
:class:`~tuned.daemon.gated.ShutdownRequested` from the handler so that a stop never waits
for an evaluation to finish. Everywhere else a stop takes effect at the next iteration, so a
store write is never cut in half.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable, Iterator
from types import FrameType

from tuned.daemon.gated import ShutdownRequested

__all__ = ["SignalGate"]


class SignalGate:
    """Stop and reload flags set by signals (or by :meth:`request_stop`), and a waker."""

    def __init__(self) -> None:
        self.stop = False
        self.reload = False
        self._interruptible = False
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._previous: dict[int, signal._HANDLER] = {}

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def close(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def request_stop(self) -> None:
        self.stop = True
        self._wake()

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """A section a stop request interrupts (by raising :class:`ShutdownRequested`)."""
        if self.stop:
            raise ShutdownRequested("stop requested")
        outer, self._interruptible = self._interruptible, True
        try:
            yield
        finally:
            self._interruptible = outer

    def sleep(self, seconds: float, *, tick: float | None, beat: Callable[[], None]) -> None:
        """Sleep up to ``seconds``; a stop or reload ends it at once. ``beat`` is called at
        least every ``tick`` seconds (the watchdog)."""
        deadline = time.monotonic() + seconds
        while not (self.stop or self.reload):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            beat()
            ready, _, _ = select.select(
                [self._wake_r], [], [], remaining if tick is None else min(remaining, tick)
            )
            if ready:
                with contextlib.suppress(OSError):
                    os.read(self._wake_r, 4096)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self.reload = True
            self._wake()
            return
        self.stop = True
        self._wake()
        if self._interruptible:
            self._interruptible = False
            raise ShutdownRequested(f"stopped by {signal.Signals(signum).name}")

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
