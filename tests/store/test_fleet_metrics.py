"""The LLM figures of ``/metrics`` and ``ktuned budget`` in a fleet: the shared ledger's.

Two OS processes stand for two boxes: each sends chat requests through the real client to a
loopback OpenAI-compatible server, reserving and settling in one ledger on a real PostgreSQL
store; one leaves a reservation open. ``/metrics`` of a collector on that store, served over
HTTP, must then report exactly what the ledger's rows hold, and the remaining budget the caps
of every box use (:meth:`TokenLedger.spend`). Before the collector read the shared ledger, it
read the box's own SQLite file and reported zeros.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tests.llm.chat_server import ChatServer, Step, reply
from tests.store.conftest import postgres_server, postgres_url  # noqa: F401
from tuned.metrics import LiveStatus, MetricsServer, StoreCollector
from tuned.store.ledger import BudgetCaps, TokenLedger

ROOT = Path(__file__).resolve().parents[2]
CAPS = BudgetCaps(total_tokens=1_000_000, daily_tokens=500_000, kernel_tokens=400_000)
REQUESTS = 4

pytestmark = pytest.mark.timeout(180)


def _box(url: str, base_url: str, box: int, state: str, leave_open: bool) -> None:
    """One box's daemon: ``REQUESTS`` chat requests through the real client, charged to the
    shared ledger; its response cache in its own state directory."""
    from tuned.llm.chat import ChatClient
    from tuned.llm.settings import LlmSettings
    from tuned.store.llm_cache import ResponseCache

    settings = LlmSettings(base_url=base_url, model="m", max_tokens=300, retries=0)
    ledger = TokenLedger(url, caps=CAPS)
    cache = ResponseCache(Path(state) / "ktuned-llm.sqlite")
    client = ChatClient(settings=settings, ledger=ledger, cache=cache, api_key="sk-test")
    for i in range(REQUESTS):
        messages = [{"role": "user", "content": f"box {box} request {i}"}]
        client.complete(messages, kernel=f"kernel_{i % 2}")
    if leave_open:  # a request in flight when the box died: held at its maximum
        ledger.reserve(kernel="kernel_0", prompt_estimate=70, max_tokens=30, model="m")
    cache.close()
    os._exit(0)  # no clean close: the open reservation stays open


def _usage(body: dict[str, Any]) -> Step:
    """Usage by request: prompt 100 + box, completion 10 x request; one without usage."""
    text = str(body["messages"][-1]["content"])
    box, i = int(text.split()[1]), int(text.split()[3])
    if box == 2 and i == 3:
        return reply("no usage reported", usage=None)
    return reply("ok", usage=(100 + box, 10 * (i + 1)))


def _raw(url: str) -> dict[str, Any]:
    """The ledger's figures recomputed from its rows, independently of ktuned's code."""
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT kernel, state, reserved, prompt_tokens, completion_tokens, charged"
            " FROM llm_ledger"
        ).fetchall()
    settled = [r for r in rows if r[1] != "open"]
    kernels: dict[str, int] = {}
    for kernel, _, _, _, _, charged in settled:
        kernels[kernel] = kernels.get(kernel, 0) + int(charged)
    return {
        "prompt": sum(int(r[3]) for r in settled if r[3] is not None),
        "completion": sum(int(r[4]) for r in settled if r[4] is not None),
        "unreported": sum(int(r[5]) for r in settled if r[3] is None),
        "held": sum(int(r[2]) for r in rows if r[1] == "open"),
        "committed": sum(int(r[5]) if r[1] != "open" else int(r[2]) for r in rows),
        "kernels": kernels,
        "rows": len(rows),
    }


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def fleet_metrics(postgres_url: str, tmp_path: Path) -> Iterator[tuple[int, LiveStatus]]:  # noqa: F811
    """``/metrics`` of a collector on the fleet's store, as the daemon builds it."""
    live = LiveStatus()
    collector = StoreCollector(
        postgres_url, live, llm_budget=CAPS, llm_path=tmp_path / "box" / "ktuned-llm.sqlite"
    )
    registry = CollectorRegistry()
    registry.register(collector)
    server = MetricsServer(host="127.0.0.1", port=0, registry=registry)
    server.start()
    try:
        yield server.port, live
    finally:
        server.stop()
        collector.close()


