"""The guard decides by who asks: candidate code is refused, Triton's own compiler is not."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from tuned.evaluation.guard import Guard

SPAWN_AND_WRITE = (
    "import subprocess\n"
    "def spawn():\n"
    "    return subprocess.run(['true'], check=False).returncode\n"
    "def write(path):\n"
    "    with open(path, 'w') as f:\n"
    "        f.write('x')\n"
)


def _module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(SPAWN_AND_WRITE, module.__dict__)
    return module


def test_triton_may_spawn_and_write_candidate_code_may_not(tmp_path: Path) -> None:
    compiler = _module("triton.backends.fake_compiler")  # as Triton runs ptxas
    candidate = _module("ktuned_candidate_test")
    guard = Guard(
        candidate_modules={"ktuned_candidate_test"}, writable=[tmp_path / "w"], poison=None
    )
    with guard:
        assert compiler.spawn() == 0
        compiler.write(tmp_path / "cache-file")
        with pytest.raises(PermissionError):
            candidate.spawn()
        with pytest.raises(PermissionError):
            candidate.write(tmp_path / "outside")
        (tmp_path / "w").mkdir()
        candidate.write(tmp_path / "w" / "inside")  # its own directory is fine
    assert (tmp_path / "cache-file").exists() and not (tmp_path / "outside").exists()
    assert guard.violations == [
        "starting a process (subprocess)",
        f"writing a file outside the worker ({tmp_path / 'outside'})",
    ]


STREAM = "import torch\ndef side_stream():\n    return torch.cuda.Stream()\n"


def test_torch_may_build_streams_candidate_code_may_not(tmp_path: Path) -> None:
    """``Event.record()`` reaches ``torch.cuda.Stream`` through ``current_stream()``: PyTorch
    acting must pass (the GPU timing path), a candidate creating a side stream must not."""
    torch_internal = types.ModuleType("torch.cuda.ktuned_test_shim")
    exec(STREAM, torch_internal.__dict__)
    candidate = types.ModuleType("ktuned_candidate_stream")
    exec(STREAM, candidate.__dict__)
    guard = Guard(candidate_modules={"ktuned_candidate_stream"}, writable=[tmp_path], poison=None)
    with guard:
        try:
            torch_internal.side_stream()  # the real constructor runs (and fails without CUDA)
        except PermissionError:
            pytest.fail("PyTorch's own Stream construction was refused")
        except Exception:  # a CPU-only build cannot make a CUDA stream
            pass
        assert guard.violations == []
        with pytest.raises(PermissionError):
            candidate.side_stream()
    assert guard.violations == ["a side CUDA stream (torch.cuda.Stream)"]
