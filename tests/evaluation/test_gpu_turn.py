"""The GPU turn (tuned.evaluation.gpu_turn): one client's processes time one at a time, waits
are bounded, and candidate code never holds the turn."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
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
    assert proc.stdout is not None and proc.stdout.readline().split()[0] == "held"
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


# A spare's hold in another process: shared, for as long as it is asked to.
_SPARE = """
import sys, time
from tuned.evaluation.gpu_turn import GpuTurn, open_turn_file
turn = GpuTurn(open_turn_file(sys.argv[1]))
with turn.hold(float(sys.argv[2]), shared=True) as held:
    print("held" if held else "without", round(turn.waited_s, 3), flush=True)
    time.sleep(float(sys.argv[3]))
"""


def _spare(path: Path, wait_s: float, keep_s: float) -> subprocess.Popen[str]:
    root = Path(__file__).resolve().parents[2]
    return subprocess.Popen(
        [sys.executable, "-c", _SPARE, str(path), str(wait_s), str(keep_s)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )


def test_spares_share_the_turn_and_the_workers_intent_stops_new_ones(tmp_path: Path) -> None:
    """Spares prepare together (an exclusive turn for each made their preparations one at a
    time, and a re-measurement waited for all of them: most likely the 67 s gap on the
    H100); the worker waits only for the cases in flight, and no new one starts once it wants
    the turn."""
    path = tmp_path / "gpu-turn.lock"
    first = _spare(path, 5.0, 3.0)
    assert first.stdout is not None and first.stdout.readline().split()[0] == "held"
    second = _spare(path, 5.0, 0.0)
    assert second.stdout is not None
    how, waited_s = second.stdout.readline().split()
    assert how == "held" and float(waited_s) < 1.0  # beside the first, not after it
    second.wait()
    worker = GpuTurn(open_turn_file(path))
    started = time.monotonic()
    with worker.hold(10.0) as held:
        waited = time.monotonic() - started
        assert held is True  # once the first spare's case was done
        assert 0.2 < waited < 5.0
        late = _spare(path, 0.3, 0.0)  # a spare's next case, while the worker times
        assert late.stdout is not None and late.stdout.readline().split()[0] == "without"
        late.wait()
    first.wait()
    # While the worker waits for a spare's case in flight, its intent keeps a new spare
    # out, though the turn is only shared-held: spares one after another cannot starve it.
    keeping = _spare(path, 5.0, 2.0)
    assert keeping.stdout is not None and keeping.stdout.readline().split()[0] == "held"
    outcome: list[bool] = []

    def wait_for_turn() -> None:
        with worker.hold(10.0) as held:
            outcome.append(held)
            time.sleep(3.0)  # timing: the newcomer's whole attempt falls in the wait or here

    waiting = threading.Thread(target=wait_for_turn)
    waiting.start()
    time.sleep(0.3)
    newcomer = _spare(path, 0.5, 0.0)
    assert newcomer.stdout is not None and newcomer.stdout.readline().split()[0] == "without"
    newcomer.wait()
    waiting.join()
    keeping.wait()
    assert outcome == [True]


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
    settings = EvaluationSettings(interpreter=True, gpu_turn=True, turn_wait_s=2.0)
    client = WorkerClient(workdir=tmp_path / "w", settings=settings, spares=1)
    try:
        client.start()
        holder = _hold(tmp_path / "w" / "gpu-turn.lock", hold_turn)  # a spare making data
        waited = client.evaluate(spec, _candidate(spec, spec.module_source))
        assert waited.outcome is Outcome.OK, waited.reason
        # It waited its bound, then timed without the turn, and the result says so.
        assert waited.metadata["gpu_turn"]["held"] is False
        assert waited.metadata["gpu_turn"]["waited_s"] >= 2.0
        holder.kill()
        holder.wait()
        probing = client.evaluate(spec, _candidate(spec, _PROBING))
        assert probing.outcome is Outcome.OK, probing.reason
        assert probing.metadata["gpu_turn"]["held"] is True
        # (The spare's preparation, held up by the holder, may still hold a case: < 2 s.)
        assert probing.metadata["gpu_turn"]["waited_s"] < 2.0
    finally:
        client.close()


def test_an_originals_checks_hold_the_turn_and_a_knob_moves_do_not(
    tmp_path: Path, write_entry: WriteEntry, hold_turn: list[subprocess.Popen[str]]
) -> None:
    """An original (or an LLM module) may time itself while it is checked (Triton's
    autotuner benchmarks its configs on a key's first call): its checks take the turn, so no
    spare's case data shares the GPU with them. A knob move's checks time nothing and do not
    wait. A wait that runs out is not repeated case after case (a hung spare delays one)."""
    spec = load_entry(write_entry())
    settings = EvaluationSettings(interpreter=True, gpu_turn=True, turn_wait_s=1.0)
    client = WorkerClient(workdir=tmp_path / "w", settings=settings, spares=1)
    try:
        client.start()
        _hold(tmp_path / "w" / "gpu-turn.lock", hold_turn)
        move = client.evaluate(spec, _candidate(spec, spec.module_source))
        assert move.outcome is Outcome.OK, move.reason
        assert "checks_waited_s" not in move.metadata["gpu_turn"]
        original = dataclasses.replace(
            _candidate(spec, spec.module_source), knobs={}, provenance=Provenance.ORIGINAL
        )
        checked = client.evaluate(spec, original)
        assert checked.outcome is Outcome.OK, checked.reason
        waited = checked.metadata["gpu_turn"]["checks_waited_s"]
        assert 1.0 <= waited < 1.9, waited  # one wait ran out; the other cases did not wait
        assert len(spec.shapes) * len(spec.dtypes) > 1  # (so there were other cases)
    finally:
        client.close()


@pytest.mark.parametrize(
    ("turn", "spares"),
    [(True, 0), (False, 1), (None, 1)],
    ids=["without-spares", "off", "interpreter-default"],
)
def test_without_spares_or_when_off_there_is_no_turn(
    tmp_path: Path, write_entry: WriteEntry, turn: bool | None, spares: int
) -> None:
    spec = load_entry(write_entry())
    settings = EvaluationSettings(interpreter=True, gpu_turn=turn)
    client = WorkerClient(workdir=tmp_path / "w", settings=settings, spares=spares)
    try:
        result = client.evaluate(spec, _candidate(spec, spec.module_source))
        assert result.outcome is Outcome.OK, result.reason
        assert "gpu_turn" not in result.metadata
        assert not (tmp_path / "w" / "gpu-turn.lock").exists()
    finally:
        client.close()


def test_the_turn_is_on_by_default_on_a_gpu_and_the_cli_can_turn_it_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # On the H100, without the turn, Liger's entries timed while spares made case data came
    # out up to 5x slow (bench/RESULTS.md, fifteenth session): on a GPU it is the default.
    assert EvaluationSettings(interpreter=False).turn is True
    assert EvaluationSettings(interpreter=True).turn is False
    assert EvaluationSettings(interpreter=False, gpu_turn=False).turn is False
    assert EvaluationSettings(interpreter=True, gpu_turn=True).turn is True

    import tuned.cli as cli

    seen: list[bool | None] = []

    class Stop(Exception):
        pass

    class Spy(EvaluationSettings):  # the settings `ktuned tune` makes, before anything runs
        def __new__(cls, **kwargs: object) -> Spy:
            seen.append(kwargs["gpu_turn"])  # type: ignore[arg-type]
            raise Stop

    monkeypatch.setattr(cli, "EvaluationSettings", Spy)
    for flags, expected in (([], None), (["--gpu-turn"], True), (["--gpu-turn", "no"], False)):
        with pytest.raises(Stop):
            cli.main(["tune", str(tmp_path), "--state-dir", str(tmp_path / "s"), *flags])
        assert seen[-1] is expected
