"""``ktuned registry add`` on a module that cannot be imported here: the signature is read
from its source (module-level code that asks the GPU driver for its device, as real Triton
code does, raises on a CPU-only machine)."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conftest import ADD_SOURCE
from tests.registry.test_scaffold import ktuned, user_package

#: What Triton raises at import on a machine without a GPU driver (the interpreter).
NO_DRIVER = "raise RuntimeError('0 active drivers')\n"


def test_add_reads_the_signature_when_the_module_raises_at_import(tmp_path: Path) -> None:
    source = ADD_SOURCE + textwrap.dedent(
        """
        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, w, eps: float = 1e-5, *, BLOCK=128):
                return add(x, w)


        def fill(x, y):
            add(x, y)


        def add_(x, y, BLOCK=256):
            n = x.numel()
            _add[(triton.cdiv(n, BLOCK),)](x, y, x, n, BLOCK=BLOCK)
            return x
        """
    )
    # In the interpreter, Triton has no active driver: the import raises RuntimeError.
    user_package(tmp_path, "gpuonly", "ops", source.replace("import triton\n", NO_DRIVER, 1))
    launchers = (
        "gpuonly.ops.add",
        "gpuonly.ops.Scale.apply",
        "gpuonly.ops.fill",
        "gpuonly.ops.add_",
    )
    for launcher in launchers:
        added = ktuned(
            "registry",
            "add",
            launcher,
            "--shape",
            "N=64",
            "--out",
            tmp_path / "reg",
            path=tmp_path,
        )
        assert added.returncode == 0, added.stdout + added.stderr
        assert "importing gpuonly.ops raised RuntimeError: 0 active drivers" in added.stdout
        assert "read from the source" in added.stdout
    add = (tmp_path / "reg" / "add" / "entry.py").read_text()
    assert 'x = rand(shape["N"])' in add and 'y = rand(shape["N"])' in add
    assert "BLOCK" not in add.split("def make_inputs")[1]  # a default: left to the launcher
    scale = (tmp_path / "reg" / "scale" / "entry.py").read_text()
    assert "return (x, w)" in scale and "ctx" not in scale.split("def make_inputs")[1]
    assert "# outputs: [out]" in (tmp_path / "reg" / "fill" / "kernel.yaml").read_text()
    # Written in place and returned: compared as written (undeclared, the judge refuses its
    # output as sharing memory with an input the call changed).
    assert "outputs: [x]" in (tmp_path / "reg" / "add_" / "kernel.yaml").read_text()


def test_add_says_what_to_do_when_neither_import_nor_source_helps(tmp_path: Path) -> None:
    user_package(tmp_path, "broken", "ops", "raise RuntimeError('no GPU')\nmissing = 1\n")
    added = ktuned("registry", "add", "broken.ops.missing", "--shape", "N=4", path=tmp_path)
    assert added.returncode == 2, added.stdout + added.stderr
    assert "Traceback" not in added.stderr
    assert "importing broken.ops raised RuntimeError: no GPU" in added.stderr
    assert "__main__" in added.stderr


ATTENTION = ADD_SOURCE + textwrap.dedent(
    """
    class _attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal, sm_scale, USE_TMA=True):
            stage = 3 if causal else 1
            ctx.sm_scale = sm_scale
            return add(q, k) * sm_scale + v * stage


    class LayerNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, normalized_shape, weight, bias, eps):
            return add(x, weight.expand_as(x)) + bias + eps


    attention = _attention.apply


    def rms(norm, x):
        return add(x, norm.weight.expand_as(x)) * norm.eps
    """
)


def test_add_asks_for_flags_and_scalars_instead_of_drawing_tensors(tmp_path: Path) -> None:
    """``causal`` (tested as a condition) is not a tensor of the shape, nor ``sm_scale``
    (its usual value, 1/sqrt of the last dimension, with a comment), nor ``norm`` (the
    launcher reads ``norm.weight``: an object); a ``normalized_shape`` is the last
    dimension; both when the module imports and when it raises at import (the signature
    read from source)."""
    user_package(tmp_path, "ok", "attn", ATTENTION)
    user_package(tmp_path, "gpu", "attn", ATTENTION.replace("import triton\n", NO_DRIVER, 1))
    for package in ("ok", "gpu"):
        out = tmp_path / package
        for launcher in (
            "attn._attention.apply",
            "attn.attention",
            "attn.LayerNorm.apply",
            "attn.rms",
        ):
            added = ktuned(
                "registry",
                "add",
                f"{package}.{launcher}",
                "--shape",
                "Z=1,H=2,N=16,D=16",
                "--name",
                launcher.split(".")[1].lower(),
                "--out",
                out,
                path=tmp_path,
            )
            assert added.returncode == 0, added.stdout + added.stderr
            assert "TODO" in added.stdout or "layernorm" in launcher.lower()
        for name in ("_attention", "attention"):
            inputs = (out / name / "entry.py").read_text()
            body = inputs.split("def make_inputs")[1]
            assert "causal (a flag the launcher tests" in body, inputs
            assert 'sm_scale = 1.0 / shape["D"] ** 0.5  # the usual value' in body, inputs
            assert "causal = rand" not in body and "sm_scale = rand" not in body
            assert "USE_TMA" not in body
        rms = (out / "rms" / "entry.py").read_text().split("def make_inputs")[1]
        assert "norm (an object: the launcher reads norm.weight" in rms, rms
        assert "norm = rand" not in rms
        norm = (out / "layernorm" / "entry.py").read_text()
        assert 'normalized_shape = (shape["D"],)' in norm and "NotImplementedError" not in norm


def test_add_reads_the_source_when_the_modules_own_imports_fail(tmp_path: Path) -> None:
    """A module that exists but whose imports fail here (a name a CPU build of torch lacks,
    a package gone from Triton 3): read from the source with the import's error, not
    "has no attribute"; a module that does not exist is still said not to."""
    imports = {
        "needs_cuda": "from torch._C import _no_such_name_here\n",
        "needs_ops": "import triton.no_such_submodule_here\n",
    }
    user_package(tmp_path, "corpus", "plain", ADD_SOURCE)
    for module, line in imports.items():
        source = ADD_SOURCE.replace("import triton\n", line, 1)
        (tmp_path / "corpus" / f"{module}.py").write_text(source)
        added = ktuned(
            "registry", "add", f"corpus.{module}.add", "--shape", "N=64",
            "--out", tmp_path / "reg", "--name", module, path=tmp_path,
        )  # fmt: skip
        assert added.returncode == 0, added.stdout + added.stderr
        assert f"importing corpus.{module} raised" in added.stdout, added.stdout
        assert "read from the source" in added.stdout
        assert "has no attribute" not in added.stdout + added.stderr
    absent = ktuned("registry", "add", "corpus.absent.add", "--shape", "N=4", path=tmp_path)
    assert absent.returncode == 2 and "has no attribute 'absent'" in absent.stderr, absent.stderr


def test_a_tensor_read_with_more_dimensions_than_the_shape_is_drawn_by_name_or_asked_for() -> None:
    """``B, H, L, D = q.shape`` in the launcher: with --shape B,H,L,D the tensor is drawn in
    that order; with a 2-D --shape (a new user's first try) make_inputs is a TODO naming the
    line and the dimensions to give, instead of a 2-D tensor the original fails on. A read
    under an ``if`` proves nothing (another rank may be meant)."""
    import ast
    import inspect

    from tuned.registry.scaffold import infer_inputs
    from tuned.registry.scaffold_source import shape_reads

    fn = ast.parse(
        textwrap.dedent(
            """
            def attention(q, k, v, bias):
                B, H, L, D = q.shape
                kv_len = k.stride(2)
                if v.dim() == 3:
                    _, L, D = v.shape
                return q
            """
        )
    ).body[0]
    assert isinstance(fn, ast.FunctionDef)
    reads = shape_reads(fn)
    assert reads["q"].names == ("B", "H", "L", "D") and reads["k"].rank == 3
    assert "v" not in reads and "bias" not in reads
    params = [
        inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in ("q", "k", "v")
    ]
    named, todo = infer_inputs(params, {"D": 8, "L": 16, "H": 2, "B": 1}, reads=reads)
    assert not todo
    assert 'q = rand(shape["B"], shape["H"], shape["L"], shape["D"])' in named, named
    assert 'k = rand(shape["D"], shape["L"], shape["H"], shape["B"])' in named  # in order
    flat, todo = infer_inputs(params, {"M": 64, "N": 64}, reads=reads)
    assert len(todo) == 2 and 'v = rand(shape["M"], shape["N"])' in flat, (flat, todo)
    assert "q (the launcher reads it as 4-D, line 3: `B, H, L, D = q.shape`" in todo[0]
    assert "e.g. B=...,H=...,L=...,D=..." in todo[0]
    assert "k (the launcher reads it as 3-D" in todo[1]
    # Unpacked whole, the rank is exact: a 4-D shape without its names is no 3-D tensor
    # ("too many values to unpack" on the device for 8 TritonBench-G originals), where a
    # read of `k.stride(2)` needs only three dimensions or more.
    cumsum = ast.parse("def cumsum(s):\n    B, H, T = s.shape\n    return s\n").body[0]
    assert isinstance(cumsum, ast.FunctionDef)
    s_reads = shape_reads(cumsum)
    assert s_reads["s"].exact and not reads["k"].exact
    s_param = [inspect.Parameter("s", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    _, todo = infer_inputs(s_param, {"B": 2, "H": 4, "L": 64, "D": 32}, reads=s_reads)
    assert todo and "s (the launcher reads it as 3-D, line 2: `B, H, T = s.shape`" in todo[0]
    assert "the shape has 4 dimensions" in todo[0] and "e.g. B=...,H=...,T=..." in todo[0]
    drawn, todo = infer_inputs(s_param, {"B": 2, "H": 4, "T": 64}, reads=s_reads)
    assert not todo and 's = rand(shape["B"], shape["H"], shape["T"])' in drawn, drawn
    # Named in part: `K, N = b.shape` under --shape M,N is no (M, N) weight; names the shape
    # does not use at all (`n_rows, n_cols`) are any two dimensions, drawn in order.
    mm = ast.parse("def mm(a, b):\n    K, N = b.shape\n    n_rows, n_cols = a.shape\n").body[0]
    assert isinstance(mm, ast.FunctionDef)
    mm_params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in ("a", "b")]
    drawn, todo = infer_inputs(mm_params, {"M": 4, "N": 8}, reads=shape_reads(mm))
    assert 'a = rand(shape["M"], shape["N"])' in drawn, drawn
    assert len(todo) == 1 and "b (the launcher reads it as 2-D, line 2: `K, N = b.shape`" in todo[0]
    assert "--shape does not name K: give --shape the dimensions it needs" in todo[0], todo
    drawn, todo = infer_inputs(mm_params, {"M": 4, "K": 6, "N": 8}, reads=shape_reads(mm))
    assert 'b = rand(shape["K"], shape["N"])' in drawn, drawn
    assert len(todo) == 1 and todo[0].startswith("a (the launcher reads it as 2-D"), todo


WRAPPED_ATTENTION = """
import torch


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sm_scale):
        B, H, L, D = q.shape
        return q * sm_scale


