"""The judge's runner processes: starting them, talking to them, and when to throw one away.

A :class:`RunnerProcess` is forked by the judge's zygote (:mod:`tuned.evaluation.zygote`: a
process that imported PyTorch and Triton once, so a fresh runner costs a fork, not an import),
in the judge's process group and environment (the client's sandbox and deadlines cover it),
with its own arena (:mod:`tuned.evaluation.shm`), module directory and ``stderr.log``.
Everything it answers is untrusted: a line that is not one JSON object, or an answer to another
request, ends it and is a ``crash`` of the candidate it was running (:class:`RunnerDied`).

:class:`RunnerPool` keeps

- the *own* runner: it runs only the user's own source (knob variants of the entry's original
  module), so it is reused across requests, modules and compiled kernels kept warm;
- fresh runners: a candidate whose source differs from the user's (an LLM rewrite, an
  adversarial module) gets a fresh runner, used for that request only and then ended, so
  nothing it did (a patched function, a memo, a poisoned cache) reaches a later verdict.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from tuned.evaluation.checks import CaseFailure
from tuned.evaluation.modules import MAX_LINE
from tuned.evaluation.shm import Arena

__all__ = ["RunnerDied", "RunnerPool", "RunnerProcess"]


class RunnerDied(CaseFailure):
    """The runner ended, stopped answering sensibly, or answered out of turn."""

    def __init__(self, reason: str) -> None:
        super().__init__("crash", reason)


class Zygote:
    """The judge's handle on its zygote: forks runners, reports their exit status."""

    def __init__(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tuned.evaluation.zygote", str(theirs.fileno())],
            stdin=subprocess.DEVNULL,
            pass_fds=[theirs.fileno()],
        )
        theirs.close()
        self.sock = mine
        self._reader = mine.makefile("r", encoding="utf-8", errors="replace")
        self._ready = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _answer(self) -> dict[str, Any]:
        line = self._reader.readline(MAX_LINE)
        if not line:
            raise RunnerDied("the runners' zygote ended")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def wait_ready(self) -> None:
        if not self._ready:
            self._answer()  # {"ready": true}: PyTorch imported
            self._ready = True

    def fork(self, directory: Path, writable: Path, fds: list[int]) -> int:
        self.wait_ready()
        message = {"op": "fork", "dir": str(directory), "writable": str(writable)}
        socket.send_fds(self.sock, [json.dumps(message).encode()], fds)
        return int(self._answer()["pid"])

    def wait(self, pid: int) -> int | None:
        """The exit code of runner ``pid`` once it ended (negative: the signal)."""
        try:
            socket.send_fds(self.sock, [json.dumps({"op": "wait", "pid": pid}).encode()], [])
            status = self._answer().get("status")
        except (OSError, RunnerDied, ValueError):
            return None
        return int(status) if isinstance(status, int) else None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


#: Seconds a closing runner gets to let go of its arena (and exit) before it is killed.
_EXIT_GRACE_S = 1.0


