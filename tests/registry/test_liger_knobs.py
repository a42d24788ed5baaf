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
from tuned.registry.kernel_sources import locate_launcher

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


def test_a_dotted_launcher_into_the_installed_package_is_located_statically() -> None:
    located = locate_launcher("liger_kernel.ops.softmax.LigerSoftmaxFunction.apply")
    assert located is not None
    module, qualname, path = located
    assert (module, qualname) == ("liger_kernel.ops.softmax", "LigerSoftmaxFunction.apply")
    assert path.resolve() == (OPS / "softmax.py").resolve()
    found = discover_source(path.read_text(), qualname, module)
    assert found is not None and "BLOCK_SIZE" in found.knobs
    assert locate_launcher("no_such_package.f") is None


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


def _inputs(op: str, n: int, dtype: torch.dtype) -> tuple[object, ...]:
    g = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device="cuda", dtype=dtype, requires_grad=True)

    hidden = {
        "rms_norm": lambda: (rand(n, 4096), rand(4096), 1e-6),
        "layer_norm": lambda: (rand(n, 4096), rand(4096), rand(4096), 1e-6),
        "swiglu": lambda: (rand(n, 4096), rand(n, 4096)),
        "geglu": lambda: (rand(n, 4096), rand(n, 4096)),
        "softmax": lambda: (rand(n, 4096),),
        "sparsemax": lambda: (rand(n, 1024), -1),
        "dyt": lambda: (rand(n, 4096), rand(1), rand(4096), rand(4096)),
        "fused_add_rms_norm": lambda: (rand(n, 4096), rand(n, 4096), rand(4096), 1e-6),
    }
    return hidden[op]()


GPU_OPS = {
    "rms_norm": "LigerRMSNormFunction",
    "layer_norm": "LigerLayerNormFunction",
    "swiglu": "LigerSiLUMulFunction",
    "geglu": "LigerGELUMulFunction",
    "softmax": "LigerSoftmaxFunction",
    "sparsemax": "LigerSparsemaxFunction",
    "dyt": "LigerDyTFunction",
    "fused_add_rms_norm": "LigerFusedAddRMSNormFunction",
}


@pytest.mark.gpu
@pytest.mark.parametrize("op", sorted(GPU_OPS))
def test_liger_copies_at_every_extreme_match_the_original_on_the_gpu(
    tmp_path: Path, op: str
) -> None:
    """Each Liger op's copy with every knob at its smallest and at its largest value gives
    the original's forward and backward results on the GPU (rows 1 and 4096, hidden 4096)."""
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    source = (OPS / f"{op}.py").read_text()
    launcher = f"{GPU_OPS[op]}.apply"
    found = discover_source(source, launcher, op)
    assert found is not None and found.knobs
    original = _import_copy(tmp_path, source, f"ktuned_liger_{op}_original")
    for end in (0, -1):
        chosen = {k: v[end] for k, v in found.knobs.items()}
        variant, rest = materialize(source, launcher, chosen)
        assert rest == {}
        copy = _import_copy(tmp_path, variant, f"ktuned_liger_{op}_{end % 2}")
        for rows in (1, 4096):
            args = _inputs(op, rows, torch.bfloat16)
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            want = getattr(original, GPU_OPS[op]).apply(*args)
            got = getattr(copy, GPU_OPS[op]).apply(*args)
            want = want if isinstance(want, tuple) else (want,)
            got = got if isinstance(got, tuple) else (got,)
            for w, h in zip(want, got, strict=True):
                if isinstance(w, torch.Tensor):
                    torch.testing.assert_close(h, w, atol=2e-2, rtol=2e-2)
            grads = [torch.randn_like(w) for w in want if isinstance(w, torch.Tensor)]
            outs = [w for w in want if isinstance(w, torch.Tensor)]
            outs2 = [h for h in got if isinstance(h, torch.Tensor)]
            # Fresh upstream gradients per call: some backwards write into them in place.
            ref = torch.autograd.grad(outs, tensors, [g.clone() for g in grads], allow_unused=True)
            new = torch.autograd.grad(outs2, tensors, [g.clone() for g in grads], allow_unused=True)
            for r, m in zip(ref, new, strict=True):
                if r is not None:
                    torch.testing.assert_close(m, r, atol=5e-2, rtol=5e-2)
