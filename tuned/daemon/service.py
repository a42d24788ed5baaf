"""``ktuned run``: the daemon's life, from start-up to a clean stop.

Start-up: store, metrics endpoint, GPU monitor, worker (its fingerprint), a first stable scan
of the registry, then ``READY=1`` once ``/metrics`` has answered. The main loop, one
evaluation per iteration: handle SIGHUP (reload the config, rescan), poll the registry when
due, wait while foreign work uses the GPU (``paused_gpu_busy``), ask the scheduler for a
kernel and run one :meth:`Campaign.step` on it. SIGTERM/SIGINT: ``STOPPING=1``, the worker's
process group is killed (an evaluation in flight is abandoned and redone by the next start),
the store is checkpointed and closed. The only broad ``except`` of ktuned is here: an
unexpected error in one iteration is logged, counted (``ktuned_daemon_errors_total``) and
followed by a back-off, never by a crash loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, ProcessCollector

from tuned.daemon.config import DaemonConfig, load_config
from tuned.daemon.gated import WORKER_START_REASONS as START_REASONS
from tuned.daemon.gated import GatedWorkerClient, ShutdownRequested
from tuned.daemon.gpu import GpuMonitor, interpreter_mode, open_monitor
from tuned.daemon.journal import BestJournal
from tuned.daemon.notify import Notifier, Watchdog, status_line
from tuned.daemon.reload import plan_reload
from tuned.daemon.scheduler import Scheduler
from tuned.daemon.signals import SignalGate
from tuned.daemon.watcher import RegistryChanges, RegistryWatcher
from tuned.errors import TunedError, WorkerError
from tuned.evaluation.client import GPU_SPARES
from tuned.evaluation.evaluator import Evaluator
from tuned.evaluation.replay import ReplayClient
from tuned.llm.proposer import LlmProposer
from tuned.llm.setup import open_proposer
from tuned.metrics import GpuLabels, LiveStatus, MetricsServer, StoreCollector
from tuned.pipeline import CampaignPipeline, compile_workers_for, pipeline_for
from tuned.profiling import HardwareFeedback
from tuned.registry import KernelSpec, format_problems
from tuned.runtime.stale import stale_bests
from tuned.search import Campaign, TuneSettings
from tuned.search.revalidation import revalidate
from tuned.store.api import Store
from tuned.store.base import fingerprint_id
from tuned.store.claims import ClaimSettings, LeaseRenewer
from tuned.store.outbox import OutboxStore
from tuned.store.postgres import PostgresStore, redact
from tuned.store.url import default_store_url, open_store, sqlite_path

__all__ = ["Daemon", "MonitorFactory"]

log = logging.getLogger(__name__)

MonitorFactory = Callable[[DaemonConfig, bool], GpuMonitor]

#: Seconds before a reference entry waiting for the LLM (``needs_llm``) is tried again.
LLM_RETRY_S = 60.0


def _nvml_monitor(config: DaemonConfig, interpreter: bool) -> GpuMonitor:
    return open_monitor(
        interpreter=interpreter,
        index=config.gpu.index,
        busy_utilization_percent=config.gpu.busy_utilization_percent,
        busy_memory_bytes=config.gpu.busy_memory_bytes,
    )


#: Longest a fleet daemon's step waits for other daemons' claims before it moves on.
FLEET_WAIT_S = 5.0
#: Seconds before a kernel whose open work other daemons hold is picked again.
FLEET_RETRY_S = 30.0
#: A settling's watchdog bound, in evaluations: one per distinct claimed candidate (the best
#: and each shape's variant) plus the worker's start, generously.
SETTLE_EVALUATIONS = 16


def _store_url(config: DaemonConfig) -> str:
    """The daemon's store URL: the config's ``store``, else the SQLite file in state_dir."""
    return config.store or default_store_url(config.state_dir)


def _llm_path(config: DaemonConfig) -> Path:
    """The SQLite file of the LLM's ledger, cache and attempt log: the store's file, or one
    of this box's own beside a PostgreSQL store (docs/fleet.md)."""
    return sqlite_path(_store_url(config)) or config.state_dir / "ktuned-llm.sqlite"


