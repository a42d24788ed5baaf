"""Where a launcher's functions and its imported kernels are, found without importing anything.

- :func:`launcher_functions`: the functions a launcher's dotted name runs (``f``,
  ``Cls.method``, ``Cls.apply`` of an autograd Function, ``Cls`` of an ``nn.Module``).
- :func:`imported_kernels`: ``@triton.jit`` functions a module imports by name
  (``from pkg.kernels import _add``, ``from helpers import _add``) or through an imported
  module (``import pkg.kernels as K`` then ``K._add[grid](...)``), read from the imported
  module's source: first the entry's own files (``sources``, relative path -> text), then the
  import path (``sys.path``), located by file name only: nothing is imported or executed.
  Kernels launched from one file and defined in another are then discovered like local ones.
"""

from __future__ import annotations

import ast
import copy
import functools
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tuned.registry.kernel_facts import is_jit

__all__ = [
    "KERNEL_WRAPPERS",
    "alias_of",
    "dotted_name",
    "import_origin",
    "imported_kernels",
    "launch_site",
    "launched_kernel",
    "launched_name",
    "launcher_functions",
    "locate_launcher",
    "located_source",
    "module_functions",
    "module_statements",
    "only_raises",
    "with_imported_functions",
]

#: Largest module read to find an imported kernel (a generated file is not a kernel library).
MAX_SOURCE_BYTES = 2 << 20


def module_statements(tree: ast.Module) -> list[ast.stmt]:
    """The module's top-level statements, and those inside top-level ``if``/``try``/``with``
    blocks (``if has_triton(): @triton.jit def ...`` is a common guard), in source order."""
    out: list[ast.stmt] = []
    todo: list[ast.stmt] = list(reversed(tree.body))
    while todo:
        stmt = todo.pop()
        out.append(stmt)
        if isinstance(stmt, (ast.If, ast.Try, ast.With)):
            inner: list[ast.stmt] = [*stmt.body, *getattr(stmt, "orelse", [])]
            if isinstance(stmt, ast.Try):
                inner += [s for h in stmt.handlers for s in h.body] + stmt.finalbody
            todo.extend(reversed(inner))
    return out


def only_raises(fn: ast.FunctionDef) -> bool:
    """True for a stand-in whose body (after its docstring) is one ``raise``: the fallback of
    ``if has_triton(): def op(...): ... else: def op(...): raise ...``."""
    body = fn.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return len(body) == 1 and isinstance(body[0], ast.Raise)


def _defines(stmts: list[ast.stmt], name: str) -> list[ast.FunctionDef | ast.ClassDef]:
    return [s for s in stmts if isinstance(s, (ast.FunctionDef, ast.ClassDef)) and s.name == name]


def module_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """Name -> def of the module's functions (see :func:`module_statements`; the last
    definition of a name wins, but a stand-in that only raises never replaces one that
    does something)."""
    found: dict[str, ast.FunctionDef] = {}
    for stmt in module_statements(tree):
        if isinstance(stmt, ast.FunctionDef):
            if stmt.name in found and only_raises(stmt) and not only_raises(found[stmt.name]):
                continue
            found[stmt.name] = stmt
    return found


