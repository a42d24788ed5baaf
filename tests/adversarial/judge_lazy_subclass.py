# expect: cheat: a tensor subclass
"""Returns a lazy tensor subclass whose values are produced only when someone looks."""
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


class Lazy(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


def add(x, y, BLOCK=256, num_warps=4):
    _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, torch.empty_like(x), x.numel(), BLOCK=BLOCK)
    return (x + y).as_subclass(Lazy)
