"""What an LLM-written module may name: the allowlist behind :mod:`tuned.llm.gate`.

The gate resolves every name an expression starts from (``import triton.language as tl``
makes ``tl.load`` the path ``triton.language.load``) and accepts a path only when it is in
one of these tables. Nothing else of a module is reachable: ``torch.sys``, ``torch._C``,
``torch.ops``, ``tl.core`` and every module attribute not listed are refused, so the standard
library cannot be reached through an allowed import.

Three kinds of path:

* **modules** (:data:`ALLOWED_MODULES`): what may be imported; a module is only a prefix,
  never a value (``t = torch`` is an alias and refused);
* **callables** (:func:`path_kind` ``"call"``): functions that must be called where they are
  named (``torch.add`` passed or assigned would hide a call from the gate's other rules);
* **values** (``"value"``): dtypes, constants and the few classes used in annotations and
  ``isinstance`` (``torch.float16``, ``tl.constexpr``, ``math.pi``, ``torch.Tensor``).

The tables are static on purpose: they do not depend on the installed Triton or PyTorch, so
the gate says the same everywhere. A path missing here that a real kernel needs is added
here, by name, after checking what it returns.
"""

from __future__ import annotations

import math
from typing import Literal

__all__ = [
    "ALLOWED_MODULES",
    "SAFE_BUILTINS",
    "TORCH_ALLOWED",
    "TORCH_DTYPES",
    "TORCH_FORMATS",
    "TRITON_DECORATORS",
    "path_kind",
]

#: Modules a module may import (``import x.y``, ``from x import y`` where ``x.y`` is one).
ALLOWED_MODULES = frozenset(
    {
        "__future__", "math", "typing", "torch", "torch.nn", "torch.nn.functional",
        "triton", "triton.language", "triton.language.math", "triton.language.extra",
        "triton.language.extra.libdevice", "triton.language.extra.cuda",
        "triton.language.extra.cuda.libdevice",
    }
)  # fmt: skip

#: ``torch.<name>`` calls a launcher may make: allocation, dtype and shape helpers.
TORCH_ALLOWED = frozenset(
    {
        "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like",
        "full", "full_like", "arange", "finfo", "iinfo", "Size", "device", "is_tensor",
        "result_type", "promote_types", "broadcast_shapes", "is_floating_point",
        "get_default_dtype",
    }
)  # fmt: skip

TORCH_DTYPES = frozenset(
    {
        "float16", "float32", "float64", "bfloat16", "half", "float", "double", "int8",
        "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "long",
        "int", "short", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2",
        "float8_e4m3fnuz", "float8_e5m2fnuz",
    }
)  # fmt: skip

#: Memory formats and layouts (``torch.empty_like(x, memory_format=...)``).
TORCH_FORMATS = frozenset({"contiguous_format", "preserve_format", "channels_last", "strided"})

_TORCH_VALUES = TORCH_DTYPES | TORCH_FORMATS | {"Tensor", "dtype", "device", "Size", "Generator"}

#: Tensor operations a module may call outside its launcher (its reference, its inputs);
#: the launcher and what it calls are held to :data:`TORCH_ALLOWED` by the gate.
_TORCH_OPS = TORCH_ALLOWED | frozenset(
    {
        "add", "sub", "mul", "div", "true_divide", "floor_divide", "matmul", "mm", "bmm",
        "addmm", "addmv", "mv", "baddbmm", "einsum", "tensordot", "outer", "dot", "kron",
        "sum", "mean", "prod", "cumsum", "cumprod", "max", "min", "amax", "amin", "argmax",
        "argmin", "var", "std", "var_mean", "std_mean", "median", "norm", "logsumexp",
        "nansum", "nanmean", "all", "any", "count_nonzero", "softmax", "log_softmax",
        "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "pow",
        "square", "abs", "neg", "sign", "reciprocal", "tanh", "sigmoid", "relu", "erf",
        "erfc", "erfinv", "sin", "cos", "tan", "sinh", "cosh", "floor", "ceil", "round",
        "trunc", "frac", "fmod", "remainder", "clamp", "clip", "maximum", "minimum", "fmax",
        "fmin", "where", "lerp", "addcmul", "addcdiv", "isnan", "isinf", "isfinite",
        "nan_to_num", "allclose", "isclose", "equal", "eq", "ne", "lt", "le", "gt", "ge",
        "logical_and", "logical_or", "logical_not", "bitwise_and", "bitwise_or",
        "bitwise_xor", "bitwise_not", "cat", "concat", "stack", "split", "chunk", "reshape",
        "flatten", "transpose", "permute", "squeeze", "unsqueeze", "narrow", "t", "movedim",
        "repeat_interleave", "tile", "broadcast_to", "flip", "roll", "tril", "triu", "eye",
        "linspace", "diag", "diagonal", "gather", "scatter", "scatter_add", "index_select",
        "masked_select", "masked_fill", "take_along_dim", "sort", "argsort", "topk",
        "cdist", "clone", "tensor", "as_tensor", "randn", "rand", "randint", "randn_like",
        "rand_like", "randint_like", "randperm", "normal", "bernoulli", "multinomial",
        "no_grad", "inference_mode", "layer_norm", "group_norm", "conv1d", "conv2d",
    }
)  # fmt: skip

