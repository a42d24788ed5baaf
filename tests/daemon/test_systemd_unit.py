"""deploy/ktuned.service passes `systemd-analyze verify` and keeps its hardening."""

from __future__ import annotations

import configparser
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "ktuned.service"


def _service() -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    section = ""
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        if section == "Service":
            values.setdefault(key, []).append(value)
    return values


def test_the_unit_is_notify_hardened_and_reaches_only_nvidia_devices() -> None:
    s = _service()
    assert s["Type"] == ["notify"]
    assert s["NoNewPrivileges"] == ["yes"] and s["ProtectSystem"] == ["strict"]
    assert s["DevicePolicy"] == ["closed"] and "PrivateDevices" not in s
    allowed = " ".join(s["DeviceAllow"])
    for device in (
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia0",  # by path too: on an H100 VM its major had neither name below
        "/dev/nvidia7",
        "char-nvidia-frontend",
        "char-nvidia",
    ):
        assert device in allowed  # /dev/nvidia0..N: "nvidia-frontend" or, newer, "nvidia"
    assert s["StateDirectory"] == ["ktuned"] and s["DynamicUser"] == ["yes"]
    assert "WatchdogSec" in s and "TimeoutStopSec" in s
    assert s["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert s["RestartPreventExitStatus"] == ["2"]  # a bad config does not crash-loop
    configparser.ConfigParser(strict=False, interpolation=None).read(UNIT)


def test_systemd_analyze_verify_passes(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (Debian package `systemd`)")
    units = Path("/usr/lib/systemd/system")
    if not (units / "sysinit.target").exists():
        pytest.skip("no systemd unit directory (/usr/lib/systemd/system) to verify against")
    # Verify the unit as installed by docs/service.md: in a root where the unit sits in
    # /etc/systemd/system and its commands exist (stubs), next to the system's own units.
    root = tmp_path / "root"
    (root / "etc/systemd/system").mkdir(parents=True)
    shutil.copy(UNIT, root / "etc/systemd/system/ktuned.service")
    shutil.copytree(units, root / "usr/lib/systemd/system", symlinks=True)
    for values in (v for k, v in _service().items() if k.startswith("Exec")):
        for command in values:
            binary = root / command.split()[0].lstrip("/")
            binary.parent.mkdir(parents=True, exist_ok=True)
            binary.write_text("#!/bin/sh\n")
            binary.chmod(0o755)
    run = subprocess.run(
        ["systemd-analyze", f"--root={root}", "verify", "/etc/systemd/system/ktuned.service"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if run.returncode != 0 and "Failed to initialize" in run.stderr:
        pytest.skip(f"systemd-analyze cannot run in this container: {run.stderr.strip()}")
    assert run.returncode == 0, run.stderr
    assert run.stderr.strip() == "" and run.stdout.strip() == ""  # no warning either


def test_security_exposure_is_below_2_5(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (Debian package `systemd`)")
    unit = tmp_path / "ktuned.service"
    shutil.copy(UNIT, unit)
    run = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "--offline" in run.stderr or "unrecognized option" in run.stderr:
        pytest.skip(f"this systemd-analyze has no --offline (systemd < 250): {run.stderr}")
    found = re.search(r"Overall exposure level for ktuned.service: ([0-9.]+)", run.stdout)
    assert found, run.stdout + run.stderr
    assert float(found.group(1)) < 2.5, run.stdout
    s = _service()
    assert s["SystemCallFilter"][0] == "@system-service" and s["ProtectProc"] == ["invisible"]
    # NVML and CUDA still reach the GPU: its device nodes, ioctl and mmap are allowed.
    assert "DeviceAllow" in s and "PrivateDevices" not in s and "ProcSubset" not in s


# -- bench/unit_nvml.py: the unit's confinement rebuilt without systemd (NVML on a GPU box)

UNIT_CHECK = ROOT / "bench" / "unit_nvml.py"
needs_confinement_tools = pytest.mark.skipif(
    os.geteuid() != 0
    or any(shutil.which(t) is None for t in ("unshare", "setpriv", "strace", "systemd-analyze")),
    reason="needs root, util-linux's unshare/setpriv, strace and systemd-analyze",
)


@needs_confinement_tools
def test_the_unit_check_computes_the_units_system_call_filter() -> None:
    spec = importlib.util.spec_from_file_location("unit_nvml", UNIT_CHECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    allowed = module.allowed_syscalls()
    # What CUDA, NVML and Triton need is in; what the unit's ~ lines take out is out.
    assert {"ioctl", "mmap", "openat", "clone3", "execve", "futex"} <= allowed
    assert not {"ptrace", "reboot", "init_module", "swapon", "settimeofday"} & allowed
    # @mount comes back after the ~ line: bubblewrap mounts the workers' file systems
    # (docs/security.md); the workers themselves cannot (no capabilities in their namespace).
    assert {"mount", "pivot_root"} <= allowed


@pytest.mark.slow
@needs_confinement_tools
def test_the_unit_check_passes_its_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "unit.json"
    run = subprocess.run(
        [sys.executable, UNIT_CHECK, "--smoke", "--json", out],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if "unshare failed" in run.stderr or "Operation not permitted" in run.stderr:
        pytest.skip(f"no mount namespace in this container: {run.stderr[-300:]}")
    assert run.returncode == 0, run.stdout + run.stderr
    findings = json.loads(out.read_text())
    assert findings["syscalls_used"] > 30 and findings["syscalls_outside_filter"] == []
    assert findings["child"]["triton_kernel_correct"] is True
