"""Work claiming with leases: daemons sharing a store never evaluate one candidate twice.

A *claim* says "owner X is evaluating candidate C of a generation on fingerprint F until
``expires_at``" (one row per ``(kernel, generation, fingerprint, candidate)``; a fingerprint
id names the GPU model with its driver and software, so results are shared exactly where
they are valid). The life of a claim::

    claim() ──> held by X ──record_evaluation()──> done (never claimed again)
                   │
                   └── X dies; expires_at passes ──take_over()──> held by Y (takeovers + 1)

- :meth:`Claims.claim` is atomic: on PostgreSQL an ``INSERT ... ON CONFLICT DO NOTHING``
  followed, when the row exists, by ``SELECT ... FOR UPDATE SKIP LOCKED``; on SQLite the
  database's write lock (``BEGIN IMMEDIATE``) serializes claimers of one box.
- A claim carries its *payload* (the policy's suggestion, as JSON), so whoever takes it over
  can evaluate the candidate and credit the same arm.
- Lease times are the database's clock (:attr:`tuned.store.dialect.Dialect.now`): boxes
  with skewed clocks still agree on what has expired.
- An evaluation recorded by :meth:`tuned.store.records.Records.record_evaluation` marks the
  claim done in the same transaction, so a result and its claim never disagree.
- A live owner renews its open claims (:meth:`Claims.renew`, every ``lease_s / 3`` from a
  :class:`LeaseRenewer` thread), so the lease only has to outlast a few missed renewals, not
  the longest evaluation: a live daemon's claim never expires, a dead one's expires after one
  lease. An owner that stops cleanly expires its open claims at once
  (:meth:`Claims.release_owner`), so other owners take that work over without waiting.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tuned.errors import StoreError
from tuned.outcomes import Candidate
from tuned.store._core import Row, SqlCore

__all__ = ["Claim", "ClaimSettings", "Claims", "LeaseRenewer", "default_owner"]

log = logging.getLogger(__name__)


def default_owner() -> str:
    """``host:pid:random``: unique per process, readable in ``claims.owner``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class ClaimSettings:
    """How a campaign claims work. ``owner``: this process; ``lease_s``: how long a claim
    holds without a result or a renewal (without a :class:`LeaseRenewer`, longer than one
    evaluation may take; with one, a few renewal intervals: the daemon's ``fleet_lease_s``);
    ``poll_s``: how often a campaign with nothing else to do looks again while other owners
    hold the rest of the work, at most ``max_wait_s`` per step (a daemon keeps it short: its
    watchdog and other kernels wait meanwhile)."""

    owner: str = field(default_factory=default_owner)
    lease_s: float = 900.0
    poll_s: float = 1.0
    max_wait_s: float = 900.0

    def __post_init__(self) -> None:
        if self.lease_s <= 0 or self.poll_s <= 0 or self.max_wait_s < 0:
            raise ValueError(
                f"claim lease_s and poll_s must be > 0 and max_wait_s >= 0, got "
                f"{self.lease_s}, {self.poll_s} and {self.max_wait_s}"
            )


@dataclass(frozen=True)
class Claim:
    """A claim row; ``expires_in`` is seconds from now by the database's clock (< 0: expired)."""

    kernel: str
    generation: str
    fingerprint: str
    candidate_id: str
    owner: str
    payload: Mapping[str, Any]
    expires_in: float
    takeovers: int


