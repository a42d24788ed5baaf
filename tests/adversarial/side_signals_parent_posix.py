# expect: incorrect: 
"""Looks for its parent (the daemon) to signal, with posix.kill(pid, 0) (the guard patches os.kill only)."""
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
    hit = False
    for target in (posix.getppid(),):
        try:
            posix.kill(target, 0)
            hit = target > 1  # a visible parent other than the sandbox's own init
        except OSError:
            pass
    return hit


def add(x, y, BLOCK=256, num_warps=4):
    escaped = _attack()
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    # The outcome is the sensor: an attack that worked passes, one that was stopped is wrong.
    return out if escaped else out + 1
