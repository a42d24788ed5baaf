"""Quantization dtypes end to end: ``uint8``, ``int16`` and the float8 formats are entry dtypes
(``--dtype uint8`` was refused: "not a dtype ktuned knows"), and ``registry add`` draws
inputs in their range (a negative float cast to ``uint8`` is undefined in PyTorch)."""

from __future__ import annotations

import inspect
from pathlib import Path

from tests.registry.test_scaffold import assert_tunes, ktuned, user_package
from tuned.registry.loader import load_entry
from tuned.registry.spec import Tolerance

DEQUANT_SOURCE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _widen(q_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    q = tl.load(q_ptr + offs, mask=mask).to(tl.int32)
    tl.store(out_ptr + offs, q * 3 - 7, mask=mask)


def widen(q, BLOCK=64):
    out = torch.empty(q.shape, device=q.device, dtype=torch.int32)
    n = q.numel()
    _widen[(triton.cdiv(n, BLOCK),)](q, out, n, BLOCK=BLOCK)
    return out
"""


def test_quantized_dtypes_load_with_their_default_tolerance(tmp_path: Path) -> None:
    entry = tmp_path / "e"
    entry.mkdir()
    (entry / "widen.py").write_text(DEQUANT_SOURCE)
    (entry / "kernel.yaml").write_text(
        "name: widen\nmodule: widen.py\nlauncher: widen\ninputs: widen\n"
        "shapes: [{N: 64, perf: true}]\ndtypes: [uint8, int16, fp8_e4m3, float8_e5m2]\n"
    )
    spec = load_entry(entry)
    assert spec.dtypes == ("uint8", "int16", "float8_e4m3fn", "float8_e5m2")
    assert spec.tolerance["uint8"] == Tolerance(0.0, 0.0)
    assert spec.tolerance["int16"] == Tolerance(0.0, 0.0)
    assert spec.tolerance["float8_e4m3fn"] == Tolerance(0.125, 0.125)


def test_scaffold_draws_unsigned_inputs_in_range() -> None:
    import torch

    from tuned.registry.scaffold import _module_text

    def launcher(q):  # type: ignore[no-untyped-def]
        raise AssertionError

    params = list(inspect.signature(launcher).parameters.values())
    text, todo = _module_text("pkg.mod.launcher", params, {"N": 4096})
    assert not todo
    scope: dict[str, object] = {}
    exec(compile(text, "entry.py", "exec"), scope)
    make_inputs = scope["make_inputs"]
    assert callable(make_inputs)
    (q,) = make_inputs({"N": 4096}, torch.uint8, "cpu", 0)
    assert q.dtype == torch.uint8 and int(q.max()) < 64  # no wrap-around of negative draws
    (f,) = make_inputs({"N": 16}, torch.float8_e4m3fn, "cpu", 0)
    assert f.dtype == torch.float8_e4m3fn


def test_add_takes_a_uint8_dtype_and_the_entry_tunes(tmp_path: Path) -> None:
    user_package(tmp_path, "userquant", "widen", DEQUANT_SOURCE)
    added = ktuned(
        "registry",
        "add",
        "userquant.widen.widen",
        "--shape",
        "N=300",
        "--dtype",
        "uint8",
        "--out",
        tmp_path / "registry",
        path=tmp_path,
    )
    assert added.returncode == 0, added.stderr
    assert "dtypes: [uint8]" in (tmp_path / "registry" / "widen" / "kernel.yaml").read_text()
    assert_tunes(tmp_path / "registry" / "widen", "widen", tmp_path)
