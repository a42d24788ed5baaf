"""Releasing and renewing an owner's claims, on every engine; and a fleet daemon stopped
with SIGTERM hands its open work to the other daemon at once, not after the lease.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.daemon.conftest import wait_for
from tests.store.conftest import StartFleetDaemon, StoreFactory
from tests.store.test_claims import _claim
from tests.store.test_fleet_daemon import _duplicates, _holding, _rows
from tests.store.test_store_contract import FP, cand, record
from tuned.registry import KernelSpec


def test_release_owner_expires_only_that_owners_open_claims(
    open_any: StoreFactory, spec: KernelSpec
) -> None:
    a, b = open_any(), open_any()
    a.sync_kernel(spec)
    fid = a.record_fingerprint(FP)
    mine, done, theirs = cand(spec, 64), cand(spec, 128), cand(spec, 256)
    for c, owner in ((mine, "A"), (done, "A"), (theirs, "B")):
        a.add_candidate(c)
        assert _claim(a, c, fid, owner, lease_s=600.0)
    record(a, done, fid, 0.5)
    assert b.take_over(spec.name, spec.generation, fid, owner="B", lease_s=60) == []

    assert a.release_owner("A") == 1  # the open one; the done one and B's are not A's to give
    [expired] = b.open_claims(spec.name, spec.generation, fid, exclude_owner="B")
    assert expired.candidate_id == mine.id and expired.expires_in < 0
    [taken] = b.take_over(spec.name, spec.generation, fid, owner="B", lease_s=60)
    assert (taken.candidate_id, taken.owner, taken.takeovers) == (mine.id, "B", 1)
    assert taken.payload == {"knobs": {"BLOCK": 64, "num_warps": 4}}  # the same arm's pull
    assert a.claim_counts() == {(spec.name, "live"): 2, (spec.name, "done"): 1}
    assert a.release_owner("A") == 0


def test_renew_extends_only_that_owners_open_claims(
    open_any: StoreFactory, spec: KernelSpec
) -> None:
    a, b = open_any(), open_any()
    a.sync_kernel(spec)
    fid = a.record_fingerprint(FP)
    held, other = cand(spec, 64), cand(spec, 128)
    for c, owner in ((held, "A"), (other, "C")):
        a.add_candidate(c)
        assert _claim(a, c, fid, owner, lease_s=0.3)
    time.sleep(0.15)
    assert a.renew("A", lease_s=600.0) == 1
    time.sleep(0.3)  # past the first lease: C's claim expired, A's was renewed
    [taken] = b.take_over(spec.name, spec.generation, fid, owner="B", lease_s=60, limit=5)
    assert taken.candidate_id == other.id
    [live] = b.open_claims(spec.name, spec.generation, fid, exclude_owner="B")
    assert live.owner == "A" and 500 < live.expires_in <= 600
    assert a.renew("C", lease_s=600.0) == 0  # C's claim is B's now


@pytest.mark.timeout(240)
def test_a_daemon_stopped_with_sigterm_hands_its_claims_over_at_once(
    postgres_url: str, start_fleet: StartFleetDaemon
) -> None:
    """Every evaluation takes seconds (a real kernel that sleeps in the interpreter) and the
    lease is 10 minutes: only the release at shutdown lets the survivor take the work now."""
    a = start_fleet(postgres_url, "a", lease_s=600.0, slow={})
    b = start_fleet(postgres_url, "b", lease_s=600.0, slow={})
    a.wait_ready()
    b.wait_ready()
    # Stop `a` while it holds a claim (between claiming a candidate and recording it).
    orphan: list[str] = []
    deadline = time.monotonic() + 120
    while not orphan and time.monotonic() < deadline:
        os.killpg(a.proc.pid, signal.SIGSTOP)
        orphan = _holding(postgres_url, a.proc.pid)
        if orphan:
            a.proc.send_signal(signal.SIGTERM)  # delivered with SIGCONT: mid-evaluation
        os.killpg(a.proc.pid, signal.SIGCONT)
        time.sleep(0.2)
    assert orphan, "daemon a was never caught holding a claim"
    stopped = time.monotonic()
    assert a.proc.wait(timeout=60) == 0, a.output()
    assert "released 1 open claim(s)" in a.output(), a.output()
    wait_for(
        lambda: (
            _rows(postgres_url, "SELECT COUNT(*) FROM evaluations WHERE candidate_id=?", orphan)
            == [(1,)]
        ),
        60,
        "the released candidate's evaluation by the survivor",
    )
    assert time.monotonic() - stopped < 60  # a tenth of the lease
    [(owner, takeovers, done)] = _rows(
        postgres_url, "SELECT owner, takeovers, done FROM claims WHERE candidate_id=?", orphan
    )
    assert str(owner).split(":")[1] == str(b.proc.pid) and (takeovers, done) == (1, 1)
    b.proc.send_signal(signal.SIGTERM)
    assert b.proc.wait(timeout=60) == 0, b.output()
    assert _duplicates(postgres_url) == []
    # b released whatever it held too: no claim is left for a lease to run out.
    live = "SELECT COUNT(*) FROM claims WHERE done=0 AND expires_at > EXTRACT(EPOCH FROM now())"
    assert _rows(postgres_url, live) == [(0,)]
