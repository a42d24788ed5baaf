"""bench/masking_replay.py's replay, on a toy recorded space (the GPU tables are bench data)."""

from __future__ import annotations

import importlib.util
import itertools
import math
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "masking_replay", ROOT / "bench" / "masking_replay.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["masking_replay"] = module
    spec.loader.exec_module(module)
    return module


bench = _bench()
KNOBS = {
    "BLOCK_SIZE": (256, 512, 1024, 2048, 4096, 8192),
    "num_warps": (2, 4, 8, 16),
    "num_stages": (1, 2, 3, 4),
}


def _table(metrics: bool) -> object:
    times, profiles = {}, {}
    for block, warps, stages in itertools.product(*KNOBS.values()):
        knobs = {"BLOCK_SIZE": block, "num_warps": warps, "num_stages": stages}
        b, w = math.log2(block), math.log2(warps)
        times[bench._key(knobs)] = 1e-4 * (
            1 + 0.1 * (b - 11) ** 2 + 0.2 * (w - 3) ** 2 + 0.02 * stages
        )
        # Saturated L2 everywhere (tiling's target), an idle SM (pipeline's).
        profiles[bench._key(knobs)] = {"sol_l2": 0.9, "sol_dram": 0.5, "sol_sm": 0.1}
    return bench.Table(
        kernel="toy",
        knobs=KNOBS,
        baseline={"BLOCK_SIZE": 256, "num_warps": 2, "num_stages": 1},
        times=times,
        metrics=profiles if metrics else {},
    )


def test_evaluations_to_target() -> None:
    assert bench.evaluations_to([5.0, 3.0, 1.0], 3.0) == 2
    assert bench.evaluations_to([5.0, 4.0], 3.0) is None


def test_without_profiles_both_arms_search_identically() -> None:
    table = _table(metrics=False)
    for seed in range(2):
        masked = bench.replay_one(table, bench.ARMS["masked"], seed, 30)
        unmasked = bench.replay_one(table, bench.ARMS["unmasked"], seed, 30)
        assert masked == unmasked
        assert masked == sorted(masked, reverse=True)  # best so far never gets worse


def test_masks_change_the_search_when_profiles_saturate_a_resource() -> None:
    table = _table(metrics=True)
    masked = [bench.replay_one(table, bench.ARMS["masked"], s, 30) for s in range(4)]
    unmasked = [bench.replay_one(table, bench.ARMS["unmasked"], s, 30) for s in range(4)]
    assert masked != unmasked
    assert masked[0] == bench.replay_one(table, bench.ARMS["masked"], 0, 30)  # deterministic
    rows = bench.replay([table], seeds=3, budget=30)
    assert [r["arm"] for r in rows] == ["masked", "unmasked"]
    for r in rows:
        assert r["configs"] == 96 and r["profiled_configs"] == 96
        assert 0 < r["mean_fraction_at_budget"] <= 1.0
