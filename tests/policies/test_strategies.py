"""The strategy catalog and the knob-group inference rules."""

from __future__ import annotations

import pytest

from policies import SearchSpace
from policies.strategies import (
    CONFIG,
    KNOB_GROUPS,
    STRATEGIES,
    infer_knob_group,
    knob_groups,
    strategy_by_name,
    strategy_knobs,
)


def test_kernelband_six_plus_config_with_their_targets() -> None:
    targets = {s.name: s.target for s in STRATEGIES}
    assert targets == {
        "tiling": "l2",
        "vectorization": "dram",
        "fusion": "dram",
        "pipeline": "sm",
        "reordering": "sm",
        "access_layout": "dram",
        "config": "latency",
    }
    assert all(s.instruction for s in STRATEGIES)
    assert CONFIG.knob_groups == KNOB_GROUPS


@pytest.mark.parametrize(
    ("name", "values", "group"),
    [
        ("BLOCK_SIZE_M", (16, 32, 64), "block"),
        ("BLOCK_M", (16, 32), "block"),
        ("BM", (64, 128), "block"),
        ("block_size_x", (16, 32, 48), "block"),
        ("tile_size_x", (1, 2, 3, 4), "work"),
        ("num_warps", (2, 4, 8), "warps"),
        ("num_stages", (1, 2, 3), "stages"),
        ("GROUP_SIZE_M", (1, 4, 8), "group"),
        ("swizzle", (1, 2), "group"),
        ("loop_unroll_factor_channel", (0, 1, 2), "unroll"),
        ("VEC", (1, 2, 4), "vector"),
        ("tile_stride_x", (0, 1), "order"),
        ("read_only", (0, 1), "layout"),
        ("use_shmem", (0, 1), "layout"),
        ("EVEN_K", (False, True), "layout"),
        ("mystery_flag", (0, 1), "layout"),
        ("filter_height", (15,), "other"),
    ],
)
def test_inference_rules(name: str, values: tuple[object, ...], group: str) -> None:
    assert infer_knob_group(name, values) == group  # type: ignore[arg-type]


def test_declared_groups_override_inference_and_are_validated() -> None:
    space = SearchSpace(knobs={"BLOCK_M": (16, 32), "odd": (1, 2, 3)})
    assert knob_groups(space) == {"block": ("BLOCK_M",), "other": ("odd",)}
    assert knob_groups(space, {"odd": "unroll"})["unroll"] == ("odd",)
    with pytest.raises(ValueError, match="unknown knob group"):
        knob_groups(space, {"odd": "nonsense"})


def test_strategy_knobs_follow_groups() -> None:
    space = SearchSpace(
        knobs={"BLOCK_M": (16, 32), "num_warps": (2, 4), "num_stages": (1, 2), "VEC": (1, 2)}
    )
    groups = knob_groups(space)
    assert strategy_knobs(strategy_by_name("pipeline"), groups) == ("num_stages", "num_warps")
    assert strategy_knobs(strategy_by_name("tiling"), groups) == ("BLOCK_M",)
    assert set(strategy_knobs(CONFIG, groups)) == set(space.knobs)


def test_unknown_strategy_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="valid strategies: tiling"):
        strategy_by_name("magic")
