"""The token ledger: caps hold under any interleaving, across crashes, threads and processes.

The request-cycle tests run over every engine (a SQLite file, a real PostgreSQL server: the
``location`` fixture); the state machine and the process races run on SQLite here, on
PostgreSQL in test_ledger_postgres.py.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.store.conftest import ENGINES, PostgresServer
from tuned.store.ledger import (
    DAY_S,
    BudgetCaps,
    BudgetExceeded,
    Prices,
    Reservation,
    TokenLedger,
    Usage,
    estimate_prompt_tokens,
    open_ledger_reader,
    read_totals,
)

CAPS = BudgetCaps(total_tokens=5000, daily_tokens=2500, kernel_tokens=3000)


@pytest.fixture(params=ENGINES)
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a ledger lives, for each engine: a SQLite file or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return tmp_path / "s.sqlite"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()


def check_caps(path: Path, caps: BudgetCaps) -> None:
    """Independent of the ledger's code: recompute every scope from the raw rows."""
    db = sqlite3.connect(path)
    try:
        rows = db.execute(
            "SELECT kernel, created_at, COALESCE(charged, reserved), state FROM llm_ledger"
        ).fetchall()
    finally:
        db.close()
    committed = [(k, float(t), int(v)) for k, t, v, _ in rows]
    assert sum(v for _, _, v in committed) <= caps.total_tokens
    if caps.kernel_tokens is not None:
        for kernel in {k for k, _, _ in committed}:
            assert sum(v for k, _, v in committed if k == kernel) <= caps.kernel_tokens
    if caps.daily_tokens is not None:
        for _, end, _ in committed:  # every window ending at a reservation
            window = sum(v for _, t, v in committed if end - DAY_S < t <= end)
            assert window <= caps.daily_tokens