def _helper(x, kv):
    n = kv.size(2)
    return x


def attention(q, k, v, sm_scale):
    _helper(q, kv=v)
    return _Attention.apply(q, k, v, sm_scale)
"""


def test_a_shape_read_in_a_function_the_launcher_calls_counts_as_the_launchers(
    tmp_path: Path,
) -> None:
    """A wrapper that reads no shape itself hands its tensors to a Function whose
    ``forward`` unpacks ``B, H, L, D = q.shape`` (and a helper reads ``kv.size(2)``): those
    reads are the launcher's, so a 2-D --shape asks for the dimensions instead of drawing
    2-D tensors the original fails on, and the named ones draw q in that order."""
    import importlib
    import sys

    from tuned.registry.scaffold import _launcher_def, reads_through_calls
    from tuned.registry.scaffold_source import shape_reads

    (tmp_path / "wrapped_attention.py").write_text(WRAPPED_ATTENTION)
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module("wrapped_attention")
        fn = _launcher_def(module.attention)
        assert fn is not None
        reads = reads_through_calls(module.attention, fn)
        assert reads["q"].names == ("B", "H", "L", "D")
        assert "_Attention.apply" in reads["q"].text and "B, H, L, D = q.shape" in reads["q"].text
        assert reads["v"].rank == 3 and "_helper(kv)" in reads["v"].text
        assert "k" not in reads  # forward reads nothing of k
        assert shape_reads(fn) == {}  # the wrapper's own statements read nothing
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("wrapped_attention", None)
    flat = ktuned(
        *("registry", "add", "wrapped_attention.attention", "--shape", "M=64,N=64"),
        *("--out", tmp_path / "reg"),
        path=tmp_path,
    )
    assert flat.returncode == 0, flat.stderr
    assert "q (the launcher reads it as 4-D" in flat.stdout and "_Attention.apply" in flat.stdout
    named = ktuned(
        *("registry", "add", "wrapped_attention.attention", "--name", "named"),
        *("--shape", "B=1,H=2,L=16,D=8", "--out", tmp_path / "reg"),
        path=tmp_path,
    )
    assert named.returncode == 0, named.stderr
    inputs = (tmp_path / "reg" / "named" / "entry.py").read_text()
    assert 'q = rand(shape["B"], shape["H"], shape["L"], shape["D"])' in inputs, inputs


def test_a_union_with_a_tensor_is_drawn_as_a_tensor_and_other_annotations_asked_for() -> None:
    """FlagGems' generated wrappers annotate ``in0: Union[torch.Tensor, StridedBuffer]``: a
    tensor is what the caller passes, so it is drawn; ``Optional[Tensor]`` and ``Tensor |
    None`` likewise. An annotation with no tensor in it (a config object) is still a TODO."""
    import inspect
    from typing import Optional, Union

    import torch

    from tuned.registry.scaffold import infer_inputs

    class StridedBuffer:
        pass

    class Config:
        pass

    kinds = inspect.Parameter
    # typing.Union / Optional as user code writes them, beside PEP 604's `X | None`
    params = [
        kinds("in0", kinds.POSITIONAL_ONLY, annotation=Union[torch.Tensor, StridedBuffer]),  # noqa: UP007
        kinds("bias", kinds.POSITIONAL_OR_KEYWORD, annotation=Optional[torch.Tensor]),  # noqa: UP045
        kinds("gate", kinds.POSITIONAL_OR_KEYWORD, annotation=torch.Tensor | None),
        kinds("config", kinds.POSITIONAL_OR_KEYWORD, annotation=Union[Config, StridedBuffer]),  # noqa: UP007
    ]
    lines, todo = infer_inputs(params, {"N": 64})
    assert 'in0 = rand(shape["N"])' in lines and 'gate = rand(shape["N"])' in lines, lines
    assert any(line.startswith("bias = ") for line in lines), lines
    assert len(todo) == 1 and todo[0].startswith("config ("), todo


def test_a_one_letter_weight_name_beside_a_spelled_out_weight_is_an_input_like_x() -> None:
    # flash-linear-attention's rms_norm_gated(x, g, weight, bias): `g` is the gate, of x's
    # shape; drawn 1-D as if it were gamma, the kernel read past it (garbage, 1e37).
    import inspect

    from tuned.registry.scaffold import infer_inputs

    kinds = inspect.Parameter

    def named(*names: str) -> list[inspect.Parameter]:
        return [kinds(n, kinds.POSITIONAL_OR_KEYWORD) for n in names]

    lines, _ = infer_inputs(named("x", "g", "weight", "bias"), {"M": 4, "N": 8})
    assert 'g_ = rand(shape["M"], shape["N"])' in lines, lines  # g_: `g` is the generator
    assert 'weight = rand(shape["N"])' in lines and 'bias = rand(shape["N"])' in lines, lines
    alone, _ = infer_inputs(named("x", "g", "b"), {"M": 4, "N": 8})  # gamma and beta
    assert 'g_ = rand(shape["N"])' in alone and 'b = rand(shape["N"])' in alone, alone


def test_an_input_asserted_to_have_an_inputs_shape_is_drawn_with_it() -> None:
    # flash-linear-attention's chunk_gla(q, k, v, g): `assert q.shape == k.shape == g.shape`;
    # `g` drawn 1-D as if it were gamma, the original failed on that very assertion.
    import ast
    import inspect

    from tuned.registry.scaffold import infer_inputs
    from tuned.registry.scaffold_source import shape_reads

    kinds = inspect.Parameter
    dims = {"T": 8, "K": 4}

    def gate(body: str) -> str:
        fn = ast.parse(f"def chunk(q, g, b):\n{body}    return q\n").body[0]
        assert isinstance(fn, ast.FunctionDef)
        params = [kinds(n, kinds.POSITIONAL_OR_KEYWORD) for n in ("q", "g", "b")]
        lines, _ = infer_inputs(params, dims, reads=shape_reads(fn))
        [line] = [x for x in lines if x.startswith("g_ = ")]  # `g` is the generator's name
        return line

    assert gate("    assert q.shape == g.shape\n") == 'g_ = rand(shape["T"], shape["K"])'
    assert gate("") == 'g_ = rand(shape["K"])'  # gamma, as before
    assert gate("    assert b.shape == g.shape\n") == 'g_ = rand(shape["K"])'  # two weights
    # read as 2-D (rwkv6's decay `w`, unpacked `B, T, H, K = w.shape` where it is used)
    assert gate("    T, K = g.shape\n") == 'g_ = rand(shape["T"], shape["K"])'


def test_an_input_asserted_to_have_a_named_inputs_shape_is_drawn_with_its_names() -> None:
    """A vector dot product asserts ``x.shape == y.shape`` and names ``N = x.shape[0]``:
    ``x`` was drawn ``(N,)`` and ``y`` with every dimension of the shape, and the original
    failed on its own assertion. ``y`` is drawn as ``x`` is."""
    import ast
    import inspect

    from tuned.registry.scaffold import infer_inputs
    from tuned.registry.scaffold_source import shape_reads

    fn = ast.parse(
        "def dot(x, y):\n    assert x.shape == y.shape\n    N = x.shape[0]\n    return x\n"
    ).body[0]
    assert isinstance(fn, ast.FunctionDef)
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in ("x", "y")]
    lines, todo = infer_inputs(params, {"M": 4, "N": 8}, reads=shape_reads(fn))
    assert not todo and 'x = rand(shape["N"])' in lines and 'y = rand(shape["N"])' in lines, lines


def test_dimensions_named_one_by_one_draw_the_tensor_with_those_names() -> None:
    """gemlite's GEMM reads ``M, K, N = x.shape[0], x.shape[1], W_q.shape[1]``: with
    ``--shape M=..,K=..,N=..``, ``x`` was drawn 3-D (every dimension of the shape, in order)
    where the launcher reads it as ``(M, K)``. A tensor whose read dimensions are each bound
    to a name is drawn with those names; one with a dimension left unnamed as before."""
    import ast
    import inspect

    from tuned.registry.scaffold import infer_inputs
    from tuned.registry.scaffold_source import shape_reads

    fn = ast.parse(
        textwrap.dedent(
            """
            def gemm(x, W_q, y):
                M, K, N = x.shape[0], x.shape[1], W_q.shape[1]
                rows = y.size(0)
                cols = y.shape[1]
                return x
            """
        )
    ).body[0]
    assert isinstance(fn, ast.FunctionDef)
    reads = shape_reads(fn)
    assert reads["x"].names == ("M", "K") and reads["y"].names == ("rows", "cols")
    assert reads["W_q"].names == () and reads["W_q"].rank == 2  # dimension 0: no name
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in ("x", "W_q")]
    lines, todo = infer_inputs(params, {"M": 16, "K": 64, "N": 32}, reads=reads)
    assert not todo and 'x = rand(shape["M"], shape["K"])' in lines, lines
    assert 'W_q = rand(shape["M"], shape["K"], shape["N"])' in lines, lines


SELF_CONTAINED = """
import torch
import triton
import triton.language as tl


