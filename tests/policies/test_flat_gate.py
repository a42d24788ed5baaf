"""The flatness gate (issue 24, on by default): escape arms open only while the incumbent's
evaluated one-knob neighbours are a plateau, never around an isolated spike."""

from __future__ import annotations

import numpy as np

from policies import HierarchicalPolicy, HierarchicalSettings
from policies.base import SearchSpace, Trial
from policies.hierarchical import MODEL_ARM

SPACE = SearchSpace(knobs={"method": (0, 1, 2, 3), "block": tuple(range(32, 32 * 13, 32))})


def _history(neighbour_time: float) -> list[Trial]:
    """The incumbent (method 2, block 64) at 1.0 and its 11 block neighbours at
    ``neighbour_time``, plus a slow method 1."""
    configs = [{"method": 2, "block": b} for b in SPACE.knobs["block"]]
    configs.append({"method": 1, "block": 64})
    out = []
    for i, knobs in enumerate(configs):
        if knobs == {"method": 2, "block": 64}:
            t = 1.0
        elif knobs["method"] == 1:
            t = 3.0
        else:
            t = neighbour_time
        out.append(Trial(candidate_id=f"c{i}", knobs=knobs, outcome="ok", time_s=t))
    return out


def _arms(settings: HierarchicalSettings, trials: list[Trial], n: int = 30) -> set[str | None]:
    policy = HierarchicalPolicy(settings=settings)
    rng = np.random.default_rng(0)
    return {s.arm for s in (policy.suggest(SPACE, trials, rng) for _ in range(n)) if s}


def test_flatness_gate_opens_the_model_arm_on_a_plateau_only() -> None:
    settings = HierarchicalSettings(model="tpe", flat_gate=0.5, flat_tolerance=0.02)
    assert MODEL_ARM in _arms(settings, _history(1.01))  # a plateau: 11 of 12 within 2 %
    assert MODEL_ARM not in _arms(settings, _history(1.6))  # a spike: every neighbour slower
    # Off (flat_gate 0): the model arm opens whatever the neighbourhood.
    assert MODEL_ARM in _arms(HierarchicalSettings(model="tpe", flat_gate=0.0), _history(1.6))
    # The default: the GP arm behind the same gate.
    assert MODEL_ARM in _arms(HierarchicalSettings(), _history(1.01))
    assert MODEL_ARM not in _arms(HierarchicalSettings(), _history(1.6))


def test_flatness_gate_needs_enough_evaluated_neighbours() -> None:
    trials = _history(1.01)[:4]  # the incumbent and 3 neighbours
    settings = HierarchicalSettings(model="tpe", flat_gate=0.5, initial_random=1)
    assert MODEL_ARM not in _arms(settings, trials)
