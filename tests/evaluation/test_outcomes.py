"""Every outcome of an evaluation, produced by a real (deliberately broken) Triton kernel."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ADD_SOURCE, WriteEntry
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.evaluation.sandbox import WORKDIR
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import KernelSpec, load_entry

# (name, edit of the source as (old, new), knobs, expected outcome, expected phase)
BROKEN = [
    ("ok", None, {"BLOCK": 128}, Outcome.OK, ""),
    ("syntax", ("def add(", "def add(("), {}, Outcome.REJECTED_STATIC, "static"),
    ("no_launcher", ("def add(", "def plus("), {}, Outcome.REJECTED_STATIC, "static"),
    ("non_power_of_two_block", None, {"BLOCK": 100}, Outcome.COMPILE_ERROR, "compile"),
    (
        "raises",
        ("out = torch.empty_like(x)", "raise RuntimeError('boom')"),
        {},
        Outcome.RUNTIME_ERROR,
        "compile",
    ),
    (
        "import_error",
        ("import torch\n", "import torch\nimport no_such_module\n"),
        {},
        Outcome.RUNTIME_ERROR,
        "load",
    ),
    (
        "wrong_result",
        ("x + y, mask=mask)", "x - y, mask=mask)"),
        {},
        Outcome.INCORRECT,
        "correctness",
    ),
    (
        "off_by_one",
        ("mask = offs < n", "mask = offs < n - 1"),
        {},
        Outcome.INCORRECT,
        "correctness",
    ),
    (
        "nan",
        ("x + y, mask=mask)", "(x + y) * float('nan'), mask=mask)"),
        {},
        Outcome.NAN,
        "correctness",
    ),
    (
        "aborts",
        ("out = torch.empty_like(x)", "import os; os.abort()"),
        {},
        Outcome.CRASH,
        "compile",
    ),
    (
        "hangs",
        ("out = torch.empty_like(x)", "import time; time.sleep(3600)"),
        {},
        Outcome.TIMEOUT,
        "compile",
    ),
    (
        "hangs_in_kernel",
        ("mask = offs < n", "mask = offs < n\n    while n > 0:\n        n = n + 1"),
        {},
        Outcome.TIMEOUT,
        "compile",
    ),
    (
        "mutates_input",
        ("return out", "x.add_(1)\n    return out"),
        {},
        Outcome.CHEAT,
        "correctness",
    ),
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerClient]:
    settings = EvaluationSettings(
        interpreter=True,
        compile_timeout_s=6.0,
        correctness_timeout_s=20.0,
        benchmark_timeout_s=20.0,
    )
    with WorkerClient(workdir=tmp_path_factory.mktemp("worker"), settings=settings) as c:
        yield c


@pytest.fixture
def spec(write_entry: WriteEntry) -> KernelSpec:
    return load_entry(write_entry())


def _candidate(spec: KernelSpec, source: str, knobs: dict[str, int]) -> Candidate:
    return Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=source,
        knobs=knobs,
        provenance=Provenance.PARAMETRIC,
    )


@pytest.mark.parametrize(
    ("name", "edit", "knobs", "outcome", "phase"), BROKEN, ids=[b[0] for b in BROKEN]
)
def test_each_outcome(
    client: WorkerClient,
    spec: KernelSpec,
    name: str,
    edit: tuple[str, str] | None,
    knobs: dict[str, int],
    outcome: Outcome,
    phase: str,
) -> None:
    source = ADD_SOURCE
    if edit is not None:
        assert edit[0] in source, "the test's edit no longer applies"
        source = source.replace(edit[0], edit[1])
    result = client.evaluate(spec, _candidate(spec, source, knobs))
    assert result.outcome is outcome, result.reason
    assert result.phase == phase
    if outcome is Outcome.OK:
        assert result.time_s is not None and result.time_s > 0
        assert result.timing_kind == "interpreter"
        # (2 declared + 1 derived shape: N=9) x dtypes x seeds
        assert result.checked_cases == 3 * 2 * 2
    else:
        assert result.time_s is None
        assert result.reason


def test_a_crash_ends_the_runner_not_the_worker(client: WorkerClient, spec: KernelSpec) -> None:
    """The candidate's code runs in a runner process: its abort is a ``crash`` the judge
    reports (naming the signal), and the worker (the judge) goes on with a fresh runner."""
    crash = ADD_SOURCE.replace("out = torch.empty_like(x)", "import os; os.abort()")
    assert client.evaluate(spec, _candidate(spec, ADD_SOURCE, {})).outcome is Outcome.OK
    starts = client.starts
    crashed = client.evaluate(spec, _candidate(spec, crash, {}))
    assert crashed.outcome is Outcome.CRASH
    assert "runner was killed by SIGABRT" in crashed.reason
    result = client.evaluate(spec, _candidate(spec, ADD_SOURCE, {"BLOCK": 512}))
    assert result.outcome is Outcome.OK
    assert client.starts == starts


def test_failure_reason_names_the_case_and_the_check(
    client: WorkerClient, spec: KernelSpec
) -> None:
    wrong = ADD_SOURCE.replace("x + y, mask=mask)", "x - y, mask=mask)")
    result = client.evaluate(spec, _candidate(spec, wrong, {}))
    assert result.reason.startswith("N=3000/float16 seed 0: ")
    assert "outside atol=0.01" in result.reason
    off_by_one = ADD_SOURCE.replace("mask = offs < n", "mask = offs < n - 1")
    result = client.evaluate(spec, _candidate(spec, off_by_one, {}))
    assert "1/3000 elements never written" in result.reason
    assert "first at (2999,)" in result.reason


def test_candidate_prints_do_not_break_the_protocol(client: WorkerClient, spec: KernelSpec) -> None:
    noisy = ADD_SOURCE.replace("return out", 'print("{\\"type\\": \\"result\\"}")\n    return out')
    assert client.evaluate(spec, _candidate(spec, noisy, {})).outcome is Outcome.OK


def test_secrets_never_reach_the_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spec: KernelSpec
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("KTUNED_LLM_TOKEN", "secret")
    probe = ADD_SOURCE.replace(
        "out = torch.empty_like(x)",
        "import os\n    assert not [k for k in os.environ if 'KEY' in k or 'TOKEN' in k], "
        "sorted(os.environ)\n    assert os.environ['TRITON_CACHE_DIR'] == "
        # its own cache, at the sandbox's path of the worker's directory (docs/security.md)
        f"{WORKDIR + '/triton-cache'!r}\n    out = torch.empty_like(x)",
    )
    settings = EvaluationSettings(interpreter=True)
    with WorkerClient(workdir=tmp_path / "w", settings=settings) as c:
        result = c.evaluate(spec, _candidate(spec, probe, {}))
    assert result.outcome is Outcome.OK, result.reason


def test_reference_defaults_to_the_original_launcher(
    client: WorkerClient, write_entry: WriteEntry
) -> None:
    yaml = (Path(write_entry()) / "kernel.yaml").read_text().replace("reference: reference\n", "")
    spec = load_entry(write_entry(name="noref", yaml=yaml.replace("name: add", "name: noref")))
    assert spec.reference is None
    assert client.evaluate(spec, _candidate(spec, ADD_SOURCE, {"BLOCK": 64})).outcome is Outcome.OK
    wrong = ADD_SOURCE.replace("x + y, mask=mask)", "x - y, mask=mask)")
    assert client.evaluate(spec, _candidate(spec, wrong, {})).outcome is Outcome.INCORRECT


def test_derived_shapes_catch_a_kernel_right_only_at_declared_sizes(
    client: WorkerClient, write_entry: WriteEntry
) -> None:
    from tuned.evaluation.shapes import derive_shapes

    yaml = (
        "name: even\nmodule: add.py\nlauncher: add\nreference: reference\ninputs: make_inputs\n"
        "shapes:\n  - {N: 4096, perf: true}\n  - {N: 64}\ndtypes: [float32]\n"
        "knobs:\n  BLOCK: [64, 128]\n"
    )
    spec = load_entry(write_entry(name="even", yaml=yaml))
    assert [s.dims["N"] for s in derive_shapes(spec.shapes)] == [65, 65 + 64]
    # Right whenever N is a multiple of 64 (every declared shape); the tail is never written.
    tail_less = ADD_SOURCE.replace("out, n, BLOCK=BLOCK", "out, n - n % 64, BLOCK=BLOCK")
    assert tail_less != ADD_SOURCE
    result = client.evaluate(spec, _candidate(spec, tail_less, {"BLOCK": 64}))
    assert result.outcome is Outcome.INCORRECT
    assert result.reason.startswith("derived shape N=65/float32 seed 0: ")
    assert "never written" in result.reason
    # The original passes its derived shapes; a shape the original fails is dropped, not failed.
    ok = client.evaluate(spec, _candidate(spec, ADD_SOURCE, {"BLOCK": 64}))
    assert ok.outcome is Outcome.OK and ok.checked_cases == (2 + 2) * 2
    lenient = client.evaluate(
        spec, _candidate(spec, tail_less, {"BLOCK": 64}), lenient_derived=True
    )
    assert lenient.outcome is Outcome.OK
    assert lenient.metadata["derived_unusable"] == ["N=129/float32", "N=65/float32"]
    skipped = client.evaluate(
        spec,
        _candidate(spec, tail_less, {"BLOCK": 64}),
        derived_skip=["N=65/float32", "N=129/float32"],
    )
    assert skipped.outcome is Outcome.OK


def test_an_exception_names_the_line_that_raised(client: WorkerClient, spec: KernelSpec) -> None:
    """A launcher's own ``assert`` (or any exception in it) names its file, line and
    function, not only its type: the user sees where their code (or a library's) gave up."""
    source = ADD_SOURCE.replace(
        "out = torch.empty_like(x)", "assert x.numel() < 0, 'needs a negative size'"
    )
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "needs a negative" in text)
    result = client.evaluate(spec, _candidate(spec, source, {}))
    assert result.outcome is Outcome.RUNTIME_ERROR, result.reason
    assert "AssertionError: needs a negative size (at " in result.reason, result.reason
    assert f":{line} in add)" in result.reason, result.reason


