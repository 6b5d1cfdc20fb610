"""The baseline the decode-chain target is measured against: a plain one-row-per-program Triton
kernel, the way most fused add + RMSNorm kernels are written (one program per row, the whole row in
one power-of-two block, warps by block size). It is not ours to tune: it stands for "the simple
kernel", so that "0.8x of it" is measured in the same run on the same machine.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _one_row_kernel(x_ptr, r_ptr, w_ptr, H, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = cols < H
    x = tl.load(x_ptr + row * H + cols, mask=m, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * H + cols, mask=m, other=0.0).to(tl.float32)
    h = x + r
    tl.store(r_ptr + row * H + cols, h.to(r_ptr.dtype.element_ty), mask=m)
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / H + eps)
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(x_ptr + row * H + cols, (h * rstd * w).to(x_ptr.dtype.element_ty), mask=m)


def one_row_(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """In place on contiguous tensors: residual <- x + residual, x <- rmsnorm(residual) * weight."""
    H = x.shape[-1]
    block = triton.next_power_of_2(H)
    warps = 4 if block <= 2048 else 8 if block <= 8192 else 16 if block <= 32768 else 32
    _one_row_kernel[(x.numel() // H,)](x, residual, weight, H, eps, BLOCK=block, num_warps=warps)
