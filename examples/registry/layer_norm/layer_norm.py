"""LayerNorm forward over the last dimension: ``y = (x - mean) / sqrt(var + eps) * w + b``.

``x`` is (M, N); ``w`` and ``b`` are (N,); ``var`` is the biased variance. One program
normalises one row in three passes of ``BLOCK_SIZE`` columns (mean, variance around the
mean, then normalise and store), so any block size works for any row length and the
variance is computed the numerically safe way. Only ``y`` is returned.

Knobs: ``BLOCK_SIZE`` (a block covering the whole row turns each pass into one iteration
and the re-reads into cache hits), ``num_warps`` and ``num_stages`` (pipelining of the
loads inside the loops). Math is done in float32.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _layer_norm_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, N, stride_x, stride_y, eps, BLOCK_SIZE: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK_SIZE)

    acc = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, N, BLOCK_SIZE):
        mask = start + cols < N
        acc += tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N

    acc = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, N, BLOCK_SIZE):
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - mean, 0.0)
        acc += d * d
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)

    for start in range(0, N, BLOCK_SIZE):
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_row + start + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def layer_norm(x, w, b, eps, BLOCK_SIZE: int = 1024, num_warps: int = 4, num_stages: int = 3):
    assert x.dim() == 2 and w.shape == b.shape == (x.shape[1],)
    x = x.contiguous()
    w = w.contiguous()
    b = b.contiguous()
    M, N = x.shape
    y = torch.empty_like(x)
    _layer_norm_kernel[(M,)](
        x,
        w,
        b,
        y,
        N,
        x.stride(0),
        y.stride(0),
        eps,
        BLOCK_SIZE=BLOCK_SIZE,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return y


def reference(x, w, b, eps):
    y = torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), eps)
    return y.to(x.dtype)


def make_inputs(shape, dtype, device, seed):
    # drawn on `device`: on the CPU a 16384x8192 case takes about a second to draw
    gen = torch.Generator(device=device).manual_seed(seed)
    M, N = shape["M"], shape["N"]
    x = 0.5 + torch.randn(M, N, generator=gen, device=device, dtype=torch.float32)
    w = 1.0 + 0.1 * torch.randn(N, generator=gen, device=device, dtype=torch.float32)
    b = 0.1 * torch.randn(N, generator=gen, device=device, dtype=torch.float32)
    return x.to(dtype), w.to(dtype), b.to(dtype), 1e-5
