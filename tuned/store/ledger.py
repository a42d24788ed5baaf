"""The token ledger: a durable, hard cap on what LLM requests may spend.

Every request first *reserves* its worst case, ``prompt estimate + max_tokens``, and is
refused (:class:`BudgetExceeded`) when that does not fit one of the caps:

* ``total``: every token ever charged in this state directory,
* ``daily``: tokens of the requests made in the last 24 hours (a rolling window),
* ``kernel``: every token charged for one kernel.

A scope's *committed* amount is the sum over its rows of ``charged`` (settled rows) or
``reserved`` (open rows), so an open reservation always counts at its maximum. After the
reply the reservation is *settled* with the usage the API reported (the whole reservation
when usage is missing); a request that provably cost nothing (an HTTP error status) is
*released* at 0. Reservations left open by a process that died are settled at their
maximum when a ledger is next opened (:meth:`TokenLedger.recover`).

Why the caps cannot be overspent: a reservation is checked and inserted in one
``BEGIN IMMEDIATE`` transaction (SQLite's write lock serializes processes and threads; on
a fleet's PostgreSQL store, a transaction that first takes
``LOCK TABLE llm_ledger IN SHARE ROW EXCLUSIVE MODE``, a lock that excludes itself, so
the daemons of every box serialize), and
settling never charges more than was reserved as long as the API reports no more than
``max_tokens`` completion tokens and the prompt estimate is an upper bound (it is:
:func:`estimate_prompt_tokens` counts UTF-8 bytes, and a byte-level BPE token covers at least
one byte). Should a provider still report more, the truth is charged and logged.

The ledger lives in the store's database file (tables ``llm_*``) behind its own connection,
in WAL mode with ``synchronous=FULL``: a committed reservation survives a power cut. Given
a ``postgresql://`` URL instead, it lives in that database (docs/fleet.md): every box
sharing it shares the caps.
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuned.errors import StoreError, TunedError
from tuned.store._core import is_damage
from tuned.store.connections import SharedDb, connect, connect_reader, is_postgres_url

__all__ = [
    "DAY_S",
    "BudgetCaps",
    "BudgetExceeded",
    "LedgerDb",
    "Prices",
    "Reservation",
    "ScopeSpend",
    "TokenLedger",
    "Usage",
    "estimate_prompt_tokens",
    "ledger_schema",
    "open_ledger_reader",
    "read_totals",
]

log = logging.getLogger(__name__)

#: Taken first by every writing transaction on PostgreSQL: it conflicts with itself (so
#: writers run one at a time, as under SQLite's BEGIN IMMEDIATE) but not with readers.
_PG_LOCK = "LOCK TABLE llm_ledger IN SHARE ROW EXCLUSIVE MODE"

DAY_S = 86400.0
#: Tokens a chat template may add around each message (role markers, separators).
MESSAGE_OVERHEAD_TOKENS = 16

_SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_ledger (
    id {serial},
    kernel TEXT NOT NULL,
    purpose TEXT NOT NULL,
    model TEXT NOT NULL,
    owner TEXT NOT NULL,
    state TEXT NOT NULL,
    prompt_estimate INTEGER NOT NULL,
    max_tokens INTEGER NOT NULL,
    reserved INTEGER NOT NULL,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    charged INTEGER,
    cost_usd {real},
    note TEXT NOT NULL DEFAULT '',
    created_at {real} NOT NULL,
    settled_at {real}
);
CREATE INDEX IF NOT EXISTS llm_ledger_by_time ON llm_ledger (created_at);
CREATE INDEX IF NOT EXISTS llm_ledger_by_kernel ON llm_ledger (kernel);
CREATE INDEX IF NOT EXISTS llm_ledger_open ON llm_ledger (state);
"""


def ledger_schema() -> str:
    """The ``CREATE`` statements of the ledger's tables (idempotent), a template the
    store's dialects render (:meth:`~tuned.store.dialect.Dialect.ddl`)."""
    return _SCHEMA


