# expect: incorrect: N=7
"""Correct only at the timed shape (N=3000): hard-codes its size."""
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x, y, BLOCK=256, num_warps=4):
    out = torch.empty_like(x)
    _add[(triton.cdiv(3000, BLOCK),)](x, y, out, 3000 if x.numel() == 3000 else 1, BLOCK=BLOCK, num_warps=num_warps)
    return out
