"""What only the running daemon knows: its state, the GPUs' busy flags, per-kernel states.

The daemon's main loop writes through :class:`LiveStatus`; the metrics collector (HTTP server
threads) reads a consistent :class:`LiveSnapshot`. Everything else is read from the store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from tuned.store.overview import KERNEL_STATES  # every kernel state (one list for all)

__all__ = [
    "DAEMON_STATES",
    "KERNEL_STATES",
    "PROFILING_STATES",
    "WORKER_START_REASONS",
    "GpuLabels",
    "LiveSnapshot",
    "LiveStatus",
]

#: Every state of the daemon, as exported in ``ktuned_daemon_state``.
DAEMON_STATES = ("starting", "tuning", "idle", "paused_gpu_busy", "reloading", "stopping")
#: Why an evaluation worker took over (tuned.daemon.gated), as exported in
#: ``ktuned_worker_starts_total{reason}``.
WORKER_START_REASONS = ("start", "crash", "timeout", "confirm", "recycle")
#: Every state of hardware feedback, as exported in ``ktuned_profiling_state``
#: (:class:`tuned.profiling.HardwareFeedback`, docs/profiling.md).
PROFILING_STATES = ("enabled", "disabled", "interpreter", "unavailable")


@dataclass(frozen=True)
class GpuLabels:
    """dcgm-exporter's labels for a GPU (``gpu`` index, ``UUID``) and the model name.

    In interpreter mode there is one pseudo-device ``gpu="interpreter"`` with an empty UUID.
    """

    gpu: str
    uuid: str
    model: str
    mode: str


@dataclass(frozen=True)
class LiveSnapshot:
    daemon_state: str = "starting"
    current_kernel: str = ""
    kernel_states: Mapping[str, str] = field(default_factory=dict)
    gpus: tuple[GpuLabels, ...] = ()
    gpu_busy: Mapping[str, bool] = field(default_factory=dict)  # by GpuLabels.gpu
    fingerprint: Mapping[str, str] = field(default_factory=dict)
    errors_total: int = 0
    #: Workers that took over, by reason (tuned.daemon.gated.WORKER_START_REASONS).
    worker_starts: Mapping[str, int] = field(default_factory=dict)
    discarded_total: int = 0
    profiling_state: str = "disabled"
    #: Rows in the local outbox waiting for the PostgreSQL store to answer again
    #: (:class:`tuned.store.outbox.OutboxStore`'s ``on_change``); 0 when in sync or on SQLite.
    outbox_rows: int = 0
    started_at: float = field(default_factory=time.time)


class LiveStatus:
    """A thread-safe holder: the main loop calls :meth:`update`, readers :meth:`snapshot`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot = LiveSnapshot()

    def update(self, **changes: object) -> LiveSnapshot:
        with self._lock:
            self._snapshot = replace(self._snapshot, **changes)  # type: ignore[arg-type]
            return self._snapshot

    def snapshot(self) -> LiveSnapshot:
        with self._lock:
            return self._snapshot
