"""LLM-proposed strategies: asked now and then through the same ledger, caps and cache as
every request (a real chat server on loopback), parsed, deduplicated, capped, stored with
their provenance, offered as new LLM arms, shown in metrics and ``ktuned budget``."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from policies import HierarchicalPolicy
from tests.conftest import ADD_SOURCE, ADD_YAML
from tests.llm.chat_server import ChatServer, Step, reply
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.llm.budget import budget_report
from tuned.llm.proposed import DraftStrategy, duplicate_of, normalize_name, parse_strategies
from tuned.llm.proposer import LlmProposer, ParentInfo
from tuned.llm.settings import LlmSettings
from tuned.llm.setup import open_proposer
from tuned.metrics import StoreCollector
from tuned.outcomes import Candidate, Provenance
from tuned.registry import KernelSpec, load_entry
from tuned.search import Campaign, TuneSettings
from tuned.store import SqliteStore
from tuned.store.ledger import BudgetCaps
from tuned.store.llm_attempts import AttemptLog

SPLIT = {
    "name": "Two-pass split reduction",
    "target": "sm",
    "instruction": "Split the reduction across two launches: partial sums per block in the "
    "first, a tree combine in the second, so more programs run concurrently.",
}
PERSISTENT = {
    "name": "Persistent programs",
    "target": "latency",
    "instruction": "Launch one program per SM and loop over blocks inside it, amortizing "
    "launch overhead and index setup across many blocks.",
}
#: The catalog's tiling instruction, reworded a little: a duplicate.
RETILING = {
    "name": "re-tile",
    "target": "l2",
    "instruction": "Retile the computation: change the tile shape each program handles and the "
    "order programs visit tiles so that operands are reused from L2 and shared memory.",
}


def as_reply(*items: dict[str, str], prose: str = "Here are my ideas.") -> str:
    return f"{prose}\n```json\n{json.dumps({'strategies': list(items)})}\n```\n"


# -- parsing and deduplication


def test_parsing_takes_the_json_and_says_what_is_wrong() -> None:
    status, _, drafts = parse_strategies(as_reply(SPLIT, PERSISTENT), "stop")
    assert status == "ok" and [d.target for d in drafts] == ["sm", "latency"]
    status, _, drafts = parse_strategies(json.dumps([SPLIT]), "stop")  # unfenced, a bare list
    assert status == "ok" and drafts[0].name == SPLIT["name"]
    bad_target = dict(SPLIT, target="gpu")
    status, reason, drafts = parse_strategies(as_reply(bad_target), "stop")
    assert status == "malformed" and "target must be one of sm, dram, l2, latency" in reason
    status, reason, _ = parse_strategies(as_reply(dict(SPLIT, instruction="short")), "stop")
    assert status == "malformed" and "instruction" in reason
    status, reason, _ = parse_strategies("I suggest tiling.", "stop")
    assert status == "malformed" and "no JSON" in reason
    assert parse_strategies('```json\n{"strategies": [{"na', "length")[0] == "truncated"
    assert parse_strategies("", "stop")[0] == "empty"
    # One good entry beside a bad one: the good one is kept, the bad one noted.
    status, reason, drafts = parse_strategies(as_reply(SPLIT, bad_target), "stop")
    assert status == "ok" and len(drafts) == 1 and "entry 1" in reason


def test_duplicates_by_name_or_by_instruction() -> None:
    assert normalize_name("  Split-K   Reduction!") == "split_k_reduction"
    existing = [("tiling", "Retile the computation: change the block/tile shape ...")]
    assert duplicate_of(DraftStrategy("Tiling", "l2", "Something else entirely here."), existing)
    from policies.strategies import STRATEGIES

    catalog = [(s.name, s.instruction) for s in STRATEGIES]
    assert duplicate_of(DraftStrategy(**RETILING), catalog) == "tiling"
    assert duplicate_of(DraftStrategy(**SPLIT), catalog) is None
    assert duplicate_of(DraftStrategy(**PERSISTENT), catalog) is None


# -- requests through the ledger


@pytest.fixture
def spec(tmp_path: Path) -> KernelSpec:
    entry = tmp_path / "registry" / "add"
    entry.mkdir(parents=True)
    (entry / "add.py").write_text(ADD_SOURCE)
    (entry / "kernel.yaml").write_text(ADD_YAML.format(name="add"))
    return load_entry(entry)


def proposer_for(server: ChatServer, path: Path, **kw: Any) -> LlmProposer:
    options: dict[str, Any] = {
        "request_timeout_s": 5.0,
        "retries": 0,
        "max_tokens": 2000,
        "budget": BudgetCaps(total_tokens=200_000),
        **kw,
    }
    proposer = open_proposer(
        LlmSettings(base_url=server.base_url, model="scripted", **options), store_path=path
    )
    assert proposer is not None
    return proposer


def strategy_ledger(path: Path) -> list[tuple[int, int]]:
    """(max_tokens, charged) of each strategy request in the ledger."""
    db = sqlite3.connect(path)
    try:
        return [
            (int(m), int(c))
            for m, c in db.execute(
                "SELECT max_tokens, charged FROM llm_ledger WHERE purpose = 'strategy' ORDER BY id"
            )
        ]
    finally:
        db.close()


def best_of(spec: KernelSpec) -> ParentInfo:
    c = Candidate(spec.name, spec.generation, spec.module_source, {"BLOCK": 256, "num_warps": 4},
                  Provenance.ORIGINAL, "original")  # fmt: skip
    return ParentInfo(c, time_s=1e-3, timing_kind="interpreter", profile={"sol_dram": 0.9})


def test_valid_duplicate_malformed_and_capped_replies(spec: KernelSpec, tmp_path: Path) -> None:
    path = tmp_path / "ktuned.sqlite"
    script: list[Step] = [
        reply(as_reply(SPLIT), usage=(500, 100)),  # valid: accepted
        reply(as_reply(RETILING), usage=(400, 80)),  # a catalog strategy again
        reply("Ideas: tile more, fuse more.", usage=(300, 20)),  # no JSON
        reply(as_reply(PERSISTENT, dict(SPLIT, name="another split")), usage=(450, 90)),
    ]
    with ChatServer(script) as srv:
        proposer = proposer_for(srv, path, max_strategies=2, strategy_max_tokens=512)
        first = proposer.request_strategies(spec, best_of(spec), baseline_time_s=2e-3)
        assert first.status == "accepted" and first.tokens == 600
        assert [p.slot for p in first.accepted] == [1]
        names = [s.name for s in proposer.open_strategies(spec)]
        assert names[-1] == "proposed_1" and "tiling" in names  # catalog + proposed
        found = proposer.strategy_named("proposed_1", "add")
        assert found is not None and found.target == "sm" and found.knob_groups == ()
        prompt = srv.requests[0]["messages"][1]["content"]
        assert "speed of light: DRAM 90%" in prompt and "- tiling [l2]:" in prompt
        assert "def add(x, y, BLOCK=256, num_warps=4)" in prompt
        assert srv.requests[0]["max_tokens"] == 512

        dup = proposer.request_strategies(spec, best_of(spec))
        assert dup.status == "duplicate" and "duplicates 'tiling'" in dup.reason
        bad = proposer.request_strategies(spec, best_of(spec))
        assert bad.status == "malformed" and bad.tokens == 320
        # One slot left: the first new one fills it, the second is over the cap (and a
        # near-copy of an accepted one would be a duplicate anyway).
        capped = proposer.request_strategies(spec, best_of(spec))
        assert capped.status == "accepted" and [p.name for p in capped.accepted] == [
            "Persistent programs"
        ]
        assert "another split" in capped.reason
    # Full: nothing is due, whatever the count of rewrites.
    assert len(proposer.proposed("add")) == 2
    assert proposer.strategy_request_due(spec) is None
    # Every request was reserved at strategy_max_tokens and charged its reported usage.
    assert strategy_ledger(path) == [(512, 600), (512, 480), (512, 320), (512, 540)]
    counts = proposer.attempts.counts("strategy")
    assert counts == {"accepted": 2, "duplicate": 1, "malformed": 1}
    assert proposer.attempts.counts() == {}  # no rewrite was asked
    proposer.close()

    # Stored with provenance: a new proposer on the same file offers the same arms.
    with ChatServer([]) as srv:
        again = proposer_for(srv, path, max_strategies=2)
        stored = again.proposed("add")
        assert [(p.slot, p.name, p.model) for p in stored] == [
            (1, SPLIT["name"], "scripted"),
            (2, "Persistent programs", "scripted"),
        ]
        assert all(p.attempt_id is not None and p.generation == spec.generation for p in stored)
        assert stored[0].trigger == "requested"
        again.close()
    # Metrics: a count per kernel (no free text in labels) and requests by status.
    SqliteStore(path).close()  # the store's own tables, beside the LLM's
    registry = CollectorRegistry()
    registry.register(StoreCollector(path, llm_budget=BudgetCaps(total_tokens=200_000)))
    body = generate_latest(registry).decode()
    assert 'ktuned_llm_strategies{kernel="add"} 2.0' in body
    assert 'ktuned_llm_strategy_requests_total{status="malformed"} 1.0' in body
    assert 'ktuned_llm_strategy_requests_total{status="capped"} 0.0' in body
    assert "Persistent" not in body
    report = budget_report(path, LlmSettings(max_strategies=2), source="test")
    assert "LLM-proposed strategies (at most 2 per kernel" in report
    assert "llm:proposed_2" in report and "Persistent programs" in report


def test_a_spent_budget_refuses_a_strategy_request_before_sending(
    spec: KernelSpec, tmp_path: Path
) -> None:
    with ChatServer([reply(as_reply(SPLIT))]) as srv:
        proposer = proposer_for(srv, tmp_path / "s.sqlite", budget=BudgetCaps(total_tokens=100))
        result = proposer.request_strategies(spec, best_of(spec))
        assert result.status == "budget" and result.accepted == ()
        assert srv.requests == []
        assert proposer.attempts.counts("strategy") == {"budget": 1}
        proposer.close()


def test_the_cadence_every_n_rewrites_or_after_a_stall(spec: KernelSpec, tmp_path: Path) -> None:
    path = tmp_path / "ktuned.sqlite"
    with ChatServer([]) as srv:
        proposer = proposer_for(srv, path, strategy_every=4, strategy_stall=2)
        log = AttemptLog(path)

        def rewrite(status: str = "no_code") -> None:
            log.record(kernel="add", generation=spec.generation, strategy="llm:tiling",
                       status=status, reason="", tokens=10)  # fmt: skip

        assert proposer.strategy_request_due(spec) is None
        rewrite()
        assert proposer.strategy_request_due(spec) is None
        rewrite("budget")  # refused before asking: does not count
        assert proposer.strategy_request_due(spec) is None
        rewrite()
        assert (proposer.strategy_request_due(spec) or "").startswith("stalled")
        log.record(kernel="add", generation=spec.generation, strategy="strategies",
                   status="malformed", reason="", tokens=5, purpose="strategy")  # fmt: skip
        assert proposer.strategy_request_due(spec) is None  # counted from the last ask
        off = proposer_for(srv, path, strategy_every=4, strategy_stall=0)
        for _ in range(3):
            rewrite()
        assert off.strategy_request_due(spec) is None
        rewrite()
        assert (off.strategy_request_due(spec) or "").startswith("4 rewrites")
        assert proposer_for(srv, path, max_strategies=0).strategy_request_due(spec) is None
        log.close()


@pytest.fixture
def add_world(spec: KernelSpec, tmp_path: Path) -> Iterator[tuple[SqliteStore, WorkerClient, str]]:
    store = SqliteStore(tmp_path / "ktuned.sqlite")
    store.sync_kernel(spec)
    with WorkerClient(workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True)) as c:
        yield store, c, store.record_fingerprint(c.start())
    store.close()


def test_a_campaign_asks_when_due_and_offers_the_new_arm(
    spec: KernelSpec, add_world: tuple[SqliteStore, WorkerClient, str]
) -> None:
    store, client, fid = add_world

    def answer(body: dict[str, Any]) -> Step:
        if "Propose NEW strategies" in body["messages"][0]["content"]:
            return reply(as_reply(PERSISTENT), usage=(300, 60))
        return reply("no code today", usage=(100, 10))

    with ChatServer(default=answer) as srv:
        proposer = proposer_for(srv, store.path, strategy_every=1, strategy_stall=0)
        campaign = Campaign(spec=spec, store=store, client=client, fingerprint=fid,
                            settings=TuneSettings(budget=None), llm=proposer)  # fmt: skip
        assert campaign.step() is not None  # the baseline
        AttemptLog(store.path).record(kernel="add", generation=spec.generation,
                                      strategy="llm:fusion", status="no_code", reason="",
                                      tokens=1)  # fmt: skip
        assert campaign.step() is not None
        kinds = ["strategies" if "Propose NEW" in r["messages"][0]["content"] else "rewrite"
                 for r in srv.requests]  # fmt: skip
        assert kinds[0] == "strategies" and kinds.count("strategies") == 1
        policy = campaign._policy
        assert isinstance(policy, HierarchicalPolicy)
        assert "proposed_1" in {s.name for s in policy._llm}
        assert [p.trigger for p in proposer.proposed("add")] == [
            "1 rewrites since the last request"
        ]
        proposer.close()
