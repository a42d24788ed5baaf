"""Hostile or corrupt store rows and the runtime: stored knobs outside the declared space,
a generation that names a path, a kernel name that ends a docstring or holds control
characters. ``load`` falls back to the original (one warning naming the store and the field),
``ktuned export`` refuses or escapes; nothing is written outside the loader's directory."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.runtime.rows import Rows, example
from tests.runtime.test_dispatch import A_KNOBS, LARGE, SMALL, _xy
from tests.runtime.test_export import ktuned, run_fresh
from tuned.runtime import RuntimeLoadError, load
from tuned.runtime import loader as runtime_loader
from tuned.runtime.plan import Plan, _declared, knob_problem, plan_on
from tuned.store.sqlite import SqliteStore
from tuned.text import printable

LABELS = {SMALL: 2.0e-3, LARGE: 20e-3}


def _accepted_store(state: Path, name: str | None = None) -> tuple[Rows, str]:
    """vector_add (or a copy of it named ``name``) with candidate A accepted over the
    original; returns the open rows and A's id."""
    spec = example("vector_add")
    if name is not None:
        spec = dataclasses.replace(spec, name=name)
    rows = Rows.open(state, spec)
    base = rows.evaluate(rows.candidate(original=True), LABELS)
    a = rows.evaluate(rows.candidate(A_KNOBS), {SMALL: 1.0e-3, LARGE: 10e-3})
    rows.accept(a, base)
    return rows, a.id


def _sql(state: Path, statement: str, *args: object) -> None:
    db = sqlite3.connect(state / "ktuned.sqlite")
    with db:
        db.execute(statement, args)
    db.close()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "tuned.runtime" and r.levelno >= logging.WARNING
    ]


@pytest.mark.parametrize(
    ("knobs_json", "field"),
    [
        ('{"BLOCK_SIZE": 256, "num_warps": 4, "pad": "x"}', "pad"),
        ('{"BLOCK_SIZE": 300, "num_warps": 4}', "BLOCK_SIZE"),
        ('{"BLOCK_SIZE": true, "num_warps": 4}', "BLOCK_SIZE"),
        ('{"BLOCK_SIZE": "256", "num_warps": 4}', "BLOCK_SIZE"),
    ],
)
def test_stored_knobs_outside_the_declared_space_fall_back_to_the_original(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, knobs_json: str, field: str
) -> None:
    rows, a = _accepted_store(tmp_path)
    rows.store.close()
    assert load("vector_add", store=tmp_path).variants[0].candidate_id == a
    _sql(tmp_path, "UPDATE candidates SET knobs_json=? WHERE id=?", knobs_json, a)

    caplog.set_level(logging.INFO)
    kernel = load("vector_add", store=tmp_path)
    assert kernel.status == "refused"
    assert [v.candidate_id for v in kernel.variants] == ["original"]
    (message,) = _warnings(caplog)
    assert repr(field) in message and str(tmp_path) in message and a in message
    x, y = _xy(3000)
    assert torch.allclose(kernel(x, y), x + y)
    with pytest.raises(RuntimeLoadError, match=field):
        load("vector_add", store=tmp_path, fallback="error")

    # ktuned export refuses, naming the field; no manifest is written.
    out = tmp_path / "exported"
    run = ktuned("export", "vector_add", "--out", out, state=tmp_path)
    assert run.returncode != 0 and field in run.stderr
    assert not (out / "manifest.json").exists()


@pytest.mark.parametrize(
    ("knobs_json", "field"),
    [('{"BLOCK_SIZE": NaN, "num_warps": 2}', "BLOCK_SIZE"), ('["BLOCK_SIZE"]', "knobs_json")],
)
def test_stored_knobs_of_the_wrong_type_never_run(
    tmp_path: Path, knobs_json: str, field: str
) -> None:
    """NaN or a list where an object of knobs belongs: never dispatched. The plan refuses it
    (fallback to the original); a store that checks decoded types itself may refuse first
    (RuntimeLoadError naming the row): either way the kernel is never called with it."""
    rows, a = _accepted_store(tmp_path)
    rows.store.close()
    _sql(tmp_path, "UPDATE candidates SET knobs_json=? WHERE id=?", knobs_json, a)
    try:
        kernel = load("vector_add", store=tmp_path)
    except RuntimeLoadError as exc:
        assert field in str(exc)
    else:
        assert kernel.status == "refused" and field in kernel.reason
        assert [v.candidate_id for v in kernel.variants] == ["original"]
    out = tmp_path / "exported"
    run = ktuned("export", "vector_add", "--out", out, state=tmp_path)
    assert run.returncode != 0 and field in run.stderr
    assert not (out / "manifest.json").exists()


