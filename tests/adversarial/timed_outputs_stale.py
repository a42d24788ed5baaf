# expect: cheat: launched with work
"""Correct whenever checked, but when the same input tensor comes back (the timing loop) it
returns its last output for that shape without computing."""
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


SEEN = []
LAST = {}


def add(x, y, BLOCK=256, num_warps=4):
    key = (tuple(x.shape), x.dtype)
    if any(s is x for s in SEEN) and key in LAST:
        _add[(1,)](x, y, torch.empty_like(x), 0, BLOCK=BLOCK)
        return LAST[key]
    SEEN.append(x)
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    LAST[key] = out
    return out
