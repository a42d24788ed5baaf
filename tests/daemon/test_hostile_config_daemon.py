"""Hostile daemon configs and registry trees: each ends in an error naming the file and the key
(exit 2), never a traceback or a setting the daemon cannot run with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import WriteEntry
from tuned.cli import build_parser
from tuned.daemon.config import ConfigError, load_config, parse_config
from tuned.daemon.watcher import RegistryWatcher
from tuned.registry import Problem

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("doc", "key"),
    [
        ({"registry": {"poll_interval_s": float("nan")}}, "registry.poll_interval_s"),
        ({"evaluation": {"phase_timeout_s": float("nan")}}, "evaluation.phase_timeout_s"),
        ({"evaluation": {"startup_timeout_s": float("inf")}}, "evaluation.startup_timeout_s"),
        ({"scheduler": {"min_gain": float("nan")}}, "scheduler.min_gain"),
        ({"scheduler": {"prior_rate": float("nan")}}, "scheduler.prior_rate"),
        ({"scheduler": {"floor_rate": float("nan")}}, "scheduler.floor_rate"),
        ({"scheduler": {"revisit_interval_s": 10**400}}, "scheduler.revisit_interval_s"),
        ({"fleet_lease_s": float("-inf")}, "fleet_lease_s"),
        ({"llm": {"temperature": float("nan")}}, "llm.temperature"),
        ({"seed": 10**40}, "seed"),
        ({"metrics": {"listen": "127.0.0.1:\u00b2"}}, "metrics.listen"),
    ],
)
def test_nan_inf_and_huge_numbers_are_refused_naming_the_key(doc: object, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(doc, source="hostile.yaml")
    assert len(info.value.problems) == 1
    problem = info.value.problems[0]
    assert problem.startswith(f"key '{key}': got ") and "allowed: " in problem
    if "nan" in repr(doc) or "inf" in repr(doc):
        assert problem.endswith("(not NaN or infinity)")
    assert "hostile.yaml" in str(info.value)


def test_a_huge_integer_says_too_large() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"scheduler": {"revisit_interval_s": 10**400}}, source="c.yaml")
    assert info.value.problems[0].endswith("allowed: a number >= 0 (this one is too large)")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("seed: 2001-13-45\n", ":1:7: invalid YAML: cannot read '2001-13-45' as a date"),
        ("seed: !!float abc\n", ":1:7: invalid YAML: cannot read 'abc' as a number"),
        ("seed: 0\n\x00\n", ":2:1: invalid YAML: the character U+0000 is not allowed"),
    ],
)
def test_values_pyyaml_cannot_build_name_the_config_file(
    tmp_path: Path, text: str, where: str
) -> None:
    path = tmp_path / "ktuned.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"{path}{where}" in str(info.value)


def _ktuned(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "tuned.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


def test_run_exits_2_naming_the_file_and_key(tmp_path: Path) -> None:
    date = tmp_path / "date.yaml"
    date.write_text(f"registry: {{path: {tmp_path}}}\nseed: 2001-13-45\n")
    run = _ktuned("run", "--config", str(date), "--check-config")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert f"{date}:2:7: invalid YAML: cannot read '2001-13-45'" in run.stderr
    nan = tmp_path / "nan.yaml"
    nan.write_text(f"registry: {{path: {tmp_path}, poll_interval_s: .nan}}\n")
    run = _ktuned("run", "--config", str(nan))  # refused before anything starts
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert str(nan) in run.stderr and "key 'registry.poll_interval_s': got nan" in run.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "abc"])
def test_tune_phase_timeout_must_be_finite_seconds(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["tune", "somewhere", "--phase-timeout", value])
    assert info.value.code == 2
    assert "argument --phase-timeout" in capsys.readouterr().err
    args = build_parser().parse_args(["tune", "somewhere", "--phase-timeout", "2.5"])
    assert args.phase_timeout == 2.5


def _settle(w: RegistryWatcher) -> None:
    w.poll()
    w.poll()


def test_watcher_refuses_an_entry_symlinked_out_of_the_registry(
    write_entry: WriteEntry, tmp_path: Path
) -> None:
    registry = write_entry("good").parent
    elsewhere = write_entry("ext", root=tmp_path / "outside")
    (registry / "linked").symlink_to(elsewhere)
    w = RegistryWatcher(registry)
    w.poll()
    changes = w.poll()
    assert [s.name for s in changes.added] == ["good"]
    problems = changes.invalid[str(registry / "linked")]
    assert [p.file for p in problems] == [registry / "linked"]
    assert "outside the registry" in problems[0].reason
    assert set(w.specs) == {"good"}


def test_watcher_reports_a_dangling_symlink_and_never_retires_for_it(
    write_entry: WriteEntry,
) -> None:
    entry = write_entry("a")
    w = RegistryWatcher(entry.parent)
    _settle(w)
    assert set(w.specs) == {"a"}
    (entry / "helper.py").symlink_to("/nonexistent/helper.py")
    removed: list[str] = []
    invalidated: list[str] = []
    invalid: dict[str, list[Problem]] = {}
    for _ in range(3):  # acted on at the second sighting
        changes = w.poll()
        removed += changes.removed
        invalidated += changes.invalidated
        invalid.update(changes.invalid)
    assert removed == [] and invalidated == ["a"]  # invalid, not taken for a removed entry
    problems = invalid[str(entry)]
    assert [p.file for p in problems] == [entry / "helper.py"]
    assert "outside the entry directory" in problems[0].reason
