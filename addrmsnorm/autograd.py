"""Autograd of the ``torch.ops.addrmsnorm`` operators, for the Triton backend.

The cpp backend registers the same kernels in C++ (``torch_ext/autograd.cpp``); whichever backend
serves a process, exactly one set is registered (``ops.py``), and the tests hold the two to the same
gradients, bit for bit, and to the same messages.

* ``fused_add_rmsnorm`` (functional): when grad mode is on and an input requires grad, the forward
  always computes rstd and saves (h, rstd, weight); x and residual are never saved. The caller still
  gets a 0-element rstd unless it asked for one. Otherwise it goes straight to the backend.

      dx = dresidual = d(rmsnorm)/dh . dy  +  dresidual_out        (one tensor when the dtypes agree)
      dweight        = sum over rows of dy * h * rstd, in fp32

* ``fused_add_rmsnorm_backward``: first order only. Where its result would take part in a graph
  (grad mode on, as under ``create_graph=True``, and an input that requires grad), its outputs get
  a node that raises ``no_double_backward_message()`` if a backward ever reaches it: a second-order
  gradient is refused, never a silent zero (torch's fallback for an operator with no Autograd
  kernel warns and returns no gradient). A first-order ``create_graph=True`` call still works.
* ``fused_add_rmsnorm_`` and ``fused_add_rmsnorm_into`` (mutating): no backward. With grad mode on
  they refuse any argument that requires grad, naming it; in every mode they bump the version
  counters of what they wrote, so that autograd raises for a saved tensor they overwrote, as it does
  for torch's own in-place ops.
"""

from __future__ import annotations

import torch
from torch import _C

IN_PLACE_OPS = ("fused_add_rmsnorm_", "fused_add_rmsnorm_into")


def no_backward_message(op: str, arg: str) -> str:
    """The refusal of an operator with no backward; torch_ext/autograd.cpp words it the same. The
    quantized ones are for inference alone; the other mutating ones have a functional twin with autograd."""
    if "quant" in op:
        return (f"addrmsnorm::{op} has no backward, but {arg} requires grad; quantized outputs are for "
                f"inference: call it under torch.no_grad() or torch.inference_mode()")
    if op.startswith("qk_"):
        return (f"addrmsnorm::{op} has no backward, but {arg} requires grad; call it under torch.no_grad(), "
                f"or for training normalize the q and k views with addrmsnorm.rmsnorm(x, weight)")
    if op.startswith("rmsnorm"):
        return (f"addrmsnorm::{op} has no backward, but {arg} requires grad; call it under torch.no_grad(), "
                f"or for training call addrmsnorm.rmsnorm(x, weight) without out=")
    return (f"addrmsnorm::{op} has no backward, but {arg} requires grad; call it under torch.no_grad(), "
            f"or for training call addrmsnorm.fused_add_rmsnorm(x, residual, weight) without out= or "
            f"residual_out=")


def no_double_backward_message() -> str:
    """The refusal of a second-order gradient; torch_ext/autograd.cpp words it the same."""
    return ("addrmsnorm::fused_add_rmsnorm_backward has no backward: the gradients of fused_add_rmsnorm, "
            "rmsnorm, FusedAddRMSNorm and RMSNorm are first order only, so a gradient of a gradient "
            "(torch.autograd.grad(..., create_graph=True), then a backward through its result) cannot be taken; "
            "for higher-order gradients use the reference, addrmsnorm.fused_add_rmsnorm_ref or "
            "addrmsnorm.rmsnorm_ref, which autograd differentiates to any order")


def _refuse_grad(op: str, names, tensors) -> None:
    if not _C.is_grad_enabled():
        return
    for name, t in zip(names, tensors):
        if t is not None and t.requires_grad:
            raise RuntimeError(no_backward_message(op, name))


