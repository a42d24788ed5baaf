"""Knobs of the installed Liger-Kernel (0.8.5, unchanged), injected into generated copies.

Liger binds its knobs as ``BLOCK_SIZE, num_warps = calculate_settings(n)`` (a helper of
another module of the package) inside functions that ``Liger*Function.apply`` calls. Only
kernels that run in Triton's interpreter are run here (several 0.8.5 kernels fail there on
scalar float parameters); the H100 benchmark runs them all.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.registry.knob_diff import binding_changes
from tuned.registry.discovery import discover_source
from tuned.registry.injection import materialize

liger = pytest.importorskip("liger_kernel")
OPS = Path(liger.__file__).parent / "ops"


def _import_copy(tmp_path: Path, source: str, name: str) -> ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


@pytest.mark.parametrize(
    ("op", "launcher", "knobs"),
    [
        ("rms_norm", "LigerRMSNormFunction.apply", {"BLOCK_SIZE", "num_warps", "BLOCK_ROW"}),
        ("layer_norm", "LigerLayerNormFunction.apply", {"BLOCK_SIZE", "num_warps"}),
        ("swiglu", "LigerSiLUMulFunction.apply", {"BLOCK_SIZE", "num_warps"}),
        ("softmax", "LigerSoftmaxFunction.apply", {"BLOCK_SIZE", "num_warps"}),
        ("cross_entropy", "LigerCrossEntropyFunction.apply", {"BLOCK_SIZE"}),
    ],
)
def test_liger_launchers_discover_their_settings(op: str, launcher: str, knobs: set[str]) -> None:
    found = discover_source((OPS / f"{op}.py").read_text(), launcher, op)
    assert found is not None
    assert knobs <= set(found.knobs), found.knobs
    assert all(found.baseline[k] in ("x1", 16) for k in knobs)


def test_liger_softmax_copy_runs_forward_and_backward(tmp_path: Path) -> None:
    source = (OPS / "softmax.py").read_text()
    found = discover_source(source, "LigerSoftmaxFunction.apply", "softmax")
    assert found is not None
    # The single-block kernel covers the row in one pass: BLOCK_SIZE may grow, not shrink.
    assert found.knobs["BLOCK_SIZE"] == ("x1", "x2")
    chosen = {"BLOCK_SIZE": "x2", "num_warps": "/2", "_softmax_backward.num_warps": "x2"}
    variant, rest = materialize(source, "LigerSoftmaxFunction.apply", chosen)
    assert rest == {}
    assert binding_changes(source, variant) == [
        "rebind BLOCK_SIZE",
        "rebind num_warps",
        "rebind num_warps",
    ]
    copy = _import_copy(tmp_path, variant, "ktuned_liger_softmax_copy")
    x = torch.randn(4, 100, requires_grad=True)
    y = copy.LigerSoftmaxFunction.apply(x)
    torch.testing.assert_close(y, torch.softmax(x, -1))
    g = torch.randn(4, 100)
    (grad,) = torch.autograd.grad(y, x, g)
    (expected,) = torch.autograd.grad(torch.softmax(x, -1), x, g)
    torch.testing.assert_close(grad, expected)