def test_fleet_metrics_report_the_shared_ledger_of_every_box(
    postgres_url: str,  # noqa: F811
    tmp_path: Path,
    fleet_metrics: tuple[int, LiveStatus],
) -> None:
    port, _ = fleet_metrics
    before = _scrape(port)  # no ledger table yet: zeros, not an error
    assert before[("ktuned_llm_tokens_total", (("kind", "prompt"),))] == 0
    TokenLedger(postgres_url, caps=CAPS).close()  # creates the llm_* tables
    ctx = multiprocessing.get_context("spawn")
    with ChatServer(default=_usage) as srv:
        procs = [
            ctx.Process(
                target=_box,
                args=(postgres_url, srv.base_url, box, str(tmp_path / f"box{box}"), box == 1),
            )
            for box in (1, 2)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
            assert p.exitcode == 0
        assert len(srv.requests) == 2 * REQUESTS
    raw = _raw(postgres_url)
    assert raw["rows"] == 2 * REQUESTS + 1 and raw["held"] == 100 and raw["unreported"] > 0
    m = _scrape(port)
    for kind in ("prompt", "completion", "unreported"):
        assert m[("ktuned_llm_tokens_total", (("kind", kind),))] == raw[kind], kind
    assert m[("ktuned_llm_reserved_tokens", ())] == raw["held"]
    for kernel, charged in raw["kernels"].items():
        assert m[("ktuned_llm_kernel_tokens_total", (("kernel", kernel),))] == charged
    assert m[("ktuned_llm_budget_limit_tokens", (("scope", "total"),))] == CAPS.total_tokens
    remaining = {
        scope: m[("ktuned_llm_budget_remaining_tokens", (("scope", scope),))]
        for scope in ("total", "daily")
    }
    assert remaining["total"] == CAPS.total_tokens - raw["committed"]
    # The figures the caps use: a third box's ledger on the same database agrees. Opening
    # it settles the dead box's open reservation at its maximum (committed is unchanged).
    ledger = TokenLedger(postgres_url, caps=CAPS)
    try:
        spend = {s.scope: s for s in ledger.spend()}
    finally:
        ledger.close()
    assert remaining == {"total": spend["total"].remaining, "daily": spend["daily"].remaining}
    after = _scrape(port)
    assert after[("ktuned_llm_reserved_tokens", ())] == 0
    assert after[("ktuned_llm_tokens_total", (("kind", "unreported"),))] == (
        raw["unreported"] + raw["held"]
    )
    # `ktuned budget --store URL` reads the same ledger.
    out = subprocess.run(
        [sys.executable, "-m", "tuned.cli", "budget", "--store", postgres_url,
         "--state-dir", str(tmp_path / "box1")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout  # fmt: skip
    assert "(shared by the fleet)" in out
    total_line = next(line for line in out.splitlines() if line.startswith("total"))
    assert f"{raw['committed']:,}" in total_line
    assert f"requests: {2 * REQUESTS + 1}" in out


def test_the_outbox_gauge_follows_the_live_status(
    fleet_metrics: tuple[int, LiveStatus],
) -> None:
    port, live = fleet_metrics
    assert _scrape(port)[("ktuned_store_outbox_rows", ())] == 0
    live.update(outbox_rows=7)  # what OutboxStore(on_change=...) reports in the daemon
    assert _scrape(port)[("ktuned_store_outbox_rows", ())] == 7
    live.update(outbox_rows=0)  # replayed
    assert _scrape(port)[("ktuned_store_outbox_rows", ())] == 0
