"""The progress line of `ktuned tune`: the bar, the elapsed time and the time left."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

import pytest

from tuned import report
from tuned.outcomes import Outcome, Provenance
from tuned.report import Progress, format_duration


def test_format_duration() -> None:
    assert [format_duration(s) for s in (4.4, 65, 3599, 7620)] == ["4s", "1m05s", "59m59s", "2h07m"]


def test_the_line_has_an_eta(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(report.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    progress = Progress(4, stream=out)
    spec: Any = SimpleNamespace(name="add")
    candidate: Any = SimpleNamespace(knobs={"BLOCK": 64}, provenance=Provenance.PARAMETRIC)
    result: Any = SimpleNamespace(outcome=Outcome.OK, time_s=1e-3, phase="")
    summary: Any = SimpleNamespace(speedup=1.5)
    now[0] = 130.0  # one evaluation in 30 s, three left
    progress.update(spec, candidate, result, summary)
    now[0] = 220.0
    for _ in range(3):
        progress.update(spec, candidate, result, summary)
    first, *_, last = out.getvalue().splitlines()
    assert " 1/4    30s eta 1m30s add parametric BLOCK=64: ok 1 ms; best 1.50x" in first
    assert " 4/4   120s done add " in last


def test_a_long_failure_note_does_not_stretch_the_rule() -> None:
    """A PyTorch dispatch error of thousands of characters (an op registered for CUDA only)
    as the note drew a rule of dashes as long as all of it."""
    from tuned.search.base import CampaignSummary

    note = "the original fails (NotImplementedError: " + "x" * 3000 + "\nmore lines)"
    table = report.summary_table([CampaignSummary(kernel="op", note=note)])
    assert table.splitlines()[1] == "-" * report.RULE_MAX
    assert note in table  # the note itself stays whole


def test_the_table_says_why_the_speedup_is_not_baseline_over_best() -> None:
    # The README's run showed "swiglu  50 ms  47.3 ms  3.15x": the speedup is the side-by-side
    # measurement, the two times come from evaluations at different moments of a busy CPU.
    from tuned import report
    from tuned.search.base import CampaignSummary

    near = CampaignSummary(kernel="near", baseline_s=2.0, best_s=1.0, measured_speedup=1.95)
    far = CampaignSummary(kernel="far", baseline_s=0.050, best_s=0.0473, measured_speedup=3.15)
    table = report.summary_table([near, far])
    [note] = [line for line in table.splitlines() if line.startswith("speedup:")]
    assert "side by side" in note and "far" in note and "near" not in note, note
    assert "speedup:" not in report.summary_table([near])
