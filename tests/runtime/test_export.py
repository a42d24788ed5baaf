"""``ktuned export``: the exported directory runs in a fresh interpreter without ktuned, routes
like ``load``, refuses tampered files; ``--format triton-configs``; ``ktuned status``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.runtime.rows import ROOT, Rows, example
from tests.runtime.test_dispatch import A_KNOBS, B_KNOBS, LARGE, SMALL, _xy, per_shape_store
from tuned.runtime import load


def ktuned(*args: str | Path, state: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tuned.cli", *map(str, args), "--state-dir", str(state)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


def run_fresh(code: str, cwd: Path) -> dict[str, Any]:
    """Run ``code`` in an isolated interpreter (-I: no PYTHONPATH, no user site, script dir
    not on the path) with a clean environment and ktuned's packages blocked from import;
    return its JSON output."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}
    if "TRITON_INTERPRET" in os.environ:
        env["TRITON_INTERPRET"] = os.environ["TRITON_INTERPRET"]
    prelude = textwrap.dedent(
        """
        import json, logging, sys
        # ktuned may be installed in this interpreter (CI's editable install): every one of
        # its packages is made unimportable, whatever the exported code tries.
        for name in ("tuned", "policies", "profilers", "clustering"):
            sys.modules[name] = None
        logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    out["stderr"] = proc.stderr
    return out


USE_EXPORT = """
    import torch
    sys.path.insert(0, {parent!r})
    import {package} as exported
    from {package} import vector_add
    import os
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    device = "cuda" if torch.cuda.is_available() and not interpret else "cpu"
    def xy(n):
        g = torch.Generator().manual_seed(n)
        return torch.randn(n, generator=g).to(device), torch.randn(n, generator=g).to(device)
    x, y = xy(1000)
    print(json.dumps({{
        "status": exported.kernel.status,
        "small": vector_add.route(xy(1000)).candidate_id,
        "large": vector_add.route(xy(40000)).candidate_id,
        "correct": bool(torch.allclose(vector_add(x, y), x + y)),
        "ktuned_loaded": any(
            m.split(".")[0] == "tuned" for m, v in sys.modules.items() if v is not None
        ),
    }}))
"""


def test_export_runs_in_a_fresh_interpreter_without_ktuned(tmp_path: Path) -> None:
    a, b = per_shape_store(tmp_path / "state")
    out = tmp_path / "exports" / "va_tuned"
    run = ktuned("export", "vector_add", "--out", out, state=tmp_path / "state")
    assert run.returncode == 0, run.stderr
    assert "the best differs by shape" in run.stdout and LARGE in run.stdout

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kernel"] == "vector_add" and manifest["exported_at"][:2] == "20"
    assert manifest["fingerprint"]["triton"] and manifest["timing_kind"] == "interpreter"
    assert [v["candidate"] for v in manifest["variants"]] == [a, b]
    assert [v["knobs"] for v in manifest["variants"]] == [A_KNOBS, B_KNOBS]
    shapes = {s["label"]: s for s in manifest["shapes"]}
    assert shapes[SMALL]["variant"] == 0 and shapes[LARGE]["variant"] == 1
    assert abs(shapes[LARGE]["speedup"] - 2.5) < 1e-9
    assert shapes[LARGE]["speedup_interval"]["low"] > 2.0
    assert manifest["best"]["speedup"] > 1.0
    (accepted,) = manifest["best"]["acceptance"]
    assert accepted["status"] == "accepted" and accepted["second"]["low"] > 1.0

    result = run_fresh(USE_EXPORT.format(parent=str(out.parent), package=out.name), tmp_path)
    assert result["status"] == "tuned" and result["correct"]
    assert (result["small"], result["large"]) == (a, b)
    assert not result["ktuned_loaded"]

    # Export again into the same directory: replaced. Into a foreign directory: refused.
    assert ktuned("export", "vector_add", "--out", out, state=tmp_path / "state").returncode == 0
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    refused = ktuned("export", "vector_add", "--out", foreign, state=tmp_path / "state")
    assert refused.returncode == 2 and "not an earlier export" in refused.stderr


def test_exported_variant_tampered_with_is_refused(tmp_path: Path) -> None:
    per_shape_store(tmp_path / "state")
    # Make B an 'LLM' variant with its own module file, then tamper with that file.
    spec = example("vector_add")
    rows = Rows.open(tmp_path / "state", spec)
    source = spec.module_source + "\n# rewritten\n"
    llm = rows.evaluate(rows.candidate(B_KNOBS, source=source), {SMALL: 1.8e-3, LARGE: 7e-3})
    base = {SMALL: 2.0e-3, LARGE: 20e-3}  # per_shape_store's original
    rows.compare(llm, rows.candidate(original=True), times=2, against_medians=base)
    rows.store.close()
    out = tmp_path / "va_llm"
    assert ktuned("export", "vector_add", "--out", out, state=tmp_path / "state").returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    (entry,) = [v for v in manifest["variants"] if v["candidate"] == llm.id]
    path = out / entry["file"]
    path.write_text(path.read_text() + "\nimport os  # injected\n")

    result = run_fresh(USE_EXPORT.format(parent=str(tmp_path), package="va_llm"), tmp_path)
    assert result["status"] == "refused" and result["correct"]
    assert result["small"] == result["large"] == "original"
    assert "refused" in result["stderr"] and "ERROR" in result["stderr"]


def test_triton_configs_format_prints_runnable_config_lists(tmp_path: Path) -> None:
    per_shape_store(tmp_path)
    run = ktuned("export", "vector_add", "--format", "triton-configs", state=tmp_path)
    assert run.returncode == 0, run.stderr
    assert f"# {LARGE}: configs[1]" in run.stdout
    namespace: dict[str, Any] = {}
    exec(run.stdout, namespace)
    configs = namespace["configs"]
    assert [c.kwargs for c in configs] == [{"BLOCK_SIZE": 256}, {"BLOCK_SIZE": 4096}]
    assert [c.num_warps for c in configs] == [4, 8]


def test_status_shows_per_shape_bests_and_export_needs_results(tmp_path: Path) -> None:
    per_shape_store(tmp_path)
    status = ktuned("status", state=tmp_path)
    assert status.returncode == 0, status.stderr
    assert "vector_add: the best differs by shape" in status.stdout and LARGE in status.stdout

    Rows.open(tmp_path / "empty", example("matmul")).store.close()
    none = ktuned("export", "matmul", "--out", tmp_path / "x", state=tmp_path / "empty")
    assert none.returncode == 2 and "nothing to export" in none.stderr
    missing = ktuned("export", "vector_add", state=tmp_path)
    assert missing.returncode == 2 and "--out" in missing.stderr


def test_an_unconfirmed_per_shape_best_is_neither_dispatched_nor_exported(tmp_path: Path) -> None:
    state = tmp_path / "state"
    rows = Rows.open(state, example("vector_add"))
    base = rows.evaluate(rows.candidate(original=True), {SMALL: 2.0e-3, LARGE: 20e-3})
    a = rows.evaluate(rows.candidate(A_KNOBS), {SMALL: 1.0e-3, LARGE: 12e-3})
    # B is the fastest on LARGE by its own first median (what used to ship it there) ...
    b = rows.evaluate(rows.candidate(B_KNOBS), {SMALL: 1.8e-3, LARGE: 8e-3})
    rows.accept(a, base)
    # ... but side by side with the original it won once, then lost (re-measured: slower).
    rows.compare(b, base)
    rows.compare(b, base, {SMALL: 2.2e-3, LARGE: 21e-3})
    rows.store.close()

    kernel = load("vector_add", store=state)
    assert [v.candidate_id for v in kernel.variants] == [a.id]
    assert kernel.route(_xy(1 << 20)).candidate_id == a.id
    out = tmp_path / "va"
    assert ktuned("export", "vector_add", "--out", out, state=state).returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert b.id not in {v["candidate"] for v in manifest["variants"]}
    shapes = {s["label"]: s for s in manifest["shapes"]}
    assert manifest["variants"][shapes[LARGE]["variant"]]["candidate"] == a.id
