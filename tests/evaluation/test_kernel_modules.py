"""Which modules' Triton launches count as a candidate's own (tuned.evaluation.invoke)."""

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
