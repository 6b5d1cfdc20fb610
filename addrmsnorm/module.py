"""``FusedAddRMSNorm``: the fused op as an nn.Module, a drop-in for a decoder block's
``h = x + residual; y = norm(h)`` pair."""

from __future__ import annotations

import torch

from . import ops
from . import validation as v
from .functional import _hf


class FusedAddRMSNorm(torch.nn.Module):
    """Residual add + RMSNorm over the last dimension, in one kernel.

    ``forward(x, residual)`` returns ``(y, residual_out)``: ``residual_out = x + residual`` (the next
    layer's residual) and ``y = rmsnorm(residual_out) * (weight + weight_offset)``.

    Args:
        hidden_size: H, the normalized dimension.
        eps: added to the mean square inside the square root.
        weight_offset: added to the weight in fp32; 1.0 for Gemma's ``(1 + w)`` form.
        numerics: "contract" (y rounded once, from the fp32 sum) or "hf" (HF LlamaRMSNorm's
            roundings, bit for bit; see ``kernels.py``).
        pdl: launch with programmatic dependent launch (see ``addrmsnorm.fused_add_rmsnorm``).
        device, dtype: of the weight.

    The parameter is named ``weight``, so the state dict of an HF ``LlamaRMSNorm`` (or Mistral's,
    Qwen's) loads as is. It starts so that ``weight + weight_offset`` is 1. It trains: gradients
    reach x, residual and weight through the Triton backward. (With numerics="hf" the backward is
    the contract's: the gradient of HF's extra roundings is taken as the identity, as autograd of
    HF's own module does.)
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6, weight_offset: float = 0.0,
                 numerics: str = "contract", *, pdl: bool = False, device=None, dtype=None):
        super().__init__()
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"hidden_size must be a positive int, got {hidden_size!r}")
        self.hidden_size = hidden_size
        self.eps = v.check_scalar("eps", eps, positive=True)
        self.weight_offset = v.check_scalar("weight_offset", weight_offset, positive=False)
        self.numerics = numerics
        self._hf = _hf(numerics)
        if not isinstance(pdl, bool):
            raise TypeError(f"pdl must be a bool, got {type(pdl).__name__}")
        self.pdl = pdl
        self.weight = torch.nn.Parameter(
            torch.full((hidden_size,), 1.0 - self.weight_offset, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        # Straight to the operator: it checks the tensors, and its autograd (C++ on the cpp backend)
        # computes and saves rstd when a gradient may be needed. The scalars were checked once, above.
        y, residual_out, _ = ops.fused_add_rmsnorm(x, residual, self.weight, self.eps, self.weight_offset,
                                                   False, self._hf, self.pdl)
        return y, residual_out

    def extra_repr(self) -> str:
        return (f"{self.hidden_size}, eps={self.eps}, weight_offset={self.weight_offset}, "
                f"numerics={self.numerics!r}" + (", pdl=True" if self.pdl else ""))
