"""One story across commands: `status --json`, `report` and `/metrics` of a real daemon agree
on every kernel's evaluation count and state (tuned.store.overview is their one source)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ADD_SOURCE, ADD_YAML, WriteEntry
from tests.daemon.conftest import ROOT, StartDaemon, wait_for

SMALL = ADD_YAML.replace("[64, 128, 256, 512, 1024]", "[64, 128]").replace("[1, 2, 4]", "[1]")


def _cli(state: Path, *args: str) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "tuned.cli", *args, "--state-dir", str(state)],
        env={**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def _metrics(body: str) -> tuple[dict[str, int], dict[str, str]]:
    evaluations: dict[str, int] = {}
    for kernel, n in re.findall(
        r'^ktuned_candidates_evaluated_total\{kernel="([^"]+)",outcome="[^"]+"\} (\S+)$',
        body,
        re.M,
    ):
        evaluations[kernel] = evaluations.get(kernel, 0) + int(float(n))
    states = dict(
        re.findall(r'^ktuned_kernel_state\{kernel="([^"]+)",state="([^"]+)"\} 1\.0$', body, re.M)
    )
    return evaluations, states


@pytest.mark.slow
def test_status_report_and_metrics_agree(
    tmp_path: Path, write_entry: WriteEntry, start_daemon: StartDaemon
) -> None:
    registry = write_entry("small", yaml=SMALL.format(name="small")).parent
    # An entry whose original gives wrong results: nothing to tune, state `failed`.
    wrong = ADD_SOURCE.replace("x + y, mask=mask)", "x - y, mask=mask)")
    write_entry("wrong", source=wrong, yaml=SMALL.format(name="wrong"))
    d = start_daemon(registry)
    d.notify.wait("READY", "1", timeout=180)

    # Idle with both kernels done (the daemon is also idle for a moment after READY, before
    # its first step): nothing changes any more while the three are read.
    def settled() -> bool:
        body = d.metrics()
        states = _metrics(body)[1]
        done = len(states) == 2 and set(states.values()) <= {"exhausted", "failed"}
        return done and 'ktuned_daemon_state{state="idle"} 1.0' in body

    wait_for(settled, 180, "both kernels done and the daemon idle")
    evaluations, states = _metrics(d.metrics())
    status = json.loads(_cli(d.state, "status", "--json"))
    out = tmp_path / "report"
    _cli(d.state, "report", "--out", str(out))
    page = (out / "index.html").read_text()
    report = {
        name: (state, int(n))
        for name, state, n in re.findall(
            r"<tr><td>([^<]+)</td><td>([^<]+)</td>(?:<td>[^<]*</td>){4}<td>(\d+)</td>", page
        )
    }
    assert states == {"small": "exhausted", "wrong": "failed"}, states
    assert evaluations["small"] >= 2 and evaluations["wrong"] >= 1
    assert {k["kernel"]: k["state"] for k in status["kernels"]} == states
    assert {k["kernel"]: k["evaluations"] for k in status["kernels"]} == evaluations
    assert report == {k: (states[k], evaluations[k]) for k in states}
    assert status["evaluations"] == sum(evaluations.values())
    assert f"{sum(evaluations.values())}\nevaluations in all" in page
    table = _cli(d.state, "status")
    assert re.search(r"^small\s+exhausted\s", table, re.M), table
    budget = json.loads(_cli(d.state, "budget", "--json"))
    assert budget["llm"]["enabled"] is False and budget["requests"] == 0
    assert budget["committed"] == {"total": 0, "daily": 0}
    assert d.stop() == 0


def _table(out: str) -> dict[str, dict[str, str]]:
    """A CLI table (header, dashes, rows) as {kernel: {column: cell}}."""
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("kernel "))
    header = re.split(r"\s{2,}", lines[at].strip())
    rows = {}
    for line in lines[at + 2 :]:
        if not line.strip() or line.startswith("Times are"):
            break
        cells = re.split(r"\s{2,}", line.strip(), maxsplit=len(header) - 1)
        rows[cells[0]] = dict(zip(header, cells))
    return rows


@pytest.mark.slow
def test_tune_and_status_name_one_count_one_way(tmp_path: Path, write_entry: WriteEntry) -> None:
    """`ktuned tune`'s table counts candidates (as --budget does); `evals` in any table is the
    store's count of evaluations, the same number `status` and /metrics give."""
    entry = write_entry("small", yaml=SMALL.format(name="small"))
    state = tmp_path / "state"
    tuned = _cli(
        state, "tune", str(entry / "kernel.yaml"), "--budget", "1", "--compile-workers", "0"
    )
    status = json.loads(_cli(state, "status", "--json"))
    [kernel] = status["kernels"]
    # The baseline and the candidate at least, and the re-measurements of an accepted best.
    assert kernel["evaluations"] >= 2
    tune_row = _table(tuned)["small"]
    assert tune_row.get("candidates") == "1", tuned
    if "evals" in tune_row:
        assert tune_row["evals"] == str(kernel["evaluations"]), (tuned, kernel)
    assert _table(_cli(state, "status"))["small"]["evals"] == str(kernel["evaluations"])


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path: Path) -> None:
    """`ktuned status --json | head`: the closed pipe ends ktuned quietly (status 141)."""
    (tmp_path / "state").mkdir()
    ktuned = [sys.executable, "-c", "from tuned.entry import main; raise SystemExit(main())"]
    proc = subprocess.Popen(
        [*ktuned, "status", "--json", "--state-dir", str(tmp_path / "state")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before ktuned writes
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err, err.decode()
    assert proc.returncode == 141


def test_registry_check_json_tells_what_its_text_tells(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    registry = write_entry("small", yaml=SMALL.format(name="small")).parent
    bad = registry / "bad"
    bad.mkdir()
    (bad / "kernel.yaml").write_text("name: bad\nmodule: missing.py\n")

    def check(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tuned.cli", "registry", "check", str(registry), *flags],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    text, as_json = check(), check("--json")
    assert text.returncode == as_json.returncode == 2  # an invalid entry: exit 2 either way
    found = json.loads(as_json.stdout)
    [entry] = found["entries"]
    assert entry["name"] == "small" and entry["knob_configurations"] == 2
    assert entry["knobs"] == {"BLOCK": [64, 128], "num_warps": [1]}
    [(where, problems)] = found["invalid"].items()
    assert Path(where).name == "bad"
    assert {p["field"] for p in problems} >= {"module", "launcher"}
    assert f"{len(found['entries'])} entries ok, {len(found['invalid'])} invalid" in text.stdout
    for p in problems:
        assert p["field"] in text.stdout and p["reason"].split(";")[0] in text.stdout
