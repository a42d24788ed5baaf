"""The static gate for LLM-written modules: AST rules checked before any worker time.

The minimal gate (:func:`tuned.evaluation.static.static_check`) only asks that a module parse
and define its launcher. A module an LLM wrote must also show, statically, that it is an
honest Triton kernel of the same interface, written with nothing but an allowlist.

First the allowlist rules of :mod:`tuned.llm.gate_rules` (``imports``, ``forbidden``,
``dunder``, ``module_attr``, ``alias``, ``private``, ``introspection``, ``builtins``,
``monkey_patch``, ``module_state``, ``default``, ``decorator``): only triton,
``triton.language``, math and allowlisted torch tensor operations
(:mod:`tuned.llm.allowlist`) can be named, nothing is reached through module attributes,
and nothing runs at import beyond definitions. Then the rules of this module (the id is
recorded with the rejection):

================  ==========================================================================
rule              refuses
================  ==========================================================================
``syntax``        a module that does not parse (or nests too deeply to check)
``launcher``      no top-level launcher function
``signature``     a launcher whose parameters (names, order, kinds) differ from the original's
                  (a reference entry's first modules: the reference's parameters first, in
                  order, and any further parameter with a default: the knobs)
``no_kernel``     no ``@triton.jit`` function
``not_launched``  no ``kernel[grid](...)`` launch reachable from the launcher
``torch_compute`` torch compute standing in for the kernel in the launcher, what it calls,
                  the kernels' decorators (heuristics, hooks) or a kernel body: torch
                  functions outside allocation/shape (:data:`TORCH_ALLOWED`), ``torch.nn``,
                  tensor compute methods (``x.sum()``), ``@``, arithmetic on the input
                  tensors, or a call of the PyTorch reference
================  ==========================================================================

This gate is the early filter, not the defense: whatever passes runs in the sandboxed
worker, and the verdict is taken outside it (docs/evaluation.md).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tuned.llm.allowlist import (
    TORCH_ALLOWED,
    TORCH_DTYPES,
    TORCH_FORMATS,
    TRITON_DECORATORS,
    path_kind,
)
from tuned.llm.gate_rules import GateRejection, import_aliases, resolve, safety_rejection
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.registry.spec import KernelSpec

__all__ = [
    "ALLOWED_IMPORTS",
    "TORCH_ALLOWED",
    "GateRejection",
    "check_llm_module",
    "gate_result",
    "launcher_signature",
]

#: The top-level modules a module may import from (the prompt lists them; the exact
#: allowlist of submodules and names is :mod:`tuned.llm.allowlist`).
ALLOWED_IMPORTS = frozenset({"torch", "triton", "math", "typing", "__future__"})

#: Tensor methods that compute (a launcher may allocate, view and reshape, not compute).
TENSOR_COMPUTE = frozenset(
    {
        "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "matmul", "mm", "bmm",
        "addmm", "baddbmm", "sum", "mean", "prod", "cumsum", "cumprod", "max", "min", "amax",
        "amin", "argmax", "argmin", "softmax", "log_softmax", "exp", "exp_", "log", "sqrt",
        "rsqrt", "pow", "tanh", "sigmoid", "relu", "gelu", "silu", "norm", "var", "std",
        "clamp", "clamp_", "abs", "neg", "reciprocal", "copy_", "index_add", "index_add_",
        "scatter", "scatter_", "scatter_add", "gather", "sort", "topk", "where", "einsum",
        "masked_fill", "masked_fill_", "lerp", "addcmul", "addcdiv", "dot", "outer",
        "layer_norm", "linear", "conv1d", "conv2d", "logsumexp", "square", "erf",
        "fill_", "zero_", "apply_", "map_", "index_put_", "put_", "lerp_",
    }
)  # fmt: skip

#: What the launcher and what it calls may name of torch: allocation and shape helpers,
#: dtypes, memory formats, and the no-grad contexts (no compute).
_LAUNCHER_TORCH = frozenset(
    f"torch.{n}"
    for n in TORCH_ALLOWED
    | TORCH_DTYPES
    | TORCH_FORMATS
    | {"Tensor", "dtype", "no_grad", "inference_mode"}
)


def launcher_signature(source: str, launcher: str) -> str | None:
    """``name(params)`` of the launcher in ``source`` (for prompts); ``None`` if absent."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == launcher:
            return f"{launcher}({ast.unparse(node.args)})"
    return None


def _param_shape(args: ast.arguments) -> list[tuple[str, str]]:
    shape = [(a.arg, "positional-only") for a in args.posonlyargs]
    shape += [(a.arg, "positional") for a in args.args]
    if args.vararg is not None:
        shape.append((args.vararg.arg, "*args"))
    shape += [(a.arg, "keyword-only") for a in args.kwonlyargs]
    if args.kwarg is not None:
        shape.append((args.kwarg.arg, "**kwargs"))
    return shape


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _is_jit(fn: ast.FunctionDef, aliases: dict[str, str]) -> bool:
    for deco in fn.decorator_list:
        path = resolve(deco.func if isinstance(deco, ast.Call) else deco, aliases)
        if path is not None and path in {f"triton.{d}" for d in TRITON_DECORATORS}:
            return True
    return False


