"""Checks of ``roofline``: arithmetic over the shape's dimensions, parsed and never evaluated."""

from __future__ import annotations

import ast

from tuned.registry.problems import Problems, show
from tuned.registry.spec import Roofline
from tuned.registry.validate import is_number

__all__ = ["check_roofline"]

_MAX_EXPRESSION_CHARS = 1000
_BINOPS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Pow: "**",
}


def _expression_problems(text: str, names: frozenset[str] | None) -> list[str]:
    """Why ``text`` is not an allowed roofline expression (empty when it is)."""
    allowed = "only numbers, + - * / // **, parentheses, the shape's dimension names and elem"
    if len(text) > _MAX_EXPRESSION_CHARS:
        return [f"longer than {_MAX_EXPRESSION_CHARS} characters"]
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        return [f"not an arithmetic expression ({exc.msg}); {allowed} are allowed"]
    except (RecursionError, MemoryError):  # the parser's signals for deep nesting
        return ["nested too deeply"]
    reasons: list[str] = []
    stack: list[ast.AST] = [tree.body]
    while stack:  # a rejected node's children are not looked at: one reason per construct
        node = stack.pop()
        reason: str | None = None
        if isinstance(node, ast.BinOp):
            if type(node.op) in _BINOPS:
                stack += [node.right, node.left]
            else:
                reason = f"operator {type(node.op).__name__} is not allowed"
        elif isinstance(node, ast.UnaryOp):
            if isinstance(node.op, (ast.USub, ast.UAdd)):
                stack.append(node.operand)
            else:
                reason = f"operator {type(node.op).__name__} is not allowed"
        elif isinstance(node, ast.Constant):
            if not is_number(node.value):
                reason = f"constant {show(node.value)} is not a number"
        elif isinstance(node, ast.Name):
            if names is not None and node.id not in names | {"elem"}:
                known = ", ".join([*sorted(names), "elem"])
                reason = f"unknown name '{node.id}'; allowed names: {known}"
        elif isinstance(node, ast.Call):
            reason = f"function calls are not allowed: {ast.unparse(node)}"
        elif isinstance(node, ast.Attribute):
            reason = f"attribute access is not allowed: {ast.unparse(node)}"
        else:
            reason = f"{type(node).__name__} is not allowed: {ast.unparse(node)}"
        if reason is not None and reason not in reasons:
            reasons.append(reason)
    if reasons:
        reasons.append(f"{allowed} are allowed")
    return reasons


def check_roofline(value: object, dims: frozenset[str] | None, out: Problems) -> Roofline | None:
    """``bytes``/``flops`` expressions; ``dims`` None skips the name check (shapes broken)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        out.add(
            "roofline",
            'must be a mapping with bytes and/or flops, e.g. {bytes: "2*M*N*elem", '
            f'flops: "5*M*N"}}, got {show(value)}',
        )
        return None
    exprs: dict[str, str] = {}
    for key, expr in value.items():
        where = f"roofline.{key}"
        if key not in ("bytes", "flops"):
            out.add(where, "unknown key; allowed keys: bytes, flops")
        elif not isinstance(expr, str):
            out.add(where, f'must be a quoted expression such as "2*M*N*elem", got {show(expr)}')
        else:
            reasons = _expression_problems(expr, dims)
            if reasons:
                out.add(where, f"{show(expr)}: " + "; ".join(reasons))
            exprs[key] = expr
    if not exprs:
        return None
    return Roofline(bytes=exprs.get("bytes"), flops=exprs.get("flops"))
