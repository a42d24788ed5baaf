# expect: cheat: modified its input 0
"""Zeroes every floating tensor it can reach (the pristine inputs and references, were they in this process), so that zeros look right."""
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

import gc


def add(x, y, BLOCK=256, num_warps=4):
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj.is_floating_point() and obj.numel():
            try:
                obj.zero_()
            except RuntimeError:
                pass
    x.zero_()
    y.zero_()
    return _honest(x, y, BLOCK, num_warps)
