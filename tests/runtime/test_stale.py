"""Stale bests: found, counted in the metrics, re-validated first by the daemon's rules."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.runtime.rows import Rows, example
from tuned.daemon.config import SchedulerConfig
from tuned.daemon.scheduler import Scheduler
from tuned.evaluation.client import EvaluationSettings, WorkerClient
from tuned.metrics import LiveStatus, StoreCollector
from tuned.outcomes import EvalResult, Outcome, Provenance
from tuned.runtime import current_fingerprint, load
from tuned.runtime.stale import stale_bests
from tuned.search import Campaign, TuneSettings
from tuned.search.revalidation import revalidate
from tuned.store.base import TrialRow
from tuned.store.sqlite import SqliteStore

LABEL = "N=4096/float32"


def stale_store(state: Path) -> tuple[Rows, str]:
    """vector_add with an accepted best under an older Triton of this device."""
    old = {**current_fingerprint(), "triton": "0.0.1-old"}
    rows = Rows.open(state, example("vector_add"), old)
    base = rows.evaluate(rows.candidate(original=True), {LABEL: 2e-3})
    best = rows.evaluate(rows.candidate({"BLOCK_SIZE": 1024, "num_warps": 4}), {LABEL: 1e-3})
    rows.accept(best, base)
    return rows, best.id


def _stale_gauge(store_path: Path, live: LiveStatus | None) -> dict[str, float]:
    registry = CollectorRegistry()
    collector = StoreCollector(store_path, live)
    registry.register(collector)
    try:
        text = generate_latest(registry).decode()
    finally:
        collector.close()
    return {
        s.labels["kernel"]: s.value
        for family in text_string_to_metric_families(text)
        if family.name == "ktuned_stale_bests"
        for s in family.samples
    }


def test_a_software_change_makes_bests_stale_until_revalidated(tmp_path: Path) -> None:
    rows, best_id = stale_store(tmp_path)
    current = current_fingerprint()
    live = LiveStatus()
    live.update(fingerprint=current)
    assert stale_bests(rows.store, current) == {"vector_add": [best_id]}
    assert _stale_gauge(rows.store.path, live) == {"vector_add": 1.0}
    # Other devices' bests are not stale here; under the old software nothing is stale.
    assert stale_bests(rows.store, {**current, "gpu_model": "Other", "mode": "gpu"}) == {}
    assert stale_bests(rows.store, rows.store.fingerprint(rows.fingerprint)) == {}

    # The daemon re-validates it: baseline first, then the stale best, through the campaign's
    # usual path (a real worker), under the current fingerprint.
    fid = rows.store.record_fingerprint(current)
    interpreter = current["mode"] == "interpreter"
    with WorkerClient(
        workdir=tmp_path / "worker",
        settings=EvaluationSettings(interpreter=interpreter, interpreter_max_size=1 << 17),
    ) as client:
        campaign = Campaign(
            spec=rows.spec,
            store=rows.store,
            client=client,
            fingerprint=fid,
            settings=TuneSettings(budget=None),
        )
        assert revalidate(campaign, best_id) is None  # no baseline yet: it comes first
        baseline = campaign.step()
        assert baseline is not None and baseline.provenance is Provenance.ORIGINAL
        row = revalidate(campaign, best_id)
    assert row is not None and row.candidate_id == best_id
    assert row.result.outcome is Outcome.OK
    assert stale_bests(rows.store, current) == {}
    assert _stale_gauge(rows.store.path, live) == {"vector_add": 0.0}
    assert load("vector_add", store=tmp_path).status in ("tuned", "original")
    rows.store.close()


def _row(cid: str, *, original: bool = False) -> TrialRow:
    return TrialRow(
        candidate_id=cid,
        knobs={},
        provenance=Provenance.ORIGINAL if original else Provenance.PARAMETRIC,
        strategy=None,
        parent_id=None,
        source_hash="",
        result=EvalResult(Outcome.OK, time_s=1.0),
        wall_s=0.1,
    )


def test_scheduler_revalidates_stale_bests_before_anything_else() -> None:
    s = Scheduler(SchedulerConfig(window=4, converge_after=6, revisit_interval_s=100.0))
    s.track("heavy_new", weight=5.0, space_size=100)
    s.track("light_stale", weight=1.0, space_size=100, stale=["old-best"])
    assert s.pick(0.0) == "light_stale"  # before a heavier kernel without a baseline
    assert s.revalidation("light_stale") is None  # its baseline comes first
    s.observe("light_stale", _row("base", original=True), 0.0)
    assert s.pick(0.0) == "light_stale"
    assert s.revalidation("light_stale") == "old-best"
    s.observe("light_stale", _row("old-best"), 0.0)
    assert s.revalidation("light_stale") is None
    assert s.pick(0.0) == "heavy_new"  # re-validated: back to the usual tiers
    # A stale id already evaluated under the current fingerprint (in the history) is done.
    s.track("again", weight=1.0, space_size=100, stale=["x"], history=[_row("x")])
    assert s.tracks["again"].stale == set()


def test_stale_counts_follow_the_newest_fingerprint_without_a_daemon(tmp_path: Path) -> None:
    rows, _ = stale_store(tmp_path)
    rows.on(current_fingerprint())  # recorded last: the newest
    rows.store.close()
    assert _stale_gauge(tmp_path / "ktuned.sqlite", None) == {"vector_add": 1.0}
    store = SqliteStore(tmp_path / "ktuned.sqlite")
    assert store.stale_bests([], []) == {}
    store.close()
