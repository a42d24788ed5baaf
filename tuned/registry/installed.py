"""Launchers that live in an installed package: the module whose copy is tuned.

An entry's launcher may name a function, an autograd Function's ``apply``, a method or an
``nn.Module`` that its module imports from an installed package (``from
liger_kernel.ops.rms_norm import LigerRMSNormFunction`` then ``launcher:
LigerRMSNormFunction.apply``). The knobs are bound in that package's module, not in the
entry's, so the module tuned is the installed one: :func:`find_installed` maps the launcher's
dotted name, through the entry's imports, to the installed module's file (read, never
imported: :func:`~tuned.registry.kernel_sources.locate_launcher`), its source and the
launcher's qualified name there. Candidates are generated copies of that source; the worker
imports a copy under a private name inside the original package (``liger_kernel.ops.
ktuned_candidate_<hash>``), so its absolute and relative imports resolve as the original's
do, and the installed file and the entry's files are never written. The entry's own module
still provides the inputs and the reference.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from tuned.registry.kernel_sources import located_source

__all__ = ["InstalledLauncher", "absolute_path", "find_installed", "package_of"]


@dataclass(frozen=True)
class InstalledLauncher:
    """The installed module a launcher is defined in: its dotted name, the launcher's
    qualified name in it, its file and its source as read."""

    module: str
    qualname: str
    path: Path
    source: str


def package_of(module: str) -> str:
    """The package a module belongs to (``liger_kernel.ops`` for ``liger_kernel.ops.rms_norm``);
    "" for a top-level module."""
    return module.rpartition(".")[0]


def absolute_path(tree: ast.Module, dotted: str) -> str | None:
    """``dotted`` (a launcher's name in the entry's module) as an absolute dotted path through
    the module's top-level imports: ``F.apply`` after ``from pkg.mod import Fn as F`` is
    ``pkg.mod.Fn.apply``; ``m.f`` after ``import pkg.mod as m`` is ``pkg.mod.f``; a path that
    starts with an imported package (``pkg.mod.f`` after ``import pkg``) is itself, and so is
    a dotted path whose first name the module does not bind at all (``ktuned registry add``
    writes ``pkg.mod.Fn.apply`` with no import: the worker imports ``pkg``, as
    :func:`~tuned.registry.launchers.check_paths_bound` allows). None when the first name is
    bound otherwise (a def, a class, an assignment, a relative import) or there is no dot."""
    head, _, rest = dotted.partition(".")
    tail = f".{rest}" if rest else ""
    found: str | None = None
    bound = False
    for stmt in tree.body:  # the last binding wins, as at run time
        if isinstance(stmt, ast.ImportFrom) and not stmt.level and stmt.module:
            for alias in stmt.names:
                if (alias.asname or alias.name) == head:
                    found, bound = f"{stmt.module}.{alias.name}{tail}", True
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname == head:
                    found, bound = f"{alias.name}{tail}", True
                elif alias.asname is None and alias.name.split(".")[0] == head:
                    found, bound = dotted, True
        elif isinstance(stmt, (ast.FunctionDef, ast.ClassDef, ast.Assign)):
            names = [stmt.name] if not isinstance(stmt, ast.Assign) else []
            if isinstance(stmt, ast.Assign):
                names = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
            if head in names:
                found, bound = None, True  # rebound in the entry itself
        elif isinstance(stmt, ast.ImportFrom) and any(
            (alias.asname or alias.name) == head for alias in stmt.names
        ):  # relative: one of the entry's own modules
            found, bound = None, True
    return dotted if not bound and rest else found


def find_installed(
    source: str, launcher: str, local: frozenset[str] = frozenset()
) -> InstalledLauncher | None:
    """The installed module defining the entry's ``launcher`` (module docstring), or None:
    the name is not imported, the module is one of the entry's own files (``local``), no
    module file is found on the import path, or it cannot be read."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    dotted = absolute_path(tree, launcher)
    if dotted is None or dotted.split(".")[0] in local:
        return None
    found = located_source(dotted)
    if found is None:
        return None
    module, qualname, path, text = found
    return InstalledLauncher(module=module, qualname=qualname, path=path, source=text)
