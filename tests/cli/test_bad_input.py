"""Bad input met through the command line (issue 21 item 6, issue 23 item 8).

Each case ends quickly, in bounded memory, with exit 2 (1 for a damaged store, as README's
exit codes say) and an error naming the file and the field; never a traceback, never a
write into a damaged store. Real FIFOs, a real alias bomb, a real SQLite file with flipped
bytes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ADD_SOURCE, ADD_YAML, WriteEntry
from tests.shared.test_yaml_files import alias_bomb

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Run:
    rc: int
    out: str
    err: str
    seconds: float
    max_rss_mib: float


# Spawns the command and reports its peak memory. ``ru_maxrss`` of a process started straight
# from pytest counts pytest's own resident set (the high-water mark survives fork and exec),
# so the command is started by this small launcher, whose own resident set is a few MiB.
_LAUNCHER = """
import os, sys
pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def ktuned(*args: str | Path, timeout: float = 120) -> Run:
    """``ktuned ARGS`` as a user runs it, with its wall time and peak memory (``wait4``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with (
        tempfile.TemporaryFile("w+") as out,
        tempfile.TemporaryFile("w+") as err,
        tempfile.TemporaryDirectory() as scratch,
    ):
        rss = Path(scratch) / "maxrss"
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-S", "-c", _LAUNCHER, str(rss),
             sys.executable, "-m", "tuned.cli", *map(str, args)],
            stdout=out, stderr=err, text=True, env=env, cwd=ROOT, start_new_session=True,
        )  # fmt: skip
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            raise AssertionError(f"ktuned {args} still running after {timeout} s") from None
        seconds = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        return Run(proc.returncode, out.read(), err.read(), seconds, int(rss.read_text()) / 1024)


def no_traceback(run: Run) -> None:
    assert "Traceback" not in run.err and "Traceback" not in run.out, run.err


# -- the daemon's configuration: ktuned run --check-config


def _config_case(tmp_path: Path, case: str) -> tuple[Path, list[str]]:
    path = tmp_path / "ktuned.yaml"
    if case == "fifo":
        os.mkfifo(path)
        return path, ["is a FIFO (named pipe), not a regular file"]
    if case == "not_utf8":
        path.write_bytes(b"seed: 1\nlog_level: d\xe9bug\n")
        return path, [f"{path}:2:13: not valid UTF-8 (byte 0xe9 at offset 20)"]
    if case == "deep":
        path.write_text("registry: " + "[" * 20_000 + "]" * 20_000 + "\n")
        return path, [f"{path}:1:", "nested more than 64 levels deep"]
    if case == "duplicate_key":
        path.write_text("seed: 1\nmetrics:\n  port: 9100\n  port: 9200\n")
        return path, [f"{path}:4:3:", "duplicate key 'port' (first at line 3)"]
    if case == "syntax":
        path.write_text("seed: 1\nmetrics:\n  port: 9100\n host: x\n")
        return path, [f"{path}:4:", "invalid YAML"]
    if case == "alias_bomb":
        path.write_text("llm:\n  budget: {total_tokens: 1}\nx:\n" + "".join(
            "  " + line + "\n" for line in alias_bomb().splitlines()
        ))  # fmt: skip
        return path, [f"{path}:", "aliases expand to more than"]
    if case == "missing_api_key_file":
        path.write_text(f"llm:\n  api_key_file: {tmp_path / 'no-such-key'}\n")
        return path, ["llm.api_key_file", f"{tmp_path / 'no-such-key'} does not exist"]
    if case == "unknown_sandbox":
        path.write_text("evaluation:\n  sandbox: docker\n")
        return path, ["key 'evaluation.sandbox'", "got 'docker'; allowed: one of bwrap, none"]
    assert case == "state_dir_is_a_file"
    (tmp_path / "state").write_text("not a directory\n")
    path.write_text(f"state_dir: {tmp_path / 'state'}\n")
    return path, ["key 'state_dir'", "exists and is not a directory"]


CONFIG_CASES = [
    "fifo",
    "not_utf8",
    "deep",
    "duplicate_key",
    "syntax",
    "alias_bomb",
    "missing_api_key_file",
    "state_dir_is_a_file",
    "unknown_sandbox",
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", CONFIG_CASES)
def test_a_bad_config_file_exits_2_naming_file_and_field(tmp_path: Path, case: str) -> None:
    path, fragments = _config_case(tmp_path, case)
    run = ktuned("run", "--config", path, "--check-config", timeout=120)
    assert run.rc == 2, (run.rc, run.err)
    assert f"invalid configuration {path}" in run.err
    for fragment in fragments:
        assert fragment in run.err, (fragment, run.err)
    no_traceback(run)
    assert run.seconds < 60  # the interpreter's start-up included; a hang fails on timeout
    if case == "alias_bomb":  # 9**9 values would take gigabytes
        assert run.max_rss_mib < 512, run.max_rss_mib  # a valid config: about 230 MiB


# -- registry entries: ktuned registry check


def _entry(root: Path, name: str, yaml: str | None = None) -> Path:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "add.py").write_text(ADD_SOURCE)
    (directory / "kernel.yaml").write_text(yaml or ADD_YAML.format(name=name))
    return directory


@pytest.mark.timeout(300)
def test_registry_check_reports_every_bad_entry_and_keeps_the_good(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    _entry(registry, "good")
    fifo = _entry(registry, "fifo")
    (fifo / "kernel.yaml").unlink()
    os.mkfifo(fifo / "kernel.yaml")
    bomb = _entry(registry, "bomb")
    (bomb / "kernel.yaml").write_text(ADD_YAML.format(name="bomb") + "x:\n" + "".join(
        "  " + line + "\n" for line in alias_bomb().splitlines()
    ))  # fmt: skip
    huge = _entry(registry, "huge")
    text = (huge / "kernel.yaml").read_text()
    start = text.index("shapes:")
    end = text.index("\n", text.index("perf: true"))
    (huge / "kernel.yaml").write_text(
        text[:start] + "shapes:\n  - {N: 1000000000000000000000000000000, perf: true}" + text[end:]
    )
    dup = _entry(registry, "dup")
    (dup / "kernel.yaml").write_text(ADD_YAML.format(name="dup") + "name: again\n")
    outside = _entry(tmp_path / "elsewhere", "outside")
    (registry / "linked").symlink_to(outside)

    run = ktuned("registry", "check", registry, timeout=120)
    assert run.rc == 2, run.err
    no_traceback(run)
    assert run.seconds < 60
    out = run.out
    assert "1 entries ok, 5 invalid" in out, out
    assert f"{fifo / 'kernel.yaml'}: is a FIFO (named pipe), not a regular file" in out
    assert f"{bomb / 'kernel.yaml'}: line " in out and "aliases expand to more than" in out
    assert f"{huge / 'kernel.yaml'}: field 'shapes[0].N': 1e+30 is larger than any GPU" in out
    assert f"{dup / 'kernel.yaml'}: line " in out and "duplicate key 'name' (first at" in out
    assert f"{registry / 'linked'}: a symlink to {outside}, outside the registry" in out
    assert run.max_rss_mib < 1024


# -- the store: ktuned status on a damaged SQLite file


def _store(tmp_path: Path, write_entry: WriteEntry) -> Path:
    """A real store with a kernel, evaluations, an acceptance and an invalid entry."""
    from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
    from tuned.registry import load_entry
    from tuned.store import SqliteStore

    spec = load_entry(write_entry("add"))
    state = tmp_path / "state"
    store = SqliteStore(state / "ktuned.sqlite")
    store.sync_kernel(spec)
    fp = store.record_fingerprint({"gpu": "cpu", "triton": "x"})
    base = Candidate("add", spec.generation, ADD_SOURCE, {"BLOCK": 256, "num_warps": 4},
                     Provenance.ORIGINAL)  # fmt: skip
    store.add_candidate(base)
    ok = EvalResult(Outcome.OK, time_s=2e-3, timing_kind="interpreter")
    store.record_evaluation(base, fp, ok, started_at=time.time(), wall_s=1.0)
    faster = Candidate("add", spec.generation, ADD_SOURCE, {"BLOCK": 1024, "num_warps": 4},
                       Provenance.PARAMETRIC)  # fmt: skip
    store.add_candidate(faster)
    ok = EvalResult(Outcome.OK, time_s=1e-3, timing_kind="interpreter")
    store.record_evaluation(faster, fp, ok, started_at=time.time(), wall_s=1.0)
    store.record_acceptance(faster, fp, incumbent_id=base.id, status="accepted",
                            first={"low": 1.5, "high": 2.5}, second=None)  # fmt: skip
    store.record_invalid(str(tmp_path / "bad"), "bad: a problem of an invalid entry")
    store.checkpoint()
    store.close()
    return state


def _flip(data: bytearray, case: str) -> None:
    if case == "not_utf8_text":  # what a UnicodeDecodeError came from
        at = data.index(b"a problem of an invalid entry")
        data[at : at + 2] = b"\xff\xfe"
    elif case == "header":  # "file is not a database"
        data[0:16] = b"garbage garbage!"
    elif case == "json":  # a JSON column that no longer parses
        at = data.index(b'"outcome": "ok"')
        data[at + 9] = ord("#")
    elif case == "btree":  # "database disk image is malformed"
        for i in range(4096, 4096 + 12):
            data[i] ^= 0x5A
    else:
        raise AssertionError(case)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", ["not_utf8_text", "header", "json", "btree"])
def test_a_damaged_store_is_a_clear_error_and_stays_untouched(
    tmp_path: Path, write_entry: WriteEntry, case: str
) -> None:
    state = _store(tmp_path, write_entry)
    db = state / "ktuned.sqlite"
    healthy = ktuned("status", "--state-dir", state)
    assert healthy.rc == 0 and "add" in healthy.out, healthy.err
    damaged = bytearray(db.read_bytes())
    _flip(damaged, case)
    db.write_bytes(bytes(damaged))
    run = ktuned("status", "--state-dir", state)
    assert run.rc == 1, (run.rc, run.out, run.err)
    no_traceback(run)
    assert f"ktuned: error: the store {db} is damaged" in run.err
    assert "move it aside" in run.err and "backup" in run.err
    assert db.read_bytes() == bytes(damaged)  # nothing was written into it
    if case == "header":  # every command that reads the file says the same
        for args in (["budget"], ["best", "add"], ["report", "--out", tmp_path / "r"]):
            again = ktuned(*args, "--state-dir", state)
            assert again.rc == 1 and f"the store {db} is damaged" in again.err, again.err
            no_traceback(again)
        assert db.read_bytes() == bytes(damaged)


def test_a_state_dir_that_is_a_file_exits_2(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("oops\n")
    run = ktuned("status", "--state-dir", state)
    assert run.rc == 2
    assert f"the state directory {state} is not a directory" in run.err
    no_traceback(run)
    assert state.read_text() == "oops\n"
