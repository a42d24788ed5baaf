"""The report page: one self-contained directory with ``index.html`` and its PNG plots."""

from __future__ import annotations

import datetime
import html
import math
from collections.abc import Sequence
from pathlib import Path

from tuned import __version__
from tuned.errors import BadInputError
from tuned.report import format_seconds
from tuned.reporting.plots import plot_history, plot_outcomes, plot_speedups, plot_strategies
from tuned.store.api import Store
from tuned.store.base import KernelProgress
from tuned.store.overview import kernel_overview

__all__ = ["acceptances", "write_report"]

_STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 60em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.note { color: #666; font-size: 0.9em; }
pre { background: #f6f6f6; padding: 0.5em; white-space: pre-wrap; }
"""


def acceptances(
    store: Store, progress: Sequence[KernelProgress]
) -> tuple[dict[str, list[tuple[float, str]]], dict[tuple[str, str], float]]:
    """Each kernel's acceptances (decided_at, candidate id) of its current generation and
    fingerprint, oldest first, and each one's side-by-side speedup (tuned.store.speedups):
    the steps of the report's speedup and history plots."""
    accepted = {
        k.name: [
            (float(a["decided_at"]), str(a["candidate_id"]))
            for a in store.acceptances(k.name)
            if a["status"] == "accepted"
            and a["generation"] == k.generation
            and a["fingerprint"] == k.fingerprint
        ]
        for k in progress
    }
    measured = {  # each acceptance's side-by-side speedup (tuned.store.speedups)
        (k.name, cid): m.speedup
        for k in progress
        if k.fingerprint is not None
        for _, cid in accepted[k.name]
        if (m := store.measured_speedup(k.name, k.generation, k.fingerprint, cid)) is not None
    }
    return accepted, measured


def write_report(store: Store, out: Path) -> Path:
    """Write ``out/index.html`` with ``speedup.png``, ``history.png``, ``outcomes.png`` and
    ``strategies.png``."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"cannot create the report directory {out}: {exc}") from exc
    current = store.timeline(current_only=True)
    every = store.timeline(current_only=False)
    arms = store.evaluation_totals(0).arms
    overview = kernel_overview(store)  # the states and counts of `status` and /metrics
    progress = [o.progress for o in overview]
    accepted, measured = acceptances(store, progress)
    intervals = {
        k.name: {
            str(a["candidate_id"]): (float(i["low"]), float(i["high"]))
            for a in store.acceptances(k.name)
            if a["status"] == "accepted"
            for i in [a.get("second") or a.get("first") or {}]
            if "low" in i and "high" in i
        }
        for k in progress
    }
    plot_speedups(current, accepted, out / "speedup.png", intervals, measured)
    plot_history(current, out / "history.png", accepted, measured)
    plot_outcomes(every, out / "outcomes.png")
    plot_strategies(arms, out / "strategies.png")
    speedups = [o.speedup for o in overview if o.speedup and o.state != "retired"]
    geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None
    kinds = {k.timing_kind for k in progress if k.timing_kind}
    rows = []
    for o in overview:
        k = o.progress
        when = (
            datetime.datetime.fromtimestamp(k.best_at).strftime("%Y-%m-%d %H:%M")
            if k.best_at
            else "-"
        )
        cells = [
            k.name,
            o.state,
            k.generation[:12],
            format_seconds(k.baseline_s),
            format_seconds(k.best_s),
            f"{k.speedup:.2f}x" if k.speedup else "-",
            str(o.evaluations),
            when,
        ]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    invalid = "".join(
        f"<h3>{html.escape(d)}</h3><pre>{html.escape(p)}</pre>"
        for d, p in store.invalid_entries().items()
    )
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    headers = "kernel state generation baseline best speedup evaluations last-improvement"
    note = (
        "<p class='note'>Times are Triton interpreter timings on a CPU (no GPU): they rank "
        "candidates on that machine and are not GPU results.</p>"
        if "interpreter" in kinds
        else ""
    )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ktuned report</title>
<style>{_STYLE}</style></head><body>
<h1>ktuned report</h1>
<p class="note">Store {html.escape(store.location)}; written {now} by ktuned {__version__}.</p>
<p><b>Geometric-mean speedup</b> over {len(speedups)}
kernels with a result (retired ones aside, as on the dashboard):
<b>{f"{geomean:.3f}x" if geomean else "-"}</b>; {sum(o.evaluations for o in overview)}
evaluations in all (every generation and fingerprint, as `ktuned status` and /metrics count).</p>
{note}
<table><tr>{"".join(f"<th>{h}</th>" for h in headers.split())}</tr>
{"".join(rows)}</table>
<h2>Speedup over time</h2><img src="speedup.png" alt="best speedup per kernel over time">
<h2>Optimization history</h2><img src="history.png" alt="every trial's speedup and the best so far">
<h2>Evaluations by outcome</h2><img src="outcomes.png" alt="evaluations by outcome">
<h2>Strategies</h2><img src="strategies.png" alt="strategy pulls and mean reward">
{"<h2>Invalid registry entries</h2>" + invalid if invalid else ""}
</body></html>
"""
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
