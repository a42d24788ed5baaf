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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tuned.errors import StoreError
from tuned.outcomes import Candidate, EvalResult, Provenance, canonical_knobs, source_hash
from tuned.registry.spec import KernelSpec
from tuned.store.base import BestRow, KernelRow, TrialRow, fingerprint_id

__all__ = ["SCHEMA_VERSION", "SqliteStore"]

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
CREATE TABLE IF NOT EXISTS policy_state (
    kernel TEXT NOT NULL,
    generation TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    policy TEXT NOT NULL,
    state_json TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (kernel, generation, fingerprint, policy)
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
        """Fastest ``ok`` candidate of the kernel's current generation, with its baseline."""
        k = self.kernel(kernel)
        if k is None:
            return None
        fp_clause, args = ("AND e.fingerprint=?", (fingerprint,)) if fingerprint else ("", ())
        rows = self._query(
            "SELECT c.*, e.time_s, e.fingerprint, e.timing_kind FROM evaluations e JOIN"
            " candidates c ON c.id = e.candidate_id AND c.generation = e.generation"
            f" WHERE e.kernel=? AND e.generation=? AND e.outcome='ok' {fp_clause}"
            " ORDER BY e.time_s ASC",
            (kernel, k.generation, *args),
        )
        if not rows:
            return None
        top = rows[0]
        baseline = next(
            (
                r
                for r in rows
                if r["provenance"] == Provenance.ORIGINAL.value
                and r["fingerprint"] == top["fingerprint"]
            ),
            None,
        )
        return BestRow(
            kernel=kernel,
            generation=k.generation,
            candidate_id=top["id"],
            knobs=json.loads(top["knobs_json"]),
            source_hash=top["source_hash"],
            provenance=Provenance(top["provenance"]),
            time_s=float(top["time_s"]),
            baseline_time_s=float(baseline["time_s"]) if baseline else None,
            fingerprint=top["fingerprint"],
            timing_kind=top["timing_kind"],
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
