"""The store's tables, as numbered migrations shared by both engines.

A database records the last migration applied (SQLite: ``PRAGMA user_version``; PostgreSQL:
the ``ktuned_schema`` table). Opening a store applies the missing ones in one transaction,
so a database written by an older ktuned keeps every row and gains what is new; one written
by a newer ktuned is refused. Migrations are append-only: never edit a released one.

1. The tables of ktuned 0.1 (kernels, generations, candidates, evaluations, acceptances,
   policy state, profiling runs, profiles, peaks, rooflines).
2. ``claims``: who is evaluating which candidate of a generation on a fingerprint, until
   when (fleet mode, :mod:`tuned.store.claims`).
"""

from __future__ import annotations

from tuned.store.dialect import Dialect

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "statements"]

_V1 = """
CREATE TABLE IF NOT EXISTS kernels (
    name TEXT PRIMARY KEY,
    directory TEXT NOT NULL,
    generation TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    weight {real} NOT NULL,
    updated_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS generations (
    id TEXT PRIMARY KEY,
    kernel TEXT NOT NULL,
    source_hash TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    created_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS sources (
    hash TEXT PRIMARY KEY,
    text TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS fingerprints (
    id TEXT PRIMARY KEY,
    json TEXT NOT NULL,
    first_seen {real} NOT NULL
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
    created_at {real} NOT NULL,
    PRIMARY KEY (id, generation)
);
CREATE TABLE IF NOT EXISTS evaluations (
    seq {serial},
    candidate_id TEXT NOT NULL,
    generation TEXT NOT NULL,
    kernel TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    outcome TEXT NOT NULL,
    time_s {real},
    timing_kind TEXT NOT NULL,
    result_json TEXT NOT NULL,
    started_at {real} NOT NULL,
    wall_s {real} NOT NULL
);
CREATE INDEX IF NOT EXISTS evaluations_by_generation
    ON evaluations (kernel, generation, fingerprint);
CREATE TABLE IF NOT EXISTS invalid_entries (
    directory TEXT PRIMARY KEY,
    problems TEXT NOT NULL,
    seen_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS acceptances (
    seq {serial},
    kernel TEXT NOT NULL,
    generation TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    candidate_id TEXT NOT NULL,
    incumbent_id TEXT NOT NULL,
    status TEXT NOT NULL,
    first_json TEXT NOT NULL,
    second_json TEXT,
    decided_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS policy_state (
    kernel TEXT NOT NULL,
    generation TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    policy TEXT NOT NULL,
    state_json TEXT NOT NULL,
    updated_at {real} NOT NULL,
    PRIMARY KEY (kernel, generation, fingerprint, policy)
);
CREATE TABLE IF NOT EXISTS profiling_runs (
    seq {serial},
    kernel TEXT NOT NULL,
    generation TEXT NOT NULL,
    candidate_id TEXT NOT NULL,
    gpu_model TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT NOT NULL,
    wall_s {real} NOT NULL,
    started_at {real} NOT NULL
);
CREATE INDEX IF NOT EXISTS profiling_runs_by_generation
    ON profiling_runs (kernel, generation, gpu_model);
CREATE TABLE IF NOT EXISTS profiles (
    candidate_id TEXT NOT NULL,
    generation TEXT NOT NULL,
    gpu_model TEXT NOT NULL,
    kernel TEXT NOT NULL,
    profile_json TEXT NOT NULL,
    measured_at {real} NOT NULL,
    PRIMARY KEY (candidate_id, generation, gpu_model)
);
CREATE TABLE IF NOT EXISTS gpu_peaks (
    gpu_model TEXT PRIMARY KEY,
    peaks_json TEXT NOT NULL,
    measured_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS rooflines (
{roofline_seq}    candidate_id TEXT NOT NULL,
    generation TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    kernel TEXT NOT NULL,
    fraction {real} NOT NULL,
    figures_json TEXT NOT NULL,
    PRIMARY KEY (candidate_id, generation, fingerprint)
);
"""

_V2 = """
CREATE TABLE IF NOT EXISTS claims (
    kernel TEXT NOT NULL,
    generation TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    candidate_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    claimed_at {real} NOT NULL,
    expires_at {real} NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    takeovers INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (kernel, generation, fingerprint, candidate_id)
);
CREATE INDEX IF NOT EXISTS claims_open ON claims (kernel, generation, fingerprint, done);
"""

#: Migration ``n`` (1-based) is ``MIGRATIONS[n - 1]``: a template for :meth:`Dialect.ddl`.
MIGRATIONS: tuple[str, ...] = (_V1, _V2)
SCHEMA_VERSION = len(MIGRATIONS)


def statements(dialect: Dialect, after: int) -> list[str]:
    """The statements of the migrations after version ``after``, one string each."""
    out: list[str] = []
    for template in MIGRATIONS[after:]:
        out.extend(s.strip() for s in dialect.ddl(template).split(";") if s.strip())
    return out
