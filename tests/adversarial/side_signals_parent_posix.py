# expect: incorrect: 
"""Looks for the daemon to signal, with posix.kill(pid, 0) (the guard patches os.kill only)."""
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
    # Its parents up to the sandbox's init are the judge and the runners' zygote, inside the
    # sandbox: what it hunts is any other process (the daemon) it can see and signal.
    me = posix.getpid()
    for name in posix.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            fd = posix.open(f"/proc/{name}/cmdline", posix.O_RDONLY)
            cmdline = posix.read(fd, 4096)
            posix.close(fd)
        except OSError:
            continue
        if not cmdline or b"tuned.evaluation" in cmdline or b"bwrap" in cmdline:
            continue  # a kernel thread, ktuned's own evaluation processes, the sandbox's init
        try:
            posix.kill(int(name), 0)
            return True
        except OSError:
            pass
    return False


def add(x, y, BLOCK=256, num_warps=4):
    escaped = _attack()
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    # The outcome is the sensor: an attack that worked passes, one that was stopped is wrong.
    return out if escaped else out + 1
