"""A judge whose CUDA context a fault has made unusable retires after that request.

The judge runs the original as the reference; a fault there is sticky (every later CUDA call
of the process fails with it), and Triton reports it at its next launch as a plain
``RuntimeError: Triton Error [CUDA]: ...``. On the H200 one TritonBench-G original's fault
left its judge in place, and the originals of the next 22 kernels failed there as runtime
errors of their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conftest import has_gpu
from tests.evaluation.test_device_memory import _Channel
from tuned.evaluation import EvaluationSettings, WorkerClient, worker
from tuned.evaluation.runners import RunnerPool
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import KernelSpec, load_entry


def _runtime_error(*_: object) -> tuple[dict[str, Any], bool]:
    reason = "correctness: RuntimeError: Triton Error [CUDA]: misaligned address"
    return {"outcome": "runtime_error", "reason": reason, "phase": "correctness"}, False


def test_a_judge_whose_context_a_fault_left_unusable_retires_after_that_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def sticky() -> None:
        raise RuntimeError("CUDA error: misaligned address\nCUDA kernel errors might be ...")

    monkeypatch.setattr(worker, "evaluate", _runtime_error)
    monkeypatch.setattr(torch.cuda, "synchronize", sticky)
    pool = RunnerPool(Path("/nonexistent"), "cuda")
    channel = _Channel([{"op": "evaluate", "request": 1}, {"op": "evaluate", "request": 2}])
    worker._serve(channel, "cuda", None, pool, None)  # type: ignore[arg-type]
    assert len(channel.sent) == 1  # the second request is left to a worker that works
    answer = channel.sent[0]
    assert answer["fatal"] is True and answer["request"] == 1
    assert answer["result"]["outcome"] == "crash"  # a CUDA fault, as classified elsewhere
    assert "misaligned address" in answer["result"]["reason"]


def test_a_spare_whose_context_a_fault_left_unusable_does_not_say_it_prepared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def sticky() -> None:
        raise RuntimeError("CUDA error: an illegal instruction was encountered")

    prepared = {"type": "prepared", "ok": True, "fatal": False}
    monkeypatch.setattr(worker, "prepare", lambda *_: dict(prepared))
    monkeypatch.setattr(torch.cuda, "synchronize", sticky)
    pool = RunnerPool(Path("/nonexistent"), "cuda")
    channel = _Channel([{"op": "prepare", "kernel": {"name": "k"}}, {"op": "evaluate"}])
    worker._serve(channel, "cuda", None, pool, None)  # type: ignore[arg-type]
    assert len(channel.sent) == 1
    assert channel.sent[0]["ok"] is False and channel.sent[0]["fatal"] is True
    assert "illegal instruction" in channel.sent[0]["reason"]


def test_in_the_interpreter_a_runtime_error_leaves_the_judge_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker, "evaluate", _runtime_error)
    pool = RunnerPool(Path("/nonexistent"), "cpu")
    channel = _Channel([{"op": "evaluate", "request": 1}, {"op": "evaluate", "request": 2}])
    worker._serve(channel, "cpu", None, pool, None)  # type: ignore[arg-type]
    assert [a["fatal"] for a in channel.sent] == [False, False]
    assert channel.sent[0]["result"]["outcome"] == "runtime_error"


_FAULTING = """
import time

import torch
import triton
import triton.language as tl


@triton.jit
def _shifted(x_ptr, out_ptr, n, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    base = (x_ptr.to(tl.int64) + SHIFT).to(tl.pointer_type(tl.float32))
    tl.store(out_ptr + offs, tl.load(base + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def run(x, SHIFT=SHIFT_VALUE, BLOCK=128):
    tmp = torch.empty(x.numel() + 4, device=x.device, dtype=x.dtype)
    out = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), BLOCK),)
    _shifted[grid](x, tmp, x.numel(), SHIFT=SHIFT, BLOCK=BLOCK)
    time.sleep(0.05)  # the fault has happened: Triton's next launch is what reports it
    _scale[grid](tmp, out, x.numel(), BLOCK=BLOCK)
    return out


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["N"] + 4, generator=g, device=device).to(dtype)[: shape["N"]],)
"""


def _spec(root: Path, name: str, shift: int) -> KernelSpec:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "ops.py").write_text(_FAULTING.replace("SHIFT_VALUE", str(shift)))
    (directory / "kernel.yaml").write_text(
        f"name: {name}\nmodule: ops.py\nlauncher: run\ninputs: make_inputs\n"
        "shapes:\n  - {N: 4096, perf: true}\ndtypes: [float32]\nknobs: {BLOCK: [64, 128]}\n"
    )
    return load_entry(directory)


def _original(spec: KernelSpec) -> Candidate:
    return Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=spec.module_source,
        knobs=dict(spec.baseline_knobs),
        provenance=Provenance.ORIGINAL,
    )


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")
def test_a_fault_in_one_kernels_original_fails_that_kernel_only(tmp_path: Path) -> None:
    """A misaligned load (a 4-byte float read at an address 2 bytes off) in one entry's
    original; the next entry, whose kernels are sound, is then evaluated in the same client
    and passes."""
    faulting, sound = _spec(tmp_path, "faulting", 2), _spec(tmp_path, "sound", 0)
    settings = EvaluationSettings(interpreter=False)
    with WorkerClient(workdir=tmp_path / "w", settings=settings) as client:
        bad = client.evaluate(faulting, _original(faulting))
        assert bad.outcome in (Outcome.CRASH, Outcome.RUNTIME_ERROR), bad.reason
        assert "misaligned" in (bad.reason or ""), bad.reason
        good = client.evaluate(sound, _original(sound))
        assert good.outcome is Outcome.OK, good.reason
