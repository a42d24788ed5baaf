"""One story across commands: each kernel's state and evaluation counts, read once.

``ktuned status`` (and ``--json``), ``ktuned report`` and the metrics collector
(``ktuned_kernel_state``, hence the dashboard) all call :func:`kernel_overview`, so they
count and name the same things:

- ``evaluations``: every evaluation row of the kernel in the store, every generation and
  fingerprint, the baseline and re-measurements included: the sum over outcomes of
  ``ktuned_candidates_evaluated_total{kernel}``. ``outcomes`` splits it by outcome.
- ``state``: one of :data:`KERNEL_STATES`. ``invalid``, ``retired`` and ``needs_llm`` are
  stored; for an active kernel the running daemon's scheduler knows best (``live_states``,
  the metrics collector passes them); without a daemon (``status``, ``report``) the state is
  derived from the store by the scheduler's own rules (:func:`kernel_state`): ``new`` before
  a baseline on the latest fingerprint, ``failed`` when the original fails, ``exhausted``
  once every knob configuration of the entry was evaluated (the original's included),
  ``converged`` after ``converge_after`` evaluations without a gain of ``min_gain``, else
  ``tuning``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from tuned.outcomes import Outcome, Provenance, canonical_knobs
from tuned.store.api import Store
from tuned.store.base import KernelProgress

__all__ = ["KERNEL_STATES", "KernelOverview", "kernel_overview", "kernel_state"]

#: Every state of a kernel, as ``status``, ``report`` and ``ktuned_kernel_state`` name them.
KERNEL_STATES = (
    "new",
    "tuning",
    "converged",
    "exhausted",
    "failed",
    "needs_llm",
    "invalid",
    "retired",
)
#: The scheduler's defaults (tuned.daemon.config.SchedulerConfig), for commands without one.
CONVERGE_AFTER = 24
MIN_GAIN = 0.01


def kernel_state(
    *,
    failed: bool,
    needs_llm: bool,
    finished: bool,
    has_baseline: bool,
    since_gain: int,
    converge_after: int,
) -> str:
    """The state of an active kernel (the scheduler's :meth:`KernelTrack.state` is this)."""
    if failed:
        return "failed"
    if needs_llm:
        return "needs_llm"
    if finished:
        return "exhausted"
    if not has_baseline:
        return "new"
    return "converged" if since_gain >= converge_after else "tuning"


@dataclass(frozen=True)
class KernelOverview:
    """A kernel as every command shows it (see the module docstring)."""

    name: str
    state: str
    #: Why, for ``needs_llm`` and ``invalid`` ("" otherwise).
    reason: str
    progress: KernelProgress
    evaluations: int
    outcomes: Mapping[str, int] = field(default_factory=dict)

    @property
    def speedup(self) -> float | None:
        return self.progress.speedup

    def to_dict(self) -> dict[str, object]:
        """The JSON form (``ktuned status --json``)."""
        p = self.progress
        return {
            "kernel": self.name,
            "state": self.state,
            "reason": self.reason,
            "generation": p.generation,
            "fingerprint": p.fingerprint,
            "evaluations": self.evaluations,
            "outcomes": dict(sorted(self.outcomes.items())),
            "evaluations_current": p.evaluations,
            "baseline_s": p.baseline_s,
            "best_s": p.best_s,
            "speedup": p.speedup,
            "best_at": p.best_at,
            "timing_kind": p.timing_kind,
        }


def kernel_overview(
    store: Store,
    *,
    live_states: Mapping[str, str] | None = None,
    converge_after: int = CONVERGE_AFTER,
    min_gain: float = MIN_GAIN,
    progress: list[KernelProgress] | None = None,
    outcomes: Mapping[tuple[str, str], int] | None = None,
) -> list[KernelOverview]:
    """Every kernel of ``store``, by name (see the module docstring).

    ``progress`` and ``outcomes`` (evaluations by kernel and outcome, every row): figures the
    caller already holds (the metrics collector keeps running sums), read here otherwise."""
    if progress is None:
        progress = store.kernel_progress()
    if outcomes is None:
        outcomes = store.evaluation_totals(0).outcomes
    by_kernel: dict[str, dict[str, int]] = {}
    for (kernel, outcome), n in outcomes.items():
        by_kernel.setdefault(kernel, {})[outcome] = n
    states = {}
    for p in progress:
        if p.state in ("invalid", "retired", "needs_llm"):
            states[p.name] = p.state
        elif live_states is not None and p.name in live_states:
            states[p.name] = live_states[p.name]
        else:
            states[p.name] = _derived_state(store, p, converge_after, min_gain)
    explained = {"needs_llm", "invalid"}
    reasons = (
        {k.name: k.reason for k in store.kernels()} if explained & set(states.values()) else {}
    )
    out = []
    for p in progress:
        counts = by_kernel.get(p.name, {})
        state = states[p.name]
        out.append(
            KernelOverview(
                name=p.name,
                state=state,
                reason=reasons.get(p.name, "") if state in explained else "",
                progress=p,
                evaluations=sum(counts.values()),
                outcomes=counts,
            )
        )
    return out


def _derived_state(store: Store, p: KernelProgress, converge_after: int, min_gain: float) -> str:
    """The scheduler's state of an active kernel, replayed from its stored history."""
    if p.fingerprint is None:
        return "new"
    has_baseline = failed = False
    best: float | None = None
    since_gain = 0
    configurations: set[str] = set()  # knob configurations evaluated (the original's too)
    for row in store.trials(p.name, p.generation, p.fingerprint):
        if row.provenance is not Provenance.LLM:
            configurations.add(canonical_knobs(row.knobs))
        t = row.result.time_s
        ok = row.result.outcome is Outcome.OK and t is not None
        if row.provenance is Provenance.ORIGINAL:
            has_baseline, failed = True, not ok
            best = t if ok else best
            continue
        if ok and t is not None and (best is None or t < best * (1.0 - min_gain)):
            best, since_gain = t, 0
            continue
        if ok and t is not None and best is not None:
            best = min(best, t)
        since_gain += 1
    space = _space_size(store, p.generation)
    return kernel_state(
        failed=failed,
        needs_llm=False,
        finished=space is not None and len(configurations) >= space,
        has_baseline=has_baseline,
        since_gain=since_gain,
        converge_after=converge_after,
    )


def _space_size(store: Store, generation: str) -> int | None:
    """The number of knob configurations of a generation's entry (``None``: unknown)."""
    info = store.generation_info(generation)
    if info is None:
        return None
    knobs = info[1].get("knobs")
    if not isinstance(knobs, Mapping) or not knobs:
        return None
    return math.prod(len(v) if isinstance(v, list) else 1 for v in knobs.values())
