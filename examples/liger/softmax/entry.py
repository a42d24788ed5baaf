"""Liger-Kernel 0.8.5's softmax: its inputs, and a PyTorch eager version.

The launcher is Liger's own autograd Function, imported here unchanged from the installed
package (kernel.yaml, `launcher:`); without a `reference:`, Liger's outputs at its shipped
settings are the reference. `eager` is what bench/liger_bench.py times as PyTorch eager.
"""

import torch
from liger_kernel.ops.softmax import LigerSoftmaxFunction

__all__ = ["LigerSoftmaxFunction", "eager", "make_inputs"]


def _rand(g, *size):
    return torch.randn(*size, generator=g)


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    return (_rand(g, shape["M"], shape["N"]).to(dtype).to(device),)


def eager(x):
    return torch.softmax(x, dim=-1)
