"""The ``ktuned`` command without the ``daemon`` extra: one clear line, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuned.entry import DAEMON_DEPENDENCIES

ROOT = Path(__file__).resolve().parents[2]


#: The daemon dependencies ``ktuned report`` imports: the tuner's (imported with tuned.cli) and
#: the report's own.
@pytest.mark.parametrize("module", ["matplotlib", "scipy", "sklearn"])
def test_missing_daemon_dependency_says_install_the_extra(module: str, tmp_path: Path) -> None:
    # None in sys.modules makes `import <module>` raise ModuleNotFoundError, as if absent.
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "from tuned.entry import main\n"
        "sys.exit(main(['report', '--state-dir', sys.argv[1], '--out', sys.argv[2]]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), str(tmp_path / "report")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "install ktuned[daemon]" in done.stderr
    assert DAEMON_DEPENDENCIES[module] in done.stderr
    assert "Traceback" not in done.stderr