def estimate_prompt_tokens(messages: Sequence[Mapping[str, str]]) -> int:
    """An upper bound of the prompt's tokens: UTF-8 bytes plus a per-message overhead.

    Byte-level BPE tokenizers (GPT, Llama 3, Qwen, Mistral's Tekken) never produce more
    tokens than bytes, so this never under-reserves; the unused part is released on settling.
    """
    return sum(len(str(m.get("content", "")).encode()) + MESSAGE_OVERHEAD_TOKENS for m in messages)


@dataclass(frozen=True)
class BudgetCaps:
    """Token caps; ``None``: no cap for that scope (``total`` always has one)."""

    total_tokens: int
    daily_tokens: int | None = None
    kernel_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("total_tokens", "daily_tokens", "kernel_tokens"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"budget cap {name} must be >= 0, got {value}")

    def limit(self, scope: str) -> int | None:
        return {
            "total": self.total_tokens,
            "daily": self.daily_tokens,
            "kernel": self.kernel_tokens,
        }[scope]


SCOPES = ("total", "daily", "kernel")


@dataclass(frozen=True)
class Prices:
    """Dollars per million prompt and completion tokens (for cost reporting only)."""

    prompt_per_mtok: float = 0.0
    completion_per_mtok: float = 0.0

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (
            prompt_tokens * self.prompt_per_mtok + completion_tokens * self.completion_per_mtok
        ) / 1e6


@dataclass(frozen=True)
class Usage:
    """Tokens the API reported for one request."""

    prompt_tokens: int
    completion_tokens: int

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Reservation:
    """An open reservation: ``tokens = prompt_estimate + max_tokens``."""

    id: int
    kernel: str
    prompt_estimate: int
    max_tokens: int

    @property
    def tokens(self) -> int:
        return self.prompt_estimate + self.max_tokens


@dataclass(frozen=True)
class ScopeSpend:
    """One scope's figures: ``committed = spent + held``; ``remaining`` is ``None`` if uncapped."""

    scope: str
    limit: int | None
    spent: int
    held: int

    @property
    def committed(self) -> int:
        return self.spent + self.held

    @property
    def remaining(self) -> int | None:
        return None if self.limit is None else max(0, self.limit - self.committed)


class BudgetExceeded(TunedError):
    """A reservation does not fit a cap; nothing was reserved."""

    def __init__(self, scope: str, requested: int, remaining: int, limit: int) -> None:
        self.scope = scope
        self.requested = requested
        self.remaining = remaining
        self.limit = limit
        super().__init__(
            f"LLM token budget: the {scope} cap ({limit} tokens) has {remaining} left, this "
            f"request may need {requested}; raise llm.budget.{scope}_tokens in the config or "
            "wait (the daily window rolls)"
        )


#: Owners of the ledgers open in this process: pid reuse (pid 1 in a restarted container)
#: must not make a live ledger's reservations look like a dead process's.
_LIVE_OWNERS: set[str] = set()


