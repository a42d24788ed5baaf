"""``ktuned budget``: what the LLM proposer spent, and what it may still spend.

Read-only: it opens the store's file without writing (recovering a dead daemon's open
reservations is the next daemon's job), so it is safe beside a running daemon. In a fleet
(a PostgreSQL store) the token figures are the shared ledger's, the whole fleet's spend
against the caps every box enforces; the attempt log and the strategy book are this box's.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from policies.strategies import llm_strategy_name
from tuned.llm.metrics import attempt_counts
from tuned.llm.proposed import ProposedStrategy, read_strategies
from tuned.llm.settings import LlmSettings
from tuned.store._core import damaged_store_error, is_damage
from tuned.store.connections import connect_reader
from tuned.store.ledger import DAY_S, LedgerDb, open_ledger_reader, read_totals

__all__ = ["budget_data", "budget_report"]


def _n(value: int | None) -> str:
    return "no cap" if value is None else f"{value:,}"


def budget_report(
    store_path: Path, settings: LlmSettings, *, source: str, ledger_url: str | None = None
) -> str:
    """The report ``ktuned budget`` prints (caps from ``settings``, read from ``source``).

    ``store_path``: the SQLite file of the LLM's tables (on one box the store's file).
    ``ledger_url``: a fleet's PostgreSQL store, whose shared token ledger is read instead of
    the one in ``store_path``; the attempt log and strategies still come from ``store_path``
    (this box's ``ktuned-llm.sqlite``), which may not exist yet.
    """
    lines = []
    if settings.enabled:
        lines.append(f"LLM proposer: {settings.model} at {settings.base_url} ({source})")
    else:
        lines.append(f"LLM proposer: off (no llm.base_url and llm.model in {source})")
    local = connect_reader(store_path)
    if local is None and ledger_url is None:
        lines.append(f"no store at {store_path}: nothing spent")
        return "\n".join(lines) + "\n"
    ledger: LedgerDb | None = None
    try:
        now = time.time()
        ledger = local if ledger_url is None else open_ledger_reader(ledger_url)
        assert ledger is not None  # a URL always connects (or raises)
        totals = read_totals(ledger, now)
        attempts, strategy_requests, proposed = _local_figures(local)
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        if is_damage(exc):
            raise damaged_store_error(str(store_path), exc) from None
        raise
    finally:
        if local is not None:
            local.close()
        if ledger is not None and ledger is not local:
            ledger.close()
    if ledger_url is None:
        lines.append(f"ledger: {store_path}")
    else:
        from tuned.store.postgres import redact

        lines.append(f"ledger: {redact(ledger_url)} (shared by the fleet)")
        lines.append(f"this box's attempt log: {store_path}")
    caps = settings.budget
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


def budget_data(
    store_path: Path, settings: LlmSettings, *, source: str, ledger_url: str | None = None
) -> dict[str, object]:
    """What :func:`budget_report` prints, as one JSON-ready object (``ktuned budget --json``)."""
    caps = settings.budget
    data: dict[str, object] = {
        "llm": {"enabled": settings.enabled, "model": settings.model, "config": source},
        "caps": {
            "total": caps.total_tokens,
            "daily": caps.daily_tokens,
            "kernel": caps.kernel_tokens,
        },
    }
    local = connect_reader(store_path)
    if local is None and ledger_url is None:
        return {**data, "store": str(store_path), "spent": None}
    ledger: LedgerDb | None = None
    try:
        ledger = local if ledger_url is None else open_ledger_reader(ledger_url)
        assert ledger is not None
        totals = read_totals(ledger, time.time())
        attempts, strategy_requests, _ = _local_figures(local)
    finally:
        if local is not None:
            local.close()
        if ledger is not None and ledger is not local:
            ledger.close()
    committed = totals["committed"]
    remaining = {
        scope: None if cap is None else max(0, cap - committed[scope])
        for scope, cap in (("total", caps.total_tokens), ("daily", caps.daily_tokens))
    }
    return {
        **data,
        "store": str(store_path),
        "committed": dict(committed),
        "remaining": remaining,
        "held": totals["held"],
        "tokens": {k: totals[k] for k in ("prompt", "completion", "unreported")},
        "kernels": dict(sorted(totals["kernels"].items())),
        "cost_usd": totals["cost_usd"],
        "requests": totals["requests"],
        "attempts": dict(sorted(attempts.items())),
        "strategy_requests": dict(sorted(strategy_requests.items())),
    }


def _local_figures(
    db: sqlite3.Connection | None,
) -> tuple[dict[str, int], dict[str, int], list[ProposedStrategy]]:
    """Rewrite requests and strategy requests by status, and the accepted strategies."""
    if db is None:
        return {}, {}, []
    return attempt_counts(db), attempt_counts(db, "strategy"), read_strategies(db)
