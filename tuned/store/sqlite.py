"""The embedded store: one SQLite database in WAL mode under the state directory.

Every write is one transaction, so a run killed at any point leaves the database as of its
last completed write; ``ktuned status`` can read while a tuning run writes. SQLite errors
(full disk, read-only directory, a file that is not a database) become :class:`StoreError`
with the path and what to do.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuned.errors import StoreError
from tuned.outcomes import Candidate, EvalResult, Provenance, canonical_knobs, source_hash
from tuned.registry.spec import KernelSpec
from tuned.store.base import (
    BestRow,
    EvaluationTotals,
    KernelProgress,
    KernelRow,
    TimelineRow,
    TrialRow,
    fingerprint_id,
)

__all__ = ["SCHEMA_VERSION", "CaseTimingRow", "SqliteStore"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kernels (
    name TEXT PRIMARY KEY,
    directory TEXT NOT NULL,
    generation TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    weight REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS generations (
    id TEXT PRIMARY KEY,
    kernel TEXT NOT NULL,
    source_hash TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS sources (
    hash TEXT PRIMARY KEY,
    text TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS fingerprints (
    id TEXT PRIMARY KEY,
    json TEXT NOT NULL,
    first_seen REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS candidates (
    id TEXT NOT NULL,
    generation TEXT NOT NULL,
    kernel TEXT NOT NULL,
    source_hash TEXT NOT NULL,
    knobs_json TEXT NOT NULL,
    provenance TEXT NOT NULL,
    strategy TEXT,
    parent_id TEXT,
    created_at REAL NOT NULL,
    PRIMARY KEY (id, generation)
);
CREATE TABLE IF NOT EXISTS evaluations (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    candidate_id TEXT NOT NULL,
    generation TEXT NOT NULL,
    kernel TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    outcome TEXT NOT NULL,
    time_s REAL,
    timing_kind TEXT NOT NULL,
    result_json TEXT NOT NULL,
    started_at REAL NOT NULL,
    wall_s REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS evaluations_by_generation
    ON evaluations (kernel, generation, fingerprint);
CREATE TABLE IF NOT EXISTS invalid_entries (
    directory TEXT PRIMARY KEY,
    problems TEXT NOT NULL,
    seen_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS acceptances (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kernel TEXT NOT NULL,
    generation TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    candidate_id TEXT NOT NULL,
    incumbent_id TEXT NOT NULL,
    status TEXT NOT NULL,
    first_json TEXT NOT NULL,
    second_json TEXT,
    decided_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS policy_state (
    kernel TEXT NOT NULL,
    generation TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    policy TEXT NOT NULL,
    state_json TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (kernel, generation, fingerprint, policy)
);
CREATE TABLE IF NOT EXISTS profiling_runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kernel TEXT NOT NULL,
    generation TEXT NOT NULL,
    candidate_id TEXT NOT NULL,
    gpu_model TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT NOT NULL,
    wall_s REAL NOT NULL,
    started_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS profiling_runs_by_generation
    ON profiling_runs (kernel, generation, gpu_model);
CREATE TABLE IF NOT EXISTS profiles (
    candidate_id TEXT NOT NULL,
    generation TEXT NOT NULL,
    gpu_model TEXT NOT NULL,
    kernel TEXT NOT NULL,
    profile_json TEXT NOT NULL,
    measured_at REAL NOT NULL,
    PRIMARY KEY (candidate_id, generation, gpu_model)
);
CREATE TABLE IF NOT EXISTS gpu_peaks (
    gpu_model TEXT PRIMARY KEY,
    peaks_json TEXT NOT NULL,
    measured_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS rooflines (
    candidate_id TEXT NOT NULL,
    generation TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    kernel TEXT NOT NULL,
    fraction REAL NOT NULL,
    figures_json TEXT NOT NULL,
    PRIMARY KEY (candidate_id, generation, fingerprint)
);
"""


