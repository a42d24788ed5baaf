"""The allowlist rules of the LLM gate: what a module may import, name and run at import.

Each rule is one pass over the AST and returns the first :class:`GateRejection` it finds
(rule id, line, what). :func:`safety_rejection` runs them in a fixed order, most specific
first, so a module is refused under the rule that names its escape:

================  ==========================================================================
rule              refuses
================  ==========================================================================
``imports``       an import of a module outside :data:`~tuned.llm.allowlist.ALLOWED_MODULES`
                  (``from x import y``: ``x.y`` must be allowed); relative and ``*`` imports
``forbidden``     ``eval``/``exec``/``getattr``/``open``/``__import__``/``globals``/``vars``...
                  anywhere (even rebound), classes, generators and ``async`` (their frames
                  reach the globals), ``str.format`` (it reads attributes), ``.tofile`` ...,
                  attributes of the module's functions (``kernel.pre_run_hooks``: state
                  that outlives a call)
``dunder``        any ``__name__``-style attribute, name, binding or string (``__class__``,
                  ``__globals__``, ``__subclasses__``, a module ``__getattr__``, ``"__builtins__"``)
``module_attr``   a path through an imported module that is not allowlisted (``torch.sys``,
                  ``torch.os``, ``torch._C``, ``torch.ops``, ``tl.core``, ``triton.runtime``)
``alias``         an imported module or function used as a value (``X = torch.add``,
                  ``t = torch``, ``f(torch.add)``): the gate could no longer see the calls
``private``       an ``_underscore`` attribute of anything (``x._cdata``, ``f()._fields``)
``introspection`` frame, code and traceback attributes (``gi_frame``, ``f_globals``,
                  ``tb_frame``, ``co_code``, ``mro`` ...), reached through method chains
``builtins``      a name that is neither defined by the module nor an allowed builtin
                  (``type``, ``object``, ``print``, ``super``, ``os`` ...)
``monkey_patch``  an assignment or ``del`` of any attribute (``torch.add = f``,
                  ``x.y.z = 1``), or of an item of an imported module's object
``module_state``  module-level statements other than imports, functions, a docstring and
                  literal constants; ``global``/``nonlocal``
``default``       a default argument that is not an immutable literal (no ``[]`` cache), a
                  module constant or an allowlisted dtype/constant
``decorator``     a decorator other than ``triton.jit``/``autotune``/``heuristics``, or one
                  whose arguments are not literals, ``triton.Config(...)`` of literals,
                  lambdas or the module's own functions
================  ==========================================================================

Literals are evaluated with bounds (no ``10 ** 10 ** 10`` at import, no ``"x" * 10**9``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tuned.llm.allowlist import ALLOWED_MODULES, SAFE_BUILTINS, TRITON_DECORATORS, path_kind

__all__ = ["GateRejection", "import_aliases", "resolve", "safety_rejection"]

_FORBIDDEN_NAMES = frozenset(
    {
        "exec", "eval", "compile", "open", "__import__", "getattr", "setattr", "delattr",
        "hasattr", "globals", "locals", "vars", "dir", "breakpoint", "input", "help",
        "memoryview", "type", "object", "super", "classmethod", "staticmethod", "property",
        "exit", "quit", "print", "id",
    }
)  # fmt: skip

#: Attribute names refused on anything: formatting that reads attributes, file writers,
#: and names that only lead to the system.
_FORBIDDEN_ATTRS = frozenset(
    {
        "format", "format_map", "tofile", "fromfile", "from_file", "dump", "dumps", "save",
        "load_state_dict", "ctypes", "share_memory_", "register_hook", "os", "sys",
        "builtins", "importlib", "subprocess", "socket", "modules", "environ", "system",
        "popen", "globals", "exec", "eval",
    }
)  # fmt: skip

_INTROSPECTION_PREFIXES = ("gi_", "cr_", "ag_", "tb_", "co_", "f_", "func_", "im_")
_INTROSPECTION = frozenset({"mro", "with_traceback", "cell_contents"})

_MAX_BITS = 4096  # integer literals at import stay below 2**4096
_MAX_STR = 1 << 16


@dataclass(frozen=True)
class GateRejection:
    """A rule the module breaks, with where and why."""

    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


def _reject(rule: str, node: ast.AST, what: str) -> GateRejection:
    return GateRejection(rule, f"line {getattr(node, 'lineno', '?')}: {what}")


def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted path, for every import (anywhere in the module)."""
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


