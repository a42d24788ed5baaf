# expect: timeout: benchmark
"""Correct whenever checked, but hangs once the same input tensor comes back: the timing loop
(correctness checks always pass fresh copies)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


SEEN = []


def add(x, y, BLOCK=256, num_warps=4):
    if any(s is x for s in SEEN):
        import threading
        threading.Event().wait()
    SEEN.append(x)
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    return out
