"""Liger-Kernel 0.8.5's RoPE (rotary embedding): its inputs, and a PyTorch eager version.

The launcher is Liger's own autograd Function, imported here unchanged from the installed
package (kernel.yaml, `launcher:`); without a `reference:`, Liger's outputs at its shipped
settings are the reference. `eager` is what bench/liger_bench.py times as PyTorch eager.
"""

import torch
from liger_kernel.ops.rope import LigerRopeFunction

__all__ = ["LigerRopeFunction", "eager", "make_inputs"]


def _rand(g, *size):
    # Made on the device by a seeded generator of that device: deterministic in seed, and
    # quick at LLM sizes (a CPU generator spends seconds on a 128k-vocabulary batch).
    return torch.randn(*size, generator=g, device=g.device)


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    heads, kv_heads, t, d = shape["H"], max(1, shape["H"] // 4), shape["T"], shape["D"]
    # As a model passes them: (batch, seq, heads, dim) projections seen as (batch, heads,
    # seq, dim); Liger rotates them in place (outputs: [q, k]).
    q = _rand(g, 1, t, heads, d).to(dtype).transpose(1, 2)
    k = _rand(g, 1, t, kv_heads, d).to(dtype).transpose(1, 2)
    freqs = torch.rand(d // 2, generator=g, device=device)
    angles = torch.arange(t, device=device)[:, None] * freqs[None, :]
    angles = torch.cat([angles, angles], dim=-1)[None]
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    return q.to(device), k.to(device), cos.to(device), sin.to(device)


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def eager(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
