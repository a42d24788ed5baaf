"""``ktuned registry add`` on quantization launchers: scales stay floating point in an
integer entry, a ``dtype`` argument is a dtype, a caller's block size is asked for, and an
``out`` buffer of a launcher that returns nothing is its declared output."""

from __future__ import annotations

import inspect
from pathlib import Path

from tests.registry.test_scaffold import assert_tunes, ktuned, user_package

DEQUANT_SOURCE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _dequant(q_ptr, absmax_ptr, out_ptr, n, QBLOCK: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    q = tl.load(q_ptr + offs, mask=mask, other=0).to(tl.float32)
    s = tl.load(absmax_ptr + offs // QBLOCK, mask=mask, other=0.0)
    tl.store(out_ptr + offs, (q - 32.0) / 31.0 * s, mask=mask)


def dequantize(q, absmax, dtype, out, blocksize=64):
    n = q.numel()
    BLOCK = 256
    _dequant[(triton.cdiv(n, BLOCK),)](q, absmax, out, n, QBLOCK=blocksize, BLOCK=BLOCK)
"""


def test_inputs_of_a_quantizer_by_name() -> None:
    import torch

    from tuned.registry.scaffold import _module_text

    def quantize(A, absmax, row_scale, dtype, quantized_out, blocksize):  # type: ignore[no-untyped-def]
        raise AssertionError

    params = list(inspect.signature(quantize).parameters.values())
    text, todo = _module_text("pkg.mod.quantize", params, {"M": 4, "N": 8})
    assert todo == ["blocksize (an integer size the caller chooses: the value production uses)"]
    text = "\n".join(x for x in text.splitlines() if "NotImplementedError" not in x)
    scope: dict[str, object] = {}
    exec(compile(text, "entry.py", "exec"), scope)
    make_inputs = scope["make_inputs"]
    assert callable(make_inputs)
    a, absmax, row_scale, dtype, out = make_inputs({"M": 4, "N": 8}, torch.int8, "cpu", 0)
    assert a.dtype == torch.int8
    assert absmax.dtype == row_scale.dtype == torch.float32 and bool((absmax >= 0).all())
    assert dtype == torch.float32 and out.dtype == torch.float32 and not out.any()
    _, _, _, dtype, out = make_inputs({"M": 4, "N": 8}, torch.bfloat16, "cpu", 0)
    assert dtype == out.dtype == torch.bfloat16


def test_add_a_dequantizer_writing_into_out_checks_and_tunes(tmp_path: Path) -> None:
    """bitsandbytes-style ``dequantize(A, absmax, ..., dtype, out) -> None`` with uint8 codes:
    the entry used to draw its scales and dtype as uint8 tensors, and asked by hand for
    ``outputs: [out]``."""
    user_package(tmp_path, "userdq", "dq", DEQUANT_SOURCE)
    added = ktuned(
        "registry",
        "add",
        "userdq.dq.dequantize",
        "--shape",
        "N=1000",
        "--dtype",
        "uint8",
        "--out",
        tmp_path / "registry",
        path=tmp_path,
    )
    assert added.returncode == 0, added.stderr
    entry = tmp_path / "registry" / "dequantize"
    assert "outputs: [out]" in (entry / "kernel.yaml").read_text()
    assert "TODO" not in added.stdout, added.stdout
    check = ktuned("registry", "check", entry, path=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert_tunes(entry, "dequantize", tmp_path)


QUANT_INTO_SOURCE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _quant(x_ptr, absmax_ptr, q_ptr, n, QBLOCK: tl.constexpr):
    offs = tl.program_id(0) * QBLOCK + tl.arange(0, QBLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    m = tl.max(tl.abs(x), axis=0)
    tl.store(absmax_ptr + tl.program_id(0), m)
    tl.store(q_ptr + offs, (x / m * 127.0).to(tl.int32).to(tl.float32), mask=mask)


def quantize_into(x, absmax, quantized_out):
    n = x.numel()
    _quant[(triton.cdiv(n, 64),)](x, absmax, quantized_out, n, QBLOCK=64, num_warps=4)
    return quantized_out, absmax
"""


def test_add_declares_the_buffers_a_launcher_writes_and_returns(tmp_path: Path) -> None:
    """bitsandbytes' ``quantize_4bit_blockwise_triton(A, ..., absmax, ..., quantized_out)``
    returns the buffers it was given: without ``outputs:`` the original itself was a
    ``cheat`` ("output 0 shares memory with input 6")."""
    user_package(tmp_path, "userqi", "qi", QUANT_INTO_SOURCE)
    added = ktuned(
        "registry",
        "add",
        "userqi.qi.quantize_into",
        "--shape",
        "N=640",
        "--dtype",
        "float32",
        "--out",
        tmp_path / "registry",
        path=tmp_path,
    )
    assert added.returncode == 0, added.stderr
    entry = tmp_path / "registry" / "quantize_into"
    assert "outputs: [quantized_out, absmax]" in (entry / "kernel.yaml").read_text()
    assert_tunes(entry, "quantize_into", tmp_path)


def test_returned_parameters_are_only_the_caller_s_buffers() -> None:
    import ast

    from tuned.registry.launchers import returned_parameters

    def first(source: str) -> ast.FunctionDef:
        fn = ast.parse(source).body[0]
        assert isinstance(fn, ast.FunctionDef)
        return fn

    assert returned_parameters(first("def f(x, out):\n    return out")) == ["out"]
    assert returned_parameters(first("def f(x, out=None):\n    return out")) == []
    rebound = "def f(x, out):\n    out = out.view(-1)\n    return out"
    assert returned_parameters(first(rebound)) == []
    mixed = "def f(x, out):\n    if x:\n        return out\n    return x, out"
    assert returned_parameters(first(mixed)) == []


def test_an_fp8_dtype_and_an_object_argument() -> None:
    """torchao's ``hp_to_fp8_row_major(hp_tensor, fp8_dtype: torch.dtype, linear_mm_config:
    LinearMMConfig)``: the fp8 dtype got the entry's float32 and the config a random tensor."""
    import torch

    from tuned.registry.scaffold import _module_text

    class LinearMMConfig:
        pass

    def launcher(hp_tensor: torch.Tensor, fp8_dtype: torch.dtype, config: LinearMMConfig) -> None:
        raise AssertionError

    params = list(inspect.signature(launcher).parameters.values())
    text, todo = _module_text("pkg.mod.launcher", params, {"M": 4, "N": 8})
    assert "fp8_dtype = torch.float8_e4m3fn" in text
    assert todo == ["config (a LinearMMConfig: build the value production passes)"]
    weight = inspect.Parameter(
        "weight", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=torch.nn.Parameter
    )
    assert _module_text("pkg.mod.f", [weight], {"N": 8})[1] == []


def test_an_annotated_scalar_is_never_drawn_as_a_tensor_by_its_name() -> None:
    """gemlite's ``gemm_forward(x, W_q, ..., W_nbits: int, output_dtype: int,
    channel_scale_mode: int, ...)``: the names said weight (``W_``), dtype and scale, and
    make_inputs drew a 1-D weight, a torch dtype and a tensor of scales for three integers."""
    import torch

    from tuned.registry.scaffold import _module_text

    def gemm(  # type: ignore[no-untyped-def]
        x,
        W_q,
        scales,
        W_nbits: int,
        output_dtype: int,
        channel_scale_mode: int,
        w_scale: float,
        group_size: int,
    ):
        raise AssertionError

    params = list(inspect.signature(gemm).parameters.values())
    text, todo = _module_text("pkg.mod.gemm", params, {"M": 4, "N": 8})
    assert todo == [
        "W_nbits (an int scalar)",
        "output_dtype (an int scalar)",
        "channel_scale_mode (an int scalar)",
        "w_scale (a float scalar)",
        "group_size (an integer size the caller chooses: the value production uses)",
    ]
    assert "W_q = rand(" in text and "scales = frand(" in text, text

    def quantize(x: torch.Tensor, w_dtype: torch.dtype) -> None:
        raise AssertionError

    params = list(inspect.signature(quantize).parameters.values())
    assert _module_text("pkg.mod.quantize", params, {"N": 8})[1] == []


def test_a_custom_op_s_scalar_type_is_a_dtype() -> None:
    """A ``triton_op``'s parameters come from its schema, where a ``torch.dtype`` is a
    ``ScalarType`` whose ``type`` reads ``int``: torchao's ``triton_mxfp8_dequant_dim0(...,
    out_dtype: torch.dtype)`` was asked for as "out_dtype (an int scalar)"."""
    import torch

    from tuned.registry.scaffold import _module_text, _schema_params

    schema = torch._C.parse_schema(
        "ns::dequant(Tensor data, Tensor scales, ScalarType out_dtype, SymInt block=32) -> Tensor"
    )
    params = _schema_params(schema)
    assert [p.annotation for p in params[2:]] == [torch.dtype, int]
    text, todo = _module_text("pkg.mod.dequant", params, {"M": 4, "N": 8})
    assert todo == [], todo
    assert "out_dtype = dtype if dtype.is_floating_point else torch.float32" in text, text