_NN_FUNCTIONAL = frozenset(
    {
        "softmax", "log_softmax", "softmin", "layer_norm", "rms_norm", "group_norm",
        "batch_norm", "instance_norm", "normalize", "gelu", "silu", "relu", "relu6",
        "leaky_relu", "elu", "selu", "celu", "mish", "hardswish", "hardsigmoid", "hardtanh",
        "softplus", "softsign", "sigmoid", "tanh", "logsigmoid", "glu", "linear", "bilinear",
        "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "avg_pool1d",
        "avg_pool2d", "max_pool1d", "max_pool2d", "adaptive_avg_pool1d",
        "adaptive_avg_pool2d", "pad", "embedding", "one_hot", "cross_entropy", "nll_loss",
        "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div",
        "binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_similarity",
        "pairwise_distance", "scaled_dot_product_attention", "dropout", "interpolate",
        "unfold", "fold",
    }
)  # fmt: skip

#: ``triton.language`` (``tl``): everything public but its submodules and the printers
#: (``device_print`` writes to the worker's stdout).
_TL_CALLS = frozenset(
    {
        "abs", "add", "arange", "argmax", "argmin", "associative_scan", "assume",
        "atomic_add", "atomic_and", "atomic_cas", "atomic_max", "atomic_min", "atomic_or",
        "atomic_xchg", "atomic_xor", "broadcast", "broadcast_to", "cast", "cat", "cdiv",
        "ceil", "clamp", "cos", "cumprod", "cumsum", "debug_barrier", "device_assert",
        "div_rn", "dot", "dot_scaled", "erf", "exp", "exp2", "expand_dims", "fdiv", "flip",
        "floor", "fma", "full", "gather", "histogram", "inline_asm_elementwise",
        "interleave", "join", "load", "load_tensor_descriptor", "log", "log2",
        "make_block_ptr", "make_tensor_descriptor", "max", "max_constancy", "max_contiguous",
        "maximum", "min", "minimum", "mul", "multiple_of", "num_programs", "permute",
        "philox", "program_id", "rand", "rand4x", "randint", "randint4x", "randn", "randn4x",
        "range", "ravel", "reduce", "reshape", "rsqrt", "sigmoid", "sin", "softmax", "sort",
        "split", "sqrt", "sqrt_rn", "squeeze", "static_assert", "static_range", "store",
        "store_tensor_descriptor", "sub", "sum", "swizzle2d", "topk", "trans", "umulhi",
        "unsqueeze", "view", "where", "xor_sum", "zeros", "zeros_like", "uint_to_uniform_float",
        "pair_uniform_to_normal", "to_tensor", "advance",
    }
)  # fmt: skip

_TL_VALUES = frozenset(
    {
        "constexpr", "tensor", "dtype", "pointer_type", "block_type", "float16", "float32",
        "float64", "bfloat16", "float8e4nv", "float8e5", "float8e4b15", "float8e4b8",
        "float8e5b16", "int1", "int8", "int16", "int32", "int64", "uint8", "uint16",
        "uint32", "uint64", "void", "TRITON_MAX_TENSOR_NUMEL",
    }
)  # fmt: skip