@triton.jit
def _rowsum(a_ptr, out_ptr, K, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + tl.program_id(0), tl.sum(tl.load(a_ptr + offs, mask=offs < K), 0))


def run(M, N, K, device="cpu"):
    a = torch.randn(M, K, device=device)
    out = torch.zeros((M,), device=device)
    _rowsum[(M,)](a, out, K, BLOCK=triton.next_power_of_2(K))
    return out
"""


def test_a_parameter_passed_as_a_size_is_a_dimension_or_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run(M, N, K)`` makes its own tensors from sizes: ``K``, which ``--shape`` lacks, was
    drawn as a tensor and ``torch.randn`` refused it on the device; it is asked for, and a
    shape that names it gives it. The same when the module only reads from its source."""
    from tuned.registry.scaffold import add_entry

    site = tmp_path / "site"
    site.mkdir()
    (site / "selfmade.py").write_text(SELF_CONTAINED)
    (site / "gpuonly_selfmade.py").write_text(
        SELF_CONTAINED.replace("import triton\n", NO_DRIVER, 1)
    )
    monkeypatch.syspath_prepend(str(site))
    for module in ("selfmade", "gpuonly_selfmade"):
        added = add_entry(f"{module}.run", [{"M": 4, "N": 8}], ["float32"], tmp_path / module)
        assert any(t.startswith("K (an integer the launcher passes as a size") for t in added.todo)
        assert "K = rand" not in (added.directory / "entry.py").read_text()
        named = add_entry(
            f"{module}.run", [{"M": 4, "N": 8, "K": 16}], ["float32"], tmp_path / f"{module}2"
        )
        assert not named.todo, named.todo
        assert 'K = shape["K"]' in (named.directory / "entry.py").read_text()


