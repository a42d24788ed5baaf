# expect: cheat: is not dense
"""Returns every other element of a buffer twice the size: right values in a view with odd strides."""
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


def add(x, y, BLOCK=256, num_warps=4):
    wide = torch.empty(2 * x.numel(), dtype=x.dtype, device=x.device)
    out = wide[::2]
    out.copy_(_honest(x, y, BLOCK, num_warps))
    return out
