# expect: incorrect: 
"""Opens the judge's memory for writing (/proc/<pid>/mem, through ctypes below every Python
guard): with it a candidate could rewrite the comparison or the clock of the process that
decides its verdict. The judge is non-dumpable, so the kernel refuses (EACCES)."""
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


def _judges():
    for name in posix.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = posix.open(f"/proc/{name}/cmdline", posix.O_RDONLY)
            cmdline = posix.read(fd, 4096)
            posix.close(fd)
        except OSError:
            continue
        argv = cmdline.split(b"\0")
        if b"tuned.evaluation.worker" in argv and not argv[0].endswith(b"bwrap"):
            yield name  # the judge itself (the sandbox's init names it in its arguments)


def _attack():
    libc = ctypes.CDLL(None, use_errno=True)
    for pid in _judges():
        fd = libc.open(f"/proc/{pid}/mem".encode(), posix.O_RDWR)
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
