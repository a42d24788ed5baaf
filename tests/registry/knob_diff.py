"""Test helper: what a generated copy changed in a module, read from both syntax trees.

:func:`binding_changes` undoes the forms :mod:`tuned.registry.injection` writes (an inserted
``NAME = min(NAME * k, hi)`` statement, a wrapped ``min((E) * k, hi)`` expression, an added
``num_warps=``/``num_stages=`` keyword, a replaced int literal)
and returns the list of changes it undid; the tests then assert the two trees are otherwise
identical, so the copy differs from the original only in its knob bindings.
"""

from __future__ import annotations

import ast


def _transform_of(node: ast.expr) -> ast.expr | None:
    """``E`` of ``min(E * k, hi)`` / ``max(E // k, lo)``, else None."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("min", "max")
        and len(node.args) == 2
        and isinstance(node.args[0], ast.BinOp)
        and isinstance(node.args[0].op, (ast.Mult, ast.FloorDiv))
        and isinstance(node.args[0].right, ast.Constant)
        and isinstance(node.args[1], ast.Constant)
    ):
        return node.args[0].left
    return None


class _Undo(ast.NodeTransformer):
    def __init__(self, original: ast.Module) -> None:
        self.changes: list[str] = []
        self.calls: dict[str, list[set[str | None]]] = {}
        for n in ast.walk(original):
            if isinstance(n, ast.Call):
                self.calls.setdefault(ast.unparse(n.func), []).append({k.arg for k in n.keywords})
        self.seen: dict[str, int] = {}

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for name, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                kept = []
                for stmt in value:
                    if (
                        isinstance(stmt, ast.Assign)
                        and len(stmt.targets) == 1
                        and isinstance(stmt.targets[0], ast.Name)
                        and (inner := _transform_of(stmt.value)) is not None
                        and isinstance(inner, ast.Name)
                        and inner.id == stmt.targets[0].id
                    ):
                        self.changes.append(f"rebind {inner.id}")
                        continue
                    kept.append(stmt)
                setattr(node, name, kept)
        return super().generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        inner = _transform_of(node)
        if inner is not None and not isinstance(inner, ast.Name):
            self.changes.append(f"wrap {ast.unparse(inner)}")
            return self.visit(inner)
        func = ast.unparse(node.func)
        index = self.seen[func] = self.seen.get(func, -1) + 1
        had = self.calls.get(func, [])[index] if index < len(self.calls.get(func, [])) else None
        if had is not None:
            extra = [k for k in node.keywords if k.arg in ("num_warps", "num_stages")]
            for k in extra:
                if k.arg not in had:
                    self.changes.append(f"option {k.arg}={ast.unparse(k.value)}")
                    node.keywords.remove(k)
        self.generic_visit(node)
        return node


def binding_changes(original: str, variant: str) -> list[str]:
    """The knob bindings ``variant`` changed in ``original``; AssertionError when anything
    else differs (literals may differ in value: each differing int literal is a change)."""
    before, after = ast.parse(original), ast.parse(variant)
    undo = _Undo(before)
    after = undo.visit(after)
    changes = list(undo.changes)
    a, b = list(ast.walk(before)), list(ast.walk(after))
    for x, y in zip(a, b, strict=False):
        assert type(x) is type(y), (ast.dump(x)[:200], ast.dump(y)[:200])
        if isinstance(x, ast.Constant) and isinstance(y, ast.Constant) and x.value != y.value:
            changes.append(f"literal {x.value!r}->{y.value!r}")
            y.value = x.value
    assert ast.dump(before) == ast.dump(after), "the copy changed more than knob bindings"
    return changes
