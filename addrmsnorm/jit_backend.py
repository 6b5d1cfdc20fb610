"""The Triton JIT backend of the ``torch.ops.addrmsnorm`` ops: Python validation, then the JIT
launcher. It serves CPU tensors under the Triton interpreter, and CUDA tensors wherever the C++
extension is not built or not chosen (``ops.backend()``).

The operators (``ops.SCHEMAS``) are ``norm``, ``norm_``, ``norm_into``, ``norm_backward``,
``norm_quant``, ``norm_quant_into`` and ``qk_rmsnorm_``; each takes an optional residual, and without
one is the plain norm. The C++ backend (``torch_ext/ops.cpp``) implements the same seven; the tests
hold the two to the same bits and the same verdicts.
"""

from __future__ import annotations

import os

import torch

from . import configs
from . import validation as v
from .launcher import INTERPRETED, backward_config, launch_backward, launch_forward, launch_quant_forward, sm_count


def _check_runnable(device: torch.device) -> None:
    if device.type == "cuda":
        return
    if device.type == "cpu" and INTERPRETED:
        return
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
        raise ValueError("x is on cpu, and TRITON_INTERPRET=1 is set, but it was set after addrmsnorm was imported: "
                         "Triton chooses its interpreter when the kernels are defined, at the first import. Set "
                         "TRITON_INTERPRET=1 before importing addrmsnorm (or triton), e.g. in the shell")
    raise ValueError(f"x is on {device}; addrmsnorm runs on CUDA tensors, or on CPU tensors under "
                     f"the Triton interpreter (set TRITON_INTERPRET=1 before importing addrmsnorm)")


def _launch_fused(call: v.ForwardCall, rstd, numerics: int, pdl: bool) -> None:
    xr, o, ro = call.x, call.out, call.residual_out
    if xr.n_rows == 0:
        return
    launch_forward(
        xr.tensor, call.residual.tensor, None if call.weight is None else call.weight.tensor, o.tensor, ro.tensor,
        rstd, n_rows=xr.n_rows, H=call.H,
        stride_x=xr.row_stride, stride_residual=call.residual.row_stride,
        stride_out=o.row_stride, stride_residual_out=ro.row_stride,
        eps=call.eps, weight_offset=call.weight_offset, hf=numerics, pdl=pdl, x_scale=call.x_scale,
        post_weight=None if call.post_weight is None else call.post_weight.tensor,
        post_weight_offset=call.post_weight_offset,
    )


def _launch_plain(call: v.NormCall, rstd, numerics: int, pdl: bool) -> None:
    """The plain norm (the forward with the residual compiled out), the gated norm and the pair."""
    xr, o = call.x, call.out
    if xr.n_rows == 0:
        return
    hf, round_once = v.plain_numerics(numerics)
    common = dict(n_rows=xr.n_rows, H=call.H, stride_x=xr.row_stride, stride_residual=0, stride_out=o.row_stride,
                  stride_residual_out=0, eps=call.eps, weight_offset=call.weight_offset, hf=hf, pdl=pdl)
    pr, g = call.pair, call.gate
    if pr is not None:  # the pair: x's rows and b's in one launch (validation: rows of one stride)
        launch_forward(xr.tensor, None, call.weight, o.tensor, None, None, **common,
                       pair=(pr.b.tensor, pr.weight, pr.out.tensor, pr.H, pr.b.row_stride, pr.out.row_stride))
    elif g is not None:  # the gated norm: each row's groups as rows of a group (validation: rows of one stride)
        groups = call.H // g.group_size
        common.update(n_rows=xr.n_rows * groups, H=g.group_size)
        launch_forward(xr.tensor, None, call.weight, o.tensor, None, None, **common, group_rows=groups,
                       stride_x_group=g.group_size, stride_out_group=g.group_size,
                       gate=(g.z.tensor, g.z.row_stride, g.gate_first))
    else:
        launch_forward(xr.tensor, None, call.weight, o.tensor, None, rstd, **common, round_once=round_once,
                       group_rows=xr.group_rows, stride_x_group=xr.group_stride, stride_out_group=o.group_stride)


