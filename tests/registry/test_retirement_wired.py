"""The campaign proposes from a space where a discovered knob that fails correctness on most
of the values tried is pinned to its baseline (tuned.registry.retirement), with a log note;
declared knobs are never retired."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import pytest

from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.outcomes import EvalResult, Outcome, Provenance
from tuned.registry import KernelSpec
from tuned.search import Campaign, TuneSettings
from tuned.store.base import TrialRow
from tuned.store.sqlite import SqliteStore

SPEC = KernelSpec(
    name="retire-me",
    directory=Path("."),
    module="k.py",
    launcher="launch",
    inputs="make_inputs",
    reference=None,
    shapes=(),
    dtypes=("float32",),
    tolerance={},
    knobs={"GROUP": ("/4", "/2", "x1", "x2", "x4"), "num_warps": (1, 2, 4, 8)},
    knobs_declared=False,
    baseline_knobs={"GROUP": "x1", "num_warps": 4},
    weight=1.0,
    roofline=None,
    module_source="",
    generation="g1",
)


def _row(i: int, knobs: dict[str, object], outcome: Outcome) -> TrialRow:
    return TrialRow(
        candidate_id=f"c{i}",
        knobs=knobs,  # type: ignore[arg-type]
        provenance=Provenance.PARAMETRIC,
        strategy="random",
        parent_id=None,
        source_hash="h",
        result=EvalResult(outcome=outcome),
        wall_s=0.0,
    )


#: GROUP is wrong on every value tried but its baseline; num_warps is right everywhere.
TRIALS = [
    _row(0, {"GROUP": "/4", "num_warps": 2}, Outcome.INCORRECT),
    _row(1, {"GROUP": "/2", "num_warps": 8}, Outcome.NAN),
    _row(2, {"GROUP": "x2", "num_warps": 1}, Outcome.INCORRECT),
    _row(3, {"GROUP": "x1", "num_warps": 2}, Outcome.OK),
    _row(4, {"GROUP": "x1", "num_warps": 8}, Outcome.OK),
    _row(5, {"GROUP": "x1", "num_warps": 1}, Outcome.OK),
]


@pytest.fixture
def campaign_of(tmp_path: Path):  # type: ignore[no-untyped-def]
    store = SqliteStore(tmp_path / "ktuned.sqlite")
    client = WorkerClient(workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True))

    def make(spec: KernelSpec) -> Campaign:
        return Campaign(
            spec=spec,
            store=store,
            client=client,
            fingerprint="f",
            settings=TuneSettings(budget=None),
        )

    yield make
    store.close()


def test_a_knob_wrong_on_most_values_is_pinned_in_the_proposals(
    campaign_of, caplog: pytest.LogCaptureFixture
) -> None:
    campaign = campaign_of(SPEC)
    assert campaign._space([]).knobs == SPEC.knobs  # nothing tried yet: the whole space
    with caplog.at_level(logging.INFO):
        space = campaign._space(TRIALS)
    assert space.knobs["GROUP"] == ("x1",)
    assert space.knobs["num_warps"] == SPEC.knobs["num_warps"]
    assert "knob GROUP retired" in caplog.text
    # the policy's proposals from that space keep GROUP at its baseline
    from policies import make_policy

    policy = make_policy("random")
    rng = np.random.default_rng(0)
    for _ in range(10):
        suggestion = policy.suggest(space, [], rng)
        assert suggestion is not None and suggestion.knobs["GROUP"] == "x1"


def test_declared_knobs_and_other_failures_never_retire(campaign_of) -> None:
    declared = campaign_of(dataclasses.replace(SPEC, knobs_declared=True))
    assert declared._space(TRIALS).knobs == SPEC.knobs
    # compile errors say nothing about the math: no retirement
    errors = [dataclasses.replace(t, result=EvalResult(Outcome.COMPILE_ERROR)) for t in TRIALS]
    assert campaign_of(SPEC)._space(errors).knobs == SPEC.knobs
