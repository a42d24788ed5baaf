"""Elementwise vector addition: ``out = x + y`` on 1-D tensors of any length.

One program adds one block of ``BLOCK_SIZE`` elements; the tail block is masked.
Knobs: ``BLOCK_SIZE`` (elements per program) and ``num_warps``. The kernel has no loop, so
``num_stages`` would change nothing and is not part of the space. The kernel is purely
memory-bound: good configurations move whole cache lines per thread and keep enough
programs in flight to saturate HBM.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def vector_add(x, y, BLOCK_SIZE: int = 1024, num_warps: int = 4):
    assert x.shape == y.shape and x.dtype == y.dtype and x.dim() == 1
    x = x.contiguous()
    y = y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, BLOCK_SIZE),)
    _add_kernel[grid](x, y, out, n, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return out


def reference(x, y):
    return (x.float() + y.float()).to(x.dtype)


def make_inputs(shape, dtype, device, seed):
    # drawn on `device`: on the CPU a 16384x8192 case takes about a second to draw
    gen = torch.Generator(device=device).manual_seed(seed)
    n = shape["N"]
    x = torch.randn(n, generator=gen, device=device, dtype=torch.float32)
    y = torch.randn(n, generator=gen, device=device, dtype=torch.float32)
    return x.to(dtype), y.to(dtype)