# ----- the operators: one per form, the residual optional (None: the plain norm) -----------------------

def norm(x, residual, weight, eps, weight_offset=0.0, return_rstd=False, numerics=0, pdl=False, x_scale=1.0,
         post_weight=None, post_weight_offset=0.0, z=None, group_size=0, norm_before_gate=True):
    """addrmsnorm::norm: new y, residual_out (0 elements without a residual) and rstd (0 elements unless
    asked for; with post_weight, the sandwich norm, (2, rows...)). z: the gated norm (no residual)."""
    if residual is None:
        call = v.check_rmsnorm(x, weight, eps=eps, weight_offset=weight_offset, numerics=numerics, x_scale=x_scale,
                               post_weight=post_weight, post_weight_offset=post_weight_offset, z=z,
                               group_size=group_size, norm_before_gate=norm_before_gate, return_rstd=return_rstd)
        _check_runnable(call.device)
        shape, device = call.shape, call.device
        out = torch.empty(shape, dtype=x.dtype, device=device)
        rstd = torch.empty(shape[:-1] if return_rstd else (0,), dtype=torch.float32, device=device)
        call.out = v.as_grouped_rows("out", out, shape).as_group_of(call.x.group_rows)
        _launch_plain(call, rstd if return_rstd else None, numerics, pdl)
        return out, x.new_empty((0,)), rstd
    call = v.check_forward(x, residual, weight, eps=eps, weight_offset=weight_offset, numerics=numerics,
                           x_scale=x_scale, post_weight=post_weight, post_weight_offset=post_weight_offset, z=z,
                           group_size=group_size, norm_before_gate=norm_before_gate)
    _check_runnable(call.device)
    shape, device = call.shape, call.device
    out = torch.empty(shape, dtype=x.dtype, device=device)
    residual_out = torch.empty(shape, dtype=residual.dtype, device=device)
    rstd = torch.empty(v.rstd_shape(shape, post_weight is not None) if return_rstd else (0,), dtype=torch.float32,
                       device=device)
    call.out = v.as_rows("out", out, shape)
    call.residual_out = v.as_rows("residual_out", residual_out, shape)
    _launch_fused(call, rstd if return_rstd else None, numerics, pdl)
    return out, residual_out, rstd


def norm_(x, residual, weight, eps, weight_offset=0.0, numerics=0, pdl=False, x_scale=1.0, post_weight=None,
          post_weight_offset=0.0, z=None, group_size=0, norm_before_gate=True, b=None, b_weight=None):
    """addrmsnorm::norm_: x <- y, and with a residual residual <- x_scale * x + residual first (the
    sandwich norm: residual <- residual + rmsnorm(x; post_weight)); the pair's b <- its y."""
    # norm_into's arguments in its order, by position: this is the eager path, and keywords cost every call.
    norm_into(x, residual, weight, x, residual, None, eps, weight_offset, numerics, pdl, x_scale, post_weight,
              post_weight_offset, z, group_size, norm_before_gate, b, b_weight, b)


