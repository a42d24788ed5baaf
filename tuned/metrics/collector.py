"""The Prometheus collector: every ``ktuned_`` metric, read from the store at scrape time.

Registered on a :class:`prometheus_client.CollectorRegistry` that the caller owns (never the
global one). History-derived values (speedups, counters, the phase histogram, arm statistics)
come from the store, so they survive restarts; the daemon's own state (its state, the GPUs'
busy flags, per-kernel scheduler states) comes from a :class:`~tuned.metrics.live.LiveStatus`.
Counters over evaluations are kept as running sums of the rows added since the previous
scrape, so a scrape stays cheap however long the history; rows newer than a lag are re-read
at every scrape, so a row that another writer commits after a newer one is still counted
(:mod:`tuned.metrics.watermarks`). The list of metrics, with their labels, is in
docs/metrics.md.
"""

from __future__ import annotations

import platform
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tuned import __version__
from tuned.errors import StoreError
from tuned.llm.metrics import llm_families
from tuned.metrics.live import (
    DAEMON_STATES,
    PROFILING_STATES,
    WORKER_START_REASONS,
    LiveSnapshot,
    LiveStatus,
)
from tuned.metrics.watermarks import LaggedWatermark
from tuned.store.api import Store
from tuned.store.base import EvaluationTotals, KernelProgress
from tuned.store.connections import connect_reader
from tuned.store.ledger import BudgetCaps, LedgerDb, open_ledger_reader, read_totals
from tuned.store.overview import kernel_overview
from tuned.store.sqlite import SqliteStore
from tuned.store.url import open_store, sqlite_path

__all__ = ["PHASE_BUCKETS", "StoreCollector"]

