# expect: cheat: torch.cuda.Event.elapsed_time
"""Replaces the CUDA event timer at import, to report tiny times."""
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


torch.cuda.Event.elapsed_time = lambda self, end: 1e-6


def add(x, y, BLOCK=256, num_warps=4):
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    return out
