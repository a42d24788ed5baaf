# expect: cheat: no Triton kernel of the candidate launched with work
"""Computes with PyTorch and launches its Triton kernel over an empty grid."""
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


def add(x, y, BLOCK=256, num_warps=4):
    out = torch.add(x, y)
    _add[(0,)](x, y, out, x.numel(), BLOCK=BLOCK)
    return out
