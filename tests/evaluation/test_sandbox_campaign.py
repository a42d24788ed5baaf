"""Hostile candidates (tests/adversarial/side_*.py) through the campaign path, in the sandbox.

Each module attacks the host: it reads the LLM key, writes or deletes the store, writes
outside its directory, opens sockets, forges or floods the protocol, spams phases to keep its
deadline open, escapes with setsid. Each must end in the outcome its first line names, and
after each: the key, the store and the files beside it are untouched, no process of it is
left, and the tuner evaluates the next candidate correctly in its own result (nothing shifts).
Most of these modules get below the Python-level guard (``posix``, ``_socket``, ``ctypes``,
``sqlite3``): only the sandbox stops them, so the test skips, with bwrap's reason, where the
sandbox cannot run. Where a module's attack works, its outputs are right and it passes: an
``ok`` here is an escape."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ADD_SOURCE, DEVICES, WriteEntry
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.evaluation.sandbox import SandboxError, SandboxSettings, check_sandbox
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import load_entry
from tuned.search import Campaign, TuneSettings
from tuned.store import SqliteStore

# side_stream.py is a cheat of the older corpus (a side CUDA stream), not a host attack.
SIDE = sorted(
    p
    for p in (Path(__file__).resolve().parents[1] / "adversarial").glob("side_*.py")
    if p.name != "side_stream.py"
)
SECRET = "sk-ktuned-test-0123456789"
ALLOWED = {Outcome.CHEAT, Outcome.INCORRECT, Outcome.CRASH, Outcome.TIMEOUT}


def _expectation(path: Path) -> tuple[Outcome, str]:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: '"
    outcome, _, fragment = first.removeprefix("# expect: ").partition(": ")
    return Outcome(outcome), fragment.strip()


def test_the_hostile_corpus_covers_every_class() -> None:
    names = {p.stem for p in SIDE}
    assert len(SIDE) >= 15
    for needed in ("key", "store", "delete", "outside", "socket", "forges", "non_json"):
        assert any(needed in n for n in names), needed
    assert {"side_phase_spam", "side_setsid_escape", "side_ctypes_socket"} <= names
    assert {_expectation(p)[0] for p in SIDE} <= ALLOWED


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _escapees() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "ktuned-escapee":
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
@pytest.mark.parametrize("interpreter", DEVICES)
def test_hostile_candidates_reach_nothing_and_the_tuner_stays_up(
    tmp_path: Path, write_entry: WriteEntry, monkeypatch: pytest.MonkeyPatch, interpreter: bool
) -> None:
    try:
        check_sandbox(SandboxSettings())
    except SandboxError as exc:
        pytest.skip(f"bwrap cannot run here: {exc}")
    creds = tmp_path / "credentials"
    creds.mkdir()
    key = creds / "llm.api_key"
    key.write_text(SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # the daemon's own environment
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    # A process started with the key in its environment, as systemd starts the daemon: its
    # /proc/<pid>/environ holds the key (this test's own was fixed when pytest started).
    daemon = subprocess.Popen(["sleep", "600"], env=dict(os.environ))
    state = tmp_path / "state"
    precious = state / "precious.txt"
    spec = load_entry(write_entry())
    store = SqliteStore(state / "ktuned.sqlite")
    store.sync_kernel(spec)
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
    recorded: dict[str, Outcome] = {}
    problems: list[str] = []
    with daemon, WorkerClient(workdir=state / "workers" / "0", settings=settings) as client:
        fid = store.record_fingerprint(client.start())
        campaign = Campaign(
            spec=spec,
            store=store,
            client=client,
            fingerprint=fid,
            settings=TuneSettings(budget=None),
        )
        for path in SIDE:
            outcome, fragment = _expectation(path)
            hostile = Candidate(
                kernel=spec.name,
                generation=spec.generation,
                source=path.read_text(),
                knobs={},
                provenance=Provenance.PARAMETRIC,  # past the LLM gate: the sandbox must hold
                strategy="adversarial",
            )
            started = time.monotonic()
            result = campaign.evaluate(hostile).result
            recorded[hostile.id] = result.outcome
            if result.outcome is not outcome or fragment not in result.reason:
                problems.append(
                    f"{path.name}: expected {outcome.value} ({fragment!r}), got "
                    f"{result.outcome.value} in {time.monotonic() - started:.1f} s: {result.reason}"
                )
            # Nothing it touched changed on the host.
            if _read(key) != SECRET or _read(precious) != "precious":
                problems.append(f"{path.name}: the key or a file beside the store changed")
                key.write_text(SECRET)
                precious.write_text("precious")
            pwned = [str(p) for p in tmp_path.rglob("pwned*")] + [
                p for p in outside if os.path.exists(p)
            ]
            if pwned:
                problems.append(f"{path.name}: wrote {pwned}")
            if not (state / "ktuned.sqlite").exists():
                problems.append(f"{path.name}: deleted the store")
            else:
                with sqlite3.connect(state / "ktuned.sqlite") as db:
                    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
                if "forged_acceptance" in tables:
                    problems.append(f"{path.name}: forged a row in the store")
            # The tuner is up and the next candidate gets its own, right, result.
            good = Candidate(
                kernel=spec.name,
                generation=spec.generation,
                source=ADD_SOURCE + f"\n# after {path.stem}\n",
                knobs={"BLOCK": 256},
                provenance=Provenance.PARAMETRIC,
            )
            after = campaign.evaluate(good).result
            recorded[good.id] = after.outcome
            if after.outcome is not Outcome.OK:
                problems.append(f"after {path.name}: a correct kernel got {after}")
        daemon.kill()
    deadline = time.monotonic() + 10
    while _escapees() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert problems == [], "\n".join(problems)
    assert _escapees() == [], "a process of a hostile candidate outlived its worker"
    trials = store.trials(spec.name, spec.generation, fid)
    assert {t.candidate_id: t.result.outcome for t in trials} == recorded  # nothing shifted
