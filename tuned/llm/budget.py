"""``ktuned budget``: what the LLM proposer spent, and what it may still spend.

Read-only: it opens the store's file without writing (recovering a dead daemon's open
reservations is the next daemon's job), so it is safe beside a running daemon.
"""

from __future__ import annotations

import time
from pathlib import Path

from policies.strategies import llm_strategy_name
from tuned.llm._db import connect_reader
from tuned.llm.ledger import DAY_S, read_totals
from tuned.llm.metrics import attempt_counts
from tuned.llm.proposed import read_strategies
from tuned.llm.settings import LlmSettings

__all__ = ["budget_report"]


def _n(value: int | None) -> str:
    return "no cap" if value is None else f"{value:,}"


def budget_report(store_path: Path, settings: LlmSettings, *, source: str) -> str:
    """The report ``ktuned budget`` prints (caps from ``settings``, read from ``source``)."""
    lines = []
    if settings.enabled:
        lines.append(f"LLM proposer: {settings.model} at {settings.base_url} ({source})")
    else:
        lines.append(f"LLM proposer: off (no llm.base_url and llm.model in {source})")
    db = connect_reader(store_path)
    if db is None:
        lines.append(f"no store at {store_path}: nothing spent")
        return "\n".join(lines) + "\n"
    try:
        now = time.time()
        totals = read_totals(db, now)
        attempts = attempt_counts(db)
        strategy_requests = attempt_counts(db, "strategy")
        proposed = read_strategies(db)
    finally:
        db.close()
    caps = settings.budget
    lines.append(f"ledger: {store_path}")
    lines.append("")
    lines.append(f"{'scope':<10}{'cap':>14}{'committed':>14}{'remaining':>14}")
    rows: list[tuple[str, int | None, int]] = [
        ("total", caps.total_tokens, totals["committed"]["total"]),
        ("daily", caps.daily_tokens, totals["committed"]["daily"]),
    ]
    for scope, cap, committed in rows:
        left = None if cap is None else max(0, cap - committed)
        lines.append(f"{scope:<10}{_n(cap):>14}{committed:>14,}{_n(left):>14}")
    lines.append(
        f"(committed = charged + held by requests in flight: {totals['held']:,}; the daily "
        f"window is the last {DAY_S / 3600:.0f} hours)"
    )
    lines.append(
        f"tokens charged: prompt {totals['prompt']:,}, completion {totals['completion']:,}, "
        f"unreported usage {totals['unreported']:,} (charged at the reservation)"
    )
    if totals["kernels"]:
        lines.append("")
        lines.append(f"charged per kernel (cap {_n(caps.kernel_tokens)}):")
        for kernel, used in sorted(totals["kernels"].items(), key=lambda kv: -kv[1]):
            rest = "" if caps.kernel_tokens is None else f", {caps.kernel_tokens - used:,} left"
            lines.append(f"  {kernel:<24}{used:>12,}{rest}")
    if settings.prices is not None or totals["cost_usd"]:
        lines.append("")
        lines.append(f"cost: ${totals['cost_usd']:.4f} (from the price table at request time)")
    lines.append("")
    if attempts:
        parts = ", ".join(f"{s} {n}" for s, n in sorted(attempts.items()))
        lines.append(f"requests: {totals['requests']} ({parts})")
    else:
        lines.append(f"requests: {totals['requests']}")
    if strategy_requests or proposed:
        parts = ", ".join(f"{s} {n}" for s, n in sorted(strategy_requests.items()))
        lines.append("")
        lines.append(
            f"LLM-proposed strategies (at most {settings.max_strategies} per kernel; "
            f"requests: {parts or 'none'}):"
        )
        for p in proposed:
            lines.append(
                f"  {p.kernel:<24}{llm_strategy_name(p.strategy.name):<22}{p.target:<9}{p.name}"
            )
    return "\n".join(lines) + "\n"
