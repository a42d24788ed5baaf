"""Liger-Kernel 0.8.5's KL divergence: its inputs, and a PyTorch eager version.

The launcher is Liger's own autograd Function, imported here unchanged from the installed
package (kernel.yaml, `launcher:`); without a `reference:`, Liger's outputs at its shipped
settings are the reference. `eager` is what bench/liger_bench.py times as PyTorch eager.
"""

import torch
import torch.nn.functional as F
from liger_kernel.ops.kl_div import LigerKLDivLossFunction

__all__ = ["LigerKLDivLossFunction", "eager", "make_inputs"]


def _rand(g, *size):
    # Made on the device by a seeded generator of that device: deterministic in seed, and
    # quick at LLM sizes (a CPU generator spends seconds on a 128k-vocabulary batch).
    return torch.randn(*size, generator=g, device=g.device)


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    y_pred = torch.log_softmax(_rand(g, shape["T"], shape["V"]), dim=-1).to(dtype)
    y_true = torch.softmax(_rand(g, shape["T"], shape["V"]), dim=-1).to(dtype)
    return y_pred.to(device), y_true.to(device)


def eager(y_pred, y_true):
    return F.kl_div(y_pred, y_true, reduction="batchmean")
