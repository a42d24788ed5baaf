"""LLM rewrites end to end on a real kernel: scripted replies from a real HTTP server, the
proposer, the static gate and the worker (Triton's interpreter), each ending in the right
recorded outcome with its tokens accounted."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ADD_SOURCE, ADD_YAML
from tests.llm.chat_server import ChatServer, Step, error, fenced, reply
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.llm.settings import LlmSettings
from tuned.llm.setup import open_proposer
from tuned.outcomes import Outcome, Provenance
from tuned.registry import KernelSpec, load_entry
from tuned.search import Campaign, TuneSettings
from tuned.store import SqliteStore
from tuned.store.ledger import BudgetCaps
from tuned.store.llm_attempts import AttemptLog

#: The same kernel with a better block size written into the source: 3 programs instead of
#: 12 at N=3000, several times faster in the interpreter.
FASTER = ADD_SOURCE.replace(
    "def add(x, y, BLOCK=256, num_warps=4):\n",
    "def add(x, y, BLOCK=256, num_warps=4):\n    BLOCK = 1024  # tiling: fewer, larger programs\n",
)
SYNTAX_ERROR = ADD_SOURCE.replace("def add(x, y, BLOCK=256, num_warps=4):", "def add(x, y,")
CALLS_REFERENCE = ADD_SOURCE.replace("        return out\n", "        return reference(x, y)\n")
CALLS_REFERENCE = CALLS_REFERENCE.replace("    return out\n", "    return reference(x, y)\n", 1)


@dataclass
class World:
    spec: KernelSpec
    store: SqliteStore
    client: WorkerClient
    fingerprint: str
    path: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("llm")
    entry = root / "registry" / "add"
    entry.mkdir(parents=True)
    (entry / "add.py").write_text(ADD_SOURCE)
    (entry / "kernel.yaml").write_text(ADD_YAML.format(name="add"))
    spec = load_entry(entry)
    store = SqliteStore(root / "ktuned.sqlite")
    store.sync_kernel(spec)
    with WorkerClient(workdir=root / "w", settings=EvaluationSettings(interpreter=True)) as c:
        fid = store.record_fingerprint(c.start())
        w = World(spec, store, c, fid, root / "ktuned.sqlite")
        baseline = campaign_for(w, None).step()
        assert baseline is not None and baseline.result.outcome is Outcome.OK
        yield w


def campaign_for(w: World, server: ChatServer | None, **llm: object) -> Campaign:
    proposer = None
    if server is not None:
        options: dict[str, object] = {
            "request_timeout_s": 1.0,
            "retries": 1,
            "backoff_s": 0.01,
            "max_tokens": 2000,
            "budget": BudgetCaps(total_tokens=200_000),
            **llm,
        }
        settings = LlmSettings(base_url=server.base_url, model="scripted", **options)  # type: ignore[arg-type]
        proposer = open_proposer(settings, store_path=w.path, gpu={"gpu_model": "none"})
    return Campaign(
        spec=w.spec,
        store=w.store,
        client=w.client,
        fingerprint=w.fingerprint,
        settings=TuneSettings(budget=None),
        llm=proposer,
    )


def ledger_rows(w: World) -> list[tuple[int, str]]:
    db = sqlite3.connect(w.path)
    try:
        rows = db.execute("SELECT charged, state FROM llm_ledger ORDER BY id").fetchall()
    except sqlite3.OperationalError:  # no LLM request yet
        rows = []
    finally:
        db.close()
    return [(int(c), str(s)) for c, s in rows]


def last_attempt(w: World) -> tuple[str, str, int]:
    rows = AttemptLog(w.path).recent("add", w.spec.generation, 1)
    return rows[-1].status, rows[-1].reason, rows[-1].tokens


def test_a_faster_rewrite_is_accepted_as_the_new_best(world: World) -> None:
    before = len(ledger_rows(world))
    with ChatServer([reply(fenced(FASTER), usage=(900, 400))]) as srv:
        row = campaign_for(world, srv).rewrite("tiling")
    assert row is not None and row.result.outcome is Outcome.OK, row
    assert row.provenance is Provenance.LLM and row.strategy == "llm:tiling"
    best = world.store.best("add")
    assert best is not None and best.candidate_id == row.candidate_id
    assert best.speedup is not None and best.speedup > 1.5
    cand = world.store.candidate(row.candidate_id, world.spec.generation)
    assert cand is not None and "BLOCK = 1024" in cand.source
    assert cand.knobs == {"BLOCK": 256, "num_warps": 4}  # the parent's knobs
    assert ledger_rows(world)[before:] == [(1300, "settled")]
    assert last_attempt(world)[0] == "candidate"
    # The prompt held the parent's source, its time, the strategy and the signature.
    prompt = srv.requests[0]["messages"][1]["content"]
    assert "def add(x, y, BLOCK=256, num_warps=4)" in prompt and "Retile" in prompt
    assert "Measured time of this version" in prompt


@pytest.mark.parametrize(
    ("source", "rule"),
    [(SYNTAX_ERROR, "syntax"), (CALLS_REFERENCE, "torch_compute")],
    ids=["syntax_error", "calls_reference"],
)
def test_a_module_breaking_a_rule_is_rejected_statically(
    world: World, source: str, rule: str
) -> None:
    starts = world.client.starts
    before = len(ledger_rows(world))
    with ChatServer([reply(fenced(source), usage=(800, 300))]) as srv:
        row = campaign_for(world, srv).rewrite("fusion")
    assert row is not None and row.result.outcome is Outcome.REJECTED_STATIC
    assert row.result.reason.startswith(f"{rule}:"), row.result.reason
    assert row.result.metadata["gate_rule"] == rule
    assert world.client.starts == starts  # no worker time spent
    assert ledger_rows(world)[before:] == [(1100, "settled")]
    # The next prompt shows the model what became of it.
    with ChatServer([reply("no code, sorry")]) as srv:
        campaign_for(world, srv).rewrite("fusion")
    assert f"rejected_static: {rule}:" in srv.requests[0]["messages"][1]["content"]


@pytest.mark.parametrize(
    ("step", "status", "reason"),
    [
        (reply("I would unroll the loop, but here is no code."), "no_code", "no fenced"),
        (
            reply("```python\n" + FASTER[: len(FASTER) // 2], finish_reason="length"),
            "truncated",
            "cut off",
        ),
        (reply("```python\nprint('hi')\n```\n"), "no_code", "none defines the launcher"),
        (reply(""), "empty", "empty"),
    ],
    ids=["prose", "truncated", "wrong_block", "empty"],
)
def test_a_reply_without_a_module_is_recorded_with_its_reason(
    world: World, step: Step, status: str, reason: str
) -> None:
    n = len(world.store.trials("add", world.spec.generation, world.fingerprint))
    with ChatServer([step]) as srv:
        row = campaign_for(world, srv).rewrite("vectorization")
    assert row is None
    got_status, got_reason, tokens = last_attempt(world)
    assert got_status == status and reason in got_reason
    assert tokens == 150  # the scripted usage, charged
    assert len(world.store.trials("add", world.spec.generation, world.fingerprint)) == n


def test_429_then_success_then_the_same_module_again_is_a_duplicate(world: World) -> None:
    same = fenced(FASTER, prose="Same as before.")
    with ChatServer([error(429), reply(same, usage=(10, 10))]) as srv:
        row = campaign_for(world, srv).rewrite("pipeline")
    assert len(srv.requests) == 2 and row is None  # FASTER was evaluated already
    status, reason, tokens = last_attempt(world)
    assert status == "duplicate" and "evaluated before" in reason and tokens == 20
    assert ledger_rows(world)[-2:] == [(0, "settled"), (20, "settled")]


def test_server_errors_and_hangs_end_as_llm_errors_with_tokens_accounted(world: World) -> None:
    with ChatServer([error(500), error(500)]) as srv:
        assert campaign_for(world, srv).rewrite("reordering") is None
    status, reason, _ = last_attempt(world)
    assert status == "llm_error" and reason.startswith("server:")
    assert ledger_rows(world)[-2:] == [(0, "settled"), (0, "settled")]
    with ChatServer([Step(content="x", delay_s=2.5), Step(content="x", delay_s=2.5)]) as srv:
        assert campaign_for(world, srv).rewrite("reordering") is None
    status, reason, _ = last_attempt(world)
    assert status == "llm_error" and reason.startswith("timeout:")
    held = ledger_rows(world)[-2:]
    assert all(state == "settled" and charged > 2000 for charged, state in held)  # in full
    assert last_attempt(world)[2] == sum(charged for charged, _ in held)


def test_missing_usage_is_charged_in_full_and_the_candidate_still_runs(world: World) -> None:
    variant = FASTER.replace("BLOCK = 1024", "BLOCK = 512")
    with ChatServer([reply(fenced(variant), usage=None)]) as srv:
        row = campaign_for(world, srv).rewrite("access_layout")
    assert row is not None and row.result.outcome is Outcome.OK
    charged, state = ledger_rows(world)[-1]
    assert state == "settled" and charged > 2000  # prompt estimate + max_tokens


def test_a_spent_budget_masks_llm_arms_and_sends_nothing(world: World) -> None:
    with ChatServer([reply(fenced(FASTER))]) as srv:
        campaign = campaign_for(world, srv, budget=BudgetCaps(total_tokens=1))
        assert campaign.llm is not None
        assert campaign.llm.open_strategies(world.spec) == ()
        assert campaign.rewrite("tiling") is None
    assert srv.requests == []
    assert last_attempt(world)[0] == "budget"


def test_insufficient_quota_pauses_the_llm(world: World) -> None:
    with ChatServer([error(429, "insufficient_quota")]) as srv:
        campaign = campaign_for(world, srv)
        assert campaign.rewrite("tiling") is None
        assert campaign.llm is not None and campaign.llm.open_strategies(world.spec) == ()
        assert "insufficient_quota" in campaign.llm.paused_reason
    assert len(srv.requests) == 1
