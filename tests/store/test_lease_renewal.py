"""Lease renewal: a live owner's claims never expire, however long its evaluation takes; a
stopped renewer's claims expire one lease later. Real PostgreSQL, real daemons.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.daemon.conftest import wait_for
from tests.store.conftest import StartFleetDaemon
from tests.store.test_claims import _claim
from tests.store.test_fleet_daemon import _duplicates, _rows
from tests.store.test_store_contract import FP, cand
from tuned.registry import KernelSpec
from tuned.store.claims import LeaseRenewer
from tuned.store.postgres import PostgresStore


def test_a_renewer_keeps_claims_alive_until_stopped(postgres_url: str, spec: KernelSpec) -> None:
    a, b = PostgresStore(postgres_url), PostgresStore(postgres_url)
    a.sync_kernel(spec)
    fid = a.record_fingerprint(FP)
    c = cand(spec, 64)
    a.add_candidate(c)
    assert _claim(a, c, fid, "A", lease_s=0.6)
    renewer = LeaseRenewer(lambda: PostgresStore(postgres_url), owner="A", lease_s=0.6).start()
    try:
        for _ in range(8):  # 2 s: more than three leases
            time.sleep(0.25)
            assert b.take_over(spec.name, spec.generation, fid, owner="B", lease_s=60) == []
        assert renewer.renewals >= 5
    finally:
        renewer.stop()
    time.sleep(0.7)  # one lease after the last renewal
    [taken] = b.take_over(spec.name, spec.generation, fid, owner="B", lease_s=60)
    assert taken.candidate_id == c.id and taken.takeovers == 1
    a.close()
    b.close()


@pytest.mark.timeout(240)
def test_an_evaluation_longer_than_the_lease_is_not_taken_over(
    postgres_url: str, start_fleet: StartFleetDaemon
) -> None:
    """Lease 2 s; evaluations of BLOCK=64 take over 6 s (the kernel sleeps in the worker)
    while the others take about one. Both daemons step all along, and each step first takes
    over any expired claim: without renewal, the other daemon would take every slow
    candidate over and evaluate it a second time."""
    lease = 2.0
    a = start_fleet(postgres_url, "a", lease_s=lease, slow={64: 6.0}, default_s=0.2)
    b = start_fleet(postgres_url, "b", lease_s=lease, slow={64: 6.0}, default_s=0.2)
    a.wait_ready()
    b.wait_ready()

    def evaluations() -> list[tuple[str, float, float, str]]:
        """(candidate, start, wall seconds, evaluating daemon's owner) of every result."""
        rows = _rows(
            postgres_url,
            "SELECT e.candidate_id, e.started_at, e.wall_s, c.owner FROM evaluations e"
            " JOIN claims c ON c.candidate_id = e.candidate_id",
        )
        return [(str(c), float(str(t0)), float(str(w)), str(o)) for c, t0, w, o in rows]

    def overlapped() -> list[tuple[str, float, float, str]]:
        """Evaluations longer than three leases during which, past the first lease, the
        other daemon started a step (each step first takes over expired claims)."""
        rows = evaluations()
        return [
            (cid, t0, wall, owner)
            for cid, t0, wall, owner in rows
            if wall > 3 * lease
            and any(o != owner and t0 + lease < t < t0 + wall for _, t, _, o in rows)
        ]

    wait_for(overlapped, 180, "a long evaluation while the other daemon stepped")
    takeovers = _rows(postgres_url, "SELECT candidate_id FROM claims WHERE takeovers > 0")
    # Stopped one after the other: the second may take over what the first released.
    for proc in (a.proc, b.proc):
        proc.send_signal(signal.SIGTERM)
    for d in (a, b):
        assert d.proc.wait(timeout=60) == 0, d.output()

    assert takeovers == []  # no live daemon's claim ever expired
    assert _duplicates(postgres_url) == []  # nothing was evaluated twice
