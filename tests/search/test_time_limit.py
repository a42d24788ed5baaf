"""``ktuned tune --time-limit``: no candidate is started after the limit; the run ends as if
every budget were reached (its summary, and on a GPU its settling), and a rerun continues."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.cli.test_cli import ktuned
from tests.conftest import WriteEntry
from tuned.evaluation import EvaluationSettings
from tuned.outcomes import Provenance
from tuned.registry import load_entry
from tuned.search import TuneSettings
from tuned.store import SqliteStore
from tuned.tuning import tune_registry


def test_a_limit_that_ran_out_starts_nothing_and_a_rerun_continues(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    entry = write_entry("limited")
    state = tmp_path / "state"
    run = ktuned("tune", entry, "--budget", "2", "--time-limit", "0.001", state=state)
    assert run.returncode == 0, run.stderr
    assert "stopped by the time limit after 0 candidate(s)" in run.stdout, run.stdout
    status = ktuned("status", state=state)
    row = next(line for line in status.stdout.splitlines() if line.startswith("limited"))
    assert row.split()[2] == "-" and row.split()[5] == "0", status.stdout  # not the original
    again = ktuned("tune", entry, "--budget", "2", state=state)
    assert again.returncode == 0, again.stderr
    assert "time limit" not in again.stdout
    status = ktuned("status", state=state)
    row = next(line for line in status.stdout.splitlines() if line.startswith("limited"))
    assert row.split()[2] != "-", status.stdout  # the original measured, and a best
    bad = ktuned("tune", entry, "--time-limit", "-5", state=state)
    assert bad.returncode == 2 and "--time-limit" in bad.stderr


def test_the_limit_passing_mid_campaign_stops_it_after_what_is_in_flight(
    tmp_path: Path, write_entry: WriteEntry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deadline passes once the original is measured (a clock the test moves): the
    campaign proposes nothing more and ends with the time limit's note, its original kept."""
    clock = [0.0]
    monkeypatch.setattr(
        "tuned.search.base.time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time)
    )
    spec = load_entry(write_entry("midway"))

    def on_start(total: int) -> object:
        def on_result(*_: object, **__: object) -> None:
            clock[0] = 100.0  # the first result (the original) arrives: the limit passes

        return on_result

    store = SqliteStore(tmp_path / "s.sqlite")
    report = tune_registry(
        spec.directory,
        store=store,
        state_dir=tmp_path / "state",
        settings=TuneSettings(budget=4, seed=1, deadline=50.0),
        evaluation=EvaluationSettings(interpreter=True),
        on_start=on_start,  # type: ignore[arg-type]
    )
    (summary,) = report.summaries
    assert "stopped by the time limit after 0 candidate(s)" in summary.note, summary.note
    fid = store.record_fingerprint(report.fingerprint)
    trials = store.trials(spec.name, spec.generation, fid)
    assert [t.provenance for t in trials] == [Provenance.ORIGINAL]
    store.close()
