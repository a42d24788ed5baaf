"""A wheel install tunes something: build the wheel, install it into a fresh virtual
environment, `ktuned deploy install` its service files and `ktuned run --check-config` them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
import yaml

from tests.daemon.conftest import ROOT


def _run(
    *cmd: str | Path,
    cwd: Path | None = None,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> str:
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
        **(env or {}),
    }
    run = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout
    )
    assert run.returncode == 0, f"{cmd}: {run.stdout}\n{run.stderr}"
    return run.stdout


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_wheel_installs_a_service_that_checks_out(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        ROOT,
        "-w",
        wheels,
        cwd=tmp_path,
    )
    [wheel] = list(wheels.glob("ktuned-*.whl"))
    env = tmp_path / "venv"
    # The test environment's packages (torch, numpy, ...) are reused, as with
    # --system-site-packages on a GPU box; ktuned comes from the wheel. A plain path line in
    # a .pth file adds that directory without running its .pth files (an editable ktuned).
    venv.create(env, system_site_packages=True, with_pip=False)
    python = env / "bin" / "python"
    purelib = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    parent = sysconfig.get_paths()["purelib"]
    (Path(purelib.strip()) / "zz-test-environment.pth").write_text(parent + "\n")
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--no-deps",
        "--no-index",
        wheel,
        cwd=tmp_path,
    )
    ktuned = env / "bin" / "ktuned"
    # Far from the source tree, so only the installed package can be found.
    where = _run(python, "-c", "import tuned; print(tuned.__file__)", cwd=tmp_path)
    assert str(env) in where, where

    prefix = tmp_path / "root"
    out = _run(ktuned, "deploy", "install", "--prefix", prefix, cwd=tmp_path)
    unit = (prefix / "etc/systemd/system/ktuned.service").read_text()
    config = prefix / "etc/ktuned/ktuned.yaml"
    assert f"ExecStart={ktuned.resolve()} run --config {config}" in unit
    docs = [line.split("file:", 1)[1] for line in unit.splitlines() if "Documentation=" in line]
    assert docs and all(Path(d).is_file() for d in docs), docs
    registry = prefix / "usr/share/ktuned/registry"
    assert (registry / "softmax" / "kernel.yaml").is_file()
    rules = yaml.safe_load((prefix / "etc/prometheus/rules/ktuned-alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                url = rule["annotations"]["runbook_url"]
                assert Path(url.removeprefix("file://").split("#")[0]).is_file(), url
    assert (prefix / "usr/share/ktuned/grafana/dashboards/ktuned.json").is_file()
    assert "written" in out

    checked = _run(ktuned, "run", "--config", config, "--check-config", cwd=tmp_path)
    effective = yaml.safe_load(checked)
    assert effective["registry"]["path"] == str(registry)
    assert effective["metrics"]["listen"] == "127.0.0.1:9474"
    # The example registry is valid as installed.
    listed = _run(ktuned, "registry", "check", registry, cwd=tmp_path)
    assert "softmax" in listed and " 0 invalid" in listed

    # ... and tunes from the wheel alone: its worker imports the installed package.
    tuned = _run(
        ktuned,
        "tune",
        registry / "vector_add" / "kernel.yaml",
        "--budget",
        "1",
        "--state-dir",
        tmp_path / "state",
        "--compile-workers",
        "0",
        cwd=tmp_path,
        env={"TRITON_INTERPRET": "1"},
    )
    assert re.search(r"^vector_add\s+\S+ \S+\s+\S+ \S+\s+[0-9.]+x\s+1\s", tuned, re.M), tuned

    # An operator's configuration is kept on a second install; a missing registry is rejected.
    config.write_text(config.read_text().replace(str(registry), "/nonexistent/registry"))
    again = _run(ktuned, "deploy", "install", "--prefix", prefix, cwd=tmp_path)
    assert f"kept     {config}" in again
    bad = subprocess.run(
        [ktuned, "run", "--config", config, "--check-config"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert bad.returncode == 2
    assert "registry.path" in bad.stderr and "/nonexistent/registry does not exist" in bad.stderr
    # The error names the installed example that documents every key.
    [example] = re.findall(r"; see (\S+) for every key", bad.stderr)
    assert Path(example).is_file() and str(env) in example, bad.stderr
