"""The daemon's worker client: interruptible by SIGTERM, and honest about throttled clocks.

:class:`GatedWorkerClient` is a :class:`~tuned.evaluation.client.WorkerClient` whose
evaluations (1) run inside the daemon's *interruptible* section, where a stop request raises
:class:`ShutdownRequested` out of the wait on the worker, so a stop never waits for a
long evaluation (the candidate is recorded, its result is not, and the next start evaluates
it again); and (2) on a GPU, are bracketed by the monitor's throttle mark: a measurement taken
while clocks were held down is discarded and redone, up to ``retries`` times, and then
recorded as ``gpu_busy`` rather than as a slow candidate. It also counts the workers that
take over by why the previous one went (``starts_by_reason``, ``ktuned_worker_starts_total``):
``start`` (the first), ``crash`` (the worker died, or reported its CUDA context broken),
``timeout`` (a phase overran and its group was killed), ``confirm`` (the acceptance rule's
re-measurement in a fresh worker, :meth:`fresh`) and ``recycle`` (any other replacement: the
worker exited between evaluations, or the daemon stopped it). Only ``crash`` means trouble.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from tuned.daemon.gpu import GpuMonitor
from tuned.errors import TunedError
from tuned.evaluation.client import EvaluationSettings, WorkerClient
from tuned.metrics.live import WORKER_START_REASONS
from tuned.outcomes import Candidate, EvalResult, Outcome
from tuned.registry.spec import KernelSpec

__all__ = ["WORKER_START_REASONS", "GatedWorkerClient", "ShutdownRequested"]

log = logging.getLogger(__name__)


class ShutdownRequested(TunedError):
    """SIGTERM (or SIGINT) arrived during an evaluation; the daemon stops without its result."""


class GatedWorkerClient(WorkerClient):
    def __init__(
        self,
        *,
        workdir: Path,
        settings: EvaluationSettings,
        monitor: GpuMonitor,
        retries: int,
        interruptible: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
        spares: int = 0,
        env: Mapping[str, str] | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        super().__init__(
            workdir=workdir, settings=settings, spares=spares, env=env, cache_dir=cache_dir
        )
        self.monitor = monitor
        self.retries = retries
        self.interruptible = interruptible
        self.discarded = 0
        #: Workers that took over, by why the previous one went (the module docstring).
        self.starts_by_reason = dict.fromkeys(WORKER_START_REASONS, 0)
        self._next_reason = "start"
        self._reaping: set[int] = set()  # pids of killed workers a thread waits for

    def own_pids(self) -> set[int]:
        """This process, the worker and its spares (with what runs in their sandboxes): their
        GPU use is not foreign work."""
        return {os.getpid(), *self.process_ids()}

    def start(self) -> dict[str, str]:
        child = self._child
        replacing = child is None or child.proc.poll() is not None or not self.fingerprint
        with self.interruptible():
            fingerprint = super().start()
        if replacing:
            self.starts_by_reason[self._next_reason] += 1
            self._next_reason = "recycle"  # unless a crash, timeout or fresh() says otherwise
        return fingerprint

    def fresh(self) -> None:
        """:meth:`WorkerClient.fresh`, counted as a ``confirm`` start when the next one runs.

        The old worker is killed without waiting (a CUDA process takes a second or two to
        exit); a thread waits for it, so it never stays a zombie while the daemon runs."""
        if self._child is not None:
            self._next_reason = "confirm"
        super().fresh()
        for proc in self._dying:
            if proc.pid not in self._reaping:
                self._reaping.add(proc.pid)
                threading.Thread(
                    target=proc.wait, name=f"ktuned-reap-{proc.pid}", daemon=True
                ).start()
        self._reaping &= {proc.pid for proc in self._dying}

    def _hand_to_spare(self) -> None:
        """A kernel to the spare that prepared for it: a ``recycle``, not a ``confirm``."""
        self.fresh()
        self._next_reason = "recycle"

    def evaluate(
        self, spec: KernelSpec, candidate: Candidate, *args: Any, **kwargs: Any
    ) -> EvalResult:
        """:meth:`WorkerClient.evaluate` (same arguments), gated as the module says."""
        why = ""
        for attempt in range(self.retries + 1):
            mark = self.monitor.throttle_mark()
            with self.interruptible():
                result = super().evaluate(spec, candidate, *args, **kwargs)
            if self._child is None and result.outcome is not Outcome.REJECTED_STATIC:
                # The worker was killed or died during the evaluation: the next one replaces it.
                self._next_reason = "timeout" if result.outcome is Outcome.TIMEOUT else "crash"
            if result.outcome is not Outcome.OK or result.timing_kind != "gpu":
                return result
            throttled = self.monitor.throttled_since(mark)
            if throttled is None:
                return result
            why = throttled
            self.discarded += 1
            log.warning(
                "%s %s: measurement %d discarded (%s); measuring again",
                spec.name,
                candidate.id[:12],
                attempt + 1,
                throttled,
            )
        return EvalResult(
            Outcome.GPU_BUSY,
            phase="benchmark",
            reason=f"every one of {self.retries + 1} measurements was disturbed ({why}); "
            "not a property of the candidate",
        )
