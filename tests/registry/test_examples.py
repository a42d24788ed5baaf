"""Every example kernel's original passes correctness: in the interpreter here, on a GPU there.

In the interpreter, shapes above the size cap are skipped (and reported as skipped); on a GPU
every shape and dtype is checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import has_gpu
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.evaluation.shapes import derive_shapes
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import scan_registry

REGISTRY = Path(__file__).resolve().parents[2] / "examples" / "registry"
SCAN = scan_registry(REGISTRY)
REQUIRED = {"vector_add", "softmax", "layer_norm", "rms_norm", "matmul"}


def test_the_example_registry_is_valid_and_complete() -> None:
    assert SCAN.problems == []
    names = {s.name for s in SCAN.entries}
    assert names >= REQUIRED and len(names) >= 6
    for spec in SCAN.entries:
        sizes = sorted(s.size() for s in spec.shapes)
        assert any(s.perf for s in spec.shapes), spec.name
        assert sizes[0] <= 64, f"{spec.name} needs a tiny shape"
        assert any(any(v & (v - 1) for v in s.dims.values()) for s in spec.shapes), (
            f"{spec.name} needs a non-power-of-two shape"
        )
        assert spec.space_size() >= 20, spec.name
    matmul = next(s for s in SCAN.entries if s.name == "matmul")
    assert {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages"} <= set(
        matmul.knobs
    )
    assert matmul.space_size() >= 200


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerClient]:
    settings = EvaluationSettings(interpreter=not has_gpu())
    with WorkerClient(workdir=tmp_path_factory.mktemp("worker"), settings=settings) as c:
        yield c


@pytest.mark.parametrize("spec", SCAN.entries, ids=[s.name for s in SCAN.entries])
def test_example_original_is_correct(client: WorkerClient, spec: object) -> None:
    from tuned.registry import KernelSpec

    assert isinstance(spec, KernelSpec)
    candidate = Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=spec.module_source,
        knobs=dict(spec.baseline_knobs),
        provenance=Provenance.ORIGINAL,
    )
    result = client.evaluate(spec, candidate)
    assert result.outcome is Outcome.OK, result.reason
    checked_shapes = len(spec.shapes) - len(result.skipped_cases) // len(spec.dtypes)
    assert checked_shapes >= 2
    derived = derive_shapes(spec.shapes)  # the original passes on every derived shape too
    assert result.metadata["derived_unusable"] == []
    assert result.checked_cases == (checked_shapes + len(derived)) * len(spec.dtypes) * 2
    compiled = result.metadata["compile"]  # Trial.metrics for clustering (GPU only)
    if has_gpu():
        assert compiled["registers"] > 0 and compiled["num_warps"] >= 1, compiled
        assert "shared_bytes" in compiled and "spills" in compiled
        assert result.skipped_cases == () and result.timing_kind == "gpu"
        assert set(result.timings) == {
            f"{s.label()}/{d}" for s in spec.perf_shapes for d in spec.dtypes
        }
    else:
        assert compiled == {}  # the interpreter compiles nothing


@pytest.mark.gpu
def test_gpu_timer_measures_a_real_kernel() -> None:
    if not has_gpu():
        pytest.skip("needs an NVIDIA GPU with CUDA")
    import torch

    from profilers.timing import gpu_median_seconds

    x = torch.randn(1 << 24, device="cuda")
    small, _ = gpu_median_seconds(lambda: x[: 1 << 20].mul_(1.0))
    large, samples = gpu_median_seconds(lambda: x.mul_(1.0))
    assert len(samples) >= 10
    assert 0 < small < large  # 16x the bytes takes longer


def test_a_candidate_far_slower_than_its_incumbent_is_screened_on_a_gpu(
    client: WorkerClient,
) -> None:
    """The matmul at 256 x 256 x 32 with 4 warps (spills; 35x the best on an H100) against
    128 x 256 x 64 with 8: on a GPU the screening round ends the timing of every timed case
    (far fewer samples than the incumbent timed against itself); the interpreter screens
    nothing."""
    spec = next(s for s in SCAN.entries if s.name == "matmul")

    def at(m: int, n: int, k: int, warps: int) -> Candidate:
        knobs = {"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "num_warps": warps}
        return Candidate(
            kernel=spec.name,
            generation=spec.generation,
            source=spec.module_source,
            knobs={**spec.baseline_knobs, **knobs, "GROUP_M": 8, "num_stages": 3},
            provenance=Provenance.PARAMETRIC,
        )

    incumbent = at(128, 256, 64, 8)
    slow = client.evaluate(spec, at(256, 256, 32, 4), incumbent)
    same = client.evaluate(spec, incumbent, incumbent)
    assert slow.outcome is same.outcome is Outcome.OK, (slow.reason, same.reason)
    if not has_gpu():
        assert slow.metadata["screened"] == same.metadata["screened"] == []
        return
    assert set(slow.metadata["screened"]) == set(slow.timings)
    assert same.metadata["screened"] == []
    for label in slow.timings:
        screened = len(slow.metadata["samples"][label])
        assert screened == len(slow.metadata["incumbent_samples"][label])
        assert screened < len(same.metadata["samples"][label]) / 2
