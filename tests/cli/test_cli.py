"""The ``ktuned`` command line, run as a user runs it (a subprocess), on real kernels."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import WriteEntry, has_gpu

ROOT = Path(__file__).resolve().parents[2]


def ktuned(
    *args: str | Path, state: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tuned.cli", *map(str, args)]
    if state is not None:
        cmd += ["--state-dir", str(state)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def _evaluations(state: Path) -> list[tuple[str, str]]:
    """(candidate, outcome) of every first measurement; re-measurements of apparent new bests
    (in a fresh worker, by design) are left out."""
    db = sqlite3.connect(state / "ktuned.sqlite")
    try:
        rows = db.execute(
            "SELECT candidate_id, outcome, result_json FROM evaluations ORDER BY seq"
        ).fetchall()
    finally:
        db.close()
    return [(c, o) for c, o, r in rows if not json.loads(r)["metadata"].get("remeasure")]


def test_tune_status_best(tmp_path: Path, write_entry: WriteEntry) -> None:
    registry = write_entry("add").parent
    write_entry("add2")
    broken = registry / "broken"
    broken.mkdir()
    (broken / "kernel.yaml").write_text("name: broken\nmodule: missing.py\n")
    state = tmp_path / "state"

    run = ktuned("tune", registry, "--budget", "3", state=state)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("kernel"))
    rows = {line.split()[0]: line for line in lines[header + 2 : header + 4]}
    assert set(rows) == {"add", "add2"}
    assert ("interpreter timings" in run.stdout) is not has_gpu()
    assert "broken" in run.stdout and "missing.py" in run.stdout  # reported, not fatal
    assert "8/8" in run.stderr  # progress: 2 kernels x (baseline + 3)
    assert len(_evaluations(state)) == 8

    status = ktuned("status", state=state)
    assert status.returncode == 0
    assert "add2" in status.stdout and "invalid entry" in status.stdout

    best = ktuned("best", "add", "--json", state=state)
    assert best.returncode == 0, best.stderr
    info = json.loads(best.stdout)
    assert set(info["knobs"]) == {"BLOCK", "num_warps"}
    assert "@triton.jit" in info["source"]
    assert info["timing_kind"] == ("gpu" if has_gpu() else "interpreter")
    text = ktuned("best", "add", state=state)
    assert "# knobs:" in text.stdout and "def add(" in text.stdout


def test_bad_input_exits_2_with_a_clear_message(tmp_path: Path, write_entry: WriteEntry) -> None:
    state = tmp_path / "state"
    missing = ktuned("tune", tmp_path / "nowhere", state=state)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    none = ktuned("tune", empty, state=state)
    assert none.returncode == 2 and "no valid registry entry" in none.stderr
    unknown = ktuned("best", "nope", state=state)
    assert unknown.returncode == 2 and "no kernel 'nope'" in unknown.stderr
    negative = ktuned("tune", empty, "--budget", "-1", state=state)
    assert negative.returncode == 2


def test_registry_check_lists_every_problem(tmp_path: Path, write_entry: WriteEntry) -> None:
    registry = write_entry("good").parent
    bad = write_entry("bad")
    (bad / "kernel.yaml").write_text(
        (bad / "kernel.yaml")
        .read_text()
        .replace("float32", "float33")
        .replace("launcher: add", "launcher: nope")
    )
    check = ktuned("registry", "check", registry)
    assert check.returncode == 2
    assert "ok       good" in check.stdout
    assert "float33" in check.stdout and "nope" in check.stdout
    assert "1 entries ok, 1 invalid" in check.stdout
    assert ktuned("registry", "check", write_entry("solo")).returncode == 0


def test_killed_run_resumes_without_reevaluating(tmp_path: Path, write_entry: WriteEntry) -> None:
    entry = write_entry("add")
    state = tmp_path / "state"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "tuned.cli",
        "tune",
        str(entry),
        "--budget",
        "8",
        "--state-dir",
        str(state),
    ]
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            try:
                if (state / "ktuned.sqlite").exists() and len(_evaluations(state)) >= 3:
                    break
            except sqlite3.OperationalError:  # the schema is being created right now
                pass
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = _evaluations(state)
    assert 3 <= len(before) < 9

    rerun = ktuned("tune", entry, "--budget", "8", state=state)
    assert rerun.returncode == 0, rerun.stderr
    after = _evaluations(state)
    assert after[: len(before)] == before
    ids = [cid for cid, _ in after]
    assert len(ids) == 9 and len(set(ids)) == 9  # baseline + 8, none evaluated twice
    # A third run with the same budget has nothing left to do.
    again = ktuned("tune", entry, "--budget", "8", state=state)
    assert again.returncode == 0 and len(_evaluations(state)) == 9