class LedgerMachine(RuleBasedStateMachine):
    """Random reservations, settlements (within the reservation), releases, clock steps,
    crashes (a ledger dropped with open reservations) and restarts. Each example's store is
    a fresh directory under ``root`` (the test's ``tmp_path``)."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="ledger-", dir=root)
        self.path = Path(self.dir) / "s.sqlite"
        self.now = 1_000_000.0
        self.ledger = self._open()
        self.open: list[Reservation] = []
        self.refused = 0

    def _open(self) -> TokenLedger:
        return TokenLedger(self.path, caps=CAPS, prices=Prices(1.0, 2.0), clock=lambda: self.now)

    @rule(
        kernel=st.sampled_from(["a", "b", "c"]),
        prompt=st.integers(0, 900),
        max_tokens=st.integers(1, 900),
    )
    def reserve(self, kernel: str, prompt: int, max_tokens: int) -> None:
        try:
            r = self.ledger.reserve(
                kernel=kernel, prompt_estimate=prompt, max_tokens=max_tokens, model="m"
            )
        except BudgetExceeded as exc:
            self.refused += 1
            assert exc.requested == prompt + max_tokens and exc.requested > exc.remaining
            return
        self.open.append(r)

    @precondition(lambda self: self.open)
    @rule(data=st.data(), missing=st.booleans())
    def settle(self, data: st.DataObject, missing: bool) -> None:
        r = self.open.pop(data.draw(st.integers(0, len(self.open) - 1)))
        if missing:
            assert self.ledger.settle(r, None) == r.tokens
            return
        p = data.draw(st.integers(0, r.prompt_estimate))
        c = data.draw(st.integers(0, r.max_tokens))
        assert self.ledger.settle(r, Usage(p, c)) == p + c
        assert self.ledger.settle(r, Usage(0, 0)) == p + c  # settling twice changes nothing

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        r = self.open.pop(data.draw(st.integers(0, len(self.open) - 1)))
        assert self.ledger.release(r, note="503") == 0

    @rule(hours=st.floats(0.5, 30.0))
    def time_passes(self, hours: float) -> None:
        self.now += hours * 3600.0

    @rule()
    def crash_and_restart(self) -> None:
        """The process dies with its reservations open; the next one charges them in full."""
        held = {r.id: r.tokens for r in self.open}
        self.ledger.close()
        self.ledger = self._open()
        db = sqlite3.connect(self.path)
        try:
            for rid, tokens in held.items():
                state, charged = db.execute(
                    "SELECT state, charged FROM llm_ledger WHERE id = ?", (rid,)
                ).fetchone()
                assert (state, charged) == ("crashed", tokens)
        finally:
            db.close()
        self.open = []

    @invariant()
    def caps_hold(self) -> None:
        check_caps(self.path, CAPS)

    @invariant()
    def spend_matches_rows(self) -> None:
        by_scope = {s.scope: s for s in self.ledger.spend()}
        db = sqlite3.connect(self.path)
        try:
            totals = read_totals(db)
        finally:
            db.close()
        total = by_scope["total"]
        assert total.held == totals["held"]
        assert total.spent == totals["prompt"] + totals["completion"] + totals["unreported"]
        assert total.remaining == max(0, CAPS.total_tokens - total.committed)

    def teardown(self) -> None:
        self.ledger.close()


def test_ledger_machine(tmp_path: Path) -> None:
    run_state_machine_as_test(
        lambda: LedgerMachine(tmp_path),
        settings=settings(
            max_examples=60,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_refusal_names_the_scope_and_reserves_nothing(location: Path | str) -> None:
    ledger = TokenLedger(location, caps=BudgetCaps(10_000, 4000, 1500))
    r = ledger.reserve(kernel="a", prompt_estimate=500, max_tokens=900, model="m")
    with pytest.raises(BudgetExceeded) as info:
        ledger.reserve(kernel="a", prompt_estimate=50, max_tokens=100, model="m")
    assert info.value.scope == "kernel" and info.value.remaining == 100
    assert "llm.budget.kernel_tokens" in str(info.value)
    ledger.reserve(kernel="b", prompt_estimate=50, max_tokens=100, model="m")  # other kernel
    ledger.settle(r, Usage(300, 200))  # 900 of the 1400 come back
    ledger.reserve(kernel="a", prompt_estimate=400, max_tokens=500, model="m")
    assert ledger.shortfall("a", 101) == "kernel" and ledger.shortfall("c", 101) is None
    assert len(ledger.rows()) == 3


def test_the_daily_window_rolls(location: Path | str) -> None:
    now = [0.0]
    ledger = TokenLedger(
        location, caps=BudgetCaps(100_000, daily_tokens=1000), clock=lambda: now[0]
    )
    r = ledger.reserve(kernel="a", prompt_estimate=0, max_tokens=1000, model="m")
    ledger.settle(r, None)
    now[0] += DAY_S - 1
    with pytest.raises(BudgetExceeded, match="daily"):
        ledger.reserve(kernel="a", prompt_estimate=0, max_tokens=1, model="m")
    now[0] += 2
    ledger.reserve(kernel="a", prompt_estimate=0, max_tokens=1000, model="m")


def test_missing_usage_and_prices(location: Path | str) -> None:
    ledger = TokenLedger(location, caps=CAPS, prices=Prices(2.0, 10.0))
    r = ledger.reserve(kernel="a", prompt_estimate=100, max_tokens=200, model="m")
    assert ledger.settle(r, None) == 300
    r2 = ledger.reserve(kernel="a", prompt_estimate=100, max_tokens=200, model="m")
    assert ledger.settle(r2, Usage(80, 20)) == 100
    rows = {row["id"]: row for row in ledger.rows()}
    assert rows[r.id]["prompt_tokens"] is None and rows[r.id]["charged"] == 300
    assert "usage not reported" in rows[r.id]["note"]
    assert rows[r2.id]["cost_usd"] == pytest.approx((80 * 2.0 + 20 * 10.0) / 1e6)
    db = open_ledger_reader(location)
    assert db is not None
    totals = read_totals(db)
    db.close()
    assert (totals["prompt"], totals["completion"], totals["unreported"]) == (80, 20, 300)


def test_an_open_reservation_of_a_live_process_is_left_alone(location: Path | str) -> None:
    """Two daemons on one state dir: opening the second must not settle the first's."""
    a = TokenLedger(location, caps=CAPS)
    r = a.reserve(kernel="a", prompt_estimate=10, max_tokens=10, model="m")
    b = TokenLedger(location, caps=CAPS)
    assert b.recover() == 0
    assert a.settle(r, Usage(5, 5)) == 10
    # A reservation older than any request can take is charged even if its owner looks alive.
    now = [1e9]
    c = TokenLedger(location, caps=CAPS, clock=lambda: now[0])
    r2 = c.reserve(kernel="a", prompt_estimate=10, max_tokens=10, model="m")
    now[0] += 7 * 3600
    d = TokenLedger(location, caps=CAPS, clock=lambda: now[0])
    assert d.recover() == 0 and {row["id"]: row["state"] for row in d.rows()}[r2.id] == "crashed"