def test_an_op_whose_kernels_live_in_another_module_names_that_module(
    client: WorkerClient, spec: KernelSpec
) -> None:
    """An op that calls a launcher of another module (a library's kernel layer) launches no
    kernel of its own: refused, with the module whose kernels did run, so the user knows
    which launcher to register."""
    op = ADD_SOURCE.replace(
        "import triton.language as tl\n",
        "import triton.language as tl\nfrom tests.fixtures.foreign_kernels import add_elsewhere\n",
    ).replace(
        "    out = torch.empty_like(x)\n    n = x.numel()\n"
        "    _add[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK, num_warps=num_warps)\n"
        "    return out\n",
        "    return add_elsewhere(x, y)\n",
    )
    assert "return add_elsewhere(x, y)" in op
    result = client.evaluate(spec, _candidate(spec, op, {}))
    assert result.outcome is Outcome.CHEAT, result.reason
    assert "it launched kernels of tests.fixtures.foreign_kernels" in result.reason, result.reason
    assert "register the function there that launches them" in result.reason


def test_an_op_launching_kernels_it_imports_from_a_kernels_module_launches_its_own(
    client: WorkerClient, spec: KernelSpec
) -> None:
    """Libraries keep kernels in one module and launch them from another (``from .kernels
    import _fwd`` then ``_fwd[grid](...)``): the launch is the op's own, and its knobs were
    discovered, yet every such original was refused as launching no kernel of its own."""
    op = ADD_SOURCE.replace(
        "import triton.language as tl\n",
        "import triton.language as tl\n"
        "from tests.fixtures.foreign_kernels import _add_elsewhere as _imported\n",
    ).replace("    _add[(triton.cdiv(n, BLOCK),)]", "    _imported[(triton.cdiv(n, BLOCK),)]")
    assert "    _imported[(" in op
    result = client.evaluate(spec, _candidate(spec, op, {"BLOCK": 128}))
    assert result.outcome is Outcome.OK, result.reason
    # and through the kernels module bound by name: `import pkg.kernels as K`, `K._fwd[grid]`
    through = op.replace(
        "from tests.fixtures.foreign_kernels import _add_elsewhere as _imported\n",
        "import tests.fixtures.foreign_kernels as K\n",
    ).replace("    _imported[(", "    K._add_elsewhere[(")
    assert "    K._add_elsewhere[(" in through
    result = client.evaluate(spec, _candidate(spec, through, {"BLOCK": 64}))
    assert result.outcome is Outcome.OK, result.reason


