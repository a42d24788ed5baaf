# expect: incorrect: elements outside atol
"""Finds the case cache (and any cached reference) through the garbage collector and overwrites the references with its own zeros, then returns zeros."""
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

import gc

from tuned.evaluation.case_cache import CaseCache

CaseCache.reference = lambda self, inputs_key, key, compute: torch.zeros(1)


def add(x, y, BLOCK=256, num_warps=4):
    _honest(x, y, BLOCK, num_warps)
    for obj in gc.get_objects():
        if isinstance(obj, CaseCache):
            for entry in list(getattr(obj, "_entries", {}).values()):
                for t in getattr(entry, "value", ()) or ():
                    if isinstance(t, torch.Tensor):
                        t.zero_()
    return torch.zeros_like(x)
