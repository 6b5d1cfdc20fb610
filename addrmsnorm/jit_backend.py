"""The Triton JIT backend of the ``torch.ops.addrmsnorm`` ops: Python validation, then the JIT
launcher. It serves CPU tensors under the Triton interpreter, and CUDA tensors wherever the C++
extension is not built or not chosen (``ops.backend()``).

The C++ backend (``torch_ext/ops.cpp``) implements the same three functions with the same checks;
the tests hold the two to the same bits and the same verdicts.
"""

from __future__ import annotations

import torch

from . import validation as v
from .launcher import INTERPRETED, launch_forward


def _check_runnable(device: torch.device) -> None:
    if device.type == "cuda":
        return
    if device.type == "cpu" and INTERPRETED:
        return
    raise ValueError(f"x is on {device}; addrmsnorm runs on CUDA tensors, or on CPU tensors under "
                     f"the Triton interpreter (TRITON_INTERPRET=1)")


def _launch(call: v.ForwardCall, rstd, eps: float, weight_offset: float, hf: bool) -> None:
    xr = call.x
    if xr.n_rows == 0:
        return
    o, ro = call.out, call.residual_out
    launch_forward(
        xr.tensor, call.residual.tensor, call.weight.tensor, o.tensor, ro.tensor, rstd,
        n_rows=xr.n_rows, H=call.H,
        stride_x=xr.row_stride, stride_residual=call.residual.row_stride,
        stride_out=o.row_stride, stride_residual_out=ro.row_stride,
        eps=eps, weight_offset=weight_offset, hf=hf,
    )


def _checked_eps(eps: float, weight_offset: float):
    return (v.check_scalar("eps", eps, positive=True),
            v.check_scalar("weight_offset", weight_offset, positive=False))


def fused_add_rmsnorm(x, residual, weight, eps, weight_offset=0.0, return_rstd=False, hf=False):
    """addrmsnorm::fused_add_rmsnorm: new y, residual_out, and rstd (0 elements unless asked for)."""
    eps, weight_offset = _checked_eps(eps, weight_offset)
    call = v.check_forward(x, residual, weight, hf=hf)
    _check_runnable(call.device)
    shape, device = call.shape, call.device
    out = torch.empty(shape, dtype=x.dtype, device=device)
    residual_out = torch.empty(shape, dtype=residual.dtype, device=device)
    rstd = torch.empty(shape[:-1] if return_rstd else (0,), dtype=torch.float32, device=device)
    call.out = v.as_rows("out", out, shape)
    call.residual_out = v.as_rows("residual_out", residual_out, shape)
    _launch(call, rstd if return_rstd else None, eps, weight_offset, hf)
    return out, residual_out, rstd


def fused_add_rmsnorm_(x, residual, weight, eps, weight_offset=0.0, hf=False):
    """addrmsnorm::fused_add_rmsnorm_: residual <- x + residual, x <- y."""
    fused_add_rmsnorm_into(x, residual, weight, x, residual, None, eps, weight_offset, hf)


def fused_add_rmsnorm_into(x, residual, weight, out, residual_out, rstd, eps, weight_offset=0.0, hf=False):
    """addrmsnorm::fused_add_rmsnorm_into: into caller-given outputs (which may alias inputs exactly)."""
    eps, weight_offset = _checked_eps(eps, weight_offset)
    call = v.check_forward(x, residual, weight, out, residual_out, rstd, hf=hf)
    _check_runnable(call.device)
    _launch(call, rstd, eps, weight_offset, hf)