def _owner_token() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class TokenLedger:
    """The ledger in the SQLite database at ``path`` (usually the store's file), or in the
    PostgreSQL database of a ``postgresql://`` URL (a fleet's shared store: shared caps).

    Thread-safe (one connection behind a lock) and safe across processes and boxes (every
    write is a ``BEGIN IMMEDIATE`` transaction, on PostgreSQL one holding a table lock).
    ``clock`` is injectable for tests of the daily window.
    Opening a ledger recovers the open reservations of dead processes (:meth:`recover`).
    """

    def __init__(
        self,
        path: Path | str,
        *,
        caps: BudgetCaps,
        prices: Prices | None = None,
        clock: Callable[[], float] = time.time,
        stale_after_s: float = 6 * 3600.0,
    ) -> None:
        self.path = path
        self.caps = caps
        self.prices = prices
        self.clock = clock
        self.stale_after_s = stale_after_s
        self.owner = _owner_token()
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | SharedDb
        if is_postgres_url(path):
            self._db = SharedDb(str(path), _SCHEMA, what="token ledger")
        else:
            self._db = connect(Path(path), _SCHEMA, what="token ledger")
        _LIVE_OWNERS.add(self.owner)
        self.recover()

    def close(self) -> None:
        """Close the connection; reservations still open are charged in full by the next
        ledger opened on this file."""
        _LIVE_OWNERS.discard(self.owner)
        with self._lock:
            self._db.close()

    # -- transactions

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection | SharedDb]:
        if isinstance(self._db, SharedDb):
            with self._lock, self._db.transaction(_PG_LOCK) as shared:
                yield shared
            return
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreError(
                    f"writing the token ledger {self.path} failed: {exc}; nothing of this "
                    "write was saved (check free disk space and permissions)"
                ) from exc

    def _committed(
        self, db: sqlite3.Connection | SharedDb, scope: str, kernel: str, now: float
    ) -> int:
        where, args = self._where(scope, kernel, now)
        row = db.execute(
            f"SELECT COALESCE(SUM(COALESCE(charged, reserved)), 0) FROM llm_ledger {where}", args
        ).fetchone()
        return int(row[0])

    @staticmethod
    def _where(scope: str, kernel: str | None, now: float) -> tuple[str, tuple[Any, ...]]:
        if scope == "daily":
            return "WHERE created_at > ?", (now - DAY_S,)
        if scope == "kernel":
            return "WHERE kernel = ?", (kernel,)
        return "", ()

    # -- the request cycle

    def reserve(
        self,
        *,
        kernel: str,
        prompt_estimate: int,
        max_tokens: int,
        model: str,
        purpose: str = "rewrite",
    ) -> Reservation:
        """Reserve ``prompt_estimate + max_tokens`` for one request, or raise
        :class:`BudgetExceeded` naming the first cap it does not fit (nothing reserved)."""
        if prompt_estimate < 0 or max_tokens < 1:
            raise ValueError("prompt_estimate must be >= 0 and max_tokens >= 1")
        tokens = prompt_estimate + max_tokens
        with self._transaction() as db:
            now = self.clock()
            for scope in SCOPES:
                limit = self.caps.limit(scope)
                if limit is None:
                    continue
                left = limit - self._committed(db, scope, kernel, now)
                if tokens > left:
                    raise BudgetExceeded(scope, tokens, max(0, left), limit)
            insert = (
                "INSERT INTO llm_ledger (kernel, purpose, model, owner, state, prompt_estimate,"
                " max_tokens, reserved, created_at) VALUES (?, ?, ?, ?, 'open', ?, ?, ?, ?)"
            )
            args = (kernel, purpose, model, self.owner, prompt_estimate, max_tokens, tokens, now)
            if isinstance(db, SharedDb):
                rid = int(db.execute(insert + " RETURNING id", args).fetchone()[0])
            else:
                cur = db.execute(insert, args)
                assert cur.lastrowid is not None
                rid = int(cur.lastrowid)
            return Reservation(rid, kernel, prompt_estimate, max_tokens)

    def settle(self, reservation: Reservation, usage: Usage | None, *, note: str = "") -> int:
        """Close ``reservation`` with the reported ``usage`` (``None``: unknown, charged in
        full); returns the tokens charged. Settling twice changes nothing."""
        if usage is None:
            charged = reservation.tokens
            prompt, completion = reservation.prompt_estimate, reservation.max_tokens
            note = note or "usage not reported: charged the whole reservation"
        else:
            charged = usage.total
            prompt, completion = usage.prompt_tokens, usage.completion_tokens
            if charged > reservation.tokens:
                log.warning(
                    "LLM request %d used %d tokens, more than its reservation of %d: the "
                    "prompt estimate was low for this tokenizer; charging what was reported",
                    reservation.id,
                    charged,
                    reservation.tokens,
                )
        cost = None if self.prices is None else self.prices.cost(prompt, completion)
        return self._close(
            reservation.id,
            state="settled",
            prompt=None if usage is None else usage.prompt_tokens,
            completion=None if usage is None else usage.completion_tokens,
            charged=charged,
            cost=cost,
            note=note,
        )

    def release(self, reservation: Reservation, *, note: str) -> int:
        """Close ``reservation`` at 0 tokens: the request provably cost nothing (the server
        answered with an error status before generating)."""
        return self._close(
            reservation.id, state="settled", prompt=0, completion=0, charged=0, cost=0.0, note=note
        )

    def _close(
        self,
        rid: int,
        *,
        state: str,
        prompt: int | None,
        completion: int | None,
        charged: int,
        cost: float | None,
        note: str,
    ) -> int:
        with self._transaction() as db:
            cur = db.execute(
                "UPDATE llm_ledger SET state = ?, prompt_tokens = ?, completion_tokens = ?,"
                " charged = ?, cost_usd = ?, note = ?, settled_at = ?"
                " WHERE id = ? AND state = 'open'",
                (state, prompt, completion, charged, cost, note, self.clock(), rid),
            )
            if cur.rowcount == 0:
                row = db.execute("SELECT charged FROM llm_ledger WHERE id = ?", (rid,)).fetchone()
                if row is None:
                    raise StoreError(f"token ledger: no reservation {rid} in {self.path}")
                return int(row[0] or 0)
        return charged

    def recover(self) -> int:
        """Settle, at their maximum, the open reservations of processes that are gone.

        Gone: same host and the process does not exist, or is this very process but no ledger
        open in it owns the reservation (a restarted container reuses pid 1), or it is older
        than ``stale_after_s`` (longer than any request may take). Returns how many.
        """
        host = socket.gethostname()
        mine = os.getpid()
        dead: list[tuple[int, int, int, int]] = []
        with self._transaction() as db:
            now = self.clock()
            rows = db.execute(
                "SELECT id, owner, reserved, prompt_estimate, max_tokens, created_at"
                " FROM llm_ledger WHERE state = 'open'"
            ).fetchall()
            for rid, owner, reserved, prompt, max_tokens, created in rows:
                o_host, _, rest = str(owner).partition(":")
                pid_text = rest.partition(":")[0]
                pid = int(pid_text) if pid_text.isdigit() else -1
                gone = now - float(created) > self.stale_after_s or (
                    owner not in _LIVE_OWNERS
                    and o_host == host
                    and (pid == mine or not _pid_alive(pid))
                )
                if gone:
                    dead.append((int(rid), int(reserved), int(prompt), int(max_tokens)))
            for rid, reserved, prompt, max_tokens in dead:
                cost = None if self.prices is None else self.prices.cost(prompt, max_tokens)
                db.execute(
                    "UPDATE llm_ledger SET state = 'crashed', charged = ?, cost_usd = ?,"
                    " note = ?, settled_at = ? WHERE id = ?",
                    (
                        reserved,
                        cost,
                        "left open by a process that died: charged the whole reservation",
                        now,
                        rid,
                    ),
                )
        if dead:
            log.warning(
                "token ledger: %d reservation(s) of a stopped process charged at their maximum",
                len(dead),
            )
        return len(dead)

    # -- reading

    def shortfall(self, kernel: str, tokens: int) -> str | None:
        """The first scope a reservation of ``tokens`` for ``kernel`` would not fit now
        (``None``: it fits). A hint for masking; :meth:`reserve` is what decides."""
        for s in self.spend(kernel):
            if s.remaining is not None and tokens > s.remaining:
                return s.scope
        return None

    def spend(self, kernel: str | None = None) -> list[ScopeSpend]:
        """Spend per scope (``kernel`` only when given), committed and held."""
        with self._lock:
            now = self.clock()
            out = []
            for scope in SCOPES:
                if scope == "kernel" and kernel is None:
                    continue
                where, args = self._where(scope, kernel, now)
                row = self._db.execute(
                    "SELECT COALESCE(SUM(CASE WHEN state = 'open' THEN 0 ELSE charged END), 0),"
                    " COALESCE(SUM(CASE WHEN state = 'open' THEN reserved ELSE 0 END), 0)"
                    f" FROM llm_ledger {where}",
                    args,
                ).fetchone()
                out.append(ScopeSpend(scope, self.caps.limit(scope), int(row[0]), int(row[1])))
            return out

    def rows(self, limit: int = 20) -> list[dict[str, Any]]:
        """The latest ``limit`` ledger rows, newest first (for ``ktuned budget``)."""
        with self._lock:
            cur = self._db.execute("SELECT * FROM llm_ledger ORDER BY id DESC LIMIT ?", (limit,))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]