#: Upper bounds (seconds) of the evaluation phase duration histogram.
PHASE_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
#: Upper bounds (seconds) of the profiling run duration histogram.
PROFILING_BUCKETS = (1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
PROFILING_STATUSES = ("ok", "unavailable", "timeout", "failed")
#: Seconds before rows are final for the running sums: a transaction that took its ``seq``
#: earlier may commit later (tuned.metrics.watermarks).
WATERMARK_LAG_S = 60.0
#: ``resource`` label of ``ktuned_kernel_best_sol_ratio`` -> key of a stored profile.
SOL_RESOURCES = {
    "sm": "sol_sm",
    "dram": "sol_dram",
    "l2": "sol_l2",
    "l1": "sol_l1",
    "memory": "sol_memory",
}


class StoreCollector(Collector):
    """Yields the metric families of ``store``, opened lazily by the first scrape.

    ``store``: a SQLite file (opened read-only, so a scrape never takes the write lock) or a
    store URL (``sqlite:///`` likewise; ``postgresql://``: a connection of its own).
    ``llm_path``: the SQLite file of the LLM's attempt log and strategy book, and of its token
    ledger on one box; default: the store's file (``None`` for a PostgreSQL store: no
    attempt figures). On a PostgreSQL store the token ledger is the fleet's shared one in
    that database (as the daemon's, :func:`tuned.llm.setup.open_proposer`), read through a
    connection of its own that writes nothing. ``watermark_lag_s``: how long rows stay in
    the re-read tail of the running sums before they are settled (default: 0 on SQLite,
    :data:`WATERMARK_LAG_S` on PostgreSQL; ``clock``: its time, injectable for tests)."""

    def __init__(
        self,
        store: Path | str,
        live: LiveStatus | None = None,
        *,
        llm_budget: BudgetCaps | None = None,
        llm_path: Path | None = None,
        watermark_lag_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store_url = store if isinstance(store, str) else None
        local = store if isinstance(store, Path) else sqlite_path(store)
        #: The store's SQLite file; ``None`` for a PostgreSQL store.
        self.store_path = local
        self.llm_path = llm_path if llm_path is not None else local
        if watermark_lag_s is None:  # SQLite commits in seq order; PostgreSQL may not
            watermark_lag_s = 0.0 if local is not None else WATERMARK_LAG_S
        #: The fleet's shared token ledger (the PostgreSQL store); ``None``: in ``llm_path``.
        self.ledger_url = self.store_url if local is None else None
        self.live = live
        #: The LLM token caps (``None``: no LLM configured); spend comes from the ledger.
        self.llm_budget = llm_budget
        self._llm_db: sqlite3.Connection | None = None
        self._ledger_db: LedgerDb | None = None
        self._lock = threading.Lock()
        self._store: Store | None = None
        # Settled sums, and how far (tuned.metrics.watermarks: rows above are re-read).
        self._eval_mark = LaggedWatermark((0,), lag_s=watermark_lag_s, clock=clock)
        self._outcomes: dict[tuple[str, str], int] = {}
        self._phases: dict[str, tuple[int, float, list[int]]] = {}
        self._arms: dict[tuple[str, str], tuple[int, float]] = {}
        self._progress: dict[str, KernelProgress] = {}
        self._progress_mark = LaggedWatermark((0, 0), lag_s=watermark_lag_s, clock=clock)
        self._touched: set[str] = set()
        self._states: dict[str, str] = {}  # each kernel's state at the previous scrape
        self._hardware: dict[str, tuple[dict[str, object] | None, float | None]] = {}
        self._hardware_token = -1
        self._profiling_mark = LaggedWatermark((0,), lag_s=watermark_lag_s, clock=clock)
        self._profiling_runs: dict[str, int] = {}
        self._profiling_durations: tuple[int, float, list[int]] = (
            0,
            0.0,
            [0] * len(PROFILING_BUCKETS),
        )

    def describe(self) -> list[Metric]:
        return []  # no store access at registration time

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
            if self._llm_db is not None:
                self._llm_db.close()
                self._llm_db = None
            if self._ledger_db is not None:
                self._ledger_db.close()
                self._ledger_db = None

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if self._store is None:
                self._store = self._open()
            live = self.live.snapshot() if self.live is not None else None
            yield from self._process(live)
            yield from self._kernels(self._store, live)
            yield from self._evaluations(self._store)
            yield from self._profiling(self._store, live)
            yield from self._llm()

    def _open(self) -> Store:
        if self.store_path is not None:
            return SqliteStore.open_reader(self.store_path)
        assert self.store_url is not None
        return open_store(self.store_url)

    # -- families

    def _process(self, live: LiveSnapshot | None) -> Iterator[Metric]:
        fp = live.fingerprint if live else {}
        info = GaugeMetricFamily(
            "ktuned_build_info",
            "ktuned's version and the software it tunes with (value 1)",
            labels=["version", "python_version", "triton_version", "torch_version"],
        )
        info.add_metric(
            [
                __version__,
                platform.python_version(),
                fp.get("triton", ""),
                fp.get("torch", ""),
            ],
            1,
        )
        yield info
        if live is None:
            return
        state = GaugeMetricFamily(
            "ktuned_daemon_state", "1 for the daemon's current state", labels=["state"]
        )
        for name in DAEMON_STATES:
            state.add_metric([name], 1.0 if live.daemon_state == name else 0.0)
        yield state
        yield GaugeMetricFamily(
            "ktuned_daemon_start_time_seconds",
            "when the daemon started (Unix time)",
            value=live.started_at,
        )
        yield CounterMetricFamily(
            "ktuned_daemon_errors",
            "unexpected errors caught by the daemon's main loop (see its log)",
            value=live.errors_total,
        )
        starts = CounterMetricFamily(
            "ktuned_worker_starts",
            "evaluation workers that took over, by why the previous one went (start, crash, "
            "timeout, confirm: a fresh worker for a re-measurement, recycle: any other)",
            labels=["reason"],
        )
        for reason in WORKER_START_REASONS:
            starts.add_metric([reason], live.worker_starts.get(reason, 0))
        yield starts
        yield CounterMetricFamily(
            "ktuned_worker_restarts",
            'DEPRECATED, use ktuned_worker_starts_total{reason="crash"}: workers started '
            "because the previous one crashed (timeouts and re-measurements are not counted)",
            value=live.worker_starts.get("crash", 0),
        )
        yield CounterMetricFamily(
            "ktuned_throttled_measurements_discarded",
            "measurements discarded and redone because clocks throttled or foreign work appeared",
            value=live.discarded_total,
        )
        yield GaugeMetricFamily(
            "ktuned_store_outbox_rows",
            "results kept in the local outbox while the PostgreSQL store does not answer, to "
            "be replayed when it does (0: in sync; always 0 on SQLite)",
            value=live.outbox_rows,
        )
        gpu_info = GaugeMetricFamily(
            "ktuned_gpu_info",
            "the device ktuned benchmarks on (value 1); gpu=interpreter without a GPU",
            labels=["gpu", "UUID", "gpu_model", "mode"],
        )
        busy = GaugeMetricFamily(
            "ktuned_gpu_busy",
            "1 while foreign work uses the GPU and ktuned waits (paused_gpu_busy)",
            labels=["gpu", "UUID"],
        )
        for g in live.gpus:
            gpu_info.add_metric([g.gpu, g.uuid, g.model, g.mode], 1)
            busy.add_metric([g.gpu, g.uuid], 1.0 if live.gpu_busy.get(g.gpu) else 0.0)
        yield gpu_info
        yield busy

    def _current_progress(self, store: Store) -> list[KernelProgress]:
        """Every kernel's progress, re-read only for kernels that changed since last scrape."""
        # Kernels with rows in the watermark's tail are re-read at every scrape.
        target = self._progress_mark.due()
        if target is not None:
            self._progress_mark.settle(target)
        touched, eval_seq, acc_seq = store.changes_since(*self._progress_mark.settled)
        rows = store.kernels()
        for k in rows:
            known = self._progress.get(k.name)
            if known is None or (known.generation, known.state) != (k.generation, k.state):
                touched.add(k.name)
        present = {k.name for k in rows}
        for name in set(self._progress) - present:
            del self._progress[name]
        for p in store.kernel_progress(touched & present):
            self._progress[p.name] = p
        self._touched = touched & present
        self._progress_mark.seen((eval_seq, acc_seq))  # touched again until settled
        return [self._progress[name] for name in sorted(self._progress)]

    def _kernels(self, store: Store, live: LiveSnapshot | None) -> Iterator[Metric]:
        states = GaugeMetricFamily(
            "ktuned_kernel_state",
            "1 for each kernel's current state (new, tuning, converged, exhausted, failed, "
            "needs_llm, invalid, retired); other states are absent",
            labels=["kernel", "state"],
        )
        speedup = GaugeMetricFamily(
            "ktuned_kernel_best_speedup_ratio",
            "baseline time / best (incumbent) time, current generation and fingerprint",
            labels=["kernel"],
        )
        best = GaugeMetricFamily(
            "ktuned_kernel_best_seconds", "objective of the incumbent", labels=["kernel"]
        )
        baseline = GaugeMetricFamily(
            "ktuned_kernel_baseline_seconds", "objective of the original", labels=["kernel"]
        )
        improved = GaugeMetricFamily(
            "ktuned_kernel_last_improvement_timestamp_seconds",
            "when the incumbent was accepted, or the baseline measured (Unix time)",
            labels=["kernel"],
        )
        progress = self._current_progress(store)
        # The states `ktuned status` and `ktuned report` show (tuned.store.overview): the
        # daemon's scheduler's where it tracks the kernel, else derived from the store (kept
        # for kernels without new rows since the previous scrape).
        known = {n: s for n, s in self._states.items() if n not in self._touched}
        known.update(live.kernel_states if live is not None else {})
        overview = kernel_overview(store, live_states=known, progress=progress, outcomes={})
        self._states = {o.name: o.state for o in overview}
        live_names: set[str] = set()
        for o in overview:
            k = o.progress
            states.add_metric([k.name, o.state], 1.0)
            if k.state == "retired":
                continue
            live_names.add(k.name)
            if k.baseline_s is not None:
                baseline.add_metric([k.name], k.baseline_s)
            if k.best_s is not None and k.best_at is not None:
                best.add_metric([k.name], k.best_s)
                improved.add_metric([k.name], k.best_at)
            if k.speedup is not None:
                speedup.add_metric([k.name], k.speedup)
        yield from (states, speedup, best, baseline, improved)
        yield self._stale(store, live)
        held = GaugeMetricFamily(
            "ktuned_held_candidates",
            "candidates held for re-verification instead of accepted (speedup above the "
            "suspicious threshold, or faster than the roofline allows), current generation",
            labels=["kernel"],
        )
        counts = store.held_counts()
        for name in sorted(live_names):
            held.add_metric([name], float(counts.get(name, 0)))
        yield held
        yield from self._best_hardware(store, live_names)
        invalid = store.invalid_entries()
        yield GaugeMetricFamily(
            "ktuned_registry_invalid_entries",
            "registry entries that fail validation (ktuned registry check lists why)",
            value=len(invalid),
        )

    def _stale(self, store: Store, live: LiveSnapshot | None) -> Metric:
        """``ktuned_stale_bests{kernel}``: bests measured under older software of this device
        and not re-validated under the current one (the daemon's fingerprint; without a
        daemon, the newest recorded). 0 for every other non-retired kernel."""
        from tuned.runtime.stale import stale_bests

        current = dict(live.fingerprint) if live is not None and live.fingerprint else None
        if current is None:
            known = store.known_fingerprints()
            current = list(known.values())[-1] if known else {}
        stale = stale_bests(store, current) if current else {}
        gauge = GaugeMetricFamily(
            "ktuned_stale_bests",
            "accepted bests found under older driver/CUDA/Triton/PyTorch versions of this "
            "device, not yet re-validated under the current ones",
            labels=["kernel"],
        )
        for k in sorted(self._progress.values(), key=lambda p: p.name):
            if k.state != "retired":
                gauge.add_metric([k.name], float(len(stale.get(k.name, ()))))
        return gauge

    def _evaluations(self, store: Store) -> Iterator[Metric]:
        mark = self._eval_mark
        target = mark.due()
        if target is not None:  # rows old enough to be final: add them to the settled sums
            part = store.evaluation_totals(mark.settled[0], PHASE_BUCKETS, upto_seq=target[0])
            _add_evaluations(self._outcomes, self._phases, self._arms, part)
            mark.settle(target)
        tail = store.evaluation_totals(mark.settled[0], PHASE_BUCKETS)
        final = mark.seen((tail.upto_seq,))  # True: no lag (SQLite), into the sums now
        if final:
            _add_evaluations(self._outcomes, self._phases, self._arms, tail)
        outcomes, phase_sums, arms = dict(self._outcomes), dict(self._phases), dict(self._arms)
        if not final:  # re-read at the next scrape: exported, not kept
            _add_evaluations(outcomes, phase_sums, arms, tail)

        evaluated = CounterMetricFamily(
            "ktuned_candidates_evaluated",
            "evaluations by kernel and outcome (every generation and fingerprint)",
            labels=["kernel", "outcome"],
        )
        for (kernel, outcome), n in sorted(outcomes.items()):
            evaluated.add_metric([kernel, outcome], n)
        yield evaluated
        phases = HistogramMetricFamily(
            "ktuned_evaluation_phase_duration_seconds",
            "time spent in each evaluation phase (compile_queue, precompile, gpu_queue with "
            "the compile pool; load, compile, correctness, benchmark in the worker)",
            labels=["phase"],
        )
        for phase, (n, total, cumulative) in sorted(phase_sums.items()):
            buckets = [(repr(float(b)), float(c)) for b, c in zip(PHASE_BUCKETS, cumulative)]
            phases.add_metric([phase], [*buckets, ("+Inf", float(n))], total)
        yield phases
        pulls = CounterMetricFamily(
            "ktuned_arm_pulls",
            "candidates evaluated per kernel and strategy (bandit arm pulls)",
            labels=["kernel", "strategy"],
        )
        reward = GaugeMetricFamily(
            "ktuned_arm_mean_reward_ratio",
            "mean reward per kernel and strategy: latency reduction vs the parent, clipped at 0",
            labels=["kernel", "strategy"],
        )
        for (kernel, strategy), (n, total) in sorted(arms.items()):
            pulls.add_metric([kernel, strategy], n)
            reward.add_metric([kernel, strategy], total / n if n else 0.0)
        yield pulls
        yield reward

    def _best_hardware(self, store: Store, names: set[str]) -> Iterator[Metric]:
        """SOL ratios, occupancy and roofline fraction of each kernel's incumbent.

        Re-read for the kernels whose progress changed, or for all when a profile or roofline
        figure was added since the previous scrape."""
        token = store.hardware_token()
        refresh = names if token != self._hardware_token else self._touched & names
        self._hardware_token = token
        for name in set(self._hardware) - names:
            del self._hardware[name]
        if refresh:
            found = store.best_hardware(refresh)
            for name in refresh:
                if name in found:
                    self._hardware[name] = found[name]
                else:
                    self._hardware.pop(name, None)
        sol = GaugeMetricFamily(
            "ktuned_kernel_best_sol_ratio",
            "speed-of-light throughput of the incumbent (Nsight Compute), fraction of peak, by "
            "resource (sm, dram, l2, l1, memory = the busiest memory unit)",
            labels=["kernel", "resource"],
        )
        occupancy = GaugeMetricFamily(
            "ktuned_kernel_best_occupancy_ratio",
            "achieved occupancy of the incumbent (active warps / maximum warps per SM)",
            labels=["kernel"],
        )
        roofline = GaugeMetricFamily(
            "ktuned_kernel_best_roofline_ratio",
            "incumbent's achieved / attainable performance under the roofline of the GPU's "
            "measured peaks (kernels that declare roofline)",
            labels=["kernel"],
        )
        for name in sorted(self._hardware):
            profile, fraction = self._hardware[name]
            if profile is not None:
                for resource, key in SOL_RESOURCES.items():
                    value = profile.get(key)
                    if isinstance(value, (int, float)):
                        sol.add_metric([name, resource], float(value))
                value = profile.get("occupancy")
                if isinstance(value, (int, float)):
                    occupancy.add_metric([name], float(value))
            if fraction is not None:
                roofline.add_metric([name], fraction)
        yield from (sol, occupancy, roofline)

    def _profiling(self, store: Store, live: LiveSnapshot | None) -> Iterator[Metric]:
        mark = self._profiling_mark
        target = mark.due()
        if target is not None:  # rows old enough to be final: add them to the settled sums
            part = store.profiling_totals(mark.settled[0], PROFILING_BUCKETS, upto_seq=target[0])
            self._profiling_runs, self._profiling_durations = _add_profiling(
                self._profiling_runs, self._profiling_durations, part[1], part[2]
            )
            mark.settle(target)
        upto, statuses, durations = store.profiling_totals(mark.settled[0], PROFILING_BUCKETS)
        runs_by_status, (count, total, cumulative) = _add_profiling(
            self._profiling_runs, self._profiling_durations, statuses, durations
        )
        if mark.seen((upto,)):  # no lag (SQLite): the tail is final, into the sums now
            self._profiling_runs = runs_by_status
            self._profiling_durations = (count, total, cumulative)
        if live is not None:
            yield GaugeMetricFamily(
                "ktuned_profiling_enabled",
                "1 while Nsight Compute profiles are taken (0: disabled, no GPU, ncu missing "
                "or not permitted; the log says why)",
                value=1.0 if live.profiling_state == "enabled" else 0.0,
            )
            state = GaugeMetricFamily(
                "ktuned_profiling_state",
                "1 for the profiler's state (enabled, disabled, interpreter, unavailable)",
                labels=["state"],
            )
            for name in PROFILING_STATES:
                state.add_metric([name], 1.0 if live.profiling_state == name else 0.0)
            yield state
        runs = CounterMetricFamily(
            "ktuned_profiling_runs",
            "Nsight Compute profiling runs by status (ok, unavailable, timeout, failed)",
            labels=["status"],
        )
        for status in sorted({*PROFILING_STATUSES, *runs_by_status}):
            runs.add_metric([status], runs_by_status.get(status, 0))
        yield runs
        duration = HistogramMetricFamily(
            "ktuned_profiling_duration_seconds",
            "wall time of each profiling run (ncu and the profiled process)",
        )
        buckets = [(repr(float(b)), float(c)) for b, c in zip(PROFILING_BUCKETS, cumulative)]
        duration.add_metric([], [*buckets, ("+Inf", float(count))], total)
        yield duration

    def _llm(self) -> Iterator[Metric]:
        # On one box the token ledger and attempt log share the store's file
        # (tuned.llm.metrics); in a fleet the ledger is the shared one in PostgreSQL.
        if self._llm_db is None and self.llm_path is not None:
            self._llm_db = connect_reader(self.llm_path)
        totals = None
        if self.ledger_url is not None:
            now = time.time()
            if self._ledger_db is None:
                self._ledger_db = open_ledger_reader(self.ledger_url)
            ledger = self._ledger_db
            if ledger is not None:  # always, for a PostgreSQL URL
                try:
                    totals = read_totals(ledger, now)
                except StoreError:  # the server went away: reconnect on the next scrape
                    ledger.close()
                    self._ledger_db = None
                    raise
        yield from llm_families(self._llm_db, self.llm_budget, totals=totals)


def _add_evaluations(
    outcomes: dict[tuple[str, str], int],
    phases: dict[str, tuple[int, float, list[int]]],
    arms: dict[tuple[str, str], tuple[int, float]],
    totals: EvaluationTotals,
) -> None:
    """Add ``totals`` (evaluations of a range of seqs) into the three sums, in place."""
    for key, n in totals.outcomes.items():
        outcomes[key] = outcomes.get(key, 0) + n
    for phase, (count, seconds, below) in totals.phases.items():
        old = phases.get(phase, (0, 0.0, [0] * len(PHASE_BUCKETS)))
        phases[phase] = (old[0] + count, old[1] + seconds, [a + b for a, b in zip(old[2], below)])
    for key, (n_pulls, reward_sum) in totals.arms.items():
        old_arm = arms.get(key, (0, 0.0))
        arms[key] = (old_arm[0] + n_pulls, old_arm[1] + reward_sum)


def _add_profiling(
    runs: dict[str, int],
    durations: tuple[int, float, list[int]],
    statuses: dict[str, int],
    more: tuple[int, float, tuple[int, ...]],
) -> tuple[dict[str, int], tuple[int, float, list[int]]]:
    """Profiling runs per status and the duration histogram, plus a range's figures."""
    total_runs = dict(runs)
    for status, n in statuses.items():
        total_runs[status] = total_runs.get(status, 0) + n
    n, seconds, below = more
    return total_runs, (
        durations[0] + n,
        durations[1] + seconds,
        [a + b for a, b in zip(durations[2], below)],
    )
