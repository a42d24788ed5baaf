"""Per-shape dispatch: bests per timed shape from stored per-case timings, the shape model
learnt from ``make_inputs``, the nearest-bucket rule, and routing of real calls."""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

import pytest
import torch

from tests.runtime.rows import EXAMPLES, Rows, example
from tuned.outcomes import Provenance
from tuned.runtime import load
from tuned.runtime.plan import plan_for
from tuned.runtime.shapes import shape_bests
from tuned.runtime.standalone import (
    Bucket,
    ShapeModel,
    nearest_bucket,
    parse_label,
    runtime_device,
)
from tuned.store.base import ComparisonRow
from tuned.store.sqlite import CaseTimingRow

DEVICE = "cuda" if runtime_device() == "cuda" else "cpu"
SMALL, LARGE = "N=1024/float32", "N=1048576/float32"
A_KNOBS = {"BLOCK_SIZE": 256, "num_warps": 4}
B_KNOBS = {"BLOCK_SIZE": 4096, "num_warps": 8}


def per_shape_store(state: Path) -> tuple[str, str]:
    """vector_add where A is the overall best, B is clearly faster on the large shape, and a
    held candidate (suspiciously fast) is fastest on the small one. Returns (A, B) ids."""
    rows = Rows.open(state, example("vector_add"))
    base = rows.evaluate(rows.candidate(original=True), {SMALL: 2.0e-3, LARGE: 20e-3})
    a = rows.evaluate(rows.candidate(A_KNOBS), {SMALL: 1.0e-3, LARGE: 12e-3})
    b = rows.evaluate(rows.candidate(B_KNOBS), {SMALL: 1.8e-3, LARGE: 8e-3})
    held = rows.evaluate(rows.candidate({"BLOCK_SIZE": 128, "num_warps": 1}), {SMALL: 1e-5})
    rows.accept(a, base)
    rows.compare(b, base, times=2)  # B confirmed against the original on both shapes
    rows.store.record_acceptance(
        held, rows.fingerprint, incumbent_id=a.id, status="held", first={}, second=None
    )
    rows.store.close()
    return a.id, b.id


def _xy(n: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    return (
        torch.randn(n, generator=g).to(dtype).to(DEVICE),
        torch.randn(n, generator=g).to(dtype).to(DEVICE),
    )


def test_bests_differ_by_shape_and_each_call_runs_its_buckets_variant(tmp_path: Path) -> None:
    a, b = per_shape_store(tmp_path)
    kernel = load("vector_add", store=tmp_path)
    assert kernel.status == "tuned"
    assert [v.candidate_id for v in kernel.variants] == [a, b]
    assert {bk.label: kernel.variants[bk.variant].candidate_id for bk in kernel.buckets} == {
        SMALL: a,
        LARGE: b,
    }
    # Nearest in log2(N): 30000 is nearer 1024 (2^10) than 2^20, 40000 nearer 2^20.
    for n, label, want in [
        (1000, SMALL, a),
        (30000, SMALL, a),
        (40000, LARGE, b),
        (1 << 21, LARGE, b),
    ]:
        x, y = _xy(n)
        bucket = kernel.bucket_for((x, y))
        assert bucket is not None and bucket.label == label, n
        assert kernel.route((x, y)).candidate_id == want
        if n <= 40000:  # keep the interpreter quick; the large routes are checked above
            assert torch.allclose(kernel(x, y), x + y)
    # A dtype without timed cases: the same rule over every case.
    x16, y16 = _xy(1000, torch.float16)
    assert kernel.route((x16, y16)).candidate_id == a
    # The caller may say how to read the shape instead of the learnt model.
    explicit = load("vector_add", store=tmp_path, shape_of=lambda x, y: {"N": x.numel()})
    assert explicit.route(_xy(40000)).candidate_id == b
    assert explicit.route(_xy(1000)).candidate_id == a


def test_routing_from_many_threads_is_consistent(tmp_path: Path) -> None:
    a, b = per_shape_store(tmp_path)
    kernel = load("vector_add", store=tmp_path)
    seen: list[tuple[int, str]] = []
    inputs = {n: _xy(n) for n in (1000, 5000, 300000, 900000)}

    def worker() -> None:
        for _ in range(50):
            for n, xy in inputs.items():
                seen.append((n, kernel.route(xy).candidate_id))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(seen) == 8 * 50 * 4
    assert set(seen) == {(1000, a), (5000, a), (300000, b), (900000, b)}


def test_status_plan_shows_the_shapes_whose_best_differs(tmp_path: Path) -> None:
    per_shape_store(tmp_path)
    from tuned.runtime import current_fingerprint
    from tuned.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "ktuned.sqlite")
    plan = plan_for(store, "vector_add", current_fingerprint())
    store.close()
    assert plan.differs_by_shape
    assert LARGE in plan.shape_summary() and SMALL not in plan.shape_summary()
    large = plan.shapes[[s.label for s in plan.shapes].index(LARGE)]
    assert large.speedup == pytest.approx(20 / 8)  # the side-by-side interval's
    assert large.vs_baseline is not None and large.vs_baseline.low > 2.4


def _row(cid: str, medians: dict[str, float], spread: float = 0.01) -> CaseTimingRow:
    return CaseTimingRow(
        candidate_id=cid,
        knobs={},
        source_hash="",
        provenance=Provenance.ORIGINAL if cid == "base" else Provenance.PARAMETRIC,
        timings=medians,
        samples={
            k: [v * (1 + spread * ((i % 5) - 2)) for i in range(15)] for k, v in medians.items()
        },
        timing_kind="gpu",
        statuses=frozenset(),
    )


