"""The scheduler: new kernels first, then weight x headroom x recent rate; converged rarely."""

from __future__ import annotations

import itertools

import pytest

from tuned.daemon.config import SchedulerConfig
from tuned.daemon.scheduler import Scheduler
from tuned.outcomes import EvalResult, Outcome, Provenance
from tuned.store.base import TrialRow

_ids = itertools.count()


def row(time_s: float | None, *, original: bool = False, outcome: Outcome = Outcome.OK) -> TrialRow:
    return TrialRow(
        candidate_id=f"c{next(_ids)}",
        knobs={},
        provenance=Provenance.ORIGINAL if original else Provenance.PARAMETRIC,
        strategy=None,
        parent_id=None,
        source_hash="",
        result=EvalResult(outcome, time_s=time_s if outcome is Outcome.OK else None),
        wall_s=0.1,
    )


CONFIG = SchedulerConfig(window=4, min_gain=0.01, converge_after=6, revisit_interval_s=100.0)


def test_new_kernels_first_by_weight_then_by_expected_gain() -> None:
    s = Scheduler(CONFIG)
    s.track("old", weight=5.0, space_size=100, history=[row(1.0, original=True)])
    s.track("light", weight=1.0, space_size=100)
    s.track("heavy", weight=2.0, space_size=100)
    assert s.pick(0.0) == "heavy"
    s.observe("heavy", row(1.0, original=True), 0.0)
    assert s.pick(0.0) == "light"
    s.observe("light", row(1.0, original=True), 0.0)
    assert s.pick(0.0) == "old"  # all have baselines: weight 5 wins at equal rate and headroom
    assert s.states() == {"old": "tuning", "light": "tuning", "heavy": "tuning"}


def test_recent_improvement_rate_and_headroom_steer_the_choice() -> None:
    s = Scheduler(CONFIG)
    s.track("fast", weight=1.0, space_size=1000, history=[row(1.0, original=True)])
    s.track("flat", weight=1.0, space_size=1000, history=[row(1.0, original=True)])
    for i in range(5):  # past the window: no more optimism for the young
        s.observe("fast", row(0.8 ** (i + 1)), 1.0)
        s.observe("flat", row(1.0), 1.0)
    assert s.scores()["fast"] > s.scores()["flat"]
    assert s.pick(2.0) == "fast"
    # A kernel whose space is nearly exhausted has little headroom left.
    s.track("small", weight=1.0, space_size=6, history=[row(1.0, original=True)])
    for i in range(5):
        s.observe("small", row(0.5 ** (i + 1)), 1.0)
    small = s.tracks["small"]
    assert small.headroom() == pytest.approx(1 / 6)
    assert s.scores()["small"] == pytest.approx(1.0 * (1 / 6) * small.rate(CONFIG))


def test_converged_kernels_wait_for_the_revisit_interval() -> None:
    s = Scheduler(CONFIG)
    s.track("k", weight=1.0, space_size=1000, history=[row(1.0, original=True)])
    for _ in range(CONFIG.converge_after):
        s.observe("k", row(1.0), 10.0)  # no gain
    assert s.states()["k"] == "converged"
    assert s.pick(10.0 + CONFIG.revisit_interval_s / 2) is None
    assert s.next_revisit(10.0) == CONFIG.revisit_interval_s
    assert s.pick(10.0 + CONFIG.revisit_interval_s) == "k"
    s.observe("k", row(0.5), 200.0)  # the revisit found a gain: tuning again
    assert s.states()["k"] == "tuning"


def test_failures_count_as_evaluations_without_gain() -> None:
    s = Scheduler(CONFIG)
    s.track("k", weight=1.0, space_size=1000, history=[row(1.0, original=True)])
    for _ in range(CONFIG.converge_after):
        s.observe("k", row(None, outcome=Outcome.COMPILE_ERROR), 1.0)
    assert s.states()["k"] == "converged"


def test_finished_and_failed_kernels_are_skipped() -> None:
    s = Scheduler(CONFIG)
    s.track("done", weight=9.0, space_size=2, history=[row(1.0, original=True)])
    s.track("broken", weight=9.0, space_size=10)
    s.track("open", weight=1.0, space_size=10, history=[row(1.0, original=True)])
    s.observe("broken", row(None, original=True, outcome=Outcome.INCORRECT), 0.0)
    s.finish("done", "knob space exhausted", 0.0)
    assert s.states() == {"done": "exhausted", "broken": "failed", "open": "tuning"}
    assert s.pick(0.0) == "open"


def test_restart_resumes_from_history_and_last_visit() -> None:
    history = [row(1.0, original=True)] + [row(1.0) for _ in range(CONFIG.converge_after)]
    s = Scheduler(CONFIG)
    s.track("k", weight=1.0, space_size=1000, history=history, last_visit=50.0)
    assert s.states()["k"] == "converged"
    assert s.pick(60.0) is None  # a restart does not revisit converged kernels at once
    assert s.pick(50.0 + CONFIG.revisit_interval_s) == "k"


def test_ties_are_deterministic() -> None:
    s = Scheduler(CONFIG)
    for name in ("b", "a", "c"):
        s.track(name, weight=1.0, space_size=10)
    assert s.pick(0.0) == "a"