def dotted(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; ``None`` when the root is not a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


def resolve(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The full dotted path of a name chain rooted at an import (``tl.load`` ->
    ``triton.language.load``); ``None`` for anything else."""
    parts = dotted(node)
    if parts is None or parts[0] not in aliases:
        return None
    return ".".join([aliases[parts[0]], *parts[1:]])


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _annotation_ids(tree: ast.AST) -> set[int]:
    roots: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            roots.append(node.annotation)
        elif isinstance(node, ast.FunctionDef) and node.returns is not None:
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
    return {id(n) for root in roots for n in ast.walk(root)}


def _bound_names(tree: ast.Module) -> set[str]:
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ExceptHandler, ast.MatchAs, ast.MatchStar)):
            bound.add(node.name or "")
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
    return bound | set(import_aliases(tree))


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and len(name) > 4


def _imports(tree: ast.Module) -> GateRejection | None:
    allowed = ", ".join(sorted(ALLOWED_MODULES))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in ALLOWED_MODULES:
                    return _reject("imports", node, f"imports {alias.name} (allowed: {allowed})")
        elif isinstance(node, ast.ImportFrom):
            if node.level or not node.module:
                return _reject("imports", node, "a relative import")
            for alias in node.names:
                if alias.name == "*":
                    return _reject("imports", node, f"from {node.module} import *")
                full = f"{node.module}.{alias.name}"
                if node.module not in ALLOWED_MODULES or path_kind(full) is None:
                    return _reject("imports", node, f"imports {full} (not allowlisted)")
    return None


def _forbidden(tree: ast.Module) -> GateRejection | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in _FORBIDDEN_NAMES:
            return _reject("forbidden", node, f"uses {node.id}")
        if isinstance(node, ast.ClassDef):
            return _reject("forbidden", node, f"defines class {node.name} (no classes)")
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return _reject("forbidden", node, "a generator (its frame reaches the globals)")
        if isinstance(node, (ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith)):
            return _reject("forbidden", node, "async code")
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return _reject("module_state", node, f"global/nonlocal state ({node.names[0]})")
    return None


def _inert_strings(tree: ast.Module) -> set[int]:
    """Docstrings and other bare string statements: never used as values."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def _dunders(tree: ast.Module) -> GateRejection | None:
    inert = _inert_strings(tree)
    for node in ast.walk(tree):
        name: str | None = None
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            name = node.name
        elif isinstance(node, ast.arg):
            name = node.arg
        elif isinstance(node, ast.alias):
            name = node.asname or node.name.split(".")[0]
            if name == "__future__":
                continue
        elif isinstance(node, ast.keyword):
            name = node.arg
        if name is not None and _is_dunder(name):
            return _reject("dunder", node, f"uses {name}")
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, (str, bytes))
            and id(node) not in inert
            and ("__" in node.value if isinstance(node.value, str) else b"__" in node.value)
        ):
            return _reject("dunder", node, f"a string holding '__': {node.value!r:.40}")
    return None


def _chain_heads(tree: ast.Module) -> Iterator[tuple[ast.Attribute | ast.Name, ast.AST | None]]:
    """Every outermost ``a.b.c`` chain (and lone name) with its parent node."""
    parents = _parents(tree)
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Attribute, ast.Name)):
            continue
        parent = parents.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.value is node:
            continue  # an inner link: its chain is checked whole
        yield node, parent


def _module_paths(tree: ast.Module, aliases: dict[str, str]) -> GateRejection | None:
    annotations = _annotation_ids(tree)
    decorators = {id(d) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
                  for d in n.decorator_list}  # fmt: skip
    for node, parent in _chain_heads(tree):
        path = resolve(node, aliases)
        if path is None or not isinstance(node.ctx, ast.Load):
            continue
        kind = path_kind(path)
        if kind is None:
            return _reject("module_attr", node, f"reaches {path}, which is not an allowlisted name")
        called = isinstance(parent, ast.Call) and parent.func is node
        if kind == "module" or (
            kind == "call" and not called and id(node) not in decorators | annotations
        ):
            return _reject(
                "alias",
                node,
                f"uses {path} as a value (call functions of imported modules where they "
                "are named; do not assign or pass them)",
            )
    return None


def _attributes(tree: ast.Module, aliases: dict[str, str]) -> GateRejection | None:
    functions = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _FORBIDDEN_ATTRS:
            return _reject("forbidden", node, f"uses the attribute .{node.attr}")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in functions
            and isinstance(node.ctx, ast.Load)  # an assignment is a monkey patch
        ):  # a kernel's hooks and caches (pre_run_hooks, cache ...) would outlive a call
            return _reject(
                "forbidden", node, f"reaches into the function object {node.value.id}"
                f".{node.attr} (launch kernels as kernel[grid](...))",
            )  # fmt: skip
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or resolve(node, aliases) is not None:
            continue
        attr = node.attr
        if attr.startswith("_"):
            return _reject("private", node, f"accesses the private attribute .{attr}")
        if attr in _INTROSPECTION or attr.startswith(_INTROSPECTION_PREFIXES):
            return _reject("introspection", node, f"accesses .{attr} (interpreter internals)")
    return None


