"""Claims with leases, on every engine: one owner per candidate, expiry and takeover."""

from __future__ import annotations

import threading
import time

import pytest

from tests.store.conftest import StoreFactory
from tests.store.test_store_contract import FP, cand, record
from tuned.registry import KernelSpec
from tuned.store import Store, open_store


def _claim(store: Store, c: object, fid: str, owner: str, lease_s: float = 60.0) -> bool:
    from tuned.outcomes import Candidate

    assert isinstance(c, Candidate)
    return store.claim(c, fid, {"knobs": dict(c.knobs)}, owner=owner, lease_s=lease_s)


def test_one_owner_per_candidate_until_done(open_any: StoreFactory, spec: KernelSpec) -> None:
    a, b = open_any(), open_any()
    a.sync_kernel(spec)
    fid = a.record_fingerprint(FP)
    c = cand(spec, 64)
    a.add_candidate(c)
    assert _claim(a, c, fid, "A") is True
    assert _claim(b, c, fid, "B") is False  # A's lease is live
    assert _claim(a, c, fid, "A") is True  # renewing one's own
    [open_claim] = b.open_claims(spec.name, spec.generation, fid, exclude_owner="B")
    assert (open_claim.owner, open_claim.payload) == ("A", {"knobs": {"BLOCK": 64, "num_warps": 4}})
    assert 0 < open_claim.expires_in <= 60.0
    record(a, c, fid, 0.5)  # the result marks the claim done
    assert b.open_claims(spec.name, spec.generation, fid) == []
    assert _claim(b, c, fid, "B") is False and _claim(a, c, fid, "A") is False
    assert a.claim_counts() == {(spec.name, "done"): 1}


def test_a_candidate_with_a_result_is_never_claimed(
    open_any: StoreFactory, spec: KernelSpec
) -> None:
    store = open_any()
    store.sync_kernel(spec)
    fid = store.record_fingerprint(FP)
    c = cand(spec, 64)
    record(store, c, fid, 0.5)  # evaluated by a process that did not claim
    assert _claim(store, c, fid, "A") is False


def test_expired_leases_are_taken_over_once(open_any: StoreFactory, spec: KernelSpec) -> None:
    a, b, c_ = open_any(), open_any(), open_any()
    a.sync_kernel(spec)
    fid = a.record_fingerprint(FP)
    first, second = cand(spec, 64), cand(spec, 128)
    for c in (first, second):
        a.add_candidate(c)
        assert _claim(a, c, fid, "A", lease_s=0.2)
    assert b.take_over(spec.name, spec.generation, fid, owner="B", lease_s=60) == []
    time.sleep(0.4)  # A died: its leases run out
    assert a.claim_counts() == {(spec.name, "expired"): 2}
    [got] = b.take_over(spec.name, spec.generation, fid, owner="B", lease_s=60)
    assert (got.owner, got.takeovers) == ("B", 1)
    [other] = c_.take_over(spec.name, spec.generation, fid, owner="C", lease_s=60, limit=5)
    assert {got.candidate_id, other.candidate_id} == {first.id, second.id}  # one each
    taken = first if got.candidate_id == first.id else second
    assert _claim(a, taken, fid, "A") is False  # A came back too late
    b.release(taken, fid, owner="B")
    assert _claim(a, taken, fid, "A") is True


@pytest.mark.timeout(120)
def test_concurrent_claimers_never_share_a_candidate(
    open_any: StoreFactory, store_url: str, spec: KernelSpec
) -> None:
    setup = open_any()
    setup.sync_kernel(spec)
    fid = setup.record_fingerprint(FP)
    candidates = [cand(spec, b) for b in range(1, 41)]
    for c in candidates:
        setup.add_candidate(c)
    won: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def claimer(owner: str) -> None:
        store = open_store(store_url)  # one store object per thread
        try:
            won[owner] = [c.id for c in candidates if _claim(store, c, fid, owner)]
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=claimer, args=(f"owner{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    claimed = [cid for ids in won.values() for cid in ids]
    assert sorted(claimed) == sorted(c.id for c in candidates)  # each exactly once
