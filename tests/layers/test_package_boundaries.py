"""Package boundaries: the import layers of docs/architecture.md, over the static import graph.

Every module of ``tuned/``, ``policies/``, ``profilers/`` and ``clustering/`` is parsed and its
imports collected, function-level and ``TYPE_CHECKING`` ones included (an import deferred into
a function still runs, and a type-only one still ties the layers together). A failure names
the importing module and what it imports.
"""

from __future__ import annotations

import ast
import itertools
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tuned", "policies", "profilers", "clustering")
LIBRARIES = ("policies", "profilers", "clustering")

#: What a user's process loads (``tuned.runtime``, ``ktuned export``) may import of ktuned:
#: the store, the registry and shared values, nothing else (design.md, "Layers").
RUNTIME_ALLOWED = (
    "tuned.runtime",
    "tuned.store",
    "tuned.registry",
    "tuned.errors",
    "tuned.paths",
    "tuned.outcomes",
    "tuned.acceptance",
    "tuned.text",
)
#: Never in the runtime's import closure: the tuner, its libraries and heavy dependencies.
RUNTIME_FORBIDDEN = (
    "tuned.search",
    "tuned.pipeline",
    "tuned.tuning",
    "tuned.profiling",
    "tuned.evaluation",
    "tuned.llm",
    "tuned.daemon",
    "tuned.metrics",
    "tuned.reporting",
    "tuned.cli",
    "policies",
    "clustering",
    "sklearn",
    "scipy",
    "openai",
    "matplotlib",
    "prometheus_client",
)
TUNER = ("tuned.search", "tuned.pipeline", "tuned.tuning")

#: (importer, forbidden, transitively): modules under ``importer`` never import modules
#: under ``forbidden``, directly or (``transitively``) through any chain of imports.
LAYER_RULES = (
    [(tuner, "tuned.daemon", True) for tuner in TUNER]
    + [("tuned.store", upper, True) for upper in (*TUNER, "tuned.daemon", "tuned.llm")]
    + [
        ("tuned.evaluation", "tuned.search", True),
        ("tuned.evaluation", "tuned.store", False),  # the sandboxed side reaches no store
        ("tuned.llm", "tuned.search", True),
    ]
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _imports_of(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """Every module ``path`` imports (absolute names; ``from a import b`` adds ``a.b`` when
    that is a module), anywhere in the file."""
    modules = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            out.add(module)
            out.update(
                f"{module}.{alias.name}"
                for alias in node.names
                if f"{module}.{alias.name}" in modules
            )
    return out


@cache
def _graph() -> dict[str, frozenset[str]]:
    modules = _modules()
    return {name: frozenset(_imports_of(name, path, modules)) for name, path in modules.items()}


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _executed(imported: str) -> list[str]:
    """``import a.b.c`` runs ``a``, ``a.b`` and ``a.b.c``."""
    parts = imported.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1)]


def _chains(start: str, graph: Mapping[str, frozenset[str]]) -> dict[str, list[str]]:
    """Every module reachable from ``start`` (ktuned's and third parties'), each with one
    import chain that reaches it."""
    chains = {start: [start]}
    todo = [start]
    while todo:
        module = todo.pop()
        for imported in sorted(graph.get(module, ())):
            for name in _executed(imported):
                if name not in chains:
                    chains[name] = [*chains[module], name]
                    if name in graph:
                        todo.append(name)
    return chains


def _violations(importer: str, forbidden: str, transitively: bool) -> list[str]:
    graph = _graph()
    out = []
    for module in sorted(m for m in graph if _under(m, importer)):
        if transitively:
            chains = _chains(module, graph)
            out += [" -> ".join(c) for name, c in chains.items() if _under(name, forbidden)][:1]
        else:
            out += [f"{module} -> {i}" for i in sorted(graph[module]) if _under(i, forbidden)]
    return out


