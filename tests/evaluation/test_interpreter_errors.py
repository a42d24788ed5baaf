"""What a kernel that fails in Triton's interpreter is reported as: the failure, at its line."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tuned.evaluation.checks import CaseFailure, classify_exception, describe

# A helper that calls tl.arange with a runtime bound: the interpreter raises ValueError in
# _helper, wrapped as InterpreterError by each @triton.jit level (_helper, then _copy).
SOURCE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _helper(x_ptr, n):
    offs = tl.arange(0, n)
    return tl.load(x_ptr + offs)


@triton.jit
def _copy(x_ptr, y_ptr, n):
    tl.store(y_ptr + tl.arange(0, 16), _helper(x_ptr, n))


def copy(x):
    y = torch.empty_like(x)
    _copy[(1,)](x, y, 16)
    return y
"""


def test_an_interpreted_kernels_error_is_said_once_at_the_kernels_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triton's interpreter nests ``InterpreterError(repr(e))`` once per call level, with a
    traceback that ends at the launch: the reason was ``InterpreterError:
    InterpreterError('ValueError("arange\\'s ...")') (at the launcher's line)``, escaped
    reprs within reprs (four deep in a kernel that calls tl.randint); it is now the innermost
    exception, said once, at the kernel's line."""
    import torch

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    path = tmp_path / "interp_error_kernels.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("interp_error_kernels", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "interp_error_kernels", module)
    spec.loader.exec_module(module)
    with pytest.raises(Exception) as raised:
        module.copy(torch.zeros(16))
    assert type(raised.value).__name__ == "InterpreterError"
    failure = classify_exception(raised.value, "compile")
    assert isinstance(failure, CaseFailure) and failure.outcome == "compile_error"
    reason = str(failure)
    assert reason.startswith(
        "InterpreterError: ValueError: arange's arguments must be of type tl.constexpr"
    ), reason
    assert f"(at {path}:9 in _helper)" in reason, reason
    assert "\\\\" not in reason and reason.count("InterpreterError") == 1, reason


def test_other_errors_are_said_as_raised() -> None:
    try:
        raise KeyError("mode")
    except KeyError as exc:
        failure = classify_exception(exc, "correctness")
    assert str(failure).startswith("correctness: KeyError: 'mode' (at "), str(failure)


def test_an_import_failure_is_described_on_one_line_with_its_place() -> None:
    """What the worker records when a module raises at import: it was
    ``format_exception_only``'s text, newline-terminated and without a place."""
    try:
        raise ImportError("cannot import name '_cuda_getCurrentRawStream' from 'torch._C'")
    except ImportError as exc:
        said = describe(exc)
    assert said.startswith("ImportError: cannot import name '_cuda_getCurrentRawStream'"), said
    assert "\n" not in said and f"(at {__file__}:" in said, said