def test_knob_checks_against_the_declared_space() -> None:
    space = {"BLOCK_SIZE": (128, 256), "num_warps": (4, 8)}
    baseline = {"BLOCK_SIZE": 1024, "num_warps": 4}
    assert knob_problem({"BLOCK_SIZE": 256, "num_warps": 8}, space, baseline) is None
    assert knob_problem({"BLOCK_SIZE": 1024}, space, baseline) is None  # the baseline
    for knobs, field in [
        ({"BLOCK_SIZE": math.nan}, "'BLOCK_SIZE'"),
        ({"BLOCK_SIZE": math.inf}, "'BLOCK_SIZE'"),
        ({"BLOCK_SIZE": 256.0}, "'BLOCK_SIZE'"),
        ({"BLOCK_SIZE": [256]}, "'BLOCK_SIZE'"),
        ({"pad": "x"}, "'pad'"),
        ({"a b": 1}, "'a b'"),
        (["BLOCK_SIZE"], "knobs_json"),
    ]:
        problem = knob_problem(knobs, space, baseline)
        assert problem is not None and field in problem, knobs
    # A launcher of several kernels: discovery names each kernel's knobs `kernel.NAME`.
    scoped = {"_fwd.BLOCK_N": (512, 1024), "_fwd.num_warps": (4, 8)}
    assert knob_problem({"_fwd.BLOCK_N": 1024}, scoped, {}) is None
    for name in ("_fwd..BLOCK_N", ".BLOCK_N", "_fwd.", "_fwd.BLOCK N", "_fwd.class"):
        problem = knob_problem({name: 1024}, {}, {})
        assert problem is not None and "not a knob name" in problem, name
    # Without a declared space (a reference entry): scalar, finite values only.
    assert knob_problem({"BLOCK": 64}, {}, {}) is None
    assert knob_problem({"BLOCK": math.nan}, {}, {}) is not None
    assert printable("a\x1b[2J\nb\u202e") == "a\\x1b[2J\\nb\\u202e"


