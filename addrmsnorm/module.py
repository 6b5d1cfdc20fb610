"""``FusedAddRMSNorm``: the fused op as an nn.Module, a drop-in for a decoder block's
``h = x + residual; y = norm(h)`` pair; ``RMSNorm``, the plain norm, for the norms with no residual
before them."""

from __future__ import annotations

import torch

from . import ops
from . import validation as v
from .functional import _hf, plain_numerics_index


def _setting(name: str, check) -> property:
    """A module's setting: check(value) raises, or gives the value kept; the module's operator arguments follow
    (_set_tail)."""
    attr = "_" + name

    def set_(self, value) -> None:
        setattr(self, attr, check(value))
        self._set_tail()

    return property(lambda self: getattr(self, attr), set_)


def _kept(check):
    """A check that raises on a bad value, as a setting's: the value itself is kept."""
    def kept(value):
        check(value)
        return value
    return kept


def _pdl_value(value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"pdl must be a bool, got {type(value).__name__}")
    return value


class FusedAddRMSNorm(torch.nn.Module):
    """Residual add + RMSNorm over the last dimension, in one kernel.

    ``forward(x, residual)`` returns ``(y, residual_out)``: ``residual_out = x + residual`` (the next
    layer's residual) and ``y = rmsnorm(residual_out) * (weight + weight_offset)``.

    Args:
        hidden_size: H, the normalized dimension.
        eps: added to the mean square inside the square root.
        weight_offset: added to the weight in fp32; 1.0 for Gemma's ``(1 + w)`` form.
        numerics: "contract" (y rounded once, from the fp32 sum) or "hf" (HF's roundings:
            LlamaRMSNorm's, or with a weight_offset Gemma's; see ``addrmsnorm.fused_add_rmsnorm``).
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
        v.check_weight_dtype(torch.get_default_dtype() if dtype is None else dtype)
        self.eps = v.check_scalar("eps", eps, positive=True)
        self._weight_offset, self._numerics, self._pdl = 0.0, "contract", False
        self.weight_offset = weight_offset
        self.numerics = numerics
        self.pdl = pdl
        self.weight = torch.nn.Parameter(
            torch.full((hidden_size,), 1.0 - self.weight_offset, device=device, dtype=dtype))

    # weight_offset, numerics and pdl are checked when set, and fold into the operator's trailing
    # arguments once, not on every call.
    weight_offset = _setting("weight_offset", lambda value: v.check_scalar("weight_offset", value, positive=False))
    numerics = _setting("numerics", _kept(_hf))
    pdl = _setting("pdl", _pdl_value)

    def _set_tail(self) -> None:
        # The operator's arguments after eps, named once here and passed by position on every call (ops.tail:
        # none where they are all the schema's defaults).
        self._tail = ops.tail("norm", "eps", weight_offset=self._weight_offset, numerics=int(_hf(self._numerics)),
                              pdl=self._pdl)

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        # Straight to the operator: it checks the tensors, and its autograd (C++ on the cpp backend)
        # computes and saves rstd when a gradient may be needed. The scalars were checked once, above.
        y, residual_out, _ = ops.norm(x, residual, self.weight, self.eps, *self._tail)
        return y, residual_out

    def extra_repr(self) -> str:
        return (f"{self.hidden_size}, eps={self.eps}, weight_offset={self.weight_offset}, "
                f"numerics={self.numerics!r}" + (", pdl=True" if self.pdl else ""))


class RMSNorm(FusedAddRMSNorm):
    """The plain RMSNorm over the last dimension (no residual), the same kernel with the residual
    compiled out: ``forward(x) -> y``, ``y = rmsnorm(x) * (weight + weight_offset)``. Its arguments,
    its ``weight`` parameter (an HF ``LlamaRMSNorm`` state dict loads as is) and its autograd are
    FusedAddRMSNorm's, and numerics may also be "hf_round_once" (OLMo 2's norm: see ``rmsnorm``). x may
    be a view of two leading strides (a head's rows inside a fused QKV buffer), normalized without a
    copy."""

    numerics = _setting("numerics", _kept(plain_numerics_index))  # its three

    def _set_tail(self) -> None:
        self._tail = ops.tail("norm", "eps", weight_offset=self._weight_offset,
                              numerics=plain_numerics_index(self._numerics), pdl=self._pdl)

    def forward(self, x: torch.Tensor):  # type: ignore[override]
        y, _, _ = ops.norm(x, None, self.weight, self.eps, *self._tail)
        return y