def test_prompt_estimate_is_an_upper_bound_in_bytes() -> None:
    messages = [{"role": "user", "content": "héllo"}]
    assert estimate_prompt_tokens(messages) == len("héllo".encode()) + 16


def _hammer(path: str, seed: int, n: int, out: Any) -> None:
    import random

    rng = random.Random(seed)
    ledger = TokenLedger(Path(path), caps=CAPS)
    done = refused = 0
    for _ in range(n):
        try:
            r = ledger.reserve(
                kernel=rng.choice("ab"),
                prompt_estimate=rng.randint(0, 300),
                max_tokens=rng.randint(1, 300),
                model="m",
            )
        except BudgetExceeded:
            refused += 1
            continue
        done += 1
        choice = rng.random()
        if done % 4 == 1:
            continue  # left open, as a process that dies would
        if choice < 0.6:
            ledger.settle(r, Usage(rng.randint(0, r.prompt_estimate), rng.randint(0, r.max_tokens)))
        else:
            ledger.settle(r, None)
    out.put((done, refused))


def test_two_processes_and_threads_never_overspend(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    TokenLedger(path, caps=CAPS).close()
    ctx = multiprocessing.get_context("spawn")
    out: Any = ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(str(path), s, 60, out)) for s in (1, 2)]
    for p in procs:
        p.start()
    import queue as queue_mod

    tq: queue_mod.Queue[tuple[int, int]] = queue_mod.Queue()
    threads = [threading.Thread(target=_hammer, args=(str(path), s, 60, tq)) for s in (3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    results = [out.get(timeout=10) for _ in procs] + [tq.get(timeout=10) for _ in threads]
    assert sum(r for _, r in results) > 0  # the caps were reached, and refused
    check_caps(path, CAPS)
    # The dead processes' open reservations are charged in full by the next ledger; the
    # threads' (their ledgers are still open in this process) are left alone.
    children = {str(p.pid) for p in procs}

    def open_rows() -> dict[int, str]:
        db = sqlite3.connect(path)
        try:
            rows = db.execute("SELECT id, owner FROM llm_ledger WHERE state = 'open'").fetchall()
        finally:
            db.close()
        return {int(i): str(o).split(":")[1] for i, o in rows}

    before = open_rows()
    TokenLedger(path, caps=CAPS)
    check_caps(path, CAPS)
    after = open_rows()
    assert not children & set(after.values())
    assert {i for i, pid in before.items() if pid not in children} == set(after)


def test_a_killed_process_reservation_is_charged_in_full(tmp_path: Path) -> None:
    """kill -9 with a request in flight: the next ledger charges its whole reservation."""
    import signal
    import subprocess
    import sys

    path = tmp_path / "s.sqlite"
    code = (
        "import sys, time; from pathlib import Path\n"
        "from tuned.store.ledger import BudgetCaps, TokenLedger\n"
        f"led = TokenLedger(Path({str(path)!r}), caps=BudgetCaps(5000))\n"
        "r = led.reserve(kernel='a', prompt_estimate=300, max_tokens=700, model='m')\n"
        "print(r.id, flush=True); time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    rid = int(child.stdout.readline())
    survivor = TokenLedger(path, caps=BudgetCaps(5000))  # the owner is alive: left open
    assert survivor.recover() == 0
    with pytest.raises(BudgetExceeded):
        survivor.reserve(kernel="a", prompt_estimate=0, max_tokens=4001, model="m")
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert survivor.recover() == 1
    row = next(r for r in survivor.rows() if r["id"] == rid)
    assert (row["state"], row["charged"], row["prompt_tokens"]) == ("crashed", 1000, None)
    survivor.reserve(kernel="a", prompt_estimate=0, max_tokens=4000, model="m")  # fits exactly
