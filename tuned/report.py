"""What the command line prints: a progress line per evaluation and the final table."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TextIO

from tuned.outcomes import Candidate, EvalResult
from tuned.registry.spec import KernelSpec
from tuned.search import CampaignSummary

__all__ = ["Progress", "format_duration", "format_seconds", "rule", "summary_table"]


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_duration(seconds: float) -> str:
    """``45s``, ``3m05s``, ``2h07m``: a duration for a progress line."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """A bar redrawn in place on a terminal; one line per evaluation otherwise (logs, CI).

    The estimate of the time left (``eta``) is the mean time per evaluation so far times the
    evaluations left (the total is the budget: a kernel that stops early ends sooner)."""

    def __init__(self, total: int, stream: TextIO = sys.stderr, width: int = 24) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream
        self.width = width
        self.started = time.monotonic()
        self.tty = stream.isatty()

    def update(
        self, spec: KernelSpec, candidate: Candidate, result: EvalResult, summary: CampaignSummary
    ) -> None:
        self.done += 1
        filled = int(self.width * min(self.done, self.total) / self.total)
        bar = "#" * filled + "." * (self.width - filled)
        knobs = ",".join(f"{k}={v}" for k, v in candidate.knobs.items()) or "defaults"
        if result.outcome.value == "ok":
            what = f"ok {format_seconds(result.time_s)}"
        else:
            what = f"{result.outcome.value} ({result.phase})"
        speedup = f"best {summary.speedup:.2f}x" if summary.speedup else "best -"
        elapsed = time.monotonic() - self.started
        left = max(self.total - self.done, 0)
        eta = "done" if not left else f"eta {format_duration(elapsed / self.done * left)}"
        line = (
            f"[{bar}] {self.done}/{self.total} {elapsed:5.0f}s {eta} {spec.name} "
            f"{candidate.provenance.value} {knobs}: {what}; {speedup}"
        )
        if self.tty:
            self.stream.write("\r\x1b[2K" + line[:200])
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


#: The widest rule under a table's header: a failure's note (a PyTorch dispatch error of 3,000
#: characters over many lines) once drew a rule as long as all of it.
RULE_MAX = 120


def rule(lines: Sequence[str]) -> str:
    """The dashes under a table's header: as wide as its widest first line, at most
    :data:`RULE_MAX`."""
    return "-" * min(max(len(line.split("\n", 1)[0]) for line in lines), RULE_MAX)


#: Baseline / best further than this factor from the measured speedup: the table says why.
_APART = 1.1


def summary_table(summaries: Sequence[CampaignSummary]) -> str:
    """The final table: one row per kernel. ``candidates`` counts what ``--budget`` counts
    (candidates evaluated besides the baseline); ``evals`` in ``ktuned status``, ``report`` and
    /metrics is every evaluation in the store (baseline and re-measurements too)."""
    header = ("kernel", "baseline", "best", "speedup", "candidates", "failures by outcome")
    rows = [header]
    for s in summaries:
        failures = ", ".join(f"{k}={v}" for k, v in s.failures.items()) or "none"
        if s.note:
            failures += f"; {s.note}"
        rows.append(
            (
                s.kernel,
                format_seconds(s.baseline_s),
                format_seconds(s.best_s),
                f"{s.speedup:.2f}x" if s.speedup else "-",
                str(s.evaluations),
                failures,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    lines = []
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths)]
        lines.append("  ".join([*cells, r[-1]]))
    lines.insert(1, rule(lines))
    apart = [
        s.kernel
        for s in summaries
        if s.speedup
        and s.baseline_s
        and s.best_s
        and not 1 / _APART < s.baseline_s / s.best_s / s.speedup < _APART
    ]
    if apart:  # a reader divides the two columns: say why the speedup is not that
        lines.append(
            "speedup: the best timed side by side with the original, not baseline / best "
            "(two evaluations at different moments; they differ by more than "
            f"{_APART - 1:.0%} for {', '.join(apart)}: the host's load moved one of them)"
        )
    kinds = {s.timing_kind for s in summaries if s.timing_kind}
    if "interpreter" in kinds:
        lines.append(
            "Times are Triton interpreter timings on this CPU (no GPU): they rank "
            "candidates here and are not GPU results."
        )
    return "\n".join(lines)