def test_a_candidate_far_slower_than_its_original_in_a_phase_times_out_early(
    tmp_path: Path, spec: KernelSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the H200 a knob variant of Liger's RMSNorm backward kept ptxas busy for over 190 s
    of its correctness phase (deadline 300 s) where the original took 5 s. A candidate's phase
    now ends at ten times its original's (at least ``RELATIVE_FLOOR_S``, 60 s; here 2 s)."""
    from tuned.evaluation import client as client_module

    monkeypatch.setattr(client_module, "RELATIVE_FLOOR_S", 2.0)
    settings = EvaluationSettings(interpreter=True, compile_timeout_s=300.0)
    hangs = ADD_SOURCE.replace("out = torch.empty_like(x)", "import time; time.sleep(3600)")
    with WorkerClient(workdir=tmp_path / "w", settings=settings) as c:
        original = Candidate(
            kernel=spec.name,
            generation=spec.generation,
            source=spec.module_source,
            knobs={},
            provenance=Provenance.ORIGINAL,
        )
        assert c.evaluate(spec, original).outcome is Outcome.OK
        took = c.original_phases[spec.name]["compile"]
        limit = max(2.0, 10 * took)
        assert limit < 300
        started = time.monotonic()
        result = c.evaluate(spec, _candidate(spec, hangs, {}))
        assert result.outcome is Outcome.TIMEOUT and result.phase == "compile", result
        assert time.monotonic() - started < limit + 60  # not the phase's 300 s
        assert f"the original's {took:.1f} s x 10" in result.reason
        # An original is bound by the settings' deadlines only.
        assert c.deadline("compile") == (300.0, "its")