def _direct_imports(importer: str, imported: str) -> list[str]:
    """``module -> import`` for every module under ``importer`` that imports one under
    ``imported`` itself."""
    graph = _graph()
    return [
        f"{m} -> {i}"
        for m in sorted(graph)
        if _under(m, importer)
        for i in sorted(graph[m])
        if _under(i, imported)
    ]


@pytest.mark.parametrize("library", LIBRARIES)
def test_library_never_imports_tuned(library: str) -> None:
    assert (ROOT / library / "py.typed").exists()
    assert _direct_imports(library, "tuned") == []


@pytest.mark.parametrize("package", PACKAGES)
def test_nothing_imports_the_benchmarks(package: str) -> None:
    """``bench/`` sits on top: it uses ktuned as a user does, and nothing ktuned ships (the
    wheel has no ``bench``) imports it."""
    assert _direct_imports(package, "bench") == []


def test_runtime_imports_only_store_registry_and_shared_values() -> None:
    graph = _graph()
    direct = [
        f"{m} -> {i}"
        for m in sorted(graph)
        if _under(m, "tuned.runtime")
        for i in sorted(graph[m])
        if _under(i, "tuned")
        and i != "tuned"  # the package root: __version__
        and not any(_under(i, allowed) for allowed in RUNTIME_ALLOWED)
    ]
    assert direct == [], "tuned.runtime imports outside the store, registry, shared values"
    closure = [
        " -> ".join(chain)
        for start in sorted(m for m in graph if _under(m, "tuned.runtime"))
        for name, chain in _chains(start, graph).items()
        if any(_under(name, bad) for bad in RUNTIME_FORBIDDEN)
    ]
    assert closure == [], "tuned.runtime reaches the tuner or a heavy dependency"


@pytest.mark.parametrize(
    ("importer", "forbidden", "transitively"),
    LAYER_RULES,
    ids=[f"{a}-never-{b}" for a, b, _ in LAYER_RULES],
)
def test_layer(importer: str, forbidden: str, transitively: bool) -> None:
    assert _violations(importer, forbidden, transitively) == []


def test_only_the_store_speaks_to_postgresql() -> None:
    """One persistence layer: the PostgreSQL driver is imported by ``tuned.store`` alone (the
    LLM's ledger included); everything else goes through the store's API."""
    graph = _graph()
    outside = [
        f"{module} -> {i}"
        for module in sorted(graph)
        if not _under(module, "tuned.store")
        for i in sorted(graph[module])
        if _under(i, "psycopg")
    ]
    assert outside == []


def _cycle(edges: Mapping[str, Mapping[str, tuple[str, str]]]) -> list[str] | None:
    """One cycle of ``edges`` as a path of subpackages, or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, {})):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def _subpackage(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_import_cycle_among_tuned_subpackages() -> None:
    edges: dict[str, dict[str, tuple[str, str]]] = {}
    for module, imported in _graph().items():
        if not _under(module, "tuned") or module == "tuned":
            continue
        for name in sorted(imported):
            if _under(name, "tuned") and name != "tuned":
                a, b = _subpackage(module), _subpackage(name)
                if a != b:
                    edges.setdefault(a, {}).setdefault(b, (module, name))
    cycle = _cycle(edges)
    if cycle is not None:
        via = [" imports ".join(edges[a][b]) for a, b in itertools.pairwise(cycle)]
        pytest.fail("import cycle " + " -> ".join(cycle) + ": " + "; ".join(via))


def test_importing_the_runtime_leaves_the_tuner_out() -> None:
    """The static graph's promise, checked on a real interpreter."""
    code = (
        "import sys, tuned.runtime\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {LIBRARIES!r} + "
        "('sklearn', 'scipy', 'openai', 'matplotlib') or m.startswith(('tuned.llm', "
        "'tuned.search', 'tuned.daemon', 'tuned.evaluation')))\n"
        "print(','.join(bad))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
