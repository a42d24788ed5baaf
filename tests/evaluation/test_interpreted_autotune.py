"""In Triton's interpreter an autotuner with several configs runs its first one, unbenchmarked
(tuned.evaluation.interpreted_autotune): in a fresh interpreter process, as a runner is."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    import triton
    import triton.language as tl

    ran = []

    def hook(name):
        return lambda nargs: ran.append(name)

    @triton.autotune(
        configs=[
            triton.Config({"BLOCK": 128}, num_warps=4, pre_hook=hook("first")),
            triton.Config({"BLOCK": 512}, num_warps=8, pre_hook=hook("second")),
        ],
        key=["n"],
    )
    @triton.jit
    def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3, mask=offs < n)

    if sys.argv[1] == "patched":
        from tuned.evaluation.interpreted_autotune import first_config_autotuners

        assert first_config_autotuners()
    x = torch.randn(1000)
    out = torch.empty_like(x)
    try:
        scale[lambda META: (triton.cdiv(1000, META["BLOCK"]),)](x, out, 1000)
    except RuntimeError as exc:
        print("failed:", exc)
        raise SystemExit(0)
    torch.testing.assert_close(out, x * 3)
    print("ran:", ",".join(ran), "chosen:", scale.best_config.kwargs["BLOCK"])
    """
)


def _run(mode: str, tmp_path: Path) -> str:
    script = tmp_path / "autotuned.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(script), mode], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_the_first_config_runs_and_no_other(tmp_path: Path) -> None:
    out = _run("patched", tmp_path)
    assert "ran: first chosen: 128" in out, out  # the second config's hook never ran


def test_without_it_the_interpreter_cannot_choose(tmp_path: Path) -> None:
    # What the first test guards against: Triton's own benchmark needs a GPU driver.
    out = _run("plain", tmp_path)
    assert "failed:" in out and "active drivers" in out, out
