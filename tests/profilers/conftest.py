"""Helpers for the profiler tests: fake ``ncu`` executables and the recorded ncu fixtures.

The fixtures under ``fixtures/`` are raw ``ncu --csv --page raw`` outputs captured on an
H100 for the example kernels (``fixtures/README.md`` lists the commands). A fake ``ncu`` is a
small script put where :class:`profilers.ncu.NcuProfiler` looks for it: it can print what the
real one prints on a permission error, sleep past a deadline, or write a recorded report to
``--log-file`` as the real one does.
"""

from __future__ import annotations

import os
import stat
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"

MakeNcu = Callable[[str], Path]


def recorded(name: str) -> str:
    """The text of a recorded fixture (skips the test when it is not there)."""
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"fixture {path} not captured yet (see tests/profilers/fixtures/README.md)")
    return path.read_text(encoding="utf-8")


@pytest.fixture
def make_ncu(tmp_path: Path) -> MakeNcu:
    """``make_ncu(body)``: an executable Python script named ``ncu`` running ``body``.

    ``body`` sees ``argv`` (the arguments), ``log_file`` (the ``--log-file`` value or None)
    and ``record`` (a path where the script stores its arguments, one per line).
    """

    def make(body: str) -> Path:
        directory = tmp_path / f"bin{len(list(tmp_path.glob('bin*')))}"
        directory.mkdir()
        script = directory / "ncu"
        script.write_text(
            f"#!{sys.executable}\n"
            "import os, sys, time, subprocess\n"
            "argv = sys.argv[1:]\n"
            "log_file = argv[argv.index('--log-file') + 1] if '--log-file' in argv else None\n"
            f"record = {str(directory / 'argv.txt')!r}\n"
            "open(record, 'w').write('\\n'.join(argv))\n" + textwrap.dedent(body)
        )
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        return script

    return make


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie (containers may not reap orphans)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")
