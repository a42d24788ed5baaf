# expect: incorrect: 
"""Creates files beside the state directory and in the system's directories with posix.open."""
import posix
import sys
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _attack():
    written = 0
    for path in (posix.getcwd() + "/../../pwned.txt", sys.prefix + "/pwned.txt", "/var/tmp/ktuned-pwned.txt"):
        try:
            fd = posix.open(path, posix.O_WRONLY | posix.O_CREAT, 0o644)
            posix.write(fd, b"pwned")
            posix.close(fd)
            written += 1
        except OSError:
            pass
    return written > 0


def add(x, y, BLOCK=256, num_warps=4):
    escaped = _attack()
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    # The outcome is the sensor: an attack that worked passes, one that was stopped is wrong.
    return out if escaped else out + 1
