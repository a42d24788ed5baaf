"""The read commands (status, best, report, export) on hostile or damaged stores.

They open the store read-only: never create, migrate or checkpoint it, never remove its
write-ahead log; wrong types in stored rows are a damaged-store error, stored text cannot
drive the terminal, and a source that does not match its hash is refused.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import WriteEntry
from tuned.cli import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK, main
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.registry import load_entry
from tuned.store import SqliteStore

FP = {"gpu_model": "none", "mode": "interpreter", "triton": "3.9.0", "torch": "2.13.0"}
READS = ("status", "best", "report", "export")


def _ok(t: float) -> EvalResult:
    return EvalResult(
        Outcome.OK, time_s=t, timings={"N=3000/float16": t}, timing_kind="interpreter"
    )


@pytest.fixture
def state(tmp_path: Path, write_entry: WriteEntry) -> Path:
    """A state directory whose store holds kernel ``add`` with a measured baseline and one
    faster candidate (no -wal file left)."""
    spec = load_entry(write_entry())
    state = tmp_path / "state"
    store = SqliteStore(state / "ktuned.sqlite")
    store.sync_kernel(spec)
    fid = store.record_fingerprint(FP)
    for block, provenance, t in (
        (256, Provenance.ORIGINAL, 2.0),
        (1024, Provenance.PARAMETRIC, 1.0),
    ):
        c = Candidate(
            kernel=spec.name,
            generation=spec.generation,
            source=spec.module_source,
            knobs={"BLOCK": block, "num_warps": 4},
            provenance=provenance,
        )
        store.add_candidate(c)
        store.record_evaluation(c, fid, _ok(t), started_at=1.7e9, wall_s=1.0)
    store.close()
    return state


def _run(command: str, state: Path, tmp_path: Path, *extra: str) -> list[str]:
    out = tmp_path / f"out-{command}"
    shutil.rmtree(out, ignore_errors=True)
    argv = {
        "status": ["status"],
        "best": ["best", "add"],
        "report": ["report", "--out", str(out)],
        "export": ["export", "add", "--out", str(out)],
    }[command]
    return [*argv, *extra, "--state-dir", str(state)]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sql(path: Path, *statements: str) -> None:
    db = sqlite3.connect(path)
    for s in statements:
        db.execute(s)
    db.commit()
    db.close()


# -- item 1: read-only opening


@pytest.mark.parametrize("command", READS)
def test_read_commands_do_not_write_the_store(command: str, state: Path, tmp_path: Path) -> None:
    db = state / "ktuned.sqlite"
    before = _digest(db)
    os.utime(db, (1, 1))
    assert main(_run(command, state, tmp_path)) == EXIT_OK
    assert _digest(db) == before and db.stat().st_mtime == 1


def test_a_missing_store_is_nothing_yet_and_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "none"
    assert main(_run("status", state, tmp_path)) == EXIT_OK
    assert "no kernels yet" in capsys.readouterr().out
    assert main(_run("best", state, tmp_path)) == EXIT_BAD_INPUT
    assert "no kernel 'add'" in capsys.readouterr().err
    assert main(_run("report", state, tmp_path)) == EXIT_OK
    assert not state.exists()


@pytest.mark.parametrize("command", READS)
@pytest.mark.parametrize("how", ["empty", "symlink", "foreign"])
def test_an_empty_or_foreign_file_is_not_a_ktuned_store(
    command: str, how: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    target = state / "ktuned.sqlite"
    if how == "symlink":
        target = tmp_path / "elsewhere"
        (state / "ktuned.sqlite").symlink_to(target)
    target.write_bytes(b"")
    if how == "foreign":
        _sql(target, "CREATE TABLE notes (x)")
    before = _digest(target)
    assert main(_run(command, state, tmp_path)) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert "not a ktuned store" in err and str(state / "ktuned.sqlite") in err
    assert _digest(target) == before
    if how != "foreign":
        assert target.stat().st_size == 0


def _wal_only_commits(state: Path, copy: Path) -> None:
    """``copy``: ``state`` as left by a writer killed after 3 commits still in the -wal."""
    db = sqlite3.connect(state / "ktuned.sqlite", isolation_level=None)
    db.execute("PRAGMA wal_autocheckpoint=0")
    for i in range(3):
        db.execute("INSERT INTO kernels VALUES (?, '/r', 'g', 'active', '', 1.0, 0.0)", (f"k{i}",))
    copy.mkdir()
    shutil.copy(state / "ktuned.sqlite", copy / "ktuned.sqlite")
    shutil.copy(state / "ktuned.sqlite-wal", copy / "ktuned.sqlite-wal")
    db.close()


def test_a_damaged_wal_is_left_in_place(state: Path, tmp_path: Path) -> None:
    copy = tmp_path / "crashed"
    _wal_only_commits(state, copy)
    wal = copy / "ktuned.sqlite-wal"
    data = bytearray(wal.read_bytes())
    for i in range(30):  # flip bytes inside the frames
        data[100 + i * 97] ^= 0x40
    wal.write_bytes(bytes(data))
    before = (_digest(copy / "ktuned.sqlite"), _digest(wal))
    for command in READS:
        main(_run(command, copy, tmp_path))
        assert wal.exists(), command
        assert (_digest(copy / "ktuned.sqlite"), _digest(wal)) == before, command


def test_commits_only_in_the_wal_are_read_and_kept(
    state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "crashed"
    _wal_only_commits(state, copy)
    before = _digest(copy / "ktuned.sqlite-wal")
    assert main(_run("status", copy, tmp_path)) == EXIT_OK
    assert "k2" in capsys.readouterr().out
    assert _digest(copy / "ktuned.sqlite-wal") == before


def test_a_reader_sees_a_live_writers_commits(
    state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    writer = SqliteStore(state / "ktuned.sqlite")
    try:
        _sql(
            state / "ktuned.sqlite",
            "INSERT INTO kernels VALUES ('live1', '/r', 'g', 'active', '', 1.0, 0.0)",
        )
        assert main(_run("status", state, tmp_path)) == EXIT_OK
        assert "live1" in capsys.readouterr().out
        with writer._transaction() as tx:
            tx.execute("INSERT INTO kernels VALUES ('live2', '/r', 'g', 'active', '', 1.0, 0.0)")
        assert main(_run("status", state, tmp_path)) == EXIT_OK
        assert "live2" in capsys.readouterr().out
    finally:
        writer.close()


def test_an_older_schema_is_read_without_migrating_the_file(
    state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = state / "ktuned.sqlite"
    _sql(db, "DROP TABLE claims")
    con = sqlite3.connect(db)
    con.execute("PRAGMA user_version=1")
    con.close()
    before = _digest(db)
    assert main(_run("status", state, tmp_path)) == EXIT_OK
    assert "add" in capsys.readouterr().out
    assert _digest(db) == before


# -- item 3: wrong JSON types are a damaged store


@pytest.mark.parametrize("command", READS)
@pytest.mark.parametrize(
    ("sql", "named"),
    [
        ("UPDATE candidates SET knobs_json='[1,2]'", "candidates.knobs_json"),
        ("UPDATE candidates SET knobs_json='{\"BLOCK\": [1]}'", "candidates.knobs_json"),
        ("UPDATE evaluations SET time_s='abc'", ""),
        ("UPDATE evaluations SET time_s=-1.0", "evaluations.time_s"),
        # A successful evaluation without its time: skipped silently before, as if the
        # candidate had never been measured.
        ("UPDATE evaluations SET time_s=NULL", "evaluations.time_s"),
    ],
)
def test_wrong_types_are_a_damaged_store(
    command: str,
    sql: str,
    named: str,
    state: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _sql(state / "ktuned.sqlite", sql)
    assert main(_run(command, state, tmp_path)) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert "is damaged" in err and "Traceback" not in err
    assert named in err


def test_the_damage_names_table_column_and_row(
    state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _sql(state / "ktuned.sqlite", "UPDATE evaluations SET time_s='abc'")
    for command in ("status", "report"):
        assert main(_run(command, state, tmp_path)) == EXIT_FAILURE
        err = capsys.readouterr().err
        assert "evaluations.time_s of " in err and "'abc'" in err, err


# -- item 2: stored text cannot drive the terminal

HOSTILE = "ev\x1b[2J\x1b[31mRED\x1b]0;pwned\x07il\nadd  tuning  1 ms  1 ms  9.99x\x9b\x7f"


def _rename(state: Path, name: str) -> None:
    db = sqlite3.connect(state / "ktuned.sqlite")
    for table, column in (
        ("kernels", "name"),
        ("generations", "kernel"),
        ("candidates", "kernel"),
        ("evaluations", "kernel"),
    ):
        db.execute(f"UPDATE {table} SET {column}=?", (name,))
    db.commit()
    db.close()


def test_status_escapes_control_characters(
    state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _rename(state, HOSTILE)
    _sql(state / "ktuned.sqlite", "UPDATE kernels SET reason='why\x1b[1A\rforged', state='x\x07'")
    assert main(_run("status", state, tmp_path)) == EXIT_OK
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\x9b\x7f\r")
    assert "ev\\x1b[2J\\x1b[31mRED\\x1b]0;pwned\\x07il\\nadd" in out
    assert not any(line.startswith("add ") for line in out.splitlines())


def test_best_escapes_control_characters(
    state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _rename(state, HOSTILE)
    db = sqlite3.connect(state / "ktuned.sqlite")
    db.execute("UPDATE evaluations SET timing_kind=?", ("gpu\x1b[2J\nforged",))
    db.commit()
    db.close()
    assert main(["best", HOSTILE, "--state-dir", str(state)]) == EXIT_OK
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\x9b\x7f")
    assert "\\x1b[2J\\nforged" in out and "\nforged" not in out
    assert "def add(" in out  # the source's own newlines are kept
    assert main(["best", "nothing", "--state-dir", str(state)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b" in err


def test_printable_escapes_only_control_characters() -> None:
    from tuned.text import printable

    assert printable("a\x1bb\nc\td\x7fe\x85f é ✓") == "a\\x1bb\\nc\\td\\x7fe\\x85f é ✓"
    assert printable("a\nb\tc\rd", keep="\n\t") == "a\nb\tc\\rd"


# -- item 4: a source that does not match its hash


@pytest.mark.parametrize("json_flag", [False, True])
def test_best_refuses_a_tampered_source(
    json_flag: bool, state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _sql(state / "ktuned.sqlite", "UPDATE sources SET text='garbage((('")
    argv = ["best", "add", "--state-dir", str(state), *(["--json"] if json_flag else [])]
    assert main(argv) == EXIT_FAILURE
    captured = capsys.readouterr()
    assert "garbage" not in captured.out
    assert "does not match its hash" in captured.err