def norm_into(x, residual, weight, out, residual_out, rstd, eps, weight_offset=0.0, numerics=0, pdl=False,
              x_scale=1.0, post_weight=None, post_weight_offset=0.0, z=None, group_size=0, norm_before_gate=True,
              b=None, b_weight=None, b_out=None):
    """addrmsnorm::norm_into: into caller-given outputs, which may alias x or residual exactly (residual_out
    exactly when residual is given), and rstd if given."""
    if residual is None:
        call = v.check_rmsnorm(x, weight, out, rstd, eps=eps, weight_offset=weight_offset, numerics=numerics,
                               x_scale=x_scale, post_weight=post_weight, post_weight_offset=post_weight_offset, z=z,
                               group_size=group_size, norm_before_gate=norm_before_gate, b=b, b_weight=b_weight,
                               b_out=b_out, residual_out=residual_out)
        _check_runnable(call.device)
        _launch_plain(call, rstd if rstd is not None and rstd.numel() else None, numerics, pdl)
        return
    call = v.check_forward(x, residual, weight, out, residual_out, rstd, eps=eps, weight_offset=weight_offset,
                           numerics=numerics, x_scale=x_scale, post_weight=post_weight,
                           post_weight_offset=post_weight_offset, z=z, group_size=group_size,
                           norm_before_gate=norm_before_gate, b=b, b_weight=b_weight, b_out=b_out)
    _check_runnable(call.device)
    _launch_fused(call, rstd, numerics, pdl)


def norm_backward(dy, dresidual_out, h, rstd, weight, weight_offset=0.0, weight_grad=True, cos=None, sin=None,
                  rope_groups=0, rotary_dim=0, rope_style=0, eps=0.0):
    """addrmsnorm::norm_backward: (dresidual, dx, dweight).

    dx has 0 elements when dy's dtype is h's (dresidual is then the gradient of x too); dweight has
    0 elements unless weight_grad (and a weight: weight None is the weightless norm's backward). cos and sin
    (fp32, (tokens, rotary_dim), by column): the backward of the plain norm of heads (rope_groups a token)
    that were then rotated; rstd is then None (computed from h and eps).
    """
    device, rows, weight_offset, eps, strides = v.check_backward(
        dy, dresidual_out, h, rstd, weight, weight_offset=weight_offset, cos=cos, sin=sin, rope_groups=rope_groups,
        rotary_dim=rotary_dim, rope_style=rope_style, eps=eps, weight_grad=weight_grad)
    _check_runnable(device)
    shape, H = dy.shape, dy.shape[-1]
    dres = torch.empty(shape, dtype=h.dtype, device=device)
    separate = dy.dtype != h.dtype
    dx = torch.empty(shape if separate else (0,), dtype=dy.dtype, device=device)
    weight_grad = weight_grad and weight is not None
    dweight = (torch.empty(weight.shape if weight_grad else (0,), dtype=weight.dtype, device=device)
               if weight is not None else h.new_empty((0,)))
    n_rows = rows["dy"].n_rows
    if n_rows == 0:
        if weight_grad:
            dweight.zero_()
        return dres, dx, dweight
    rope = None
    if strides is not None:  # the rotation's launch: its angles by column, as the C runtime admitted them
        tokens = n_rows // rope_groups
        sc, ss = (strides["cos"], strides["sin"]) if tokens > 1 else (0, 0)
        rope = (cos, sin, sc, ss, rotary_dim or H, rope_style, rope_groups, eps)
    n_sms = sm_count(device)
    cfg = backward_config(H, dy.element_size(), h.element_size(), rope is not None)
    workspace = torch.empty(configs.backward_workspace_floats(n_rows, H, cfg, n_sms), dtype=torch.float32,
                            device=device)
    dres_rows = v.as_rows("dresidual", dres, shape)
    dx_rows = v.as_rows("dx", dx, shape) if separate else None
    dro = rows.get("dresidual_out")
    launch_backward(
        rows["dy"].tensor, dro.tensor if dro else None, rows["h"].tensor, rstd, weight,
        dres_rows.tensor, dx_rows.tensor if separate else None, dweight if weight_grad else None, workspace,
        n_rows=n_rows, H=H, stride_dy=rows["dy"].row_stride, stride_dres_out=dro.row_stride if dro else H,
        stride_h=rows["h"].row_stride, stride_dres=dres_rows.row_stride,
        stride_dx=dx_rows.row_stride if separate else H, weight_offset=weight_offset, n_sms=n_sms, rope=rope,
    )
    return dres, dx, dweight


# ----- quantized outputs --------------------------------------------------------------------------