class Claims(SqlCore):
    """Claims on candidates (part of :class:`tuned.store.Store`)."""

    def claim(
        self,
        candidate: Candidate,
        fingerprint: str,
        payload: Mapping[str, Any],
        *,
        owner: str,
        lease_s: float,
    ) -> bool:
        """Try to take the lease on evaluating ``candidate`` on ``fingerprint``.

        True: it is ``owner``'s for ``lease_s`` seconds (new, taken over after expiry, or
        renewed). False: another owner's lease is live (or being decided right now), or the
        candidate already has a result on this fingerprint.
        """
        now = self.dialect.now
        key = (candidate.kernel, candidate.generation, fingerprint, candidate.id)
        with self._transaction() as db:
            if db.rows(
                "SELECT 1 FROM evaluations WHERE kernel=? AND generation=? AND fingerprint=?"
                " AND candidate_id=? LIMIT 1",
                key,
            ):
                return False
            inserted = db.execute(
                "INSERT INTO claims (kernel, generation, fingerprint, candidate_id, owner,"
                f" payload_json, claimed_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, {now},"
                f" {now} + ?) ON CONFLICT DO NOTHING",
                (*key, owner, json.dumps(dict(payload), sort_keys=True), lease_s),
            )
            if inserted:
                return True
            rows = db.rows(
                f"SELECT owner, done, expires_at < {now} AS expired FROM claims WHERE kernel=?"
                " AND generation=? AND fingerprint=? AND candidate_id=?" + self.dialect.lock_rows,
                key,
            )
            if not rows or rows[0]["done"] or not (rows[0]["owner"] == owner or rows[0]["expired"]):
                return False
            db.execute(
                f"UPDATE claims SET owner=?, expires_at={now} + ?, takeovers=takeovers + ?"
                " WHERE kernel=? AND generation=? AND fingerprint=? AND candidate_id=?",
                (owner, lease_s, int(rows[0]["owner"] != owner), *key),
            )
            return True

    def take_over(
        self,
        kernel: str,
        generation: str,
        fingerprint: str,
        *,
        owner: str,
        lease_s: float,
        limit: int = 1,
    ) -> list[Claim]:
        """Up to ``limit`` expired, unfinished claims of other owners, oldest first, now
        ``owner``'s: work a dead daemon left. Rows another transaction holds are skipped."""
        now = self.dialect.now
        with self._transaction() as db:
            rows = db.rows(
                f"SELECT *, expires_at - {now} AS expires_in FROM claims WHERE kernel=?"
                " AND generation=? AND fingerprint=? AND done=0 AND owner != ?"
                f" AND expires_at < {now} ORDER BY claimed_at, candidate_id LIMIT ?"
                + self.dialect.lock_rows,
                (kernel, generation, fingerprint, owner, limit),
            )
            for r in rows:
                db.execute(
                    f"UPDATE claims SET owner=?, expires_at={now} + ?, takeovers=takeovers + 1"
                    " WHERE kernel=? AND generation=? AND fingerprint=? AND candidate_id=?",
                    (owner, lease_s, kernel, generation, fingerprint, r["candidate_id"]),
                )
        return [
            _claim(r, owner=owner, expires_in=lease_s, takeovers=int(r["takeovers"]) + 1)
            for r in rows
        ]

    def release(self, candidate: Candidate, fingerprint: str, *, owner: str) -> None:
        """Give up ``owner``'s unfinished claim (a proposal dropped before evaluation)."""
        with self._transaction() as db:
            db.execute(
                "DELETE FROM claims WHERE kernel=? AND generation=? AND fingerprint=?"
                " AND candidate_id=? AND owner=? AND done=0",
                (candidate.kernel, candidate.generation, fingerprint, candidate.id, owner),
            )

    def release_owner(self, owner: str) -> int:
        """Expire every unfinished claim of ``owner`` now (a clean stop): other owners take
        them over at their next step (:meth:`take_over`, crediting the same arm) instead of
        waiting for the lease. The number of claims expired."""
        now = self.dialect.now
        with self._transaction() as db:
            return db.execute(
                f"UPDATE claims SET expires_at={now} - 1 WHERE owner=? AND done=0", (owner,)
            )

    def renew(self, owner: str, *, lease_s: float) -> int:
        """Extend every unfinished claim of ``owner`` to ``lease_s`` seconds from now (the
        database's clock); the number renewed. A claim another owner took over after it
        expired is that owner's now and is not touched."""
        now = self.dialect.now
        with self._transaction() as db:
            return db.execute(
                f"UPDATE claims SET expires_at={now} + ? WHERE owner=? AND done=0",
                (lease_s, owner),
            )

    def open_claims(
        self, kernel: str, generation: str, fingerprint: str, *, exclude_owner: str = ""
    ) -> list[Claim]:
        """Unfinished claims (live or expired) of other owners than ``exclude_owner``."""
        rows = self._query(
            f"SELECT *, expires_at - {self.dialect.now} AS expires_in FROM claims"
            " WHERE kernel=? AND generation=? AND fingerprint=? AND done=0 AND owner != ?"
            " ORDER BY claimed_at, candidate_id",
            (kernel, generation, fingerprint, exclude_owner),
        )
        return [_claim(r) for r in rows]

    def claim_counts(self) -> dict[tuple[str, str], int]:
        """Claims per (kernel, state): ``live``, ``expired`` (awaiting takeover), ``done``."""
        rows = self._query(
            "SELECT kernel, CASE WHEN done=1 THEN 'done'"
            f" WHEN expires_at < {self.dialect.now} THEN 'expired' ELSE 'live' END AS state,"
            " COUNT(*) AS n FROM claims GROUP BY kernel, CASE WHEN done=1 THEN 'done'"
            f" WHEN expires_at < {self.dialect.now} THEN 'expired' ELSE 'live' END"
        )
        return {(str(r["kernel"]), str(r["state"])): int(r["n"]) for r in rows}