def check_llm_module(
    source: str, *, launcher: str, original_source: str, reference: str | None = None
) -> GateRejection | None:
    """``None`` if ``source`` passes every rule, else the first rule it breaks."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return GateRejection("syntax", f"line {exc.lineno}: {exc.msg}")
    except (ValueError, RecursionError, MemoryError) as exc:
        return GateRejection("syntax", f"cannot parse: {type(exc).__name__}")
    try:
        return _check_tree(tree, launcher, original_source, reference)
    except RecursionError:
        return GateRejection("syntax", "nested too deeply to check")


def _check_tree(
    tree: ast.Module, launcher: str, original_source: str, reference: str | None
) -> GateRejection | None:
    found = safety_rejection(tree)
    if found is not None:
        return found
    aliases = import_aliases(tree)
    functions = _functions(tree)
    if launcher not in functions:
        return GateRejection("launcher", f"no top-level function {launcher}() (the launcher)")
    found = _signature(functions[launcher], original_source, launcher, reference)
    if found is not None:
        return found
    kernels = {name for name, fn in functions.items() if _is_jit(fn, aliases)}
    if not kernels:
        return GateRejection("no_kernel", "no @triton.jit function in the module")
    reachable = _reachable([launcher], functions, kernels)
    if not any(_launches(functions[name], kernels) for name in reachable):
        return GateRejection(
            "not_launched",
            f"{launcher}() never launches a @triton.jit kernel (kernel[grid](...)), "
            f"directly or through the functions it calls",
        )
    # What runs at launch besides the launcher: the kernels' decorators (heuristics
    # lambdas, autotune hooks) and the functions they name.
    decorations = [d for name in sorted(kernels) for d in functions[name].decorator_list]
    hooks = {
        n.id for d in decorations for n in ast.walk(d)
        if isinstance(n, ast.Name) and n.id in functions and n.id not in kernels
    }  # fmt: skip
    reachable |= _reachable(sorted(hooks), functions, kernels)
    if reference and reference in reachable:
        return GateRejection(
            "torch_compute", f"{launcher}() calls {reference}(), the PyTorch reference"
        )
    fn = functions[launcher]
    inputs = {a.arg for a in fn.args.args[: len(fn.args.args) - len(fn.args.defaults)]}
    for name in sorted(reachable):
        found = _torch_compute(
            functions[name], f"in {name}()", aliases, inputs if name == launcher else set()
        )
        if found is not None:
            return found
    for deco in decorations:
        found = _torch_compute(deco, "in a kernel decorator", aliases, set())
        if found is not None:
            return found
    for name in sorted(kernels):
        found = _torch_in_kernel(functions[name], aliases)
        if found is not None:
            return found
    return None


def _signature(
    fn: ast.FunctionDef, original_source: str, launcher: str, reference: str | None = None
) -> GateRejection | None:
    try:
        defined = _functions(ast.parse(original_source))
    except SyntaxError:
        defined = {}
    original = defined.get(launcher)
    if original is None:
        ref = defined.get(reference or "")
        return None if ref is None else _reference_signature(fn, ref, launcher)
    if _param_shape(fn.args) != _param_shape(original.args):
        return GateRejection(
            "signature",
            f"the launcher's parameters changed: was {launcher}({ast.unparse(original.args)}),"
            f" now {launcher}({ast.unparse(fn.args)})",
        )
    return None


def _reference_signature(
    fn: ast.FunctionDef, ref: ast.FunctionDef, launcher: str
) -> GateRejection | None:
    """A reference entry's launcher: the reference's parameters first (same names, order and
    kinds), then only parameters with a default (knobs, passed by keyword)."""
    want = _param_shape(ref.args)
    have = _param_shape(fn.args)
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    defaulted = {a.arg for a in positional[len(positional) - len(args.defaults) :]}
    defaulted |= {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None}
    extra = have[len(want) :]
    if have[: len(want)] != want or any(
        name not in defaulted for name, kind in extra if kind not in ("*args", "**kwargs")
    ):
        return GateRejection(
            "signature",
            f"the launcher must take the reference's parameters, then only knobs with "
            f"defaults: want {launcher}({ast.unparse(ref.args)}, <knob>=<default>, ...), "
            f"got {launcher}({ast.unparse(fn.args)})",
        )
    return None


def _calls(node: ast.AST) -> Iterator[ast.Call]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            yield sub


def _reachable(
    roots: list[str], functions: dict[str, ast.FunctionDef], kernels: set[str]
) -> set[str]:
    """Non-jit module functions named (called or passed) from ``roots``, roots included."""
    seen = set(roots)
    todo = list(roots)
    while todo:
        fn = functions[todo.pop()]
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Name)
                and node.id in functions
                and node.id not in kernels
                and node.id not in seen
            ):
                seen.add(node.id)
                todo.append(node.id)
    return seen


def _launches(fn: ast.FunctionDef, kernels: set[str]) -> bool:
    for call in _calls(fn):
        if isinstance(call.func, ast.Subscript):
            value = call.func.value
            if isinstance(value, ast.Name) and value.id in kernels:
                return True
    return False


def _torch_compute(
    root: ast.AST, where: str, aliases: dict[str, str], inputs: set[str]
) -> GateRejection | None:
    for node in ast.walk(root):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            return GateRejection("torch_compute", f"line {node.lineno} {where}: a @ matmul")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _BUILTIN_MATH
            and _bare_inputs(node.args, inputs)
        ):
            return GateRejection(
                "torch_compute",
                f"line {node.lineno} {where}: {node.func.id}() of the input tensors",
            )
        if isinstance(node, (ast.BinOp, ast.AugAssign)):
            operands = (
                (node.left, node.right)
                if isinstance(node, ast.BinOp)
                else (node.target, node.value)
            )
            for side in operands:
                if isinstance(side, ast.Name) and side.id in inputs:
                    return GateRejection(
                        "torch_compute",
                        f"line {node.lineno} {where}: arithmetic on the input tensor {side.id}",
                    )
        path = resolve(node, aliases) if isinstance(node, (ast.Attribute, ast.Name)) else None
        if (
            isinstance(node, (ast.Attribute, ast.Name))
            and path is not None
            and path.startswith("torch.")
            and path not in _LAUNCHER_TORCH
            and path_kind(path) != "module"  # torch.nn.functional of F.relu: F.relu decides
        ):
            return GateRejection(
                "torch_compute",
                f"line {node.lineno} {where}: uses {path} (a launcher may only "
                "allocate and reshape with torch; the kernel computes)",
            )
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if resolve(node.func, aliases) is None and node.func.attr in TENSOR_COMPUTE:
            return GateRejection(
                "torch_compute",
                f"line {node.lineno} {where}: computes with the tensor method .{node.func.attr}()",
            )
    return None


#: Builtins that compute on tensors given to them (``sum((x, y))`` adds two tensors).
_BUILTIN_MATH = frozenset({"sum", "abs", "pow", "round", "divmod", "min", "max"})


def _bare_inputs(args: list[ast.expr], inputs: set[str]) -> bool:
    """Whether an input tensor is passed as a value (``x``, ``(x, y)``, ``*[x]``), not only
    through a method such as ``x.numel()``."""
    todo = list(args)
    while todo:
        arg = todo.pop()
        if isinstance(arg, ast.Name) and arg.id in inputs:
            return True
        if isinstance(arg, (ast.Tuple, ast.List, ast.Set)):
            todo.extend(arg.elts)
        elif isinstance(arg, ast.Starred):
            todo.append(arg.value)
    return False


def _torch_in_kernel(fn: ast.FunctionDef, aliases: dict[str, str]) -> GateRejection | None:
    """A ``@triton.jit`` body names no torch (in the interpreter it would run as Python)."""
    annotations = {
        id(n) for a in fn.args.args if a.annotation is not None for n in ast.walk(a.annotation)
    }
    for node in ast.walk(fn):
        if id(node) in annotations or not isinstance(node, (ast.Attribute, ast.Name)):
            continue
        path = resolve(node, aliases)
        if path is not None and (path == "torch" or path.startswith("torch.")):
            return GateRejection(
                "torch_compute",
                f"line {node.lineno} in the kernel {fn.name}(): uses {path} (a kernel "
                "computes with triton.language only)",
            )
    return None


def gate_result(
    spec: KernelSpec, candidate: Candidate, *, original_source: str | None = None
) -> EvalResult | None:
    """The ``rejected_static`` result of an LLM-written candidate that breaks a rule
    (``metadata["gate_rule"]`` names it); ``None`` for a candidate that passes or that no
    LLM wrote (those get the minimal gate in the evaluation client).

    ``original_source``: the module whose launcher signature must be kept, when it is not
    the entry's own (a reference entry's first correct LLM-written module, its *seed*)."""
    if candidate.provenance is not Provenance.LLM:
        return None
    rejection = check_llm_module(
        candidate.source,
        launcher=spec.launcher,
        original_source=spec.module_source if original_source is None else original_source,
        reference=spec.reference,
    )
    if rejection is None:
        return None
    return EvalResult(
        Outcome.REJECTED_STATIC,
        reason=str(rejection),
        phase="static",
        metadata={"gate_rule": rejection.rule},
    )
