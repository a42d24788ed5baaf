"""What a corpus of real Triton code hit (issue 19, item 4), each through a real worker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_cli import ktuned
from tests.conftest import ADD_SOURCE, ADD_YAML, WriteEntry
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import KernelSpec, load_entry


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerClient]:
    settings = EvaluationSettings(interpreter=True, correctness_timeout_s=60.0)
    with WorkerClient(workdir=tmp_path_factory.mktemp("worker"), settings=settings) as c:
        yield c


def _original(spec: KernelSpec) -> Candidate:
    return Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=spec.module_source,
        knobs=dict(spec.baseline_knobs),
        provenance=Provenance.ORIGINAL,
    )


def test_int8_outputs_are_poisoned_within_range(
    client: WorkerClient, write_entry: WriteEntry
) -> None:
    # The second call's poison was 7776, which int8 cannot hold: every int8 kernel that
    # allocates its output with torch.empty* ended as a runtime error.
    yaml = ADD_YAML.format(name="add-int8").replace("[float16, float32]", "[int8, int32]")
    spec = load_entry(write_entry("add_int8", yaml=yaml))
    result = client.evaluate(spec, _original(spec))
    assert result.outcome is Outcome.OK, result.reason


FP8_SOURCE = ADD_SOURCE.replace(
    "out = torch.empty_like(x)", "out = torch.empty(x.shape, dtype=torch.float8_e4m3fn)"
).replace("x + y, mask=mask)", "(x + y).to(out_ptr.dtype.element_ty), mask=mask)")


def test_float8_outputs_are_poisoned_within_range(
    client: WorkerClient, write_entry: WriteEntry
) -> None:
    # gemlite's scale_activations_mxfp8: the sentinel 7776 overflows float8_e4m3fn (max 448),
    # and the original itself failed at `fill_` ("cannot be converted ... without overflow").
    yaml = ADD_YAML.format(name="add-fp8").replace("reference: reference\n", "")
    spec = load_entry(write_entry("add_fp8", source=FP8_SOURCE, yaml=yaml))
    result = client.evaluate(spec, _original(spec))
    assert result.outcome is Outcome.OK, result.reason


def test_unwritten_float8_elements_are_seen() -> None:
    import torch

    from tuned.evaluation.checks import unwritten_elements
    from tuned.evaluation.guard import poison_sentinel

    dtype = torch.float8_e4m3fn
    first = torch.full((4,), float("nan")).to(dtype)
    second = torch.full((4,), poison_sentinel(dtype)).to(dtype)
    first[:2] = second[:2] = 1.0
    assert unwritten_elements(first, second) == (
        "output 0: 2/4 elements never written (poisoned memory survived the call), first at (2,)"
    )
    assert poison_sentinel(torch.float16) == 7776.0


HELPER_ENTRY = ADD_SOURCE.replace("import torch\n", "import torch\nimport helpers\n", 1).replace(
    "    return out\n", "    return helpers.finish(out)\n", 1
)


@pytest.mark.parametrize("order", ["doubling_first", "identity_first"])
def test_entries_with_namesake_helpers_do_not_collide(
    client: WorkerClient, write_entry: WriteEntry, tmp_path: Path, order: str
) -> None:
    specs = []
    for name, finish, reference in (
        ("identity", "out", "x + y"),
        ("doubling", "out * 2", "(x + y) * 2"),
    ):
        source = HELPER_ENTRY.replace("return x + y", f"return {reference}")
        directory = write_entry(f"{name}_{order}", source=source, root=tmp_path / order)
        (directory / "helpers.py").write_text(f"def finish(out):\n    return {finish}\n")
        specs.append(load_entry(directory))
    if order == "doubling_first":
        specs.reverse()
    # One worker evaluates both: each entry's `import helpers` must find its own helpers.py.
    for spec in specs:
        result = client.evaluate(spec, _original(spec))
        assert result.outcome is Outcome.OK, f"{spec.name}: {result.reason}"


def test_status_says_the_original_failed(tmp_path: Path, write_entry: WriteEntry) -> None:
    broken = ADD_SOURCE.replace("out = torch.empty_like(x)", "raise RuntimeError('boom')")
    directory = write_entry("broken", source=broken)
    state = tmp_path / "state"
    run = ktuned("tune", directory, "--budget", "2", state=state)
    assert run.returncode == 0, run.stderr
    status = ktuned("status", state=state)
    assert status.returncode == 0, status.stderr
    row = next(line for line in status.stdout.splitlines() if line.startswith("broken"))
    assert "none" not in row.split("  ")[-1]
    assert "the original failed: runtime_error" in row and "boom" in row
    # where it raised, as a line of the module's copy: not the copy's path inside the sandbox
    assert "ktuned_candidate_" not in row and "of ktuned's copy of its module, in add)" in row
    # `best` says why there is none, rather than to run a tune that has run
    best = ktuned("best", "broken", state=state)
    assert best.returncode != 0
    assert "the original failed: runtime_error" in best.stderr and "boom" in best.stderr
    assert "run `ktuned tune` first" not in best.stderr, best.stderr
