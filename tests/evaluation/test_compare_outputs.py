"""The output comparison in chunks: the same verdict and message as a whole comparison,
in memory bounded by the chunk, whatever the output's size."""

from __future__ import annotations

import pytest
import torch

from tuned.evaluation import checks
from tuned.evaluation.checks import CaseFailure, compare_outputs


def _verdict(out: torch.Tensor, ref: torch.Tensor) -> tuple[str, str] | None:
    try:
        compare_outputs(out, ref, atol=1e-3, rtol=1e-3)
    except CaseFailure as failure:
        return failure.outcome, failure.reason
    return None


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 24])
def test_chunked_comparison_finds_what_a_whole_one_finds(
    monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(checks, "COMPARE_CHUNK", chunk)
    ref = torch.arange(6 * 5 * 4, dtype=torch.float32).reshape(6, 5, 4)
    assert _verdict(ref.clone(), ref) is None
    out = ref.clone()
    out[2, 3, 1] += 5.0  # the first wrong element, flat index 57
    out[5, 4, 3] -= 9.0  # the largest error, the last element
    out[4, 0, 0] = float("inf")
    verdict = _verdict(out, ref)
    assert verdict == (
        "incorrect",
        "output 0: 3/120 elements outside atol=0.001 rtol=0.001, max abs error inf, "
        "first at (2, 3, 1)",
    )
    out[4, 0, 0] = ref[4, 0, 0]
    assert _verdict(out, ref) == (
        "incorrect",
        "output 0: 2/120 elements outside atol=0.001 rtol=0.001, max abs error 9, "
        "first at (2, 3, 1)",
    )
    out[3, 1, 2] = float("nan")  # NaN wins over wrong values, wherever it is
    out[5, 0, 0] = float("nan")
    assert _verdict(out, ref) == ("nan", "output 0: 2 NaN elements, first at (3, 1, 2)")


def test_a_zero_dimensional_output_and_an_empty_one() -> None:
    assert _verdict(torch.tensor(1.0), torch.tensor(1.0)) is None
    assert _verdict(torch.tensor(2.0), torch.tensor(1.0)) == (
        "incorrect",
        "output 0: 1/1 elements outside atol=0.001 rtol=0.001, max abs error 1, first at ()",
    )
    assert _verdict(torch.empty(0, 3), torch.empty(0, 3)) is None


def test_the_comparison_holds_no_more_than_its_chunk_in_its_working_dtype(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every widened temporary is one chunk long, never the whole output; half precision is
    compared in float32 (exact for it, half the traffic of float64), float64 in float64."""
    monkeypatch.setattr(checks, "COMPARE_CHUNK", 1000)
    made: list[tuple[int, torch.dtype]] = []
    real = checks._work

    def work(t: torch.Tensor) -> torch.Tensor:
        out = real(t)
        made.append((out.numel(), out.dtype))
        return out

    monkeypatch.setattr(checks, "_work", work)
    monkeypatch.setattr(checks._chunks, "__defaults__", (work,))
    ref = torch.randn(10_000, dtype=torch.float16)
    assert _verdict(ref.clone(), ref) is None
    assert made and max(n for n, _ in made) == 1000 and sum(n for n, _ in made) == 2 * 10_000
    assert {d for _, d in made} == {torch.float32}
    made.clear()
    wide = torch.randn(3000, dtype=torch.float64)
    assert _verdict(wide.clone(), wide) is None
    assert {d for _, d in made} == {torch.float64}


def test_integers_past_float64s_precision_are_compared_exactly() -> None:
    # In float64, 2**60 and 2**60 + 1 are one number: an int64 output (an index, a hash, a
    # packed code) off by one there passed the comparison.
    ref = torch.tensor([2**60, 5, -(2**62)], dtype=torch.int64)
    out = ref.clone()
    out[0] += 1
    assert _verdict(ref.clone(), ref) is None
    verdict = _verdict(out, ref)
    assert verdict is not None and verdict[0] == "incorrect", verdict
    assert "1/3 elements" in verdict[1] and "first at (0,)" in verdict[1], verdict
    flags = torch.tensor([True, False, True])
    assert _verdict(flags.clone(), flags) is None
    assert _verdict(~flags, flags) is not None  # booleans subtract nowhere: no TypeError
    codes = torch.tensor([0, 255], dtype=torch.uint8)  # no wrap-around in the error's size
    assert "max abs error 255" in _verdict(codes.flip(0), codes)[1]  # type: ignore[index]


def test_the_tolerance_widens_per_output_to_cover_the_references_own_spread() -> None:
    exact = torch.arange(8, dtype=torch.float32)
    grad = torch.full((4, 4), 100.0)
    jitter = grad.clone()
    jitter[1, 2] += 3.0  # e.g. half-precision atomics adding in another order
    assert checks.widened_atol((exact, grad), (exact.clone(), grad.clone()), 1e-4) == 1e-4
    assert checks.widened_atol((exact, grad, 7), (exact.clone(), jitter, 7), 1e-4) == (
        1e-4,
        6.0,
        1e-4,
    )
    # A candidate is then held to that: within it passes, beyond it fails.
    atol = checks.widened_atol((exact, grad), (exact.clone(), jitter), 1e-4)
    near, far = grad.clone(), grad.clone()
    near[0, 0] += 5.0
    far[0, 0] += 7.0
    compare_outputs((exact, near), (exact, grad), atol, 0.0)
    with pytest.raises(CaseFailure, match=r"output 1: 1/16 elements outside atol=6\.0"):
        compare_outputs((exact, far), (exact, grad), atol, 0.0)
    with pytest.raises(CaseFailure, match=r"output 0: 1/8 elements outside atol=0\.0001"):
        compare_outputs((exact + torch.eye(8)[3], grad), (exact, grad), atol, 0.0)


def test_a_small_unreproducible_output_is_sampled_until_its_spread_shows() -> None:
    """Seven elements of uniform noise: twice the largest of seven differences between two
    runs failed one correct rerun in 30 (CI at 4326322). The reference runs again until about
    SPREAD_SAMPLE elements were compared; a reproducible one runs once more, a large noisy one
    once more, and the tolerance covers what further reruns differ by."""
    g = torch.Generator().manual_seed(0)

    def noisy(n: int) -> torch.Tensor:
        return 100.0 + (torch.rand(n, generator=g) - 0.5) * 2e-3

    for n, runs in ((7, checks.SPREAD_RUNS_MAX), (1000, 5), (5000, 1)):
        first, calls = noisy(n), []

        def again(n: int = n, calls: list[int] = calls) -> torch.Tensor:
            calls.append(n)
            return noisy(n)

        atol = checks.sampled_atol(first, again, 1e-4)
        assert len(calls) == runs, n
        assert isinstance(atol, tuple) and 1e-3 < atol[0] <= 4e-3
        if n == 7:  # fresh reruns stay inside (they failed 1 in 30 at one rerun's spread)
            for _ in range(300):
                compare_outputs(noisy(n), first, atol, 0.0)
    exact, calls = torch.arange(7.0), []
    assert checks.sampled_atol(exact, lambda: calls.append(1) or exact.clone(), 1e-4) == 1e-4
    assert calls == [1]


def test_a_reference_that_is_not_reproducible_is_refused() -> None:
    grad = torch.full((4, 4), 100.0)
    for broken in (float("nan"), 30.0):  # NaN in one run only; more than a tenth of its size
        again = grad.clone()
        again[2, 2] = broken if broken != broken else grad[2, 2] + broken
        with pytest.raises(CaseFailure, match="differs between two runs on the same inputs"):
            checks.widened_atol(grad, again, 1e-4)
    both = grad.clone()
    both[0, 0] = float("nan")  # NaN where both runs have it: reproducible
    assert checks.widened_atol(both, both.clone(), 1e-4) == 1e-4


def test_integer_outputs_match_exactly_in_a_floating_case() -> None:
    """A quantization kernel of a float16 entry returns int32 codes or accumulators: the
    float16 rtol of 1e-2 let 1000 pass for 1009."""
    ref = torch.tensor([1000, -7, 3], dtype=torch.int32)
    out = ref.clone()
    out[0] = 1009
    scale = torch.tensor([0.5, 0.25], dtype=torch.float16)
    with pytest.raises(CaseFailure, match="output 0: 1/3 elements"):
        compare_outputs((out, scale), (ref, scale), 1e-2, 1e-2, dtype="float16")
    codes = torch.tensor([0, 255, 17], dtype=torch.uint8)
    compare_outputs((codes, scale), (codes.clone(), scale * 1.001), 1e-2, 1e-2, dtype="float16")


def test_floating_outputs_of_an_integer_case_get_their_own_tolerance() -> None:
    """A dequantization (uint8 in, float32 out) or an int8 matmul's scaled float output:
    the integer case's exact comparison failed a float sum merely taken in another order."""
    ref = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float32)
    close = ref * (1 + 2e-6)
    compare_outputs(close, ref, 0.0, 0.0, dtype="int8")
    with pytest.raises(CaseFailure, match="elements outside"):
        compare_outputs(ref * 1.01, ref, 0.0, 0.0, dtype="int8")
    # a floating case's own (declared) tolerance stays as it is, exact included
    with pytest.raises(CaseFailure):
        compare_outputs(close, ref, 0.0, 0.0, dtype="float32")
    # an integer output of an integer case: still exact
    with pytest.raises(CaseFailure):
        compare_outputs(torch.tensor([2]), torch.tensor([1]), 0.0, 0.0, dtype="uint8")
