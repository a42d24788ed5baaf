"""clustering/ is a library below policies: it imports neither ``tuned`` nor ``policies``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_clustering_imports_neither_tuned_nor_policies() -> None:
    for path in sorted((ROOT / "clustering").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in {"tuned", "policies"}, f"{path}: {name}"
