"""The crossover arm (issue 24, opt-in; policy ``hierarchical_crossover``): children of two
of the fastest evaluated configurations, chosen by the bandit like any other arm."""

from __future__ import annotations

import numpy as np
import pytest

from policies import POLICIES, HierarchicalPolicy, HierarchicalSettings, make_policy
from policies.base import Config, Policy, SearchSpace, Trial
from policies.crossover import CrossoverProposer, CrossoverSettings
from policies.hierarchical import CROSSOVER_ARM
from policies.history import TrialLog
from policies.moves import NeighbourProposer
from policies.space_index import SpaceIndex

#: Two long knobs: one-knob steps are adjacent moves only (no any-value move of a short
#: knob), so the climb needs many uphill steps to get from one good parent to the optimum.
SPACE = SearchSpace(knobs={"method": tuple(range(16)), "tile_size": tuple(range(16))})
GOOD_A = {"method": 15, "tile_size": 0}  # the right method, the wrong tile
GOOD_B = {"method": 0, "tile_size": 15}  # the right tile, the wrong method
OPTIMUM = {"method": 15, "tile_size": 15}


def latency(config: Config) -> float:
    """A deceptive landscape: the two good parents at 1.0, their child (both right knobs)
    at 0.5, everything else at 2.0 to 3.0, slower towards the optimum's row and column (so
    every one-knob step from a parent towards the optimum is uphill)."""
    if config == OPTIMUM:
        return 0.5
    if config in (GOOD_A, GOOD_B):
        return 1.0
    m, t = int(config["method"]), int(config["tile_size"])
    return 2.0 + (m + t) / 30.0


def _history() -> list[Trial]:
    """The two good parents and 8 slow configurations far from the optimum."""
    configs = [GOOD_A, GOOD_B] + [{"method": i, "tile_size": i} for i in range(1, 9)]
    return [
        Trial(candidate_id=f"c{i}", knobs=c, outcome="ok", time_s=latency(c))
        for i, c in enumerate(configs)
    ]


def _steps_to_optimum(policy: Policy, seed: int, budget: int) -> int | None:
    trials = _history()
    rng = np.random.default_rng(seed)
    for step in range(budget):
        suggestion = policy.suggest(SPACE, trials, rng)
        assert suggestion is not None
        knobs = dict(suggestion.knobs)
        trial = Trial(
            candidate_id=f"c{len(trials)}",
            knobs=knobs,
            outcome="ok",
            time_s=latency(knobs),
            strategy=suggestion.strategy,
            parent_id=suggestion.parent_id,
        )
        policy.observe(suggestion, trial)
        trials.append(trial)
        if knobs == OPTIMUM:
            return step
    return None


def test_crossover_policy_is_registered_and_opt_in() -> None:
    assert "hierarchical_crossover" in POLICIES
    assert HierarchicalSettings().crossover is None  # the default has no crossover arm
    policy = make_policy("hierarchical_crossover")
    assert isinstance(policy, HierarchicalPolicy)
    assert policy.settings.crossover is not None


@pytest.mark.parametrize("seed", range(5))
def test_crossover_arm_reaches_the_child_of_two_good_parents(seed: int) -> None:
    """Recombining the two good parents is the only fast route to the optimum: the
    crossover arm gets there within a few decisions, the default climb does not."""
    budget = 25  # about 10 bandit arms are tried once first; then the crossover arm wins
    steps = _steps_to_optimum(make_policy("hierarchical_crossover"), seed, budget)
    assert steps is not None, "the crossover arm never proposed the child of the two parents"
    assert _steps_to_optimum(HierarchicalPolicy(), seed, budget) is None


def test_crossover_children_come_from_the_fastest_pair_first() -> None:
    log = TrialLog(SpaceIndex(SPACE))
    log.sync(_history())
    proposer = CrossoverProposer(
        settings=CrossoverSettings(units="uniform"), proposer=NeighbourProposer()
    )
    rng = np.random.default_rng(0)
    children = proposer.children(log, [], rng, set())
    decoded = [log.index.decode(c) for c in children]
    assert decoded[:2] == [{"method": 0, "tile_size": 0}, OPTIMUM] or decoded[:2] == [
        OPTIMUM,
        {"method": 0, "tile_size": 0},
    ]
    # Only free, valid configurations: never an evaluated one, never a pending one.
    assert not set(children) & log.seen
    pending = {log.index.encode(OPTIMUM) or 0}
    assert OPTIMUM not in [log.index.decode(c) for c in proposer.children(log, [], rng, pending)]


def test_crossover_is_deterministic_per_seed() -> None:
    def run(seed: int) -> list[tuple[Config, str | None]]:
        policy = make_policy("hierarchical_crossover")
        trials = _history()
        rng = np.random.default_rng(seed)
        out: list[tuple[Config, str | None]] = []
        for _ in range(12):
            s = policy.suggest(SPACE, trials, rng)
            assert s is not None
            out.append((dict(s.knobs), s.arm))
            trial = Trial(f"c{len(trials)}", dict(s.knobs), "ok", latency(s.knobs))
            policy.observe(s, trial)
            trials.append(trial)
        return out

    first = run(3)
    assert first == run(3)
    assert any(arm == CROSSOVER_ARM for _, arm in first)


def test_crossover_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        CrossoverSettings(parents=1)
    with pytest.raises(ValueError):
        CrossoverSettings(units="knob")
    with pytest.raises(ValueError):
        CrossoverSettings(select="best")
    with pytest.raises(ValueError):
        HierarchicalSettings(crossover_patience=-1)
