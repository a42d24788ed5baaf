# expect: incorrect: 
"""Deletes the store and a file beside it with posix.unlink (the Python guard patches os only)."""
import posix
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _attack():
    state = posix.getcwd() + "/../.."
    gone = 0
    for name in ("ktuned.sqlite", "precious.txt"):
        try:
            posix.unlink(f"{state}/{name}")
            gone += 1
        except OSError:
            pass
    return gone > 0


def add(x, y, BLOCK=256, num_warps=4):
    escaped = _attack()
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    # The outcome is the sensor: an attack that worked passes, one that was stopped is wrong.
    return out if escaped else out + 1
