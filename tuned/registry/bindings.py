"""How a function binds its names, read from its syntax tree (for knob discovery).

:func:`local_bindings` sorts the names a function assigns into *fresh* bindings (a value that
does not read the name itself: ``B = f(n)``, ``B, w = helper(n)``), which a knob may follow
with a transform, and *tangled* ones (``B *= 2``, ``B = min(B, 4096)``, loop and ``with``
targets, walrus), which it leaves alone; and it collects the literal string keys of dicts
the function builds (``kwargs["BLOCK_ROW"] = BLOCK_ROW``), which a launch may expand.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

__all__ = [
    "Local",
    "caller_input",
    "local_bindings",
    "names_in",
    "own_nodes",
    "parameters",
    "returned_sizes",
]


def names_in(node: ast.AST) -> set[str]:
    out = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    out |= {  # META["BLOCK"] in a grid lambda
        n.slice.value
        for n in ast.walk(node)
        if isinstance(n, ast.Subscript)
        and isinstance(n.slice, ast.Constant)
        and isinstance(n.slice.value, str)
    }
    return out


def parameters(fn: ast.FunctionDef) -> dict[str, ast.expr | None]:
    """Keyword-passable parameters of ``fn`` and their defaults (None: no default)."""
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    defaults: dict[str, ast.expr | None] = {p.arg: None for p in args.args}
    for p, d in zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True):
        if p.arg in defaults:
            defaults[p.arg] = d
    defaults.update({p.arg: d for p, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)})
    return defaults


def caller_input(launcher: ast.FunctionDef, name: str) -> bool:
    """True when ``name`` is a parameter of ``launcher`` without a default and in lower case:
    an argument of its API that ``make_inputs`` passes (``launcher(*inputs, **knobs)``), such
    as a quantizer's ``blocksize``, on which the scales' layout depends (transformed, every
    candidate was wrong). One named as a kernel meta-parameter (``BLOCK_M``) is not."""
    if name.upper() == name:
        return False
    args = launcher.args
    positional = [*args.posonlyargs, *args.args]
    without = positional[: len(positional) - len(args.defaults)]
    without += [p for p, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    return any(p.arg == name for p in without)


@dataclass
class Local:
    """How a function binds its names: fresh bindings (statement, value or None for tuple
    unpacking), names rebound in ways discovery does not transform, literal dicts."""

    fresh: dict[str, list[tuple[ast.stmt, ast.expr | None]]] = field(default_factory=dict)
    tangled: set[str] = field(default_factory=set)
    dicts: dict[str, dict[str, ast.expr]] = field(default_factory=dict)


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def own_nodes(fn: ast.FunctionDef) -> list[ast.AST]:
    """The nodes of ``fn``'s own scope: nested functions, lambdas and classes bind their
    names elsewhere, so their bodies are left out."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = list(reversed(fn.body))
    while todo:  # depth first, in source order
        node = todo.pop()
        out.append(node)
        if not isinstance(node, _SCOPES):
            todo.extend(reversed(list(ast.iter_child_nodes(node))))
    return out


def local_bindings(fn: ast.FunctionDef) -> Local:
    """How ``fn`` binds its names (see the module docstring)."""
    local = Local()
    for node in own_nodes(fn):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    reads = node.value is not None and target.id in names_in(node.value)
                    if reads:
                        local.tangled.add(target.id)
                    else:
                        local.fresh.setdefault(target.id, []).append((node, node.value))
                    if isinstance(node.value, ast.Dict):
                        local.dicts[target.id] = {
                            k.value: v
                            for k, v in zip(node.value.keys, node.value.values, strict=True)
                            if isinstance(k, ast.Constant) and isinstance(k.value, str)
                        }
                    elif (
                        isinstance(node.value, ast.Call)
                        and isinstance(node.value.func, ast.Name)
                        and node.value.func.id == "dict"
                        and not node.value.args
                    ):  # kwargs = dict(BLOCK=BLOCK, num_warps=4)
                        local.dicts[target.id] = {
                            kw.arg: kw.value for kw in node.value.keywords if kw.arg is not None
                        }
                elif isinstance(target, ast.Tuple):
                    for elt in target.elts:
                        if isinstance(elt, ast.Name):
                            local.fresh.setdefault(elt.id, []).append((node, None))
                elif (
                    isinstance(target, ast.Subscript)
                    and isinstance(target.value, ast.Name)
                    and isinstance(target.slice, ast.Constant)
                    and isinstance(target.slice.value, str)
                ):
                    local.dicts.setdefault(target.value.id, {})[target.slice.value] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.value is not None:
                local.fresh.setdefault(node.target.id, []).append((node, node.value))
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            local.tangled.add(node.target.id)
        elif isinstance(node, (ast.For, ast.comprehension)):
            local.tangled |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.NamedExpr):
            local.tangled.add(node.target.id)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    local.tangled |= names_in(item.optional_vars)
    return local


