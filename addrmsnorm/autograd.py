"""Autograd of the ``torch.ops.addrmsnorm`` operators, for the Triton backend.

The cpp backend registers the same kernels in C++ (``torch_ext/autograd.cpp``); whichever backend
serves a process, exactly one set is registered (``ops.py``), covering every operator, and the tests
hold the two to the same gradients, bit for bit, and to the same messages.

* ``norm`` (functional): when grad mode is on and an input requires grad, the forward always
  computes rstd and saves (h, rstd, weight) -- h is residual_out, or x itself without a residual;
  x and residual are never saved otherwise. The caller still gets a 0-element rstd unless it asked
  for one. Otherwise it goes straight to the backend.

      dx = dresidual = d(rmsnorm)/dh . dy  +  dresidual_out        (one tensor when the dtypes agree)
      dweight        = sum over rows of dy * h * rstd, in fp32

* ``norm`` with z (the gated norm): ``GatedFunction`` saves x, z and the weight; its backward is
  ``gated_backward``, the fp32 formulas in torch operations (so a second-order gradient is taken too).
* ``norm_backward``: first order only. Where its result would take part in a graph (grad mode on,
  as under ``create_graph=True``, and an input that requires grad), its outputs get a node that
  raises ``no_double_backward_message()`` if a backward ever reaches it: a second-order gradient is
  refused, never a silent zero (torch's fallback for an operator with no Autograd kernel warns and
  returns no gradient). A first-order ``create_graph=True`` call still works.
* the mutating operators and the quantized ones: no backward. With grad mode on they refuse any
  argument that requires grad, naming it; in every mode the mutating ones bump the version counters
  of what they wrote, so that autograd raises for a saved tensor they overwrote, as it does for
  torch's own in-place ops.
"""

from __future__ import annotations

import torch
from torch import _C

IN_PLACE_OPS = ("norm_", "norm_into")


# The functional form with autograd of each mutating call's variant, as a refusal names it (training_form picks
# the variant from the call's arguments); torch_ext/autograd.cpp has the same table.
TRAINING_FORMS = {
    "fused": "call addrmsnorm.fused_add_rmsnorm(x, residual, weight) without out= or residual_out=",
    "plain": "call addrmsnorm.rmsnorm(x, weight) without out=",
    "sandwich": "call addrmsnorm.sandwich_rmsnorm(x, residual, post_weight, weight) without out= or residual_out=",
    "gated": "call addrmsnorm.gated_rmsnorm(x, z, weight) without out=",
    "pair": "call addrmsnorm.rmsnorm_pair(a, a_weight, b, b_weight) without out=",
    "qk": "normalize the q and k views with addrmsnorm.rmsnorm(x, weight)",
    "rope": "call addrmsnorm.qk_rmsnorm_rope(q, k, q_weight, k_weight, ...)",
}


def training_form(residual=None, post_weight=None, z=None, b=None, qk_rotated: bool | None = None) -> str:
    """The key of TRAINING_FORMS for a norm call, or for a QK-norm call (qk_rotated: whether it rotates)."""
    if qk_rotated is not None:
        return "rope" if qk_rotated else "qk"
    if z is not None:
        return "gated"
    if b is not None:
        return "pair"
    if post_weight is not None:
        return "sandwich"
    return "plain" if residual is None else "fused"


def no_backward_message(op: str, arg: str, form: str = "fused") -> str:
    """The refusal of an operator with no backward, naming the functional form of the call's variant
    (TRAINING_FORMS); torch_ext/autograd.cpp words it the same. The quantized ones are for inference alone."""
    if "quant" in op:
        return (f"addrmsnorm::{op} has no backward, but {arg} requires grad; quantized outputs are for "
                f"inference: call it under torch.no_grad() or torch.inference_mode()")
    return (f"addrmsnorm::{op} has no backward, but {arg} requires grad; call it under torch.no_grad(), "
            f"or for training {TRAINING_FORMS[form]}")


