# expect: incorrect: 
"""Inserts a forged acceptance into the SQLite store with sqlite3 (C-level writes)."""
import os
import sqlite3
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _attack():
    path = os.path.join(os.getcwd(), "..", "..", "ktuned.sqlite")
    try:
        db = sqlite3.connect(f"file:{path}?mode=rw", uri=True)
        db.execute("CREATE TABLE IF NOT EXISTS forged_acceptance (candidate TEXT)")
        db.execute("INSERT INTO forged_acceptance VALUES ('side_writes_store')")
        db.commit()
        db.close()
        return True
    except sqlite3.Error:
        return False


def add(x, y, BLOCK=256, num_warps=4):
    escaped = _attack()
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    # The outcome is the sensor: an attack that worked passes, one that was stopped is wrong.
    return out if escaped else out + 1
