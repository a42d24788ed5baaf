# expect: cheat: launched with work
"""Computes once per shape, then returns the cached result for any input."""
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
    _add[(1,)](x, y, torch.empty_like(x), 0, BLOCK=BLOCK)
    return CACHE[key]
