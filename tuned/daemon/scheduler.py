"""Which kernel gets the next evaluation: the largest expected gain, new kernels first.

For kernel ``k`` (its current generation on the current fingerprint)::

    score(k) = weight(k) * headroom(k) * rate(k)

- ``weight``: the entry's share of production GPU time (``kernel.yaml``).
- ``headroom``: the fraction of the knob space not yet evaluated (1 for a fresh kernel, 0 when
  the space is exhausted): how much is left to find.
- ``rate``: the recent improvement rate, ``ln(best W evaluations ago / best now) / W`` over
  the last ``W = window`` evaluations; at least ``prior_rate`` while a kernel has fewer than
  ``W`` evaluations (optimism for the young), and at least ``floor_rate`` always, so every
  open kernel keeps a share.

Tiers come before scores: (-1) kernels with stale bests to re-validate (bests of an older
software fingerprint of this device, see tuned/runtime/stale.py), by weight: what users run
in production goes first, so it is trusted again soonest; (0) kernels without a baseline, by
weight; (1) open kernels, by score; (2) converged kernels (no gain of at least ``min_gain``
in the last ``converge_after`` evaluations) only once ``revisit_interval_s`` has passed
since they were last evaluated. Exhausted kernels and kernels whose original fails wait for
a new generation. A reference entry without a correct Triton module waits in ``needs_llm``
while no LLM can be asked (none configured, its budget spent, or its last reply gave nothing
to evaluate) and is tried again at the time the daemon gives (:meth:`Scheduler.wait_for_llm`).
A fingerprint change (driver, CUDA, Triton, PyTorch, GPU model) starts
every kernel afresh: its history on the new fingerprint is empty, so it is new again (and
its stale bests are evaluated right after its baseline: :meth:`Scheduler.revalidation`).
Ties go to the name, so picks are deterministic. The rule is documented in docs/service.md.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from tuned.daemon.config import SchedulerConfig
from tuned.outcomes import Outcome, Provenance
from tuned.store.base import TrialRow
from tuned.store.overview import kernel_state

__all__ = ["KernelTrack", "Scheduler"]


@dataclass
class KernelTrack:
    """What the scheduler knows of one kernel generation on one fingerprint."""

    name: str
    weight: float
    space_size: int
    has_baseline: bool = False
    evaluated: int = 0  # candidates besides the baseline, failures included
    best_s: float | None = None
    since_gain: int = 0  # evaluations since the last significant improvement
    finished: str = ""  # why the campaign has nothing more to do ("" while it has)
    failed: bool = False  # the original itself fails
    last_visit: float = float("-inf")
    recent_best: deque[float | None] = field(default_factory=deque)
    stale: set[str] = field(default_factory=set)  # stale bests still to re-validate (ids)
    needs_llm: str = ""  # why a reference entry waits for the LLM ("" when it does not)
    retry_at: float = float("inf")  # when a kernel in needs_llm is tried again

    def state(self, config: SchedulerConfig) -> str:
        """The rule `ktuned status` and `ktuned report` derive from the store, too."""
        return kernel_state(
            failed=self.failed,
            needs_llm=bool(self.needs_llm),
            finished=bool(self.finished),
            has_baseline=self.has_baseline,
            since_gain=self.since_gain,
            converge_after=config.converge_after,
        )

    def headroom(self) -> float:
        if self.space_size <= 0:
            return 0.0
        return max(0.0, 1.0 - self.evaluated / self.space_size)

    def rate(self, config: SchedulerConfig) -> float:
        observed = 0.0
        if self.recent_best and self.best_s:
            then = self.recent_best[0]
            if then:
                observed = math.log(then / self.best_s) / max(len(self.recent_best), 1)
        if self.evaluated < config.window:
            observed = max(observed, config.prior_rate)
        return max(observed, config.floor_rate)

    def score(self, config: SchedulerConfig) -> float:
        return self.weight * self.headroom() * self.rate(config)

    def observe(self, row: TrialRow, config: SchedulerConfig, now: float) -> None:
        """Account for one evaluation result of this kernel."""
        self.last_visit = now
        self.needs_llm = ""
        self.stale.discard(row.candidate_id)  # re-validated, whatever the outcome
        if row.provenance is Provenance.ORIGINAL:
            self.has_baseline = True
            if row.result.outcome is not Outcome.OK:
                self.failed = True
            else:
                self.best_s = row.result.time_s
            return
        self.evaluated += 1
        self.recent_best.append(self.best_s)
        while len(self.recent_best) > config.window:
            self.recent_best.popleft()
        t = row.result.time_s
        if row.result.outcome is Outcome.OK and t is not None:
            if self.best_s is None or t < self.best_s * (1.0 - config.min_gain):
                self.since_gain = 0
                self.best_s = t
                return
            self.best_s = min(self.best_s, t)
        self.since_gain += 1


class Scheduler:
    """Keeps one :class:`KernelTrack` per kernel and picks the next one to evaluate."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.tracks: dict[str, KernelTrack] = {}

    def track(
        self,
        name: str,
        *,
        weight: float,
        space_size: int,
        history: Iterable[TrialRow] = (),
        last_visit: float | None = None,
        stale: Iterable[str] = (),
    ) -> KernelTrack:
        """Start (or restart) tracking a kernel from its stored history, oldest first.

        ``last_visit`` (Unix seconds) is when its latest stored evaluation finished, so a
        restarted daemon does not revisit every converged kernel at once. ``stale``: ids of
        its stale bests (:func:`tuned.runtime.stale.stale_bests`); the kernel comes first
        until each was evaluated (see :meth:`revalidation`).
        """
        track = KernelTrack(name=name, weight=weight, space_size=space_size, stale=set(stale))
        for row in history:
            track.observe(row, self.config, now=float("-inf"))
        if last_visit is not None:
            track.last_visit = last_visit
        self.tracks[name] = track
        return track

    def forget(self, name: str) -> None:
        self.tracks.pop(name, None)

    def observe(self, name: str, row: TrialRow, now: float) -> None:
        if name in self.tracks:
            self.tracks[name].observe(row, self.config, now)

    def finish(self, name: str, why: str, now: float) -> None:
        """The campaign has nothing more to do (space exhausted, the original fails)."""
        if name in self.tracks:
            track = self.tracks[name]
            track.finished, track.last_visit = why, now
            track.failed = track.failed or why.startswith("the original fails")

    def wait_for_llm(self, name: str, why: str, retry_at: float) -> None:
        """A reference entry cannot go on without the LLM now (state ``needs_llm``); it is
        picked again from ``retry_at`` (Unix seconds; ``inf``: not before a restart)."""
        if name in self.tracks:
            track = self.tracks[name]
            track.needs_llm, track.retry_at = why, retry_at

    def revalidation(self, name: str) -> str | None:
        """A stale best of ``name`` to evaluate next (instead of a policy step), once the
        kernel has its baseline under the current fingerprint; else None."""
        track = self.tracks.get(name)
        if track is None or not track.stale or not track.has_baseline or track.failed:
            return None
        return min(track.stale)

    def states(self) -> dict[str, str]:
        return {name: t.state(self.config) for name, t in self.tracks.items()}

    def scores(self) -> dict[str, float]:
        return {name: t.score(self.config) for name, t in self.tracks.items()}

    def pick(self, now: float) -> str | None:
        """The kernel to evaluate next, or None when none should be evaluated now."""
        best: tuple[int, float, str] | None = None
        for name, track in self.tracks.items():
            tier = self._tier(track, now)
            if tier is None:
                continue
            key = (tier, -track.score(self.config) if tier > 0 else -track.weight, name)
            if best is None or key < best:
                best = key
        return None if best is None else best[2]

    def next_revisit(self, now: float) -> float | None:
        """Seconds until a converged kernel becomes due again (None if none waits)."""
        waits = [
            t.last_visit + self.config.revisit_interval_s - now
            for t in self.tracks.values()
            if t.state(self.config) == "converged"
        ] + [
            t.retry_at - now
            for t in self.tracks.values()
            if t.state(self.config) == "needs_llm" and math.isfinite(t.retry_at)
        ]
        return max(0.0, min(waits)) if waits else None

    def _tier(self, track: KernelTrack, now: float) -> int | None:
        state = track.state(self.config)
        if state == "needs_llm":
            return 2 if now >= track.retry_at else None
        if track.stale and state not in ("failed", "exhausted"):
            return -1
        if state == "new":
            return 0
        if state == "tuning":
            return 1
        if state == "converged" and now - track.last_visit >= self.config.revisit_interval_s:
            return 2
        return None