def no_double_backward_message() -> str:
    """The refusal of a second-order gradient; torch_ext/autograd.cpp words it the same."""
    return ("addrmsnorm::norm_backward has no backward: the gradients of fused_add_rmsnorm, "
            "rmsnorm, FusedAddRMSNorm and RMSNorm are first order only, so a gradient of a gradient "
            "(torch.autograd.grad(..., create_graph=True), then a backward through its result) cannot be taken; "
            "for higher-order gradients use the reference, addrmsnorm.fused_add_rmsnorm_ref or "
            "addrmsnorm.rmsnorm_ref, which autograd differentiates to any order")


def _refuse_grad(op: str, names, tensors, form: str = "fused") -> None:
    if not _C.is_grad_enabled():
        return
    for name, t in zip(names, tensors):
        if t is not None and t.requires_grad:
            raise RuntimeError(no_backward_message(op, name, form))


class NormFunction(torch.autograd.Function):
    """The functional operator's autograd, in Python: ``apply(x, residual, weight, eps, weight_offset,
    return_rstd, numerics, pdl, x_scale) -> (y, residual_out, rstd)``. Without a residual h is x, and the
    backward takes its rows of one stride (a view of two strides, a head's rows, is copied there).
    weight None: the weightless norm (no weight gradient). x_scale != 1: dx = x_scale * dresidual.
    post_weight: the sandwich norm, whose backward is the fused op's (dh), then the first norm's, the
    plain norm's backward of x with dh as its dy: two backward launches, each of its own rows."""

    @staticmethod
    def forward(ctx, x, residual, weight, eps, weight_offset, return_rstd, numerics, pdl, x_scale=1.0,
                post_weight=None, post_weight_offset=0.0):
        with _C._AutoDispatchBelowAutograd():
            # rstd always: the backward needs the forward's own, not one recomputed from rounded h.
            y, h, rstd = torch.ops.addrmsnorm.norm.default(
                x, residual, weight, eps, weight_offset=weight_offset, return_rstd=True, numerics=numerics, pdl=pdl,
                x_scale=x_scale, post_weight=post_weight, post_weight_offset=post_weight_offset)
        ctx.set_materialize_grads(False)  # an unused output costs no zero-filled gradient
        ctx.plain = residual is None
        ctx.sandwich = post_weight is not None
        ctx.save_for_backward(x if ctx.plain else h, rstd, weight, *((x, post_weight) if ctx.sandwich else ()))
        ctx.post_weight_offset = post_weight_offset
        ctx.weight_offset = weight_offset
        ctx.x_scale = x_scale
        ctx.x_dtype = x.dtype
        if not return_rstd:
            rstd = rstd.new_empty((0,))
        ctx.mark_non_differentiable(rstd)
        if ctx.plain:
            ctx.mark_non_differentiable(h)
        return y, h, rstd

    @staticmethod
    def backward(ctx, dy, dresidual_out, _drstd):
        h, rstd, weight = ctx.saved_tensors[:3]
        need_x, need_res, need_w = ctx.needs_input_grad[:3]
        need_w = need_w and weight is not None
        rest = (None,) * 8
        if ctx.plain:
            if dy is None:
                return (None, None, None) + rest
            H = h.shape[-1]
            dres, _, dweight = torch.ops.addrmsnorm.norm_backward.default(
                dy.reshape(-1, H).contiguous(), None, h.reshape(-1, H), rstd.reshape(-1), weight,
                weight_offset=ctx.weight_offset, weight_grad=need_w)
            return (dres.view(h.shape) if need_x else None, None, dweight if need_w else None) + rest
        if dy is None:
            dy = torch.zeros(h.shape, dtype=ctx.x_dtype, device=h.device)
        elif not dy.is_contiguous():
            dy = dy.contiguous()  # e.g. the expanded gradient of a sum()
        if dresidual_out is not None and not dresidual_out.is_contiguous():
            dresidual_out = dresidual_out.contiguous()
        if ctx.sandwich:
            return _sandwich_backward(ctx, dy, dresidual_out, h, rstd, weight, need_x, need_res, need_w)
        dres, dx, dweight = torch.ops.addrmsnorm.norm_backward.default(
            dy, dresidual_out, h, rstd, weight, weight_offset=ctx.weight_offset, weight_grad=need_w)
        if ctx.x_scale != 1.0:  # the scaled residual: dx = x_scale * dh, from dresidual (dh in the residual's dtype)
            dx = (dres * ctx.x_scale).to(ctx.x_dtype) if need_x else None
        elif ctx.x_dtype == h.dtype:
            dx = dres  # one tensor, handed back for both x and residual
        return (dx if need_x else None, dres if need_res else None, dweight if need_w else None) + rest


