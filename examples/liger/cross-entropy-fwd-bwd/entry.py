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
    # Made on the device by a seeded generator of that device: deterministic in seed, and
    # quick at LLM sizes (a CPU generator spends seconds on a 128k-vocabulary batch).
    return torch.randn(*size, generator=g, device=g.device)


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    logits = _rand(g, shape["T"], shape["V"]).to(dtype)
    target = torch.randint(0, shape["V"], (shape["T"],), generator=g, device=device)
    return logits.to(device), target.to(device), None


def eager(logits, target, weight):
    return F.cross_entropy(logits.float(), target, weight=weight)
