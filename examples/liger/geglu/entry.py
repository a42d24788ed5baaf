"""Liger-Kernel 0.8.5's GeGLU (GELU-tanh x mul): its inputs, and a PyTorch eager version.

The launcher is Liger's own autograd Function, imported here unchanged from the installed
package (kernel.yaml, `launcher:`); without a `reference:`, Liger's outputs at its shipped
settings are the reference. `eager` is what bench/liger_bench.py times as PyTorch eager.
"""

import torch
import torch.nn.functional as F
from liger_kernel.ops.geglu import LigerGELUMulFunction

__all__ = ["LigerGELUMulFunction", "eager", "make_inputs"]


def _rand(g, *size):
    # Made on the device by a seeded generator of that device: deterministic in seed, and
    # quick at LLM sizes (a CPU generator spends seconds on a 128k-vocabulary batch).
    return torch.randn(*size, generator=g, device=g.device)


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    a = _rand(g, shape["M"], shape["N"]).to(dtype)
    b = _rand(g, shape["M"], shape["N"]).to(dtype)
    return a.to(device), b.to(device)


def eager(a, b):
    return F.gelu(a, approximate="tanh") * b
