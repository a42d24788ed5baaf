"""The token ledger on a fleet's PostgreSQL store: the caps hold across processes (boxes).

Each process stands for one box's daemon: its own ledger on the shared database, reserving,
settling and leaving reservations open at random (fixed seeds). Afterwards every scope is
recomputed from the raw rows, independently of the ledger's code.
"""

from __future__ import annotations

import multiprocessing
import random
from pathlib import Path
from typing import Any

import pytest

from tuned.store.ledger import DAY_S, BudgetCaps, BudgetExceeded, TokenLedger, Usage

CAPS = BudgetCaps(total_tokens=6000, daily_tokens=4000, kernel_tokens=3500)

pytestmark = pytest.mark.timeout(180)


def _raw_rows(url: str) -> list[tuple[str, float, int, str]]:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT kernel, created_at, COALESCE(charged, reserved), state FROM llm_ledger"
        ).fetchall()
    return [(str(k), float(t), int(v), str(s)) for k, t, v, s in rows]


def check_caps(url: str, caps: BudgetCaps) -> None:
    committed = _raw_rows(url)
    assert sum(v for _, _, v, _ in committed) <= caps.total_tokens
    assert caps.kernel_tokens is not None and caps.daily_tokens is not None
    for kernel in {k for k, _, _, _ in committed}:
        assert sum(v for k, _, v, _ in committed if k == kernel) <= caps.kernel_tokens
    for _, end, _, _ in committed:  # every window ending at a reservation
        assert sum(v for _, t, v, _ in committed if end - DAY_S < t <= end) <= caps.daily_tokens


#: Per-kernel caps, every box racing for the same kernel at once: many boundary crossings.
RACE_CAPS = BudgetCaps(total_tokens=10**9, daily_tokens=10**9, kernel_tokens=300)
RACE_KERNELS = 25
BOXES = 4


def _box(url: str, seed: int, start: Any, out: Any) -> None:
    """One box's daemon: for each kernel in turn (all boxes together, after ``start``),
    reserve until that kernel's cap refuses; settle in full or leave the request open, so
    every reservation keeps counting at its maximum and the final rows show any overspend."""
    rng = random.Random(seed)
    ledger = TokenLedger(url, caps=RACE_CAPS)
    reserved = refused = 0
    for k in range(RACE_KERNELS):
        start.wait(timeout=60)
        while True:
            try:
                r = ledger.reserve(
                    kernel=f"k{k}",
                    prompt_estimate=rng.randint(0, 20),
                    max_tokens=rng.randint(1, 20),
                    model="m",
                )
            except BudgetExceeded:
                refused += 1
                break
            reserved += 1
            if rng.random() < 0.5:
                ledger.settle(r, Usage(r.prompt_estimate, r.max_tokens))
    out.put((seed, reserved, refused))
    ledger.close()


def test_boxes_racing_on_one_postgresql_ledger_never_exceed_a_cap(
    postgres_url: str,
) -> None:
    TokenLedger(postgres_url, caps=RACE_CAPS).close()  # creates the llm_* tables
    ctx = multiprocessing.get_context("spawn")
    out: Any = ctx.Queue()
    start = ctx.Barrier(BOXES)
    procs = [
        ctx.Process(target=_box, args=(postgres_url, seed, start, out))
        for seed in range(1, BOXES + 1)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=150)
        assert p.exitcode == 0
    results = sorted(out.get(timeout=10) for _ in procs)
    assert all(reserved > 0 for _, reserved, _ in results)  # every box got requests through
    check_caps(postgres_url, RACE_CAPS)
    per_kernel: dict[str, int] = {}
    for kernel, _, tokens, _ in _raw_rows(postgres_url):
        per_kernel[kernel] = per_kernel.get(kernel, 0) + tokens
    assert len(per_kernel) == RACE_KERNELS
    assert min(per_kernel.values()) > 300 - 41  # each cap was reached (refusals are real)
    # Spend as one box's ledger reports it is the whole fleet's.
    ledger = TokenLedger(postgres_url, caps=RACE_CAPS)
    try:
        total = next(s for s in ledger.spend() if s.scope == "total")
        assert total.committed == sum(per_kernel.values())
        owners = {str(r["owner"]).split(":")[1] for r in ledger.rows(limit=100_000)}
        assert len(owners) == BOXES
    finally:
        ledger.close()


def test_the_sqlite_ledger_is_unchanged_by_a_postgres_url_elsewhere(tmp_path: Path) -> None:
    """A path is still the local SQLite ledger (every non-fleet box)."""
    ledger = TokenLedger(tmp_path / "s.sqlite", caps=CAPS)
    try:
        r = ledger.reserve(kernel="a", prompt_estimate=10, max_tokens=5, model="m")
        assert ledger.settle(r, Usage(3, 2)) == 5
    finally:
        ledger.close()
    assert (tmp_path / "s.sqlite").exists()


def test_a_fleet_daemon_s_proposer_reserves_in_the_shared_ledger(
    postgres_url: str,
    tmp_path: Path,
) -> None:
    """The daemon passes its PostgreSQL store to open_proposer: the caps are the fleet's,
    while the response cache and attempt log stay in the box's own file."""
    pytest.importorskip("openai")
    from tuned.llm.settings import LlmSettings
    from tuned.llm.setup import open_proposer

    settings = LlmSettings(base_url="http://127.0.0.1:9/v1", model="m", budget=CAPS)
    proposer = open_proposer(settings, store_path=tmp_path / "box.sqlite", ledger_url=postgres_url)
    assert proposer is not None
    other_box = TokenLedger(postgres_url, caps=CAPS)
    try:
        before = sum(r[2] for r in _raw_rows(postgres_url))
        reservation = proposer.ledger.reserve(
            kernel="shared_kernel", prompt_estimate=100, max_tokens=400, model="m"
        )
        assert sum(r[2] for r in _raw_rows(postgres_url)) == before + 500
        spent = {s.scope: s for s in other_box.spend()}
        assert spent["total"].committed == before + 500  # the other box sees the hold
        proposer.ledger.settle(reservation, Usage(prompt_tokens=90, completion_tokens=10))
    finally:
        other_box.close()
    assert not (tmp_path / "box.sqlite").exists() or "llm_ledger" not in _sqlite_tables(
        tmp_path / "box.sqlite"
    )


def _sqlite_tables(path: Path) -> set[str]:
    import sqlite3

    with sqlite3.connect(path) as db:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