class FusedAddRMSNormFunction(torch.autograd.Function):
    """The functional operator's autograd, in Python: ``apply(x, residual, weight, eps,
    weight_offset, return_rstd, hf, pdl) -> (y, residual_out, rstd)``."""

    @staticmethod
    def forward(ctx, x, residual, weight, eps, weight_offset, return_rstd, hf, pdl):
        with _C._AutoDispatchBelowAutograd():
            # rstd always: the backward needs the forward's own, not one recomputed from rounded h.
            y, h, rstd = torch.ops.addrmsnorm.fused_add_rmsnorm.default(
                x, residual, weight, eps, weight_offset, True, hf, pdl)
        ctx.set_materialize_grads(False)  # an unused output costs no zero-filled gradient
        ctx.save_for_backward(h, rstd, weight)
        ctx.weight_offset = weight_offset
        ctx.x_dtype = x.dtype
        if not return_rstd:
            rstd = rstd.new_empty((0,))
        ctx.mark_non_differentiable(rstd)
        return y, h, rstd

    @staticmethod
    def backward(ctx, dy, dresidual_out, _drstd):
        h, rstd, weight = ctx.saved_tensors
        if dy is None:
            dy = torch.zeros(h.shape, dtype=ctx.x_dtype, device=h.device)
        elif not dy.is_contiguous():
            dy = dy.contiguous()  # e.g. the expanded gradient of a sum()
        if dresidual_out is not None and not dresidual_out.is_contiguous():
            dresidual_out = dresidual_out.contiguous()
        need_x, need_res, need_w = ctx.needs_input_grad[:3]
        dres, dx, dweight = torch.ops.addrmsnorm.fused_add_rmsnorm_backward.default(
            dy, dresidual_out, h, rstd, weight, ctx.weight_offset, need_w)
        if ctx.x_dtype == h.dtype:
            dx = dres  # one tensor, handed back for both x and residual
        return (dx if need_x else None, dres if need_res else None, dweight if need_w else None,
                None, None, None, None, None)


def _fused_add_rmsnorm_backward(keyset, dy, dresidual_out, h, rstd, weight, weight_offset=0.0, weight_grad=True):
    with _C._AutoDispatchBelowAutograd():
        grads = torch.ops.addrmsnorm.fused_add_rmsnorm_backward.default.redispatch(
            keyset & _C._after_autograd_keyset, dy, dresidual_out, h, rstd, weight, weight_offset, weight_grad)
    if not (_C.is_grad_enabled() and any(t is not None and t.requires_grad
                                         for t in (dy, dresidual_out, h, rstd, weight))):
        return grads
    # As torch.autograd.function.once_differentiable: the outputs hang off a node that raises when
    # reached, so only an actual second-order backward fails.
    err = torch._C._functions.DelayedError(no_double_backward_message().encode(), len(grads))
    return err(*(g.detach().requires_grad_() for g in grads))


def _fused_add_rmsnorm(keyset, x, residual, weight, eps, weight_offset=0.0, return_rstd=False, hf=False,
                       pdl=False):
    if _C.is_grad_enabled() and (x.requires_grad or residual.requires_grad or weight.requires_grad):
        return FusedAddRMSNormFunction.apply(x, residual, weight, eps, weight_offset, return_rstd, hf, pdl)
    with _C._AutoDispatchBelowAutograd():
        return torch.ops.addrmsnorm.fused_add_rmsnorm.default.redispatch(
            keyset & _C._after_autograd_keyset, x, residual, weight, eps, weight_offset, return_rstd, hf, pdl)


def _fused_add_rmsnorm_(keyset, x, residual, weight, eps, weight_offset=0.0, hf=False, pdl=False):
    _refuse_grad("fused_add_rmsnorm_", ("x", "residual", "weight"), (x, residual, weight))
    with _C._AutoDispatchBelowADInplaceOrView():
        torch.ops.addrmsnorm.fused_add_rmsnorm_.default.redispatch(
            keyset & _C._after_ADInplaceOrView_keyset, x, residual, weight, eps, weight_offset, hf, pdl)
    torch.autograd.graph.increment_version((x, residual))


def _fused_add_rmsnorm_into(keyset, x, residual, weight, out, residual_out, rstd, eps, weight_offset=0.0,
                            hf=False, pdl=False):
    _refuse_grad("fused_add_rmsnorm_into", ("x", "residual", "weight", "out", "residual_out", "rstd"),
                 (x, residual, weight, out, residual_out, rstd))
    with _C._AutoDispatchBelowADInplaceOrView():
        torch.ops.addrmsnorm.fused_add_rmsnorm_into.default.redispatch(
            keyset & _C._after_ADInplaceOrView_keyset, x, residual, weight, out, residual_out, rstd, eps,
            weight_offset, hf, pdl)
    torch.autograd.graph.increment_version((out, residual_out) if rstd is None else (out, residual_out, rstd))