#: A library that defines its launcher only where a condition of its own holds, and binds a
#: stand-in that raises elsewhere (torchao: ``if has_triton(): ... else: def op(...): raise``).
GUARDED_SOURCE = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl

    _AVAILABLE = False  # a GPU generation, has_triton(): false on this machine

    if _AVAILABLE:

        @triton.jit
        def _double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

        def double_into(x, out):
            _double[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
            return out

    else:

        def double_into(*args, **kwargs):
            raise NotImplementedError("double_into needs a GPU")
    """
)


def test_add_reads_the_definition_behind_a_stand_in_that_only_raises(tmp_path: Path) -> None:
    """The module imports, but what it binds here is the stand-in: ``registry add`` read its
    ``*args`` (a TODO) and took it for a launcher that returns nothing; it now reads the
    definition the source holds, and says why."""
    user_package(tmp_path, "guardedpkg", "ops", GUARDED_SOURCE)
    added = ktuned(
        "registry",
        "add",
        "guardedpkg.ops.double_into",
        "--shape",
        "N=64",
        "--out",
        tmp_path / "reg",
        path=tmp_path,
    )
    assert added.returncode == 0, added.stdout + added.stderr
    assert "as imported here only raises" in added.stdout, added.stdout
    entry = tmp_path / "reg" / "double_into"
    inputs = (entry / "entry.py").read_text()
    assert 'x = rand(shape["N"])' in inputs and "out = torch.zeros(" in inputs, inputs
    assert "TODO" not in inputs
    yaml = (entry / "kernel.yaml").read_text()
    assert "returns nothing" not in yaml and "outputs: [out]" in yaml, yaml


#: Launchers that take an axis, as PyTorch's operators do: one loops over the leading axes
#: (``range(dim)``, read as a size before), one indexes the shape with it.
AXIS_SOURCE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def double_along(x, dim):
    dim = dim % x.ndim
    rows = 1
    for i in range(dim):
        rows *= x.shape[i]
    out = torch.empty_like(x)
    _scale[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out


def double_over(x, dim):
    dim = [d % x.ndim for d in dim]
    out = torch.empty_like(x)
    _scale[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out


def double_picked(x, axis, index):
    assert index.max() < x.size(axis)
    out = torch.empty_like(x)
    _scale[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out
"""


def test_a_dim_used_as_an_axis_is_the_last_axis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``softmax(x, dim)`` (``range(dim)`` over the leading axes) had ``dim`` asked for as a
    size only production knows; ``index_select(x, dim, index)`` had it drawn as a tensor,
    which its ``dim % x.ndim`` refused. A ``dim`` or ``axis`` the launcher uses as an axis is
    the last one, with a comment; the entries run. The same read from source."""
    from tuned.registry.scaffold import add_entry

    site = tmp_path / "site"
    site.mkdir()
    (site / "axes.py").write_text(AXIS_SOURCE)
    (site / "gpuonly_axes.py").write_text(AXIS_SOURCE.replace("import triton\n", NO_DRIVER, 1))
    monkeypatch.syspath_prepend(str(site))
    entries = []
    for module in ("axes", "gpuonly_axes"):
        along = add_entry(
            f"{module}.double_along", [{"M": 4, "N": 8}], ["float32"], tmp_path / module
        )
        picked = add_entry(
            f"{module}.double_picked", [{"M": 4, "N": 8}], ["float32"], tmp_path / module
        )
        assert not along.todo and not picked.todo, (along.todo, picked.todo)
        for added, name in ((along, "dim"), (picked, "axis")):
            text = (added.directory / "entry.py").read_text()
            assert f"{name} = 1  # the last axis" in text, text
        entries.append(picked.directory)
        # a list of axes (`mean_dim(x, dim)` iterates it): the last one, in a list
        over = add_entry(
            f"{module}.double_over", [{"M": 4, "N": 8}], ["float32"], tmp_path / module
        )
        assert not over.todo, over.todo
        assert "dim = [1]  # the last axis" in (over.directory / "entry.py").read_text()
    entry = _import_entry(entries[0])
    _, axis, index = entry.make_inputs({"M": 4, "N": 8}, torch.float32, "cpu", 0)
    assert axis == 1 and index.dtype == torch.int64


def _import_entry(directory: Path) -> Any:
    spec = importlib.util.spec_from_file_location("ktuned_axis_entry", directory / "entry.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_attribute_read_under_an_isinstance_test_does_not_make_a_tensor_an_object() -> None:
    """Liger's forwards read ``X.full_tensor()`` under ``if isinstance(X, DTensor):``: the
    input was asked for as "an object" (a TODO), though a plain tensor skips that branch.
    An attribute read outside such a test still asks."""
    import ast

    from tuned.registry.scaffold_source import object_params

    fn = ast.parse(
        textwrap.dedent(
            """
            def forward(ctx, X, W, layer):
                if isinstance(X, DTensor) and X.device_mesh is not None:
                    X = X.full_tensor()
                return layer.weight * X * W
            """
        )
    ).body[0]
    assert isinstance(fn, ast.FunctionDef)
    assert object_params(fn) == {"layer": "weight"}