def _side_by_side(cid: str, mine: float, original: float, seq: int) -> ComparisonRow:
    label = "N=1/float32"
    spread = [1 + 0.01 * ((i % 5) - 2) for i in range(15)]
    return ComparisonRow(
        candidate_id=cid,
        incumbent_id="base",
        samples={label: [mine * f for f in spread]},
        incumbent_samples={label: [original * f for f in spread]},
        source="evaluation",
        seq=seq,
    )


def test_a_shape_runs_only_what_beat_the_original_side_by_side_there() -> None:
    rows = [
        _row("base", {"N=1/float32": 1.0}),
        _row("best", {"N=1/float32": 0.50}),
        _row("fast", {"N=1/float32": 0.30}),  # fastest by its first median, never compared
    ]
    # The incumbent, unconfirmed there: the original runs.
    (only,) = shape_bests(rows, "best")
    assert only.candidate_id == "base" and only.speedup == 1.0
    # One side-by-side measurement is not enough: the rule asks for a second.
    once = [_side_by_side("best", 0.5, 1.0, 1)]
    assert shape_bests(rows, "best", comparisons=once)[0].candidate_id == "base"
    twice = [*once, _side_by_side("best", 0.5, 1.0, 2)]
    (only,) = shape_bests(rows, "best", comparisons=twice)
    assert only.candidate_id == "best" and only.speedup == pytest.approx(2.0)
    assert only.vs_baseline is not None and only.vs_baseline.low > 1.9
    # A later measurement that refutes the claim (slower than the original) withdraws it.
    refuted = [*twice, _side_by_side("best", 1.25, 1.0, 3)]
    assert shape_bests(rows, "best", comparisons=refuted)[0].candidate_id == "base"
    # Another candidate confirmed clearly faster on the case replaces the incumbent there;
    # one within 5 % of it does not.
    clear = [*twice, _side_by_side("fast", 0.3, 1.0, 4), _side_by_side("fast", 0.3, 1.0, 5)]
    assert shape_bests(rows, "best", comparisons=clear)[0].candidate_id == "fast"
    close = [*twice, _side_by_side("fast", 0.49, 1.0, 4), _side_by_side("fast", 0.49, 1.0, 5)]
    assert shape_bests(rows, "best", comparisons=close)[0].candidate_id == "best"


def test_a_stored_comparison_with_zero_medians_is_left_out_not_fatal() -> None:
    rows = [_row("base", {"N=1/float32": 1.0}), _row("best", {"N=1/float32": 0.50})]
    twice = [_side_by_side("best", 0.5, 1.0, 1), _side_by_side("best", 0.5, 1.0, 2)]
    zero = _side_by_side("best", 0.5, 0.0, 3)  # an incumbent timed at zero seconds
    (only,) = shape_bests(rows, "best", comparisons=[*twice, zero])
    assert only.candidate_id == "best" and only.speedup == pytest.approx(2.0)


def _make_inputs(name: str):  # type: ignore[no-untyped-def]
    path = EXAMPLES / name / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"probe_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_inputs


def test_shape_model_is_learnt_from_make_inputs() -> None:
    matmul = ShapeModel.probe(_make_inputs("matmul"), ["M", "N", "K"], "float16")
    assert matmul is not None
    assert {(d, i, axis, c) for d, i, axis, c in matmul.axes} == {
        ("M", 0, 0, 1),
        ("N", 1, 1, 1),
        ("K", 0, 1, 1),
    }
    a, b = torch.empty(64, 32, dtype=torch.float16), torch.empty(32, 128, dtype=torch.float16)
    assert matmul.dims(matmul.key((a, b))) == ({"M": 64, "N": 128, "K": 32}, "float16")
    swiglu = ShapeModel.probe(_make_inputs("swiglu"), ["M", "N"], "float32")
    assert swiglu is not None and ("N", 0, 1, 2) in swiglu.axes  # x is (M, 2N)

    def refuses(shape, dtype, device, seed):  # type: ignore[no-untyped-def]
        raise ValueError("only large shapes")

    assert ShapeModel.probe(refuses, ["N"], "float32") is None


def test_nearest_bucket_rule() -> None:
    assert parse_label("M=4096xN=512xmax_len=7/float16") == (
        {"M": 4096, "N": 512, "max_len": 7},
        "float16",
    )
    buckets = [
        Bucket("M=16xN=16/float16", {"M": 16, "N": 16}, "float16", 0),
        Bucket("M=4096xN=4096/float16", {"M": 4096, "N": 4096}, "float16", 1),
        Bucket("M=64xN=64/float32", {"M": 64, "N": 64}, "float32", 2),
    ]
    assert nearest_bucket(buckets, {"M": 20, "N": 10}, "float16").variant == 0
    assert nearest_bucket(buckets, {"M": 2000, "N": 9000}, "float16").variant == 1
    assert nearest_bucket(buckets, {"M": 4096, "N": 4096}, "float32").variant == 2  # dtype first
    assert nearest_bucket(buckets, {"M": 60, "N": 60}, "bfloat16").variant == 2  # no bf16: all
    assert nearest_bucket(buckets, {"M": 256, "N": 256}, "float16").variant == 1  # tie: larger
