"""The JIT launcher: one call of the Triton forward kernel on already-validated row views.

It picks the specialization from ``configs.select_forward_config`` (the same table the AOT build
reads) and launches on the current stream of the tensors' device. It allocates nothing, copies
nothing and never synchronizes. Validation lives in ``validation.py`` and runs before this.
"""

from __future__ import annotations

import contextlib
import warnings

import torch
import triton

from . import configs, register_plan
from .configs import KernelConfig, align_elems, select_forward_config
from .kernels import (rmsnorm_bwd, rmsnorm_bwd_unaligned, rmsnorm_dweight,
                      rmsnorm_fwd, rmsnorm_fwd_unaligned, rmsnorm_quant_fwd)

# True when TRITON_INTERPRET=1 was set before import: the kernels then run on CPU tensors.
INTERPRETED = type(rmsnorm_fwd).__name__ == "InterpretedFunction"


# The C ABI's addrmsnorm_dtype codes: the kernels' runtime weight_dtype argument.
_DTYPE_CODES = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}


def _contiguous_1d(weight: torch.Tensor) -> torch.Tensor:
    if weight.stride(0) != 1:  # a one-element weight may have any stride
        weight = weight.as_strided((weight.shape[0],), (1,))
    return weight


def _forward_weight(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """The weight as the forward takes it (configs.forward_weight_arg), and whether it is the "w16"
    form: typed if it is x's dtype or fp32, else a view of its int16 bits."""
    if weight.dtype == x.dtype or weight.dtype == torch.float32:
        return weight, False
    return _contiguous_1d(weight).view(torch.int16), True


def _weightless(x: torch.Tensor, weight: torch.Tensor | None) -> tuple[int, torch.Tensor]:
    """(has_weight, the weight to pass): the weightless norm passes x in the weight's place, typed as
    x and never read (every weight load is predicated off, kernels._load_w), as the C runtime does."""
    if weight is None:
        return 0, x.as_strided((1,), (1,))  # x's first element, as a 1-D "weight" of x's dtype
    return 1, weight


_NO_RSTD: dict = {}


def _no_rstd(device: torch.device) -> torch.Tensor:
    """An fp32 tensor the forward receives in rstd's place when rstd is not written (write_rstd = 0):
    the JIT must see a typed pointer, as the AOT build compiles one. One element per device, made on
    first use and never written."""
    t = _NO_RSTD.get(device)
    if t is None:
        t = _NO_RSTD[device] = torch.empty(1, dtype=torch.float32, device=device)
    return t


def _device_guard(device: torch.device):
    # Triton launches on the current CUDA device; make it the tensors' device.
    if device.type == "cuda" and device.index is not None and device.index != torch.cuda.current_device():
        return torch.cuda.device(device)
    return contextlib.nullcontext()


def launch_forward(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None,
    out: torch.Tensor, residual_out: torch.Tensor | None, rstd: torch.Tensor | None,
    *, n_rows: int, H: int,
    stride_x: int, stride_residual: int, stride_out: int, stride_residual_out: int,
    eps: float, weight_offset: float, hf: bool = False, pdl: bool = False, round_once: bool = False,
    group_rows: int = 1, stride_x_group: int = 0, stride_out_group: int = 0,
    weight2: torch.Tensor | None = None, group_split: int = 0, v_rows: int = 0, x_scale: float = 1.0,
    post_weight: torch.Tensor | None = None, post_weight_offset: float = 0.0,
    gate: tuple[torch.Tensor, int, int] | None = None,
    pair: tuple | None = None,
    rope: tuple | None = None,
    config: KernelConfig | None = None, max_registers: int | None = None,
) -> None:
    """Launch ``rmsnorm_fwd`` over ``n_rows`` rows of H elements. n_rows must be > 0.

    ``residual`` None is the plain norm (RESIDUAL off: h = x, nothing but out and rstd written;
    residual_out and the residual strides are ignored). It always runs GROUPED: row r of x at
    ``(r // group_rows) * stride_x + (r % group_rows) * stride_x_group`` (out likewise), the rows of a
    3-D view with two leading strides (group_rows 1: rows of one stride). ``weight2`` (SPLIT) gives
    a group's rows from ``group_split`` on their own weight (QK norm: a token's q heads, then its k
    heads, each with theirs); ``v_rows`` more rows after each group's (Gemma 4's v heads, after k's) take no weight
    and no rotation, in programs of their own past the group rows'. ``weight`` None is the weightless norm (x stands in for it, unread:
    _weightless). ``x_scale`` scales x in the residual add. ``post_weight`` (with a residual) is the
    sandwich norm: h = residual + rmsnorm(x; post_weight + post_weight_offset), and rstd, if given,
    is (2, n_rows): h's, then x's. ``gate`` (z, stride_z, gate_first), without a residual, is the gated
    norm over groups of H columns (stride_x_group and stride_out_group are H, group_rows the groups of a
    row): z's rows have stride_z, and gate_first 0 gives rmsnorm(x) * silu(z), 1 rmsnorm(x * silu(z)).
    ``pair`` (b, b_weight, b_out, H_b, stride_b, stride_b_out), without a residual and in rows of one stride,
    is the pair: b's rows (as many as x's) normalized with b_weight into b_out in the same launch, the wider
    part first on its config's tile and the narrower packed in a tile of its width (configs.pair_pack).
    ``rope`` (cos, sin, positions, stride_cos, stride_sin, rotary_dim, style, by_freq, max_position), without a
    residual, rotates each normalized row (ROPE): a row's token is its group
    (r // group_rows), whose angles are row positions[token] of cos and sin (positions None: row token), by
    frequency (a cos_sin_cache, sin the view past its cosines) or by column (HF's cos and sin). ``pdl`` launches with programmatic dependent launch where the
    device has it (sm_90+; elsewhere it is ignored). ``config`` overrides the dispatch rule, and
    ``max_registers`` the register cap (0: none); they exist for tuning sweeps, not for normal calls.
    """
    if pair is not None and pair[3] > H:  # the narrower part second, in a tile of its width (configs.pair_pack)
        b, b_weight, b_out, H_b, stride_b, stride_b_out = pair
        pair = (x, weight, out, H, stride_x, stride_out)
        x, weight, out, H, stride_x, stride_out = b, b_weight, b_out, H_b, stride_b, stride_b_out
    sandwich = post_weight is not None
    if sandwich and weight is None:  # the weightless sandwich: post_weight stands in, typed as the weights are
        has_weight, weight = 0, post_weight
    else:
        has_weight, weight = _weightless(x, weight)
    plain = residual is None
    if plain:  # typed stand-ins the kernel never touches, as the AOT build has no None pointers
        residual, residual_out, stride_residual, stride_residual_out = x, out, 0, 0
    else:
        group_rows, stride_x_group, stride_out_group, weight2 = 1, 0, 0, None
    split = weight2 is not None or v_rows > 0  # SPLIT: the QK norm's weights, or its v heads' programs (weightless)
    if weight2 is None:
        weight2, group_split = weight, group_rows
    if group_rows == 1:
        stride_x_group = stride_out_group = 0
    xs, rs = x.element_size(), residual.element_size()
    if n_rows == 1:  # a single row has no stride; 0 keeps the alignment rule the same as the AOT runtime's
        stride_x = stride_residual = stride_out = stride_residual_out = stride_x_group = stride_out_group = 0
    if not sandwich:
        post_weight = weight  # a stand-in, never read (SANDWICH off)
    gated = gate is not None
    z, stride_z, gate_first = gate if gated else (x, 0, 0)  # x: a stand-in, never read (GATED off)
    paired = pair is not None
    b, b_weight, b_out, H_b, stride_b, stride_b_out = pair if paired else (x, weight, out, H, 0, 0)
    if b_weight is None:
        b_weight = weight  # the weightless pair: the stand-in, never read
    if n_rows == 1:
        stride_z = stride_b = stride_b_out = 0
    roped = rope is not None
    cos, sin, positions, stride_cos, stride_sin, rotary_dim, style, by_freq, max_position = (
        rope if roped else (x, x, None, 0, 0, 0, 0, 0, 0))  # x: stand-ins, never read (ROPE off)
    if positions is None:
        positions = _no_rstd(x.device)  # a stand-in, never read (POSITIONS off)
    pointers = (x.data_ptr(), residual.data_ptr(), weight.data_ptr(), out.data_ptr(), residual_out.data_ptr(),
                weight2.data_ptr(), post_weight.data_ptr(), z.data_ptr(), b.data_ptr(), b_weight.data_ptr(),
                b_out.data_ptr())
    strides = (stride_x, stride_residual, stride_out, stride_residual_out, stride_x_group, stride_out_group,
               stride_z, H_b, stride_b, stride_b_out)
    if roped:  # the angles on the vector too: their pointers, row strides and rotary_dim / 2 (forward.cpp)
        pointers += (cos.data_ptr(), sin.data_ptr())
        strides += (stride_cos, stride_sin, rotary_dim // 2)
    w_arg, w16 = _forward_weight(x, weight)
    w2_arg = w_arg if weight2 is weight else _forward_weight(x, weight2)[0]
    post_arg = w_arg if post_weight is weight else _forward_weight(x, post_weight)[0]
    # SPLIT, SANDWICH and GATED: the ends alone
    align = align_elems(pointers, H, strides, xs, rs, ends_only=hf or w16 or split or sandwich or gated or paired
                         or rope is not None)
    if roped and not configs.rope_on_vector(style, rotary_dim, H):  # the vector kernels' calls alone (forward.cpp)
        align = 1
    numerics = configs.numerics_mode(hf, weight_offset, xs, round_once)
    vector_typed = configs.is_vector_typed(align, xs, rs, weight.dtype == x.dtype, numerics)
    if config is not None:
        cfg = config
    elif sandwich:
        cfg = configs.select_sandwich_config(H, xs)
    elif gated:
        cfg = configs.select_gated_config(H, xs)
    elif paired:
        cfg = configs.select_pair_config(max(H, H_b), xs)
    elif roped:
        cfg = configs.select_rope_config(H, align > 1)
    elif plain:
        cfg = configs.select_plain_config(H, xs, vector_typed)
    else:
        cfg = select_forward_config(H, xs, rs, vector_typed=vector_typed)
    compiled_pdl = pdl_compiled(x.device)
    extra = {"launch_pdl": True} if pdl and compiled_pdl else {}
    arch = _arch(x.device)
    cap = _planned_cap("forward", cfg, arch) if max_registers is None else max_registers
    if cap:  # the AOT build compiles with the same cap
        extra["maxnreg"] = cap
    if plain:  # the plain norm is GROUPED (one kernel for 2-D rows and 3-D views, as the AOT build has)
        extra["RESIDUAL"] = False
        extra["GROUPED"] = not paired  # the pair: rows of one stride
    pack = configs.pair_pack(cfg.block_h, H_b) if paired else 1
    if paired:
        extra["PAIR"] = True
    if pack > 1:
        extra["PAIR_PACK"] = pack
    if split:
        extra["SPLIT"] = True
    if sandwich:
        extra["SANDWICH"] = True
    if gated:
        extra["GATED"] = True
    if v_rows:
        extra["V_HEADS"] = True
    if roped:  # one kernel for the QK norm's rotation and the weightless one's (SPLIT: rows past group_split, none)
        extra["SPLIT"] = True
        extra["ROPE"] = True
        extra["POSITIONS"] = rope[2] is not None
    pair_split, programs = configs.pair_grid(cfg, n_rows, pack) if paired else (0, cfg.grid(n_rows))
    grid = (programs + (cfg.grid(n_rows // group_rows * v_rows) if v_rows else 0),)
    with _device_guard(x.device):
        # ALIGN 1: the handle that ignores the pointers' alignment, as the AOT build does (kernels.py)
        kernel = rmsnorm_fwd if align > 1 else rmsnorm_fwd_unaligned
        compiled = kernel[grid](
            x, residual, w_arg, out, residual_out,
            _no_rstd(x.device) if rstd is None else rstd,
            n_rows, H,
            stride_x, stride_residual, stride_out, stride_residual_out,
            eps, weight_offset, int(rstd is not None), _DTYPE_CODES[weight.dtype],
            group_rows, stride_x_group, stride_out_group, w2_arg, group_split, has_weight, x_scale,
            post_arg, post_weight_offset, z, stride_z, gate_first,
            b, b_weight if b_weight is weight else _forward_weight(x, b_weight)[0], b_out, H_b, stride_b, stride_b_out,
            pair_split, cos, sin, positions, stride_cos, stride_sin, rotary_dim // 2, style, by_freq, max_position,
            v_rows,
            BLOCK_H=cfg.block_h,
            ROWS_PER_PROGRAM=cfg.rows_per_program,
            LOOPED=cfg.looped,
            ALIGN=align,
            HF_NUMERICS=numerics,
            PDL=compiled_pdl,
            WEIGHT_FIRST=cfg.weight_first,
            REREAD=cfg.reread,
            EVICT_LAST=cfg.evict_last,
            KEEP_H=cfg.keep_h,
            num_warps=cfg.num_warps, enable_fp_fusion=configs.FP_FUSION,
            **extra,
        )
    if cap and max_registers is None and compiled not in _CHECKED:
        _check_cap("forward", cfg, arch, cap, compiled)


def launch_quant_forward(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None, q: torch.Tensor,
    residual_out: torch.Tensor | None, y: torch.Tensor | None, scale: torch.Tensor | None,
    scales: torch.Tensor | None, scale_ub: torch.Tensor | None,
    *, n_rows: int, H: int, stride_x: int, stride_residual: int, stride_q: int, stride_residual_out: int,
    stride_y: int, stride_s_row: int, stride_s_group: int, group_size: int, ue8m0: bool,
    eps: float, weight_offset: float, pdl: bool = False, swizzled: bool = False, x_scale: float = 1.0,
    post_weight: torch.Tensor | None = None, post_weight_offset: float = 0.0,
    gate: tuple | None = None,
    config: KernelConfig | None = None, max_registers: int | None = None,
) -> None:
    """Launch ``rmsnorm_quant_fwd`` over ``n_rows`` > 0 validated rows (validation.check_quant:
    16-byte aligned rows of 16-element multiples). QUANT (configs.quant_kernel_mode): 1 with ``scale``,
    else 2 per token (group_size 0) or 3 per group; the block-scaled formats by q's dtype and group_size
    (``scale`` NVFP4's global scale; fp4 q and the scale bytes are passed as uint8, ``swizzled`` the
    scales' tiled layout). ``residual`` None is the plain norm's (RESIDUAL off); ``post_weight`` (with a
    residual) the sandwich norm's (SANDWICH, on its table's rows); ``gate`` (z, stride_z, gate_first,
    group_rows), without a residual, the gated norm's over groups of H columns (GATED, as launch_forward).
    Absent tensors are passed as present ones of their
    type that are not touched. ``config`` and ``max_registers`` (0: none) override the table for tuning
    sweeps, as in ``launch_forward``."""
    has_weight, weight = _weightless(x, weight)
    plain = residual is None  # the plain norm's quantized outputs: RESIDUAL off, residual_out not written
    if plain:
        residual, residual_out, stride_residual, stride_residual_out = x, x, 0, 0
    q_name = {torch.int8: "int8", torch.float8_e4m3fn: "fp8e4m3", torch.float4_e2m1fn_x2: "fp4e2m1"}[q.dtype]
    mode = configs.quant_kernel_mode(scale is not None, group_size, q_name)
    scale_rows = n_rows
    if mode in configs.BLOCK_QUANT_MODES:
        if q.dtype == torch.float4_e2m1fn_x2:
            q = q.view(torch.uint8)
        scales = scales.view(torch.uint8)
        if swizzled:  # the last program writes the padded rows' zero scales
            scale_rows = -(-n_rows // configs.SWIZZLE_ROWS) * configs.SWIZZLE_ROWS
    sandwich, gated = post_weight is not None, gate is not None
    z, stride_z, gate_first, group_rows = gate if gated else (x, 0, 0, 1)
    cfg = config or (configs.select_sandwich_config(H, x.element_size()) if sandwich else
                     configs.select_gated_config(H, x.element_size()) if gated else
                     select_forward_config(H, x.element_size(), residual.element_size(), quant=mode, plain=plain))
    if n_rows == 1:
        stride_x = stride_residual = stride_q = stride_residual_out = stride_y = stride_z = 0
    align = configs.vector_elems(x.element_size(), residual.element_size())
    compiled_pdl = pdl_compiled(x.device)
    extra = {"launch_pdl": True} if pdl and compiled_pdl else {}
    arch = _arch(x.device)
    # no plan caps the sandwich's or the gated norm's (aot_build.spec_cap)
    kind = "sandwich_quant_forward" if sandwich else "gated_quant_forward" if gated else "quant_forward"
    cap = _planned_cap(kind, cfg, arch) if max_registers is None else max_registers
    if cap:  # the AOT build compiles with the same cap
        extra["maxnreg"] = cap
    if plain:
        extra["RESIDUAL"] = False
    if sandwich:
        extra["SANDWICH"] = True
    if gated:
        extra["GATED"] = True
    f32 = _no_rstd(x.device)
    with _device_guard(x.device):
        compiled = rmsnorm_quant_fwd[(cfg.grid(n_rows),)](
            x, residual, weight, q, residual_out, x if y is None else y,
            f32 if scale is None else scale, f32 if scales is None else scales,
            f32 if scale_ub is None else scale_ub,
            n_rows, H, stride_x, stride_residual, stride_q, stride_residual_out, stride_y,
            stride_s_row, stride_s_group, eps, weight_offset, group_size,
            int(y is not None), int(scale_ub is not None), int(ue8m0), _DTYPE_CODES[weight.dtype],
            scale_rows, int(swizzled), has_weight, x_scale, weight if post_weight is None else post_weight,
            post_weight_offset, z, stride_z, gate_first, group_rows, H if gated and group_rows > 1 else 0,
            BLOCK_H=cfg.block_h, ROWS_PER_PROGRAM=cfg.rows_per_program, LOOPED=cfg.looped, ALIGN=align,
            QUANT=mode, PDL=compiled_pdl,
            WEIGHT_FIRST=cfg.weight_first, EVICT_LAST=cfg.evict_last, KEEP_H=cfg.keep_h,
            num_warps=cfg.num_warps, enable_fp_fusion=configs.FP_FUSION, **extra,
        )
    if cap and max_registers is None and compiled not in _CHECKED:
        _check_cap(kind, cfg, arch, cap, compiled)


# ----- the register plan under the Triton that is here (register_plan.py) -------------------------
# Checked once per compiled kernel, after its first launch (its registers are known once it is
# loaded); a broken plan degrades the config for the calls after it, with one warning.
_CHECKED: set = set()  # compiled kernels (backward: with their config) already checked; the JIT keeps them
_UNCAPPED: set = set()  # (kind, cfg, arch) whose register cap broke: compiled without it
_BACKWARD_FIT: dict = {}  # (cfg, arch) -> programs per SM that fit, where fewer than the plan


def _degraded(what: str) -> None:
    warnings.warn(f"addrmsnorm: under Triton {triton.__version__} {what}. The kernel table was tuned with Triton "
                  f"{configs.AOT_TRITON_VERSION}; results are the same, only slower.", RuntimeWarning, stacklevel=3)


def _planned_cap(kind: str, cfg: KernelConfig, arch: int) -> int | None:
    if _UNCAPPED and (kind, cfg, arch) in _UNCAPPED:  # empty unless a plan broke: no hashing per call
        return None
    return configs.max_registers(kind, cfg, arch)


def _check_cap(kind: str, cfg: KernelConfig, arch: int, cap: int, compiled) -> None:
    _CHECKED.add(compiled)
    problem = register_plan.cap_problem(compiled.n_regs, compiled.n_spills, cap)
    if problem:
        _UNCAPPED.add((kind, cfg, arch))
        _degraded(f"the {kind} kernel at block {cfg.block_h} x {cfg.rows_per_program} rows, {cfg.num_warps} warps "
                  f"holds {problem} on sm_{arch}: it is compiled without the cap from now on")


def _check_backward(cfg: KernelConfig, arch: int, compiled) -> None:
    fit = register_plan.backward_fit(compiled.n_regs, compiled.metadata.shared, cfg.num_warps, arch,
                                     cfg.programs_per_sm)
    if fit is not None and fit < _BACKWARD_FIT.get((cfg, arch), cfg.programs_per_sm):
        _BACKWARD_FIT[(cfg, arch)] = max(1, fit)
        _degraded(f"the backward at block {cfg.block_h} x {cfg.rows_per_program} rows, {cfg.num_warps} warps holds "
                  f"{compiled.n_regs} registers on sm_{arch}, which fit {fit} programs per SM where the table "
                  f"plans {cfg.programs_per_sm}: its grid launches {max(1, fit)} per SM from now on")


def backward_programs(n_rows: int, cfg: KernelConfig, n_sms: int, device: torch.device) -> int:
    """configs.backward_programs, with the programs per SM that fit where the plan broke (never more
    than configs.backward_workspace_floats sized the workspace for)."""
    fit = _BACKWARD_FIT.get((cfg, _arch(device))) if _BACKWARD_FIT else None
    if fit is None:
        return configs.backward_programs(n_rows, cfg, n_sms)
    return max(1, min(-(-n_rows // cfg.rows_per_program), n_sms * fit))


_ARCHS: dict[int, int] = {}


def _arch(device: torch.device) -> int:
    """The device's arch as the AOT build names it (90 for sm_90); 0 on the CPU and under the
    interpreter, which compile nothing."""
    if device.type != "cuda" or INTERPRETED:
        return 0
    index = device.index if device.index is not None else torch.cuda.current_device()
    arch = _ARCHS.get(index)
    if arch is None:
        major, minor = torch.cuda.get_device_capability(index)
        arch = _ARCHS[index] = major * 10 + minor
    return arch


def pdl_compiled(device: torch.device) -> bool:
    """Whether the forward is compiled with its grid-dependency wait for this device: on sm_90+,
    as the AOT build does for those archs; never under the interpreter."""
    arch = _arch(device)
    return arch != 0 and configs.pdl_compiled(arch)


_SM_COUNTS: dict[int, int] = {}
INTERPRETER_SMS = 3  # the interpreter has no SMs; a few programs exercise the partial reduction


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of the tensors' device (sizes the persistent backward grid)."""
    if device.type != "cuda":
        return INTERPRETER_SMS
    index = device.index if device.index is not None else torch.cuda.current_device()
    n = _SM_COUNTS.get(index)
    if n is None:
        n = _SM_COUNTS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return n


def backward_config(H: int, x_itemsize: int, residual_itemsize: int, roped: bool) -> KernelConfig:
    """The backward's config: the rotation's own (configs.select_rope_backward_config), else the table's."""
    if roped:
        return configs.select_rope_backward_config(H)
    return configs.select_backward_config(H, x_itemsize, residual_itemsize)


def launch_backward(
    dy: torch.Tensor, dres_out: torch.Tensor | None, h: torch.Tensor, rstd: torch.Tensor,
    weight: torch.Tensor | None, dres: torch.Tensor, dx: torch.Tensor | None, dweight: torch.Tensor | None,
    workspace: torch.Tensor,
    *, n_rows: int, H: int, stride_dy: int, stride_dres_out: int, stride_h: int, stride_dres: int,
    stride_dx: int, weight_offset: float, n_sms: int, rope: tuple | None = None,
) -> None:
    """Launch the backward over ``n_rows`` > 0 rows, then (if ``dweight``) the dweight reduction.

    ``workspace`` holds at least ``configs.backward_workspace_floats`` fp32 elements. dx is None
    when x's dtype is residual's: dres is then the gradient of both. ``weight`` None: the weightless
    norm's backward (dweight must be None). ``rope`` (cos, sin, stride_cos, stride_sin, rotary_dim, style,
    groups, eps): the backward of the plain norm of heads with the rotation (groups heads a token, cos and
    sin fp32 by column); rstd is then not read (the kernel computes it from h and eps).
    """
    weightless = weight is None
    weight = h.as_strided((1,), (1,)) if weightless else weight  # h stands in, never read
    xs, rs = dy.element_size(), h.element_size()
    cfg = backward_config(H, xs, rs, rope is not None)
    arch = _arch(dy.device)
    programs = backward_programs(n_rows, cfg, n_sms, dy.device)
    separate_dx = dx is not None
    has_dres_out = dres_out is not None
    # Absent tensors are passed as present ones of the same dtype that the kernel will not touch,
    # so that the JIT compiles the same specialization as the AOT build (which has no None pointers).
    dres_out_t = dres_out if has_dres_out else h
    dx_t = dx if separate_dx else dres
    if not has_dres_out:
        stride_dres_out = stride_h
    if not separate_dx:
        stride_dx = stride_dres
    if n_rows == 1:
        stride_dy = stride_dres_out = stride_h = stride_dres = stride_dx = 0
    strides = (stride_dy, stride_dres_out, stride_h, stride_dres, stride_dx)
    pointers = (dy.data_ptr(), dres_out_t.data_ptr(), h.data_ptr(), weight.data_ptr(), dres.data_ptr(), dx_t.data_ptr())
    if rope is not None:  # the angles on the vector too, and the vector's style alone (backward.cpp's backward_kernel)
        pointers += (rope[0].data_ptr(), rope[1].data_ptr())
        align_strides = strides + (rope[2], rope[3], rope[4] // 2)
    else:
        align_strides = strides
    align = configs.backward_align(pointers, H, align_strides, xs, rs)
    if rope is not None and not configs.rope_on_vector(rope[5], rope[4], H):  # the vector kernels' calls alone
        align = 1
    partial = workspace[: programs * H]
    means = workspace[programs * H:] if cfg.looped else workspace
    cap = _planned_cap("backward", cfg, arch)
    extra = {"maxnreg": cap} if cap else {}  # the AOT build compiles with the same cap
    roped = rope is not None
    # Without the rotation: fp32 stand-ins for cos and sin, never read (the AOT kernels' pointer type).
    cos, sin, stride_cos, stride_sin, rotary_dim, style, groups, eps = rope if roped else (
        partial, partial, 0, 0, 0, 0, 1, 0.0)
    if roped:
        extra["ROPE"] = True
        rstd = partial  # not read
    with _device_guard(dy.device):
        kernel = rmsnorm_bwd if align > 1 else rmsnorm_bwd_unaligned  # as the forward
        compiled = kernel[(programs,)](
            dy, dres_out_t, h, rstd, _contiguous_1d(weight).view(torch.uint8), dres, dx_t, partial, means,
            n_rows, H, *strides, weight_offset, int(has_dres_out),
            configs.WEIGHTLESS_DTYPE if weightless else _DTYPE_CODES[weight.dtype],
            cos, sin, stride_cos, stride_sin, rotary_dim // 2, style, groups, eps,
            BLOCK_H=cfg.block_h, ROWS_PER_PROGRAM=cfg.rows_per_program, LOOPED=cfg.looped,
            SEPARATE_DX=separate_dx, ALIGN=align, STAGES=cfg.stages,
            num_warps=cfg.num_warps, enable_fp_fusion=configs.FP_FUSION, **extra,
        )
        if arch and (compiled, cfg) not in _CHECKED:  # per config: programs_per_sm is not in the kernel
            _CHECKED.add((compiled, cfg))
            if cap:
                _check_cap("backward", cfg, arch, cap, compiled)
            if align > 1:  # the plan covers the aligned kernels (tools/aot_build.py)
                _check_backward(cfg, arch, compiled)
        if dweight is not None:
            bc = configs.DWEIGHT_BLOCK_C
            rmsnorm_dweight[(-(-H // bc),)](
                partial, dweight, programs, H,
                BLOCK_P=configs.DWEIGHT_BLOCK_P, BLOCK_C=bc, num_warps=configs.DWEIGHT_WARPS,
                enable_fp_fusion=configs.FP_FUSION,
            )