class SqliteStore:
    """Store backed by ``path`` (created with its parent directory if missing)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), timeout=30.0, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{path} was written by a newer ktuned (schema {version}, this one knows "
                    f"{SCHEMA_VERSION}); upgrade ktuned or use another --state-dir"
                )
            self._db.executescript(
                f"BEGIN IMMEDIATE; {_SCHEMA} PRAGMA user_version={SCHEMA_VERSION}; COMMIT;"
            )
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(
                f"cannot open the store {path}: {exc}; check the path, its "
                "permissions and free disk space, or choose --state-dir"
            ) from exc

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
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
                f"writing the store {self.path} failed: {exc}; nothing of this "
                "write was saved (check free disk space and permissions)"
            ) from exc

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        try:
            cur = self._db.execute(sql, args)
            cur.row_factory = sqlite3.Row
            return list(cur.fetchall())
        except sqlite3.Error as exc:
            raise StoreError(f"reading the store {self.path} failed: {exc}") from exc

    # -- registry

    def sync_kernel(self, spec: KernelSpec) -> bool:
        """Record ``spec`` as the kernel's current generation. True if the generation is new."""
        now = time.time()
        with self._transaction() as db:
            row = db.execute("SELECT generation FROM kernels WHERE name=?", (spec.name,)).fetchone()
            db.execute(
                "INSERT OR IGNORE INTO sources VALUES (?, ?)",
                (source_hash(spec.module_source), spec.module_source),
            )
            db.execute(
                "INSERT OR IGNORE INTO generations VALUES (?, ?, ?, ?, ?)",
                (
                    spec.generation,
                    spec.name,
                    source_hash(spec.module_source),
                    json.dumps(_spec_summary(spec), sort_keys=True),
                    now,
                ),
            )
            db.execute(
                "INSERT INTO kernels VALUES (?, ?, ?, 'active', '', ?, ?) ON CONFLICT(name) DO "
                "UPDATE SET directory=excluded.directory, generation=excluded.generation, "
                "state='active', reason='', weight=excluded.weight, updated_at=excluded.updated_at",
                (spec.name, str(spec.directory), spec.generation, spec.weight, now),
            )
            db.execute("DELETE FROM invalid_entries WHERE directory=?", (str(spec.directory),))
        return row is None or row[0] != spec.generation

    def record_invalid(self, directory: str, problems: str) -> None:
        """Remember an entry that failed validation; a known kernel there is marked invalid."""
        now = time.time()
        with self._transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO invalid_entries VALUES (?, ?, ?)",
                (directory, problems, now),
            )
            db.execute(
                "UPDATE kernels SET state='invalid', reason=?, updated_at=? WHERE directory=?",
                (problems, now, directory),
            )

    def invalid_entries(self) -> dict[str, str]:
        return {
            r["directory"]: r["problems"]
            for r in self._query("SELECT * FROM invalid_entries ORDER BY directory")
        }

    def kernels(self) -> list[KernelRow]:
        return [
            KernelRow(
                name=r["name"],
                directory=r["directory"],
                generation=r["generation"],
                state=r["state"],
                reason=r["reason"],
                weight=r["weight"],
            )
            for r in self._query("SELECT * FROM kernels ORDER BY name")
        ]

    def kernel(self, name: str) -> KernelRow | None:
        return next((k for k in self.kernels() if k.name == name), None)

    def source(self, hash_: str) -> str | None:
        rows = self._query("SELECT text FROM sources WHERE hash=?", (hash_,))
        return str(rows[0]["text"]) if rows else None

    # -- fingerprints

    def record_fingerprint(self, fingerprint: Mapping[str, str]) -> str:
        fid = fingerprint_id(fingerprint)
        with self._transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO fingerprints VALUES (?, ?, ?)",
                (fid, json.dumps(dict(fingerprint), sort_keys=True), time.time()),
            )
        return fid

    def fingerprint(self, fid: str) -> dict[str, str]:
        rows = self._query("SELECT json FROM fingerprints WHERE id=?", (fid,))
        return dict(json.loads(rows[0]["json"])) if rows else {}

    # -- candidates and evaluations

    def add_candidate(self, candidate: Candidate) -> str:
        """Record a candidate before it is evaluated (idempotent). Returns its id."""
        cid = candidate.id
        with self._transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO sources VALUES (?, ?)",
                (source_hash(candidate.source), candidate.source),
            )
            db.execute(
                "INSERT OR IGNORE INTO candidates VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    cid,
                    candidate.generation,
                    candidate.kernel,
                    source_hash(candidate.source),
                    canonical_knobs(candidate.knobs),
                    candidate.provenance.value,
                    candidate.strategy,
                    candidate.parent_id,
                    time.time(),
                ),
            )
        return cid

    def record_evaluation(
        self,
        candidate: Candidate,
        fingerprint: str,
        result: EvalResult,
        *,
        started_at: float,
        wall_s: float,
    ) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO evaluations (candidate_id, generation, kernel, fingerprint, outcome,"
                " time_s, timing_kind, result_json, started_at, wall_s)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    candidate.id,
                    candidate.generation,
                    candidate.kernel,
                    fingerprint,
                    result.outcome.value,
                    result.time_s,
                    result.timing_kind,
                    json.dumps(result.to_dict(), sort_keys=True),
                    started_at,
                    wall_s,
                ),
            )

    def trials(self, kernel: str, generation: str, fingerprint: str) -> list[TrialRow]:
        """Every evaluated candidate of a generation on a fingerprint (first result each)."""
        rows = self._query(
            "SELECT c.*, e.result_json, e.wall_s FROM evaluations e JOIN candidates c"
            " ON c.id = e.candidate_id AND c.generation = e.generation"
            " WHERE e.kernel=? AND e.generation=? AND e.fingerprint=? ORDER BY e.seq",
            (kernel, generation, fingerprint),
        )
        seen: set[str] = set()
        out = []
        for r in rows:
            if r["id"] in seen:
                continue
            seen.add(r["id"])
            out.append(
                TrialRow(
                    candidate_id=r["id"],
                    knobs=json.loads(r["knobs_json"]),
                    provenance=Provenance(r["provenance"]),
                    strategy=r["strategy"],
                    parent_id=r["parent_id"],
                    source_hash=r["source_hash"],
                    result=EvalResult.from_dict(json.loads(r["result_json"])),
                    wall_s=float(r["wall_s"]),
                )
            )
        return out

    def best(self, kernel: str, fingerprint: str | None = None) -> BestRow | None:
        """The incumbent of the kernel's current generation: the latest *accepted* candidate
        (see :mod:`tuned.acceptance`), else the baseline; on ``fingerprint``, else on the
        fingerprint of the generation's latest evaluation. ``None`` before a good baseline."""
        k = self.kernel(kernel)
        if k is None:
            return None
        if fingerprint is None:
            latest = self._query(
                "SELECT fingerprint FROM evaluations WHERE kernel=? AND generation=?"
                " ORDER BY seq DESC LIMIT 1",
                (kernel, k.generation),
            )
            if not latest:
                return None
            fingerprint = str(latest[0]["fingerprint"])
        rows = self._query(
            "SELECT c.*, e.time_s, e.timing_kind FROM evaluations e JOIN candidates c"
            " ON c.id = e.candidate_id AND c.generation = e.generation"
            " WHERE e.kernel=? AND e.generation=? AND e.fingerprint=? AND e.outcome='ok'"
            " ORDER BY e.seq",
            (kernel, k.generation, fingerprint),
        )
        by_id: dict[str, sqlite3.Row] = {}
        for r in rows:
            by_id.setdefault(r["id"], r)  # first measurement of each candidate
        baseline = next(
            (r for r in by_id.values() if r["provenance"] == Provenance.ORIGINAL.value), None
        )
        if baseline is None:
            return None
        top = by_id.get(self.incumbent(kernel, k.generation, fingerprint) or "", baseline)
        return BestRow(
            kernel=kernel,
            generation=k.generation,
            candidate_id=top["id"],
            knobs=json.loads(top["knobs_json"]),
            source_hash=top["source_hash"],
            provenance=Provenance(top["provenance"]),
            time_s=float(top["time_s"]),
            baseline_time_s=float(baseline["time_s"]),
            fingerprint=fingerprint,
            timing_kind=top["timing_kind"],
        )

    # -- acceptance of new bests

    def record_acceptance(
        self,
        candidate: Candidate,
        fingerprint: str,
        *,
        incumbent_id: str,
        status: str,
        first: Mapping[str, float],
        second: Mapping[str, float] | None,
    ) -> None:
        """Record the decision on a candidate that looked faster than the incumbent."""
        with self._transaction() as db:
            db.execute(
                "INSERT INTO acceptances (kernel, generation, fingerprint, candidate_id,"
                " incumbent_id, status, first_json, second_json, decided_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    candidate.kernel,
                    candidate.generation,
                    fingerprint,
                    candidate.id,
                    incumbent_id,
                    status,
                    json.dumps(dict(first)),
                    None if second is None else json.dumps(dict(second)),
                    time.time(),
                ),
            )

    def incumbent(self, kernel: str, generation: str, fingerprint: str) -> str | None:
        """Id of the latest accepted candidate of a generation on a fingerprint."""
        rows = self._query(
            "SELECT candidate_id FROM acceptances WHERE kernel=? AND generation=?"
            " AND fingerprint=? AND status='accepted' ORDER BY seq DESC LIMIT 1",
            (kernel, generation, fingerprint),
        )
        return str(rows[0]["candidate_id"]) if rows else None

    def acceptances(self, kernel: str) -> list[dict[str, Any]]:
        """Every acceptance decision of a kernel, oldest first (``held`` ones are flagged)."""
        rows = self._query("SELECT * FROM acceptances WHERE kernel=? ORDER BY seq", (kernel,))
        return [
            {
                "generation": r["generation"],
                "fingerprint": r["fingerprint"],
                "candidate_id": r["candidate_id"],
                "incumbent_id": r["incumbent_id"],
                "status": r["status"],
                "first": json.loads(r["first_json"]),
                "second": None if r["second_json"] is None else json.loads(r["second_json"]),
                "decided_at": r["decided_at"],
            }
            for r in rows
        ]

    def candidate(self, candidate_id: str, generation: str) -> Candidate | None:
        rows = self._query(
            "SELECT * FROM candidates WHERE id=? AND generation=?", (candidate_id, generation)
        )
        if not rows:
            return None
        r = rows[0]
        source = self.source(r["source_hash"])
        if source is None:
            return None
        return Candidate(
            kernel=r["kernel"],
            generation=generation,
            source=source,
            knobs=json.loads(r["knobs_json"]),
            provenance=Provenance(r["provenance"]),
            strategy=r["strategy"],
            parent_id=r["parent_id"],
        )

    # -- policy state

    def save_policy_state(
        self, kernel: str, generation: str, fingerprint: str, policy: str, state: Mapping[str, Any]
    ) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO policy_state VALUES (?, ?, ?, ?, ?, ?)",
                (
                    kernel,
                    generation,
                    fingerprint,
                    policy,
                    json.dumps(dict(state), sort_keys=True),
                    time.time(),
                ),
            )

    def policy_state(
        self, kernel: str, generation: str, fingerprint: str, policy: str
    ) -> dict[str, Any] | None:
        rows = self._query(
            "SELECT state_json FROM policy_state WHERE kernel=? AND generation=?"
            " AND fingerprint=? AND policy=?",
            (kernel, generation, fingerprint, policy),
        )
        return dict(json.loads(rows[0]["state_json"])) if rows else None

    # -- the daemon (issue 4): lifecycle of registry entries, read models for metrics/report

    @classmethod
    def open_reader(cls, path: Path) -> SqliteStore:
        """A read-only store on an existing database, usable from any thread (one at a time).

        For readers beside a writing daemon (the metrics collector): it never takes the write
        lock, so a scrape cannot delay an evaluation's record.
        """
        store = cls.__new__(cls)
        store.path = path
        try:
            store._db = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro",
                uri=True,
                timeout=30.0,
                isolation_level=None,
                check_same_thread=False,
            )
            store._db.execute("SELECT COUNT(*) FROM kernels").fetchall()
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(
                f"cannot read the store {path}: {exc}; check that it exists and is readable"
            ) from exc
        return store

    def retire_kernel(self, name: str) -> None:
        """The kernel's entry left the registry: keep its history, stop tuning it."""
        with self._transaction() as db:
            db.execute(
                "UPDATE kernels SET state='retired', reason='removed from the registry',"
                " updated_at=? WHERE name=?",
                (time.time(), name),
            )

    def forget_invalid(self, directory: str) -> None:
        """An invalid entry's directory left the registry."""
        with self._transaction() as db:
            db.execute("DELETE FROM invalid_entries WHERE directory=?", (directory,))

    def last_evaluated_at(self, kernel: str, generation: str, fingerprint: str) -> float | None:
        """When the latest evaluation of a generation on a fingerprint finished (Unix s)."""
        rows = self._query(
            "SELECT MAX(started_at + wall_s) AS t FROM evaluations"
            " WHERE kernel=? AND generation=? AND fingerprint=?",
            (kernel, generation, fingerprint),
        )
        return None if rows[0]["t"] is None else float(rows[0]["t"])

    def checkpoint(self, wait_s: float = 2.0) -> None:
        """Fold the write-ahead log into the database file (before a clean stop).

        Waits at most ``wait_s`` for readers; past that the log is left for the next start.
        """
        try:
            self._db.execute(f"PRAGMA busy_timeout={int(wait_s * 1000)}")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            self._db.execute("PRAGMA busy_timeout=30000")
        except sqlite3.Error as exc:
            raise StoreError(f"checkpointing the store {self.path} failed: {exc}") from exc

    def changes_since(self, eval_seq: int, acceptance_seq: int) -> tuple[set[str], int, int]:
        """Kernels with evaluations or acceptances newer than the given sequence numbers, and
        the newest sequence numbers (pass them next time)."""
        evals = self._query(
            "SELECT kernel, MAX(seq) AS s FROM evaluations WHERE seq > ? GROUP BY kernel",
            (eval_seq,),
        )
        accepted = self._query(
            "SELECT kernel, MAX(seq) AS s FROM acceptances WHERE seq > ? GROUP BY kernel",
            (acceptance_seq,),
        )
        names = {r["kernel"] for r in evals} | {r["kernel"] for r in accepted}
        return (
            names,
            max([eval_seq, *(int(r["s"]) for r in evals)]),
            max([acceptance_seq, *(int(r["s"]) for r in accepted)]),
        )

    def kernel_progress(self, names: Collection[str] | None = None) -> list[KernelProgress]:
        """Every kernel (or those in ``names``) with its current generation's figures on its
        latest fingerprint.

        The best is the incumbent, as :meth:`best` defines it: the latest accepted candidate,
        else the baseline; ``best_at`` is when it was accepted (or the baseline measured).
        """
        if names is not None:
            names = sorted(names)
            if not names:
                return []
            if len(names) > 400:  # SQLite's host-parameter limit; split large requests
                return [
                    p
                    for i in range(0, len(names), 400)
                    for p in self.kernel_progress(names[i : i + 400])
                ]
        marks = ",".join("?" * len(names or ()))
        rows = self._query(
            """
            WITH latest AS MATERIALIZED (
                SELECT e.kernel, e.generation, e.fingerprint, MAX(e.seq) AS seq
                FROM evaluations e JOIN kernels k
                    ON k.name = e.kernel AND k.generation = e.generation
                {where}
                GROUP BY e.kernel
            ),
            mine AS MATERIALIZED (
                SELECT e.kernel, e.candidate_id, e.seq, e.outcome, e.time_s, e.timing_kind,
                    e.started_at, e.wall_s, c.provenance FROM evaluations e
                JOIN latest l ON e.kernel = l.kernel AND e.generation = l.generation
                    AND e.fingerprint = l.fingerprint
                JOIN candidates c ON c.id = e.candidate_id AND c.generation = e.generation
            ),
            firsts AS MATERIALIZED (
                SELECT kernel, candidate_id, provenance, time_s, timing_kind,
                    started_at + wall_s AS at, MIN(seq) AS seq
                FROM mine WHERE outcome = 'ok' AND time_s IS NOT NULL
                GROUP BY kernel, candidate_id
            ),
            base AS (
                SELECT kernel, time_s AS baseline_s, at, timing_kind FROM firsts
                WHERE provenance = 'original'
            ),
            accepted AS (
                SELECT a.kernel, a.candidate_id, a.decided_at, MAX(a.seq) AS seq
                FROM acceptances a JOIN latest l ON a.kernel = l.kernel
                    AND a.generation = l.generation AND a.fingerprint = l.fingerprint
                WHERE a.status = 'accepted' GROUP BY a.kernel
            ),
            best AS (
                SELECT accepted.kernel, f.time_s AS best_s, accepted.decided_at AS best_at
                FROM accepted JOIN firsts f
                    ON f.kernel = accepted.kernel AND f.candidate_id = accepted.candidate_id
            ),
            counts AS (SELECT kernel, COUNT(*) AS n FROM mine GROUP BY kernel)
            SELECT k.name, k.state, k.weight, k.generation, l.fingerprint,
                COALESCE(counts.n, 0) AS n, base.baseline_s,
                CASE WHEN base.baseline_s IS NULL THEN NULL
                    ELSE COALESCE(best.best_s, base.baseline_s) END AS best_s,
                CASE WHEN base.baseline_s IS NULL THEN NULL
                    ELSE COALESCE(best.best_at, base.at) END AS best_at,
                COALESCE(base.timing_kind, '') AS timing_kind
            FROM kernels k
            LEFT JOIN latest l ON l.kernel = k.name
            LEFT JOIN best ON best.kernel = k.name
            LEFT JOIN base ON base.kernel = k.name
            LEFT JOIN counts ON counts.kernel = k.name
            {where_k}
            ORDER BY k.name
            """.format(
                where="" if names is None else f"WHERE e.kernel IN ({marks})",
                where_k="" if names is None else f"WHERE k.name IN ({marks})",
            ),
            () if names is None else (*names, *names),
        )
        return [
            KernelProgress(
                name=r["name"],
                state=r["state"],
                weight=float(r["weight"]),
                generation=r["generation"],
                fingerprint=r["fingerprint"],
                evaluations=int(r["n"]),
                baseline_s=r["baseline_s"],
                best_s=r["best_s"],
                best_at=r["best_at"],
                timing_kind=r["timing_kind"],
            )
            for r in rows
        ]

    def evaluation_totals(
        self, after_seq: int = 0, bucket_bounds: tuple[float, ...] = ()
    ) -> EvaluationTotals:
        """Totals over evaluations recorded after ``after_seq`` (see :class:`EvaluationTotals`).

        Callers keep a running sum and ask only for what is new, so a scrape costs the same
        with a year of history as with a day's.
        """
        upto = self._query("SELECT COALESCE(MAX(seq), 0) AS s FROM evaluations")[0]["s"]
        window = (after_seq, int(upto))
        outcomes = {
            (r["kernel"], r["outcome"]): int(r["n"])
            for r in self._query(
                "SELECT kernel, outcome, COUNT(*) AS n FROM evaluations"
                " WHERE seq > ? AND seq <= ? GROUP BY kernel, outcome",
                window,
            )
        }
        le = ", ".join("SUM(j.value <= ?)" for _ in bucket_bounds)
        phases: dict[str, tuple[int, float, tuple[int, ...]]] = {}
        for r in self._query(
            f"SELECT j.key AS phase, COUNT(*) AS n, SUM(j.value) AS total{', ' + le if le else ''}"
            " FROM evaluations e, json_each(e.result_json, '$.phase_seconds') j"
            " WHERE e.seq > ? AND e.seq <= ? GROUP BY j.key",
            (*bucket_bounds, *window),
        ):
            cumulative = tuple(int(r[3 + i] or 0) for i in range(len(bucket_bounds)))
            phases[r["phase"]] = (int(r["n"]), float(r["total"] or 0.0), cumulative)
        arms = {
            (r["kernel"], r["strategy"]): (int(r["n"]), float(r["reward"] or 0.0))
            for r in self._query(
                """
                SELECT e.kernel, COALESCE(c.strategy, c.provenance) AS strategy,
                    COUNT(*) AS n,
                    SUM(CASE WHEN e.outcome = 'ok' AND e.time_s > 0 AND parent.t > 0
                        THEN MAX(0.0, 1.0 - e.time_s / parent.t) ELSE 0.0 END) AS reward
                FROM evaluations e
                JOIN candidates c ON c.id = e.candidate_id AND c.generation = e.generation
                LEFT JOIN (
                    SELECT pe.candidate_id, pe.generation, pe.fingerprint, pc.provenance,
                        MIN(pe.time_s) AS t
                    FROM evaluations pe JOIN candidates pc
                        ON pc.id = pe.candidate_id AND pc.generation = pe.generation
                    WHERE pe.outcome = 'ok'
                    GROUP BY pe.candidate_id, pe.generation, pe.fingerprint
                ) parent ON parent.generation = e.generation
                    AND parent.fingerprint = e.fingerprint
                    AND ((c.parent_id IS NOT NULL AND parent.candidate_id = c.parent_id)
                        OR (c.parent_id IS NULL AND parent.provenance = 'original'))
                WHERE e.seq > ? AND e.seq <= ? AND c.provenance != 'original'
                GROUP BY e.kernel, COALESCE(c.strategy, c.provenance)
                """,
                window,
            )
        }
        return EvaluationTotals(
            after_seq=after_seq, upto_seq=window[1], outcomes=outcomes, phases=phases, arms=arms
        )

    def timeline(self, *, current_only: bool = True) -> list[TimelineRow]:
        """Every evaluation in order (of the kernels' current generations by default)."""
        current = (
            "JOIN kernels k ON k.name = e.kernel AND k.generation = e.generation"
            if current_only
            else ""
        )
        return [
            TimelineRow(
                kernel=r["kernel"],
                generation=r["generation"],
                fingerprint=r["fingerprint"],
                candidate_id=r["candidate_id"],
                provenance=Provenance(r["provenance"]),
                strategy=r["strategy"] or r["provenance"],
                outcome=r["outcome"],
                time_s=r["time_s"],
                finished_at=float(r["finished_at"]),
            )
            for r in self._query(
                "SELECT e.kernel, e.generation, e.fingerprint, e.candidate_id, c.provenance,"
                " c.strategy,"
                " e.outcome, e.time_s, e.started_at + e.wall_s AS finished_at"
                f" FROM evaluations e {current} JOIN candidates c"
                " ON c.id = e.candidate_id AND c.generation = e.generation ORDER BY e.seq"
            )
        ]

    # -- the runtime (issue 9): generations, fingerprints, per-case timings, stale bests

    def generation_info(self, generation: str) -> tuple[str, dict[str, Any]] | None:
        """A generation's original module (its source hash) and its entry summary (launcher,
        inputs, dtypes, shapes, knobs, baseline knobs), as recorded when it was synced."""
        rows = self._query(
            "SELECT source_hash, spec_json FROM generations WHERE id=?", (generation,)
        )
        if not rows:
            return None
        return str(rows[0]["source_hash"]), dict(json.loads(rows[0]["spec_json"]))

    def known_fingerprints(self) -> dict[str, dict[str, str]]:
        """Every fingerprint recorded, by id."""
        return {
            r["id"]: dict(json.loads(r["json"]))
            for r in self._query("SELECT id, json FROM fingerprints ORDER BY first_seen")
        }

    def evaluated_fingerprints(self, kernel: str, generation: str) -> list[tuple[str, float]]:
        """Fingerprints on which a generation has a successful evaluation, with when the
        latest one finished (Unix s), newest first."""
        return [
            (str(r["fingerprint"]), float(r["t"]))
            for r in self._query(
                "SELECT fingerprint, MAX(started_at + wall_s) AS t FROM evaluations"
                " WHERE kernel=? AND generation=? AND outcome='ok'"
                " GROUP BY fingerprint ORDER BY t DESC",
                (kernel, generation),
            )
        ]

    def case_timings(self, kernel: str, generation: str, fingerprint: str) -> list[CaseTimingRow]:
        """Every successfully evaluated candidate of a generation on a fingerprint, with the
        per-case medians and samples of its first successful measurement and the statuses of
        its acceptance decisions (``held``, ``not_confirmed``, ...), in evaluation order."""
        statuses: dict[str, set[str]] = {}
        for r in self._query(
            "SELECT candidate_id, status FROM acceptances WHERE kernel=? AND generation=?"
            " AND fingerprint=?",
            (kernel, generation, fingerprint),
        ):
            statuses.setdefault(r["candidate_id"], set()).add(r["status"])
        rows = self._query(
            "SELECT c.id, c.knobs_json, c.source_hash, c.provenance, e.result_json"
            " FROM evaluations e JOIN candidates c"
            " ON c.id = e.candidate_id AND c.generation = e.generation"
            " WHERE e.kernel=? AND e.generation=? AND e.fingerprint=? AND e.outcome='ok'"
            " ORDER BY e.seq",
            (kernel, generation, fingerprint),
        )
        out: dict[str, CaseTimingRow] = {}
        for r in rows:
            if r["id"] in out:
                continue  # first measurement of each candidate, as best() takes it
            result = json.loads(r["result_json"])
            samples = dict(result.get("metadata", {}).get("samples") or {})
            out[r["id"]] = CaseTimingRow(
                candidate_id=r["id"],
                knobs=json.loads(r["knobs_json"]),
                source_hash=r["source_hash"],
                provenance=Provenance(r["provenance"]),
                timings={str(k): float(v) for k, v in dict(result.get("timings", {})).items()},
                samples={str(k): [float(x) for x in v] for k, v in samples.items()},
                timing_kind=str(result.get("timing_kind", "")),
                statuses=frozenset(statuses.get(r["id"], ())),
            )
        return list(out.values())

    def stale_bests(
        self, fresh: Collection[str], same_device: Collection[str]
    ) -> dict[str, list[str]]:
        """Accepted bests that a fingerprint change made stale, per kernel: candidate ids.

        ``fresh``: the fingerprint ids equivalent to the current one; ``same_device``: the
        older ones of the same device (the caller decides both: :mod:`tuned.runtime.stale`).
        A best (the latest accepted candidate of an active kernel's current generation on a
        ``same_device`` fingerprint) is stale until it has a successful evaluation on a
        ``fresh`` fingerprint or the kernel has an accepted best there.
        """
        fresh, same_device = sorted(fresh), sorted(same_device)
        if not same_device:
            return {}
        f_marks, d_marks = ",".join("?" * len(fresh)), ",".join("?" * len(same_device))
        rows = self._query(
            f"""
            WITH acc AS (
                SELECT a.kernel, a.fingerprint, a.candidate_id, a.generation, MAX(a.seq) AS seq
                FROM acceptances a JOIN kernels k
                    ON k.name = a.kernel AND k.generation = a.generation AND k.state = 'active'
                WHERE a.status = 'accepted' AND a.fingerprint IN ({d_marks})
                GROUP BY a.kernel, a.fingerprint
            )
            SELECT DISTINCT acc.kernel, acc.candidate_id FROM acc
            WHERE NOT EXISTS (
                SELECT 1 FROM acceptances f WHERE f.kernel = acc.kernel
                    AND f.generation = acc.generation AND f.status = 'accepted'
                    AND f.fingerprint IN ({f_marks}))
            AND NOT EXISTS (
                SELECT 1 FROM evaluations e WHERE e.kernel = acc.kernel
                    AND e.generation = acc.generation AND e.candidate_id = acc.candidate_id
                    AND e.outcome = 'ok' AND e.fingerprint IN ({f_marks}))
            ORDER BY acc.kernel, acc.candidate_id
            """,
            (*same_device, *fresh, *fresh),
        )
        out: dict[str, list[str]] = {}
        for r in rows:
            out.setdefault(r["kernel"], []).append(r["candidate_id"])
        return out

    # -- hardware feedback (issue 6): profiles, profiling runs, GPU peaks, roofline figures

    def record_profiling_run(
        self,
        *,
        kernel: str,
        generation: str,
        candidate_id: str,
        gpu_model: str,
        status: str,
        reason: str,
        wall_s: float,
        started_at: float,
        profile: Mapping[str, Any] | None = None,
    ) -> None:
        """Record one profiling run and, when it produced one, the candidate's profile."""
        with self._transaction() as db:
            db.execute(
                "INSERT INTO profiling_runs (kernel, generation, candidate_id, gpu_model, status,"
                " reason, wall_s, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (kernel, generation, candidate_id, gpu_model, status, reason, wall_s, started_at),
            )
            if profile is not None:
                db.execute(
                    "INSERT OR REPLACE INTO profiles VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        candidate_id,
                        generation,
                        gpu_model,
                        kernel,
                        json.dumps(dict(profile), sort_keys=True),
                        started_at + wall_s,
                    ),
                )

    def profiles(self, kernel: str, generation: str, gpu_model: str) -> dict[str, dict[str, Any]]:
        """Candidate id -> stored profile (``Profile.to_dict()``) of a generation on a model."""
        return {
            r["candidate_id"]: dict(json.loads(r["profile_json"]))
            for r in self._query(
                "SELECT candidate_id, profile_json FROM profiles"
                " WHERE kernel=? AND generation=? AND gpu_model=?",
                (kernel, generation, gpu_model),
            )
        }

    def profiling_attempted(self, kernel: str, generation: str, gpu_model: str) -> set[str]:
        """Candidates with a finished profiling run (profiled, failed or timed out) on a model:
        not profiled again."""
        return {
            r["candidate_id"]
            for r in self._query(
                "SELECT DISTINCT candidate_id FROM profiling_runs WHERE kernel=? AND"
                " generation=? AND gpu_model=? AND status IN ('ok', 'failed', 'timeout')",
                (kernel, generation, gpu_model),
            )
        }

    def profiling_totals(
        self, after_seq: int = 0, bucket_bounds: tuple[float, ...] = ()
    ) -> tuple[int, dict[str, int], tuple[int, float, tuple[int, ...]]]:
        """Profiling runs recorded after ``after_seq``: the newest seq, runs per status, and
        (count, total seconds, cumulative counts at or below each bound) of their durations."""
        upto = int(self._query("SELECT COALESCE(MAX(seq), 0) AS s FROM profiling_runs")[0]["s"])
        window = (after_seq, upto)
        statuses = {
            r["status"]: int(r["n"])
            for r in self._query(
                "SELECT status, COUNT(*) AS n FROM profiling_runs WHERE seq > ? AND seq <= ?"
                " GROUP BY status",
                window,
            )
        }
        le = "".join(", SUM(wall_s <= ?)" for _ in bucket_bounds)
        r = self._query(
            f"SELECT COUNT(*) AS n, COALESCE(SUM(wall_s), 0.0) AS total{le}"
            " FROM profiling_runs WHERE seq > ? AND seq <= ?",
            (*bucket_bounds, *window),
        )[0]
        below = tuple(int(r[2 + i] or 0) for i in range(len(bucket_bounds)))
        return upto, statuses, (int(r["n"]), float(r["total"]), below)

    def record_peaks(self, gpu_model: str, peaks: Mapping[str, Any]) -> None:
        """Remember a GPU model's measured peaks (``profilers.peaks.Peaks.to_dict()``)."""
        with self._transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO gpu_peaks VALUES (?, ?, ?)",
                (gpu_model, json.dumps(dict(peaks), sort_keys=True), time.time()),
            )

    def peaks(self, gpu_model: str) -> dict[str, Any] | None:
        rows = self._query("SELECT peaks_json FROM gpu_peaks WHERE gpu_model=?", (gpu_model,))
        return dict(json.loads(rows[0]["peaks_json"])) if rows else None

    def record_roofline(
        self,
        *,
        kernel: str,
        generation: str,
        fingerprint: str,
        candidate_id: str,
        fraction: float,
        figures: Mapping[str, Any],
    ) -> None:
        """A candidate's roofline fraction on a fingerprint (``figures``: per-case detail)."""
        with self._transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO rooflines VALUES (?, ?, ?, ?, ?, ?)",
                (
                    candidate_id,
                    generation,
                    fingerprint,
                    kernel,
                    fraction,
                    json.dumps(dict(figures), sort_keys=True),
                ),
            )

    def rooflines(self, kernel: str, generation: str, fingerprint: str) -> dict[str, float]:
        """Candidate id -> roofline fraction of a generation on a fingerprint."""
        return {
            r["candidate_id"]: float(r["fraction"])
            for r in self._query(
                "SELECT candidate_id, fraction FROM rooflines"
                " WHERE kernel=? AND generation=? AND fingerprint=?",
                (kernel, generation, fingerprint),
            )
        }

    def hardware_token(self) -> int:
        """Changes whenever a profile or roofline figure is added (readers re-read then)."""
        row = self._query(
            "SELECT (SELECT COALESCE(MAX(seq), 0) FROM profiling_runs)"
            " + (SELECT COALESCE(MAX(rowid), 0) FROM rooflines) AS t"
        )[0]
        return int(row["t"])

    def best_hardware(
        self, names: Collection[str]
    ) -> dict[str, tuple[dict[str, Any] | None, float | None]]:
        """For each kernel in ``names``: the profile and the roofline fraction of its
        incumbent (as :meth:`best` defines it, on its latest fingerprint); kernels without a
        best are absent, unknown figures are ``None``."""
        out: dict[str, tuple[dict[str, Any] | None, float | None]] = {}
        for name in sorted(names):
            best = self.best(name)
            if best is None:
                continue
            model = self.fingerprint(best.fingerprint).get("gpu_model", "")
            profile = self.profiles(name, best.generation, model).get(best.candidate_id)
            fraction = self.rooflines(name, best.generation, best.fingerprint).get(
                best.candidate_id
            )
            out[name] = (profile, fraction)
        return out


@dataclass(frozen=True)
class CaseTimingRow:
    """A successfully evaluated candidate's per-case figures (read model of the runtime).

    ``timings``: per-case median seconds (case label, e.g. ``M=4096xN=4096/float16``);
    ``samples``: the raw samples behind each median; ``statuses``: its acceptance decisions.
    """

    candidate_id: str
    knobs: Mapping[str, Any]
    source_hash: str
    provenance: Provenance
    timings: Mapping[str, float]
    samples: Mapping[str, list[float]]
    timing_kind: str
    statuses: frozenset[str]


def _spec_summary(spec: KernelSpec) -> dict[str, Any]:
    return {
        "module": spec.module,
        "launcher": spec.launcher,
        "inputs": spec.inputs,
        "reference": spec.reference,
        "dtypes": list(spec.dtypes),
        "shapes": [{"dims": dict(s.dims), "perf": s.perf} for s in spec.shapes],
        "knobs": {k: list(v) for k, v in spec.knobs.items()},
        "baseline_knobs": dict(spec.baseline_knobs),
    }
