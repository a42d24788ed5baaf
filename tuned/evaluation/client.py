"""The daemon's side of an evaluation worker: start it, feed it, enforce deadlines, replace it.

The worker runs in the host sandbox (:mod:`tuned.evaluation.sandbox`, docs/security.md), in
its own process group (``start_new_session``) with a scrubbed environment and its own Triton
cache directory. A candidate has one hard deadline from its request to its result; each phase
the worker announces (forward only, once) gets its own, shorter one. When a deadline passes,
the whole group is killed (``SIGKILL``) and the evaluation is recorded as ``timeout``. A worker
that dies (abort, signal, CUDA fault) yields ``crash`` with the signal and the tail of its
stderr; so does one that breaks the protocol (a line that is not a message, a result for
another request); the next evaluation starts a fresh worker.

With ``spares=N`` (on a GPU: :data:`GPU_SPARES`, for the daemon and ``ktuned tune``), N more
workers are started ahead and wait, so that a fresh worker (the acceptance rule's
re-measurement, or a restart after a crash) is there at once instead of after PyTorch's import
and CUDA's start-up (seconds on a GPU box, per acceptance); four, because acceptances come
seconds apart early in a campaign, faster than a spare starts. Once the client has evaluated a
kernel, each of the first :data:`PREPARED_SPARES` spares in line is asked to *prepare* for it
(for each kernel it evaluates, in turn; the others once they move up): it runs the kernel's
original module (trusted code, the registry's own) at its baseline knobs through the
correctness checks, which makes the cases' inputs and reference outputs and starts Triton's and
PyTorch's lazily loaded machinery. No candidate code has run in a spare when it takes over: for
the candidate it measures, it is as fresh as a worker started then. Each process has its own
directory (``workdir``, then ``workdir/spare-0``, ``spare-1``, ... in turn: its ``stderr.log``
and modules); all share the Triton cache (``workdir/triton-cache`` unless ``cache_dir`` says
otherwise).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuned.errors import WorkerError
from tuned.evaluation.channel import LineReader, parse_message
from tuned.evaluation.checks import short
from tuned.evaluation.gpu_turn import open_turn_file
from tuned.evaluation.sandbox import descendants, exit_status
from tuned.evaluation.settings import PHASES, EvaluationSettings
from tuned.evaluation.shapes import derive_shapes
from tuned.evaluation.spawn import spawn_child, worker_environment
from tuned.evaluation.static import candidate_check
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.registry.spec import KernelSpec

__all__ = ["EvaluationSettings", "WorkerClient", "spawn_child", "worker_environment"]

log = logging.getLogger(__name__)


#: Spare workers kept started on a GPU (see the module docstring). On the H100 box, with a
#: compile process per core, a spare took about 7 s to start and prepare, while early in a
#: campaign acceptances came every 3-4 s: with two, a re-measurement still waited 1-2 s.
#: Once the pipeline fed the GPU from the first second (tuned/pipeline.py), four acceptances
#: came within 3 s (H200): with three, the fourth waited 3.7 s for a spare still starting.
#: Each costs a CUDA context and the kernel's inputs on the GPU (about 0.6 GB for the matmul).
GPU_SPARES = 4

#: The spares, first in line, that prepare for the kernels evaluated; the others wait, started,
#: and prepare once they move up (at their kernels' next evaluations). A preparation makes all
#: of a kernel's cases in holds of the GPU turn that the worker's timing waits for: on the
#: H200, with all four preparing, one of layer_norm took 25 s and held the turn 13 s of it,
#: and the worker waited 0.3 s per candidate (bench/RESULTS.md, twenty-first session).
PREPARED_SPARES = 2

#: The part of a GPU (less the cache's margin) that the case caches of a worker and its spares
#: may hold together (tuned.evaluation.case_cache), and the part of it that the spares hold
#: (shared equally by the :data:`PREPARED_SPARES`), until one takes over and gets the rest: the
#: worker evaluates nearly every candidate, a spare re-measures one and has its cases spilled in
#: host memory too (on the H100 equal shares of a tenth left layer_norm's cases mostly spilled:
#: 2.2 s a candidate).
CASE_CACHE_DEVICE_SHARE = 0.5
SPARES_CACHE_SHARE = 0.2

#: A candidate's compile, correctness and benchmark phases may take at most this many times
#: what the same phase took its kernel's original in this client, and never less than
#: :data:`RELATIVE_FLOOR_S` (nor more than the settings' deadline). On the H200 a knob
#: variant of Liger's RMSNorm backward (a 16 x 32768 tile at 8 warps) kept ptxas busy in its
#: runner for over 190 s of its correctness phase, whose deadline is 300 s, while the
#: original's took 5 s: the campaign made no evaluation in that time.
RELATIVE_DEADLINE = 10.0
RELATIVE_FLOOR_S = 60.0

#: A ``gpu_busy`` evaluation (not measured) is made again up to this many times, this many
#: seconds apart, before it is the result (:meth:`WorkerClient.evaluate`).
BUSY_RETRIES = 2
BUSY_PAUSE_S = 1.0

#: A prepare request larger than this is not sent: a spare reads it only once started, and a
#: write larger than the pipe's buffer would block until then.
_PREPARE_MAX_BYTES = 32 * 1024

#: What a pipe to a spare holds unread: Linux's default (the pipe is grown to
#: :data:`_PIPE_WANTED` where the kernel allows, see ``_spawn``).
_PIPE_BYTES = 64 * 1024
_PIPE_WANTED = 1 << 20


class WorkerClient:
    """One worker subprocess, restarted as needed. Not thread-safe: one evaluation at a time."""

    def __init__(
        self,
        *,
        workdir: Path,
        settings: EvaluationSettings,
        python: str = sys.executable,
        spares: int = 0,
        env: Mapping[str, str] | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        self.workdir = workdir
        #: The Triton cache the worker reads (and the compile pool writes): ``workdir``'s own,
        #: or one shared by the workers of several GPUs (:class:`tuned.pipeline.MultiGpuPipeline`).
        self.cache_dir = cache_dir or workdir / "triton-cache"
        self.settings = settings
        self.python = python
        #: Started workers kept waiting to take over (see the module docstring).
        self.spares = spares
        #: Variables set in the worker's environment over the daemon's (``CUDA_VISIBLE_DEVICES``
        #: of the GPU this client measures on).
        self.env = dict(env or {})
        #: Workers that took over from the spare (the rest of ``starts`` were started cold).
        self.spare_takeovers = 0
        #: Preparations a spare had not begun when it was taken over, and skipped.
        self.preparations_skipped = 0
        self._spares: list[_Child] = []  # oldest first: the first to be ready
        self._dying: list[subprocess.Popen[bytes]] = []  # killed by fresh(), not reaped yet
        self._spares_started = 0
        self.fingerprint: dict[str, str] | None = None
        #: The GPU the worker compiles for (``worker.compile_target``); ``None`` in the
        #: interpreter. Set by :meth:`start`.
        self.target: dict[str, Any] | None = None
        self.starts = 0
        self._requests = 0  # evaluate requests sent: each result must name its own
        self._child: _Child | None = None  # the running worker
        #: The GPU turn its worker and spares take (tuned.evaluation.gpu_turn): with spares,
        #: where ``settings.turn`` says so (on a GPU, by default).
        self._turn_fd: int | None = None
        #: Kernels that ran out of device memory while spares ran: evaluated with none (see
        #: :meth:`evaluate`), and the kernel of the latest request.
        self.alone: set[str] = set()
        self._kernel: str | None = None
        #: Per kernel, the phase seconds of its original's latest successful evaluation here:
        #: what bounds its other candidates' phases (:data:`RELATIVE_DEADLINE`).
        self.original_phases: dict[str, dict[str, float]] = {}

    # -- lifecycle

    def start(self) -> dict[str, str]:
        """Start a worker (if none runs; the spare takes over when there is one) and return
        the software/hardware fingerprint."""
        if self._child is not None and self._child.proc.poll() is None and self.fingerprint:
            return self.fingerprint
        self._stop_current()
        self.workdir.mkdir(parents=True, exist_ok=True)
        spare = self._spares.pop(0) if self._spares else None
        message = None
        if spare is not None:
            message = self._take(spare)
            if message is None or message.get("type") != "ready":  # one cold start instead
                reason = message.get("reason") if message else self._death_reason("starting")
                log.warning("the spare worker did not start (%s); starting one now", reason)
                self._stop_current()
                message = None
            else:
                self.spare_takeovers += 1
        if message is None:
            message = self._take(self._spawn(self.workdir))
        if message is None or message.get("type") != "ready":
            reason = message.get("reason") if message else self._death_reason("starting")
            where = self._dir() / "stderr.log"
            self._stop_current()
            raise WorkerError(f"the evaluation worker did not start: {reason}; see {where}")
        self.fingerprint = {str(k): str(v) for k, v in message["fingerprint"].items()}
        self.target = message.get("target")
        while self._kernel not in self.alone and len(self._spares) < self.spares:
            if not self._start_spare():
                break
        return self.fingerprint

    def fresh(self) -> None:
        """Make the next evaluation run in a new worker process (the spare, if one waits).

        The old worker's group is killed at once but reaped later: a CUDA process takes
        a second or two to exit, and the spare need not wait for that."""
        if self._child is not None:
            self._child.stop(wait=False)
            self._dying.append(self._child.proc)
            self._child = None
        self._dying = [p for p in self._dying if p.poll() is None]

    def _prepared_all(self, spare: _Child) -> bool:
        """Whether ``spare`` has answered every request to prepare (and so would take over at
        once). One still making cases (of the kernels asked before this one, too) is not
        waited for: the running worker makes this kernel's cases itself. On the H100, with
        the registry's kernels tuned together, a kernel's first evaluation waited up to 33 s
        for a spare still preparing, 0.8 s of it in the worker."""
        return spare.reader.complete_lines() >= 1 + len(spare.prepared)  # "ready" + answers

    def _hand_to_spare(self) -> None:
        """The next evaluation runs in the spare (:meth:`fresh`), here not for a
        re-measurement: a kernel goes to the spare that prepared for it."""
        self.fresh()

    def pids(self) -> set[int]:
        """The worker's and the spares' process ids (their GPU use is this client's)."""
        children = [self._child, *self._spares]
        return {c.proc.pid for c in children if c is not None}

    def process_ids(self) -> set[int]:
        """Every process of the worker and the spares, those started inside their sandboxes
        included (:meth:`pids` are the processes this client started: ``bwrap`` when
        sandboxed). NVML names a GPU's users by these."""
        return descendants(self.pids())

    def worker_pids(self) -> set[int]:
        """The worker's and the spares' own processes (the judges, whose environment is the
        worker's): :meth:`process_ids` less the sandbox's ``bwrap`` processes around them and
        the runners' zygote and runners below them."""
        return {p for p in self.process_ids() if _is_worker(p)}

    @property
    def spare_pid(self) -> int | None:
        """The process id of the spare that takes over next (``None``: no spare waits)."""
        return self._spares[0].proc.pid if self._spares else None

    def close(self) -> None:
        """Stop the worker and the spares, each with its whole process group."""
        self._stop_current()
        for spare in self._spares:
            spare.stop()
        self._spares = []
        for proc in self._dying:
            proc.wait()
        self._dying = []
        if self._turn_fd is not None:
            os.close(self._turn_fd)
            self._turn_fd = None

    def _spawn(self, directory: Path) -> _Child:
        directory.mkdir(parents=True, exist_ok=True)
        try:
            if self.settings.turn and self.spares and self._turn_fd is None:
                self._turn_fd = open_turn_file(self.workdir / "gpu-turn.lock")
            proc, req_w, res_r = spawn_child(
                self.python,
                "tuned.evaluation.worker",
                directory,
                settings=self.settings,
                cache_dir=self.cache_dir,
                env=self.env,
                turn_fd=self._turn_fd,
            )
        except OSError as exc:
            raise WorkerError(f"cannot start the evaluation worker ({self.python}): {exc}") from exc
        self.starts += 1
        return _Child(proc, req_w, LineReader(res_r), directory, room=_grow_pipe(req_w))

    def _start_spare(self) -> bool:
        """Start one more spare, in a directory no other process of this client uses."""
        busy = {c.directory for c in [self._child, *self._spares] if c is not None}
        for _ in range(self.spares + 1):
            directory = self.workdir / f"spare-{self._spares_started % (self.spares + 1)}"
            self._spares_started += 1
            if directory not in busy:
                break
        try:
            self._spares.append(self._spawn(directory))
        except WorkerError as exc:
            log.warning("no spare worker: %s", exc)
            return False
        return True

    def prepare_ahead(self, spec: KernelSpec) -> None:
        """Ask the spares to prepare for ``spec`` now, before its first evaluation (a
        registry's next kernel while this one is tuned): that evaluation then runs in the spare
        that prepared, its cases made, instead of making them first (20 to 27 s per kernel of
        the example registry on the H100)."""
        if self._spares:
            self._prepare_spares(_kernel_payload(spec), self._options(), ahead=True)

    def _prepare_spares(
        self, payload: Mapping[str, Any], options: Mapping[str, Any], *, ahead: bool = False
    ) -> None:
        """Ask each spare not yet asked to prepare for this kernel (see the module docstring);
        its answers are read when it takes over (:meth:`_take`). A spare prepares for every
        kernel the client evaluates (a spare prepared for the first kernel only spent 10 to
        26 s making the cases of each later kernel's re-measurements on the H100), as long as
        its requests fit its pipe unread: a write must never block the caller.

        ``ahead`` (:meth:`prepare_ahead`): the kernel is not evaluated yet, and the spare keeps
        its cases only in the room the kernels it prepared for leave (``CaseCache.guest``):
        the kernel being tuned keeps its cases for its re-measurements. Once the kernel is
        evaluated, a spare that prepared only ahead is asked again, as a host."""
        name = str(payload["name"])
        waiting = [
            c
            for c in self._spares[:PREPARED_SPARES]
            if name not in c.prepared or (not ahead and name in c.ahead)
        ]
        if not waiting:
            return
        request = {
            "op": "prepare",
            "kernel": payload,
            "candidate": {
                "id": "prepare",
                "source": payload["original_source"],
                "knobs": dict(payload["baseline_knobs"]),
            },
            "options": {
                **options,
                "lenient_derived": True,
                "incumbent": None,
                "case_cache_share": self._cache_share(spare=True),
                "ahead": ahead,
            },
        }
        data = (json.dumps(request) + "\n").encode()
        if len(data) > _PREPARE_MAX_BYTES:
            return
        for child in waiting:
            if child.queued + len(data) > child.room:
                continue
            child.prepared.append(name)
            if ahead:
                child.ahead.add(name)
            else:
                child.ahead.discard(name)
            child.queued += len(data)
            # One that died is found when it is taken (a cold start instead).
            with contextlib.suppress(OSError):
                os.write(child.to_worker, data)

    def _take(self, child: _Child) -> dict[str, Any] | None:
        """Make ``child`` the running worker; its first message (``None``: none in time).

        A spare asked to prepare answers those requests too; it is told first that it is
        taken, for which kernel (``{"op": "taken", "kernel": ...}``), and skips the
        preparations of other kernels that it has not begun, instead of making the cases of
        every kernel queued ahead before the evaluation can start. A missing answer or a
        fatal failure (the process is gone or its CUDA context broken) makes it unusable: the
        error is returned and the caller starts one cold instead. A spare whose preparation
        failed otherwise is still fresh, and is used."""
        self._child = child
        if child.prepared:
            taken = {"op": "taken", "kernel": self._kernel}
            _write_now(child.to_worker, (json.dumps(taken) + "\n").encode())
        message = self._read_message(child)
        if message is None or message.get("type") != "ready":
            return message
        skipped = []
        for kernel in child.prepared:  # one answer per request, in order
            answer = self._read_message(child)
            if answer is None or answer.get("type") != "prepared" or answer.get("fatal"):
                why = "no answer" if answer is None else answer.get("reason", answer.get("type"))
                return {"type": "error", "reason": f"it did not prepare for {kernel}: {why}"}
            if answer.get("skipped"):
                skipped.append(kernel)
            elif not answer.get("ok"):
                log.info("the spare did not prepare for %s: %s", kernel, answer["reason"])
        for kernel in skipped:  # a kernel new to it, as for a cold worker
            child.prepared.remove(kernel)
            child.ahead.discard(kernel)
        self.preparations_skipped += len(skipped)
        return message

    def _read_message(self, child: _Child) -> dict[str, Any] | None:
        line = child.reader.read_line(self.settings.startup_timeout_s)
        if not line:
            return None
        message, problem = parse_message(line)
        if message is None:
            return {"type": "error", "reason": f"the worker sent {problem}"}
        return message

    def _stop_current(self) -> None:
        """Stop the running worker and its whole process group (the spare keeps waiting)."""
        if self._child is not None:
            self._child.stop()
            self._child = None

    def _dir(self) -> Path:
        """The running worker's own directory (its ``stderr.log``)."""
        return self.workdir if self._child is None else self._child.directory

    def __enter__(self) -> WorkerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- evaluation

    def evaluate(
        self,
        spec: KernelSpec,
        candidate: Candidate,
        incumbent: Candidate | None = None,
        *,
        derived_skip: Sequence[str] = (),
        lenient_derived: bool = False,
    ) -> EvalResult:
        """Evaluate one candidate. Failures of the candidate come back as results, never raised.

        With ``incumbent``, both are timed interleaved (samples in ``result.metadata``).
        Derived shapes (:mod:`tuned.evaluation.shapes`) listed in ``derived_skip`` are not
        checked; with ``lenient_derived`` (the baseline), a failing derived shape is recorded
        in ``metadata["derived_unusable"]`` instead of failing the evaluation."""
        rejection = candidate_check(spec, candidate)
        if rejection:
            return EvalResult(Outcome.REJECTED_STATIC, reason=rejection, phase="static")
        name = spec.name
        self._kernel = name
        if name in self.alone:
            self._stop_spares()
        result = self._evaluate(spec, candidate, incumbent, derived_skip, lenient_derived)
        for attempt in range(BUSY_RETRIES):
            if result.outcome is not Outcome.GPU_BUSY:
                break
            # Not measured (the host's noise hid a few-microsecond kernel's time twice in the
            # judge): measured again a moment later before it is recorded, as the daemon does
            # with a throttled measurement. Recorded, a busy original stopped its kernel for
            # good: on the H200, two of 160 TritonBench-G originals (2-3 us kernels) beside
            # the compile pool, both measured at once when timed alone.
            log.info("%s: %s; measuring again", name, result.reason)
            time.sleep(BUSY_PAUSE_S)
            result = self._evaluate(spec, candidate, incumbent, derived_skip, lenient_derived)
            note = f"{attempt + 1} measurement(s) before this one not taken (gpu_busy)"
            result = dataclasses.replace(result, metadata={**result.metadata, "busy": note})
        if candidate.provenance is Provenance.ORIGINAL and result.outcome is Outcome.OK:
            self.original_phases[name] = dict(result.phase_seconds)
        if not self._spares or not _out_of_memory(result):
            return result
        # The worker gave its own cached cases back and tried again already; what is left
        # is the spares' (their cases, arenas and contexts: on the H100, Liger's KL divergence
        # at a 128k vocabulary found 5 GiB free of 80). Once more without them; if that
        # fits, the kernel is evaluated alone from now on (a candidate that wants more than
        # the device has fails alone too, and costs its kernel nothing more).
        spares = len(self._spares)
        log.warning(
            "%s: out of GPU memory with %d spare workers running; evaluating it without them",
            name,
            spares,
        )
        self.alone.add(name)  # no spare started for the retry, whatever restarts
        self._stop_spares()
        again = self._evaluate(spec, candidate, incumbent, derived_skip, lenient_derived)
        if _out_of_memory(again):
            self.alone.discard(name)
        note = f"out of GPU memory with {spares} spares running ({short(result.reason, 200)})"
        return dataclasses.replace(again, metadata={**again.metadata, "retried_alone": note})

    def _stop_spares(self) -> None:
        for spare in self._spares:
            spare.stop(wait=False)
            self._dying.append(spare.proc)
        self._spares = []

    def _evaluate(
        self,
        spec: KernelSpec,
        candidate: Candidate,
        incumbent: Candidate | None,
        derived_skip: Sequence[str],
        lenient_derived: bool,
    ) -> EvalResult:
        name = spec.name
        current = self._child
        if (
            current is not None
            and name not in current.served
            and name not in current.prepared
            and self._spares
            and name in self._spares[0].prepared
            and self._prepared_all(self._spares[0])
        ):
            self._hand_to_spare()  # a kernel new to this worker: to the spare that prepared
        self.start()
        assert self._child is not None
        if self._child.reader.pending():
            # Words nobody asked for (e.g. a second result of the previous request): the worker
            # is not trusted with another request; this one runs in a fresh worker.
            log.warning("the evaluation worker spoke between requests; it was replaced")
            self._stop_current()
            self.start()
            assert self._child is not None
        child = self._child
        child.served.add(name)
        self._requests += 1
        request_id = self._requests
        payload = _kernel_payload(spec)
        self._prepare_spares(payload, self._options())
        request = {
            "op": "evaluate",
            "request": request_id,
            "kernel": payload,
            "candidate": {
                "id": candidate.id,
                "source": candidate.source,
                "knobs": dict(candidate.knobs),
            },
            "options": {
                **self._options(),
                "derived_skip": list(derived_skip),
                "lenient_derived": lenient_derived,
                # Its checks hold the GPU turn: code that may time itself (judge._case_turn)
                "checks_hold_turn": candidate.provenance is not Provenance.PARAMETRIC,
                "incumbent": None
                if incumbent is None
                else {"source": incumbent.source, "knobs": dict(incumbent.knobs)},
            },
        }
        try:
            os.write(child.to_worker, (json.dumps(request) + "\n").encode())
        except BrokenPipeError:
            return self._crashed("load", time.monotonic())
        original = None if candidate.provenance is Provenance.ORIGINAL else name
        return self._await_result(child, request_id, original)

    def deadline(self, phase: str, kernel: str | None = None) -> tuple[float, str]:
        """Seconds ``phase`` may take for a candidate of ``kernel`` (``None``: an original),
        and how that was set, for the reason of a timeout."""
        limit = self.settings.deadline(phase)
        took = self.original_phases.get(kernel, {}).get(phase) if kernel else None
        if took is None or phase == "load":
            return limit, "its"
        relative = max(RELATIVE_FLOOR_S, RELATIVE_DEADLINE * took)
        if relative >= limit:
            return limit, "its"
        return relative, (
            f"the original's {took:.1f} s x {RELATIVE_DEADLINE:g} (at least "
            f"{RELATIVE_FLOOR_S:g} s), its"
        )

    def _await_result(
        self, child: _Child, request_id: int, kernel: str | None = None
    ) -> EvalResult:
        """Read the worker's answer to request ``request_id`` under one hard deadline.

        ``phase`` messages name the phase (the reason of a timeout) and give it its own,
        shorter deadline, once and only forward, never past the candidate's hard deadline
        (:attr:`EvaluationSettings.candidate_deadline`); for a candidate of ``kernel`` that is
        not its original, no longer than :data:`RELATIVE_DEADLINE` times the original's
        (:meth:`deadline`). Anything else than a well-formed
        ``phase`` or a ``result`` for this request (a line that is not JSON, an unknown
        message, a result of another request) ends the worker: a crash of this candidate,
        and the next request runs in a fresh worker (docs/security.md, "The channel")."""
        started = time.monotonic()
        hard = started + self.settings.candidate_deadline
        phase, phase_end, seen = "load", started + self.deadline("load")[0], {"load"}
        while True:
            now = time.monotonic()
            line = child.reader.read_line(max(min(phase_end, hard) - now, 0.0))
            if line is None:
                self._stop_current()
                if phase_end < hard:
                    limit, how = self.deadline(phase, kernel)
                    what = f"{phase} exceeded {how}"
                else:
                    limit, what = self.settings.candidate_deadline, "the candidate exceeded its"
                return EvalResult(
                    Outcome.TIMEOUT,
                    phase=phase,
                    reason=f"{what} {limit:g} s deadline; the worker's process group was killed",
                    phase_seconds={phase: time.monotonic() - started},
                )
            if line == b"":
                return self._crashed(phase, started)
            message, problem = parse_message(line)
            if message is not None and message.get("type") == "phase":
                announced = message.get("phase")
                if announced in PHASES and announced not in seen:
                    if PHASES.index(announced) > PHASES.index(phase):
                        phase = str(announced)
                        phase_end = time.monotonic() + self.deadline(phase, kernel)[0]
                    seen.add(str(announced))
                continue
            if message is not None and message.get("type") == "result":
                if message.get("request") != request_id:
                    problem = (
                        f"a result for request {message.get('request')!r} while request "
                        f"{request_id} was running"
                    )
                else:
                    try:
                        result = EvalResult.from_dict(message["result"])
                    except (KeyError, TypeError, ValueError, AttributeError) as exc:
                        problem = f"a malformed result ({type(exc).__name__}: {exc})"
                    else:
                        if message.get("fatal"):
                            self._stop_current()
                        return result
            elif message is not None:
                problem = f"an unexpected message of type {message.get('type')!r}"
            return self._broken_channel(phase, started, problem or "an unreadable message")

    def _broken_channel(self, phase: str, started: float, problem: str) -> EvalResult:
        """The worker broke the protocol: kill it; a crash of this candidate only."""
        self._stop_current()
        log.warning("the evaluation worker sent %s; it was replaced", problem)
        return EvalResult(
            Outcome.CRASH,
            phase=phase,
            reason=f"the worker broke the protocol during {phase}: it sent {problem}; "
            "the worker's process group was killed",
            phase_seconds={phase: time.monotonic() - started},
        )

    def _options(self) -> dict[str, Any]:
        return {
            "seeds": list(self.settings.seeds),
            "interpreter_max_size": self.settings.interpreter_max_size,
            "case_cache_bytes": self.settings.case_cache_bytes,
            # This worker and its spares each keep a cache on the one device: together half of
            # it less the margin, the rest for the runners, the candidates and the allocators
            # (on an H100, five caches of a fifth each still left 300 MiB free).
            "case_cache_share": self._cache_share(spare=False),
            "timing": dataclasses.asdict(self.settings.timing),
            "turn_wait_s": self.settings.turn_wait_s,
        }

    def _cache_share(self, *, spare: bool) -> float:
        """The device share of a spare's case cache, or of the running worker's."""
        if not self.spares:
            return CASE_CACHE_DEVICE_SHARE
        spares = CASE_CACHE_DEVICE_SHARE * SPARES_CACHE_SHARE
        preparing = max(1, min(self.spares, PREPARED_SPARES))  # only these keep cases
        return spares / preparing if spare else CASE_CACHE_DEVICE_SHARE - spares

    def _crashed(self, phase: str, started: float) -> EvalResult:
        reason = self._death_reason(phase)
        self._stop_current()
        return EvalResult(
            Outcome.CRASH,
            phase=phase,
            reason=reason,
            phase_seconds={phase: time.monotonic() - started},
        )

    def _death_reason(self, phase: str) -> str:
        code = None
        if self._child is not None:
            try:
                code = self._child.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                code = None
        if code is not None:
            code = exit_status(code, self.settings.sandbox)
        if code is None:
            how = "stopped answering"
        elif code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        else:
            how = f"exited with status {code}"
        tail = _tail(self._dir() / "stderr.log")
        return f"the worker {how} during {phase}" + (f"; stderr ends: {tail}" if tail else "")


@dataclass
class _Child:
    """A started worker process: the running one, or the spare waiting to take over."""

    proc: subprocess.Popen[bytes]
    to_worker: int
    reader: LineReader
    directory: Path
    #: The kernels a spare was asked to prepare for, in order (see ``_take``).
    prepared: list[str] = field(default_factory=list)
    #: Those it prepared for only ahead, as a guest of the others' cases.
    ahead: set[str] = field(default_factory=set)
    #: The kernels it was asked to evaluate.
    served: set[str] = field(default_factory=set)
    #: Bytes of those requests, and how many its pipe holds unread (they are written before
    #: the spare reads: more would block the writer).
    queued: int = 0
    room: int = _PIPE_BYTES

    def stop(self, *, wait: bool = True) -> None:
        """Kill the whole process group and close the pipes; ``wait``: reap it now."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        if wait:
            self.proc.wait()
        for fd in (self.to_worker, self.reader.fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def _write_now(fd: int, data: bytes) -> bool:
    """Write ``data`` unless the pipe is full or gone; never blocks the caller. Meant for
    short messages (up to ``PIPE_BUF``, 4 KiB on Linux, a write is all or nothing)."""
    blocking = os.get_blocking(fd)
    try:
        os.set_blocking(fd, False)
        os.write(fd, data)
    except OSError:  # BlockingIOError (full), BrokenPipeError (gone)
        return False
    finally:
        with contextlib.suppress(OSError):
            os.set_blocking(fd, blocking)
    return True


def _grow_pipe(fd: int) -> int:
    """Grow the pipe behind ``fd`` to :data:`_PIPE_WANTED` where allowed; its size."""
    import fcntl

    grow = getattr(fcntl, "F_SETPIPE_SZ", None)
    size = getattr(fcntl, "F_GETPIPE_SZ", None)
    try:
        if grow is not None:
            fcntl.fcntl(fd, grow, _PIPE_WANTED)
        return int(fcntl.fcntl(fd, size)) if size is not None else _PIPE_BYTES
    except OSError:  # above /proc/sys/fs/pipe-max-size for this user: the default stays
        return _PIPE_BYTES


def _is_worker(pid: int) -> bool:
    """Whether ``pid`` runs ``python -m tuned.evaluation.worker`` (a judge, not a runner)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return False  # gone
    return comm != "bwrap" and b"tuned.evaluation.worker" in argv  # bwrap's argv holds it too


def _tail(path: Path, limit: int = 800) -> str:
    try:
        data = path.read_bytes()[-limit:]
    except OSError:
        return ""
    return data.decode("utf-8", "replace").strip()


def _out_of_memory(result: EvalResult) -> bool:
    return result.outcome is Outcome.RUNTIME_ERROR and "out of memory" in result.reason.lower()


def _kernel_payload(spec: KernelSpec) -> dict[str, Any]:
    derived = [
        {"dims": dict(s.dims), "perf": False, "derived": True} for s in derive_shapes(spec.shapes)
    ]
    return {
        "name": spec.name,
        "launcher": spec.launcher,
        "inputs": spec.inputs,
        "reference": spec.reference,
        "shapes": [{"dims": dict(s.dims), "perf": s.perf} for s in spec.shapes] + derived,
        "dtypes": list(spec.dtypes),
        "tolerance": {d: [t.atol, t.rtol] for d, t in spec.tolerance.items()},
        "original_source": spec.module_source,
        "extra_files": dict(spec.extra_files),
        "baseline_knobs": dict(spec.baseline_knobs),
        "knobs_declared": spec.knobs_declared,  # passed to the launcher, never injected
        "call": spec.call_payload(),  # how the launcher is called: tuned.evaluation.invoke
        # a launcher of an installed package (tuned.registry.installed): its copies load in
        # that package; inputs and reference come from the entry's own module
        "package": spec.package,
        "inputs_source": spec.entry_source,
    }


#: What a worker (or a compile process) needs to know of an entry, sent with every request.
kernel_payload = _kernel_payload