def _sandwich_backward(ctx, dy, dresidual_out, h, rstd, weight, need_x, need_res, need_w):
    """The sandwich norm's gradients: dh from the second norm (and residual_out's gradient), which is
    residual's; then x's and post_weight's through the first norm, rmsnorm(x; post_weight), with dh as
    its output's gradient (dh in x's dtype: the residual is x's dtype here)."""
    x, post_weight = ctx.saved_tensors[3:]
    need_pw = ctx.needs_input_grad[9]
    dres, _, dweight = torch.ops.addrmsnorm.norm_backward.default(
        dy, dresidual_out, h, rstd[0], weight, weight_offset=ctx.weight_offset, weight_grad=need_w)
    dx = dpost = None
    if need_x or need_pw:
        H = x.shape[-1]
        dx, _, dpost = torch.ops.addrmsnorm.norm_backward.default(
            dres.reshape(-1, H), None, x.reshape(-1, H), rstd[1].reshape(-1), post_weight,
            weight_offset=ctx.post_weight_offset, weight_grad=need_pw)
        dx = dx.view(x.shape)
    return (dx if need_x else None, dres if need_res else None, dweight if need_w else None,
            None, None, None, None, None, None, dpost if need_pw else None, None)


class GatedFunction(torch.autograd.Function):
    """The gated norm's autograd: ``apply(x, residual, weight, eps, weight_offset, return_rstd, numerics, pdl, z,
    group_size, norm_before_gate) -> (y, residual_out, rstd)`` (residual None, rstd not asked for: the operator
    refuses others). The forward saves x, z and the weight; the backward is gated_backward's fp32 formulas
    in torch operations (not a kernel of ours), the contract's gradient whatever the forward's numerics."""

    @staticmethod
    def forward(ctx, x, residual, weight, eps, weight_offset, return_rstd, numerics, pdl, z, group_size,
                norm_before_gate):
        with _C._AutoDispatchBelowAutograd():
            y, h, rstd = torch.ops.addrmsnorm.norm.default(
                x, residual, weight, eps, weight_offset=weight_offset, return_rstd=return_rstd, numerics=numerics,
                pdl=pdl, z=z, group_size=group_size, norm_before_gate=norm_before_gate)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, z, weight)
        ctx.args = (eps, weight_offset, group_size or x.shape[-1], norm_before_gate)
        ctx.mark_non_differentiable(h, rstd)
        return y, h, rstd

    @staticmethod
    def backward(ctx, dy, _dres, _drstd):
        x, z, weight = ctx.saved_tensors
        if dy is None:
            return (None,) * 11
        dx, dz, dw = gated_backward(x, z, weight, dy, *ctx.args)
        need_x, _, need_w = ctx.needs_input_grad[:3]
        return (dx if need_x else None, None, dw if need_w and weight is not None else None,
                None, None, None, None, None, dz if ctx.needs_input_grad[8] else None, None, None)


