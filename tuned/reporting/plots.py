"""The report's plots, drawn with matplotlib's headless Agg backend (no display needed)."""

from __future__ import annotations

import datetime
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tuned.outcomes import Outcome, Provenance
from tuned.store.base import TimelineRow

__all__ = ["plot_outcomes", "plot_speedups", "plot_strategies", "speedup_series"]

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


def plot_speedups(
    rows: Sequence[TimelineRow],
    accepted: Mapping[str, Sequence[tuple[float, str]]],
    path: Path,
    measured: Mapping[tuple[str, str], float] | None = None,
) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    series = speedup_series(rows, accepted, measured)
    for kernel, points in sorted(series.items()):
        xs, ys = zip(*points)
        ax.step(xs, ys, where="post", label=kernel)
    ax.axhline(1.0, color="#999999", linewidth=0.8)
    ax.set_title("Best speedup over the baseline, per kernel")
    ax.set_ylabel("speedup (x)")
    ax.set_xlabel("time")
    if series:
        ax.legend(fontsize="small", ncol=2)
    else:
        ax.text(0.5, 0.5, "no successful evaluation yet", ha="center", transform=ax.transAxes)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
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
        ax.legend(fontsize="small", loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
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
