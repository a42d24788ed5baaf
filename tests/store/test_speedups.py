"""The one speedup every display shows: referee, else vs_original, else the acceptance chain."""

from __future__ import annotations

import pytest

from tuned.store.speedups import measured_speedup


def _row(
    cid: str, over: str, status: str, s: float, second: float | None = None
) -> dict[str, object]:
    def iv(x: float) -> dict[str, float]:
        return {"speedup": x, "low": 0.9 * x, "high": 1.1 * x}

    return {
        "candidate_id": cid,
        "incumbent_id": over,
        "status": status,
        "first": iv(s),
        "second": None if second is None else iv(second),
    }


def test_the_speedup_is_measured_side_by_side_never_a_ratio_of_times() -> None:
    rows = [
        _row("a", "base", "accepted", 1.5, 1.4),  # the confirming (second) interval counts
        _row("b", "a", "held", 30.0),  # never counts
        _row("b", "a", "accepted", 1.2, 1.1),
    ]
    assert measured_speedup(rows, "base", "base").speedup == 1.0  # type: ignore[union-attr]
    a = measured_speedup(rows, "base", "a")
    assert a is not None and (a.speedup, a.source, a.steps) == (1.4, "acceptance", 1)
    b = measured_speedup(rows, "base", "b")  # accepted against a: the chain back to base
    assert b is not None and b.steps == 2 and b.speedup == pytest.approx(1.4 * 1.1)
    assert b.low == pytest.approx(0.9 * 1.4 * 0.9 * 1.1)
    rows.append(_row("b", "base", "vs_original", 1.45, 1.5))
    b = measured_speedup(rows, "base", "b")
    assert b is not None and (b.speedup, b.source) == (1.5, "vs_original")
    rows.append(_row("b", "base", "refereed", 1.3))
    b = measured_speedup(rows, "base", "b")
    assert b is not None and (b.speedup, b.source) == (1.3, "referee")
    assert measured_speedup(rows, "base", "never-accepted") is None
