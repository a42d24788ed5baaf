"""``/metrics`` counters under concurrent writers: a row that commits after a newer one counts.

On PostgreSQL a row's ``seq`` is taken at its insert, not at its commit. Here one transaction
inserts an evaluation (taking the lower ``seq``) and stays open while another evaluation
(higher ``seq``) is recorded and scraped; then it commits. A collector that moved its
watermark to the newest ``seq`` it saw never counts the late row; the lagged watermark
(:mod:`tuned.metrics.watermarks`) re-reads the tail until it is older than the lag.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from tests.store.conftest import postgres_server, postgres_url  # noqa: F401
from tests.store.test_store_contract import FP, cand, record
from tuned.metrics import StoreCollector
from tuned.metrics.watermarks import LaggedWatermark
from tuned.registry import KernelSpec
from tuned.store import Store, open_store


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def pg_store(postgres_url: str) -> Iterator[Store]:  # noqa: F811
    store = open_store(postgres_url)
    try:
        yield store
    finally:
        store.close()


def _ok_count(registry: CollectorRegistry, kernel: str) -> float:
    value = registry.get_sample_value(
        "ktuned_candidates_evaluated_total", {"kernel": kernel, "outcome": "ok"}
    )
    return 0.0 if value is None else value


def test_an_evaluation_committed_after_a_newer_one_is_counted(
    postgres_url: str,  # noqa: F811
    pg_store: Store,
    spec: KernelSpec,
) -> None:
    import psycopg

    pg_store.sync_kernel(spec)
    fid = pg_store.record_fingerprint(FP)
    record(pg_store, cand(spec, 256, original=True), fid, 1.0, at=100)
    clock = Clock()
    collector = StoreCollector(postgres_url, watermark_lag_s=10.0, clock=clock)
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        assert _ok_count(registry, spec.name) == 1
        # Another box's transaction takes the next seq and stays open...
        late = psycopg.connect(postgres_url)
        columns = [
            str(r[0])
            for r in late.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_name = 'evaluations' AND column_name != 'seq'"
                " ORDER BY ordinal_position"
            ).fetchall()
        ]
        picked = ", ".join("started_at + 1" if c == "started_at" else c for c in columns)
        late.execute(
            f"INSERT INTO evaluations ({', '.join(columns)}) SELECT {picked} FROM evaluations"
            " WHERE seq = (SELECT MIN(seq) FROM evaluations)"
        )
        # ... while this box records a newer evaluation, which scrapes see at once.
        record(pg_store, cand(spec, 64), fid, 0.5, at=200)
        clock.now = 1.0
        assert _ok_count(registry, spec.name) == 2
        clock.now = 2.0
        assert _ok_count(registry, spec.name) == 2
        late.commit()  # the older seq commits last
        late.close()
        clock.now = 3.0
        assert _ok_count(registry, spec.name) == 3
        for t in (30.0, 60.0, 90.0):  # settled past the lag: counted once, kept
            clock.now = t
            assert _ok_count(registry, spec.name) == 3
        record(pg_store, cand(spec, 128), fid, 0.7, at=300)
        clock.now = 120.0
        assert _ok_count(registry, spec.name) == 4
    finally:
        collector.close()


def test_the_watermark_settles_only_what_was_seen_a_lag_ago() -> None:
    clock = Clock()
    mark = LaggedWatermark((0, 0), lag_s=10.0, margin=3, clock=clock)
    assert mark.due() is None
    mark.seen((500, 2))  # the first scrape: history from before the collector
    clock.now = 1.0
    assert mark.due() == (497, 0)  # all but its newest 3 rows, at once
    mark.settle((497, 0))
    mark.seen((505, 4))
    clock.now = 9.0
    assert mark.due() is None  # seen 8 s ago: a lower seq may still commit
    mark.seen((508, 5))
    clock.now = 10.0
    assert mark.due() == (500, 2)
    mark.settle((500, 2))
    clock.now = 25.0
    assert mark.due() == (508, 5)
    mark.settle((508, 5))
    assert mark.due() is None and mark.settled == (508, 5)
    with pytest.raises(ValueError, match="lag_s"):
        LaggedWatermark((0,), lag_s=-1.0)
