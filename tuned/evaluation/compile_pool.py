"""A pool of CPU processes that compile candidates ahead of the GPU worker.

On a GPU box, an evaluation used to spend most of its time compiling, one candidate after
another, while the GPU waited (on an H100, 95 % of a serial sweep of matmul configurations
was compilation). The pool runs that work on the machine's other cores: each candidate is
imported and compiled for every declared and derived shape x dtype by one of ``workers``
processes (:mod:`tuned.evaluation.precompile`), which write the compiled kernels into the
Triton cache directory the GPU worker reads, so the worker's own compile step is a cache hit.

What a compile process finds out is recorded without the GPU worker ever seeing the
candidate: a static rejection, an import that raises, hangs or kills the process, Triton's
compile errors (``PTXASError``, ``OutOfResources``, ...), a compile that passes its deadline.
Everything else goes on to the GPU worker, which still makes every check; a candidate the
pool could not compile ahead (its launcher does not run on meta tensors, or the pool itself
failed) simply compiles there as before. Nothing submitted is ever lost: every future
completes.

Isolation is the worker's: each process runs in its own process group with a scrubbed
environment and the guard around candidate code. A job's phases have the worker's deadlines
(``load_timeout_s``, then ``compile_timeout_s``), enforced from here by killing the process
group; a dead or killed process is replaced by a fresh one for the next job.

*Speculative* jobs (``submit(..., speculative=True)``: candidates the policy is likely to
propose soon, :meth:`tuned.search.Campaign.likely_next`) use processes nothing else needs:
a process takes one only when no regular job is queued. When the policy does propose one,
its regular ``submit`` takes the speculative job over (moved to the front queue if it has
not started; its result, with no queue or compile time of its own, if it is done), so the
GPU worker gets a candidate that is already compiled. Speculation changes which work is
done early, never a result: a compile failure found speculatively is the candidate's
failure when it is proposed, as it would have been.

Thread model: :meth:`CompilePool.submit` may be called from any thread; one dispatcher
thread owns the processes.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuned.evaluation.client import EvaluationSettings, kernel_payload, spawn_child
from tuned.evaluation.sandbox import exit_status
from tuned.evaluation.static import candidate_check
from tuned.outcomes import Candidate, EvalResult, Outcome
from tuned.registry.spec import KernelSpec

__all__ = ["CompilePool", "CompileTarget", "Precompiled", "default_compile_workers"]

log = logging.getLogger(__name__)

#: Phases a pooled evaluation adds to ``EvalResult.phase_seconds``.
QUEUE_PHASE, PRECOMPILE_PHASE = "compile_queue", "precompile"

#: Speculative jobs remembered (by candidate id) for a later regular submit to take over;
#: the oldest beyond this are forgotten (their binaries stay in the Triton cache).
SPECULATION_MEMORY = 1024


def default_compile_workers() -> int:
    """The machine's cores minus one (one stays with the GPU worker), at least one."""
    return max(1, (os.cpu_count() or 2) - 1)


@dataclass(frozen=True)
class CompileTarget:
    """The GPU the compiled kernels are for (reported by the GPU worker at start)."""

    backend: str
    arch: int | str
    warp_size: int
    max_shared_bytes: int = 0
    #: ``torch.cuda.get_device_properties`` of the GPU, plain values (``worker.device_properties``)
    device_properties: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CompileTarget:
        arch = d["arch"]
        props = d.get("device_properties") or {}
        return cls(
            backend=str(d["backend"]),
            arch=int(arch) if isinstance(arch, int) or str(arch).isdigit() else str(arch),
            warp_size=int(d["warp_size"]),
            max_shared_bytes=int(d.get("max_shared_bytes", 0)),
            device_properties={
                str(k): v for k, v in dict(props).items() if isinstance(v, (bool, int, float, str))
            },
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "arch": self.arch,
            "warp_size": self.warp_size,
            "max_shared_bytes": self.max_shared_bytes,
            "device_properties": dict(self.device_properties),
        }


@dataclass(frozen=True)
class Precompiled:
    """What the pool made of one candidate.

    ``ready``: go on to the GPU worker (``result`` is OK, and ``compiled`` says whether its
    kernels are in the cache). Otherwise ``result`` is the failure to record as the
    candidate's evaluation. ``result.phase_seconds`` holds ``compile_queue`` (waiting for a
    free process) and ``precompile`` (the process's work).
    """

    candidate_id: str
    result: EvalResult
    finished_at: float  # time.monotonic() when the pool was done with it

    @property
    def ready(self) -> bool:
        return self.result.outcome is Outcome.OK

    @property
    def compiled(self) -> bool:
        return bool(self.result.metadata.get("precompiled"))


