"""An original that returns the buffer it was given (an out-argument) without ``outputs:``
is refused with what to write in kernel.yaml, not only "shares memory with input 2"."""

from __future__ import annotations

from pathlib import Path

from tests.registry.test_scaffold import ktuned

SOURCE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _twice(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def twice_into(x, out, BLOCK=64):
    _twice[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK)
    return out


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["N"], generator=g, device=device).to(dtype)
    return x, torch.zeros_like(x)
"""


def test_an_original_returning_its_out_argument_is_told_to_declare_it(tmp_path: Path) -> None:
    entry = tmp_path / "reg" / "twice"
    entry.mkdir(parents=True)
    (entry / "twice.py").write_text(SOURCE)
    (entry / "kernel.yaml").write_text(
        "name: twice\nmodule: twice.py\nlauncher: twice_into\ninputs: make_inputs\n"
        "shapes: [{N: 100, perf: true}]\ndtypes: [float32]\n"
    )
    state = tmp_path / "state"
    ktuned("tune", entry, "--budget", "0", path=tmp_path, state=state)
    status = ktuned("status", path=tmp_path, state=state)
    assert "shares memory with input 1" in status.stdout, status.stdout
    assert "declare it in kernel.yaml: `outputs: [NAME]`" in status.stdout, status.stdout
