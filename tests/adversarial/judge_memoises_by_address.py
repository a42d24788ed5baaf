# expect: cheat: computed while timed
"""Memoises its output by the input's address once it has been called a few times there (the timing loop), so timed calls compute nothing."""
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

MEMO = {}
CALLS = {}


def add(x, y, BLOCK=256, num_warps=4):
    key = (x.data_ptr(), x.numel(), x.dtype)
    CALLS[key] = CALLS.get(key, 0) + 1
    if CALLS[key] > 4 and key in MEMO:
        _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, torch.empty_like(x), x.numel(), BLOCK=BLOCK)
        return MEMO[key].clone()
    MEMO[key] = _honest(x, y, BLOCK, num_warps)
    return MEMO[key]
