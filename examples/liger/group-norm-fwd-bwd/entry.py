"""Liger-Kernel 0.8.5's group norm: its inputs, and a PyTorch eager version.

The launcher is Liger's own autograd Function, imported here unchanged from the installed
package (kernel.yaml, `launcher:`); without a `reference:`, Liger's outputs at its shipped
settings are the reference. `eager` is what bench/liger_bench.py times as PyTorch eager.
"""

import torch
import torch.nn.functional as F
from liger_kernel.ops.group_norm import LigerGroupNormFunction

__all__ = ["LigerGroupNormFunction", "eager", "make_inputs"]


def _rand(g, *size):
    # Made on the device by a seeded generator of that device: deterministic in seed, and
    # quick at LLM sizes (a CPU generator spends seconds on a 128k-vocabulary batch).
    return torch.randn(*size, generator=g, device=g.device)


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    b, c, length = shape["B"], shape["C"], shape["L"]
    x = _rand(g, b, c, length).to(dtype)
    w = (1 + 0.1 * _rand(g, c)).to(dtype)
    bias = (0.1 * _rand(g, c)).to(dtype)
    return x.to(device), w.to(device), bias.to(device), c, max(1, c // 16), 1e-6


def eager(x, w, bias, channels, groups, eps):
    return F.group_norm(x, groups, w, bias, eps)