#: What the ledger's readers connect to: the SQLite file's connection (read-only for
#: ``/metrics`` and ``ktuned budget``) or a fleet's PostgreSQL store.
LedgerDb = sqlite3.Connection | SharedDb


def open_ledger_reader(location: Path | str, *, connect_timeout_s: float = 10.0) -> LedgerDb | None:
    """A connection that only reads the ledger at ``location``: a SQLite file (opened
    read-only; ``None`` if it does not exist yet) or a ``postgresql://`` URL (a fleet's shared
    ledger: the figures the caps of every box use). Writes nothing, not even the tables, and
    recovers nothing (that is the next daemon's job), so it is safe beside running daemons.
    Raises :class:`StoreError` when PostgreSQL does not answer."""
    if is_postgres_url(location):
        return SharedDb(
            str(location), None, what="token ledger", connect_timeout_s=connect_timeout_s
        )
    return connect_reader(Path(location))


def read_totals(db: LedgerDb, now: float | None = None) -> dict[str, Any]:
    """Charged tokens by kind and per kernel, committed tokens per scope (charged plus
    held), dollars and open reservations, from any connection to the ledger's database (see
    :func:`open_ledger_reader`). Zeros if the ledger was never created. A PostgreSQL error
    (the server went away) raises :class:`StoreError`; the connection should then be
    reopened."""
    now = time.time() if now is None else now
    missing: tuple[type[BaseException], ...] = (sqlite3.OperationalError,)
    failed: tuple[type[BaseException], ...] = ()
    if isinstance(db, SharedDb):
        import psycopg

        missing, failed = (psycopg.errors.UndefinedTable,), (psycopg.Error,)
    try:
        row = db.execute(
            "SELECT COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0),"
            " COALESCE(SUM(CASE WHEN prompt_tokens IS NULL AND state != 'open'"
            "   THEN charged ELSE 0 END), 0),"
            " COALESCE(SUM(CASE WHEN state = 'open' THEN reserved ELSE 0 END), 0),"
            " COALESCE(SUM(cost_usd), 0.0), COUNT(*),"
            " COALESCE(SUM(COALESCE(charged, reserved)), 0),"
            " COALESCE(SUM(CASE WHEN created_at > ? THEN COALESCE(charged, reserved)"
            "   ELSE 0 END), 0)"
            " FROM llm_ledger",
            (now - DAY_S,),
        ).fetchone()
        kernels = db.execute(
            "SELECT kernel, COALESCE(SUM(CASE WHEN state = 'open' THEN 0 ELSE charged END), 0)"
            " FROM llm_ledger GROUP BY kernel"
        ).fetchall()
    except missing as exc:
        if is_damage(exc):
            raise  # a damaged file, not a ledger never created
        row, kernels = (0, 0, 0, 0, 0.0, 0, 0, 0), []
    except failed as exc:
        assert isinstance(db, SharedDb)
        raise StoreError(
            f"reading the token ledger in {db.location} failed: {exc}; check that PostgreSQL "
            "is reachable"
        ) from exc
    return {
        "prompt": int(row[0]),
        "completion": int(row[1]),
        "unreported": int(row[2]),
        "held": int(row[3]),
        "cost_usd": float(row[4]),
        "requests": int(row[5]),
        "committed": {"total": int(row[6]), "daily": int(row[7])},
        "kernels": {str(k): int(v) for k, v in kernels},
    }