def _check_quant_arch(device: torch.device, quant_dtype) -> None:
    """float8, and the block-scaled formats (e4m3 values or scales), need sm_89 or newer
    (configs.quant_built_for); the C runtime says the same."""
    if device.type != "cuda" or quant_dtype == torch.int8:
        return
    major, minor = torch.cuda.get_device_capability(device)
    if major * 10 + minor < configs.QUANT_FP8_MIN_ARCH:
        raise RuntimeError(f"addrmsnorm: unsupported GPU architecture: float8_e4m3fn outputs and the block-scaled "
                           f"formats (NVFP4, MXFP8, MXFP4: e4m3 values or scales) need a GPU of compute capability "
                           f"8.9 or newer; this one runs sm_{major}{minor} kernels")


def _launch_quant(call: v.QuantCall, fused: bool, scale, scale_ub, ue8m0: bool, pdl: bool) -> None:
    """The quantized forward; without a residual (fused False) the plain norm's, whose gated norm takes each
    row's groups as rows of a group (validation: rows of one stride, per token only with one group a row)."""
    xr, o, y, g = call.x, call.out, call.y, call.gate
    if xr.n_rows == 0:
        return
    groups = 1 if g is None else call.H // g.group_size
    launch_quant_forward(
        xr.tensor, call.residual.tensor if fused else None, None if call.weight is None else call.weight.tensor,
        o.tensor, call.residual_out.tensor if fused else None, None if y is None else y.tensor, scale, call.scales,
        scale_ub, n_rows=xr.n_rows * groups, H=call.H // groups, stride_x=xr.row_stride,
        stride_residual=call.residual.row_stride if fused else 0, stride_q=o.row_stride,
        stride_residual_out=call.residual_out.row_stride if fused else 0, stride_y=0 if y is None else y.row_stride,
        stride_s_row=call.scales_row_stride, stride_s_group=call.scales_group_stride, group_size=call.group_size,
        ue8m0=ue8m0, eps=call.eps, weight_offset=call.weight_offset, pdl=pdl, swizzled=call.swizzled,
        x_scale=call.x_scale, post_weight=None if call.post_weight is None else call.post_weight.tensor,
        post_weight_offset=call.post_weight_offset,
        gate=None if g is None else (g.z.tensor, g.z.row_stride, g.gate_first, groups),
    )


def _new_quant_outputs(call: v.QuantCall, quant_dtype, group_size, column_major_scales, swizzled_scales):
    """q and the scales of a call that allocates them, set on call; returns (q, scales)."""
    shape, device = call.shape, call.device
    q = torch.empty(v.q_shape(shape, quant_dtype), dtype=quant_dtype, device=device)
    scales = v.alloc_scales(shape, group_size, call.mode, column_major_scales, device, swizzled_scales)
    call.out = v.as_rows("out", q, q.shape)
    if scales is not None:
        if swizzled_scales:
            call.scales = scales
        else:
            call.scales, call.scales_row_stride, call.scales_group_stride = v._scales_geometry(scales, shape,
                                                                                               group_size)
    return q, scales


def norm_quant(x, residual, weight, eps, quant_dtype, scale=None, group_size=0, scale_ub=None,
               column_major_scales=False, ue8m0_scales=False, weight_offset=0.0, return_y=False, pdl=False,
               swizzled_scales=False, x_scale=1.0, post_weight=None, post_weight_offset=0.0, z=None,
               gate_group_size=0, norm_before_gate=True):
    """addrmsnorm::norm_quant: new q, residual_out (0 elements without a residual), scales (None when
    static) and y (None unless return_y). post_weight: the sandwich norm's (with a residual); z: the gated
    norm's (without)."""
    call = v.check_quant(x, residual, weight, quant_dtype, scale, group_size, scale_ub, ue8m0=ue8m0_scales,
                         column_major=column_major_scales, swizzled=swizzled_scales, eps=eps,
                         weight_offset=weight_offset, x_scale=x_scale, post_weight=post_weight,
                         post_weight_offset=post_weight_offset,
                         z=z, gate_group_size=gate_group_size, norm_before_gate=norm_before_gate)
    _check_runnable(call.device)
    _check_quant_arch(call.device, quant_dtype)
    shape, device = call.shape, call.device
    if residual is None:
        residual_out = x.new_empty((0,))
    else:
        residual_out = torch.empty(shape, dtype=residual.dtype, device=device)
        call.residual_out = v.as_rows("residual_out", residual_out, shape)
    y = torch.empty(shape, dtype=x.dtype, device=device) if return_y else None
    q, scales = _new_quant_outputs(call, quant_dtype, group_size, column_major_scales, swizzled_scales)
    call.y = v.as_rows("y", y, shape) if return_y else None
    _launch_quant(call, residual is not None, scale, scale_ub, ue8m0_scales, pdl)
    return q, residual_out, scales, y


