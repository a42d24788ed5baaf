# expect: timeout: compile
"""Never leaves its kernel (an infinite loop on the device)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def _spin(x_ptr, n):
    # n stays in 1..7 for ever, and the atomic is a side effect no compiler may drop
    # (`n = n + 1` alone wraps around after 2**31 steps: about a second on an H100).
    while n > 0:
        tl.atomic_add(x_ptr, 0.0)
        n = n % 7 + 1


def add(x, y, BLOCK=256, num_warps=4):
    _spin[(1,)](x, x.numel())
    return x + y
