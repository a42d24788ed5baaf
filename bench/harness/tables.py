"""Result tables as the benchmarks print them: GitHub markdown, pasted into RESULTS.md."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A markdown table of ``rows`` (cells shown with ``str``) under ``headers``."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"a row of {len(row)} cells under {len(headers)} headers: {row!r}")
        lines.append("| " + " | ".join(str(cell) for cell in row) + " |")
    return "\n".join(lines)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    print(markdown_table(headers, rows), flush=True)


def fmt_s(seconds: float | None) -> str:
    """Seconds as the tables print them (s, ms or us, three significant figures below a
    second); ``-`` for None or NaN."""
    if seconds is None or math.isnan(seconds):
        return "-"
    if seconds >= 1:
        return f"{seconds:.1f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


def quartiles(values: Sequence[float]) -> str:
    """``mean (q1..q3)`` of ``values`` (one decimal); ``-`` for none."""
    if not values:
        return "-"
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return f"{statistics.mean(values):5.1f} ({q[0]:.1f}..{q[2]:.1f})"
