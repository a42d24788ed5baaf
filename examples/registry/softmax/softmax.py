"""Row-wise softmax over the last dimension of an (M, N) matrix, numerically stable.

One program handles one row in two passes over it, ``BLOCK_SIZE`` columns at a time, so any
block size works for any row length:

1. an online pass keeps, per lane, the running maximum and the running sum of
   ``exp(x - max)`` (rescaled whenever the maximum grows), then combines the lanes;
2. a second pass re-reads the row (mostly from cache) and writes ``exp(x - max) / sum``.

Knobs: ``BLOCK_SIZE`` (a block that covers the whole row makes the re-read a cache hit and
the loop a single iteration), ``num_warps`` (threads sharing one row) and ``num_stages``
(software pipelining of the loads in the loops). Math is done in float32.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, N, stride_x, stride_out, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    out_row = out_ptr + row * stride_out
    cols = tl.arange(0, BLOCK_SIZE)

    # Pass 1: per-lane online maximum and rescaled sum of exponentials.
    m = tl.full([BLOCK_SIZE], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, N, BLOCK_SIZE):
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # A lane that has seen only -inf (masked) keeps s == 0 instead of exp(-inf + inf).
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - m_safe) + tl.exp(x - m_safe)
        m = m_new
    row_max = tl.max(m, axis=0)
    row_sum = tl.sum(s * tl.exp(m - row_max), axis=0)
    inv_sum = 1.0 / row_sum

    # Pass 2: normalise.
    for start in range(0, N, BLOCK_SIZE):
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        y = tl.exp(x - row_max) * inv_sum
        tl.store(out_row + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x, BLOCK_SIZE: int = 1024, num_warps: int = 4, num_stages: int = 3):
    assert x.dim() == 2
    x = x.contiguous()
    M, N = x.shape
    out = torch.empty_like(x)
    _softmax_kernel[(M,)](
        x,
        out,
        N,
        x.stride(0),
        out.stride(0),
        BLOCK_SIZE=BLOCK_SIZE,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out


def reference(x):
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def make_inputs(shape, dtype, device, seed):
    # drawn on `device`: on the CPU a 16384x8192 case takes about a second to draw
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["M"], shape["N"], generator=gen, device=device, dtype=torch.float32)
    x = 2.0 * x
    return (x.to(dtype),)
