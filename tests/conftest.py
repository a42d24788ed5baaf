"""Shared fixtures: a tiny real Triton kernel entry written into a temporary registry."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

# Kernels run in Triton's interpreter on machines without a GPU. Set before anything imports
# triton, for this process and (inherited) for the workers it starts.
try:
    import torch

    _HAS_GPU = torch.cuda.is_available()
except ImportError:  # pragma: no cover - torch is a test dependency
    _HAS_GPU = False
if not _HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

ADD_SOURCE = textwrap.dedent(
    '''
    """out = x + y, for tests."""
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + y, mask=mask)


    def add(x, y, BLOCK=256, num_warps=4):
        out = torch.empty_like(x)
        n = x.numel()
        _add[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK, num_warps=num_warps)
        return out


    def make_inputs(shape, dtype, device, seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(shape["N"], generator=g).to(dtype)
        y = torch.randn(shape["N"], generator=g).to(dtype)
        return x.to(device), y.to(device)


    def reference(x, y):
        return x + y
    '''
)

ADD_YAML = textwrap.dedent(
    """
    name: {name}
    module: add.py
    launcher: add
    reference: reference
    inputs: make_inputs
    shapes:
      - {{N: 3000, perf: true}}
      - {{N: 7}}
    dtypes: [float16, float32]
    knobs:
      BLOCK: [64, 128, 256, 512, 1024]
      num_warps: [1, 2, 4]
    """
)

WriteEntry = Callable[..., Path]


@pytest.fixture
def write_entry(tmp_path: Path) -> WriteEntry:
    """Write an entry ``name`` (the add kernel, optionally with other source) and return its dir."""

    def write(
        name: str = "add",
        source: str = ADD_SOURCE,
        yaml: str | None = None,
        root: Path | None = None,
    ) -> Path:
        directory = (root or tmp_path / "registry") / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "add.py").write_text(source)
        (directory / "kernel.yaml").write_text(yaml or ADD_YAML.format(name=name))
        return directory

    return write


def has_gpu() -> bool:
    return _HAS_GPU


#: Parametrize a corpus test over where kernels run (the value is ``interpreter``): Triton's
#: interpreter everywhere (CI) and, where there is one, the GPU (``pytest -m gpu`` on the
#: device runs that half).
DEVICES = [
    pytest.param(True, id="interpreter"),
    pytest.param(
        False,
        id="gpu",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not _HAS_GPU, reason="needs an NVIDIA GPU"),
        ],
    ),
]