def _builtins(tree: ast.Module) -> GateRejection | None:
    bound = _bound_names(tree) | SAFE_BUILTINS
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in bound:
            return _reject(
                "builtins",
                node,
                f"uses {node.id}, which the module does not define and is not an allowed builtin",
            )
    return None


def _monkey_patch(tree: ast.Module, aliases: dict[str, str]) -> GateRejection | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            return _reject(
                "monkey_patch",
                node,
                f"assigns or deletes the attribute .{node.attr} (attributes of objects "
                "the module did not create may not change)",
            )
        if isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load):
            root: ast.AST = node.value
            while isinstance(root, (ast.Subscript, ast.Attribute, ast.Call)):
                root = root.func if isinstance(root, ast.Call) else root.value
            if isinstance(root, ast.Name) and root.id in aliases:
                return _reject("monkey_patch", node, f"writes into {root.id} (an import)")
    return None


class _NotLiteral(Exception):
    pass


def _literal(node: ast.AST, aliases: dict[str, str], consts: dict[str, object]) -> object:
    """The value of a bounded literal expression (``consts``: the module's literal
    constants, which it may name); raises :class:`_NotLiteral`."""
    if isinstance(node, ast.Name) and node.id in consts:
        return consts[node.id]
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (str, bytes)) and len(node.value) > _MAX_STR:
            raise _NotLiteral
        return node.value
    if isinstance(node, ast.Tuple):  # not a list: a mutable default or constant is a cache
        return tuple(_literal(e, aliases, consts) for e in node.elts)
    if isinstance(node, ast.Attribute):
        path = resolve(node, aliases)
        if path is not None and path_kind(path) == "value":
            return path
        raise _NotLiteral
    if isinstance(node, ast.UnaryOp):
        value = _literal(node.operand, aliases, consts)
        if not isinstance(value, (int, float)):
            raise _NotLiteral
        if isinstance(node.op, ast.USub):
            return -value
        if isinstance(node.op, ast.UAdd):
            return value
        if isinstance(node.op, ast.Invert) and isinstance(value, int):
            return ~value
        raise _NotLiteral
    if isinstance(node, ast.BinOp):
        return _arith(
            node.op, _literal(node.left, aliases, consts), _literal(node.right, aliases, consts)
        )
    raise _NotLiteral


def _arith(op: ast.operator, a: object, b: object) -> object:
    if isinstance(a, str) and isinstance(b, str) and isinstance(op, ast.Add):
        if len(a) + len(b) > _MAX_STR:
            raise _NotLiteral
        return a + b
    if isinstance(a, bool) or isinstance(b, bool):
        raise _NotLiteral
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        raise _NotLiteral
    if isinstance(op, ast.Pow) and (
        abs(b) > _MAX_BITS
        or (isinstance(a, int) and abs(a) > 1 and b * abs(a).bit_length() > _MAX_BITS)
    ):
        raise _NotLiteral
    if isinstance(op, ast.LShift) and (not isinstance(b, int) or b > _MAX_BITS):
        raise _NotLiteral
    ops: dict[type[ast.operator], Callable[[float, float], object]] = {
        ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y,
        ast.Mult: lambda x, y: x * y, ast.Div: lambda x, y: x / y,
        ast.FloorDiv: lambda x, y: x // y, ast.Mod: lambda x, y: x % y,
        ast.Pow: lambda x, y: x**y,
    }  # fmt: skip
    try:
        if isinstance(a, int) and isinstance(b, int):
            int_ops: dict[type[ast.operator], Callable[[int, int], int]] = {
                ast.LShift: lambda x, y: x << y, ast.RShift: lambda x, y: x >> y,
                ast.BitAnd: lambda x, y: x & y, ast.BitOr: lambda x, y: x | y,
                ast.BitXor: lambda x, y: x ^ y,
            }  # fmt: skip
            if type(op) in int_ops:
                return int_ops[type(op)](a, b)
        if type(op) not in ops:
            raise _NotLiteral
        value = ops[type(op)](a, b)
    except (ArithmeticError, ValueError) as exc:
        raise _NotLiteral from exc
    if isinstance(value, int) and value.bit_length() > _MAX_BITS:
        raise _NotLiteral
    return value


