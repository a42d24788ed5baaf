"""Bottleneck classes and roofline fractions, on the captured profiles and by construction."""

from __future__ import annotations

import dataclasses

import pytest

from profilers.classify import (
    Bottleneck,
    ClassifySettings,
    classify,
    evaluate_expression,
    roofline_point,
)
from tests.profilers.test_parser import profile_of
from tuned.daemon.config import default_registry
from tuned.registry import load_entry


@pytest.mark.parametrize(
    "kernel", ["vector_add", "swiglu", "matmul", "rms_norm", "layer_norm", "softmax"]
)
def test_the_example_kernels_at_their_baselines_are_memory_bound_on_the_h100(kernel: str) -> None:
    # Recorded: the busiest memory unit (DRAM for the streaming kernels, L2 for the matmul
    # baseline's 64x64 tiles) is at 58-88 % of peak, the SM at 8-71 %.
    assert classify(profile_of(kernel)) is Bottleneck.MEMORY


def test_classes_by_construction() -> None:
    base = profile_of("vector_add")
    compute = dataclasses.replace(
        base, sol_sm=0.9, sol_memory=0.3, sol_dram=0.3, sol_l2=0.3, sol_l1=0.3
    )
    assert classify(compute) is Bottleneck.COMPUTE
    idle = dataclasses.replace(
        base, sol_sm=0.2, sol_memory=0.25, sol_dram=0.25, sol_l2=0.2, sol_l1=0.1
    )
    assert classify(idle) is Bottleneck.LATENCY
    assert classify(idle, ClassifySettings(busy=0.2)) is Bottleneck.MEMORY
    unknown = dataclasses.replace(
        base, sol_sm=None, sol_memory=None, sol_dram=None, sol_l2=None, sol_l1=None
    )
    assert classify(unknown) is None
    with pytest.raises(ValueError):
        ClassifySettings(busy=0)


def test_roofline_expressions_evaluate_without_executing_anything() -> None:
    assert evaluate_expression("2*M*N*elem + 2*N*elem", {"M": 4, "N": 8, "elem": 2}) == 160
    # Python's own precedence: (4 + 4) // 2 - (-(1 ** 2)) == 5
    assert evaluate_expression("(M*K + K*N)//2 - -1 ** 2", {"M": 2, "N": 2, "K": 2}) == 5
    for bad in ("__import__('os')", "M.real", "Q*2", "M if N else K", "M +"):
        with pytest.raises(ValueError):
            evaluate_expression(bad, {"M": 1, "N": 1, "K": 1})


def test_the_vector_add_capture_on_the_roofline() -> None:
    spec = load_entry(default_registry() / "vector_add")
    assert spec.roofline is not None
    shape = spec.perf_shapes[0]  # N = 2**24, float16: the captured launch
    profile = profile_of("vector_add")
    assert profile.duration_s is not None
    point = roofline_point(
        bytes_expr=spec.roofline.bytes,
        flops_expr=spec.roofline.flops,
        dims=shape.dims,
        dtype="float16",
        time_s=profile.duration_s,
        peak_bytes_per_s=3.35e12,  # the H100 SXM's HBM3 datasheet figure
        peak_flops_per_s=989e12,  # dense fp16 tensor cores
    )
    assert point is not None and point.bound is Bottleneck.MEMORY
    moved = 3 * shape.dims["N"] * 2
    assert point.bandwidth_fraction == pytest.approx(moved / profile.duration_s / 3.35e12)
    assert point.fraction == point.bandwidth_fraction
    assert 0.8 < point.fraction < 1.05  # a streaming kernel near the HBM roof


def test_roofline_needs_work_and_a_time() -> None:
    args = dict(dims={"N": 4}, dtype="float32", peak_bytes_per_s=1.0, peak_flops_per_s=1.0)
    assert roofline_point(bytes_expr=None, flops_expr=None, time_s=1.0, **args) is None  # type: ignore[arg-type]
    flops_only = roofline_point(bytes_expr=None, flops_expr="N", time_s=2.0, **args)  # type: ignore[arg-type]
    assert flops_only is not None and flops_only.fraction == 2.0
    assert flops_only.bound is Bottleneck.COMPUTE
    with pytest.raises(ValueError):
        roofline_point(bytes_expr="N", flops_expr=None, time_s=0.0, **args)  # type: ignore[arg-type]