def gated_backward(x, z, weight, dy, eps: float, weight_offset: float, group_size: int, norm_before_gate: bool):
    """The gated norm's gradients (dx, dz, dweight) in fp32, rounded to the inputs' dtypes; torch_ext/autograd.cpp
    computes the same. With s = silu(z), s' = sigmoid(z) * (1 + z * (1 - sigmoid(z))), per group of the row
    n = v * rstd and w = weight + weight_offset:

        norm before gate (v = x):   dn = dy * w * s;  dz = dy * n * w * s';   dweight = sum_rows dy * n * s
        gate first (v = x * s):     dn = dy * w;      dweight = sum_rows dy * n
        dv = rstd * (dn - n * mean(dn * n))   (over the group);  gate first: dx = dv * s, dz = dv * x * s'
    """
    H = x.shape[-1]
    shape = (*x.shape[:-1], H // group_size, group_size)
    xf, zf, dyf = x.float(), z.float(), dy.float()
    sig = torch.sigmoid(zf)
    s = zf * sig
    ds = sig * (1.0 + zf * (1.0 - sig))
    w = (torch.ones(H, dtype=torch.float32, device=x.device) if weight is None else weight.float()) + weight_offset
    v = xf if norm_before_gate else xf * s
    vg = v.view(shape)
    rstd = torch.rsqrt(vg.pow(2).mean(-1, keepdim=True) + eps)
    n = (vg * rstd).view(x.shape)
    dn = dyf * w * s if norm_before_gate else dyf * w
    dng, ng = dn.view(shape), n.view(shape)
    dv = (rstd * (dng - ng * (dng * ng).mean(-1, keepdim=True))).view(x.shape)
    if norm_before_gate:
        dx, dz, dw = dv, dyf * n * w * ds, (dyf * n * s)
    else:
        dx, dz, dw = dv * s, dv * xf * ds, dyf * n
    dw = None if weight is None else dw.reshape(-1, H).sum(0).to(weight.dtype)
    return dx.to(x.dtype), dz.to(z.dtype), dw


def rope_angles(positions, cos_sin_cache, cos, sin, rotary_dim: int, style: int, inside: bool = False):
    """The rotation's cos and sin per rotated column, (tokens, rotary_dim) fp32: HF's cos and sin as they are,
    or a cos_sin_cache's rows at the positions spread over the columns as the style pairs them. With inside (every
    position known to be a row of the cache) the two come from one gather and one copy, as views of one (tokens,
    2 * rotary_dim) tensor (a row stride of 2 * rotary_dim): the same values."""
    if cos is not None:
        return cos.float(), sin.float()
    if inside:  # the rows (h cosines, h sines), then each value copied to its two columns: [c | c | s | s] (NeoX)
        rows = cos_sin_cache[:, :rotary_dim].index_select(0, positions.long()).float()
        T, h = rows.shape[0], rotary_dim // 2
        shape = (T, 2, 1, h) if style == 0 else (T, 2, h, 1)
        wide = (T, 2, 2, h) if style == 0 else (T, 2, h, 2)
        cs = rows.view(shape).expand(wide).reshape(T, 2 * rotary_dim)
        return cs[:, :rotary_dim], cs[:, rotary_dim:]
    half = rotary_dim // 2
    # A position outside the cache (a call with check_positions=False) has NaN angles, never another row's.
    p = positions.long()
    outside = (p < 0) | (p >= cos_sin_cache.shape[0])
    rows = cos_sin_cache[p.clamp(0, max(cos_sin_cache.shape[0] - 1, 0))].float()
    rows = rows.masked_fill(outside[:, None], float("nan"))
    c, s = rows[:, :half], rows[:, half:rotary_dim]
    if style == 0:
        return torch.cat([c, c], -1), torch.cat([s, s], -1)
    return c.repeat_interleave(2, -1), s.repeat_interleave(2, -1)


def _rotated_pairs(v, style: int):
    """Each column's partner, the pair's first negated: rotate_half (NeoX) or its interleaved form (GPT-J)."""
    if style == 0:
        a, b = v.chunk(2, dim=-1)
        return torch.cat([-b, a], dim=-1)
    return torch.stack([-v[..., 1::2], v[..., 0::2]], dim=-1).flatten(-2)


def qk_rope_backward(x, weight, dy, eps: float, weight_offset: float, cos, sin, rotary_dim: int, style: int):
    """The gradients (dx, dweight) of one part (q's heads or k's, x (tokens, heads, head_dim)) of the QK norm
    with the rotation, in fp32 torch operations (differentiable again), rounded to the inputs' dtypes. The
    rotation's transpose is the rotation by the negative angle, dn = dy * cos - pairs(dy) * sin on the rotated
    columns (dy elsewhere); then the norm's, with n = x * rstd and w = weight + weight_offset:

        dx = rstd * (dn * w - n * mean(dn * w * n)),   dweight = sum over tokens and heads of dn * n
    """
    xf, dyf = x.float(), dy.float()
    c, s = cos[:, None, :], sin[:, None, :]
    r = dyf[..., :rotary_dim]
    dn = torch.cat([r * c - _rotated_pairs(r, style) * s, dyf[..., rotary_dim:]], dim=-1)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    n = xf * rstd
    w = (torch.ones(x.shape[-1], dtype=torch.float32, device=x.device) if weight is None else weight.float())
    g = dn * (w + weight_offset)
    dx = rstd * (g - n * (g * n).mean(-1, keepdim=True))
    dw = None if weight is None else (dn * n).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
    return dx.to(x.dtype), dw


def _norm_backward(keyset, dy, dresidual_out, h, rstd, weight, weight_offset=0.0, weight_grad=True, cos=None,
                   sin=None, rope_groups=0, rotary_dim=0, rope_style=0, eps=0.0):
    with _C._AutoDispatchBelowAutograd():
        grads = torch.ops.addrmsnorm.norm_backward.default.redispatch(
            keyset & _C._after_autograd_keyset, dy, dresidual_out, h, rstd, weight, weight_offset, weight_grad, cos,
            sin, rope_groups, rotary_dim, rope_style, eps)
    if not (_C.is_grad_enabled() and any(t is not None and t.requires_grad
                                         for t in (dy, dresidual_out, h, rstd, weight, cos, sin))):
        return grads
    # As torch.autograd.function.once_differentiable, the outputs hang off a node that raises when reached, so
    # only an actual second-order backward fails; unlike it, the node's edges lead to the inputs, so that every
    # way of asking (.backward(), torch.autograd.grad with or without allow_unused) reaches it.
    sources = [t for t in (dy, dresidual_out, h, rstd, weight, cos, sin) if t is not None and t.requires_grad]
    err = torch._C._functions.DelayedError(no_double_backward_message().encode(), len(grads) + len(sources))
    return tuple(err(*grads, *sources)[:len(grads)])


def _norm(keyset, x, residual, weight, eps, weight_offset=0.0, return_rstd=False, numerics=0, pdl=False,
          x_scale=1.0, post_weight=None, post_weight_offset=0.0, z=None, group_size=0, norm_before_gate=True):
    if _C.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, residual, weight, post_weight, z)):
        if z is not None:  # the gated norm (no residual: the operator refuses one, below autograd)
            return GatedFunction.apply(x, residual, weight, eps, weight_offset, return_rstd, numerics, pdl, z,
                                       group_size, norm_before_gate)
        return NormFunction.apply(x, residual, weight, eps, weight_offset, return_rstd, numerics, pdl, x_scale,
                                  post_weight, post_weight_offset)
    with _C._AutoDispatchBelowAutograd():
        return torch.ops.addrmsnorm.norm.default.redispatch(
            keyset & _C._after_autograd_keyset, x, residual, weight, eps, weight_offset, return_rstd, numerics, pdl,
            x_scale, post_weight, post_weight_offset, z, group_size, norm_before_gate)


