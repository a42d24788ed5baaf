"""The static gate for LLM-written modules: AST rules checked before any worker time.

The minimal gate (:func:`tuned.evaluation.static.static_check`) only asks that a module parse
and define its launcher. A module an LLM wrote must also show, statically, that it is an
honest Triton kernel of the same interface. Rules (the id is recorded with the rejection):

================  ==========================================================================
rule              refuses
================  ==========================================================================
``syntax``        a module that does not parse
``imports``       imports outside :data:`ALLOWED_IMPORTS` (torch, triton, math, typing, ...)
``forbidden``     exec/eval/compile/open/__import__/getattr/setattr/globals ..., dunder
                  access (``__dict__``, ``__globals__`` ...), torch.cuda streams, events and
                  graphs, torch.compile/jit/ops/library/backends/utils ...
``module_state``  module-level statements other than imports, functions, docstrings and
                  constants (no caches, no classes, no code run at import); ``global``
``monkey_patch``  assignments to attributes of imported modules (``torch.add = ...``)
``launcher``      no top-level launcher function
``signature``     a launcher whose parameters (names, order, kinds) differ from the original's
                  (a reference entry's first modules: the reference's parameters first, in
                  order, and any further parameter with a default: the knobs)
``no_kernel``     no ``@triton.jit`` function
``not_launched``  no ``kernel[grid](...)`` launch reachable from the launcher
``torch_compute`` torch compute standing in for the kernel in the launcher or what it calls:
                  torch functions outside allocation/shape (:data:`TORCH_ALLOWED`),
                  ``torch.nn``, tensor compute methods (``x.sum()``), ``@``, arithmetic on
                  the input tensors, or a call of the PyTorch reference
================  ==========================================================================

Runtime checks (:mod:`tuned.evaluation.checks`) still run on everything that passes: this
gate is the cheap first line, not the only one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

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

ALLOWED_IMPORTS = frozenset({"torch", "triton", "math", "typing", "__future__", "numbers"})

#: ``torch.<name>`` calls a launcher may make: allocation, dtype and shape helpers.
TORCH_ALLOWED = frozenset(
    {
        "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like",
        "full", "full_like", "arange", "finfo", "iinfo", "Size", "device", "is_tensor",
        "result_type", "promote_types", "broadcast_shapes", "is_floating_point",
        "get_default_dtype",
    }
)  # fmt: skip

#: ``torch.<name>`` namespaces never allowed (anywhere in the module).
TORCH_FORBIDDEN = frozenset(
    {
        "cuda", "ops", "library", "compile", "jit", "_dynamo", "_inductor", "utils",
        "backends", "hub", "distributed", "multiprocessing", "autograd", "_C", "testing",
        "set_default_dtype", "manual_seed", "use_deterministic_algorithms", "fx", "export",
    }
)  # fmt: skip

_FORBIDDEN_NAMES = frozenset(
    {
        "exec", "eval", "compile", "open", "__import__", "getattr", "setattr", "delattr",
        "globals", "locals", "vars", "breakpoint", "input", "memoryview", "__builtins__",
        "os", "sys", "subprocess", "socket", "threading", "multiprocessing", "ctypes",
        "importlib", "builtins", "signal", "time",
    }
)  # fmt: skip

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
    }
)  # fmt: skip

_TRITON_DECORATORS = frozenset({"jit", "autotune", "heuristics"})


@dataclass(frozen=True)
class GateRejection:
    """A rule the module breaks, with where and why."""

    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


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


def _dotted(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; ``None`` when the root is not a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _is_jit(fn: ast.FunctionDef, aliases: dict[str, str]) -> bool:
    for deco in fn.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        path = _dotted(target)
        if path is None:
            continue
        full = [*aliases.get(path[0], path[0]).split("."), *path[1:]]
        if full[0] == "triton" and full[-1] in _TRITON_DECORATORS:
            return True
    return False


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted module/attribute path, for every import."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    out[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    out[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return out


def check_llm_module(
    source: str, *, launcher: str, original_source: str, reference: str | None = None
) -> GateRejection | None:
    """``None`` if ``source`` passes every rule, else the first rule it breaks."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return GateRejection("syntax", f"line {exc.lineno}: {exc.msg}")
    for check in (_imports, _forbidden, _module_state):
        found = check(tree)
        if found is not None:
            return found
    aliases = _aliases(tree)
    found = _monkey_patch(tree, aliases)
    if found is not None:
        return found
    functions = _functions(tree)
    if launcher not in functions:
        return GateRejection("launcher", f"no top-level function {launcher}() (the launcher)")
    found = _signature(functions[launcher], original_source, launcher, reference)
    if found is not None:
        return found
    kernels = {name for name, fn in functions.items() if _is_jit(fn, aliases)}
    if not kernels:
        return GateRejection("no_kernel", "no @triton.jit function in the module")
    reachable = _reachable(launcher, functions, kernels)
    if not any(_launches(functions[name], kernels) for name in reachable):
        return GateRejection(
            "not_launched",
            f"{launcher}() never launches a @triton.jit kernel (kernel[grid](...)), "
            f"directly or through the functions it calls",
        )
    if reference and reference in reachable:
        return GateRejection(
            "torch_compute", f"{launcher}() calls {reference}(), the PyTorch reference"
        )
    inputs = {
        a.arg
        for a in functions[launcher].args.args[
            : len(functions[launcher].args.args) - len(functions[launcher].args.defaults)
        ]
    }
    for name in sorted(reachable):
        found = _torch_compute(functions[name], aliases, inputs if name == launcher else set())
        if found is not None:
            return found
    return None


