"""The store's records: registry entries, fingerprints, candidates, evaluations,
acceptance decisions and policy state (engine-neutral SQL, see :mod:`tuned.store.dialect`)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from tuned.outcomes import Candidate, EvalResult, Provenance, canonical_knobs, source_hash
from tuned.registry.spec import KernelSpec
from tuned.store._core import Row, SqlCore, reads_stored
from tuned.store.base import BestRow, KernelRow, TrialRow, fingerprint_id
from tuned.store.speedups import MeasuredSpeedup, measured_speedup

__all__ = ["Records"]


class Records(SqlCore):
    """Writes and direct reads of what tuning produces (part of :class:`tuned.store.Store`)."""

    # -- registry
    def sync_kernel(self, spec: KernelSpec) -> bool:
        """Record ``spec`` as the kernel's current generation. True if the generation is new."""
        now = time.time()
        with self._transaction() as db:
            known = db.rows("SELECT generation FROM kernels WHERE name=?", (spec.name,))
            db.execute(
                "INSERT INTO sources VALUES (?, ?) ON CONFLICT DO NOTHING",
                (source_hash(spec.module_source), spec.module_source),
            )
            db.execute(
                "INSERT INTO generations VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
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
        return not known or known[0]["generation"] != spec.generation

    def set_kernel_state(self, name: str, state: str, reason: str = "") -> None:
        """Mark a tuned kernel ``needs_llm`` (a reference entry waiting for an LLM to write
        its first Triton module, docs/llm.md) or ``active`` again, with ``reason``. Only
        kernels in one of these two states change: an invalid or retired kernel stays so."""
        if state not in ("active", "needs_llm"):
            raise ValueError(f"set_kernel_state: state must be active or needs_llm, not {state!r}")
        # The box's clock, as in every registry write: an offline outbox replays these
        # statements on PostgreSQL (tuned/store/outbox.py), so they hold no SQLite clock.
        with self._transaction() as db:
            db.execute(
                "UPDATE kernels SET state=?, reason=?, updated_at=? WHERE name=?"
                " AND state IN ('active', 'needs_llm')",
                (state, reason, time.time(), name),
            )

    def record_invalid(self, directory: str, problems: str) -> None:
        """Remember an entry that failed validation; a known kernel there is marked invalid."""
        now = time.time()
        with self._transaction() as db:
            db.execute(
                "INSERT INTO invalid_entries VALUES (?, ?, ?) ON CONFLICT (directory) DO UPDATE"
                " SET problems=excluded.problems, seen_at=excluded.seen_at",
                (directory, problems, now),
            )
            db.execute(
                "UPDATE kernels SET state='invalid', reason=?, updated_at=? WHERE directory=?",
                (problems, now, directory),
            )

    @reads_stored
    def invalid_entries(self) -> dict[str, str]:
        return {
            r["directory"]: r["problems"]
            for r in self._query("SELECT * FROM invalid_entries ORDER BY directory")
        }

    @reads_stored
    def kernels(self) -> list[KernelRow]:
        return [_kernel_row(r) for r in self._query("SELECT * FROM kernels ORDER BY name")]

    @reads_stored
    def kernel(self, name: str) -> KernelRow | None:
        rows = self._query("SELECT * FROM kernels WHERE name=?", (name,))
        return _kernel_row(rows[0]) if rows else None

    @reads_stored
    def source(self, hash_: str) -> str | None:
        rows = self._query("SELECT text FROM sources WHERE hash=?", (hash_,))
        return str(rows[0]["text"]) if rows else None

    # -- fingerprints
    def record_fingerprint(self, fingerprint: Mapping[str, str]) -> str:
        fid = fingerprint_id(fingerprint)
        with self._transaction() as db:
            db.execute(
                "INSERT INTO fingerprints VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (fid, json.dumps(dict(fingerprint), sort_keys=True), time.time()),
            )
        return fid

    @reads_stored
    def fingerprint(self, fid: str) -> dict[str, str]:
        rows = self._query("SELECT json FROM fingerprints WHERE id=?", (fid,))
        return dict(json.loads(rows[0]["json"])) if rows else {}

    # -- candidates and evaluations
    def add_candidate(self, candidate: Candidate) -> str:
        """Record a candidate before it is evaluated (idempotent). Returns its id."""
        cid = candidate.id
        with self._transaction() as db:
            db.execute(
                "INSERT INTO sources VALUES (?, ?) ON CONFLICT DO NOTHING",
                (source_hash(candidate.source), candidate.source),
            )
            db.execute(
                "INSERT INTO candidates VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
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
        """Record one measurement of ``candidate``; a claim on it (:mod:`tuned.store.claims`)
        is marked done in the same transaction, so a result and its claim never disagree."""
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
            db.execute(
                "UPDATE claims SET done=1 WHERE kernel=? AND generation=? AND fingerprint=?"
                " AND candidate_id=?",
                (candidate.kernel, candidate.generation, fingerprint, candidate.id),
            )

    @reads_stored
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

    @reads_stored
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
        by_id: dict[str, Row] = {}
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
            time_s=_ok_time(top),
            baseline_time_s=_ok_time(baseline),
            fingerprint=fingerprint,
            timing_kind=top["timing_kind"],
            measured=self.measured_speedup(kernel, k.generation, fingerprint, top["id"]),
        )

    def measured_speedup(
        self, kernel: str, generation: str, fingerprint: str, candidate_id: str
    ) -> MeasuredSpeedup | None:
        """A candidate's speedup over the original as measured side by side: the referee's,
        else its acceptance's (:mod:`tuned.store.speedups`); what every display shows."""
        base = self._query(
            "SELECT id FROM candidates WHERE generation=? AND provenance=? ORDER BY created_at",
            (generation, Provenance.ORIGINAL.value),
        )
        if not base:
            return None
        rows = [
            a
            for a in self.acceptances(kernel)
            if a["generation"] == generation and a["fingerprint"] == fingerprint
        ]
        return measured_speedup(rows, str(base[0]["id"]), candidate_id)

    # -- acceptance of new bests
    def record_acceptance(
        self,
        candidate: Candidate,
        fingerprint: str,
        *,
        incumbent_id: str,
        status: str,
        first: Mapping[str, object],  # the interval, and held_reason when held
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

    @reads_stored
    def incumbent(self, kernel: str, generation: str, fingerprint: str) -> str | None:
        """Id of the latest accepted candidate of a generation on a fingerprint."""
        rows = self._query(
            "SELECT candidate_id FROM acceptances WHERE kernel=? AND generation=?"
            " AND fingerprint=? AND status='accepted' ORDER BY seq DESC LIMIT 1",
            (kernel, generation, fingerprint),
        )
        return str(rows[0]["candidate_id"]) if rows else None

    @reads_stored
    def held_counts(self) -> dict[str, int]:
        """Candidates held for re-verification (``held``: a suspicious speedup or a time
        below the roofline floor), per kernel, in each kernel's current generation."""
        rows = self._query(
            "SELECT a.kernel AS kernel, COUNT(DISTINCT a.candidate_id) AS n FROM acceptances a "
            "JOIN kernels k ON k.name = a.kernel AND k.generation = a.generation "
            "WHERE a.status = 'held' GROUP BY a.kernel"
        )
        return {str(r["kernel"]): int(r["n"]) for r in rows}

    @reads_stored
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

    @reads_stored
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
                "INSERT INTO policy_state VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (kernel, generation, fingerprint, policy) DO UPDATE"
                " SET state_json=excluded.state_json, updated_at=excluded.updated_at",
                (
                    kernel,
                    generation,
                    fingerprint,
                    policy,
                    json.dumps(dict(state), sort_keys=True),
                    time.time(),
                ),
            )

    @reads_stored
    def policy_state(
        self, kernel: str, generation: str, fingerprint: str, policy: str
    ) -> dict[str, Any] | None:
        rows = self._query(
            "SELECT state_json FROM policy_state WHERE kernel=? AND generation=?"
            " AND fingerprint=? AND policy=?",
            (kernel, generation, fingerprint, policy),
        )
        return dict(json.loads(rows[0]["state_json"])) if rows else None

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

    @reads_stored
    def last_evaluated_at(self, kernel: str, generation: str, fingerprint: str) -> float | None:
        """When the latest evaluation of a generation on a fingerprint finished (Unix s)."""
        rows = self._query(
            "SELECT MAX(started_at + wall_s) AS t FROM evaluations"
            " WHERE kernel=? AND generation=? AND fingerprint=?",
            (kernel, generation, fingerprint),
        )
        return None if rows[0]["t"] is None else float(rows[0]["t"])


def _kernel_row(r: Row) -> KernelRow:
    return KernelRow(
        name=r["name"],
        directory=r["directory"],
        generation=r["generation"],
        state=r["state"],
        reason=r["reason"],
        weight=r["weight"],
    )


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


def _ok_time(row: Row) -> float:
    """The stored time of a successful evaluation (``reads_stored`` turns the error into a
    damaged-store error naming the column and candidate)."""
    if row["time_s"] is None:
        raise ValueError(
            f"evaluations.time_s of candidate {str(row['id'])[:40]!r} is NULL, "
            "but its outcome is ok"
        )
    return float(row["time_s"])
