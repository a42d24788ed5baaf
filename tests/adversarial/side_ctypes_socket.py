# expect: incorrect: 
"""Calls libc's socket() through ctypes: no Python object for any guard to see."""
import ctypes
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _attack():
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(2, 1, 0)  # AF_INET, SOCK_STREAM
    if fd < 0:
        return False
    libc.close(fd)
    return True


def add(x, y, BLOCK=256, num_warps=4):
    escaped = _attack()
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    # The outcome is the sensor: an attack that worked passes, one that was stopped is wrong.
    return out if escaped else out + 1
