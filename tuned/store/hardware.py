"""Hardware feedback in the store (issue 6): profiling runs, profiles per GPU model, measured
GPU peaks and roofline fractions per fingerprint."""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping
from typing import Any

from tuned.store._core import reads_stored
from tuned.store.records import Records

__all__ = ["Hardware"]


class Hardware(Records):
    """Profiles, peaks and roofline figures (part of :class:`tuned.store.Store`)."""

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
                    "INSERT INTO profiles VALUES (?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (candidate_id, generation, gpu_model) DO UPDATE SET"
                    " kernel=excluded.kernel, profile_json=excluded.profile_json,"
                    " measured_at=excluded.measured_at",
                    (
                        candidate_id,
                        generation,
                        gpu_model,
                        kernel,
                        json.dumps(dict(profile), sort_keys=True),
                        started_at + wall_s,
                    ),
                )

    @reads_stored
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

    @reads_stored
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

    @reads_stored
    def profiling_totals(
        self,
        after_seq: int = 0,
        bucket_bounds: tuple[float, ...] = (),
        *,
        upto_seq: int | None = None,
    ) -> tuple[int, dict[str, int], tuple[int, float, tuple[int, ...]]]:
        """Profiling runs recorded after ``after_seq`` and up to ``upto_seq`` (default: the
        newest): that seq, runs per status, and (count, total seconds, cumulative counts at
        or below each bound) of their durations."""
        upto = upto_seq
        if upto is None:
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
        le = "".join(
            f", SUM(CASE WHEN wall_s <= ? THEN 1 ELSE 0 END) AS le{i}"
            for i in range(len(bucket_bounds))
        )
        r = self._query(
            f"SELECT COUNT(*) AS n, COALESCE(SUM(wall_s), 0.0) AS total{le}"
            " FROM profiling_runs WHERE seq > ? AND seq <= ?",
            (*bucket_bounds, *window),
        )[0]
        below = tuple(int(r[f"le{i}"] or 0) for i in range(len(bucket_bounds)))
        return upto, statuses, (int(r["n"]), float(r["total"]), below)

    def record_peaks(self, gpu_model: str, peaks: Mapping[str, Any]) -> None:
        """Remember a GPU model's measured peaks (``profilers.peaks.Peaks.to_dict()``)."""
        with self._transaction() as db:
            db.execute(
                "INSERT INTO gpu_peaks VALUES (?, ?, ?) ON CONFLICT (gpu_model) DO UPDATE"
                " SET peaks_json=excluded.peaks_json, measured_at=excluded.measured_at",
                (gpu_model, json.dumps(dict(peaks), sort_keys=True), time.time()),
            )

    @reads_stored
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
            # Delete and insert (not an update): the row gets a new rowid/seq, which
            # hardware_token() reports as a change.
            db.execute(
                "DELETE FROM rooflines WHERE candidate_id=? AND generation=? AND fingerprint=?",
                (candidate_id, generation, fingerprint),
            )
            db.execute(
                "INSERT INTO rooflines (candidate_id, generation, fingerprint, kernel, fraction,"
                " figures_json) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    candidate_id,
                    generation,
                    fingerprint,
                    kernel,
                    fraction,
                    json.dumps(dict(figures), sort_keys=True),
                ),
            )

    @reads_stored
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
            f" + {self.dialect.roofline_token} AS t"
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
