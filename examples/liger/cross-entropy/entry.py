"""Liger-Kernel 0.8.5's cross entropy: its inputs, and a PyTorch eager version.

The launcher is Liger's own autograd Function, imported here unchanged from the installed
package (kernel.yaml, `launcher:`); without a `reference:`, Liger's outputs at its shipped
settings are the reference. `eager` is what bench/liger_bench.py times as PyTorch eager.
"""

import torch
import torch.nn.functional as F
from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction

__all__ = ["LigerCrossEntropyFunction", "eager", "make_inputs"]


def _rand(g, *size):
    return torch.randn(*size, generator=g)


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    logits = _rand(g, shape["T"], shape["V"]).to(dtype)
    target = torch.randint(0, shape["V"], (shape["T"],), generator=g)
    return logits.to(device), target.to(device), None


def eager(logits, target, weight):
    return F.cross_entropy(logits.float(), target, weight=weight)
