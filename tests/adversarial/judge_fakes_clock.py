# expect: cheat: computed while timed
"""Fakes the clocks it can reach without touching the names the worker snapshots (a replaced time module, clock_gettime), and skips the work once timed."""
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

import sys
import time
import types

_fake = types.ModuleType("time")
_fake.__dict__.update(time.__dict__)
_fake.perf_counter = lambda: 0.0
_fake.monotonic = lambda: 0.0
sys.modules["time"] = _fake
time.clock_gettime = lambda clock: 0.0
time.clock_gettime_ns = lambda clock: 0

CALLS = {}


def add(x, y, BLOCK=256, num_warps=4):
    """Honest for the calls correctness makes (4 per shape and dtype), then skips the work."""
    key = (x.numel(), x.dtype)
    CALLS[key] = CALLS.get(key, 0) + 1
    out = _honest(x, y, BLOCK, num_warps)
    if CALLS[key] > 4:
        out.zero_()
    return out
