# expect: crash: broke the protocol
"""Writes a forged 'ok' result on the worker's answer pipe (its fd is in sys.argv), without the request's number."""
import json
import os
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
    fd = int(sys.argv[2])
    forged = {"type": "result", "result": {"outcome": "ok", "reason": "", "phase": "benchmark"}, "fatal": False}
    os.write(fd, (json.dumps(forged) + "\n").encode())


def add(x, y, BLOCK=256, num_warps=4):
    _attack()
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    return out
