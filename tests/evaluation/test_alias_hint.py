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


PASS_THROUGH = SOURCE.replace(
    """def twice_into(x, out, BLOCK=64):""",
    '''def twice_and_x(x, BLOCK=64):
    """Returns its input as it came along with the result, as Liger's swiglu_forward
    (``return a, b, c``) and rope_forward (``return q, k, cos, sin``) do."""
    out = torch.empty_like(x)
    _twice[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK)
    return x.view(-1), out


def twice_into(x, out, BLOCK=64):''',
)


def test_an_original_returning_an_input_it_left_alone_is_tuned(tmp_path: Path) -> None:
    """An output that is an input the call did not change is a pass-through, compared like
    any output: it was ``cheat: output 0 shares memory with input 0`` and nothing was tuned."""
    entry = tmp_path / "reg" / "pass"
    entry.mkdir(parents=True)
    (entry / "twice.py").write_text(PASS_THROUGH)
    (entry / "kernel.yaml").write_text(
        "name: pass\nmodule: twice.py\nlauncher: twice_and_x\ninputs: make_inputs_x\n"
        "shapes: [{N: 100, perf: true}]\ndtypes: [float32]\n"
    )
    with (entry / "twice.py").open("a") as f:
        f.write("\n\ndef make_inputs_x(shape, dtype, device, seed):\n")
        f.write("    return make_inputs(shape, dtype, device, seed)[:1]\n")
    state = tmp_path / "state"
    run = ktuned("tune", entry, "--budget", "1", path=tmp_path, state=state)
    assert run.returncode == 0, run.stdout + run.stderr
    status = ktuned("status", path=tmp_path, state=state)
    row = next(line for line in status.stdout.splitlines() if line.startswith("pass "))
    assert "cheat" not in row and "original fails" not in row, status.stdout
    assert row.split()[1] != "-", status.stdout  # the original has a time
