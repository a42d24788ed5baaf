"""The store's read models: what the daemon's scheduler and metrics, ``ktuned report`` and
the runtime (:mod:`tuned.runtime`) read, computed in SQL so a scrape stays cheap with a year
of history."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from tuned.outcomes import Provenance
from tuned.store._core import reads_stored
from tuned.store.base import (
    CaseTimingRow,
    ComparisonRow,
    EvaluationTotals,
    KernelProgress,
    TimelineRow,
)
from tuned.store.records import Records

__all__ = ["Reads"]


class Reads(Records):
    """Aggregates over the records (part of :class:`tuned.store.Store`)."""

    @reads_stored
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

    @reads_stored
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
            WITH lastseq AS MATERIALIZED (
                SELECT e.kernel, MAX(e.seq) AS seq
                FROM evaluations e JOIN kernels k
                    ON k.name = e.kernel AND k.generation = e.generation
                {where}
                GROUP BY e.kernel
            ),
            latest AS MATERIALIZED (
                SELECT e.kernel, e.generation, e.fingerprint, e.seq
                FROM evaluations e JOIN lastseq s ON e.seq = s.seq
            ),
            mine AS MATERIALIZED (
                SELECT e.kernel, e.candidate_id, e.seq, e.outcome, e.time_s, e.timing_kind,
                    e.started_at, e.wall_s, c.provenance FROM evaluations e
                JOIN latest l ON e.kernel = l.kernel AND e.generation = l.generation
                    AND e.fingerprint = l.fingerprint
                JOIN candidates c ON c.id = e.candidate_id AND c.generation = e.generation
            ),
            firstseq AS MATERIALIZED (
                SELECT kernel, candidate_id, MIN(seq) AS seq
                FROM mine WHERE outcome = 'ok' AND time_s IS NOT NULL
                GROUP BY kernel, candidate_id
            ),
            firsts AS MATERIALIZED (
                SELECT m.kernel, m.candidate_id, m.provenance, m.time_s, m.timing_kind,
                    m.started_at + m.wall_s AS at, m.seq
                FROM mine m JOIN firstseq f ON m.seq = f.seq
            ),
            base AS (
                SELECT kernel, candidate_id AS base_id, time_s AS baseline_s, at, timing_kind
                FROM firsts
                WHERE provenance = 'original'
            ),
            accseq AS (
                SELECT a.kernel, MAX(a.seq) AS seq
                FROM acceptances a JOIN latest l ON a.kernel = l.kernel
                    AND a.generation = l.generation AND a.fingerprint = l.fingerprint
                WHERE a.status = 'accepted' GROUP BY a.kernel
            ),
            accepted AS (
                SELECT a.kernel, a.candidate_id, a.decided_at
                FROM acceptances a JOIN accseq s ON a.seq = s.seq
            ),
            best AS (
                SELECT accepted.kernel, f.time_s AS best_s, accepted.decided_at AS best_at,
                    accepted.candidate_id AS best_id
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
                COALESCE(base.timing_kind, '') AS timing_kind,
                COALESCE(best.best_id, base.base_id) AS best_id
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
                measured=(
                    None
                    if r["baseline_s"] is None or r["best_id"] is None
                    else self.measured_speedup(
                        r["name"], r["generation"], r["fingerprint"], r["best_id"]
                    )
                ),
            )
            for r in rows
        ]

    @reads_stored
    def evaluation_totals(
        self,
        after_seq: int = 0,
        bucket_bounds: tuple[float, ...] = (),
        *,
        upto_seq: int | None = None,
    ) -> EvaluationTotals:
        """Totals over evaluations recorded after ``after_seq`` (see :class:`EvaluationTotals`),
        up to ``upto_seq`` included (default: the newest).

        Callers keep a running sum and ask only for what is new, so a scrape costs the same
        with a year of history as with a day's.
        """
        upto = upto_seq
        if upto is None:
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
        value = self.dialect.phase_value
        le = ", ".join(
            f"SUM(CASE WHEN {value} <= ? THEN 1 ELSE 0 END) AS le{i}"
            for i in range(len(bucket_bounds))
        )
        phases: dict[str, tuple[int, float, tuple[int, ...]]] = {}
        for r in self._query(
            f"SELECT j.key AS phase, COUNT(*) AS n, SUM({value}) AS total{', ' + le if le else ''}"
            f" FROM evaluations e, {self.dialect.json_phases}"
            " WHERE e.seq > ? AND e.seq <= ? GROUP BY j.key",
            (*bucket_bounds, *window),
        ):
            cumulative = tuple(int(r[f"le{i}"] or 0) for i in range(len(bucket_bounds)))
            phases[r["phase"]] = (int(r["n"]), float(r["total"] or 0.0), cumulative)
        arms = {
            (r["kernel"], r["strategy"]): (int(r["n"]), float(r["reward"] or 0.0))
            for r in self._query(
                """
                SELECT e.kernel, COALESCE(c.strategy, c.provenance) AS strategy,
                    COUNT(*) AS n,
                    SUM(CASE WHEN e.outcome = 'ok' AND e.time_s > 0 AND parent.t > 0
                        AND e.time_s < parent.t
                        THEN 1.0 - e.time_s / parent.t ELSE 0.0 END) AS reward
                FROM evaluations e
                JOIN candidates c ON c.id = e.candidate_id AND c.generation = e.generation
                LEFT JOIN (
                    SELECT pe.candidate_id, pe.generation, pe.fingerprint, pc.provenance,
                        MIN(pe.time_s) AS t
                    FROM evaluations pe JOIN candidates pc
                        ON pc.id = pe.candidate_id AND pc.generation = pe.generation
                    WHERE pe.outcome = 'ok'
                    GROUP BY pe.candidate_id, pe.generation, pe.fingerprint, pc.provenance
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

    @reads_stored
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
    @reads_stored
    def generation_info(self, generation: str) -> tuple[str, dict[str, Any]] | None:
        """A generation's original module (its source hash) and its entry summary (launcher,
        inputs, dtypes, shapes, knobs, baseline knobs), as recorded when it was synced."""
        rows = self._query(
            "SELECT source_hash, spec_json FROM generations WHERE id=?", (generation,)
        )
        if not rows:
            return None
        return str(rows[0]["source_hash"]), dict(json.loads(rows[0]["spec_json"]))

    @reads_stored
    def known_fingerprints(self) -> dict[str, dict[str, str]]:
        """Every fingerprint recorded, by id."""
        return {
            r["id"]: dict(json.loads(r["json"]))
            for r in self._query("SELECT id, json FROM fingerprints ORDER BY first_seen")
        }

    @reads_stored
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

    @reads_stored
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

    @reads_stored
    def comparisons(self, kernel: str, generation: str, fingerprint: str) -> list[ComparisonRow]:
        """Every side-by-side measurement of a generation's candidates on a fingerprint that
        names what it was timed against: evaluations whose metadata records ``incumbent_id``
        (with the incumbent's samples), and the referee's re-measurements (acceptance rows
        ``refereed`` with per-case ``cases``); oldest first within each source."""
        out: list[ComparisonRow] = []
        for r in self._query(
            "SELECT seq, candidate_id, result_json FROM evaluations WHERE kernel=? AND"
            " generation=? AND fingerprint=? AND outcome='ok' ORDER BY seq",
            (kernel, generation, fingerprint),
        ):
            meta = dict(json.loads(r["result_json"]).get("metadata") or {})
            theirs = meta.get("incumbent_samples") or {}
            if not meta.get("incumbent_id") or not theirs:
                continue
            out.append(
                ComparisonRow(
                    candidate_id=str(r["candidate_id"]),
                    incumbent_id=str(meta["incumbent_id"]),
                    samples=_floats(meta.get("samples") or {}),
                    incumbent_samples=_floats(theirs),
                    source="evaluation",
                    seq=int(r["seq"]),
                )
            )
        for r in self._query(
            "SELECT seq, candidate_id, incumbent_id, first_json FROM acceptances WHERE kernel=?"
            " AND generation=? AND fingerprint=? AND status='refereed' ORDER BY seq",
            (kernel, generation, fingerprint),
        ):
            cases = dict(json.loads(r["first_json"]).get("cases") or {})
            out.append(
                ComparisonRow(
                    candidate_id=str(r["candidate_id"]),
                    incumbent_id=str(r["incumbent_id"]),
                    samples=_floats({k: v["candidate"] for k, v in cases.items()}),
                    incumbent_samples=_floats({k: v["incumbent"] for k, v in cases.items()}),
                    source="referee",
                    seq=int(r["seq"]),
                )
            )
        return out

    @reads_stored
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
            WITH accseq AS (
                SELECT a.kernel, a.fingerprint, MAX(a.seq) AS seq
                FROM acceptances a JOIN kernels k
                    ON k.name = a.kernel AND k.generation = a.generation AND k.state = 'active'
                WHERE a.status = 'accepted' AND a.fingerprint IN ({d_marks})
                GROUP BY a.kernel, a.fingerprint
            ),
            acc AS (
                SELECT a.kernel, a.fingerprint, a.candidate_id, a.generation
                FROM acceptances a JOIN accseq s ON a.seq = s.seq
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


def _floats(samples: Any) -> dict[str, list[float]]:
    return {str(k): [float(x) for x in v] for k, v in dict(samples).items()}