def dotted_name(node: ast.expr) -> str:
    """``a.b.c`` for a chain of attributes on a name, ``a`` for a name; "" for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _is_bound(stmt: ast.Assign, name: str) -> bool:
    return any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)


def alias_of(tree: ast.Module, name: str) -> str | None:
    """What the top-level ``name`` aliases when its last binding is ``name = a.b`` (``matmul
    = _matmul.apply``), as a dotted name; None for anything else."""
    for stmt in reversed(module_statements(tree)):
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) and stmt.name == name:
            return None
        if isinstance(stmt, ast.Assign) and _is_bound(stmt, name):
            target = dotted_name(stmt.value)
            return target if target and target != name else None
    return None


def launcher_functions(
    tree: ast.Module, qualname: str, *, backward: bool = True, _depth: int = 0
) -> list[ast.FunctionDef]:
    """The functions a launcher's dotted name runs: ``f``; ``Cls.method``; ``Cls.apply`` of an
    autograd Function (its ``forward`` and, with ``backward``, its ``backward``); ``Cls`` (an
    ``nn.Module``: its ``forward``); a top-level alias of one of these (``matmul =
    _matmul.apply``, ``op = _op_impl``). Empty when the module does not define it."""
    head, _, tail = qualname.partition(".")
    statements = module_statements(tree)
    real = [
        s
        for s in _defines(statements, head)
        if not isinstance(s, ast.FunctionDef) or not only_raises(s)
    ]
    for stmt in reversed(statements):  # the last definition wins, a stand-in that raises last
        if isinstance(stmt, ast.FunctionDef) and stmt.name == head and not tail:
            if only_raises(stmt) and real:
                continue
            return [stmt]
        if isinstance(stmt, ast.Assign) and not tail and _is_bound(stmt, head):
            target = dotted_name(stmt.value)  # the last binding: matmul = _matmul.apply
            if not target or target == head or _depth >= 4:
                return []
            return launcher_functions(tree, target, backward=backward, _depth=_depth + 1)
        if isinstance(stmt, ast.ClassDef) and stmt.name == head:
            methods = {s.name: s for s in stmt.body if isinstance(s, ast.FunctionDef)}
            if tail == "apply" and "forward" in methods:
                wanted = ("forward", "backward") if backward else ("forward",)
                return [methods[n] for n in wanted if n in methods]
            if not tail:
                return [methods["forward"]] if "forward" in methods else []
            return [methods[tail]] if tail in methods else []
    return []


def _read(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _module_source(dotted: str, sources: Mapping[str, str], search: Sequence[str]) -> str | None:
    rel = dotted.replace(".", "/")
    for candidate in (f"{rel}.py", f"{rel}/__init__.py"):
        if candidate in sources:
            return sources[candidate]
    for entry in search:
        if not entry or not Path(entry).is_dir():
            continue
        for candidate in (f"{rel}.py", f"{rel}/__init__.py"):
            text = _read(Path(entry) / candidate)
            if text is not None:
                return text
    return None


#: Wrappers that return the kernel they are given, to launch it as ``wrap(k)[grid](...)``:
#: ``torch.library.wrap_triton`` (inside a ``@triton_op``) and its former name.
KERNEL_WRAPPERS = frozenset({"wrap_triton", "capture_triton"})


def launched_kernel(node: ast.expr) -> ast.expr:
    """The kernel expression of a launch ``node[grid](...)``: ``k`` itself, or ``k`` of
    ``wrap_triton(k)`` (``torch.library.wrap_triton``, how a ``@triton_op`` launches)."""
    if (
        isinstance(node, ast.Call)
        and len(node.args) == 1
        and not node.keywords
        and dotted_name(node.func).rpartition(".")[2] in KERNEL_WRAPPERS
    ):
        return node.args[0]
    return node


def launch_site(node: ast.AST) -> tuple[ast.expr, ast.expr | None] | None:
    """(kernel expression, grid expression) of a call that launches or compiles a kernel with
    its arguments: ``k[grid](...)``, or ``k.warmup(..., grid=g)`` (Triton's ahead-of-time
    compile, whose knobs the returned ``CompiledKernel`` then launches with, as Triton's
    fused-softmax tutorial does); None for any other node."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Subscript):
        return func.value, func.slice
    if isinstance(func, ast.Attribute) and func.attr == "warmup":
        grid = next((kw.value for kw in node.keywords if kw.arg == "grid"), None)
        return func.value, grid
    return None


def launched_name(node: ast.expr) -> str:
    """``k`` for ``k[grid](...)`` and ``wrap_triton(k)[grid](...)``, ``K.k`` for
    ``K.k[grid](...)`` (a kernel of an imported module); "" for anything else (``self.k``,
    a call)."""
    node = launched_kernel(node)
    if isinstance(node, ast.Name):
        return node.id
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) and parts else ""


@functools.lru_cache(maxsize=256)
def _parsed(text: str | None) -> tuple[ast.Module, dict[str, ast.FunctionDef]] | None:
    """A module's source parsed, with its ``@triton.jit`` functions (cached: a worker
    materializes every candidate, and a library module is read once per process); None when
    there is no source or it does not parse."""
    if text is None:
        return None
    try:
        other = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    kernels = {
        name: fn
        for name, fn in module_functions(other).items()
        if any(is_jit(d) for d in fn.decorator_list)
    }
    return other, kernels


