"""Every module of tests/adversarial ends in its expected outcome, through the daemon's path."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ADD_SOURCE, DEVICES, WriteEntry
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import load_entry
from tuned.search import Campaign, TuneSettings
from tuned.store import SqliteStore

# side_*.py attack the host; the sandbox stops them: tests/evaluation/test_sandbox_campaign.py
# (side_stream.py, a side CUDA stream, is a cheat of this corpus).
CORPUS = sorted(
    p
    for p in (Path(__file__).resolve().parents[1] / "adversarial").glob("*.py")
    if not p.name.startswith("side_") or p.name == "side_stream.py"
)


def _expectation(path: Path) -> tuple[Outcome, str]:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: '"
    outcome, _, fragment = first.removeprefix("# expect: ").partition(": ")
    return Outcome(outcome), fragment


def test_the_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 15
    assert {_expectation(p)[0] for p in CORPUS} >= {
        Outcome.TIMEOUT,
        Outcome.CRASH,
        Outcome.RUNTIME_ERROR,
        Outcome.NAN,
        Outcome.INCORRECT,
        Outcome.CHEAT,
        Outcome.REJECTED_STATIC,
        Outcome.COMPILE_ERROR,
    }


@pytest.mark.slow
@pytest.mark.parametrize("interpreter", DEVICES)
def test_every_cheat_and_fault_is_caught_and_nothing_is_lost(
    tmp_path: Path, write_entry: WriteEntry, interpreter: bool
) -> None:
    spec = load_entry(write_entry())
    store = SqliteStore(tmp_path / "state" / "ktuned.sqlite")
    store.sync_kernel(spec)
    settings = EvaluationSettings(
        interpreter=interpreter,
        load_timeout_s=8,
        compile_timeout_s=8,
        correctness_timeout_s=30,
        benchmark_timeout_s=30,
    )
    escape = tmp_path / "state" / "ktuned-escape.txt"
    with WorkerClient(workdir=tmp_path / "state" / "workers" / "0", settings=settings) as client:
        fid = store.record_fingerprint(client.start())
        campaign = Campaign(
            spec=spec,
            store=store,
            client=client,
            fingerprint=fid,
            settings=TuneSettings(budget=None),
        )
        mismatches = []
        for path in CORPUS:
            outcome, fragment = _expectation(path)
            candidate = Candidate(
                kernel=spec.name,
                generation=spec.generation,
                source=path.read_text(),
                knobs={},
                # Not LLM: the LLM static gate would stop most of these before any worker time
                # (tests/llm/test_llm_gate.py); here the worker's runtime defenses must hold.
                provenance=Provenance.PARAMETRIC,
                strategy="adversarial",
            )
            result = campaign.evaluate(candidate).result
            if result.outcome is not outcome or fragment not in result.reason:
                mismatches.append(
                    f"{path.name}: expected {outcome.value} ({fragment!r}), got "
                    f"{result.outcome.value}: {result.reason}"
                )
        # The worker survived all of it (replaced where needed) and still evaluates correctly.
        good = Candidate(
            kernel=spec.name,
            generation=spec.generation,
            source=ADD_SOURCE,
            knobs={"BLOCK": 512},
            provenance=Provenance.PARAMETRIC,
        )
        assert campaign.evaluate(good).result.outcome is Outcome.OK
    assert mismatches == [], "\n".join(mismatches)
    trials = store.trials(spec.name, spec.generation, fid)
    assert len(trials) == len(CORPUS) + 1  # every result recorded, nothing lost
    assert not escape.exists()
