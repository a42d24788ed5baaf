# expect: cheat: computed while timed
"""Replaces the interleaved timing (profilers.timing and the judge's own) with one that reports tiny times without calling anything, and skips the work once timed."""
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

import profilers.timing as timing
import tuned.evaluation.timing_judge as timing_judge


def _fake(fns, **kwargs):
    return timing.Interleaved([[1e-9] * 3 for _ in fns])


timing.interleaved_timing = _fake
timing_judge.JudgedTiming.time_case = lambda self, *a, **k: ([1e-9] * 3, [], False)

CALLS = {}


def add(x, y, BLOCK=256, num_warps=4):
    """Honest for the calls correctness makes (4 per shape and dtype), then skips the work."""
    key = (x.numel(), x.dtype)
    CALLS[key] = CALLS.get(key, 0) + 1
    out = _honest(x, y, BLOCK, num_warps)
    if CALLS[key] > 4:
        out.zero_()
    return out