def _fused_add_rmsnorm_quant(keyset, x, residual, weight, eps, quant_dtype, scale=None, group_size=0,
                             scale_ub=None, column_major_scales=False, ue8m0_scales=False, weight_offset=0.0,
                             return_y=False, pdl=False, swizzled_scales=False):
    # Quantized outputs are for inference: no backward.
    _refuse_grad("fused_add_rmsnorm_quant", ("x", "residual", "weight"), (x, residual, weight))
    with _C._AutoDispatchBelowAutograd():
        return torch.ops.addrmsnorm.fused_add_rmsnorm_quant.default.redispatch(
            keyset & _C._after_autograd_keyset, x, residual, weight, eps, quant_dtype, scale, group_size,
            scale_ub, column_major_scales, ue8m0_scales, weight_offset, return_y, pdl, swizzled_scales)


def _fused_add_rmsnorm_quant_into(keyset, x, residual, weight, out, residual_out, scales_out, y, eps, scale=None,
                                  group_size=0, scale_ub=None, ue8m0_scales=False, weight_offset=0.0, pdl=False,
                                  swizzled_scales=False):
    _refuse_grad("fused_add_rmsnorm_quant_into", ("x", "residual", "weight", "out", "residual_out",
                                                  "scales_out", "y"),
                 (x, residual, weight, out, residual_out, scales_out, y))
    with _C._AutoDispatchBelowADInplaceOrView():
        torch.ops.addrmsnorm.fused_add_rmsnorm_quant_into.default.redispatch(
            keyset & _C._after_ADInplaceOrView_keyset, x, residual, weight, out, residual_out, scales_out, y,
            eps, scale, group_size, scale_ub, ue8m0_scales, weight_offset, pdl, swizzled_scales)
    torch.autograd.graph.increment_version(tuple(t for t in (out, residual_out, scales_out, y) if t is not None))


class RMSNormFunction(torch.autograd.Function):
    """The plain norm's autograd: ``apply(x, weight, eps, weight_offset, return_rstd, numerics, pdl) -> (y,
    rstd)``. It saves (x, rstd, weight); the backward is fused_add_rmsnorm_backward with h = x (the
    plain norm is the fused one with h = x), whose dresidual is dx."""

    @staticmethod
    def forward(ctx, x, weight, eps, weight_offset, return_rstd, numerics, pdl):
        with _C._AutoDispatchBelowAutograd():
            y, rstd = torch.ops.addrmsnorm.rmsnorm.default(x, weight, eps, weight_offset, True, numerics, pdl)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, rstd, weight)
        ctx.weight_offset = weight_offset
        if not return_rstd:
            rstd = rstd.new_empty((0,))
        ctx.mark_non_differentiable(rstd)
        return y, rstd

    @staticmethod
    def backward(ctx, dy, _drstd):
        x, rstd, weight = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[:2]
        if dy is None:
            return None, None, None, None, None, None, None
        H = x.shape[-1]
        # The backward takes rows of one stride: a view of two strides (a head's rows) is copied here.
        h = x.reshape(-1, H)
        dres, _, dweight = torch.ops.addrmsnorm.fused_add_rmsnorm_backward.default(
            dy.reshape(-1, H).contiguous(), None, h, rstd.reshape(-1), weight, ctx.weight_offset, need_w)
        return (dres.view(x.shape) if need_x else None, dweight if need_w else None,
                None, None, None, None, None)


def _rmsnorm(keyset, x, weight, eps, weight_offset=0.0, return_rstd=False, numerics=0, pdl=False):
    if _C.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return RMSNormFunction.apply(x, weight, eps, weight_offset, return_rstd, numerics, pdl)
    with _C._AutoDispatchBelowAutograd():
        return torch.ops.addrmsnorm.rmsnorm.default.redispatch(
            keyset & _C._after_autograd_keyset, x, weight, eps, weight_offset, return_rstd, numerics, pdl)


def _rmsnorm_(keyset, x, weight, eps, weight_offset=0.0, numerics=0, pdl=False):
    _refuse_grad("rmsnorm_", ("x", "weight"), (x, weight))
    with _C._AutoDispatchBelowADInplaceOrView():
        torch.ops.addrmsnorm.rmsnorm_.default.redispatch(
            keyset & _C._after_ADInplaceOrView_keyset, x, weight, eps, weight_offset, numerics, pdl)
    torch.autograd.graph.increment_version((x,))