class Daemon:
    """One daemon: ``run()`` returns after a stop request, having cleaned up."""

    def __init__(
        self,
        config: DaemonConfig,
        *,
        config_path: Path | None = None,
        notifier: Notifier | None = None,
        monitor_factory: MonitorFactory = _nvml_monitor,
        live: LiveStatus | None = None,
    ) -> None:
        self.config = config
        self.config_path = config_path
        self.notifier = notifier or Notifier()
        self.watchdog = Watchdog(self.notifier)
        self.monitor_factory = monitor_factory
        self.live = live or LiveStatus()
        self.scheduler = Scheduler(config.scheduler)
        self.watcher = RegistryWatcher(config.registry.path)
        self.campaigns: dict[str, Campaign] = {}
        self.fingerprint = ""
        self.server: MetricsServer | None = None
        self.errors = 0
        self.signals = SignalGate()
        self._reconciled = False
        self._store: Store | None = None
        #: Fleet mode (a PostgreSQL store): how campaigns claim candidates; None otherwise.
        self._claims: ClaimSettings | None = None
        #: Fleet mode: the thread renewing this daemon's claims (docs/fleet.md).
        self._renewer: LeaseRenewer | None = None
        #: Kernels whose open work other daemons hold -> when to pick them again.
        self._fleet_waits: dict[str, float] = {}
        self._client: GatedWorkerClient | None = None
        #: One worker client per GPU of gpu.indexes, the first being ``_client``.
        self._lanes: list[GatedWorkerClient] = []
        self._monitor: GpuMonitor | None = None
        self._monitors: list[GpuMonitor] = []
        self._collector: StoreCollector | None = None
        self._busy_reason: str | None = None
        #: Compiles candidates ahead while the GPU measures; None: one at a time in the worker.
        self._pipeline: CampaignPipeline | None = None
        self._hardware: HardwareFeedback | None = None
        self._llm: LlmProposer | None = None

    # -- lifecycle

    def request_stop(self) -> None:
        """Ask the main loop to stop (what SIGTERM does, minus interrupting an evaluation)."""
        self.signals.request_stop()

    def run(self) -> None:
        self.signals.install()
        try:
            self._start()
            while not self.signals.stop:
                self._iteration()
        except ShutdownRequested:
            log.info("stop requested during an evaluation: abandoning it (it is redone on start)")
        finally:
            self._shutdown()
            self.signals.close()

    def _start(self) -> None:
        cfg = self.config
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        url = _store_url(cfg)
        if sqlite_path(url) is None:  # a fleet: keep tuning into a local outbox in an outage
            self._store = OutboxStore(
                url,
                cfg.state_dir / "outbox.sqlite",
                on_change=lambda n: self.live.update(outbox_rows=n),
            )
        else:
            self._store = open_store(url)
        log.info("store: %s", redact(url))
        self._journal = BestJournal(self._store)
        registry = CollectorRegistry()
        self._collector = StoreCollector(
            url,
            self.live,
            llm_budget=cfg.llm.budget if cfg.llm.enabled else None,
            llm_path=_llm_path(cfg),
        )
        registry.register(self._collector)
        ProcessCollector(registry=registry)
        self.server = MetricsServer(host=cfg.metrics.host, port=cfg.metrics.port, registry=registry)
        self.server.start()
        interpreter = interpreter_mode(cfg.device)
        lanes = cfg.gpu.lanes
        self._monitors = [
            self.monitor_factory(
                dataclasses.replace(cfg, gpu=dataclasses.replace(cfg.gpu, index=i)), interpreter
            )
            for i in lanes
        ]
        self._monitor = self._monitors[0]
        devices = [d for m in self._monitors for d in m.devices()]
        if devices and "CUDA_VISIBLE_DEVICES" not in os.environ:
            os.environ["CUDA_VISIBLE_DEVICES"] = devices[0].uuid  # the GPU NVML watches
        gpus = tuple(GpuLabels(str(d.index), d.uuid, d.model, "gpu") for d in devices) or (
            GpuLabels("interpreter" if interpreter else "unmonitored", "", "none", "interpreter"),
        )
        self.live.update(gpus=gpus, gpu_busy={g.gpu: False for g in gpus})
        several = len(lanes) > 1
        for n, (index, monitor) in enumerate(zip(lanes, self._monitors, strict=True)):
            seen = monitor.devices()
            pin = seen[0].uuid if seen else str(index)
            self._lanes.append(
                GatedWorkerClient(
                    workdir=cfg.state_dir / "workers" / str(n),
                    settings=self.config.evaluation_settings(interpreter, self.config_path),
                    monitor=monitor,
                    retries=cfg.gpu.throttle_retries,
                    # Lanes measure on threads of their own: only the main thread's waits
                    # are interrupted by a stop (tuned.pipeline.MultiGpuPipeline).
                    interruptible=contextlib.nullcontext if several else self.signals.interruptible,
                    spares=0 if interpreter else GPU_SPARES,  # a re-measurement need not wait
                    env={"CUDA_VISIBLE_DEVICES": pin} if several else None,
                    cache_dir=cfg.state_dir / "workers" / "0" / "triton-cache",
                )
            )
        self._client = self._lanes[0]
        self._hardware = self._new_hardware(interpreter)
        with self.watchdog.busy(cfg.evaluation.startup_timeout_s * len(lanes)):
            self._set_fingerprint(self._client.start())
            for lane in self._lanes[1:]:
                if fingerprint_id(lane.start()) != self.fingerprint:
                    raise WorkerError(
                        f"GPU {lane.env.get('CUDA_VISIBLE_DEVICES')} is not the same model, "
                        "driver and software as the first: one daemon per kind of GPU "
                        "(gpu.indexes, docs/fleet.md)"
                    )
        workers = compile_workers_for(cfg.evaluation.compile_workers, interpreter=interpreter)
        if several and not workers:
            log.warning(
                "gpu.indexes lists %d GPUs but evaluation.compile_workers is 0: measuring "
                "on the first GPU only (several GPUs are fed by the compile pool)",
                len(lanes),
            )
        if workers:  # after the worker's start: it tells the pool which GPU to compile for
            self._pipeline = pipeline_for(
                self._client,
                workers=workers,
                interruptible=self.signals.interruptible,
                lanes=self._lanes,
            )
            if several:
                log.info("measuring on %d GPUs: %s", len(lanes), ", ".join(map(str, lanes)))
        # The LLM proposer (docs/llm.md): None when not configured; parametric tuning either way.
        self._llm = open_proposer(
            cfg.llm,
            store_path=_llm_path(cfg),
            ledger_url=url if sqlite_path(url) is None else None,  # a fleet shares its caps
            gpu=self._store.fingerprint(self.fingerprint),
        )
        if sqlite_path(url) is None:  # a fleet: claim each candidate before evaluating it
            self._claims = ClaimSettings(
                lease_s=cfg.fleet_lease_s or self._evaluation_bound(),
                poll_s=1.0,
                max_wait_s=FLEET_WAIT_S,
            )
            # Renewed every lease/3 from a thread with its own connection, so a claim of this
            # daemon never expires while it lives, however long an evaluation takes.
            self._renewer = LeaseRenewer(
                lambda: PostgresStore(url, connect_timeout_s=5.0),
                owner=self._claims.owner,
                lease_s=self._claims.lease_s,
            ).start()
            log.info(
                "fleet mode: claims as %s, lease %.0f s, renewed every %.0f s",
                self._claims.owner,
                self._claims.lease_s,
                self._renewer.interval_s,
            )
        self._scan(settle=True)
        if isinstance(self._store, OutboxStore) and self._store.offline:
            # /metrics reads the database: it answers once the database is back; tuning
            # goes on into the outbox meanwhile (docs/fleet.md).
            log.warning("not checking /metrics now: it reads the unreachable store")
        else:
            self.server.check_answers()
        self.live.update(daemon_state="idle")
        self.notifier.ready(self._status_line())
        log.info("ready: %s", self._status_line())

    def _shutdown(self) -> None:
        self.live.update(daemon_state="stopping")
        self.notifier.stopping()
        self.watchdog.stop()
        if self._pipeline is not None:
            self._pipeline.close()  # kills every compile process's group
        for lane in self._lanes:
            lane.close()  # kills the worker's process group
        if self._renewer is not None:
            self._renewer.stop()
        if self._claims is not None and self._store is not None:
            # Expire this daemon's open claims now: other daemons take that work over at
            # their next step instead of waiting out the lease (offline: the outbox's own).
            with contextlib.suppress(TunedError):
                released = self._store.release_owner(self._claims.owner)
                if released:
                    log.info("released %d open claim(s) to the other daemons", released)
        if self.server is not None:
            self.server.stop()
        if self._collector is not None:
            self._collector.close()
        if self._store is not None:
            with contextlib.suppress(TunedError):
                self._store.checkpoint()
            self._store.close()
        for monitor in self._monitors:
            monitor.close()
        if self._llm is not None:
            self._llm.close()
        self.notifier.close()
        log.info("stopped")

    # -- the main loop

    def _iteration(self) -> None:
        try:
            self.watchdog.beat()
            if self.signals.reload:
                self.signals.reload = False
                self._do_reload()
            if time.monotonic() >= self._next_poll:
                self._scan(settle=False)
            busy = self._gpu_busy()
            if busy:
                self._sleep(min(self.config.gpu.check_interval_s, self._until_poll()))
                return
            self._fleet_retry(time.time())
            name = self.scheduler.pick(time.time())
            if name is None:
                self.live.update(daemon_state="idle", current_kernel="")
                self.notifier.status(self._status_line())
                now = time.time()
                revisit = self.scheduler.next_revisit(now)
                waits = [due - now for due in self._fleet_waits.values()]
                waits.append(3600.0 if revisit is None else revisit)
                self._sleep(max(0.0, min(self._until_poll(), *waits)))
                return
            self._step(name)
        except ShutdownRequested:
            raise
        except Exception:  # the daemon's top loop: log, count, back off, go on
            self.errors += 1
            self.live.update(errors_total=self.errors)
            log.exception("unexpected error in the main loop (%d so far); retrying", self.errors)
            self._sleep(min(60.0, 2.0 ** min(self.errors, 6)))

    def _step(self, name: str) -> None:
        assert self._client is not None
        campaign = self.campaigns[name]
        self.live.update(daemon_state="tuning", current_kernel=name)
        self.notifier.status(self._status_line())
        stale_id = self.scheduler.revalidation(name)
        self._journal.before(name)
        with self.watchdog.busy(self._evaluation_bound()):
            if stale_id is not None:  # a stale best goes before any new candidate
                row = revalidate(campaign, stale_id)
                if row is None:  # its candidate is gone: nothing left to re-validate
                    self.scheduler.tracks[name].stale.discard(stale_id)
                    return
            elif self._pipeline is not None and campaign.spec.replay is None:
                row = self._pipeline.step(campaign)
            else:
                row = campaign.step()
        self._journal.after(name)  # one `event=best` line per accepted best
        now = time.time()
        if row is None and campaign.needs_llm:
            # A reference entry waiting for the LLM (docs/llm.md): without one configured
            # until a restart, else ask again in a minute (the budget may have reopened).
            retry = float("inf") if self._llm is None else now + LLM_RETRY_S
            if self.scheduler.tracks.get(name) and not self.scheduler.tracks[name].needs_llm:
                log.info("%s: needs_llm: %s", name, campaign.needs_llm)
            self.scheduler.wait_for_llm(name, campaign.needs_llm, retry)
        elif row is None and self._claims is not None and campaign.note.startswith("waiting for"):
            # The rest of this kernel's work is claimed by other daemons: set it aside and
            # look again later (their results, or their expired claims to take over).
            self.scheduler.finish(name, campaign.note, now)
            self._fleet_waits[name] = now + FLEET_RETRY_S
            log.info("%s: %s", name, campaign.note)
        elif row is None:
            self.scheduler.finish(name, campaign.note or "nothing left to try", now)
            log.info("%s: %s", name, campaign.note or "nothing left to try")
            self._settle(name)
        else:
            self.scheduler.observe(name, row, now)
        fp = self._client.fingerprint
        if fp and fingerprint_id(fp) != self.fingerprint:
            log.warning("the software/hardware fingerprint changed: every kernel starts afresh")
            self._set_fingerprint(fp)
            for spec in [c.spec for c in self.campaigns.values()]:
                self._track(spec)
        self._publish()

    def _settle(self, name: str) -> None:
        """Re-measure the claims of a kernel whose campaign ended, in a fresh worker against
        the original (``ktuned referee``; docs/evaluation.md, "Settling"): its figures were
        measured beside the compile pool and the spares. A failure is logged; the campaign's
        own figures then stand."""
        assert self._client is not None and self._store is not None
        mode = self.config.evaluation.settle
        settings = self._client.settings
        if mode == "no" or (mode == "auto" and settings.interpreter):
            return
        from tuned.referee import referee

        try:
            with self.watchdog.busy(self._evaluation_bound() * SETTLE_EVALUATIONS):
                report = referee(
                    self._store,
                    kernels=[name],
                    evaluation=settings,
                    workdir=self.config.state_dir / "workers" / "settle",
                )
        except Exception:  # the campaign is stored: log, go on
            log.exception("%s: settling its claims failed; `ktuned referee` retries", name)
            return
        for claim in report.claims:
            log.info(
                "%s: settled %s: claimed %s, measured %s%s",
                name,
                claim.label or "(kernel)",
                claim.claimed,
                claim.measured,
                f" ({claim.error})" if claim.error else "",
            )

    def _fleet_retry(self, now: float) -> None:
        """Track again the kernels set aside for other daemons' claims, once due."""
        for name, due in list(self._fleet_waits.items()):
            if now < due:
                continue
            del self._fleet_waits[name]
            if name in self.campaigns:
                self._track(self.campaigns[name].spec)

    def _evaluation_bound(self) -> float:
        """The longest one step may block the loop (the client enforces each part): a worker
        start and every phase, per measurement; throttle retries and the acceptance rule's
        re-measurement multiply it."""
        e = self.config.evaluation
        one = e.startup_timeout_s + 60.0 + 3 * e.phase_timeout_s + 30.0
        if self._pipeline is not None:  # waiting for the compile pool: start, load, compile
            one += e.startup_timeout_s + 2 * e.phase_timeout_s + 60.0
        # Hardware feedback after the step: its profiling runs and, once, the peaks.
        p = self.config.profiling
        profiling = p.per_step * (p.deadline_s + 30.0) + 630.0 if p.enabled else 0.0
        return 2 * one * (1 + self.config.gpu.throttle_retries) + profiling

    def _gpu_busy(self) -> bool:
        assert self._monitor is not None and self._client is not None
        own = {p for lane in self._lanes for p in lane.own_pids()}
        reason = next((r for m in self._monitors if (r := m.foreign_work(own)) is not None), None)
        if reason != self._busy_reason:
            if reason:
                log.info("pausing: %s", reason)
            elif self._busy_reason:
                log.info("the GPU is free again: resuming")
            self._busy_reason = reason
            gpus = self.live.snapshot().gpus
            self.live.update(
                daemon_state="paused_gpu_busy" if reason else "idle",
                gpu_busy={g.gpu: bool(reason) for g in gpus},
            )
            self.notifier.status(self._status_line())
        return reason is not None

    # -- registry

    def _scan(self, *, settle: bool) -> None:
        """Poll the registry; with ``settle``, poll twice so a quiet registry is acted on now."""
        changes = self.watcher.poll()
        if settle:
            self._apply(changes)
            self._sleep(min(self.config.registry.poll_interval_s, 1.0))
            changes = self.watcher.poll()
        self._apply(changes)
        if not self._reconciled and changes.pending == 0 and self.watcher.root_problem is None:
            self._reconcile()
        self._next_poll = time.monotonic() + self.config.registry.poll_interval_s
        self._publish()

    def _apply(self, changes: RegistryChanges) -> None:
        assert self._store is not None
        if changes:
            log.info("registry: %s", changes.describe())
        for directory, problems in changes.invalid.items():
            self._store.record_invalid(directory, format_problems(problems))
            log.warning("invalid entry %s:\n%s", directory, format_problems(problems))
        for name in [*changes.removed, *changes.invalidated]:
            self.scheduler.forget(name)
            self.campaigns.pop(name, None)
        for name in changes.removed:
            self._store.retire_kernel(name)
        for directory in changes.removed_invalid:
            self._store.forget_invalid(directory)
        for spec in [*changes.added, *changes.changed]:
            if self._store.sync_kernel(spec):
                log.info("%s: generation %s", spec.name, spec.generation[:12])
                for notice in spec.notices:  # what knob discovery left out, and why
                    log.info("%s: %s", spec.name, notice)
            self._track(spec)

    def _reconcile(self) -> None:
        """Once the registry has been read whole: retire kernels whose entry left it."""
        assert self._store is not None
        self._reconciled = True
        present = self.watcher.specs
        for k in self._store.kernels():
            if k.state in ("active", "needs_llm") and k.name not in present:
                log.info("%s: no longer in the registry; retired (history kept)", k.name)
                self._store.retire_kernel(k.name)

    def _track(self, spec: KernelSpec) -> None:
        assert self._store is not None and self._client is not None
        client: Evaluator = self._client
        fingerprint = self.fingerprint
        replay = spec.replay is not None
        if replay:  # looked up in its recorded cache, under its own fingerprint
            client = ReplayClient(spec)
            fingerprint = self._store.record_fingerprint(client.start())
        self.campaigns[spec.name] = Campaign(
            spec=spec,
            store=self._store,
            client=client,
            fingerprint=fingerprint,
            settings=TuneSettings(budget=None, policy=self.config.policy, seed=self.config.seed),
            # A replay has no code to profile or rewrite: knob moves only.
            hardware=None if replay else self._hardware,
            masks=self.config.profiling.thresholds,
            llm=None if replay else self._llm,
            claims=self._claims,
        )
        self.scheduler.track(
            spec.name,
            weight=spec.weight,
            space_size=spec.space_size() if spec.knobs else 0,
            history=self._store.trials(spec.name, spec.generation, fingerprint),
            last_visit=self._store.last_evaluated_at(spec.name, spec.generation, fingerprint),
            stale=stale_bests(self._store, self._store.fingerprint(fingerprint)).get(spec.name, ()),
        )

    # -- reload

    def _do_reload(self) -> None:
        self.notifier.reloading()
        self.live.update(daemon_state="reloading")
        log.info("reloading: %s", self.config_path or "built-in defaults")
        try:
            new = load_config(self.config_path) if self.config_path else DaemonConfig()
        except TunedError as exc:
            log.error("%s\nkeeping the running configuration", exc)
            new = self.config
        plan = plan_reload(self.config, new)
        for key in plan.deferred:
            log.warning("%s changed: it takes effect at the next restart", key)
        new = plan.config
        self.config = new
        self.scheduler.config = new.scheduler
        assert self._client is not None
        if plan.profiling_changed or self._hardware is None:
            self._hardware = self._new_hardware(self._client.settings.interpreter)
            if self._client.fingerprint:
                self._hardware.set_fingerprint(self._client.fingerprint)
        for lane in self._lanes:
            lane.settings = self.config.evaluation_settings(
                self._client.settings.interpreter, self.config_path
            )
            lane.retries = new.gpu.throttle_retries
        if plan.registry_changed:
            self.watcher = RegistryWatcher(new.registry.path)
            self._reconciled = False
            for name in list(self.campaigns):
                self.scheduler.forget(name)
                self.campaigns.pop(name)
        elif plan.policy_changed:
            for spec in [c.spec for c in self.campaigns.values()]:
                self._track(spec)
        self._scan(settle=True)
        self.live.update(daemon_state="idle")
        self.notifier.ready(self._status_line())

    # -- helpers

    def _new_hardware(self, interpreter: bool) -> HardwareFeedback:
        assert self._store is not None
        hardware = HardwareFeedback(
            store=self._store,
            config=self.config.profiling,
            workdir=self.config.state_dir / "workers" / "profiler",
            interpreter=interpreter,
        )
        self.live.update(profiling_state=hardware.state)
        if hardware.state != "enabled":
            log.info("profiling: %s (%s)", hardware.state, hardware.reason)
        return hardware

    def _set_fingerprint(self, fingerprint: dict[str, str]) -> None:
        assert self._store is not None
        self.fingerprint = self._store.record_fingerprint(fingerprint)
        self.live.update(fingerprint=dict(fingerprint))
        if self._hardware is not None:
            self._hardware.set_fingerprint(fingerprint)

    def _publish(self) -> None:
        starts = {r: sum(lane.starts_by_reason[r] for lane in self._lanes) for r in START_REASONS}
        discarded = sum(lane.discarded for lane in self._lanes)
        self.live.update(
            kernel_states=self.scheduler.states(),
            worker_starts=starts,
            discarded_total=discarded,
            profiling_state=self._hardware.state if self._hardware else "disabled",
        )

    def _status_line(self) -> str:
        return status_line(self.live.snapshot(), self._busy_reason)

    def _until_poll(self) -> float:
        return max(0.0, self._next_poll - time.monotonic())

    _next_poll = 0.0

    def _sleep(self, seconds: float) -> None:
        """Sleep up to ``seconds``; a signal (stop, reload) ends it at once."""
        interval = self.watchdog.interval
        tick = None if interval is None else interval / 3
        self.signals.sleep(seconds, tick=tick, beat=self.watchdog.beat)
