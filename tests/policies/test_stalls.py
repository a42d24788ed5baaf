"""Issue 24: the default policy must not stall on a plateau while the optimum lies elsewhere.

The fixture is a real recorded space (``tests/fixtures/pnpoly_3060_plateau.json.gz``, cut
down from the benchdata pnpoly space: every ``block_size_x``, ``tile_size`` 10 to 20): its
optimum needs ``between_method`` 0, two list positions from the plateau of methods 2 and 3
(method 1 between them is slow), and ``tile_size`` 20 with ``use_method`` 0, while 31 block
sizes within 1 % of each other make a plateau around every local optimum. Before issue 24
(no any-value moves, no model arm) the policy climbs onto a plateau and fills it; any-value
moves of the incumbent end most of those stalls, and the model arm behind the flatness gate
(the default since the twelfth session) the rest.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from policies import DEFAULT_POLICY, HierarchicalPolicy, HierarchicalSettings
from policies.base import SearchSpace, Trial
from policies.density import DensityProposer, DensitySettings
from policies.hierarchical import MODEL_ARM, RESTART_ARM, HierarchicalState
from policies.history import TrialLog
from policies.moves import MoveSettings
from policies.space_index import SpaceIndex

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "pnpoly_3060_plateau.json.gz"
SEEDS = range(16)
BUDGET = 200


@pytest.fixture(scope="module")
def replay_module() -> ModuleType:
    from bench import search_replay

    return search_replay


def _before_issue_24() -> HierarchicalPolicy:
    return HierarchicalPolicy(
        settings=HierarchicalSettings(
            model="none", flat_gate=0.0, moves=MoveSettings(any_value_from_incumbent=False)
        )
    )


def _without_model_arm() -> HierarchicalPolicy:
    return HierarchicalPolicy(settings=HierarchicalSettings(model="none", flat_gate=0.0))


def test_the_default_has_the_gated_model_arm_no_stall_arms_and_any_value_moves() -> None:
    settings = HierarchicalPolicy.default_settings
    assert settings.model == "gp" and settings.flat_gate == 0.5  # docs/decisions.md
    assert settings.stall_patience == 0 and settings.crossover is None
    assert settings.moves.any_value_from_incumbent
    assert settings.moves.any_value_max_values == 4


def test_the_old_policies_stall_on_the_plateau_and_the_default_reaches_the_optimum(
    replay_module: ModuleType,
) -> None:
    space = replay_module.RecordedSpace(FIXTURE)

    def finals(make: object) -> list[float]:
        return [
            replay_module.replay(space, "p", s, budgets=(BUDGET,), policy=make())[0]  # type: ignore[operator]
            for s in SEEDS
        ]

    before, no_model = finals(_before_issue_24), finals(_without_model_arm)
    default = [replay_module.replay(space, DEFAULT_POLICY, s, budgets=(BUDGET,))[0] for s in SEEDS]
    # When written: 10 of 16 seeds stopped on a plateau (more than 2 % from the optimum)
    # before issue 24, 3 of 16 without the model arm, none with the default (16 of 16 at it;
    # since the incumbent's powers-of-two tier, 15 of 16, seed 9 at 0.998 of it after 200
    # evaluations and at it after 250).
    assert sum(f < 0.98 for f in before) >= len(before) // 2, before
    assert sum(f < 0.98 for f in no_model) >= 2, no_model
    assert all(f >= 0.99 for f in default), default
    assert sum(f >= 0.999 for f in default) >= len(default) - 1, default


def _space() -> SearchSpace:
    return SearchSpace(knobs={"a": (0, 1, 2, 3), "b": (1, 2, 4, 8, 16, 32), "c": (0, 1)})


def _trials(space: SearchSpace, times: dict[int, float | None]) -> list[Trial]:
    out = []
    for i, (code, t) in enumerate(times.items()):
        out.append(
            Trial(
                candidate_id=f"c{i}",
                knobs=space.config_at(code),
                outcome="ok" if t is not None else "compile_error",
                time_s=t,
            )
        )
    return out


def test_density_proposer_favours_the_good_values_and_is_seeded() -> None:
    space = _space()
    index = SpaceIndex(space)
    # Fast trials all have a == 3; slow ones a in {0, 1}.
    times: dict[int, float | None] = {}
    for code in range(index.size):
        digits = index.digits(code)
        if digits[0] == 3 and digits[2] == 0 and len(times) < 40:
            times[code] = 1.0 + 0.01 * digits[1]
        elif digits[0] < 2 and digits[1] % 2 == 0:
            times[code] = 5.0
    log = TrialLog(index)
    log.sync(_trials(space, times))
    picks = []
    for seed in range(20):
        code = DensityProposer().propose(log, np.random.default_rng(seed), set())
        assert code is not None and code not in log.seen and index.admits(code)
        picks.append(index.digits(code)[0])
    assert picks.count(3) >= 15, picks  # the good value of the knob that matters
    again = DensityProposer().propose(log, np.random.default_rng(0), set())
    assert again == index.code_of(
        index.digits(DensityProposer().propose(log, np.random.default_rng(0), set()) or 0)
    )


def test_density_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="gamma"):
        DensitySettings(gamma=1.5)
    with pytest.raises(ValueError, match="stall_patience"):
        HierarchicalSettings(stall_patience=-1)
    with pytest.raises(ValueError, match="model_patience"):
        HierarchicalSettings(model_patience=-1)
    with pytest.raises(ValueError, match="unknown model 'bo'"):
        HierarchicalSettings(model="bo")


def test_stall_arms_open_only_after_the_patience_and_persist_their_climb() -> None:
    space = _space()
    patience = 15
    policy = HierarchicalPolicy(
        settings=HierarchicalSettings(stall_patience=patience, model="tpe", model_patience=patience)
    )
    rng = np.random.default_rng(3)
    trials: list[Trial] = []
    arms: list[str | None] = []
    # Every configuration takes the same time: nothing after the first ever improves.
    while len(trials) < patience + 25:
        suggestion = policy.suggest(space, trials, rng)
        assert suggestion is not None
        trial = Trial(
            candidate_id=f"c{len(trials)}", knobs=suggestion.knobs, outcome="ok", time_s=1.0
        )
        policy.observe(suggestion, trial)
        trials.append(trial)
        arms.append(suggestion.arm)
    stall_arms = {MODEL_ARM, RESTART_ARM}
    first = next(i for i, a in enumerate(arms) if a in stall_arms)
    assert first >= patience  # evaluation 1 (index 0 here) is the incumbent throughout
    assert stall_arms <= set(arms[first:])
    state = policy.to_dict()
    restored = HierarchicalState.from_dict(state)
    assert restored.to_dict() == state
    if state["climb"] is not None:
        assert set(state["climb"]) == set(space.knobs)


def test_the_default_is_deterministic_per_seed(replay_module: ModuleType) -> None:
    space = replay_module.RecordedSpace(FIXTURE)
    first = replay_module.replay(space, DEFAULT_POLICY, 5, budgets=(30, 80))
    assert replay_module.replay(space, DEFAULT_POLICY, 5, budgets=(30, 80)) == first