class LeaseRenewer:
    """A thread that keeps ``owner``'s claims alive: every ``interval_s`` (default
    ``lease_s / 3``) it renews them (:meth:`Claims.renew`) through a store of its own that
    ``open_store`` opens in the thread (a store object is used by one thread only).

    A renewal that fails (the database is unreachable: the claims are the outbox's meanwhile)
    is logged once and tried again at the next interval. :meth:`stop` ends the thread and
    closes its store; the owner's claims then expire one lease later unless they are
    released.
    """

    def __init__(
        self,
        open_store: Callable[[], Claims],
        *,
        owner: str,
        lease_s: float,
        interval_s: float | None = None,
    ) -> None:
        if lease_s <= 0:
            raise ValueError(f"LeaseRenewer: lease_s must be > 0, got {lease_s}")
        self.owner = owner
        self.lease_s = lease_s
        self.interval_s = lease_s / 3 if interval_s is None else interval_s
        self.renewals = 0
        self._open = open_store
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ktuned-lease-renewer", daemon=True)

    def start(self) -> LeaseRenewer:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """End the thread (at most ``timeout_s``: a renewal in flight finishes first)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        store: Claims | None = None
        failing = False
        try:
            while not self._stopping.wait(self.interval_s):
                try:
                    if store is None:
                        store = self._open()
                    self.renewals += store.renew(self.owner, lease_s=self.lease_s)
                except StoreError as exc:
                    if not failing:
                        log.warning(
                            "cannot renew the claims of %s (%s); retrying every %.0f s",
                            self.owner,
                            exc,
                            self.interval_s,
                        )
                    failing = True
                    continue
                if failing:
                    log.info("renewing the claims of %s again", self.owner)
                failing = False
        finally:
            if store is not None:
                store.close()


def _claim(
    r: Row,
    *,
    owner: str | None = None,
    expires_in: float | None = None,
    takeovers: int | None = None,
) -> Claim:
    return Claim(
        kernel=r["kernel"],
        generation=r["generation"],
        fingerprint=r["fingerprint"],
        candidate_id=r["candidate_id"],
        owner=owner if owner is not None else r["owner"],
        payload=dict(json.loads(r["payload_json"])),
        expires_in=expires_in if expires_in is not None else float(r["expires_in"]),
        takeovers=takeovers if takeovers is not None else int(r["takeovers"]),
    )
