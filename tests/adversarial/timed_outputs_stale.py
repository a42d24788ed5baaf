# expect: cheat: computed while timed
"""Right while checked (17 calls here), then returns its last output for the shape without
computing: what the timing loop sees."""
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


CALLS = [0]
LAST = {}


def add(x, y, BLOCK=256, num_warps=4):
    CALLS[0] += 1
    key = (tuple(x.shape), x.dtype)
    if CALLS[0] > 20 and key in LAST:
        _add[(1,)](x, y, torch.empty_like(x), 0, BLOCK=BLOCK)
        return LAST[key]
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    LAST[key] = out
    return out
