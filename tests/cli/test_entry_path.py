"""`ktuned tune X/kernel.yaml` and `ktuned registry check X/kernel.yaml`, as documented."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import WriteEntry

ROOT = Path(__file__).resolve().parents[2]


def _ktuned(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuned.cli", *map(str, args)],
        env={**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_kernel_yaml_stands_for_its_entry(tmp_path: Path, write_entry: WriteEntry) -> None:
    entry = write_entry("add")
    check = _ktuned("registry", "check", entry / "kernel.yaml")
    assert check.returncode == 0 and "ok       add:" in check.stdout, check.stderr
    tune = _ktuned(
        "tune",
        entry / "kernel.yaml",
        "--budget",
        "1",
        "--state-dir",
        tmp_path / "s",
        "--compile-workers",
        "0",
    )
    assert tune.returncode == 0, tune.stderr
    assert "add " in tune.stdout and "is not a directory" not in tune.stderr
    other = _ktuned("registry", "check", entry / "add.py")
    assert other.returncode == 2 and "is a file; give a registry directory" in other.stderr
