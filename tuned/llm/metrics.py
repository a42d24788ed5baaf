"""The LLM metric families, read from the ledger and the attempt log at scrape time.

=========================================  ========  ================  =====================
metric                                     type      labels            what
=========================================  ========  ================  =====================
``ktuned_llm_tokens_total``                counter   ``kind``          tokens charged:
                                                                       ``prompt``,
                                                                       ``completion``,
                                                                       ``unreported`` (usage
                                                                       missing or a crashed
                                                                       request: charged at
                                                                       its reservation)
``ktuned_llm_reserved_tokens``             gauge                       held by requests in
                                                                       flight
``ktuned_llm_budget_limit_tokens``         gauge     ``scope``         cap (``total``,
                                                                       ``daily``)
``ktuned_llm_budget_remaining_tokens``     gauge     ``scope``         cap minus committed
``ktuned_llm_kernel_tokens_total``         counter   ``kernel``        charged per kernel
``ktuned_llm_cost_dollars_total``          counter                     from the price table
``ktuned_llm_attempts_total``              counter   ``status``        what each rewrite
                                                                       request gave
                                                                       (docs/llm.md)
``ktuned_llm_strategy_requests_total``     counter   ``status``        what each request for
                                                                       new strategies gave
``ktuned_llm_strategies``                  gauge     ``kernel``        LLM-proposed
                                                                       strategies accepted
=========================================  ========  ================  =====================

In a fleet (a PostgreSQL store) the token figures are the shared ledger's, the ones the caps
of every box use, so they are the fleet's spend, equal on every box; the attempt and strategy
figures are this box's own (its ``ktuned-llm.sqlite``).

Without a configured budget (no LLM) the ``total`` scope reports a limit and a remainder of
0, so the "budget nearly spent" alert (which needs a limit above 0) stays quiet.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import closing
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tuned.llm.proposed import STRATEGY_STATUSES, read_strategies
from tuned.store.ledger import BudgetCaps, read_totals
from tuned.store.llm_attempts import ATTEMPT_STATUSES, read_attempt_counts

__all__ = ["LLM_TOKEN_KINDS", "attempt_counts", "llm_families"]

LLM_TOKEN_KINDS = ("prompt", "completion", "unreported")


def llm_families(
    db: sqlite3.Connection | None,
    budget: BudgetCaps | None,
    now: float | None = None,
    *,
    totals: Mapping[str, Any] | None = None,
) -> Iterator[Metric]:
    """Every LLM family, from ``db`` (``None``: no database yet, all zeros).

    ``totals``: the ledger's :func:`~tuned.store.ledger.read_totals` when the ledger is not in
    ``db`` (a fleet's shared ledger in PostgreSQL, while the attempt log and the strategy book
    stay in the box's own file); default: read from ``db``.
    """
    now = time.time() if now is None else now
    if totals is None:
        if db is None:
            with closing(sqlite3.connect(":memory:")) as empty:
                totals = read_totals(empty, now)
        else:
            totals = read_totals(db, now)
    tokens = CounterMetricFamily(
        "ktuned_llm_tokens", "LLM tokens charged by the ledger, by kind", labels=["kind"]
    )
    for kind in LLM_TOKEN_KINDS:
        tokens.add_metric([kind], totals[kind])
    yield tokens
    yield GaugeMetricFamily(
        "ktuned_llm_reserved_tokens",
        "LLM tokens reserved by requests in flight (counted at their maximum)",
        value=totals["held"],
    )
    limit = GaugeMetricFamily(
        "ktuned_llm_budget_limit_tokens", "LLM token cap, by scope", labels=["scope"]
    )
    remaining = GaugeMetricFamily(
        "ktuned_llm_budget_remaining_tokens",
        "LLM tokens still allowed, by scope (cap minus charged and reserved)",
        labels=["scope"],
    )
    if budget is None:
        limit.add_metric(["total"], 0)
        remaining.add_metric(["total"], 0)
    else:
        for scope in ("total", "daily"):
            cap = budget.limit(scope)
            if cap is None:
                continue
            limit.add_metric([scope], cap)
            remaining.add_metric([scope], max(0, cap - totals["committed"][scope]))
    yield limit
    yield remaining
    per_kernel = CounterMetricFamily(
        "ktuned_llm_kernel_tokens",
        "LLM tokens charged per kernel",
        labels=["kernel"],
    )
    for kernel, n in sorted(totals["kernels"].items()):
        per_kernel.add_metric([kernel], n)
    yield per_kernel
    yield CounterMetricFamily(
        "ktuned_llm_cost_dollars",
        "LLM spend in dollars, from the configured price table",
        value=totals["cost_usd"],
    )
    attempts = CounterMetricFamily(
        "ktuned_llm_attempts",
        "LLM rewrite requests by what they gave (candidate, no_code, truncated, ...)",
        labels=["status"],
    )
    counts = {status: 0 for status in ATTEMPT_STATUSES} | attempt_counts(db)
    for status, n in sorted(counts.items()):
        attempts.add_metric([status], n)
    yield attempts
    requests = CounterMetricFamily(
        "ktuned_llm_strategy_requests",
        "LLM requests for new strategies by what they gave (accepted, duplicate, capped, "
        "malformed, ...)",
        labels=["status"],
    )
    counts = {status: 0 for status in STRATEGY_STATUSES} | attempt_counts(db, "strategy")
    for status, n in sorted(counts.items()):
        requests.add_metric([status], n)
    yield requests
    proposed = GaugeMetricFamily(
        "ktuned_llm_strategies",
        "LLM-proposed strategies accepted per kernel (each is an arm llm:proposed_<n>)",
        labels=["kernel"],
    )
    per_kernel_strategies: dict[str, int] = {}
    for s in [] if db is None else read_strategies(db):
        per_kernel_strategies[s.kernel] = per_kernel_strategies.get(s.kernel, 0) + 1
    for kernel, n in sorted(per_kernel_strategies.items()):
        proposed.add_metric([kernel], n)
    yield proposed


def attempt_counts(db: sqlite3.Connection | None, purpose: str = "rewrite") -> dict[str, int]:
    """Requests of ``purpose`` (``rewrite`` or ``strategy``) by status."""
    return {} if db is None else read_attempt_counts(db, purpose)
