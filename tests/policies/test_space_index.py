"""Integer codes of configurations: round trips, neighbourhoods, restricted sampling."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policies import SearchSpace
from policies.space_index import SpaceIndex
from tests.policies.conftest import spaces, valid_configs


@settings(max_examples=60, deadline=None, database=None)
@given(space=spaces(), data=st.data())
def test_codes_round_trip_and_match_config_at(space: SearchSpace, data: st.DataObject) -> None:
    index = SpaceIndex(space)
    i = data.draw(st.integers(0, space.size() - 1))
    config = space.config_at(i)
    assert index.encode(config) == i
    assert index.decode(i) == config
    assert index.code_of(index.digits(i)) == i


@settings(max_examples=60, deadline=None, database=None)
@given(space=spaces(), data=st.data())
def test_adjacent_codes_differ_by_one_step_in_one_knob(
    space: SearchSpace, data: st.DataObject
) -> None:
    index = SpaceIndex(space)
    code = data.draw(st.integers(0, space.size() - 1))
    digits = index.digits(code)
    for other in index.adjacent(code, range(len(index.cards))):
        diff = [abs(a - b) for a, b in zip(digits, index.digits(other))]
        assert sorted(diff)[-1] == 1 and sum(diff) == 1


def test_unknown_configurations_have_no_code() -> None:
    index = SpaceIndex(SearchSpace(knobs={"a": (1, 2), "b": ("x", "y")}))
    assert index.encode({"a": 3, "b": "x"}) is None
    assert index.encode({"a": 1}) is None
    assert index.encode({"a": 1, "b": "y", "c": 0}) is None


@settings(max_examples=40, deadline=None, database=None)
@given(space=spaces(), seed=st.integers(0, 1000))
def test_random_free_draws_only_valid_untaken_and_is_exact_when_full(
    space: SearchSpace, seed: int
) -> None:
    index = SpaceIndex(space)
    valid = {index.encode(c) for c in valid_configs(space)}
    rng = np.random.default_rng(seed)
    taken: set[int] = set()
    while True:
        code = index.random_free(rng, taken)
        if code is None:
            break
        assert code in valid and code not in taken
        taken.add(code)
    assert taken == valid


def test_swaps_exchange_the_values_of_twin_size_knobs_only() -> None:
    space = SearchSpace(
        knobs={
            "BLOCK_M": (64, 128, 256),
            "BLOCK_N": (64, 128, 256),
            "BLOCK_K": (32, 64),
            "EVEN_M": (0, 1),
            "EVEN_N": (0, 1),
        }
    )
    index = SpaceIndex(space)
    assert index.twins == ((0, 1),)  # flags with equal lists are not twins
    code = index.encode({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "EVEN_M": 1, "EVEN_N": 0})
    assert code is not None
    (swapped,) = index.swapped(code, range(5))
    assert index.decode(swapped) == {
        "BLOCK_M": 128,
        "BLOCK_N": 256,
        "BLOCK_K": 64,
        "EVEN_M": 1,
        "EVEN_N": 0,
    }
    assert index.swapped(code, (0, 2)) == []  # both twins must be movable by the strategy
    square = index.with_digit(code, 1, 2)  # 256 x 256: nothing to exchange
    assert index.swapped(square, range(5)) == []
