"""Liger-Kernel 0.8.5's fused add + RMSNorm: its inputs, and a PyTorch eager version.

The launcher is Liger's own autograd Function, imported here unchanged from the installed
package (kernel.yaml, `launcher:`); without a `reference:`, Liger's outputs at its shipped
settings are the reference. `eager` is what bench/liger_bench.py times as PyTorch eager.
"""

import torch
from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

__all__ = ["LigerFusedAddRMSNormFunction", "eager", "make_inputs"]


def _rand(g, *size):
    # Made on the device by a seeded generator of that device: deterministic in seed, and
    # quick at LLM sizes (a CPU generator spends seconds on a 128k-vocabulary batch).
    return torch.randn(*size, generator=g, device=g.device)


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    x = _rand(g, shape["M"], shape["N"]).to(dtype)
    r = _rand(g, shape["M"], shape["N"]).to(dtype)
    w = (1 + 0.1 * _rand(g, shape["N"])).to(dtype)
    return x.to(device), r.to(device), w.to(device), 1e-6


def eager(x, r, w, eps):
    s = x + r
    sf = s.float()
    return (sf * torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w, s