#: Calls that allocate a tensor of the size their positional arguments give (``torch.empty``,
#: ``x.new_zeros``); ``full`` takes its fill value after the size.
_ALLOCATORS = frozenset(
    {"empty", "zeros", "ones", "full", "empty_strided", "rand", "randn"}
    | {"new_empty", "new_zeros", "new_ones", "new_full"}
)

#: Methods that give an allocation another layout, its elements unchanged (torchao's column-
#: major scales: ``x.new_empty(M, K // block_size).as_strided((M, K // block_size), (1, M))``).
_LAYOUT_VIEWS = frozenset(
    {"as_strided", "t", "transpose", "permute", "view", "reshape", "contiguous"}
    | {"unsqueeze", "squeeze", "zero_", "fill_"}
)


def returned_sizes(fn: ast.FunctionDef) -> dict[str, tuple[str, int]]:
    """Name -> (a tensor ``fn`` returns, the line that allocates it), for the names the size
    of that tensor is computed from, through ``fn``'s own assignments: ``scales =
    torch.empty((M_padded, K // group_size))`` then ``return out, scales`` (gemlite's MXFP8
    quantizer) makes ``group_size`` part of an output's shape, a choice of the math rather
    than a knob (every other value changes the shape of what the launcher returns). Only
    tensors returned as they are (``return out, scales``) count: a workspace sized by a
    block and reduced before it is returned (``partial.sum(0)``) does not."""
    returned: set[str] = set()
    reads: dict[str, set[str]] = {}  # name -> the names its assignments read
    allocated: dict[str, list[tuple[ast.expr, int]]] = {}
    for node in own_nodes(fn):
        if isinstance(node, ast.Return) and node.value is not None:
            value = node.value
            elts = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
            returned |= {e.id for e in elts if isinstance(e, ast.Name)}
        targets: list[ast.expr] = []
        value_node: ast.expr | None = None
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Assign):
            targets, value_node = node.targets, node.value
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets, value_node = [node.target], node.value
        if value_node is None:
            continue
        for target in targets:
            for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                reads.setdefault(name, set()).update(names_in(value_node))
            call = value_node
            while (  # x.new_empty((M, K // block)).as_strided(...), torch.empty(...).t()
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr in _LAYOUT_VIEWS
                and isinstance(call.func.value, ast.Call)
            ):
                call = call.func.value
            if (
                isinstance(target, ast.Name)
                and isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr in _ALLOCATORS
            ):
                sizes = call.args[:1] if call.func.attr.endswith("full") else call.args
                sizes = [*sizes, *(k.value for k in call.keywords if k.arg == "size")]
                for size in sizes:
                    allocated.setdefault(target.id, []).append((size, line))
    found: dict[str, tuple[str, int]] = {}
    for tensor in sorted(returned & set(allocated)):
        for size, line in allocated[tensor]:
            todo = list(names_in(size))
            seen: set[str] = set()
            while todo:
                name = todo.pop()
                if name in seen:
                    continue
                seen.add(name)
                todo.extend(reads.get(name, ()))
            for name in seen:
                found.setdefault(name, (tensor, line))
    return found
