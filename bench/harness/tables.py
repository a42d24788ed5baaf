"""Result tables as the benchmarks print them: GitHub markdown, pasted into RESULTS.md."""

from __future__ import annotations

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
    """A duration with a unit that keeps three significant figures (us, ms, s); ``-`` for
    None."""
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def quartiles(values: Sequence[float]) -> str:
    """``median [q1, q3]`` of ``values`` (one decimal); the value alone for one."""
    if len(values) < 2:
        return f"{values[0]:.1f}" if values else "-"
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return f"{q2:.1f} [{q1:.1f}, {q3:.1f}]"
