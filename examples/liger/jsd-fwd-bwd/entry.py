"""Liger-Kernel 0.8.5's Jensen-Shannon divergence: its inputs, and a PyTorch eager version.

The launcher is Liger's own autograd Function, imported here unchanged from the installed
package (kernel.yaml, `launcher:`); without a `reference:`, Liger's outputs at its shipped
settings are the reference. `eager` is what bench/liger_bench.py times as PyTorch eager.
"""

import math

import torch
from liger_kernel.ops.jsd import LigerJSDFunction

__all__ = ["LigerJSDFunction", "eager", "make_inputs"]


def _rand(g, *size):
    # Made on the device by a seeded generator of that device: deterministic in seed, and
    # quick at LLM sizes (a CPU generator spends seconds on a 128k-vocabulary batch).
    return torch.randn(*size, generator=g, device=g.device)


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    student = torch.log_softmax(_rand(g, shape["T"], shape["V"]), dim=-1).to(dtype)
    teacher = torch.log_softmax(_rand(g, shape["T"], shape["V"]), dim=-1).to(dtype)
    return student.to(device), teacher.to(device)


def eager(student, teacher, beta=0.5):
    s, t = student.float(), teacher.float()
    mix = torch.stack([s + math.log(1 - beta), t + math.log(beta)])
    m = torch.logsumexp(mix, 0)
    kl_s = (s.exp() * (s - m)).sum(-1)
    kl_t = (t.exp() * (t - m)).sum(-1)
    return ((1 - beta) * kl_s + beta * kl_t).mean()
