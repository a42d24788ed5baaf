"""The acceptance rule: bootstrap intervals, decisions, and the A/A replay on recorded noise."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tuned.acceptance import (
    AcceptanceSettings,
    Interval,
    comparable,
    decide,
    speedup_interval,
    speedup_point,
)

ROOT = Path(__file__).resolve().parents[2]
BENCHDATA = ROOT.parent / "shared" / "benchdata"


def _noisy(center: float, n: int, rng: np.random.Generator) -> list[float]:
    return (center * (1 + 0.01 * rng.standard_normal(n))).tolist()


def test_interval_brackets_a_known_speedup() -> None:
    rng = np.random.default_rng(0)
    cand = {"a": _noisy(1.0, 50, rng), "b": _noisy(2.0, 50, rng)}
    inc = {"a": _noisy(1.5, 50, rng), "b": _noisy(3.0, 50, rng)}
    iv = speedup_interval(cand, inc, rng)
    assert iv.low < 1.5 < iv.high
    assert iv.speedup == pytest.approx(1.5, rel=0.01)
    assert iv.high - iv.low < 0.05


def test_the_point_estimate_alone_is_the_interval_s_statistic() -> None:
    rng = np.random.default_rng(2)
    cand = {"a": _noisy(1.0, 40, rng), "b": _noisy(2.0, 40, rng), "only-mine": [9.0]}
    inc = {"a": _noisy(1.2, 40, rng), "b": _noisy(2.6, 40, rng)}
    point = speedup_point(cand, inc)
    assert point == speedup_interval(cand, inc, rng).speedup
    assert point == pytest.approx((1.2 * 1.3) ** 0.5, rel=0.01)  # geometric mean of ratios
    with pytest.raises(ValueError, match="no timed case in common"):
        speedup_point({"a": [1.0]}, {"b": [1.0]})


def test_a_zero_median_is_named_not_a_math_domain_error() -> None:
    # Stored on the H100 by a judge whose fixed cost was stale: an incumbent's short calls at
    # zero seconds. The campaign and the referee ended in "math domain error".
    cand = {"a": [2.0, 2.1, 1.9], "b": [1.0, 1.0, 1.0]}
    zero = {"a": [3.0, 3.0, 3.0], "b": [3.5e-5, 0.0, 0.0]}
    assert not comparable(cand, zero) and comparable(cand, {"a": [3.0]})
    with pytest.raises(ValueError, match=r"no positive median time on one side: b$"):
        speedup_point(cand, zero)
    with pytest.raises(ValueError, match=r": b$"):
        speedup_interval(cand, zero, np.random.default_rng(0))


def test_samples_of_zero_on_both_sides_never_make_an_undefined_interval_that_passes() -> None:
    # Stored on the H100 (Liger's cross entropy, forward and backward, with spares making
    # case data on the GPU): 3 of 10 incumbent samples and 1 of 10 candidate samples at zero.
    # Resamples with a zero median on both sides made NaN bounds, which no comparison with
    # the bar rejects: the rule then asked for a re-measurement of a 1.1x "speedup" that the
    # samples do not support.
    cand = {"a": [0.0] * 5 + [1.0] * 6}
    inc = {"a": [0.0] * 5 + [1.1] * 6}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no division by zero on the way
        iv = speedup_interval(cand, inc, np.random.default_rng(0))
    assert iv.speedup == pytest.approx(1.1)
    assert all(np.isfinite([iv.speedup, iv.low, iv.high]))
    assert iv.low < 1.0  # resamples without a ratio count against the candidate
    assert decide(iv, AcceptanceSettings()) == "not_significant"
    nan = float("nan")
    assert decide(Interval(1.3, nan, nan), AcceptanceSettings()) == "not_significant"
    good = Interval(1.3, 1.2, 1.4)
    assert decide(good, AcceptanceSettings(), Interval(1.3, nan, 1.4)) == "not_confirmed"


def test_identical_timings_are_not_significant() -> None:
    rng = np.random.default_rng(1)
    same = {"a": _noisy(1.0, 30, rng)}
    other = {"a": _noisy(1.0, 30, rng)}
    assert decide(speedup_interval(same, other, rng), AcceptanceSettings()) == "not_significant"


def test_decisions() -> None:
    s = AcceptanceSettings(min_gain=0.02)
    assert decide(Interval(1.05, 1.01, 1.09), s) == "not_significant"
    assert decide(Interval(1.30, 1.20, 1.40), s) == "remeasure"
    assert decide(Interval(1.30, 1.20, 1.40), s, Interval(1.25, 1.15, 1.35)) == "accepted"
    assert decide(Interval(1.30, 1.20, 1.40), s, Interval(1.01, 0.95, 1.07)) == "not_confirmed"
    assert decide(Interval(15.0, 12.0, 18.0), s) == "held"
    # A point estimate below the bar is not significant whatever the bootstrap says (the
    # campaign skips the bootstrap then), and a re-measurement's is not confirmed.
    assert decide(Interval(1.015, 1.025, 1.03), s) == "not_significant"
    assert decide(Interval(1.30, 1.20, 1.40), s, Interval(1.015, 1.025, 1.03)) == "not_confirmed"
    no_remeasure = AcceptanceSettings(remeasure=False)
    assert decide(Interval(1.30, 1.20, 1.40), no_remeasure) == "accepted"


def test_aa_replay_on_recorded_noise_accepts_almost_no_false_improvement() -> None:
    if not BENCHDATA.is_dir():
        pytest.skip(f"recorded spaces not found at {BENCHDATA}")
    from bench import aa_replay as aa
    from bench.harness.spaces import recorded_runs

    runs = recorded_runs(BENCHDATA / "convolution_A100.json.gz", at_least=8)
    rng = np.random.default_rng(0)
    settings = AcceptanceSettings()
    assert aa.accept_rate(runs, 300, 0.0, rng, settings) < 0.01
    assert aa.accept_rate(runs, 60, 0.10, rng, settings) > 0.9  # and real gains get through


def _aa_smoke(tmp_path: Path, *args: str) -> tuple[Any, dict[str, Any]]:
    """bench/aa_gpu.py --smoke on vector_add with ``args``: the process and its JSON's one
    result."""
    import json
    import os
    import subprocess
    import sys

    out = tmp_path / "aa.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "aa_gpu.py"),
            *("--smoke", "--kernels", "vector_add", *args, "--out", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (result,) = json.loads(out.read_text())["results"]
    return proc, result


def test_the_gpu_aa_benchmark_runs_end_to_end_in_the_interpreter(tmp_path: Path) -> None:
    """bench/aa_gpu.py's --smoke mode goes through the same worker timing path and acceptance
    rule as on the GPU (interpreter timings, figures meaningless): the script must not rot."""
    proc, result = _aa_smoke(tmp_path, "--comparisons", "2")
    assert "false-improvement rate" in proc.stdout
    assert result["kernel"] == "vector_add" and len(result["comparisons"]) == 2
    assert all(
        c["status"] in ("not_significant", "remeasure", "accepted", "not_confirmed", "held")
        or c["status"].startswith("not_confirmed")
        for c in result["comparisons"]
    )
    assert result["within_cv_median"] > 0  # real samples were taken
    for c in result["comparisons"]:  # and each comparison keeps them, per case and side
        assert sorted(c["samples"]) == result["timed_cases"]
        assert all(len(s["copy"]) >= 2 and len(s["original"]) >= 2 for s in c["samples"].values())
        assert all(len(s["reps"]) == 2 and min(s["reps"]) >= 1 for s in c["samples"].values())


def test_the_gpu_aa_benchmark_compares_idle_and_busy_at_a_launch_bound_shape(
    tmp_path: Path,
) -> None:
    """``--small --busy N`` (issue 20's A/A on short kernels while the compile pool is busy):
    the kernel timed at its smallest shape of >= 4096 elements, once idle and once beside N
    CPU-spinning processes, each condition's comparisons, false accepts and median reported."""
    proc, result = _aa_smoke(tmp_path, "--comparisons", "1", "--small", "--busy", "1")
    assert [c["busy"] for c in result["comparisons"]] == [0, 1]
    conditions = result["conditions"]
    assert sorted(conditions) == ["0", "1"]
    for condition in conditions.values():
        assert condition["comparisons"] == 1
        assert sorted(condition["median_s"]) == result["timed_cases"]
        assert all(t > 0 for t in condition["median_s"].values())
    assert "| busy / idle |" in proc.stdout


def test_the_small_aa_shape_is_the_smallest_of_at_least_4096_elements() -> None:
    from bench.aa_gpu import small_shapes
    from tuned.registry import scan_registry

    specs = {s.name: s for s in scan_registry(ROOT / "examples" / "registry").entries}
    timed = {name: small_shapes(specs[name]).perf_shapes for name in ("vector_add", "softmax")}
    assert [s.label() for s in timed["vector_add"]] == ["N=4096"]  # not N=7, not 16M
    assert [s.label() for s in timed["softmax"]] == ["M=3xN=5001"]  # 15003 elements
    assert specs["vector_add"].perf_shapes != timed["vector_add"]  # the entry's own: large
