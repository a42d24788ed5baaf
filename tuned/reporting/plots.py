"""The report's plots, drawn with matplotlib's headless Agg backend (no display needed)."""

from __future__ import annotations

import datetime
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuned.outcomes import Outcome, Provenance
from tuned.store.base import TimelineRow

__all__ = [
    "HistoryPoint",
    "history_series",
    "plot_history",
    "plot_outcomes",
    "plot_speedups",
    "plot_strategies",
    "speedup_series",
]

_OUTCOME_COLORS = {
    "ok": "#2ca02c",
    "incorrect": "#d62728",
    "nan": "#ff9896",
    "compile_error": "#9467bd",
    "runtime_error": "#8c564b",
    "timeout": "#ff7f0e",
    "crash": "#000000",
    "cheat": "#e377c2",
    "rejected_static": "#7f7f7f",
    "gpu_busy": "#17becf",
}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def speedup_series(
    rows: Sequence[TimelineRow],
    accepted: Mapping[str, Sequence[tuple[float, str]]],
    measured: Mapping[tuple[str, str], float] | None = None,
) -> dict[str, list[tuple[datetime.datetime, float]]]:
    """Speedup of the incumbent over time per kernel (current generation, latest fingerprint).

    It starts at 1 when the baseline is measured and steps at each acceptance
    (``accepted[kernel]``: (decided_at, candidate id), oldest first) to the accepted
    candidate's speedup as measured side by side (``measured[(kernel, candidate id)]``,
    :mod:`tuned.store.speedups`), else baseline / its first measured time.
    """
    latest_fp = {r.kernel: r.fingerprint for r in rows}
    first_time: dict[tuple[str, str], float] = {}
    baseline: dict[str, tuple[float, float]] = {}
    for r in rows:
        if r.fingerprint != latest_fp[r.kernel] or r.outcome != Outcome.OK.value:
            continue
        if r.time_s is None or r.time_s <= 0:
            continue
        first_time.setdefault((r.kernel, r.candidate_id), r.time_s)
        if r.provenance is Provenance.ORIGINAL:
            baseline.setdefault(r.kernel, (r.finished_at, r.time_s))
    series: dict[str, list[tuple[datetime.datetime, float]]] = {}
    for kernel, (at, base) in baseline.items():
        points = [(datetime.datetime.fromtimestamp(at), 1.0)]
        for decided_at, cid in accepted.get(kernel, ()):
            t = first_time.get((kernel, cid))
            value = (measured or {}).get((kernel, cid)) or (base / t if t else None)
            if value is not None:
                points.append((datetime.datetime.fromtimestamp(decided_at), value))
        last = rows[-1].finished_at if rows else at
        points.append((datetime.datetime.fromtimestamp(max(last, at)), points[-1][1]))
        series[kernel] = points
    return series


def _dates(ax: Any) -> None:
    """Readable dates on the x axis."""
    import importlib

    mdates: Any = importlib.import_module("matplotlib.dates")  # untyped
    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))


def _legend_outside(ax: Any) -> None:
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def plot_speedups(
    rows: Sequence[TimelineRow],
    accepted: Mapping[str, Sequence[tuple[float, str]]],
    path: Path,
    intervals: Mapping[str, Mapping[str, tuple[float, float]]] | None = None,
    measured: Mapping[tuple[str, str], float] | None = None,
) -> None:
    """Each kernel's best speedup over time, with dates; at each acceptance a bar shows the
    acceptance rule's interval (``intervals[kernel][candidate id]``: the bootstrap interval
    of the gain over the previous best, scaled by the previous best's speedup)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    series = speedup_series(rows, accepted, measured)
    for kernel, points in sorted(series.items()):
        xs, ys = zip(*points)
        (line,) = ax.step(xs, ys, where="post", label=kernel)
        known = (intervals or {}).get(kernel, {})
        ids = [cid for at, cid in accepted.get(kernel, ())]
        # points: baseline, one per acceptance found, the end; acceptances in order.
        for i, (when, value) in enumerate(points[1:-1], start=1):
            cid = ids[i - 1] if i - 1 < len(ids) else None
            if cid is None or cid not in known:
                continue
            previous = points[i - 1][1]
            low, high = known[cid][0] * previous, known[cid][1] * previous
            ax.errorbar(
                [when],
                [value],
                yerr=[[max(value - low, 0.0)], [max(high - value, 0.0)]],
                fmt="o",
                color=line.get_color(),
                markersize=3,
                capsize=3,
            )
    ax.axhline(1.0, color="#999999", linewidth=0.8)
    ax.set_title("Best speedup over the baseline, per kernel (bars: acceptance intervals)")
    ax.set_ylabel("speedup (x)")
    ax.set_xlabel("date")
    _dates(ax)
    if series:
        _legend_outside(ax)
    else:
        ax.text(0.5, 0.5, "no successful evaluation yet", ha="center", transform=ax.transAxes)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


@dataclass(frozen=True)
class HistoryPoint:
    """One trial of the optimization history: its number, its speedup over the baseline as
    measured (None: it failed), and the accepted best's speedup in force when it finished."""

    trial: int
    measured: float | None
    accepted: float


