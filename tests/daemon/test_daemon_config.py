"""The daemon's configuration: the documented example, defaults, and every problem reported."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from policies import POLICIES
from tests.daemon.conftest import ROOT
from tuned.daemon.config import (
    ConfigError,
    DaemonConfig,
    default_registry,
    load_config,
    parse_config,
)

EXAMPLE = ROOT / "deploy" / "ktuned.yaml"


def _keys(cls: type, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for f in dataclasses.fields(cls):
        if f.name == "source":
            continue
        default = f.default_factory() if callable(f.default_factory) else f.default  # type: ignore[misc]
        if dataclasses.is_dataclass(default):
            out |= _keys(type(default), f"{prefix}{f.name}.")
        else:
            out.add(prefix + f.name)
    return out


def _flatten(doc: dict[str, object], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for k, v in doc.items():
        if isinstance(v, dict):
            out |= _flatten(v, f"{prefix}{k}.")
        else:
            out.add(prefix + k)
    return out


def test_the_example_documents_every_key_and_parses() -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    assert _flatten(doc) == _keys(DaemonConfig)
    config = load_config(EXAMPLE)
    assert config.registry.path == Path("/usr/share/ktuned/registry")
    assert config.metrics.port == 9474 and config.metrics.host == "127.0.0.1"
    # Apart from the example paths, the example's values are the defaults.
    defaults = DaemonConfig()
    for section in ("scheduler", "gpu", "evaluation", "metrics"):
        assert getattr(config, section) == getattr(defaults, section)
    assert (config.device, config.policy, config.seed) == ("auto", "hierarchical", 0)


def test_defaults_run_the_example_registry_on_loopback() -> None:
    config = DaemonConfig()
    assert config.registry.path == default_registry()
    assert (default_registry() / "softmax" / "kernel.yaml").exists()
    assert config.metrics.host == "127.0.0.1"
    assert config.policy == "hierarchical"


def test_every_problem_names_its_key_and_what_is_allowed() -> None:
    doc = {
        "device": "tpu",
        "policy": "nope",
        "seed": -1,
        "colour": "blue",
        "registry": {"poll_interval_s": "soon", "paht": "/x"},
        "scheduler": {"window": 0, "min_gain": 2},
        "gpu": "all",
        "metrics": {"listen": "localhost"},
    }
    with pytest.raises(ConfigError) as info:
        parse_config(doc, source="test.yaml")
    problems = info.value.problems
    text = "\n".join(problems)
    for key, allowed in [
        ("device", "one of auto, gpu, interpreter"),
        ("policy", "one of " + ", ".join(sorted(POLICIES))),
        ("seed", "an integer >= 0"),
        ("colour", "allowed keys: device, evaluation"),
        ("registry.poll_interval_s", "a number >= 0.05"),
        ("registry.paht", "allowed keys: path, poll_interval_s"),
        ("scheduler.window", "an integer >= 1"),
        ("scheduler.min_gain", "<= 1"),
        ("gpu", "a mapping of"),
        ("metrics.listen", "HOST:PORT"),
    ]:
        line = next((p for p in problems if p.startswith(f"key '{key}'")), None)
        assert line is not None, f"{key} not reported in:\n{text}"
        assert allowed in line
    assert len(problems) == 10
    assert "test.yaml" in str(info.value)
    # It names the example that documents every key by a path that exists wherever ktuned is.
    [example] = re.findall(r"; see (\S+) for every key", str(info.value))
    assert Path(example).is_file() and Path(example).name == "ktuned.yaml"


def test_partial_sections_keep_the_other_defaults(tmp_path: Path) -> None:
    path = tmp_path / "k.yaml"
    path.write_text("scheduler: {window: 3}\nregistry: {path: ~/reg}\n")
    config = load_config(path)
    assert config.scheduler.window == 3
    assert config.scheduler.converge_after == DaemonConfig().scheduler.converge_after
    assert config.registry.path == Path(os.path.expanduser("~/reg"))
    assert config.source == str(path)


def test_malformed_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("registry:\n  poll_interval_s: fast\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "tuned.cli", "run", "--config", str(bad)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert run.returncode == 2
    assert "registry.poll_interval_s" in run.stderr and "'fast'" in run.stderr
    assert "Traceback" not in run.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("registry: [\n")
    run = subprocess.run(
        [sys.executable, "-m", "tuned.cli", "run", "--config", str(broken)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert run.returncode == 2 and f"{broken}:2:1: invalid YAML" in run.stderr
    # The example names the registry `ktuned deploy install` writes: here, one that exists.
    example = tmp_path / "example.yaml"
    (tmp_path / "registry").mkdir(exist_ok=True)
    example.write_text(
        EXAMPLE.read_text().replace("/usr/share/ktuned/registry", str(tmp_path / "registry"))
    )
    check = subprocess.run(
        [sys.executable, "-m", "tuned.cli", "run", "--config", str(example), "--check-config"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert check.returncode == 0 and "is valid" in check.stdout
