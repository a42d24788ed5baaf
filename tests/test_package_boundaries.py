"""Package boundaries: the libraries never import the service."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("library", ["policies", "profilers", "clustering"])
def test_library_never_imports_tuned(library: str) -> None:
    files = sorted((ROOT / library).rglob("*.py"))
    assert (ROOT / library / "py.typed").exists()
    offenders = [str(f.relative_to(ROOT)) for f in files if "tuned" in _imports(f)]
    assert offenders == []
