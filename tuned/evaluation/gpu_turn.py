"""One timing at a time on a GPU: the worker's timing waits while a spare makes case data.

A client's spares prepare (:class:`tuned.evaluation.client.WorkerClient`: make every case's
inputs and reference outputs, run the original) while its worker times candidates. On the
H100 that overlapped for minutes of a campaign (each re-measurement uses up a spare, and the
spare started in its place prepares every kernel evaluated so far), and the work a neighbour
adds to both sides of an interleaved comparison pulls its ratio towards 1: displayed speedups
came out 2 to 12 % below the referee's, re-measured on an idle GPU.

So the processes of one client take *turns* on its GPU: the worker holds the turn for its
whole benchmark phase, exclusively; spares hold it shared, each for one timed input set or
correctness case it makes (they may prepare together, never while the worker times). The
turn is a POSIX record lock (``fcntl.lockf``) on a file in the client's directory, whose
descriptor the client passes to each worker it starts (environment variable
:data:`FD_VARIABLE`); record locks belong to a process, so every worker conflicts with every
other although they share the open file. The runners that a worker starts do not inherit the
descriptor, and the file is outside every sandbox, so candidate code can neither take nor
hold the turn. Waits are bounded: past ``wait_s`` the holder works without the turn (a hung
spare delays a timing, never stops it), and says so in the result's metadata. On by default
on a GPU (``EvaluationSettings.gpu_turn``, ``ktuned tune --gpu-turn auto|yes|no``): on the
H100 it costs the worker about 0.3 s per candidate in waits; without it, Liger's entries
timed while spares made their neighbours' case data came out up to 5x slow
(bench/RESULTS.md, eleventh and fifteenth sessions)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["FD_VARIABLE", "GpuTurn", "open_turn_file"]

#: The environment variable that names the turn's descriptor in a worker.
FD_VARIABLE = "KTUNED_GPU_TURN_FD"

_POLL_S = 0.002
#: The bytes of the turn file that are locked: the turn itself, and the worker's intent.
_TURN, _INTENT = 0, 1


def open_turn_file(path: Path) -> int:
    """The descriptor of the turn file at ``path`` (created, owner-only), for the client to
    pass to its workers. Not inherited by anything else it starts."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


@dataclass
class GpuTurn:
    """A worker's side of the turn; ``fd`` ``None``: no turn to take (no spares, or a process
    started by hand), and :meth:`hold` holds nothing."""

    fd: int | None = None
    #: Seconds waited for the turn and the holds that went ahead without it, since made.
    waited_s: float = 0.0
    went_without: int = 0
    #: The holds made (the turn taken), their seconds in all and the longest one's.
    holds: int = 0
    held_s: float = 0.0
    longest_s: float = 0.0
    _held: bool = field(default=False, repr=False)

    @classmethod
    def from_environment(cls) -> GpuTurn:
        raw = os.environ.pop(FD_VARIABLE, "")  # runners started later do not learn it
        if not raw.isdigit():
            return cls()
        fd = int(raw)
        try:
            os.fstat(fd)
        except OSError:
            return cls()
        os.set_inheritable(fd, False)
        return cls(fd)

    @contextlib.contextmanager
    def hold(self, wait_s: float, *, shared: bool = False) -> Iterator[bool]:
        """Hold the turn for the block (waiting up to ``wait_s`` for it); yields whether it
        is held (``False``: no turn here, or the wait ran out). Re-entrant: a hold inside a
        hold holds nothing more.

        ``shared`` (a spare making a case): any number of spares hold it together, none while
        the worker times. The worker (exclusive) first marks its *intent* (a lock on a second
        byte), which stops new shared holds, then waits for the ones in flight: spares
        preparing one after another never starve it, and never wait for each other (the
        first version, exclusive for every process, made the spares' preparations one at a
        time, and a re-measurement waited for all of them: most likely why the H100's second
        evaluation of a campaign came 67 s after the first)."""
        if self.fd is None or self._held:
            yield self._held
            return
        started = time.monotonic()
        held = intent = False
        while True:
            if shared:
                held = self._shared_unless_intent()
            else:
                intent = intent or self._try(fcntl.LOCK_EX, _INTENT)
                held = intent and self._try(fcntl.LOCK_EX, _TURN)
            if held or time.monotonic() - started >= wait_s:
                break
            time.sleep(_POLL_S)
        self.waited_s += time.monotonic() - started
        if not held:
            self.went_without += 1
        self._held = held
        took = time.monotonic()
        try:
            yield held
        finally:
            if held:
                length = time.monotonic() - took
                self.holds += 1
                self.held_s += length
                self.longest_s = max(self.longest_s, length)
            self._held = False
            for byte, locked in ((_TURN, held), (_INTENT, intent)):
                if locked:
                    with contextlib.suppress(OSError):
                        fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, byte)

    def _try(self, how: int, byte: int) -> bool:
        assert self.fd is not None
        try:
            fcntl.lockf(self.fd, how | fcntl.LOCK_NB, 1, byte)
        except OSError:
            return False
        return True

    def _shared_unless_intent(self) -> bool:
        assert self.fd is not None
        if not self._try(fcntl.LOCK_SH, _INTENT):  # the worker waits to time: let it
            return False
        fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, _INTENT)
        return self._try(fcntl.LOCK_SH, _TURN)
