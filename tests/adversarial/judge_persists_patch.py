# expect: incorrect: elements outside atol
"""Disables the runner's own checks (guard check, output inspection) for itself and every later candidate of this process, then returns garbage."""
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _honest(x, y, BLOCK, num_warps):
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    return out

import tuned.evaluation.runner as runner

runner.Runner.check = lambda self, guard, need_launch: None
runner.plain_problem = lambda tensor: None


def add(x, y, BLOCK=256, num_warps=4):
    _honest(x, y, BLOCK, num_warps)
    return x * 5
