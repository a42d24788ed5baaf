"""examples/liger: Liger-Kernel's ops registered unchanged, checked for real in the interpreter.

Liger 0.8.5's kernels with scalar float parameters fail in Triton's interpreter; the ones that
run (softmax, sparsemax, cross entropy, JSD, RoPE) are evaluated here at the entries' CPU-size
shape (``interpreter_max_size``), forward and forward+backward. All of them are for the GPU
(bench/liger_bench.py).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import KernelSpec, Tolerance, load_entry, scan_registry

pytest.importorskip("liger_kernel", reason="liger-kernel is in the dev extra")

LIGER = Path(__file__).resolve().parents[2] / "examples" / "liger"
OPS = [
    "rms-norm",
    "layer-norm",
    "fused-add-rms-norm",
    "softmax",
    "sparsemax",
    "dyt",
    "swiglu",
    "geglu",
    "cross-entropy",
    "kl-div",
    "jsd",
    "rope",
    "group-norm",
]
RUNS_IN_INTERPRETER = ("softmax", "sparsemax", "cross-entropy", "jsd", "rope")
CPU_CAP = 1024  # elements: only the entries' CPU-size shapes (and derived ones) run here


def test_every_op_is_registered_unchanged_forward_and_backward() -> None:
    scan = scan_registry(LIGER)
    assert not scan.problems, scan.problems
    names = {spec.name for spec in scan.entries}
    for op in OPS:
        assert {f"liger-{op}", f"liger-{op}-fwd-bwd"} <= names
    for spec in scan.entries:
        # Liger's own autograd Function, imported from the installed package as it ships.
        assert spec.launcher.endswith("Function.apply"), spec.launcher
        head = spec.launcher.split(".")[0]
        entry_source = spec.entry_source or spec.module_source
        assert "from liger_kernel.ops." in entry_source and f"import {head}\n" in entry_source
        if spec.knobs:  # tuned: a copy of the installed module that defines it (its source)
            assert spec.installed_module.startswith("liger_kernel.ops.")
            assert f"class {head}(" in spec.module_source
        else:  # nothing to inject (JSD launches through Liger's dispatcher): run as installed
            assert not spec.installed_module and not spec.entry_source
        assert spec.reference is None  # Liger's own outputs at its shipped settings
        assert bool(spec.backward) == spec.name.endswith("-fwd-bwd")
        assert all(s.size() <= CPU_CAP for s in spec.shapes if not s.perf) or any(
            s.size() <= CPU_CAP for s in spec.shapes
        ), f"{spec.name} has no CPU-size shape"
        sizes = [s.dims for s in spec.perf_shapes]
        assert sizes and all(max(d.values()) >= 2048 for d in sizes), spec.name
    with_space = [spec.name for spec in scan.entries if spec.knobs]
    assert len(with_space) >= 0.9 * len(scan.entries), with_space


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerClient]:
    settings = EvaluationSettings(
        interpreter=True,
        interpreter_max_size=CPU_CAP,
        compile_timeout_s=60.0,
        correctness_timeout_s=120.0,
        benchmark_timeout_s=60.0,
    )
    with WorkerClient(workdir=tmp_path_factory.mktemp("worker"), settings=settings) as c:
        yield c


def _original(spec: KernelSpec) -> Candidate:
    return Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=spec.module_source,
        knobs=dict(spec.baseline_knobs),
        provenance=Provenance.ORIGINAL,
    )


@pytest.mark.slow
@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "fwd-bwd"])
@pytest.mark.parametrize("op", RUNS_IN_INTERPRETER)
def test_the_shipped_kernels_evaluate_in_a_worker(
    client: WorkerClient, op: str, backward: bool
) -> None:
    spec = load_entry(LIGER / (op + ("-fwd-bwd" if backward else "")))
    # Triton's interpreter emulates bfloat16 with stray NaNs (Liger's GPU dtype): float32 here.
    tolerance = {"float32": Tolerance(atol=1e-4, rtol=1e-4)}
    spec = dataclasses.replace(spec, dtypes=("float32",), tolerance=tolerance)
    result = client.evaluate(spec, _original(spec), lenient_derived=True)
    assert result.outcome is Outcome.OK, result.reason
    assert result.checked_cases and result.checked_cases >= 2


def _entry_module(op: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"liger_entry_{op}", LIGER / op / "entry.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("op", RUNS_IN_INTERPRETER)
def test_eager_matches_liger(op: str) -> None:
    """The eager versions the benchmark times compute what Liger computes (so its 'PyTorch
    eager' column times the same math), forward and input gradients."""
    import torch

    from tuned.evaluation.invoke import CallFields, EntryCall, call, resolve

    spec = load_entry(LIGER / f"{op}-fwd-bwd")
    module = _entry_module(op)
    small = min(spec.shapes, key=lambda s: s.size())
    inputs = module.make_inputs(dict(small.dims), torch.float32, "cpu", 0)
    fields = CallFields(outputs=spec.outputs, backward=spec.backward)
    liger = EntryCall(target=resolve(module, spec.launcher), fields=fields, role="launcher")
    eager = EntryCall(
        target=module.eager, fields=fields, role="reference", names=liger.parameters()
    )
    theirs = [t for t in call(liger, inputs, {}, dims=small.dims) if t is not None]
    ours = call(eager, inputs, {}, dims=small.dims)
    assert len(theirs) == len(ours)
    for a, b in zip(theirs, ours, strict=True):
        torch.testing.assert_close(a.float().reshape(b.shape), b.float(), atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_the_liger_benchmark_runs_in_smoke_mode(tmp_path: Path) -> None:
    """bench/liger_bench.py --smoke: the GPU benchmark's whole path (scan, tune, fresh-process
    re-measurement, table, totals) in the interpreter, so the script cannot rot."""
    import os
    import subprocess
    import sys

    root = LIGER.parents[1]
    proc = subprocess.run(
        [sys.executable, str(root / "bench" / "liger_bench.py"), "--smoke", "--budget", "1"],
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "PYTHONPATH": str(root), "TMPDIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "interpreter times (CPU), not GPU results" in out
    rows = [line for line in out.splitlines() if line.startswith("| liger-")]
    assert {row.split("|")[1].strip() for row in rows} == {"liger-softmax", "liger-rope-fwd-bwd"}
    for row in rows:  # every measured row: both times, a speedup, both ceilings, eager
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[2] == "yes" and cells[6].endswith("x") and cells[10].endswith("s"), row
        assert cells[7].endswith("%") and cells[9].count("%") == 2, row  # the same-size copy
    assert "registered unchanged: 26/26 (100%)" in out
    assert "geomean tuned speedup over shipped (2 entry x shape)" in out
    assert "budget: 1 candidates per entry x 2 entries tuned" in out


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("entry", sorted(p.name for p in LIGER.iterdir() if p.is_dir()))
def test_every_entry_evaluates_on_the_gpu(entry: str, tmp_path: Path) -> None:
    """On a GPU, every entry's shipped kernels pass their own correctness checks (bf16, every
    declared shape, two seeds, gradients for fwd+bwd) and are timed."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA")
    spec = load_entry(LIGER / entry)
    settings = EvaluationSettings(
        interpreter=False,
        compile_timeout_s=180.0,
        correctness_timeout_s=300.0,
        benchmark_timeout_s=180.0,
    )
    with WorkerClient(workdir=tmp_path, settings=settings) as c:
        result = c.evaluate(spec, _original(spec), lenient_derived=True)
    assert result.outcome is Outcome.OK, result.reason
    assert result.timing_kind == "gpu" and len(result.timings) == len(spec.perf_shapes)
