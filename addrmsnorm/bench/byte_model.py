"""How many bytes each call must move, per BENCHMARKING.md. GB/s = these bytes / median time.

Every implementation is charged the fused kernel's bytes, whatever it really moves: an unfused
peer that moves more shows up as lower effective GB/s, which is the point of the comparison.
"""

from __future__ import annotations


def forward_bytes(N: int, H: int, x_size: int, residual_size: int, weight_size: int,
                  rstd: bool = False) -> int:
    """x and residual read, out and residual_out written, the weight read once, rstd if written.

    N*H*(size(x) + size(residual) + size(out) + size(residual_out)) + H*size(weight) [+ N*4]
    out has x's dtype and residual_out residual's.
    """
    return N * H * (2 * x_size + 2 * residual_size) + H * weight_size + (4 * N if rstd else 0)


def unfused_forward_bytes(N: int, H: int, x_size: int, residual_size: int, weight_size: int) -> int:
    """An add kernel (read x and residual, write h) then an RMSNorm kernel (read h, write y)."""
    return N * H * (x_size + residual_size + residual_size) + N * H * (residual_size + x_size) + H * weight_size
