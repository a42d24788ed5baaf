"""Which functions of a module a launcher reaches, and which it calls from other modules.

Knob discovery (:mod:`tuned.registry.discovery`) looks for launches in the launcher and in the
module's functions it calls, :data:`CALL_DEPTH` deep, following ``Fn.apply(...)`` into an
autograd Function of the module (also through a module-level alias, ``run = Fn.apply`` then
``run(...)``, as flash-linear-attention and triton.ops expose their Functions),
``Cls.method(...)`` into a static or class method of one of its classes and
``torch.ops.ns.name(...)`` into the function the module registers as that operator's
implementation (``lib.impl("name", fn)``, ``@torch.library.impl``); when it finds none, it
names the imported functions the launcher calls (where the kernels then live).
Nothing is executed: syntax trees only.
"""

from __future__ import annotations

import ast
from collections.abc import Container, Mapping, Sequence

from tuned.registry.kernel_sources import alias_of, launcher_functions, module_statements
from tuned.registry.private_ops import op_implementations, op_reference

__all__ = ["CALL_DEPTH", "imported_callees", "reachable"]

#: How deep calls from a launcher are followed into the module's own functions.
CALL_DEPTH = 3
#: Packages whose functions a launcher calls but that never hold its kernels' launcher.
FRAMEWORKS = frozenset({"torch", "triton"})


def reachable(
    launchers: Sequence[ast.FunctionDef],
    functions: Mapping[str, ast.FunctionDef],
    kernels: Container[str],
    tree: ast.Module | None,
    *,
    backward: bool = True,
) -> list[ast.FunctionDef]:
    """The launchers, and the module's non-kernel functions they call (breadth first);
    ``Fn.apply(...)`` leads into ``Fn``'s ``forward`` (and ``backward`` when ``backward``),
    ``Cls.method(...)`` into that method of the module's class ``Cls``, ``run(...)`` where
    the module binds ``run = Fn.apply`` (or ``run = other_function``) into what it names."""
    implementations = op_implementations(tree) if tree is not None else {}
    seen: list[ast.FunctionDef] = list(launchers)
    frontier = list(launchers)
    for _ in range(CALL_DEPTH):
        nxt: list[ast.FunctionDef] = []
        for fn in frontier:
            for node in ast.walk(fn):
                if not isinstance(node, ast.Call):
                    continue
                callees: list[ast.FunctionDef] = []
                if isinstance(node.func, ast.Name):
                    found = functions.get(node.func.id)
                    callees = [] if found is None else [found]
                    if found is None and tree is not None and alias_of(tree, node.func.id):
                        # `run(...)` where the module binds `run = Fn.apply`
                        callees = launcher_functions(tree, node.func.id, backward=backward)
                elif (  # `Fn.apply(...)` of an autograd Function of the module, or
                    # `Cls.method(...)`: a static or class method of one of its classes
                    isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and tree is not None
                ):
                    callees = launcher_functions(
                        tree, f"{node.func.value.id}.{node.func.attr}", backward=backward
                    )
                elif (op := op_reference(node.func)) in implementations:
                    # `torch.ops.ns.name(...)` of an operator the module implements
                    found = functions.get(implementations[op]) if op is not None else None
                    callees = [] if found is None else [found]
                for callee in callees:
                    if callee.name not in kernels and all(callee is not s for s in seen):
                        seen.append(callee)
                        nxt.append(callee)
        frontier = nxt
    return seen


def imported_callees(
    tree: ast.Module | None,
    module: str,
    scanned: Sequence[ast.FunctionDef],
    kernels: Container[str],
) -> list[tuple[str, str]]:
    """(name, module) of the functions ``scanned`` calls in their bodies that ``module``
    imports with ``from MODULE import name`` (relative imports resolved against ``module``; an
    entry's file, ``*.py``, keeps them as written), also ``Fn.apply(...)`` of an imported
    class (name ``Fn.apply``) and ``K.launch(...)`` of ``import pkg.kernels as K``;
    PyTorch's and Triton's own left out."""
    if tree is None:
        return []
    origin: dict[str, str] = {}
    modules: dict[str, str] = {}  # import pkg.kernels as K: K -> pkg.kernels
    for stmt in module_statements(tree):
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    modules[alias.asname] = alias.name
        if isinstance(stmt, ast.ImportFrom):
            base = stmt.module or ""
            if stmt.level and module.endswith(".py"):  # an entry's file: as written
                base = "." * stmt.level + base
            elif stmt.level:
                package = module.split(".")[: -stmt.level]
                base = ".".join([*package, base] if base else package)
            for alias in stmt.names:
                origin[alias.asname or alias.name] = f"{base}.{alias.name}"
    out: list[tuple[str, str]] = []
    for fn in scanned:
        decorators = {id(n) for d in fn.decorator_list for n in ast.walk(d)}
        for node in ast.walk(fn):
            if id(node) in decorators:
                continue
            if not isinstance(node, ast.Call):
                continue
            func, found = node.func, None
            if isinstance(func, ast.Name) and func.id in origin and func.id not in kernels:
                found = origin[func.id].rsplit(".", 1)  # f(...) of `from pkg.m import f`
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                held = func.value.id
                if held in origin and held not in kernels:  # Fn.apply(...) of an imported Fn
                    where, _, cls = origin[held].rpartition(".")
                    found = [where, f"{cls}.{func.attr}"]
                elif held in modules:  # K.launch(...) of `import pkg.kernels as K`
                    found = [modules[held], func.attr]
            if found is None or not found[0]:
                continue
            name_module, name = found
            if name_module.split(".")[0] in FRAMEWORKS:
                continue  # triton.cdiv, torch.library.wrap_triton: not a launcher
            if (name, name_module) not in out:
                out.append((name, name_module))
    return out
