"""Copies of a module that registers PyTorch operators get their own operators.

A module that defines operators at import time (``torch.library.Library("ns", "FRAGMENT")``
and ``lib.define("name(...)")``, ``torch.library.define("ns::name", ...)``,
``@torch.library.custom_op("ns::name")``, ``@triton_op("ns::name")``) cannot be imported twice
as it is: a second ``define`` fails ("registered ... multiple times"), and a second
``custom_op`` silently takes the operator over, so the original's op would run the copy's
kernels (a reference compared with itself). Every candidate the worker imports, and every
variant ``tuned.runtime.load`` imports, is such a second import of the user's module.

:func:`private_ops` therefore gives a copy whose operators are already registered in this
process a private namespace (``ns`` -> ``ns_ktuned<N>``) for the operators the module itself
defines, and only those: the qualified names in its strings (``"ns::name"``, also in
``register_fake``, ``register_autograd``, ``impl``), the namespace of the ``Library`` that
defines them, and the references ``torch.ops.ns.name``. The copy's launcher then dispatches
to the copy's own implementation, which launches the copy's kernels with the injected knobs,
and the original's operators stay the original's. Operators found only at run time (a name
built by code, ``custom_op(f"{ns}::{name}")``) are not renamed. The renaming is done on the
text that runs, never on the user's file nor on the diff shown (its only difference is
the knob bindings). In the worker, a module whose operators are not yet registered runs as it
is (the entry's original keeps its names); ``tuned.runtime.load`` renames always, so that the
user's own import of the module, later in the process, still registers the real names.
"""

from __future__ import annotations

import ast
import itertools
import re

__all__ = ["defined_ops", "op_implementations", "op_reference", "private_ops"]

_DEFINERS = ("custom_op", "triton_op")
_KINDS = ("DEF", "FRAGMENT")
_counter = itertools.count(1)


def _string(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _last(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _qualified(text: str | None) -> tuple[str, str] | None:
    """(ns, name) of ``"ns::name"``, ``"ns::name(schema)"`` or ``"ns::name.overload"``."""
    match = re.fullmatch(r"(\w+)::(\w+)(?:[.(].*)?", text or "", flags=re.DOTALL)
    return (match[1], match[2]) if match else None


def _libraries(tree: ast.Module) -> dict[str, tuple[str, ast.Constant]]:
    """Names bound to ``Library("ns", "DEF" | "FRAGMENT")``: name -> (ns, the ns literal)."""
    libs: dict[str, tuple[str, ast.Constant]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        call = node.value
        kind = call.args[1] if len(call.args) > 1 else None
        kind = next((k.value for k in call.keywords if k.arg == "kind"), kind)
        ns_node = call.args[0] if call.args else None
        ns = _string(ns_node)
        if _last(call.func) != "Library" or ns is None or _string(kind) not in _KINDS:
            continue
        assert isinstance(ns_node, ast.Constant)
        for target in node.targets:
            if isinstance(target, ast.Name):
                libs[target.id] = (ns, ns_node)
    return libs


def defined_ops(tree: ast.Module) -> tuple[set[tuple[str, str]], list[ast.Constant]]:
    """The operators ``(ns, name)`` the module defines, and the namespace literals of the
    ``Library`` objects that define them."""
    libs = _libraries(tree)
    ops: set[tuple[str, str]] = set()
    namespaces: list[ast.Constant] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        first, func = _string(node.args[0]), node.func
        if _last(func) in (*_DEFINERS, "define") and (op := _qualified(first)):
            ops.add(op)  # custom_op / triton_op / torch.library.define("ns::name", ...)
        elif (
            _last(func) == "define"
            and isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in libs
            and first
            and (name := re.match(r"\s*(\w+)", first))
        ):
            ns, literal = libs[func.value.id]
            ops.add((ns, name[1]))
            namespaces.append(literal)
    return ops, namespaces


def _registered(ops: set[tuple[str, str]]) -> bool:
    import torch

    return any(hasattr(getattr(torch.ops, ns), name) for ns, name in ops)


def op_reference(node: ast.expr) -> tuple[str, str] | None:
    """(ns, name) of ``torch.ops.ns.name`` (also ``torch.ops.ns.name.default``)."""
    if not isinstance(node, ast.Attribute):
        return None
    return _reference(node) or op_reference(node.value)


def _reference(node: ast.Attribute) -> tuple[str, str] | None:
    """(ns, name) of exactly ``torch.ops.ns.name`` (the part renamed is ``torch.ops.ns``)."""
    inner = node.value
    if (
        isinstance(inner, ast.Attribute)
        and isinstance(inner.value, ast.Attribute)
        and inner.value.attr == "ops"
        and isinstance(inner.value.value, ast.Name)
        and inner.value.value.id == "torch"
    ):
        return inner.attr, node.attr
    return None


def op_implementations(tree: ast.Module) -> dict[tuple[str, str], str]:
    """(ns, name) -> the module function registered as the operator's implementation:
    ``lib.impl("name", fn, ...)``, ``@torch.library.impl(lib, "name", ...)``,
    ``@torch.library.impl("ns::name", ...)`` (or ``register_kernel``), so a launcher calling
    ``torch.ops.ns.name(...)`` is followed into ``fn``."""
    libs = _libraries(tree)
    out: dict[tuple[str, str], str] = {}

    def target(call: ast.Call) -> tuple[str, str] | None:
        if _last(call.func) not in ("impl", "register_kernel") or not call.args:
            return None
        first = call.args[0]
        if isinstance(first, ast.Name) and first.id in libs and len(call.args) > 1:
            name = _string(call.args[1])  # impl(lib, "name", ...)
            return (libs[first.id][0], name) if name else None
        return _qualified(_string(first))

    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and (op := target(decorator)):
                    out[op] = node.name
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "impl"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in libs
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Name)
            and (name := _string(node.args[0]))
        ):
            out[(libs[node.func.value.id][0], name)] = node.args[1].id
    return out


def private_ops(source: str, *, always: bool = False) -> str:
    """``source`` with the operators it defines moved to private namespaces when any of them
    is already registered in this process (a second import of the module), or ``always``;
    else ``source`` itself. A source that does not parse is returned as it is (its import
    reports why)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source
    ops, namespaces = defined_ops(tree)
    from tuned.registry.injection import _Text

    if not ops or not (always or _registered(ops)):
        return source
    suffix = f"_ktuned{next(_counter)}"
    private = {ns: ns + suffix for ns, _ in ops}
    edits = _Text(source)
    for literal in {id(n): n for n in namespaces}.values():
        edits.replace(literal, repr(private[str(literal.value)]))
    formatted = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            op = _qualified(node.value)
            if op is not None and op in ops and id(node) not in formatted:
                edits.replace(node, repr(private[op[0]] + node.value[len(op[0]) :]))
        elif isinstance(node, ast.Attribute) and (ref := _reference(node)) in ops:
            assert ref is not None
            edits.replace(node.value, f"torch.ops.{private[ref[0]]}")
    return edits.render()
