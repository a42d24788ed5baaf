"""The attempt log: every LLM proposal, whatever became of it.

A reply that yields a module becomes a candidate and its fate is an evaluation outcome in
the store (``ok``, ``rejected_static``, ...). A request that yields no module never reaches
the evaluations table, so its reason is kept here: ``no_code``, ``truncated``, ``empty``,
``duplicate`` (a module already evaluated), ``budget`` (refused by the ledger, nothing
sent) or ``llm_error`` (the API failed; the kind is in the reason). The prompt's history and
``ktuned budget`` read this log; its rows live in the store's database file.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tuned.store.connections import connect

__all__ = ["ATTEMPT_STATUSES", "AttemptLog", "AttemptRow", "read_attempt_counts"]

#: Every status an attempt can end in (bounded: a metric label).
ATTEMPT_STATUSES = (
    "candidate",
    "no_code",
    "empty",
    "truncated",
    "duplicate",
    "budget",
    "llm_error",
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_attempts (
    id {serial},
    kernel TEXT NOT NULL,
    generation TEXT NOT NULL,
    purpose TEXT NOT NULL,
    strategy TEXT NOT NULL,
    parent_id TEXT,
    status TEXT NOT NULL,
    reason TEXT NOT NULL,
    candidate_id TEXT,
    prompt_key TEXT,
    tokens INTEGER NOT NULL,
    cached INTEGER NOT NULL,
    created_at {real} NOT NULL
);
CREATE INDEX IF NOT EXISTS llm_attempts_by_kernel ON llm_attempts (kernel, generation);
"""


@dataclass(frozen=True)
class AttemptRow:
    """One attempt; ``outcome`` is the candidate's first evaluation outcome (if any) and
    ``time_s`` its time when it ran correctly."""

    id: int
    kernel: str
    strategy: str
    parent_id: str | None
    status: str
    reason: str
    candidate_id: str | None
    tokens: int
    cached: bool
    outcome: str | None = None
    outcome_reason: str = ""
    time_s: float | None = None

    @property
    def final_status(self) -> str:
        """The evaluation outcome when there was a candidate, else the attempt's status."""
        return self.outcome or self.status


class AttemptLog:
    """``llm_attempts`` in the database at ``path`` (its own connection)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = connect(path, _SCHEMA, what="LLM attempt log")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def record(
        self,
        *,
        kernel: str,
        generation: str,
        strategy: str,
        status: str,
        reason: str,
        tokens: int,
        purpose: str = "rewrite",
        parent_id: str | None = None,
        candidate_id: str | None = None,
        prompt_key: str | None = None,
        cached: bool = False,
    ) -> int:
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO llm_attempts (kernel, generation, purpose, strategy, parent_id,"
                " status, reason, candidate_id, prompt_key, tokens, cached, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    kernel,
                    generation,
                    purpose,
                    strategy,
                    parent_id,
                    status,
                    reason,
                    candidate_id,
                    prompt_key,
                    tokens,
                    int(cached),
                    time.time(),
                ),
            )
            assert cur.lastrowid is not None
            return int(cur.lastrowid)

    def recent(
        self, kernel: str, generation: str | None = None, n: int = 6, purpose: str = "rewrite"
    ) -> list[AttemptRow]:
        """The latest ``n`` attempts of ``purpose`` on ``kernel`` (of ``generation`` if
        given), oldest first, each with its candidate's first evaluation outcome."""
        with self._lock:
            args: tuple[object, ...] = (kernel, purpose)
            where = "kernel = ? AND purpose = ?"
            if generation is not None:
                where += " AND generation = ?"
                args = (kernel, purpose, generation)
            rows = self._db.execute(
                "SELECT id, kernel, strategy, parent_id, status, reason, candidate_id, tokens,"
                f" cached, generation FROM llm_attempts WHERE {where} ORDER BY id DESC LIMIT ?",
                (*args, n),
            ).fetchall()
            out = []
            for r in reversed(rows):
                outcome, detail, time_s = self._outcome(r[6], r[9])
                out.append(
                    AttemptRow(
                        int(r[0]), str(r[1]), str(r[2]), r[3], str(r[4]), str(r[5]), r[6],
                        int(r[7]), bool(r[8]), outcome, detail, time_s,
                    )
                )  # fmt: skip
            return out

    def _outcome(
        self, candidate_id: str | None, generation: str
    ) -> tuple[str | None, str, float | None]:
        if candidate_id is None:
            return None, "", None
        try:
            row = self._db.execute(
                "SELECT outcome, time_s, result_json FROM evaluations WHERE candidate_id = ?"
                " AND generation = ? ORDER BY seq LIMIT 1",
                (candidate_id, generation),
            ).fetchone()
        except sqlite3.OperationalError:  # no store tables in this file (tests of the log)
            return None, "", None
        if row is None:
            return None, "", None
        reason = str(json.loads(row[2]).get("reason", "")) if row[2] else ""
        return str(row[0]), reason, None if row[1] is None else float(row[1])

    def counts(self, purpose: str = "rewrite") -> dict[str, int]:
        """Attempts of ``purpose`` (``rewrite`` or ``strategy``) by status (``ktuned budget``)."""
        with self._lock:
            return read_attempt_counts(self._db, purpose)

    def rewrites_since_strategy_request(self, kernel: str) -> list[str | None]:
        """Candidate ids (``None``: the reply gave none) of the rewrite requests made for
        ``kernel`` since its latest strategy request, oldest first; requests the budget
        refused (nothing was asked) are left out."""
        with self._lock:
            rows = self._db.execute(
                "SELECT candidate_id FROM llm_attempts WHERE kernel = ? AND purpose = 'rewrite'"
                " AND status != 'budget' AND id > (SELECT COALESCE(MAX(id), 0) FROM"
                " llm_attempts WHERE kernel = ? AND purpose = 'strategy') ORDER BY id",
                (kernel, kernel),
            ).fetchall()
        return [None if r[0] is None else str(r[0]) for r in rows]

    def any_accepted(self, kernel: str, candidate_ids: Sequence[str | None]) -> bool:
        """Whether one of ``candidate_ids`` was accepted as a new best of ``kernel``."""
        ids = [c for c in candidate_ids if c]
        if not ids:
            return False
        marks = ",".join("?" * len(ids))
        with self._lock:
            try:
                row = self._db.execute(
                    f"SELECT 1 FROM acceptances WHERE kernel = ? AND status = 'accepted'"
                    f" AND candidate_id IN ({marks}) LIMIT 1",
                    (kernel, *ids),
                ).fetchone()
            except sqlite3.OperationalError:  # no store tables in this file
                return False
        return row is not None


def read_attempt_counts(db: sqlite3.Connection, purpose: str = "rewrite") -> dict[str, int]:
    """Attempts of ``purpose`` by status, from any connection to the database (a read-only
    one for ``/metrics``); none when the log was never created."""
    try:
        rows = db.execute(
            "SELECT status, COUNT(*) FROM llm_attempts WHERE purpose = ? GROUP BY status",
            (purpose,),
        ).fetchall()
    except sqlite3.OperationalError:  # no log in this file yet
        return {}
    return {str(s): int(n) for s, n in rows}
