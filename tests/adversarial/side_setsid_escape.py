# expect: timeout: deadline
"""Forks a setsid'd grandchild with posix.fork (the guard patches os.fork only) that would outlive its runner and keep trying to reach the store, holding the runner's answer pipe open; then kills its own runner. The deadline ends the whole sandbox, the grandchild with it."""
import posix
import time
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _linger():
    fd = posix.open("/proc/self/comm", posix.O_WRONLY)
    posix.write(fd, b"ktuned-escapee")
    posix.close(fd)
    state = posix.getcwd() + "/../.."
    for _ in range(300):
        try:
            posix.close(posix.open(state + "/pwned.txt", posix.O_WRONLY | posix.O_CREAT, 0o644))
        except OSError:
            pass
        time.sleep(0.1)


def _attack():
    if posix.fork() == 0:
        try:
            posix.setsid()
            if posix.fork() == 0:
                _linger()
        finally:
            posix._exit(0)
    time.sleep(0.5)
    posix.kill(posix.getpid(), 9)


def add(x, y, BLOCK=256, num_warps=4):
    _attack()
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    return out