def _norm_(keyset, x, residual, weight, eps, weight_offset=0.0, numerics=0, pdl=False, x_scale=1.0, post_weight=None,
           post_weight_offset=0.0, z=None, group_size=0, norm_before_gate=True, b=None, b_weight=None):
    _refuse_grad("norm_", ("x", "residual", "weight", "post_weight", "z", "b", "b_weight"),
                 (x, residual, weight, post_weight, z, b, b_weight), training_form(residual, post_weight, z, b))
    with _C._AutoDispatchBelowADInplaceOrView():
        torch.ops.addrmsnorm.norm_.default.redispatch(
            keyset & _C._after_ADInplaceOrView_keyset, x, residual, weight, eps, weight_offset, numerics, pdl,
            x_scale, post_weight, post_weight_offset, z, group_size, norm_before_gate, b, b_weight)
    torch.autograd.graph.increment_version(_written(x, residual, b))


def _written(*tensors):
    return tuple(t for t in tensors if t is not None)


def _norm_into(keyset, x, residual, weight, out, residual_out, rstd, eps, weight_offset=0.0, numerics=0, pdl=False,
               x_scale=1.0, post_weight=None, post_weight_offset=0.0, z=None, group_size=0, norm_before_gate=True,
               b=None, b_weight=None, b_out=None):
    _refuse_grad("norm_into", ("x", "residual", "weight", "out", "residual_out", "rstd", "post_weight", "z", "b",
                               "b_weight", "b_out"),
                 (x, residual, weight, out, residual_out, rstd, post_weight, z, b, b_weight, b_out),
                 training_form(residual, post_weight, z, b))
    with _C._AutoDispatchBelowADInplaceOrView():
        torch.ops.addrmsnorm.norm_into.default.redispatch(
            keyset & _C._after_ADInplaceOrView_keyset, x, residual, weight, out, residual_out, rstd, eps,
            weight_offset, numerics, pdl, x_scale, post_weight, post_weight_offset, z, group_size, norm_before_gate,
            b, b_weight, b_out)
    torch.autograd.graph.increment_version(_written(out, residual_out, rstd, b_out))