def test_a_refused_per_shape_best_leaves_the_other_validated_variants(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows, a = _accepted_store(tmp_path)
    b_knobs = {"BLOCK_SIZE": 4096, "num_warps": 8}
    b = rows.evaluate(rows.candidate(b_knobs), {SMALL: 1.8e-3, LARGE: 4e-3})
    rows.compare(b, rows.candidate(original=True), times=2)  # confirmed: best on LARGE
    c = rows.evaluate(rows.candidate({"BLOCK_SIZE": 128, "num_warps": 1}), LABELS)
    rows.store.close()
    assert [v.candidate_id for v in load("vector_add", store=tmp_path).variants] == [a, b.id]
    hostile = '{"BLOCK_SIZE": 4096, "num_warps": 8, "pad": "x"}'
    for cid in (b.id, c.id):
        _sql(tmp_path, "UPDATE candidates SET knobs_json=? WHERE id=?", hostile, cid)
    caplog.set_level(logging.INFO)
    kernel = load("vector_add", store=tmp_path)
    assert kernel.status == "tuned" and [v.candidate_id for v in kernel.variants] == [a]
    (message,) = _warnings(caplog)  # c was never chosen: nothing to say about it
    assert b.id in message and "'pad'" in message and str(tmp_path) in message
    x, y = _xy(3000)
    assert torch.allclose(kernel(x, y), x + y)


def test_the_manifest_is_strict_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tuned.runtime import export

    rows, _ = _accepted_store(tmp_path / "state")
    real = plan_on

    def nan_timings(*args: Any, **kwargs: Any) -> Plan:
        plan = real(*args, **kwargs)
        assert plan.best is not None
        best = dataclasses.replace(plan.best, time_s=math.nan, baseline_time_s=math.inf)
        return dataclasses.replace(plan, best=best)

    monkeypatch.setattr(export, "plan_on", nan_timings)
    manifest = export.export_kernel(rows.store, "vector_add", tmp_path / "out")
    rows.store.close()

    def refuse(token: str) -> None:
        raise AssertionError(f"bare {token} in manifest.json")

    data = json.loads(manifest.read_text(), parse_constant=refuse)
    assert data["best"]["time_s"] is None and data["best"]["baseline_time_s"] is None
    files = {f["file"]: f["sha256"] for f in data["package_files"]}
    assert set(files) == {"__init__.py", "_ktuned_runtime.py"}


def test_a_generation_naming_a_path_writes_nothing_outside_the_private_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rows, _ = _accepted_store(tmp_path / "state")
    generation = rows.spec.generation
    rows.store.close()
    hostile = "/../../esc_dir__"
    for table in ("kernels", "candidates", "evaluations", "acceptances"):
        _sql(
            tmp_path / "state",
            f"UPDATE {table} SET generation=? WHERE generation=?",
            hostile,
            generation,
        )
    _sql(tmp_path / "state", "UPDATE generations SET id=? WHERE id=?", hostile, generation)
    root = tmp_path / "a" / "b" / "root"
    root.mkdir(parents=True)
    monkeypatch.setattr(runtime_loader, "_module_root", root)

    caplog.set_level(logging.INFO)
    kernel = load("vector_add", store=tmp_path / "state")
    assert kernel.status == "refused" and "generation" in kernel.reason
    x, y = _xy(3000)
    assert torch.allclose(kernel(x, y), x + y)
    written = [p for p in tmp_path.rglob("*.py") if "state" not in p.parts]
    assert written and all(p.resolve().is_relative_to(root.resolve()) for p in written)
    assert not list(tmp_path.rglob("esc_dir__*"))
    (message,) = _warnings(caplog)
    assert "generation" in message and str(tmp_path / "state") in message


def test_a_kernel_name_cannot_inject_code_into_the_exported_package(tmp_path: Path) -> None:
    marker = tmp_path / "INJECTED"
    name = f'k"""; open({str(marker)!r}, "w").write("x"); """\\'
    rows, a = _accepted_store(tmp_path / "state", name=name)
    rows.store.close()
    out = tmp_path / "exp" / "hostile_pkg"
    run = ktuned("export", name, "--out", out, state=tmp_path / "state")
    assert run.returncode == 0, run.stderr
    code = f"""
    sys.path.insert(0, {str(out.parent)!r})
    import hostile_pkg
    print(json.dumps({{"name": hostile_pkg.kernel.name, "doc": hostile_pkg.__doc__,
                      "variant": hostile_pkg.kernel.variants[0].candidate_id}}))
    """
    result = run_fresh(code, tmp_path)
    assert not marker.exists()
    assert result["name"] == name and result["doc"].startswith(name + ":")
    assert result["variant"] == a


def test_control_characters_of_stored_names_are_escaped_in_messages(tmp_path: Path) -> None:
    from tuned.runtime.export import export_plan

    name = "evil\x1b[2J\nWARNING forged line"
    rows, _ = _accepted_store(tmp_path, name=name)
    rows.store.close()
    with pytest.raises(RuntimeLoadError) as raised:
        load("absent", store=tmp_path)
    message = str(raised.value)
    assert "evil" in message and "\x1b" not in message and "\n" not in message
    reader = SqliteStore.open_reader(tmp_path / "ktuned.sqlite")
    try:
        with pytest.raises(Exception) as raised_export:
            export_plan(reader, "absent")
    finally:
        reader.close()
    message = str(raised_export.value)
    assert "evil" in message and "\x1b" not in message and "\n" not in message


def test_a_generation_with_a_launcher_of_several_kernels_has_a_knob_space() -> None:
    # Found on the H100: every Liger entry whose launcher runs several kernels (dyt,
    # group-norm, the forward-and-backward entries) was "corrupt" to the referee and to
    # tuned.runtime.load, its discovered knobs being named `kernel.NAME`.
    summary = {
        "knobs": {"_dyt_fwd_kernel.BLOCK_N": [512, 1024], "_dyt_fwd_kernel.num_warps": [4, 8]},
        "baseline_knobs": {"_dyt_fwd_kernel.BLOCK_N": 1024, "_dyt_fwd_kernel.num_warps": 4},
    }
    space, corrupt = _declared(summary)
    assert corrupt is None
    assert space == {"_dyt_fwd_kernel.BLOCK_N": (512, 1024), "_dyt_fwd_kernel.num_warps": (4, 8)}
    space, corrupt = _declared({"knobs": {"a b": [1]}})
    assert space == {} and corrupt == "spec_json field 'knobs' is not a knob space"
