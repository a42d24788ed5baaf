"""bench/runtime_model.py --smoke: the model-step benchmark runs (CPU, interpreter, tiny)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.runtime.rows import ROOT


def test_model_step_benchmark_smoke(tuned_state: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "runtime_model.py"),
            "--smoke",
            "--state-dir",
            str(tuned_state),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    assert "outputs match: True" in run.stdout and "interpreter timings" in run.stdout
    rows = {
        line.split("|")[1].strip(): line
        for line in run.stdout.splitlines()
        if line.startswith("| ")
    }
    assert "absent" in rows["matmul (up)"]  # not in this store: its original runs
    assert "tuned" in rows["vector_add"] or "original" in rows["vector_add"]
    assert "end to end" in rows["**step**"]
