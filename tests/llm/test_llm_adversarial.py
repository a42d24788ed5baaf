"""Every hostile module of tests/adversarial through the LLM path (issue 21).

A scripted OpenAI-protocol server on loopback returns the module as the model's rewrite; the
proposer, the static gate and the sandboxed worker (Triton's interpreter) take it from there,
exactly as a daemon with an LLM does. Each must end refused by the gate (``rejected_static``)
or in the outcome its first line names for the campaign path
(tests/evaluation/test_adversarial.py, tests/evaluation/test_sandbox_campaign.py); never
``ok``. After each: the best is the baseline or one of the correct rewrites sent in between
(as fast as the baseline, timing noise may crown one), never a hostile module; the key and
the files beside the store are untouched, nothing was written outside, and each correct
rewrite gets its own, right, result. Skips, with bwrap's reason, where the sandbox cannot
run."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.conftest import ADD_SOURCE, ADD_YAML, DEVICES
from tests.evaluation.test_sandbox_campaign import SECRET, _expectation, _read
from tests.llm.chat_server import ChatServer, fenced, reply
from tests.llm.test_llm_proposals import World, campaign_for
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.evaluation.sandbox import SandboxError, SandboxSettings, check_sandbox
from tuned.outcomes import Outcome, Provenance
from tuned.registry import load_entry
from tuned.search import Campaign
from tuned.store import SqliteStore
from tuned.store.ledger import BudgetCaps

CORPUS = sorted((Path(__file__).resolve().parents[1] / "adversarial").glob("*.py"))
#: A correct rewrite (a comment changes the module, so it is a new candidate each time).
GOOD = ADD_SOURCE.replace(
    "    out = torch.empty_like(x)\n", "    out = torch.empty_like(x)  # @@\n", 1
)


@pytest.mark.slow
@pytest.mark.parametrize("interpreter", DEVICES)
def test_every_hostile_module_as_an_llm_rewrite_is_refused_or_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interpreter: bool
) -> None:
    try:
        check_sandbox(SandboxSettings())
    except SandboxError as exc:
        pytest.skip(f"bwrap cannot run here: {exc}")
    assert GOOD != ADD_SOURCE
    creds = tmp_path / "credentials"
    creds.mkdir()
    key = creds / "llm.api_key"
    key.write_text(SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    state = tmp_path / "state"
    entry = tmp_path / "registry" / "add"
    entry.mkdir(parents=True)
    (entry / "add.py").write_text(ADD_SOURCE)
    (entry / "kernel.yaml").write_text(ADD_YAML.format(name="add"))
    spec = load_entry(entry)
    store_path = state / "ktuned.sqlite"
    store = SqliteStore(store_path)
    store.sync_kernel(spec)
    precious = state / "precious.txt"
    precious.write_text("precious")
    settings = EvaluationSettings(
        interpreter=interpreter,
        load_timeout_s=8,
        compile_timeout_s=8,
        correctness_timeout_s=30,
        benchmark_timeout_s=30,
        candidate_timeout_s=60,
    )
    outside = [sys.prefix + "/pwned.txt", "/var/tmp/ktuned-pwned.txt"]
    problems: list[str] = []
    refused = caught = 0
    with WorkerClient(workdir=state / "workers" / "0", settings=settings) as client:
        fid = store.record_fingerprint(client.start())

        world = World(spec, store, client, fid, store_path)

        def campaign(server: ChatServer | None) -> Campaign:
            caps = BudgetCaps(total_tokens=10_000_000)  # 63 modules and the rewrites between
            return campaign_for(world, server, request_timeout_s=2.0, max_tokens=4000, budget=caps)

        baseline = campaign(None).step()
        assert baseline is not None and baseline.result.outcome is Outcome.OK
        honest = {baseline.candidate_id}  # what may be the best: never a hostile module
        for i, path in enumerate(CORPUS):
            outcome, fragment = _expectation(path)
            with ChatServer([reply(fenced(path.read_text()), usage=(500, 500))]) as srv:
                row = campaign(srv).rewrite("tiling")
            if row is None:
                problems.append(f"{path.name}: no candidate recorded for the reply")
                continue
            result = row.result
            assert row.provenance is Provenance.LLM
            if result.outcome is Outcome.REJECTED_STATIC:
                refused += 1
            elif result.outcome is outcome and fragment in result.reason:
                caught += 1
            else:
                problems.append(
                    f"{path.name}: expected rejected_static or {outcome.value} ({fragment!r}), "
                    f"got {result.outcome.value}: {result.reason}"
                )
            best = store.best("add")
            if best is None or best.candidate_id not in honest:
                problems.append(f"{path.name}: the best changed to {best}")
            if _read(key) != SECRET or _read(precious) != "precious":
                problems.append(f"{path.name}: the key or a file beside the store changed")
                key.write_text(SECRET)
                precious.write_text("precious")
            pwned = [str(p) for p in tmp_path.rglob("pwned*")]
            pwned += [p for p in outside if os.path.exists(p)]
            if pwned:
                problems.append(f"{path.name}: wrote {pwned}")
            if not store_path.exists():
                problems.append(f"{path.name}: deleted the store")
                break
            with sqlite3.connect(store_path) as db:
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
            if "forged_acceptance" in tables:
                problems.append(f"{path.name}: forged a row in the store")
            if i % 8 == 7 or i == len(CORPUS) - 1:
                # The tuner is up and a correct rewrite gets its own, right, result.
                good = GOOD.replace("@@", f"after {path.stem}")
                with ChatServer([reply(fenced(good), usage=(500, 500))]) as srv:
                    after = campaign(srv).rewrite("tiling")
                if after is None or after.result.outcome is not Outcome.OK:
                    problems.append(f"after {path.name}: a correct rewrite got {after}")
                else:  # as fast as the baseline: timing noise may make it the best
                    honest.add(after.candidate_id)
    assert problems == [], "\n".join(problems)
    # Both defenses took part: the gate refuses most, the runtime catches the rest.
    assert refused >= len(CORPUS) // 2 and caught >= 5, (refused, caught)
