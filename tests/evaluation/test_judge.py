"""The judge and its runners: verdicts outside the candidate's process (issue 21, items 1, 4).

Real processes throughout: a worker (the judge) started by the client, runners forked by its
zygote, tensors through real shared memory, Triton kernels in the interpreter.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.conftest import ADD_SOURCE, ADD_YAML, WriteEntry, has_gpu
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.evaluation.checks import CaseFailure
from tuned.evaluation.guard import launch_has_work
from tuned.evaluation.runner import plain_problem
from tuned.evaluation.runners import RunnerPool
from tuned.evaluation.shm import Arena, MappedArena, plan
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import KernelSpec, load_entry

CORPUS = Path(__file__).resolve().parents[1] / "adversarial"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerClient]:
    settings = EvaluationSettings(
        interpreter=True,
        load_timeout_s=15.0,
        compile_timeout_s=15.0,
        correctness_timeout_s=30.0,
        benchmark_timeout_s=30.0,
    )
    with WorkerClient(workdir=tmp_path_factory.mktemp("worker"), settings=settings) as c:
        yield c


@pytest.fixture
def spec(write_entry: WriteEntry) -> KernelSpec:
    return load_entry(write_entry())


def _candidate(spec: KernelSpec, source: str, knobs: dict[str, int] | None = None) -> Candidate:
    return Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=source,
        knobs=knobs or {},
        provenance=Provenance.PARAMETRIC,
    )


# ----------------------------------------------------------------------------- shared memory


def test_the_arena_carries_inputs_and_outputs_between_two_mappings() -> None:
    """The judge's side writes, the runner's side (its own mmap of the same memfd) sees the
    same bytes, and what the runner writes into an output place the judge reads back."""
    x = torch.randn(7, 5, dtype=torch.float16)
    strided = torch.randn(6, 4)[:, ::2]  # odd strides: kept as they are
    ref = (torch.zeros(3, dtype=torch.float32), 2.5)
    inputs, outputs, size = plan([x, strided, 3, None], ref)
    judge = Arena("cpu")
    message = judge.ensure(size)
    assert message is not None and message["size"] >= size
    judge.write(inputs, [x, strided, 3, None])
    runner = MappedArena(os.dup(judge.fd))
    runner.remap(message)
    seen = [runner.value(p) for p in inputs]
    assert torch.equal(seen[0], x) and torch.equal(seen[1], strided)
    assert seen[1].stride() == strided.stride()
    assert seen[2:] == [3, None]
    assert outputs[1] is None  # a non-tensor reference output has no place
    judge.poison(outputs)
    assert torch.isnan(judge.read(outputs[0])).all()
    runner.view(outputs[0]).copy_(torch.arange(3.0))
    assert torch.equal(judge.read(outputs[0]), torch.arange(3.0))
    assert runner.owner_of(seen[1][1:], inputs) == 1  # a view of input 1 is found as such
    assert runner.owner_of(torch.zeros(3), inputs) is None
    seen[0].zero_()  # the runner writing an input is seen by the judge
    assert judge.changed_input(inputs, [x, strided, 3, None]) == 0
    judge.close()


def test_a_dtype_argument_reaches_the_runner() -> None:
    """A quantizer's ``dequantize(A, absmax, dtype, out)``: a ``torch.dtype`` input was
    refused ("input 2 is a dtype; inputs must be tensors or plain scalars")."""
    x = torch.zeros(4, dtype=torch.uint8)
    inputs, _, size = plan([x, torch.bfloat16, torch.float8_e4m3fn], torch.zeros(4))
    judge = Arena("cpu")
    message = judge.ensure(size)
    assert message is not None
    judge.write(inputs, [x, torch.bfloat16, torch.float8_e4m3fn])
    runner = MappedArena(os.dup(judge.fd))
    runner.remap(message)
    assert [runner.value(p) for p in inputs[1:]] == [torch.bfloat16, torch.float8_e4m3fn]
    judge.close()


def test_a_tuple_or_list_of_scalars_reaches_the_runner_as_such() -> None:
    """``layer_norm(x, normalized_shape)`` with ``normalized_shape=(D,)``, as ``registry add``
    writes it: the tuple was refused ("input 1 is a tuple"), so the entry it wrote failed as
    the original on the H200. Only plain scalars, and not too many of them."""
    x = torch.zeros(4)
    values = [x, (4,), [3, 3], ("a", 1.5, None, True)]
    inputs, _, size = plan(values, torch.zeros(4))
    judge = Arena("cpu")
    message = judge.ensure(size)
    assert message is not None
    runner = MappedArena(os.dup(judge.fd))
    runner.remap(message)
    assert [runner.value(p) for p in inputs[1:]] == values[1:]
    assert [type(runner.value(p)) for p in inputs[1:]] == [tuple, list, tuple]
    judge.close()
    for bad in ((torch.zeros(2),), (float("nan"),), tuple(range(65)), ((1, 2),)):
        with pytest.raises(CaseFailure, match="input 1 is a"):
            plan([x, bad], torch.zeros(4))


def test_an_entry_passing_a_shape_tuple_is_evaluated(
    client: WorkerClient, write_entry: WriteEntry
) -> None:
    """End to end: the launcher takes ``shape=(N,)`` and checks it, as a layer norm checks
    its ``normalized_shape``; a wrong kernel still fails."""
    source = ADD_SOURCE.replace(
        "def add(x, y, BLOCK=256, num_warps=4):\n",
        "def add(x, y, shape, BLOCK=256, num_warps=4):\n"
        "    assert isinstance(shape, tuple) and shape == tuple(x.shape), shape\n",
    )
    source = source.replace(
        "return x.to(device), y.to(device)", "return x.to(device), y.to(device), tuple(x.shape)"
    ).replace("def reference(x, y):", "def reference(x, y, shape):")
    assert "tuple(x.shape)\n" in source and "reference(x, y, shape)" in source
    spec = load_entry(write_entry(source=source))
    result = client.evaluate(spec, _candidate(spec, source, {"BLOCK": 128}))
    assert result.outcome is Outcome.OK, result.reason
    wrong = source.replace("x + y, mask=mask", "x - y, mask=mask")
    assert client.evaluate(spec, _candidate(spec, wrong, {"BLOCK": 128})).outcome is (
        Outcome.INCORRECT
    )


def test_plain_problem_names_what_is_not_a_plain_dense_tensor() -> None:
    class Lazy(torch.Tensor):
        pass

    assert plain_problem(torch.zeros(4)) is None
    assert plain_problem(torch.zeros(4, 3).t()) is None  # a permutation is dense
    assert "subclass" in str(plain_problem(torch.zeros(4).as_subclass(Lazy)))
    assert "no real storage" in str(plain_problem(torch.empty(4, device="meta")))
    assert "not dense" in str(plain_problem(torch.zeros(8)[::2]))
    assert "not dense" in str(plain_problem(torch.zeros(1).expand(4)))
    assert "lazy" in str(plain_problem(torch.zeros(3, dtype=torch.complex64).conj()))


def test_a_launch_counts_only_with_work() -> None:
    class Kernel:
        arg_names = ("x_ptr", "out_ptr", "n_elements", "BLOCK_SIZE")

    x = torch.zeros(16)
    assert launch_has_work(Kernel(), (x, x, 16), {"grid": (1,), "BLOCK_SIZE": 16})
    assert not launch_has_work(Kernel(), (x, x, 0), {"grid": (1,), "BLOCK_SIZE": 16})
    assert not launch_has_work(Kernel(), (x, x, 16), {"grid": (0,), "BLOCK_SIZE": 16})
    empty = torch.zeros(0)
    assert not launch_has_work(Kernel(), (empty, empty, 16), {"grid": (1,)})


# ----------------------------------------------------------------------------- runners


def test_the_own_runner_is_reused_and_a_fresh_one_never_is(tmp_path: Path) -> None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    pool = RunnerPool(tmp_path / "runners", "cpu")
    try:
        own = pool.own()
        own.request({"op": "ping"}, "load")
        pool.release(own, reusable=True)
        assert pool.own() is own and own.alive
        fresh = pool.fresh()
        fresh.request({"op": "ping"}, "load")
        assert fresh.pid != own.pid
        pool.release(fresh, reusable=True)  # never kept, whatever the caller says
        assert not fresh.alive
        with pytest.raises(ProcessLookupError):
            os.kill(fresh.pid, 0)  # ended and reaped
        pool.release(own, reusable=False)  # after a failure: the own runner goes too
        assert not own.alive and pool.own() is not own
    finally:
        pool.close()


def test_the_own_runner_outlives_a_knob_variant_judged_incorrect(
    client: WorkerClient, write_entry: WriteEntry
) -> None:
    """An incorrect or NaN verdict is the judge's, on outputs the runner returned as asked:
    the own runner (the user's source only) stays, and the next knob variant runs in it. On
    the H200 a new one cost each candidate after such a verdict 11-12 s (its CUDA context,
    Liger's imports)."""
    one_program = ADD_SOURCE.replace("_add[(triton.cdiv(n, BLOCK),)]", "_add[(1,)]")
    yaml = ADD_YAML.replace("[64, 128, 256, 512, 1024]", "[64, 4096]")
    spec = load_entry(write_entry("one", one_program, yaml.format(name="one")))
    assert client.evaluate(spec, _candidate(spec, one_program, {"BLOCK": 4096})).outcome is (
        Outcome.OK
    )
    before = client.process_ids()
    short = client.evaluate(spec, _candidate(spec, one_program, {"BLOCK": 64}))
    assert short.outcome in (Outcome.INCORRECT, Outcome.NAN), short.reason  # 64 of 3000 written
    assert client.process_ids() == before  # no runner ended
    again = client.evaluate(spec, _candidate(spec, one_program, {"BLOCK": 4096}))
    assert again.outcome is Outcome.OK
    assert client.process_ids() == before  # and none started


@pytest.mark.slow
def test_a_compromise_does_not_reach_later_candidates(
    client: WorkerClient, spec: KernelSpec
) -> None:
    """judge_persists_patch disables the runner's own checks in its process; the candidates
    after it, in the same worker, are still caught by them (each ran in a fresh runner)."""
    hostile = (CORPUS / "judge_persists_patch.py").read_text()
    assert client.evaluate(spec, _candidate(spec, hostile)).outcome is Outcome.INCORRECT
    no_kernel = ADD_SOURCE.replace(
        "_add[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK, num_warps=num_warps)",
        "out.copy_(x + y)",
    )
    assert no_kernel != ADD_SOURCE
    result = client.evaluate(spec, _candidate(spec, no_kernel))
    assert result.outcome is Outcome.CHEAT and "no Triton kernel" in result.reason
    subclass = ADD_SOURCE.replace("return out", "return out.as_subclass(Lazy)").replace(
        "def add(", "class Lazy(torch.Tensor):\n    pass\n\n\ndef add("
    )
    result = client.evaluate(spec, _candidate(spec, subclass))
    assert result.outcome is Outcome.CHEAT and "subclass" in result.reason
    good = client.evaluate(spec, _candidate(spec, ADD_SOURCE, {"BLOCK": 512}))
    assert good.outcome is Outcome.OK


@pytest.mark.slow
def test_timed_calls_get_inputs_no_runner_saw_during_correctness(
    client: WorkerClient, spec: KernelSpec
) -> None:
    """A candidate that notes the first element of every input it is given (into its
    TMPDIR, which it may write): the timed calls at N=3000 brought contents it was not shown
    while checked, a new set per round."""
    spy = ADD_SOURCE.replace(
        "    out = torch.empty_like(x)\n",
        "    import os\n"
        "    with open(os.path.join(os.environ['TMPDIR'], 'seen.txt'), 'a') as f:\n"
        "        f.write(f'{x.numel()} {x.dtype} {float(x[0])!r}\\n')\n"
        "    out = torch.empty_like(x)\n",
    )
    assert spy != ADD_SOURCE
    seen = Path(client.workdir) / "tmp" / "seen.txt"
    seen.unlink(missing_ok=True)
    result = client.evaluate(spec, _candidate(spec, spy))
    assert result.outcome is Outcome.OK, result.reason
    lines = [ln for ln in seen.read_text().splitlines() if ln.startswith("3000 torch.float32")]
    firsts = [ln.split()[2] for ln in lines]
    checked = 2 * 2  # 2 seeds x (NaN-poisoned call, sentinel-poisoned call)
    correctness, timed = set(firsts[:checked]), firsts[checked:]
    assert len(correctness) == 2
    rounds = client.settings.timing.interpreter_reps
    assert len(timed) == max(2, rounds)
    assert len(set(timed)) == len(timed)  # a fresh set each round
    assert not set(timed) & correctness


def test_the_benchmark_phase_says_where_its_seconds_went(
    client: WorkerClient, spec: KernelSpec
) -> None:
    """``benchmark_parts``: the timed rounds, the sets and the checks of the benchmark phase,
    each no longer than the phase (an operator reads why a candidate took the time it did)."""
    result = client.evaluate(spec, _candidate(spec, ADD_SOURCE))
    assert result.outcome is Outcome.OK, result.reason
    parts = result.metadata["benchmark_parts"]
    for name in ("benchmark.sets", "benchmark.calibrate", "benchmark.rounds", "benchmark.write"):
        assert name in parts, parts
    phase = result.phase_seconds["benchmark"]
    assert all(0 <= parts[k] <= phase + 1e-3 for k in parts if k.startswith("benchmark.")), parts
    assert parts["benchmark.write"] <= parts["benchmark.rounds"] + parts["benchmark.calibrate"]
    assert any(k.startswith("correctness.") for k in parts), parts


# ----------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize(
    "module",
    [
        None,
        "judge_view_of_input.py",
        "judge_memoises_by_address.py",
        "judge_zero_element_launch.py",
        "judge_lazy_subclass.py",
        "judge_forges_reply.py",
        "timed_outputs_stale.py",
    ],
)
def test_on_the_gpu_outputs_travel_by_cuda_ipc_and_cheats_are_caught(
    tmp_path: Path, write_entry: WriteEntry, module: str | None
) -> None:
    """The CUDA path: the arena is a CUDA tensor of the judge's, shared by CUDA IPC; timing
    replays CUDA graphs in the runner and is taken by the judge's clock."""
    spec = load_entry(write_entry())
    settings = EvaluationSettings(interpreter=False)
    with WorkerClient(workdir=tmp_path / "w", settings=settings) as client:
        source = ADD_SOURCE if module is None else (CORPUS / module).read_text()
        result = client.evaluate(spec, _candidate(spec, source, {"BLOCK": 256}))
    if module is None:
        assert result.outcome is Outcome.OK, result.reason
        assert result.timing_kind == "gpu" and result.metadata["timed_by"] == "judge"
        assert result.time_s is not None and 1e-7 < result.time_s < 1e-2
    else:
        outcome, _, fragment = source.splitlines()[0].removeprefix("# expect: ").partition(": ")
        assert result.outcome.value == outcome and fragment in result.reason, result.reason


def test_the_gpu_gate_counts_a_workers_runners_as_its_own() -> None:
    """Runners are in their worker's process group: the daemon's GPU gate must not take
    them for another user's work (tuned/daemon/gpu.py)."""
    import subprocess
    import sys

    from tuned.daemon.gpu import _ours

    leader = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.run(['sleep', '30'])"],
        start_new_session=True,
    )
    try:
        child = None
        for _ in range(200):
            out = subprocess.run(
                ["pgrep", "-P", str(leader.pid)], capture_output=True, text=True
            ).stdout.split()
            if out:
                child = int(out[0])
                break
            time.sleep(0.05)
        assert child is not None
        assert _ours(child, {leader.pid})
        assert not _ours(os.getpid(), {leader.pid})
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()