def _kernels_of(text: str | None) -> dict[str, ast.FunctionDef]:
    """The ``@triton.jit`` functions of a module's source (:func:`_parsed`)."""
    parsed = _parsed(text)
    return {} if parsed is None else parsed[1]


def locate_launcher(
    dotted: str, search: Sequence[str] | None = None
) -> tuple[str, str, Path] | None:
    """(module, qualname, file) of a launcher given as a dotted path into an installed module
    (``liger_kernel.ops.rms_norm.LigerRMSNormFunction.apply`` -> ``liger_kernel.ops.rms_norm``,
    ``LigerRMSNormFunction.apply``, its ``.py`` file), found on the import path without
    importing anything; None when no prefix of ``dotted`` is a module file. The longest
    module prefix wins; a package's prefix is its ``__init__.py``. A name the module only
    re-exports (``from .chunk import chunk_simple_gla`` in a package's ``__init__``, as
    flash-linear-attention's public API is) is followed to the module that defines it, a few
    hops at most. Its source is what :func:`~tuned.registry.discovery.discover_source` and
    :func:`~tuned.registry.injection.materialize` take, with ``qualname`` as launcher."""
    search = sys.path if search is None else search
    found = _module_file(dotted, search)
    for _ in range(_REEXPORT_HOPS):
        if found is None:
            return None
        target = _reexported(found[2], found[0], found[1])
        path = None if target is None else _exact_module_file(target[0], search)
        if target is None or path is None:  # defined here, or from what is no module file
            return found
        found = (target[0], target[1], path)
    return None


def located_source(dotted: str) -> tuple[str, str, Path, str] | None:
    """:func:`locate_launcher` on the import path, with the module file's text; None when it
    is not found, larger than ``MAX_SOURCE_BYTES`` or not UTF-8 text."""
    located = locate_launcher(dotted)
    if located is None:
        return None
    module, qualname, path = located
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return module, qualname, path, text


def _exact_module_file(module: str, search: Sequence[str]) -> Path | None:
    """The file of ``module`` itself (``a/b.py`` or ``a/b/__init__.py``) on ``search``."""
    rel = module.replace(".", "/")
    for entry in search:
        if entry and Path(entry).is_dir():
            for path in (Path(entry) / f"{rel}.py", Path(entry) / rel / "__init__.py"):
                if path.is_file():
                    return path
    return None


#: Re-exports followed from the dotted path a user gave to the module defining the launcher.
_REEXPORT_HOPS = 5


