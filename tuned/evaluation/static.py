"""The static gate: checks on a candidate's source before any worker time is spent.

This is the minimal gate every candidate passes (it parses, and defines the launcher as a
top-level function). The full gate for LLM-written modules extends it.
"""

from __future__ import annotations

import ast

__all__ = ["static_check"]


def static_check(source: str, launcher: str) -> str | None:
    """``None`` if ``source`` may be run, else the rule it breaks (the rejection reason)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"syntax error at line {exc.lineno}: {exc.msg}"
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    if launcher not in defined:
        return f"the module defines no top-level function {launcher!r} (the launcher)"
    return None