def norm_quant_into(x, residual, weight, out, residual_out, scales_out, y, eps, scale=None, group_size=0,
                    scale_ub=None, ue8m0_scales=False, weight_offset=0.0, pdl=False, swizzled_scales=False,
                    x_scale=1.0, post_weight=None, post_weight_offset=0.0, z=None, gate_group_size=0,
                    norm_before_gate=True):
    """addrmsnorm::norm_quant_into: into caller-given outputs. residual_out may alias residual or x exactly,
    y may alias x exactly."""
    call = v.check_quant(x, residual, weight, out.dtype if isinstance(out, torch.Tensor) else out, scale,
                         group_size, scale_ub, out, residual_out, scales_out, y, ue8m0=ue8m0_scales,
                         swizzled=swizzled_scales, eps=eps, weight_offset=weight_offset, x_scale=x_scale,
                         post_weight=post_weight, post_weight_offset=post_weight_offset,
                         z=z, gate_group_size=gate_group_size, norm_before_gate=norm_before_gate)
    _check_runnable(call.device)
    _check_quant_arch(call.device, out.dtype)
    _launch_quant(call, residual is not None, scale, scale_ub, ue8m0_scales, pdl)


def qk_rmsnorm_(qkv, q_weight, k_weight, eps, num_q_heads, num_kv_heads, head_dim, weight_offset=0.0, numerics=0,
                pdl=False, positions=None, cos_sin_cache=None, cos=None, sin=None, rotary_dim=0, rope_style=0,
                num_v_heads=0):
    """addrmsnorm::qk_rmsnorm_: q's and k's heads of a fused QKV buffer normalized in place, in one launch
    (a token's q and k heads are one group of rows; from the q heads' count on, rows take k's weight), and
    rotated where angles are given (positions with cos_sin_cache, or cos and sin); v's heads after k's (num_v_heads)
    normalized with no weight and not rotated."""
    call = v.check_qk_rmsnorm(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, eps=eps,
                              weight_offset=weight_offset, numerics=numerics, positions=positions,
                              cos_sin_cache=cos_sin_cache, cos=cos, sin=sin, rotary_dim=rotary_dim,
                              rope_style=rope_style, num_v_heads=num_v_heads)
    _check_runnable(call.device)
    if call.tokens == 0:
        return
    heads = num_q_heads + num_kv_heads  # a token's q heads, then its k heads: one group of rows (then its v heads')
    launch_forward(
        qkv, None, q_weight, qkv, None, None,
        n_rows=call.tokens * heads, H=head_dim, stride_x=call.stride, stride_residual=0, stride_out=call.stride,
        stride_residual_out=0, eps=call.eps, weight_offset=call.weight_offset, hf=call.hf, pdl=pdl,
        round_once=call.round_once, group_rows=heads, stride_x_group=head_dim, stride_out_group=head_dim,
        weight2=k_weight, group_split=num_q_heads if k_weight is not None else 0,
        v_rows=num_v_heads,
        rope=call.rope.launch() if call.rope is not None else None,
    )