def _norm_quant(keyset, x, residual, weight, eps, quant_dtype, scale=None, group_size=0, scale_ub=None,
                column_major_scales=False, ue8m0_scales=False, weight_offset=0.0, return_y=False, pdl=False,
                swizzled_scales=False, x_scale=1.0, post_weight=None, post_weight_offset=0.0, z=None, gate_group_size=0,
                norm_before_gate=True):
    # Quantized outputs are for inference: no backward.
    _refuse_grad("norm_quant", ("x", "residual", "weight", "post_weight", "z"), (x, residual, weight, post_weight, z))
    with _C._AutoDispatchBelowAutograd():
        return torch.ops.addrmsnorm.norm_quant.default.redispatch(
            keyset & _C._after_autograd_keyset, x, residual, weight, eps, quant_dtype, scale, group_size,
            scale_ub, column_major_scales, ue8m0_scales, weight_offset, return_y, pdl, swizzled_scales, x_scale,
            post_weight, post_weight_offset, z, gate_group_size, norm_before_gate)


def _norm_quant_into(keyset, x, residual, weight, out, residual_out, scales_out, y, eps, scale=None, group_size=0,
                     scale_ub=None, ue8m0_scales=False, weight_offset=0.0, pdl=False, swizzled_scales=False,
                     x_scale=1.0, post_weight=None, post_weight_offset=0.0, z=None, gate_group_size=0,
                     norm_before_gate=True):
    _refuse_grad("norm_quant_into", ("x", "residual", "weight", "out", "residual_out", "scales_out", "y",
                                     "post_weight", "z"),
                 (x, residual, weight, out, residual_out, scales_out, y, post_weight, z))
    with _C._AutoDispatchBelowADInplaceOrView():
        torch.ops.addrmsnorm.norm_quant_into.default.redispatch(
            keyset & _C._after_ADInplaceOrView_keyset, x, residual, weight, out, residual_out, scales_out, y,
            eps, scale, group_size, scale_ub, ue8m0_scales, weight_offset, pdl, swizzled_scales, x_scale,
            post_weight, post_weight_offset, z, gate_group_size, norm_before_gate)
    torch.autograd.graph.increment_version(_written(out, residual_out, scales_out, y))


def _qk_rmsnorm_(keyset, qkv, q_weight, k_weight, eps, num_q_heads, num_kv_heads, head_dim, weight_offset=0.0,
                 numerics=0, pdl=False, *rope):
    _refuse_grad("qk_rmsnorm_", ("qkv", "q_weight", "k_weight"), (qkv, q_weight, k_weight),
                 training_form(qk_rotated=any(t is not None for t in rope[:4])))
    with _C._AutoDispatchBelowADInplaceOrView():
        torch.ops.addrmsnorm.qk_rmsnorm_.default.redispatch(
            keyset & _C._after_ADInplaceOrView_keyset, qkv, q_weight, k_weight, eps, num_q_heads, num_kv_heads,
            head_dim, weight_offset, numerics, pdl, *rope)
    torch.autograd.graph.increment_version((qkv,))


_KERNELS = {
    "norm": _norm,
    "norm_": _norm_,
    "norm_into": _norm_into,
    "norm_backward": _norm_backward,
    "norm_quant": _norm_quant,
    "norm_quant_into": _norm_quant_into,
    "qk_rmsnorm_": _qk_rmsnorm_,
}


def register(lib: torch.library.Library) -> None:
    """Register the Python Autograd kernels of every operator (the Triton backend's)."""
    for name, fn in _KERNELS.items():
        lib.impl(name, fn, "Autograd", with_keyset=True)
