"""A best whose knobs are injected: ``ktuned best`` shows the copy as a diff, the runtime and
the export run the generated copy (the launcher never sees the injected knobs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from tests.registry.test_discovery import ROWS_SOURCE
from tests.runtime.rows import Rows
from tuned.cli import main
from tuned.registry import load_entry
from tuned.runtime import load
from tuned.runtime.export import export_kernel

LABELS = ("M=4xN=100/float32",)
CHOSEN = {"BLOCK_SIZE": "x2", "num_warps": "/2"}


def _tuned_store(tmp_path: Path) -> Path:
    directory = tmp_path / "rows"
    directory.mkdir()
    (directory / "rows.py").write_text(ROWS_SOURCE)
    doc = {
        "name": "rows",
        "module": "rows.py",
        "launcher": "double_rows",
        "inputs": "make_inputs",
        "shapes": [{"M": 4, "N": 100, "perf": True}],
        "dtypes": ["float32"],
    }
    (directory / "kernel.yaml").write_text(yaml.safe_dump(doc))
    state = tmp_path / "state"
    rows = Rows.open(state, load_entry(directory))
    base = rows.evaluate(rows.candidate(original=True), dict.fromkeys(LABELS, 2e-3))
    best = rows.evaluate(rows.candidate(CHOSEN), dict.fromkeys(LABELS, 1e-3))
    rows.accept(best, base)
    rows.store.close()
    return state


def test_best_shows_the_generated_copy_as_a_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = _tuned_store(tmp_path)
    assert main(["best", "rows", "--state-dir", str(state)]) == 0
    out = capsys.readouterr().out
    assert "# the copy that runs, against the original:" in out
    assert "+    BLOCK_SIZE = min(BLOCK_SIZE * 2, 65536)\n" in out
    assert "+    num_warps = max(num_warps // 2, 1)\n" in out
    assert main(["best", "rows", "--state-dir", str(state), "--json"]) == 0
    assert "BLOCK_SIZE = min(BLOCK_SIZE * 2" in json.loads(capsys.readouterr().out)["diff"]


def test_runtime_and_export_run_the_generated_copy(tmp_path: Path) -> None:
    state = _tuned_store(tmp_path)
    kernel = load("rows", store=state)
    assert kernel.status == "tuned"
    x = torch.randn(3, 37)
    torch.testing.assert_close(kernel(x), x * 2)  # no "unexpected keyword BLOCK_SIZE"
    from tuned.store.sqlite import SqliteStore

    store = SqliteStore(state / "ktuned.sqlite")
    try:
        manifest_path = export_kernel(store, "rows", tmp_path / "out")
    finally:
        store.close()
    manifest = json.loads(manifest_path.read_text())
    assert manifest["original"]["knobs"] == {}
    (variant,) = manifest["variants"]
    assert variant["knobs"] == {}
    assert "+    BLOCK_SIZE = min(BLOCK_SIZE * 2, 65536)" in variant["diff"]
    text = (manifest_path.parent / variant["file"]).read_text()
    assert "BLOCK_SIZE = min(BLOCK_SIZE * 2, 65536)" in text
