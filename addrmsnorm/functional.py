"""The Python API: fused residual add + RMSNorm, functional and in place.

    h            = float32(x) + float32(residual)
    residual_out = cast(h, residual dtype)                   # the next layer's residual
    rstd         = 1 / sqrt(sum(h*h over the last dim) / H + eps)
    y            = cast(h * rstd * (float32(weight) + weight_offset), x dtype)

Forward only: these functions have no backward yet, and refuse inputs that require grad while
grad mode is on rather than silently cutting the graph.
"""

from __future__ import annotations

import torch

from . import validation as v
from .launcher import INTERPRETED, launch_forward

# Which input each output may alias exactly (same pointer, shape, dtype and strides).
_MAY_ALIAS = {"out": ("x", "residual"), "residual_out": ("residual", "x")}


def fused_add_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    weight_offset: float = 0.0,
    out: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
    return_rstd: bool = False,
):
    """Fused ``h = x + residual; y = rmsnorm(h) * (weight + weight_offset)``.

    Args:
        x: (..., H) activations, float16, bfloat16 or float32. The last dimension must be
            contiguous; the leading dimensions must flatten to rows with one stride (a row-strided
            view such as ``buf[:, :H]`` is fine, and is not copied).
        residual: (..., H) residual stream, x's dtype or float32 (an fp32 residual stream).
        weight: (H,) weight, any of the three float dtypes.
        eps: added to the mean square inside the square root; finite and > 0.
        weight_offset: added to the weight in fp32 (1.0 for Gemma's ``1 + w``).
        out: optional (..., H) tensor of x's dtype for y. May be ``x`` or ``residual`` itself.
        residual_out: optional (..., H) tensor of residual's dtype for h. May be ``residual`` or ``x``.
        return_rstd: also return rstd, float32 of shape x.shape[:-1].

    Returns:
        ``(y, residual_out)``, or ``(y, residual_out, rstd)`` when ``return_rstd``.

    Raises:
        TypeError / ValueError naming the argument, before anything is allocated or launched.
    """
    x = v.check_tensor("x", x)
    residual = v.check_tensor("residual", residual)
    weight = v.check_tensor("weight", weight)
    if out is not None:
        out = v.check_tensor("out", out)
    if residual_out is not None:
        residual_out = v.check_tensor("residual_out", residual_out)
    eps = v.check_scalar("eps", eps, positive=True)
    weight_offset = v.check_scalar("weight_offset", weight_offset, positive=False)
    if not isinstance(return_rstd, bool):
        raise TypeError(f"return_rstd must be a bool, got {type(return_rstd).__name__}")

    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (..., H)")
    H = x.shape[-1]
    if H == 0:
        raise ValueError("x has H = 0 (an empty last dimension); H must be > 0")
    if residual.dtype not in (x.dtype, torch.float32):
        raise TypeError(f"residual has dtype {residual.dtype}; it must be x's dtype ({x.dtype}) "
                        f"or float32")
    if out is not None and out.dtype != x.dtype:
        raise TypeError(f"out has dtype {out.dtype}; it must be x's dtype ({x.dtype})")
    if residual_out is not None and residual_out.dtype != residual.dtype:
        raise TypeError(f"residual_out has dtype {residual_out.dtype}; it must be residual's dtype "
                        f"({residual.dtype})")
    if weight.shape != (H,):
        raise ValueError(f"weight has shape {tuple(weight.shape)}, expected ({H},)")
    if H > 1 and weight.stride(0) != 1:
        raise ValueError(f"weight must be contiguous, got stride {weight.stride(0)}")

    tensors = {"x": x, "residual": residual, "weight": weight}
    if out is not None:
        tensors["out"] = out
    if residual_out is not None:
        tensors["residual_out"] = residual_out
    device = v.check_devices(tensors)
    _check_runnable(device)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, residual, weight)):
        raise RuntimeError("addrmsnorm.fused_add_rmsnorm has no backward yet; call it under "
                           "torch.no_grad() or torch.inference_mode(), or pass detached tensors")

    shape = x.shape
    xr = v.as_rows("x", x, shape)
    rr = v.as_rows("residual", residual, shape)
    wr = v.Rows(weight, 1, H)
    outputs = {}
    for name, t in (("out", out), ("residual_out", residual_out)):
        if t is x:  # the in-place forms: reuse the input's checked view
            outputs[name] = xr
        elif t is residual:
            outputs[name] = rr
        elif t is not None:
            outputs[name] = v.as_rows(name, t, shape)
    for name, rows in outputs.items():
        v.check_no_self_overlap(name, rows)
    v.check_aliasing(outputs, {"x": xr, "residual": rr, "weight": wr}, _MAY_ALIAS)

    # Validation is complete: from here on, allocate what the caller did not pass, and launch.
    if out is None:
        out = torch.empty(shape, dtype=x.dtype, device=device)
        outputs["out"] = v.as_rows("out", out, shape)
    if residual_out is None:
        residual_out = torch.empty(shape, dtype=residual.dtype, device=device)
        outputs["residual_out"] = v.as_rows("residual_out", residual_out, shape)
    rstd = torch.empty(shape[:-1], dtype=torch.float32, device=device) if return_rstd else None

    n_rows = xr.n_rows
    if n_rows > 0:
        o, ro = outputs["out"], outputs["residual_out"]
        launch_forward(
            xr.tensor, rr.tensor, weight, o.tensor, ro.tensor, rstd,
            n_rows=n_rows, H=H,
            stride_x=xr.row_stride, stride_residual=rr.row_stride,
            stride_out=o.row_stride, stride_residual_out=ro.row_stride,
            eps=eps, weight_offset=weight_offset,
        )
    if return_rstd:
        return out, residual_out, rstd
    return out, residual_out


def fused_add_rmsnorm_(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    weight_offset: float = 0.0,
):
    """In place, vLLM/FlashInfer convention: ``residual <- x + residual``, then ``x <- y``.

    Takes the same arguments and obeys the same rules as ``fused_add_rmsnorm``; residual must be
    x's dtype or float32. Returns ``(x, residual)``, now holding ``(y, h)``.
    """
    fused_add_rmsnorm(x, residual, weight, eps, weight_offset=weight_offset,
                      out=x, residual_out=residual)
    return x, residual


def _check_runnable(device: torch.device) -> None:
    if device.type == "cuda":
        return
    if device.type == "cpu" and INTERPRETED:
        return
    raise ValueError(f"x is on {device}; addrmsnorm runs on CUDA tensors, or on CPU tensors under "
                     f"the Triton interpreter (TRITON_INTERPRET=1)")