class RunnerProcess:
    def __init__(self, zygote: Zygote, directory: Path, writable: Path, device: str) -> None:
        self.zygote = zygote
        self.directory = directory
        self.device = device
        self.arena = Arena(device)
        #: Whether it answered ``exit`` (having let go of the arena) before it was killed.
        self.let_go = False
        self._next_id = 0
        self._ready = False
        self._overhead: float | None = None
        self._code: int | None = None
        directory.mkdir(parents=True, exist_ok=True)
        to_runner, runner_in = os.pipe()
        runner_out, from_runner = os.pipe()
        log = os.open(directory / "stderr.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        arena_fd = self.arena.fd if self.arena.fd >= 0 else os.open(os.devnull, os.O_RDONLY)
        try:
            self.pid = zygote.fork(directory, writable, [to_runner, from_runner, arena_fd, log])
        finally:
            for fd in (to_runner, from_runner, log):
                os.close(fd)
            if arena_fd != self.arena.fd:
                os.close(arena_fd)
        self._to: IO[str] = os.fdopen(runner_in, "w", encoding="utf-8")
        self._from: IO[str] = os.fdopen(runner_out, "r", encoding="utf-8", errors="replace")
        self.alive = True

    # -- talking

    def _read(self, phase: str) -> dict[str, Any]:
        line = self._from.readline(MAX_LINE)
        if not line:
            raise RunnerDied(self._death(phase))
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if not isinstance(message, dict) or not line.endswith("\n"):
            self.kill()
            raise RunnerDied(f"the runner sent a malformed message during {phase}; ended")
        return message

    def _wait_ready(self, phase: str) -> None:
        if not self._ready:
            message = self._read(phase)
            if message.get("type") != "ready":
                self.kill()
                raise RunnerDied(f"the runner did not start properly ({str(message)[:200]})")
            self._ready = True

    def request(self, message: dict[str, Any], phase: str) -> dict[str, Any]:
        """Send ``message``, wait for its answer (the client's deadline bounds the wait)."""
        if not self.alive:
            raise RunnerDied(f"the runner was already ended before {phase}")
        self._wait_ready(phase)
        self._next_id += 1
        try:
            self._to.write(json.dumps({**message, "id": self._next_id, "phase": phase}) + "\n")
            self._to.flush()
        except (BrokenPipeError, OSError):
            raise RunnerDied(self._death(phase)) from None
        answer = self._read(phase)
        if answer.get("id") != self._next_id:
            self.kill()
            raise RunnerDied(f"the runner answered out of turn during {phase}; ended")
        return answer

    def grow(self, nbytes: int, phase: str) -> None:
        message = self.arena.ensure(nbytes)
        if message is not None:
            answer = self.request(message, phase)
            if not answer.get("ok"):
                raise RunnerDied(f"the runner could not map the arena: {answer.get('reason')}")

    def overhead(self) -> float:
        """Seconds of one round trip that does nothing (median of 5): what the judge takes
        off its clock around a timed ``call``."""
        if self._overhead is None:
            samples = []
            for _ in range(5):
                started = time.perf_counter()
                self.request({"op": "ping"}, "benchmark")
                samples.append(time.perf_counter() - started)
            self._overhead = statistics.median(samples)
        return self._overhead

    # -- ending

    def _death(self, phase: str) -> str:
        self.alive = False
        code = self._reap()
        if code is None:
            return f"the runner stopped answering during {phase}"
        how = (
            f"was killed by {signal.Signals(-code).name}"
            if code < 0
            else f"exited with status {code}"
        )
        return f"the runner {how} during {phase}" + _tail(self.directory / "stderr.log")

    def _reap(self) -> int | None:
        if self._code is None:
            self._code = self.zygote.wait(self.pid)
        return self._code

    def kill(self) -> None:
        self.alive = False
        if self._code is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)  # not reaped yet: the pid is still its own
            self._reap()
        for stream in (self._to, self._from):
            with contextlib.suppress(OSError):
                stream.close()
        self.arena.close()

    def close(self) -> None:
        if self.alive:
            with contextlib.suppress(OSError, ValueError):
                self._to.write(json.dumps({"op": "exit"}) + "\n")
                self._to.flush()
                if self._ready:
                    # Until it has let go of the arena (runner.Runner.let_go), bounded: PyTorch
                    # frees memory shared by CUDA IPC only once no process maps it, and one
                    # killed while mapped left about 1 GiB held in the judge per runner (H100).
                    # The same everywhere, so the interpreter's runs (CI) exercise it too.
                    # Until its pipe ends (it exited) or the grace is over; raw reads of what
                    # is there, never a read that could block.
                    fd, deadline = self._from.fileno(), time.monotonic() + _EXIT_GRACE_S
                    while (left := deadline - time.monotonic()) > 0:
                        ready, _, _ = select.select([fd], [], [], left)
                        data = os.read(fd, 1 << 16) if ready else b""
                        if not data:
                            break
                        self.let_go = True  # it answered: nothing of the arena is mapped
        self.kill()


def _tail(path: Path, limit: int = 400) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    return f"; stderr ends: {text[-limit:]}" if text else ""


class RunnerPool:
    """The own runner (reused for the user's source) and fresh ones for everything else."""

    def __init__(self, root: Path, device: str, writable: Path | None = None) -> None:
        self.root = root
        self.device = device
        self.writable = writable or root
        self._zygote: Zygote | None = None
        self._own: RunnerProcess | None = None
        self._started = 0

    def _start(self, *, own: bool) -> RunnerProcess:
        if self._zygote is None or not self._zygote.alive():
            if self._zygote is not None:
                self._zygote.close()
            self._zygote = Zygote()
        self._started += 1
        name = "own" if own else f"fresh-{self._started % 4}"
        return RunnerProcess(self._zygote, self.root / f"runner-{name}", self.writable, self.device)

    def start_ahead(self) -> None:
        """Start the zygote now (it imports PyTorch and Triton while the judge warms up)."""
        if self._zygote is None:
            self._zygote = Zygote()

    def wait_ready(self) -> None:
        """Until the zygote can fork and the own runner is warm (its CUDA context made),
        before the judge says it is ready: a first candidate's deadlines never pay for
        PyTorch's import or a context."""
        if self._zygote is not None:
            self._zygote.wait_ready()
            own = self.own()
            try:
                own.request({"op": "warm"}, "load")
            except CaseFailure:  # a first evaluation starts another
                self.release(own, reusable=False)

    def own(self) -> RunnerProcess:
        if self._own is None or not self._own.alive:
            self._own = self._start(own=True)
        return self._own

    def arena_bytes(self) -> int:
        """Device bytes the own runner's arena holds (between requests, the only arena)."""
        return self._own.arena.held_bytes if self._own is not None else 0

    def fresh(self) -> RunnerProcess:
        """A runner no code has run in, for one request."""
        return self._start(own=False)

    def release(self, runner: RunnerProcess, *, reusable: bool) -> None:
        """After a request: the own runner stays when ``reusable``; any other ends."""
        if runner is self._own and reusable and runner.alive:
            try:
                runner.request({"op": "reset"}, "done")
                return
            except CaseFailure:
                pass
        if runner is self._own:
            self._own = None
        runner.close()

    def close(self) -> None:
        if self._own is not None:
            self._own.close()
        if self._zygote is not None:
            self._zygote.close()
        self._own = self._zygote = None
