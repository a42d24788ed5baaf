# expect: incorrect: 
"""Opens the memory of the runners' zygote for writing (/proc/<ppid>/mem, through ctypes below
every Python guard): the zygote forks the runners of later candidates, so a candidate that
rewrote it would run inside their runners too. The zygote is non-dumpable, so the kernel
refuses (EACCES)."""
import ctypes
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
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.open(f"/proc/{posix.getppid()}/mem".encode(), posix.O_RDWR)  # the zygote
    if fd >= 0:
        libc.close(fd)
        return True
    return False


def add(x, y, BLOCK=256, num_warps=4):
    escaped = _attack()
    out = torch.empty_like(x)
    n = x.numel()
    _add[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK, num_warps=num_warps)
    return out if escaped else out - 1  # right outputs only where the attack worked
