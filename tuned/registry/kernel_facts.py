"""What the syntax tree says about a module's ``@triton.jit`` kernels, for knob discovery.

Nothing is executed. For each kernel: its parameters, which are ``tl.constexpr``, whether it
calls ``tl.dot``, its ``@triton.autotune`` / ``@triton.heuristics`` decorators, and two facts
about each constexpr parameter that decide whether it may be tuned and how:

- **sized**: it is used as a size (an argument of a call such as ``tl.arange``, ``tl.zeros``,
  ``range``, ``tl.cdiv``, or an operand of arithmetic). A parameter only ever tested
  (``if FLAG:``, ``x if MODE == 1 else y``) is a switch of the math, never a knob.
- **tiled**: a loop walks over it (it appears in a loop's iterable or test, or in arithmetic
  with the loop variable, as in ``for k in range(0, K, BLOCK_K)`` or
  ``off = i * BLOCK + tl.arange(0, BLOCK)``). A block that is not tiled must cover its whole
  dimension in one pass (a row kernel needs ``BLOCK >= n``), so it may grow but not shrink,
  unless the launch grid tiles it (:mod:`tuned.registry.discovery` checks that).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["KernelFacts", "decorator_name", "is_constexpr", "is_jit", "kernel_facts"]


def decorator_name(decorator: ast.expr) -> str:
    """``jit`` for ``@triton.jit``, ``@jit``, ``@triton.jit(...)``; "" when unnamed."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def is_jit(decorator: ast.expr) -> bool:
    return decorator_name(decorator) == "jit"


def is_constexpr(annotation: ast.expr | None) -> bool:
    if isinstance(annotation, ast.Attribute):
        return annotation.attr == "constexpr"
    if isinstance(annotation, ast.Name):
        return annotation.id == "constexpr"
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.rsplit(".", 1)[-1] == "constexpr"
    return False


@dataclass(frozen=True, eq=False)
class KernelFacts:
    """One ``@triton.jit`` function (see the module docstring)."""

    name: str
    node: ast.FunctionDef
    params: tuple[str, ...]  # positional parameters, in order
    constexprs: frozenset[str]
    uses_dot: bool
    sized: frozenset[str]
    tiled: frozenset[str]
    autotune: ast.Call | None
    heuristics: ast.Call | None
    foreign: bool = False  # defined in another module (its decorators are not ours to edit)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _sized(fn: ast.FunctionDef, params: Iterable[str]) -> set[str]:
    wanted = set(params)
    found: set[str] = set()
    for parent in ast.walk(fn):
        operands: list[ast.AST] = []
        if isinstance(parent, ast.BinOp):
            operands = [parent.left, parent.right]
        elif isinstance(parent, ast.Call):
            operands = [*parent.args, *(k.value for k in parent.keywords)]
        elif isinstance(parent, (ast.Tuple, ast.List)):
            operands = list(parent.elts)
        elif isinstance(parent, ast.Subscript):
            operands = [parent.slice]
        for operand in operands:
            if isinstance(operand, ast.Name) and operand.id in wanted:
                found.add(operand.id)
    return found


def _tiled(fn: ast.FunctionDef, params: Iterable[str]) -> set[str]:
    wanted = set(params)
    found: set[str] = set()
    for loop in ast.walk(fn):
        if isinstance(loop, ast.For):
            found |= _names(loop.iter) & wanted
            variables = _names(loop.target)
        elif isinstance(loop, ast.While):
            found |= _names(loop.test) & wanted
            variables = _names(loop.test) - wanted
        else:
            continue
        for stmt in loop.body:
            for node in ast.walk(stmt):
                if isinstance(node, ast.BinOp):
                    used = _names(node)
                    if used & variables:
                        found |= used & wanted
    return found


def _decorator(fn: ast.FunctionDef, name: str) -> ast.Call | None:
    for d in fn.decorator_list:
        if isinstance(d, ast.Call) and decorator_name(d) == name:
            return d
    return None


def _autotune(fn: ast.FunctionDef) -> ast.Call | None:
    """``@triton.autotune(configs=...)``, or a library's own autotuner (a subclass of
    Triton's ``Autotuner``) named like it and called with configs
    (``@fla_cache_autotune(configs=[...], key=[...])``) or, whatever its name, called as
    Triton's is, with ``configs=`` and ``key=`` (FlagGems' ``@libtuner(configs=..., key=...)``):
    either runs the kernel with each config's options, so a launch must not pass them again."""
    found = _decorator(fn, "autotune")
    if found is not None:
        return found
    for d in fn.decorator_list:
        if not isinstance(d, ast.Call):
            continue
        keywords = {k.arg for k in d.keywords}
        if {"configs", "key"} <= keywords or (
            decorator_name(d).lower().endswith("autotune") and (d.args or "configs" in keywords)
        ):
            return d
    return None


def kernel_facts(
    functions: Mapping[str, ast.FunctionDef], foreign: Iterable[str] = ()
) -> dict[str, KernelFacts]:
    """The facts of every ``@triton.jit`` function among ``functions`` (name -> def);
    ``foreign`` names those defined in another module."""
    foreign = set(foreign)
    kernels: dict[str, KernelFacts] = {}
    for name, fn in functions.items():
        if not any(is_jit(d) for d in fn.decorator_list):
            continue
        args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        constexprs = frozenset(a.arg for a in args if is_constexpr(a.annotation))
        kernels[name] = KernelFacts(
            name=name,
            node=fn,
            params=tuple(a.arg for a in [*fn.args.posonlyargs, *fn.args.args]),
            constexprs=constexprs,
            uses_dot=any(
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("dot", "dot_scaled")
                for node in ast.walk(fn)
            ),
            sized=frozenset(_sized(fn, constexprs)),
            tiled=frozenset(_tiled(fn, constexprs)),
            autotune=_autotune(fn),
            heuristics=_decorator(fn, "heuristics"),
            foreign=name in foreign,
        )
    return kernels
