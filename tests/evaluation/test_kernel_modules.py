"""How the worker calls an entry (tuned.evaluation.invoke): which modules' Triton launches
count as a candidate's own, and what the launcher standing in as the reference gives."""

from __future__ import annotations

import types

import torch
import triton
import triton.language as tl

import tests.fixtures.foreign_kernels as kernels_module
from tuned.evaluation.invoke import kernel_modules


def test_kernels_bound_by_name_or_through_their_module_count_and_tritons_own_do_not() -> None:
    module = types.ModuleType("user_ops")
    module.torch, module.triton, module.tl = torch, triton, tl  # type: ignore[attr-defined]
    assert kernel_modules(None, module) == {"user_ops"}  # tl.sum, tl.cdiv are @jit: not kernels
    module._fwd = kernels_module._add_elsewhere  # type: ignore[attr-defined]
    assert kernel_modules(None, module) == {"user_ops", kernels_module.__name__}
    plain = types.ModuleType("plain_ops")
    plain.K = kernels_module  # type: ignore[attr-defined]
    assert kernel_modules(None, plain) == {"plain_ops", kernels_module.__name__}
    helper = types.ModuleType("helper_ops")
    helper.add = kernels_module.add_elsewhere  # type: ignore[attr-defined]  # a launcher: no
    assert kernel_modules(None, helper) == {"helper_ops"}


def test_the_launcher_as_reference_gives_what_it_wrote_like_the_launcher() -> None:
    """Liger's JSD primitive writes its gradient into an argument and returns the loss beside
    it (``outputs: [student_prob]`` declared): the launcher's outputs are what it wrote, and
    the launcher standing in as the reference gave what it returned, two outputs against one
    ("returned 1 outputs, the reference 2"). An entry's own reference may still return its
    outputs."""
    from tuned.evaluation.invoke import entry_call

    module = types.ModuleType("inplace_ops")

    def launch(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x.mul_(2)
        return y.sum(), x

    def own(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * 2

    module.launch, module.own = launch, own  # type: ignore[attr-defined]
    kernel = {"launcher": "launch", "call": {"outputs": ["x"]}}
    x, y = torch.ones(3), torch.ones(3)
    as_launcher = entry_call(module, kernel, role="launcher").at()(x, y)
    as_reference = entry_call(module, kernel, role="reference").at()(x, y)
    assert len(as_launcher) == len(as_reference) == 1
    torch.testing.assert_close(as_reference[0], as_launcher[0])
    torch.testing.assert_close(as_reference[0], torch.full((3,), 2.0))
    assert torch.equal(x, torch.ones(3))  # fresh copies were written, not the caller's
    theirs = entry_call(module, {**kernel, "reference": "own"}, role="reference").at()(x, y)
    torch.testing.assert_close(theirs[0], torch.full((3,), 2.0))
