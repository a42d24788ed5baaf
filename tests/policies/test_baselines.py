"""The classic baselines behave like their Kernel Tuner originals."""

from __future__ import annotations

import math

import numpy as np

from policies import GreedyLocalSearchPolicy, SearchSpace, SimulatedAnnealingPolicy, Trial
from policies.annealing import AnnealingSettings

SPACE = SearchSpace(knobs={"x": tuple(range(12)), "y": tuple(range(12))})


def bowl(config: dict[str, object]) -> float:
    return 1.0 + (int(config["x"]) - 7) ** 2 + (int(config["y"]) - 3) ** 2  # type: ignore[call-overload]


def run(policy: object, steps: int) -> list[Trial]:
    trials = [Trial("c0", {"x": 0, "y": 11}, "ok", bowl({"x": 0, "y": 11}), "original")]
    for i in range(steps):
        s = policy.suggest(SPACE, trials, np.random.default_rng([1, i]))  # type: ignore[attr-defined]
        if s is None:
            break
        trial = Trial(f"c{len(trials)}", dict(s.knobs), "ok", bowl(dict(s.knobs)))
        policy.observe(s, trial)  # type: ignore[attr-defined]
        trials.append(trial)
    return trials


def test_annealing_acceptance_follows_kernel_tuner() -> None:
    accept = SimulatedAnnealingPolicy._accept
    assert accept(2.0, 1.0, 0.5, 0.999)  # better: always
    assert not accept(1.0, None, 1.0, 0.0)  # failed: never
    assert accept(None, 5.0, 1.0, 0.999)  # from an invalid position: always
    p = math.exp(((1.0 - 1.2) / 1.0) / 0.5)
    assert accept(1.0, 1.2, 0.5, p - 1e-9) and not accept(1.0, 1.2, 0.5, p + 1e-9)


def test_annealing_schedule_reaches_t_min() -> None:
    policy = SimulatedAnnealingPolicy(settings=AnnealingSettings(anneal_evaluations=100))
    assert policy.temperature(0) == 1.0
    assert policy.temperature(100) == policy.settings.t_min
    assert policy.temperature(1000) == policy.settings.t_min


def test_annealing_and_greedy_find_the_bottom_of_a_bowl() -> None:
    for policy in (SimulatedAnnealingPolicy(), GreedyLocalSearchPolicy()):
        trials = run(policy, 120)
        assert min(t.time_s or math.inf for t in trials) == 1.0, type(policy).__name__


def test_greedy_base_only_ever_improves_until_a_restart() -> None:
    policy = GreedyLocalSearchPolicy()
    trials = [Trial("c0", {"x": 0, "y": 11}, "ok", bowl({"x": 0, "y": 11}), "original")]
    for i in range(40):
        before = policy.state.base_time_s
        s = policy.suggest(SPACE, trials, np.random.default_rng([2, i]))
        assert s is not None
        trial = Trial(f"c{len(trials)}", dict(s.knobs), "ok", bowl(dict(s.knobs)))
        policy.observe(s, trial)
        trials.append(trial)
        after = policy.state.base_time_s
        if before is not None and after is not None and policy.state.base is not None:
            assert after <= before or after == trial.time_s  # improved, or restarted there
    assert min(t.time_s or math.inf for t in trials) == 1.0
