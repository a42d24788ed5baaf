"""``load`` on a machine where no Triton kernel can run: a clear error, not a kernel that
reports "tuned" and fails inside Triton at its first call."""

from __future__ import annotations

import email.parser
import os
import re
import subprocess
import sys
import venv
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.runtime.rows import ROOT
from tuned.errors import TunedError
from tuned.runtime import NoGpuDriverError, RuntimeLoadError, load


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU driver")
def test_load_without_driver_or_interpreter_says_what_to_do(
    tuned_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(NoGpuDriverError) as caught:
        load("vector_add", store=tuned_state)
    assert isinstance(caught.value, RuntimeLoadError)
    assert isinstance(caught.value, TunedError)
    message = str(caught.value)
    assert "no GPU driver" in message
    assert "TRITON_INTERPRET=1" in message


def test_load_in_the_interpreter_is_not_refused(
    tuned_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    kernel = load("vector_add", store=tuned_state)
    assert kernel.status in ("tuned", "original")


# -- an application that installs the runtime alone (ktuned's wheel, torch, triton)

#: What an application brings: the frameworks its kernels run on. To these `pip install` of
#: the wheel adds its own requirements (those without an extra), read from the wheel.
APPLICATION = ("torch", "triton")
#: The daemon's dependencies (the `daemon` extra): the runtime must not need any of them.
PIP = (sys.executable, "-m", "pip")
DAEMON_ONLY = ("sklearn", "scipy", "matplotlib", "openai", "prometheus_client")

APP = """
import sys
import torch
from tuned.runtime import NoGpuDriverError, load

store = sys.argv[1]
try:
    kernel = load("vector_add", store=store)
except NoGpuDriverError as exc:
    print("REFUSED", str(exc).replace("\\n", " "))
    raise SystemExit(0)
g = torch.Generator().manual_seed(1)
x, y = torch.randn(3000, generator=g), torch.randn(3000, generator=g)
assert torch.allclose(kernel(x, y), x + y)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print("RAN", kernel.status, heavy)
"""


def _closure(names: tuple[str, ...]) -> list[metadata.Distribution]:
    """The installed distributions ``names`` need, transitively (markers evaluated here)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional requirement absent here (e.g. CUDA libraries)
        seen[name] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _link_site(site: Path, dists: list[metadata.Distribution]) -> None:
    """A site directory holding only ``dists``: links to their top-level files."""
    site.mkdir()
    for dist in dists:
        for file in dist.files or []:
            top = file.parts[0]
            if top in ("..", "__pycache__") or (site / top).exists():
                continue
            target = Path(str(dist.locate_file(top)))
            if target.exists():
                (site / top).symlink_to(target)


def _python(venv_python: Path, *args: str | Path, env: dict[str, str]) -> str:
    run = subprocess.run(
        [str(venv_python), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=venv_python.parents[2],  # away from the source tree: only installed code imports
        timeout=600,
    )
    assert run.returncode == 0, f"{args}: {run.stdout}\n{run.stderr}"
    return run.stdout


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal too")
def test_an_application_with_the_runtime_alone_loads_its_kernels(
    tuned_state: Path, tmp_path: Path
) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [*PIP, "wheel", "--no-deps", "--no-build-isolation", str(ROOT), "-w", str(wheels)],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=600,
    )
    [wheel] = list(wheels.glob("ktuned-*.whl"))
    app_env = tmp_path / "app"
    venv.create(app_env, system_site_packages=False, with_pip=False)
    python = app_env / "bin" / "python"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TRITON_INTERPRET")
    }
    purelib = Path(
        _python(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", env=env
        ).strip()
    )
    # The application's frameworks, as it installed them (links, not copies: torch is large).
    site = tmp_path / "frameworks"
    with zipfile.ZipFile(wheel) as whl:
        [meta] = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        requires = email.parser.Parser().parsestr(whl.read(meta).decode()).get_all("Requires-Dist")
    plain = [r.name for r in map(Requirement, requires or []) if r.marker is None]
    assert plain, "the wheel names no requirement of its own"
    _link_site(site, _closure((*APPLICATION, *plain)))
    (purelib / "frameworks.pth").write_text(f"{site}\n")
    subprocess.run(
        [*PIP, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=600,
    )
    # ktuned's requirements are met by what the application has; the daemon's are absent.
    checked = subprocess.run(
        [*PIP, "--python", str(python), "check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for module in DAEMON_ONLY:
        probe = subprocess.run(
            [str(python), "-c", f"import {module}"],
            capture_output=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )
        assert probe.returncode != 0, f"{module} is importable in the application's environment"
    where = _python(python, "-c", "import tuned; print(tuned.__file__)", env=env)
    assert str(app_env) in where, where

    script = tmp_path / "app.py"
    script.write_text(APP.format(heavy=set(DAEMON_ONLY)))
    # This machine has no GPU driver: a clear refusal, not a kernel failing inside Triton.
    refused = _python(python, script, tuned_state, env=env)
    assert refused.startswith("REFUSED") and "TRITON_INTERPRET=1" in refused, refused
    # In Triton's interpreter the stored best runs, with nothing of the daemon imported.
    ran = _python(python, script, tuned_state, env={**env, "TRITON_INTERPRET": "1"})
    assert re.fullmatch(r"RAN (tuned|original) \[\]\n", ran), ran
