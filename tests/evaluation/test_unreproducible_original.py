"""An original that is its own reference but not reproducible to the bit (atomic adds in
half precision, as Liger's group norm backward): the tolerance covers what two runs of it
differ by, a wrong candidate still fails, and a reference too far from reproducible is
refused with a reason that says what to do."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ADD_SOURCE, ADD_YAML, WriteEntry
from tests.evaluation.test_gpu_turn import _candidate  # the add kernel at BLOCK=128
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.outcomes import Outcome
from tuned.registry import load_entry

# No `reference:`: the original at its baseline knobs is the reference.
_YAML = ADD_YAML.replace("reference: reference\n", "")


def _noisy(amplitude: float) -> str:
    """The add kernel with unseeded noise on its output: two runs differ, as with atomics."""
    source = ADD_SOURCE.replace(
        "    return out\n",
        f"    return out + (torch.rand_like(out) - 0.5) * {amplitude}\n",
    )
    assert source != ADD_SOURCE
    return source


def test_an_unreproducible_original_is_checked_within_its_own_spread(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    noisy = _noisy(2e-3)  # ten times float32's default tolerance (1e-4)
    spec = load_entry(write_entry("noisy", noisy, _YAML.format(name="noisy")))
    wrong = noisy.replace("x + y, mask=mask)", "x + y + 0.05, mask=mask)")
    assert wrong != noisy
    with WorkerClient(workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True)) as c:
        assert c.evaluate(spec, _candidate(spec, noisy)).outcome is Outcome.OK
        result = c.evaluate(spec, _candidate(spec, wrong))
        assert result.outcome is Outcome.INCORRECT, result.reason


def test_a_reference_far_from_reproducible_is_refused_with_what_to_do(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    noisy = _noisy(50.0)  # noise far above the outputs' own size
    spec = load_entry(write_entry("chaos", noisy, _YAML.format(name="chaos")))
    with WorkerClient(workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True)) as c:
        result = c.evaluate(spec, _candidate(spec, noisy))
    assert result.outcome is Outcome.INCORRECT
    assert "differs between two runs on the same inputs" in (result.reason or "")
    assert "declare a deterministic `reference:`" in (result.reason or "")