def _module_file(dotted: str, search: Sequence[str]) -> tuple[str, str, Path] | None:
    """The longest prefix of ``dotted`` that is a module (``a/b.py``) or a package
    (``a/b/__init__.py``) on ``search``: (module, the rest, its file)."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:cut])
        path = _exact_module_file(module, search)
        if path is not None:
            return module, ".".join(parts[cut:]), path
    return None


def import_origin(stmt: ast.ImportFrom, package: str | None) -> str | None:
    """The absolute module a ``from ... import`` reads from, inside ``package`` (that of the
    module holding ``stmt``: ``attorch`` for ``attorch/act_layers.py`` and for
    ``attorch/__init__.py``): ``from .act_kernels import k`` is ``attorch.act_kernels``,
    ``from . import k`` is ``attorch``. None for a relative import when ``package`` is None
    (not known) or the import climbs above the top package (Python refuses it)."""
    if not stmt.level:
        return stmt.module or None
    if package is None:
        return None
    parts = package.split(".") if package else []
    if stmt.level > len(parts):
        return None
    base = parts[: len(parts) - stmt.level + 1]
    return ".".join([*base, *([stmt.module] if stmt.module else [])]) or None


def _package(module: str, search: Sequence[str]) -> str | None:
    """The package of the module named ``module`` as found on ``search`` (itself when it is a
    package's ``__init__.py``); None when it is no module file there (an entry's own file,
    named ``softmax.py``, whose relative imports do not resolve when it runs either)."""
    path = _exact_module_file(module, search) if module else None
    if path is None:
        return None
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _reexported(path: Path, module: str, qualname: str) -> tuple[str, str] | None:
    """(module, qualname there) that ``qualname``'s first name comes from when ``path``
    (module ``module``) does not define it but imports it by name at top level (``from .x
    import f``, ``from pkg.x import f as g``); None when the module defines it, binds it
    otherwise, or cannot be read."""
    head, _, rest = qualname.partition(".")
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    source: tuple[str, str] | None = None
    for stmt in tree.body:  # the last binding wins, as at run time
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if stmt.name == head:
                source = None
        elif isinstance(stmt, ast.Assign):
            if any(isinstance(t, ast.Name) and t.id == head for t in stmt.targets):
                source = None
        elif isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if (alias.asname or alias.name) != head:
                    continue
                origin = import_origin(stmt, package)
                source = (origin, alias.name) if origin else None
    if source is None:
        return None
    return source[0], f"{source[1]}.{rest}" if rest else source[1]


def imported_kernels(
    tree: ast.Module,
    sources: Mapping[str, str] | None = None,
    search: Sequence[str] | None = None,
    *,
    module: str = "",
    package: str = "",
    origins: dict[str, tuple[str, ast.Module]] | None = None,
) -> dict[str, ast.FunctionDef]:
    """Local name -> ``@triton.jit`` function, for each kernel ``tree`` imports by name with a
    ``from ... import`` at top level (see the module docstring). With ``module``, the dotted
    name of the module ``tree`` is (an installed package's, ``attorch.act_layers``), relative
    imports are followed too (``from .act_kernels import act_func_forward_kernel``, how a
    library's layers import its kernels); or with ``package``, the package a copy of it is
    imported in (the worker's copy has no module file of its own). ``origins``, when given,
    gets each local name's module: its dotted name and syntax tree (where its decorators'
    helpers are read)."""
    sources = sources or {}
    search = sys.path if search is None else search
    within = package or _package(module, search)
    found: dict[str, ast.FunctionDef] = {}
    parsed: dict[str, tuple[ast.Module, dict[str, ast.FunctionDef]] | None] = {}

    def kernels(dotted: str) -> dict[str, ast.FunctionDef]:
        if dotted not in parsed:
            parsed[dotted] = _parsed(_module_source(dotted, sources, search))
        held = parsed[dotted]
        return {} if held is None else held[1]

    def add(local: str, fn: ast.FunctionDef, dotted: str) -> None:
        found[local] = fn
        held = parsed.get(dotted)
        if origins is not None and held is not None:
            origins[local] = (dotted, held[0])

    for stmt in tree.body:
        if isinstance(stmt, ast.Import):  # import pkg.kernels as K: K._add[grid](...)
            for alias in stmt.names:
                local = alias.asname or alias.name
                for name, fn in kernels(alias.name).items():
                    add(f"{local}.{name}", fn, alias.name)
        if not isinstance(stmt, ast.ImportFrom) or (origin := import_origin(stmt, within)) is None:
            continue
        for alias in stmt.names:
            local = alias.asname or alias.name
            direct = kernels(origin).get(alias.name)
            if direct is not None:
                add(local, direct, origin)
            else:  # from pkg import kernels: kernels._add[grid](...)
                inner = f"{origin}.{alias.name}"
                for name, fn in kernels(inner).items():
                    add(f"{local}.{name}", fn, inner)
    return found


def with_imported_functions(
    tree: ast.Module,
    module: str = "",
    sources: Mapping[str, str] | None = None,
    search: Sequence[str] | None = None,
    *,
    package: str = "",
) -> ast.Module:
    """``tree`` with, before its own statements, the top-level functions it imports by name
    from modules that can be read (``from .utils import element_wise_kernel_configs``;
    relative imports resolved as :func:`imported_kernels` does), so that an autotune
    decorator's ``configs=helper()`` is read where the helper is defined. ``tree`` itself
    when it imports none; its own nodes are kept (the copy edits them in place)."""
    sources = sources or {}
    search = sys.path if search is None else search
    within = package or _package(module, search)
    imported: list[ast.stmt] = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.ImportFrom) or (origin := import_origin(stmt, within)) is None:
            continue
        held = _parsed(_module_source(origin, sources, search))
        if held is None:
            continue
        functions = module_functions(held[0])
        for alias in stmt.names:
            fn = functions.get(alias.name)
            if fn is None or any(is_jit(d) for d in fn.decorator_list):
                continue
            if alias.asname and alias.asname != fn.name:  # from .utils import configs as c
                fn = copy.copy(fn)
                fn.name = alias.asname
            imported.append(fn)
    if not imported:
        return tree
    return ast.Module(body=[*imported, *tree.body], type_ignores=tree.type_ignores)
