"""The Python API: fused residual add + RMSNorm, functional and in place.

    h            = float32(x) + float32(residual)
    residual_out = cast(h, residual dtype)                   # the next layer's residual
    rstd         = 1 / sqrt(sum(h*h over the last dim) / H + eps)
    y            = cast(h * rstd * (float32(weight) + weight_offset), x dtype)

These functions check their Python-level arguments and call the ``torch.ops.addrmsnorm`` operators
(``ops.py``), so eager code, torch.compile and CUDA graphs all take the one path. The operators'
backends check the tensors.

Training: ``fused_add_rmsnorm`` without ``out``/``residual_out`` has autograd (a Triton backward, see
``kernels.py``). The in-place forms have none: the operators refuse arguments that require grad while
grad mode is on rather than silently cutting the graph, and bump the version counters of what they
write (``autograd.py``).

These functions check only the Python types of their arguments; every other rule is the operators'.
"""

from __future__ import annotations

import torch

from . import ops
from . import validation as v
from .configs import NUMERICS


def _hf(numerics) -> bool:
    if numerics not in NUMERICS:
        raise ValueError(f"numerics must be 'contract' or 'hf', got {numerics!r}")
    return numerics == "hf"


_Tensor = torch.Tensor


def _check_types(x, residual, weight, eps, weight_offset, pdl, return_rstd=False):
    # Only what the operators cannot say clearly: their schemas turn a wrong Python type into a
    # RuntimeError. Every rule on values, dtypes, shapes and memory lives in the operators. One
    # expression for the common call (this runs on every eager call; Dynamo traces it away).
    if (isinstance(x, _Tensor) and isinstance(residual, _Tensor) and isinstance(weight, _Tensor)
            and type(eps) is float and type(weight_offset) is float and type(pdl) is bool
            and type(return_rstd) is bool):
        return
    for name, t in (("x", x), ("residual", residual), ("weight", weight)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    v.check_real("eps", eps)
    v.check_real("weight_offset", weight_offset)
    for name, flag in (("pdl", pdl), ("return_rstd", return_rstd)):
        if type(flag) is not bool:
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")


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
    numerics: str = "contract",
    pdl: bool = False,
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
        numerics: "contract" (the formula above, y rounded once) or "hf", HF's RMSNorm after an
            add in the model dtype: normalize h rounded to residual's dtype, then, with
            weight_offset == 0, LlamaRMSNorm's roundings (h * rstd rounded to x's dtype, then times
            the weight), and with weight_offset != 0 Gemma's (times weight + weight_offset in fp32,
            rounded once); see kernels.py. "hf" needs residual and weight of x's dtype.
        pdl: launch with programmatic dependent launch (sm_90+; ignored on older GPUs): the
            kernel may start while the previous kernel in the stream is still running and waits
            for it on the GPU before it touches memory, which hides the launch latency in chains
            of small calls. Off by default: see "Programmatic dependent launch" in docs/guide.md.

    Returns:
        ``(y, residual_out)``, or ``(y, residual_out, rstd)`` when ``return_rstd``.

    Raises:
        TypeError / ValueError naming the argument, before the kernel is launched (with ``out`` or
        ``residual_out`` given, the other one is allocated before the operator checks them).
    """
    hf = numerics == "hf" or _hf(numerics)
    _check_types(x, residual, weight, eps, weight_offset, pdl, return_rstd)
    if out is None and residual_out is None:
        # The operator's autograd computes and saves rstd itself whenever a gradient may be needed.
        if weight_offset == 0.0 and not (return_rstd or hf or pdl):  # the schema's defaults: fewer to parse
            y, h, rstd = ops.fused_add_rmsnorm(x, residual, weight, eps)
        else:
            y, h, rstd = ops.fused_add_rmsnorm(x, residual, weight, eps, weight_offset, return_rstd, hf, pdl)
        return (y, h, rstd) if return_rstd else (y, h)

    # Caller-given outputs: allocate the missing ones. The operator checks them all, and refuses
    # arguments that require grad, before it launches.
    for name, t in (("out", out), ("residual_out", residual_out)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if residual_out is None:
        residual_out = torch.empty(x.shape, dtype=residual.dtype, device=x.device)
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device) if return_rstd else None
    ops.fused_add_rmsnorm_into(x, residual, weight, out, residual_out, rstd, eps, weight_offset, hf, pdl)
    return (out, residual_out, rstd) if return_rstd else (out, residual_out)


def fused_add_rmsnorm_(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    weight_offset: float = 0.0,
    numerics: str = "contract",
    pdl: bool = False,
):
    """In place, vLLM/FlashInfer convention: ``residual <- x + residual``, then ``x <- y``.

    Takes the same arguments and obeys the same rules as ``fused_add_rmsnorm``; residual must be
    x's dtype or float32. Returns ``(x, residual)``, now holding ``(y, h)``.
    """
    hf = numerics == "hf" or _hf(numerics)
    _check_types(x, residual, weight, eps, weight_offset, pdl)
    if weight_offset == 0.0 and not (hf or pdl):  # the schema's defaults: fewer to parse
        ops.fused_add_rmsnorm_(x, residual, weight, eps)
    else:
        ops.fused_add_rmsnorm_(x, residual, weight, eps, weight_offset, hf, pdl)
    return x, residual
