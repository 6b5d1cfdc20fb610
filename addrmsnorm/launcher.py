"""The JIT launcher: one call of the Triton forward kernel on already-validated row views.

It picks the specialization from ``configs.select_forward_config`` (the same table the AOT build
reads) and launches on the current stream of the tensors' device. It allocates nothing, copies
nothing and never synchronizes. Validation lives in ``validation.py`` and runs before this.
"""

from __future__ import annotations

import contextlib

import torch

from .configs import ForwardConfig, align_elems, select_forward_config
from .kernels import fused_add_rmsnorm_fwd

# True when TRITON_INTERPRET=1 was set before import: the kernels then run on CPU tensors.
INTERPRETED = type(fused_add_rmsnorm_fwd).__name__ == "InterpretedFunction"


def _device_guard(device: torch.device):
    # Triton launches on the current CUDA device; make it the tensors' device.
    if device.type == "cuda" and device.index is not None and device.index != torch.cuda.current_device():
        return torch.cuda.device(device)
    return contextlib.nullcontext()


def launch_forward(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
    out: torch.Tensor, residual_out: torch.Tensor, rstd: torch.Tensor | None,
    *, n_rows: int, H: int,
    stride_x: int, stride_residual: int, stride_out: int, stride_residual_out: int,
    eps: float, weight_offset: float, hf: bool = False,
    config: ForwardConfig | None = None,
) -> None:
    """Launch ``fused_add_rmsnorm_fwd`` over ``n_rows`` rows of H elements. n_rows must be > 0.

    ``config`` overrides the dispatch rule; it exists for tuning sweeps, not for normal calls.
    """
    xs, rs = x.element_size(), residual.element_size()
    cfg = config or select_forward_config(H, xs, rs)
    if n_rows == 1:  # a single row has no stride; 0 keeps the alignment rule the same as the AOT runtime's
        stride_x = stride_residual = stride_out = stride_residual_out = 0
    align = align_elems((x.data_ptr(), residual.data_ptr(), weight.data_ptr(), out.data_ptr(),
                         residual_out.data_ptr()), H,
                        (stride_x, stride_residual, stride_out, stride_residual_out), xs, rs)
    with _device_guard(x.device):
        fused_add_rmsnorm_fwd[(cfg.grid(n_rows),)](
            x, residual, weight, out, residual_out, rstd,
            n_rows, H,
            stride_x, stride_residual, stride_out, stride_residual_out,
            eps, weight_offset,
            BLOCK_H=cfg.block_h,
            ROWS_PER_PROGRAM=cfg.rows_per_program,
            LOOPED=cfg.looped,
            HAS_RSTD=rstd is not None,
            ALIGN=align,
            HF_NUMERICS=hf,
            num_warps=cfg.num_warps,
        )