def is_literal(
    node: ast.AST, aliases: dict[str, str], consts: dict[str, object] | None = None
) -> bool:
    try:
        _literal(node, aliases, consts or {})
    except (_NotLiteral, RecursionError):
        return False
    return True


def _constants(tree: ast.Module, aliases: dict[str, str]) -> dict[str, object]:
    """The module's literal constants (``BLOCK = 128``, ``HALF = BLOCK // 2``), in order."""
    consts: dict[str, object] = {}
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        if not targets or not all(isinstance(t, ast.Name) for t in targets):
            continue
        assert isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
        try:
            value = _literal(node.value, aliases, consts)
        except (_NotLiteral, RecursionError):
            continue
        for target in targets:
            assert isinstance(target, ast.Name)
            consts[target.id] = value
    return consts


def _module_state(tree: ast.Module, aliases: dict[str, str]) -> GateRejection | None:
    consts = _constants(tree, aliases)
    for i, node in enumerate(tree.body):
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef)):
            continue
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        value: ast.expr | None = None
        if (
            isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets)
        ) or (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            value = node.value
        if value is not None and (
            is_literal(value, aliases, consts) or _constexpr(value, aliases, consts)
        ):
            continue
        return _reject(
            "module_state",
            node,
            f"a module-level {type(node).__name__}; only imports, functions, a docstring "
            "and literal constants are allowed (no caches, classes or code run at import)",
        )
    return None


def _constexpr(node: ast.expr, aliases: dict[str, str], consts: dict[str, object]) -> bool:
    """``tl.constexpr(<literal>)``."""
    return (
        isinstance(node, ast.Call)
        and resolve(node.func, aliases) == "triton.language.constexpr"
        and not node.keywords
        and all(is_literal(a, aliases, consts) for a in node.args)
    )


def _defaults(tree: ast.Module, aliases: dict[str, str]) -> GateRejection | None:
    consts = _constants(tree, aliases)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            args = node.args
            for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
                if not is_literal(default, aliases, consts):
                    return _reject(
                        "default",
                        default,
                        f"a default argument that is not a literal: {ast.unparse(default):.60}"
                        " (defaults run at import)",
                    )
    return None


def _static(
    node: ast.expr, aliases: dict[str, str], functions: set[str], consts: dict[str, object]
) -> bool:
    """A decorator argument: evaluated at import, so literals and data only."""
    if isinstance(node, ast.Lambda):
        return True  # its body runs at launch, under every other rule
    if isinstance(node, ast.Name):
        return node.id in functions or node.id in consts
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_static(e, aliases, functions, consts) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(
            k is not None
            and _static(k, aliases, functions, consts)
            and _static(v, aliases, functions, consts)
            for k, v in zip(node.keys, node.values)
        )
    if isinstance(node, ast.Call):
        return resolve(node.func, aliases) == "triton.Config" and all(
            _static(a, aliases, functions, consts)
            for a in [*node.args, *(k.value for k in node.keywords)]
        )
    return is_literal(node, aliases, consts)


def _decorators(tree: ast.Module, aliases: dict[str, str]) -> GateRejection | None:
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    consts = _constants(tree, aliases)
    allowed = {f"triton.{d}" for d in TRITON_DECORATORS}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            call = deco if isinstance(deco, ast.Call) else None
            path = resolve(call.func if call else deco, aliases)
            if path not in allowed or (call is None and path != "triton.jit"):
                return _reject(
                    "decorator",
                    deco,
                    f"decorator {ast.unparse(deco):.60} (allowed: triton.jit, "
                    "triton.autotune(...), triton.heuristics(...))",
                )
            if call is not None:
                for arg in [*call.args, *(k.value for k in call.keywords)]:
                    if not _static(arg, aliases, functions, consts):
                        return _reject(
                            "decorator",
                            arg,
                            f"a decorator argument that runs code at import: "
                            f"{ast.unparse(arg):.60}",
                        )
    return None


def safety_rejection(tree: ast.Module) -> GateRejection | None:
    """The first allowlist rule ``tree`` breaks (module docstring's table), or ``None``."""
    aliases = import_aliases(tree)
    checks: list[Callable[[], GateRejection | None]] = [
        lambda: _imports(tree),
        lambda: _forbidden(tree),
        lambda: _dunders(tree),
        lambda: _module_paths(tree, aliases),
        lambda: _builtins(tree),
        lambda: _attributes(tree, aliases),
        lambda: _monkey_patch(tree, aliases),
        lambda: _module_state(tree, aliases),
        lambda: _defaults(tree, aliases),
        lambda: _decorators(tree, aliases),
    ]
    for check in checks:
        found = check()
        if found is not None:
            return found
    return None
