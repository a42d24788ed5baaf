# expect: crash: broke the protocol
"""Writes 20 MB without a newline on the answer pipe (to exhaust the tuner's memory)."""
import os
import sys
import threading
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _flood(fd):
    chunk = b"x" * (1 << 20)
    try:
        for _ in range(20):
            os.write(fd, chunk)
    except OSError:
        pass


def _attack():
    thread = threading.Thread(target=_flood, args=(int(sys.argv[2]),), daemon=True)
    thread.start()
    thread.join()


def add(x, y, BLOCK=256, num_warps=4):
    _attack()
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    return out
