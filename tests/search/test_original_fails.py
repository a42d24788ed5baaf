"""The note of a campaign whose original does not run says where to look."""

from __future__ import annotations

from tuned.outcomes import Outcome
from tuned.search.campaign import original_fails

SITE = "/home/u/.venv/lib/python3.11/site-packages"


def test_a_failure_inside_an_installed_package_names_it_not_the_entry() -> None:
    """flash-linear-attention's ``@input_guard`` fails on a CPU build of PyTorch (``module
    'torch.cpu' has no attribute 'device'``): "fix the entry" sent the user to an entry with
    nothing wrong in it."""
    reason = (
        "compile: AttributeError: module 'torch.cpu' has no attribute 'device' "
        f"(at {SITE}/fla/utils.py:455 in custom_device_ctx)"
    )
    note = original_fails(Outcome.RUNTIME_ERROR, reason)
    assert "fix the entry" not in note
    assert "inside the installed package fla (fla/utils.py:455 in custom_device_ctx)" in note
    assert "check that fla runs here as installed" in note
    assert reason in note


def test_a_failure_in_the_entry_or_in_torch_still_says_fix_the_entry() -> None:
    for reason in (
        "compile: TypeError: bad (at /reg/e/entry.py:15 in rand)",
        f"compile: RuntimeError: shape mismatch (at {SITE}/torch/nn/functional.py:10 in f)",
        "compile: ValueError: no location",
    ):
        note = original_fails(Outcome.RUNTIME_ERROR, reason)
        assert note.endswith("fix the entry, nothing was tuned"), note


def test_no_driver_at_import_is_told_apart_from_an_autotuner_benchmarking() -> None:
    """Module-level ``triton.runtime.driver.active.get_active_torch_device()`` (as Triton's
    own tutorials have) raises "0 active drivers" while the worker imports the module: the
    note said the autotuner could not benchmark its configs, which the module may not have."""
    reason = "RuntimeError: 0 active drivers ([]). There should only be one.\n"
    at_import = original_fails(Outcome.RUNTIME_ERROR, reason, "load")
    assert "while its module is imported" in at_import and "__main__" in at_import
    assert "autotuner" not in at_import
    later = original_fails(Outcome.RUNTIME_ERROR, reason, "compile")
    assert "autotuner with several configs" in later


def test_a_module_that_fails_to_import_is_told_so_on_one_line() -> None:
    """A module that raises while it is imported (``from torch._C import
    _cuda_getCurrentRawStream`` on a CPU build): the note said "fix the entry", and the
    reason's trailing newline split the status table's row before its closing parenthesis."""
    reason = (
        "ImportError: cannot import name '_cuda_getCurrentRawStream' from 'torch._C' "
        "(at /reg/e/ktuned_candidate_1.py:5 in <module>)\n"
    )
    note = original_fails(Outcome.RUNTIME_ERROR, reason, "load")
    assert "while its module is imported: make the module importable here" in note, note
    assert "fix the entry" not in note and "\n" not in note, note


def test_a_place_in_a_workers_copy_is_said_as_a_line_of_the_module() -> None:
    """Nearly every original that failed in a TritonBench-G run was said to fail at
    ``/ktuned/modules/judge/entry_<hash>/ktuned_candidate_<hash>.py:90``: a path inside the
    sandbox, which nobody can open; the module it is a copy of is named instead."""
    reason = (
        "compile: IndexError: tuple index out of range (at /ktuned/modules/judge/entry_40484"
        "9917f517a85/ktuned_candidate_4799f53194bd1855.py:90 in forward)"
    )
    note = original_fails(Outcome.RUNTIME_ERROR, reason, "compile", "pkg.attention_fwd")
    assert "ktuned_candidate_" not in note and "/ktuned/modules" not in note, note
    assert "(at line 90 of ktuned's copy of pkg.attention_fwd, in forward)" in note, note
    assert note.endswith("fix the entry, nothing was tuned"), note
    site = f"compile: AttributeError: x (at {SITE}/fla/utils.py:455 in custom_device_ctx)"
    assert "fla/utils.py:455" in original_fails(Outcome.RUNTIME_ERROR, site, "compile", "m")


def test_the_interpreters_scalar_limit_is_not_the_entrys_fault() -> None:
    """flash-linear-attention's chunked kernels (and Liger's) fail in Triton's interpreter on
    a Python int or float argument used as a tensor; a GPU compiles them. "fix the entry"
    sent the user to an entry with nothing wrong in it."""
    for kind in ("int", "float"):
        reason = (
            f"compile: InterpreterError: AttributeError: '{kind}' object has no attribute 'to' "
            f"(at {SITE}/fla/ops/common/chunk_h.py:97 in chunk_fwd_kernel_h)"
        )
        note = original_fails(Outcome.COMPILE_ERROR, reason)
        assert "fix the entry" not in note and "known limit of Triton's interpreter" in note
        assert "tune this entry on a GPU" in note and reason in note
