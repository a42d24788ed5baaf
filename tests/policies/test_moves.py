"""The parametric proposer: neighbour moves, failures, widening, exhaustion."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policies import SearchSpace, Trial
from policies.history import TrialLog
from policies.moves import MoveSettings, NeighbourProposer
from policies.space_index import SpaceIndex
from tests.policies.conftest import spaces, valid_configs

SPACE = SearchSpace(knobs={"BLOCK": (16, 32, 48, 64, 128), "num_warps": (1, 2, 4, 8)})
ONLY_NEIGHBOURS = MoveSettings(
    scale_prob=0, two_knob_prob=0, jump_prob=0, any_value_from_incumbent=False
)


def _log(space: SearchSpace, rows: list[tuple[dict[str, object], float | None]]) -> TrialLog:
    log = TrialLog(SpaceIndex(space))
    log.sync(
        [
            Trial(f"c{i}", knobs, "ok" if t else "runtime_error", t)  # type: ignore[arg-type]
            for i, (knobs, t) in enumerate(rows)
        ]
    )
    return log


def test_neighbour_moves_step_one_knob_to_an_adjacent_value() -> None:
    log = _log(SPACE, [({"BLOCK": 48, "num_warps": 2}, 1.0)])
    proposer = NeighbourProposer(settings=ONLY_NEIGHBOURS)
    parent = log.index.encode({"BLOCK": 48, "num_warps": 2})
    assert parent is not None
    seen = set()
    for seed in range(40):
        move = proposer.local(log, parent, (0, 1), np.random.default_rng(seed), set())
        assert move is not None and move.kind == "neighbour"
        seen.add(tuple(log.index.decode(move.code).values()))
    assert seen == {(32, 2), (64, 2), (48, 1), (48, 4)}


def test_moves_stay_inside_the_strategy_knobs() -> None:
    log = _log(SPACE, [({"BLOCK": 48, "num_warps": 2}, 1.0)])
    parent = log.index.encode({"BLOCK": 48, "num_warps": 2})
    assert parent is not None
    proposer = NeighbourProposer()
    for seed in range(30):
        move = proposer.local(log, parent, (1,), np.random.default_rng(seed), set())
        assert move is not None
        assert log.index.decode(move.code)["BLOCK"] == 48


def test_scale_moves_double_and_halve() -> None:
    index = SpaceIndex(SPACE)
    code = index.encode({"BLOCK": 32, "num_warps": 1})
    assert code is not None
    assert [index.decode(c)["BLOCK"] for c in index.scaled(code, (0,))] == [64]
    code = index.encode({"BLOCK": 64, "num_warps": 1})
    assert code is not None  # 128 is adjacent: only the halving is a scale move
    assert [index.decode(c)["BLOCK"] for c in index.scaled(code, (0,))] == [32]


def test_neighbours_of_failures_are_avoided() -> None:
    # Parent (48, 2); (64, 4) and (64, 1) failed, so (64, 2) sits next to two failures.
    rows: list[tuple[dict[str, object], float | None]] = [
        ({"BLOCK": 48, "num_warps": 2}, 1.0),
        ({"BLOCK": 64, "num_warps": 4}, None),
        ({"BLOCK": 64, "num_warps": 1}, None),
        ({"BLOCK": 48, "num_warps": 1}, 1.1),
        ({"BLOCK": 48, "num_warps": 4}, 1.1),
    ]
    log = _log(SPACE, rows)
    parent = log.index.encode(rows[0][0])
    assert parent is not None
    proposer = NeighbourProposer(settings=ONLY_NEIGHBOURS)
    picks = {
        log.index.decode(proposer.local(log, parent, (0, 1), np.random.default_rng(s), set()).code)[  # type: ignore[union-attr]
            "BLOCK"
        ]
        for s in range(20)
    }
    assert picks == {32}


def test_exhausted_neighbourhood_widens_then_goes_random() -> None:
    rows: list[tuple[dict[str, object], float | None]] = [
        ({"BLOCK": 16, "num_warps": 1}, 1.0),
        ({"BLOCK": 32, "num_warps": 1}, 1.2),
    ]
    log = _log(SPACE, rows)
    parent = log.index.encode(rows[0][0])
    assert parent is not None
    proposer = NeighbourProposer(settings=ONLY_NEIGHBOURS)
    assert proposer.local(log, parent, (0,), np.random.default_rng(0), set()) is None
    assert proposer.exhausted(log, parent, (0,))
    move = proposer.propose(log, parent, (0,), np.random.default_rng(0), set())
    assert move is not None and move.kind == "widened"
    assert log.index.decode(move.code) == {"BLOCK": 16, "num_warps": 2}
    pending = {move.code}
    move = proposer.propose(log, parent, (0,), np.random.default_rng(0), pending)
    assert move is not None and move.kind == "random"


def test_locally_optimal_incumbent_tries_any_value_of_its_short_knobs() -> None:
    rows: list[tuple[dict[str, object], float | None]] = [
        ({"BLOCK": 16, "num_warps": 1}, 1.0),
        ({"BLOCK": 32, "num_warps": 1}, 1.2),
        ({"BLOCK": 16, "num_warps": 2}, 1.3),
    ]
    log = _log(SPACE, rows)
    parent = log.index.encode(rows[0][0])
    assert parent is not None
    settings = MoveSettings(scale_prob=0, two_knob_prob=0, jump_prob=0)
    proposer = NeighbourProposer(settings=settings)
    assert not proposer.exhausted(log, parent, (0, 1))  # num_warps 4 and 8 are still free
    picks = set()
    for seed in range(10):
        move = proposer.local(log, parent, (0, 1), np.random.default_rng(seed), set())
        assert move is not None and move.kind == "neighbour"
        picks.add(tuple(log.index.decode(move.code).values()))
    # Only num_warps (4 values) jumps; BLOCK (5 values, over any_value_max_values) does not.
    assert picks <= {(16, 4), (16, 8)}
    # A slower parent keeps one-step moves only.
    slower = log.index.encode(rows[1][0])
    assert slower is not None
    steps = proposer.steps(log, slower, (0, 1))
    assert sorted(tuple(log.index.decode(c).values()) for c in steps) == [
        (16, 1),
        (32, 2),
        (48, 1),
    ]


@settings(max_examples=40, deadline=None, database=None)
@given(space=spaces(), seed=st.integers(0, 1000), data=st.data())
def test_propose_returns_none_only_when_everything_is_taken(
    space: SearchSpace, seed: int, data: st.DataObject
) -> None:
    configs = valid_configs(space)
    taken = data.draw(st.lists(st.sampled_from(configs), unique_by=str)) if configs else []
    log = _log(space, [(c, 1.0 + i) for i, c in enumerate(taken)])
    parent = log.index.encode(taken[0]) if taken else None
    knobs = log.index.movable(space.knobs)
    move = NeighbourProposer().propose(log, parent, knobs, np.random.default_rng(seed), set())
    if len(taken) == len(configs):
        assert move is None
    else:
        assert move is not None
        assert move.code not in log.seen
        assert space.admits(log.index.decode(move.code))


def test_a_local_optimum_incumbent_tries_its_transposed_tile_shape() -> None:
    space = SearchSpace(knobs={"BLOCK_M": (64, 128, 256), "BLOCK_N": (64, 128, 256)})
    rows: list[tuple[dict[str, object], float | None]] = [
        ({"BLOCK_M": 256, "BLOCK_N": 128}, 1.0),  # the incumbent, every neighbour slower
        ({"BLOCK_M": 128, "BLOCK_N": 128}, 2.0),
        ({"BLOCK_M": 256, "BLOCK_N": 64}, 2.0),
        ({"BLOCK_M": 256, "BLOCK_N": 256}, None),
    ]
    log = _log(space, rows)
    incumbent = log.index.encode({"BLOCK_M": 256, "BLOCK_N": 128})
    slower = log.index.encode({"BLOCK_M": 128, "BLOCK_N": 128})
    assert incumbent is not None and slower is not None
    proposer = NeighbourProposer(settings=ONLY_NEIGHBOURS)
    move = proposer.neighbour(log, incumbent, (0, 1), np.random.default_rng(0), set())
    assert move is not None
    assert log.index.decode(move.code) == {"BLOCK_M": 128, "BLOCK_N": 256}
    assert not proposer.exhausted(log, incumbent, (0, 1))
    # Not from a slower parent (it still has one-step moves), and not when switched off.
    assert slower not in {move.code}
    off = NeighbourProposer(
        settings=MoveSettings(scale_prob=0, two_knob_prob=0, jump_prob=0, swaps=False)
    )
    assert off.neighbour(log, incumbent, (0, 1), np.random.default_rng(0), set()) is None
    assert off.exhausted(log, incumbent, (0, 1))
