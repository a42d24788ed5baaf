# expect: cheat: do not depend on the inputs
"""Computes once per shape and returns that for any input; launches one block of its kernel with the real size each call, so the launch hook sees work."""
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


CACHE = {}


def add(x, y, BLOCK=256, num_warps=4):
    key = (tuple(x.shape), x.dtype)
    if key not in CACHE:
        out = torch.empty_like(x)
        _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
        CACHE[key] = out
    scratch = torch.empty_like(x)  # a token launch with work: one block, real size
    _add[(1,)](x, y, scratch, x.numel(), BLOCK=BLOCK)
    return CACHE[key]