def history_series(
    rows: Sequence[TimelineRow],
    accepted: Mapping[str, Sequence[tuple[float, str]]] | None = None,
    measured: Mapping[tuple[str, str], float] | None = None,
) -> dict[str, list[HistoryPoint]]:
    """Every trial of each kernel (current generation, latest fingerprint), numbered from 0.

    ``measured`` speedup: baseline time / the trial's time, one measurement. ``accepted``: the
    incumbent's speedup when the trial finished, as :func:`speedup_series` steps it (the
    number the report's table, ``ktuned status`` and the dashboard show), so the two lines
    tell apart a lucky measurement from a best the acceptance rule confirmed."""
    latest_fp = {r.kernel: r.fingerprint for r in rows}
    baseline: dict[str, float] = {}
    for r in rows:
        if (
            r.provenance is Provenance.ORIGINAL
            and r.fingerprint == latest_fp[r.kernel]
            and r.outcome == Outcome.OK.value
            and r.time_s
        ):
            baseline.setdefault(r.kernel, r.time_s)
    steps = speedup_series(rows, accepted or {}, measured)
    out: dict[str, list[HistoryPoint]] = {}
    for kernel in sorted(baseline):
        mine = [r for r in rows if r.kernel == kernel and r.fingerprint == latest_fp[kernel]]
        points = []
        for i, r in enumerate(mine):
            when = datetime.datetime.fromtimestamp(r.finished_at)
            in_force = [v for at, v in steps.get(kernel, ()) if at <= when]
            points.append(
                HistoryPoint(
                    trial=i,
                    measured=baseline[kernel] / r.time_s if r.time_s else None,
                    accepted=in_force[-1] if in_force else 1.0,
                )
            )
        out[kernel] = points
    return out


def plot_history(
    rows: Sequence[TimelineRow],
    path: Path,
    accepted: Mapping[str, Sequence[tuple[float, str]]] | None = None,
    measured: Mapping[tuple[str, str], float] | None = None,
) -> None:
    """Optuna-style optimization history (:func:`history_series`): every trial as a dot, the
    accepted best as a solid step line and the best single measurement so far as a dotted
    one. Failed trials are marked at the bottom."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    series = history_series(rows, accepted, measured)
    trials = 0
    for kernel, points in series.items():
        trials += len(points)
        ok = [(p.trial, p.measured) for p in points if p.measured is not None]
        failed = [p.trial for p in points if p.measured is None]
        color = None
        if ok:
            xs, ys = zip(*ok)
            dots = ax.scatter(xs, ys, s=10, alpha=0.6, label=f"{kernel} trials")
            color = dots.get_facecolor()[0]
            best, running = [], 0.0
            for y in ys:
                running = max(running, y)
                best.append(running)
            ax.step(
                xs,
                best,
                where="post",
                color=color,
                linestyle=":",
                linewidth=1,
                label=f"{kernel} best single measurement",
            )
        ax.step(
            [p.trial for p in points],
            [p.accepted for p in points],
            where="post",
            color=color,
            linewidth=2,
            label=f"{kernel} accepted best",
        )
        if failed:
            ax.scatter(failed, [0.0] * len(failed), marker="x", s=12, color="#999999")
    ax.set_title(f"Optimization history: {trials} trials (x: failed)")
    ax.set_xlabel("trial")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("speedup over the baseline (x)")
    if series:
        _legend_outside(ax)
    else:
        ax.text(0.5, 0.5, "no baseline measured yet", ha="center", transform=ax.transAxes)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def plot_outcomes(rows: Sequence[TimelineRow], path: Path) -> None:
    plt = _pyplot()
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for r in rows:
        counts[r.kernel][r.outcome] += 1
    kernels = sorted(counts)
    outcomes = [o.value for o in Outcome if any(counts[k][o.value] for k in kernels)]
    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.45 * len(kernels) + 1.2)))
    left = [0] * len(kernels)
    for outcome in outcomes:
        values = [counts[k][outcome] for k in kernels]
        ax.barh(kernels, values, left=left, label=outcome, color=_OUTCOME_COLORS.get(outcome))
        left = [a + b for a, b in zip(left, values)]
    ax.set_title("Evaluations by outcome")
    ax.set_xlabel("evaluations")
    if outcomes:
        _legend_outside(ax)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def plot_strategies(arms: Mapping[tuple[str, str], tuple[int, float]], path: Path) -> None:
    plt = _pyplot()
    pulls: Counter[str] = Counter()
    reward: dict[str, float] = defaultdict(float)
    for (_, strategy), (n, total) in arms.items():
        pulls[strategy] += n
        reward[strategy] += total
    names = sorted(pulls)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    left.bar(names, [pulls[s] for s in names], color="#1f77b4")
    left.set_title("Strategy pulls")
    left.set_ylabel("candidates")
    right.bar(names, [reward[s] / pulls[s] if pulls[s] else 0.0 for s in names], color="#ff7f0e")
    right.set_title("Mean reward (latency reduction vs parent)")
    for ax in (left, right):
        ax.tick_params(axis="x", labelrotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
