"""The few places where SQLite and PostgreSQL SQL differ, and nothing else.

The store's statements are written once, in the subset both engines share: ``?``
placeholders, ``INSERT ... ON CONFLICT (...) DO NOTHING / DO UPDATE`` (SQLite >= 3.24),
``WITH ... AS MATERIALIZED`` (SQLite >= 3.35, PostgreSQL >= 12), ``CASE`` instead of
SQLite's scalar ``MAX(a, b)`` or sums of booleans, and no bare columns beside aggregates.
A :class:`Dialect` supplies what cannot be shared: the placeholder style, column types in
``CREATE`` statements, the JSON table function, the clock and how the schema version is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["POSTGRES", "SQLITE", "Dialect"]


@dataclass(frozen=True)
class Dialect:
    """One engine's spelling of the store's non-portable fragments.

    Schema substitutions: ``{serial}`` (an auto-incrementing 64-bit key), ``{real}`` (a
    double), ``{bigint}`` and ``{roofline_seq}`` (a column that changes whenever a roofline
    row is rewritten, where the engine has no ``rowid``). ``now``: the database clock in
    Unix seconds (leases use it, so boxes with skewed clocks still agree).
    ``json_phases``: ``FROM`` items exposing ``j.key`` and ``j.value`` (a double) for each
    entry of ``e.result_json``'s ``phase_seconds`` object. ``roofline_token``: an expression
    that changes whenever a roofline row is written. ``lock_rows``: appended to a claim
    query, so concurrent claimers skip rows another transaction is deciding on.
    """

    name: str
    serial: str
    real: str
    bigint: str
    now: str
    json_phases: str
    phase_value: str
    roofline_token: str
    roofline_seq: str
    lock_rows: str

    def sql(self, text: str) -> str:
        """``text`` with ``?`` placeholders in this engine's parameter style."""
        if self.name == "sqlite":
            return text
        # psycopg: %s placeholders, literal percent signs doubled. The store's statements
        # never contain a question mark inside a string literal.
        return text.replace("%", "%%").replace("?", "%s")

    def ddl(self, text: str) -> str:
        """A schema template with this engine's column types filled in."""
        return text.format(
            serial=self.serial,
            real=self.real,
            bigint=self.bigint,
            roofline_seq=self.roofline_seq,
        )


SQLITE = Dialect(
    name="sqlite",
    serial="INTEGER PRIMARY KEY AUTOINCREMENT",
    real="REAL",
    bigint="INTEGER",
    now="((julianday('now') - 2440587.5) * 86400.0)",
    json_phases="json_each(e.result_json, '$.phase_seconds') j",
    phase_value="j.value",
    roofline_token="(SELECT COALESCE(MAX(rowid), 0) FROM rooflines)",
    roofline_seq="",
    lock_rows="",  # BEGIN IMMEDIATE already holds the database's one write lock
)

POSTGRES = Dialect(
    name="postgresql",
    serial="BIGSERIAL PRIMARY KEY",
    real="DOUBLE PRECISION",
    bigint="BIGINT",
    now="EXTRACT(EPOCH FROM clock_timestamp())::double precision",
    json_phases=(
        "jsonb_each_text(COALESCE(CAST(e.result_json AS jsonb) -> 'phase_seconds', '{}'::jsonb)) j"
    ),
    phase_value="CAST(j.value AS double precision)",
    roofline_token="(SELECT COALESCE(MAX(seq), 0) FROM rooflines)",
    # SQLite's rowid changes on every replacement; PostgreSQL's rows get a sequence number.
    roofline_seq="    seq BIGSERIAL NOT NULL,\n",
    lock_rows=" FOR UPDATE SKIP LOCKED",
)
