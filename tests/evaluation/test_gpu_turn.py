"""The GPU turn (tuned.evaluation.gpu_turn): one client's processes time one at a time, waits
are bounded, and candidate code never holds the turn."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ADD_SOURCE, WriteEntry
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.evaluation.gpu_turn import FD_VARIABLE, GpuTurn, open_turn_file
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import load_entry
from tuned.registry.spec import KernelSpec

# Another process that takes the turn file's lock and keeps it until killed.
_HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture
def hold_turn() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def _hold(path: Path, started: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)], stdout=subprocess.PIPE, text=True
    )
    started.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_turn_is_exclusive_between_processes_and_its_wait_is_bounded(
    tmp_path: Path, hold_turn: list[subprocess.Popen[str]]
) -> None:
    path = tmp_path / "gpu-turn.lock"
    turn = GpuTurn(open_turn_file(path))
    holder = _hold(path, hold_turn)
    started = time.monotonic()
    with turn.hold(0.3) as held:
        assert held is False  # another process has it: the wait ran out, the work goes on
    assert time.monotonic() - started >= 0.3
    assert turn.went_without == 1 and turn.waited_s >= 0.3
    holder.kill()
    holder.wait()
    with turn.hold(5.0) as held:
        assert held is True
        with turn.hold(5.0) as inner:  # re-entrant: the outer hold covers it
            assert inner is True
        # While held here, no other process gets it.
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import fcntl, os, sys\n"
                "fd = os.open(sys.argv[1], os.O_RDWR)\n"
                "try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
                "except OSError:\n    sys.exit(7)\n",
                str(path),
            ],
            check=False,
        )
        assert probe.returncode == 7
    assert turn.went_without == 1
    assert GpuTurn().fd is None  # no turn: holds nothing, waits for nothing
    with GpuTurn().hold(10.0) as held:
        assert held is False


def _candidate(spec: KernelSpec, source: str) -> Candidate:
    return Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=source,
        knobs={"BLOCK": 128},
        provenance=Provenance.PARAMETRIC,
        strategy="test",
    )


# A candidate that fails if its process could reach the turn: by the environment variable, or
# by any open descriptor of the turn file.
_PROBING = ADD_SOURCE.replace(
    "def add(x, y, BLOCK=256, num_warps=4):\n",
    "def add(x, y, BLOCK=256, num_warps=4):\n"
    "    import os\n"
    f"    assert {FD_VARIABLE!r} not in os.environ, 'the turn is named here'\n"
    "    for fd in os.listdir('/proc/self/fd'):\n"
    "        try:\n"
    "            target = os.readlink('/proc/self/fd/' + fd)\n"
    "        except OSError:\n"
    "            continue\n"
    "        assert not target.endswith('gpu-turn.lock'), 'the turn is open here'\n",
)


def test_the_benchmark_waits_for_the_turn_a_spare_holds_and_candidates_never_see_it(
    tmp_path: Path, write_entry: WriteEntry, hold_turn: list[subprocess.Popen[str]]
) -> None:
    spec = load_entry(write_entry())
    settings = EvaluationSettings(interpreter=True, turn_wait_s=0.5)
    client = WorkerClient(workdir=tmp_path / "w", settings=settings, spares=1)
    try:
        client.start()
        holder = _hold(tmp_path / "w" / "gpu-turn.lock", hold_turn)  # a spare making data
        waited = client.evaluate(spec, _candidate(spec, spec.module_source))
        assert waited.outcome is Outcome.OK, waited.reason
        # It waited its bound, then timed without the turn, and the result says so.
        assert waited.metadata["gpu_turn"]["held"] is False
        assert waited.metadata["gpu_turn"]["waited_s"] >= 0.5
        holder.kill()
        holder.wait()
        probing = client.evaluate(spec, _candidate(spec, _PROBING))
        assert probing.outcome is Outcome.OK, probing.reason
        assert probing.metadata["gpu_turn"]["held"] is True
        assert probing.metadata["gpu_turn"]["waited_s"] < 0.5
    finally:
        client.close()


def test_without_spares_there_is_no_turn(tmp_path: Path, write_entry: WriteEntry) -> None:
    spec = load_entry(write_entry())
    client = WorkerClient(workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True))
    try:
        result = client.evaluate(spec, _candidate(spec, spec.module_source))
        assert result.outcome is Outcome.OK, result.reason
        assert "gpu_turn" not in result.metadata
        assert not (tmp_path / "w" / "gpu-turn.lock").exists()
    finally:
        client.close()