_TL_MATH = frozenset(
    {
        "abs", "ceil", "cos", "div_rn", "erf", "exp", "exp2", "fdiv", "floor", "fma", "log",
        "log2", "rsqrt", "sin", "sqrt", "sqrt_rn", "umulhi", "max", "min", "cdiv",
    }
)  # fmt: skip

_LIBDEVICE = frozenset(
    {
        "abs", "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "cbrt", "ceil",
        "copysign", "cos", "cosh", "erf", "erfc", "erfinv", "exp", "exp10", "exp2", "expm1",
        "fast_cosf", "fast_dividef", "fast_expf", "fast_exp10f", "fast_log2f", "fast_logf",
        "fast_log10f", "fast_powf", "fast_sinf", "fast_tanf", "fast_tanhf", "floor", "fma",
        "fmod", "hypot", "isinf", "isnan", "ldexp", "lgamma", "llrint", "log", "log10",
        "log1p", "log2", "nearbyint", "pow", "rcp_rn", "remainder", "rint", "round", "rsqrt",
        "signbit", "sin", "sinh", "sqrt", "tan", "tanh", "trunc", "div_rn", "float_as_int",
        "int_as_float", "popc", "clz", "brev", "mulhi", "sqrt_rn",
    }
)  # fmt: skip

#: ``triton.<name>`` decorators (the only decorators a module may use).
TRITON_DECORATORS = frozenset({"jit", "autotune", "heuristics"})

_TYPING = frozenset(
    {
        "Any", "Optional", "Union", "Tuple", "List", "Dict", "Sequence", "Callable",
        "Iterable", "Mapping",
    }
)  # fmt: skip

_MATH_VALUES = frozenset({"pi", "e", "tau", "inf", "nan"})
_MATH_CALLS = frozenset(
    n for n in dir(math) if not n.startswith("_") and n not in _MATH_VALUES
)  # math holds functions and float constants only

PathKind = Literal["module", "call", "value"]


def _table() -> dict[str, PathKind]:
    kinds: dict[str, PathKind] = {m: "module" for m in ALLOWED_MODULES}
    groups: list[tuple[str, frozenset[str], PathKind]] = [
        ("torch", _TORCH_OPS, "call"),
        ("torch", _TORCH_VALUES, "value"),
        ("torch.nn.functional", _NN_FUNCTIONAL, "call"),
        ("triton", TRITON_DECORATORS | {"Config", "cdiv", "next_power_of_2"}, "call"),
        ("math", _MATH_CALLS, "call"),
        ("math", _MATH_VALUES, "value"),
        ("typing", _TYPING, "value"),
        ("__future__", frozenset({"annotations"}), "value"),
        ("triton.language", _TL_CALLS, "call"),
        ("triton.language", _TL_VALUES, "value"),
        ("triton.language.math", _TL_MATH, "call"),
        ("triton.language.extra.libdevice", _LIBDEVICE, "call"),
        ("triton.language.extra.cuda.libdevice", _LIBDEVICE, "call"),
    ]
    for prefix, names, kind in groups:
        for name in names:
            kinds.setdefault(f"{prefix}.{name}", kind)
    return kinds


_KINDS = _table()


def path_kind(path: str) -> PathKind | None:
    """``"module"``, ``"call"`` or ``"value"`` for an allowed dotted path, else ``None``."""
    return _KINDS.get(path)


#: Builtins a module may name (everything else of ``builtins`` is refused: ``getattr``,
#: ``type``, ``object``, ``print``, ``open``, ``__import__``, ``vars`` ...).
SAFE_BUILTINS = frozenset(
    {
        "abs", "all", "any", "bool", "dict", "divmod", "enumerate", "float", "frozenset",
        "int", "isinstance", "len", "list", "map", "max", "min", "pow", "range", "reversed",
        "round", "set", "slice", "sorted", "str", "sum", "tuple", "zip", "filter", "iter",
        "next", "repr", "hash", "complex", "callable", "chr", "ord", "bin", "hex", "oct",
        "Ellipsis", "NotImplemented", "Exception", "ValueError", "TypeError", "RuntimeError",
        "AssertionError", "NotImplementedError", "IndexError", "KeyError",
        "ZeroDivisionError", "ArithmeticError", "OverflowError", "StopIteration",
    }
)  # fmt: skip
