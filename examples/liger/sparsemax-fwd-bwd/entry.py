"""Liger-Kernel 0.8.5's sparsemax: its inputs, and a PyTorch eager version.

The launcher is Liger's own autograd Function, imported here unchanged from the installed
package (kernel.yaml, `launcher:`); without a `reference:`, Liger's outputs at its shipped
settings are the reference. `eager` is what bench/liger_bench.py times as PyTorch eager.
"""

import torch
from liger_kernel.ops.sparsemax import LigerSparsemaxFunction

__all__ = ["LigerSparsemaxFunction", "eager", "make_inputs"]


def _rand(g, *size):
    # Made on the device by a seeded generator of that device: deterministic in seed, and
    # quick at LLM sizes (a CPU generator spends seconds on a 128k-vocabulary batch).
    return torch.randn(*size, generator=g, device=g.device)


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    return _rand(g, shape["M"], shape["N"]).to(dtype).to(device), -1


def eager(x, dim):
    z, _ = torch.sort(x.float(), dim=dim, descending=True)
    k = torch.arange(1, x.shape[dim] + 1, device=x.device, dtype=torch.float32)
    cumulative = z.cumsum(dim)
    support = (1 + k * z) > cumulative
    size = support.sum(dim=dim, keepdim=True)
    tau = (cumulative.gather(dim, size - 1) - 1) / size
    return torch.clamp(x.float() - tau, min=0).to(x.dtype)
