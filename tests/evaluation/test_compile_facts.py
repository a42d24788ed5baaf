"""Compile metadata of a candidate's kernels reaches the policy as ``Trial.metrics``.

On a GPU, ``JITFunction.run`` returns the compiled kernel; the launch hook reads its facts.
Here the compiled kernel is a stand-in with the attributes Triton's ``CompiledKernel`` has
(``n_regs``, ``n_spills``, ``metadata.shared/num_warps/num_stages``): the interpreter has none.
"""

from __future__ import annotations

from types import SimpleNamespace

from tuned.evaluation.guard import compile_facts
from tuned.evaluation.worker import summarize_compile_facts
from tuned.outcomes import EvalResult, Outcome, Provenance
from tuned.search.base import as_policy_trial
from tuned.store.base import TrialRow


def _kernel(regs: int, spills: int, shared: int, warps: int, stages: int) -> SimpleNamespace:
    meta = SimpleNamespace(shared=shared, num_warps=warps, num_stages=stages)
    return SimpleNamespace(n_regs=regs, n_spills=spills, metadata=meta)


def test_compile_facts_of_a_compiled_kernel_and_nothing_from_the_interpreter() -> None:
    assert compile_facts(_kernel(96, 0, 49152, 8, 3)) == {
        "registers": 96.0,
        "spills": 0.0,
        "shared_bytes": 49152.0,
        "num_warps": 8.0,
        "num_stages": 3.0,
    }
    assert compile_facts(None) is None  # the interpreter's run returns no compiled kernel
    assert compile_facts(SimpleNamespace(n_regs=None, metadata=None)) is None


def test_summary_keeps_the_heaviest_kernel_and_the_worst_case_resources() -> None:
    light = compile_facts(_kernel(40, 0, 0, 4, 2))
    heavy = compile_facts(_kernel(255, 12, 16384, 8, 4))
    big_smem = compile_facts(_kernel(64, 0, 98304, 4, 3))
    assert light and heavy and big_smem
    summary = summarize_compile_facts([light, heavy, big_smem])
    assert summary["registers"] == 255 and summary["spills"] == 12
    assert summary["shared_bytes"] == 98304  # the most any specialization needs
    assert summary["num_warps"] == 8 and summary["num_stages"] == 4  # of the heaviest
    assert summarize_compile_facts([]) == {}


def test_the_policy_sees_compile_metadata_and_profile_metrics_together() -> None:
    result = EvalResult(
        Outcome.OK,
        time_s=1e-4,
        timing_kind="gpu",
        metadata={"compile": {"registers": 128.0, "shared_bytes": 32768.0, "num_warps": 4.0}},
    )
    row = TrialRow(
        candidate_id="c1",
        knobs={"BLOCK": 128},
        provenance=Provenance.PARAMETRIC,
        strategy="tiling",
        parent_id=None,
        source_hash="",
        result=result,
        wall_s=1.0,
    )
    assert as_policy_trial(row).metrics == {
        "registers": 128.0,
        "shared_bytes": 32768.0,
        "num_warps": 4.0,
    }
    profiled = as_policy_trial(row, {"sol_dram": 0.8, "registers": 120.0})
    assert profiled.metrics["sol_dram"] == 0.8
    assert profiled.metrics["registers"] == 128.0  # static facts: compile metadata wins