def _rmsnorm_into(keyset, x, weight, out, rstd, eps, weight_offset=0.0, numerics=0, pdl=False):
    _refuse_grad("rmsnorm_into", ("x", "weight", "out", "rstd"), (x, weight, out, rstd))
    with _C._AutoDispatchBelowADInplaceOrView():
        torch.ops.addrmsnorm.rmsnorm_into.default.redispatch(
            keyset & _C._after_ADInplaceOrView_keyset, x, weight, out, rstd, eps, weight_offset, numerics, pdl)
    torch.autograd.graph.increment_version((out,) if rstd is None else (out, rstd))


def _qk_rmsnorm_(keyset, qkv, q_weight, k_weight, eps, num_q_heads, num_kv_heads, head_dim, weight_offset=0.0,
                 numerics=0, pdl=False):
    _refuse_grad("qk_rmsnorm_", ("qkv", "q_weight", "k_weight"), (qkv, q_weight, k_weight))
    with _C._AutoDispatchBelowADInplaceOrView():
        torch.ops.addrmsnorm.qk_rmsnorm_.default.redispatch(
            keyset & _C._after_ADInplaceOrView_keyset, qkv, q_weight, k_weight, eps, num_q_heads, num_kv_heads,
            head_dim, weight_offset, numerics, pdl)
    torch.autograd.graph.increment_version((qkv,))


def _rmsnorm_quant(keyset, x, weight, eps, quant_dtype, scale=None, group_size=0, scale_ub=None,
                   column_major_scales=False, ue8m0_scales=False, weight_offset=0.0, return_y=False, pdl=False,
                   swizzled_scales=False):
    _refuse_grad("rmsnorm_quant", ("x", "weight"), (x, weight))
    with _C._AutoDispatchBelowAutograd():
        return torch.ops.addrmsnorm.rmsnorm_quant.default.redispatch(
            keyset & _C._after_autograd_keyset, x, weight, eps, quant_dtype, scale, group_size, scale_ub,
            column_major_scales, ue8m0_scales, weight_offset, return_y, pdl, swizzled_scales)


def _rmsnorm_quant_into(keyset, x, weight, out, scales_out, y, eps, scale=None, group_size=0, scale_ub=None,
                        ue8m0_scales=False, weight_offset=0.0, pdl=False, swizzled_scales=False):
    _refuse_grad("rmsnorm_quant_into", ("x", "weight", "out", "scales_out", "y"), (x, weight, out, scales_out, y))
    with _C._AutoDispatchBelowADInplaceOrView():
        torch.ops.addrmsnorm.rmsnorm_quant_into.default.redispatch(
            keyset & _C._after_ADInplaceOrView_keyset, x, weight, out, scales_out, y, eps, scale, group_size,
            scale_ub, ue8m0_scales, weight_offset, pdl, swizzled_scales)
    torch.autograd.graph.increment_version(tuple(t for t in (out, scales_out, y) if t is not None))


_KERNELS = {
    "fused_add_rmsnorm": _fused_add_rmsnorm,
    "fused_add_rmsnorm_": _fused_add_rmsnorm_,
    "fused_add_rmsnorm_into": _fused_add_rmsnorm_into,
    "fused_add_rmsnorm_backward": _fused_add_rmsnorm_backward,
    "fused_add_rmsnorm_quant": _fused_add_rmsnorm_quant,
    "fused_add_rmsnorm_quant_into": _fused_add_rmsnorm_quant_into,
    "rmsnorm": _rmsnorm,
    "rmsnorm_": _rmsnorm_,
    "rmsnorm_into": _rmsnorm_into,
    "qk_rmsnorm_": _qk_rmsnorm_,
    "rmsnorm_quant": _rmsnorm_quant,
    "rmsnorm_quant_into": _rmsnorm_quant_into,
}


def register(lib: torch.library.Library, only=None) -> None:
    """Register the Python Autograd kernels: every operator's, or those named in ``only`` (where the
    C++ extension registered its own for the others)."""
    for name, fn in _KERNELS.items():
        if only is None or name in only:
            lib.impl(name, fn, "Autograd", with_keyset=True)