@dataclass
class _Job:
    candidate: Candidate
    request: dict[str, Any]
    future: Future[Precompiled]
    submitted: float
    started: float = 0.0
    phase: str = "load"
    phase_started: float = 0.0


@dataclass
class _Slot:
    """One compile process: ``starting`` until it says ready, then idle or busy."""

    index: int
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None
    to_child: int | None = None
    from_child: int | None = None
    buffer: bytes = b""
    ready: bool = False
    started: float = 0.0
    job: _Job | None = None
    mode: str = ""
    failures: int = 0
    history: list[str] = field(default_factory=list)


class CompilePool:
    """``workers`` compile processes fed from one queue (see the module docstring)."""

    def __init__(
        self,
        *,
        workdir: Path,
        cache_dir: Path,
        settings: EvaluationSettings,
        workers: int | None = None,
        target: CompileTarget | None = None,
        python: str = sys.executable,
    ) -> None:
        self.workdir = workdir
        self.cache_dir = cache_dir
        self.settings = settings
        self.workers = max(1, workers if workers is not None else default_compile_workers())
        self.target = target
        self.python = python
        self.starts = 0
        self.crashes = 0
        self.timeouts = 0
        #: Speculative jobs submitted, and those a regular submit took over.
        self.speculated = 0
        self.speculation_hits = 0
        self._slots = [_Slot(i, workdir / str(i)) for i in range(self.workers)]
        self._queue: deque[_Job] = deque()
        self._spec_queue: deque[_Job] = deque()
        self._speculative: OrderedDict[str, _Job] = OrderedDict()
        self._lock = threading.RLock()
        self._wake_r, self._wake_w = os.pipe()
        self._closed = False
        self._ids = itertools.count()
        self._thread = threading.Thread(target=self._dispatch, name="compile-pool", daemon=True)
        self._thread.start()

    # -- public

    def submit(
        self,
        spec: KernelSpec,
        candidate: Candidate,
        *,
        derived_skip: Sequence[str] = (),
        speculative: bool = False,
    ) -> Future[Precompiled]:
        """Queue ``candidate`` for compilation; the future always completes (never raises).

        ``speculative``: compile it only on a process no regular job needs (see the module
        docstring); a later regular submit of the same candidate takes the job over."""
        now = time.monotonic()
        with self._lock:
            taken = self._take_over(candidate.id, now, speculative)
        if taken is not None:
            self._wake()
            return taken
        future: Future[Precompiled] = Future()
        rejection = candidate_check(spec, candidate)
        if rejection:
            result = EvalResult(
                Outcome.REJECTED_STATIC,
                reason=rejection,
                phase="static",
                phase_seconds={QUEUE_PHASE: 0.0, PRECOMPILE_PHASE: 0.0},
            )
            future.set_result(Precompiled(candidate.id, result, now))
            return future
        request = {
            "op": "compile",
            "job": next(self._ids),
            "kernel": kernel_payload(spec),
            "candidate": {
                "id": candidate.id,
                "source": candidate.source,
                "knobs": dict(candidate.knobs),
            },
            "target": None if self.target is None else self.target.to_dict(),
            "derived_skip": list(derived_skip),
        }
        job = _Job(candidate, request, future, now)
        with self._lock:
            if self._closed:
                raise RuntimeError("the compile pool is closed")
            if speculative:
                self.speculated += 1
                self._spec_queue.append(job)
                self._speculative[candidate.id] = job
                while len(self._speculative) > SPECULATION_MEMORY:
                    _, old = self._speculative.popitem(last=False)
                    if old in self._spec_queue:  # never started: nobody waits for it
                        self._spec_queue.remove(old)
                        old.future.cancel()
            else:
                self._queue.append(job)
        self._wake()
        return future

    def _take_over(
        self, candidate_id: str, now: float, speculative: bool
    ) -> Future[Precompiled] | None:
        """The future of a speculative job of ``candidate_id``, if there is one (with the
        lock held). A regular submit takes the job over: queued, it moves to the front
        queue; done, its result comes back stamped as compiled with no wait."""
        job = self._speculative.get(candidate_id)
        if job is None:
            return None
        if speculative:
            return job.future
        del self._speculative[candidate_id]
        if job in self._spec_queue:
            self._spec_queue.remove(job)
            job.submitted = now
            self._queue.append(job)
            return job.future
        if not job.future.done():  # compiling now
            return job.future
        self.speculation_hits += 1
        done = job.future.result()
        result = EvalResult.from_dict(
            {
                **done.result.to_dict(),
                "metadata": {**done.result.metadata, "speculative": True},
                "phase_seconds": {
                    **done.result.phase_seconds,
                    QUEUE_PHASE: 0.0,
                    PRECOMPILE_PHASE: 0.0,
                },
            }
        )
        future: Future[Precompiled] = Future()
        future.set_result(Precompiled(candidate_id, result, now))
        return future

    def wait_ready(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for every process to have started (they start
        with the pool); returns how many are ready. For benchmarks that time a warm pool."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                ready = sum(1 for s in self._slots if s.ready)
            if ready == self.workers or time.monotonic() >= deadline:
                return ready
            time.sleep(0.05)

    def pids(self) -> set[int]:
        """The process ids of the pool's running compile processes."""
        with self._lock:
            return {s.proc.pid for s in self._slots if s.proc is not None and s.proc.poll() is None}

    def pending(self) -> int:
        """Jobs queued or compiling."""
        with self._lock:
            queued = len(self._queue) + len(self._spec_queue)
            return queued + sum(1 for s in self._slots if s.job is not None)

    def close(self) -> None:
        """Stop every process (killing its group); unfinished futures complete as not
        precompiled, so whoever waits on them goes on."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake()
        self._thread.join(timeout=30)
        for slot in self._slots:
            if slot.job is not None:
                self._finish(slot.job, _not_precompiled("the compile pool was closed"))
                slot.job = None
            self._stop(slot)
        for queue in (self._queue, self._spec_queue):
            while queue:
                self._finish(queue.popleft(), _not_precompiled("the compile pool was closed"))
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the dispatcher thread

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def _dispatch(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                self._assign()
            fds = {s.from_child: s for s in self._slots if s.from_child is not None}
            timeout = self._next_deadline()
            ready, _, _ = select.select([self._wake_r, *fds], [], [], timeout)
            if self._wake_r in ready:
                with contextlib.suppress(OSError):
                    os.read(self._wake_r, 4096)
            for fd in ready:
                if fd in fds:
                    self._read(fds[fd])
            self._enforce_deadlines()

    def _assign(self) -> None:
        """Give queued jobs to idle processes; keep every slot's process running (a process
        that failed to start three times in a row is left alone)."""
        for slot in self._slots:
            if slot.proc is None and slot.failures < 3:
                self._start(slot)
            if slot.ready and slot.job is None and (self._queue or self._spec_queue):
                self._send(slot, (self._queue or self._spec_queue).popleft())

    def _start(self, slot: _Slot) -> bool:
        slot.workdir.mkdir(parents=True, exist_ok=True)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        try:
            slot.proc, req_w, res_r = spawn_child(
                self.python,
                "tuned.evaluation.precompile",
                slot.workdir,
                settings=self.settings,
                cache_dir=self.cache_dir,
            )
        except OSError as exc:
            log.warning("cannot start a compile process (%s): %s", self.python, exc)
            self._fail_queue_if_hopeless(slot, f"cannot start: {exc}")
            return False
        self.starts += 1
        slot.to_child, slot.from_child, slot.buffer = req_w, res_r, b""
        slot.ready, slot.started, slot.mode = False, time.monotonic(), ""
        return True

    def _send(self, slot: _Slot, job: _Job) -> None:
        assert slot.to_child is not None
        now = time.monotonic()
        job.started = job.phase_started = now
        job.phase = "load"
        slot.job = job
        try:
            os.write(slot.to_child, (json.dumps(job.request) + "\n").encode())
        except OSError:
            self._died(slot)

    def _read(self, slot: _Slot) -> None:
        """Handle what a process wrote (select said it is readable): messages, or its end."""
        assert slot.from_child is not None
        try:
            chunk = os.read(slot.from_child, 1 << 16)
        except OSError:
            chunk = b""
        if not chunk:
            self._died(slot)
            return
        slot.buffer += chunk
        while b"\n" in slot.buffer:
            line, _, slot.buffer = slot.buffer.partition(b"\n")
            message = json.loads(line)
            kind = message.get("type")
            if kind == "ready":
                slot.ready, slot.mode, slot.failures = True, str(message.get("mode", "")), 0
                if self.target is not None and slot.mode != "compile":
                    log.warning("compile process %d: Triton cannot compile ahead here", slot.index)
                with self._lock:
                    self._assign()
            elif kind == "phase" and slot.job is not None:
                slot.job.phase, slot.job.phase_started = str(message["phase"]), time.monotonic()
            elif kind == "result" and slot.job is not None:
                job, slot.job = slot.job, None
                self._finish(job, EvalResult.from_dict(message["result"]))
                with self._lock:
                    self._assign()

    def _next_deadline(self) -> float | None:
        now, soonest = time.monotonic(), None
        for slot in self._slots:
            if slot.proc is None:
                continue
            if slot.job is not None:
                left = self.settings.deadline(slot.job.phase) - (now - slot.job.phase_started)
            elif not slot.ready:
                left = self.settings.startup_timeout_s - (now - slot.started)
            else:
                continue
            soonest = left if soonest is None else min(soonest, left)
        return None if soonest is None else max(soonest, 0.0)

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        for slot in self._slots:
            if slot.proc is None:
                continue
            job = slot.job
            if job is not None:
                limit = self.settings.deadline(job.phase)
                if now - job.phase_started >= limit:
                    self.timeouts += 1
                    slot.job = None
                    self._stop(slot)
                    self._finish(
                        job,
                        EvalResult(
                            Outcome.TIMEOUT,
                            phase=job.phase,
                            reason=f"{job.phase} exceeded its {limit:g} s deadline in the "
                            "compile pool; the compile process group was killed",
                        ),
                    )
            elif not slot.ready and now - slot.started >= self.settings.startup_timeout_s:
                self._stop(slot)
                self._fail_queue_if_hopeless(slot, "did not start in time")

    def _died(self, slot: _Slot) -> None:
        job, slot.job = slot.job, None
        how = self._death(slot)
        if job is not None:
            self.crashes += 1
            tail = _tail(slot.workdir / "stderr.log")
            reason = f"the compile process {how} during {job.phase}" + (
                f"; stderr ends: {tail}" if tail else ""
            )
            self._finish(job, EvalResult(Outcome.CRASH, phase=job.phase, reason=reason))
        elif not slot.ready:
            self._fail_queue_if_hopeless(slot, f"{how} while starting")

    def _fail_queue_if_hopeless(self, slot: _Slot, why: str) -> None:
        """A process that cannot even start: after three in a row on every slot, the queued
        jobs go on to the GPU worker uncompiled rather than wait forever."""
        slot.failures += 1
        log.warning("compile process %d %s (see %s)", slot.index, why, slot.workdir / "stderr.log")
        if all(s.failures >= 3 for s in self._slots):
            with self._lock:
                jobs = [*self._queue, *self._spec_queue]
                self._queue.clear()
                self._spec_queue.clear()
            for job in jobs:
                self._finish(job, _not_precompiled(f"no compile process could start ({why})"))

    def _death(self, slot: _Slot) -> str:
        code = None
        if slot.proc is not None:
            try:
                code = slot.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                code = None
        self._stop(slot)
        if code is None:
            return "stopped answering"
        code = exit_status(code, self.settings.sandbox)
        if code < 0:
            return f"was killed by {signal.Signals(-code).name}"
        return f"exited with status {code}"

    def _stop(self, slot: _Slot) -> None:
        if slot.proc is not None:
            if slot.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(slot.proc.pid, signal.SIGKILL)
            slot.proc.wait()
        for fd in (slot.to_child, slot.from_child):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        slot.proc, slot.to_child, slot.from_child, slot.ready = None, None, None, False

    def _finish(self, job: _Job, result: EvalResult) -> None:
        now = time.monotonic()
        started = job.started or now
        phases = {
            QUEUE_PHASE: started - job.submitted,
            PRECOMPILE_PHASE: now - started,
        }
        merged = EvalResult.from_dict(
            {**result.to_dict(), "phase_seconds": {**result.phase_seconds, **phases}}
        )
        if not job.future.done():
            job.future.set_result(Precompiled(job.candidate.id, merged, now))


def _not_precompiled(note: str) -> EvalResult:
    return EvalResult(Outcome.OK, phase="precompile", metadata={"precompiled": False, "note": note})


def _tail(path: Path, limit: int = 800) -> str:
    try:
        data = path.read_bytes()[-limit:]
    except OSError:
        return ""
    return data.decode("utf-8", "replace").strip()
