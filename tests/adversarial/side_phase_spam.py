# expect: crash: the runner
"""Hangs at import while announcing phases over and over on every pipe it holds, to keep resetting a deadline (the judge ends a runner that speaks out of turn)."""
import json
import os
import sys
import time
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


_fds = []
for _name in os.listdir("/proc/self/fd"):
    try:
        if os.readlink(f"/proc/self/fd/{_name}").startswith(("pipe:", "socket:")):
            _fds.append(int(_name))
    except OSError:
        pass
_end = time.monotonic() + 600
while time.monotonic() < _end:
    for _phase in ("load", "compile", "load", "compile"):
        for _fd in _fds:
            try:
                os.write(_fd, (json.dumps({"type": "phase", "phase": _phase}) + "\n").encode())
            except OSError:
                pass
    time.sleep(0.2)


def _attack():
    pass


def add(x, y, BLOCK=256, num_warps=4):
    _attack()
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    return out
