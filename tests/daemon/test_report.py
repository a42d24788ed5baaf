"""`ktuned report --out DIR`: PNG plots and an HTML page from a real store."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import WriteEntry
from tests.daemon.conftest import ROOT
from tests.daemon.test_store_reads import FP, _accept, _record
from tuned.outcomes import Outcome
from tuned.registry import load_entry
from tuned.reporting.page import acceptances
from tuned.reporting.plots import history_series
from tuned.store.overview import kernel_overview
from tuned.store.sqlite import SqliteStore

PNG = b"\x89PNG\r\n\x1a\n"


def test_report_writes_plots_and_a_summary(tmp_path: Path, write_entry: WriteEntry) -> None:
    state = tmp_path / "state"
    store = SqliteStore(state / "ktuned.sqlite")
    for name, best in (("add", 0.5), ("mul", 0.25)):
        spec = load_entry(write_entry(name))
        store.sync_kernel(spec)
        fid = store.record_fingerprint(FP)
        _record(store, spec, fid, 256, 1.0, original=True, at=1000)
        _accept(store, _record(store, spec, fid, 64, best, at=2000), fid, speedup=1.0 / best)
        _record(store, spec, fid, 128, None, outcome=Outcome.INCORRECT, at=3000)
    store.record_invalid(str(tmp_path / "registry" / "bad"), "kernel.yaml: field 'dtypes': bad")
    store.close()
    out = tmp_path / "report"
    run = subprocess.run(
        [sys.executable, "-m", "tuned.cli", "report", "--out", str(out), "--state-dir", str(state)],
        env={**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "TkAgg", "DISPLAY": ""},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    for png in ("speedup.png", "history.png", "outcomes.png", "strategies.png"):
        data = (out / png).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000
    page = (out / "index.html").read_text()
    assert "2.828x" in page  # geometric mean of 2x and 4x
    assert "<td>add</td>" in page and "<td>mul</td>" in page and "4.00x" in page
    assert 'src="speedup.png"' in page and 'src="history.png"' in page
    assert "field &#x27;dtypes&#x27;" in page
    assert "interpreter timings" in page


def test_the_history_plots_the_accepted_best_apart_from_a_lucky_measurement(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    """history.png's solid line is the accepted best of the table and `status`; a single fast
    measurement the acceptance rule never confirmed shows only as a dot (and dotted line)."""
    store = SqliteStore(tmp_path / "ktuned.sqlite")
    spec = load_entry(write_entry("add"))
    store.sync_kernel(spec)
    fid = store.record_fingerprint(FP)
    now = time.time()  # the acceptance is decided now, after trial 1 and before trial 2
    _record(store, spec, fid, 256, 1.0, original=True, at=now - 200)
    _accept(store, _record(store, spec, fid, 64, 0.5, at=now - 100), fid, speedup=1.9)
    _record(store, spec, fid, 128, 0.1, at=now + 100)  # 10x once, never accepted
    _record(store, spec, fid, 512, None, outcome=Outcome.INCORRECT, at=now + 200)
    [overview] = kernel_overview(store)
    accepted, measured = acceptances(store, [overview.progress])
    [points] = history_series(store.timeline(current_only=True), accepted, measured).values()
    store.close()
    assert [p.trial for p in points] == [0, 1, 2, 3]
    assert [p.measured for p in points] == [1.0, 2.0, 10.0, None]
    # Accepted once decided (after its trial): 1.9x side by side, never the lucky 10x.
    assert [p.accepted for p in points] == [1.0, 1.0, 1.9, 1.9]
    assert overview.speedup == points[-1].accepted  # the table's and status's number
