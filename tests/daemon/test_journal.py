"""The daemon's log: a `key=value` line per accepted best; timestamps and levels outside the
journal, syslog priorities inside it (`$JOURNAL_STREAM`)."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import WriteEntry
from tests.daemon.conftest import StartDaemon, wait_for
from tuned.daemon.journal import configure_logging, under_journald

STAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) \S+: ")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def test_journald_gets_priorities_and_a_file_gets_timestamps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_logging: None
) -> None:
    with (tmp_path / "journal").open("w") as journal, (tmp_path / "plain").open("w") as plain:
        st = os.fstat(journal.fileno())
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        assert under_journald(journal) and not under_journald(plain)
        configure_logging(logging.INFO, journal)
        logging.getLogger("tuned.x").warning("two\nlines")
        logging.getLogger("tuned.x").info("hello")
        logging.getLogger("tuned.x").debug("hidden")
        configure_logging(logging.INFO, plain)
        logging.getLogger("tuned.x").error("plain")
    assert (tmp_path / "journal").read_text() == "<4>tuned.x: two\n<4>lines\n<6>tuned.x: hello\n"
    line = (tmp_path / "plain").read_text()
    assert STAMPED.match(line) and line.endswith("ERROR tuned.x: plain\n"), line


@pytest.mark.slow
def test_each_accepted_best_is_one_greppable_line(
    write_entry: WriteEntry, start_daemon: StartDaemon
) -> None:
    registry = write_entry("add").parent
    d = start_daemon(registry, env={"JOURNAL_STREAM": ""})
    d.notify.wait("READY", "1", timeout=180)
    wait_for(lambda: "event=best" in d.output(), 300, "a first accepted best in the log")
    assert d.stop() == 0
    lines = d.output().splitlines()
    bests = [line for line in lines if "event=best" in line]
    accepted = d.query("SELECT COUNT(*) FROM acceptances WHERE status = 'accepted'")[0][0]
    assert len(bests) == accepted >= 1
    fields = dict(kv.split("=", 1) for kv in bests[0].split(": ", 1)[1].split(" "))
    assert fields["event"] == "best" and fields["kernel"] == "add"
    assert float(fields["speedup"]) > 1.0
    assert float(fields["best_s"]) < float(fields["baseline_s"])
    low, high = (float(x) for x in fields["interval"].split(".."))
    assert 1.0 < low <= float(fields["vs_previous"]) <= high
    knobs = json.loads(fields["knobs"])
    assert set(knobs) <= {"BLOCK", "num_warps"} and knobs
    assert fields["provenance"] == "parametric" and len(fields["candidate"]) == 12
    # Outside journald every line of the daemon's log has a timestamp and a level.
    logged = [line for line in lines if line.startswith("20")]
    assert logged and all(STAMPED.match(line) for line in logged)
    assert any(" INFO tuned.daemon.best: event=best " in line for line in logged)