def _imports(tree: ast.Module) -> GateRejection | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                return GateRejection("imports", f"line {node.lineno}: relative import")
            names = [node.module or ""]
        else:
            continue
        for name in names:
            if name.split(".")[0] not in ALLOWED_IMPORTS:
                allowed = ", ".join(sorted(ALLOWED_IMPORTS))
                return GateRejection(
                    "imports", f"line {node.lineno}: imports {name} (allowed: {allowed})"
                )
    return None


def _forbidden(tree: ast.Module) -> GateRejection | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in _FORBIDDEN_NAMES:
            return GateRejection("forbidden", f"line {node.lineno}: uses {node.id}")
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("__") and node.attr.endswith("__"):
                return GateRejection("forbidden", f"line {node.lineno}: accesses {node.attr}")
            path = _dotted(node)
            if path and path[0] == "torch" and len(path) > 1 and path[1] in TORCH_FORBIDDEN:
                return GateRejection("forbidden", f"line {node.lineno}: uses torch.{path[1]}")
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return GateRejection(
                "module_state", f"line {node.lineno}: global/nonlocal state ({node.names[0]})"
            )
        if isinstance(node, ast.ImportFrom) and node.module == "torch":
            for alias in node.names:
                if alias.name in TORCH_FORBIDDEN:
                    return GateRejection(
                        "forbidden", f"line {node.lineno}: imports torch.{alias.name}"
                    )
    return None


def _constant(node: ast.expr) -> bool:
    """Literals, tuples of literals, dtype-like attributes and ``tl.constexpr(literal)``."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Tuple):
        return all(_constant(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp):
        return _constant(node.operand)
    if isinstance(node, ast.BinOp):
        return _constant(node.left) and _constant(node.right)
    if isinstance(node, ast.Attribute):
        return _dotted(node) is not None
    if isinstance(node, ast.Call):
        path = _dotted(node.func)
        return path is not None and path[-1] == "constexpr" and all(_constant(a) for a in node.args)
    return False


def _module_state(tree: ast.Module) -> GateRejection | None:
    for i, node in enumerate(tree.body):
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef)):
            continue
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and i == 0
        ):
            continue  # the docstring
        if (
            isinstance(node, ast.Assign)
            and _constant(node.value)
            and all(isinstance(t, ast.Name) for t in node.targets)
        ):
            continue
        if (
            isinstance(node, ast.AnnAssign)
            and node.value is not None
            and _constant(node.value)
            and isinstance(node.target, ast.Name)
        ):
            continue
        what = type(node).__name__
        return GateRejection(
            "module_state",
            f"line {node.lineno}: a module-level {what}; only imports, functions, a docstring "
            "and constants are allowed (no caches, classes or code run at import)",
        )
    return None


def _monkey_patch(tree: ast.Module, aliases: dict[str, str]) -> GateRejection | None:
    for node in ast.walk(tree):
        targets: Iterable[ast.expr] = ()
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = (node.target,)
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            if isinstance(target, ast.Attribute):
                path = _dotted(target)
                if path and path[0] in aliases:
                    return GateRejection(
                        "monkey_patch",
                        f"line {target.lineno}: assigns {'.'.join(path)} (an imported module)",
                    )
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


def _calls(fn: ast.FunctionDef) -> Iterator[ast.Call]:
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            yield node


def _reachable(root: str, functions: dict[str, ast.FunctionDef], kernels: set[str]) -> set[str]:
    """Non-jit module functions reachable from ``root`` by calls by name (``root`` too)."""
    seen = {root}
    todo = [root]
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
    fn: ast.FunctionDef, aliases: dict[str, str], inputs: set[str]
) -> GateRejection | None:
    where = f"in {fn.name}()"
    for node in ast.walk(fn):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            return GateRejection("torch_compute", f"line {node.lineno} {where}: a @ matmul")
        if isinstance(node, (ast.BinOp, ast.AugAssign)):
            operands = (node.left, node.right) if isinstance(node, ast.BinOp) else (node.target,)
            for side in operands:
                if isinstance(side, ast.Name) and side.id in inputs:
                    return GateRejection(
                        "torch_compute",
                        f"line {node.lineno} {where}: arithmetic on the input tensor {side.id}",
                    )
        if not isinstance(node, ast.Call):
            continue
        path = _dotted(node.func)
        if path is None:
            continue
        full = [*aliases.get(path[0], path[0]).split("."), *path[1:]]
        if full[0] == "torch":
            if len(full) == 2 and full[1] in TORCH_ALLOWED:
                continue
            return GateRejection(
                "torch_compute",
                f"line {node.lineno} {where}: calls {'.'.join(full)} (a launcher may only "
                "allocate and reshape with torch; the kernel computes)",
            )
        if len(path) >= 2 and path[0] not in aliases and path[-1] in TENSOR_COMPUTE:
            return GateRejection(
                "torch_compute",
                f"line {node.lineno} {where}: computes with the tensor method .{path[-1]}()",
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
