"""The judge's runner processes: starting them, talking to them, and when to throw one away.

A :class:`RunnerProcess` is a child of the judge (``python -m tuned.evaluation.runner``), in
the judge's process group and environment (the client's sandbox and deadlines cover it), with
its own arena (:mod:`tuned.evaluation.shm`) and module directory. Everything it answers is
untrusted: a line that is not one JSON object, or an answer to another request, ends it and is
a ``crash`` of the candidate it was running (:class:`RunnerDied`).

:class:`RunnerPool` keeps

- the *own* runner: it runs only the user's own source (knob variants of the entry's original
  module), so it is reused across requests, modules and compiled kernels kept warm;
- a *spare*, started ahead: a candidate whose source differs from the user's (an LLM rewrite,
  an adversarial module) gets a fresh runner, used for that request only and then ended, so
  nothing it did (a patched function, a memo, a poisoned cache) reaches a later verdict.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
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


class RunnerProcess:
    def __init__(self, directory: Path, writable: Path, device: str, *, own: bool) -> None:
        self.directory = directory
        self.device = device
        self.own = own  # runs only the user's own source
        self.arena = Arena(device)
        self._next_id = 0
        self._ready = False
        self._overhead: float | None = None
        directory.mkdir(parents=True, exist_ok=True)
        to_runner, runner_in = os.pipe()
        runner_out, from_runner = os.pipe()
        fds = [to_runner, runner_out]
        if self.arena.fd >= 0:
            fds.append(self.arena.fd)
        command = [
            sys.executable,
            "-m",
            "tuned.evaluation.runner",
            str(to_runner),
            str(from_runner),
            str(self.arena.fd),
            str(directory),
            str(writable),
        ]
        log = open(directory / "stderr.log", "ab")  # noqa: SIM115 - the child's stderr
        try:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=[to_runner, from_runner, *fds[2:]],
                close_fds=True,
            )
        finally:
            log.close()
            os.close(to_runner)
            os.close(from_runner)
        self._to: IO[str] = os.fdopen(runner_in, "w", encoding="utf-8")
        self._from: IO[str] = os.fdopen(runner_out, "r", encoding="utf-8")
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
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            return f"the runner stopped answering during {phase}"
        if code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        else:
            how = f"exited with status {code}"
        return f"the runner {how} during {phase}" + _tail(self.directory / "stderr.log")

    def kill(self) -> None:
        self.alive = False
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for stream in (self._to, self._from):
            with contextlib.suppress(OSError):
                stream.close()
        self.arena.close()

    def close(self) -> None:
        if self.alive and self.proc.poll() is None:
            try:
                self._to.write(json.dumps({"op": "exit"}) + "\n")
                self._to.flush()
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()


def _tail(path: Path, limit: int = 400) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    return f"; stderr ends: {text[-limit:]}" if text else ""


class RunnerPool:
    """The own runner (reused for the user's source) and a spare for everything else."""

    def __init__(self, root: Path, device: str, writable: Path | None = None) -> None:
        self.root = root
        self.writable = writable or root
        self.device = device
        self._own: RunnerProcess | None = None
        self._spare: RunnerProcess | None = None
        self._started = 0

    def _start(self, *, own: bool) -> RunnerProcess:
        self._started += 1
        name = "own" if own else f"fresh-{self._started % 4}"
        directory = self.root / f"runner-{name}"
        return RunnerProcess(directory, self.writable, self.device, own=own)

    def start_ahead(self) -> None:
        """Start the own runner and a spare now (they import PyTorch while the judge waits)."""
        if self._own is None or not self._own.alive:
            self._own = self._start(own=True)
        if self._spare is None or not self._spare.alive:
            self._spare = self._start(own=False)

    def own(self) -> RunnerProcess:
        if self._own is None or not self._own.alive or self._own.proc.poll() is not None:
            if self._own is not None:
                self._own.kill()
            self._own = self._start(own=True)
        return self._own

    def fresh(self) -> RunnerProcess:
        """A runner no code has run in, for one request; a new spare starts behind it."""
        runner = self._spare
        if runner is None or not runner.alive or runner.proc.poll() is not None:
            if runner is not None:
                runner.kill()
            runner = self._start(own=False)
        self._spare = self._start(own=False)
        return runner

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
        for runner in (self._own, self._spare):
            if runner is not None:
                runner.close()
        self._own = self._spare = None
