"""Argument checks for the Python API. Everything here runs before any allocation or launch, so a
rejected call changes nothing. Errors are ValueError (bad values, shapes, layouts, devices) or
TypeError (bad types and dtypes), and each names the argument at fault.
"""

from __future__ import annotations

import math
import numbers
import struct
from typing import Optional

import torch

from . import configs

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_DTYPE_NAMES = "float16, bfloat16 or float32"


class Rows:
    """A tensor of shape (..., H) seen as n_rows rows of H elements with one row stride, and the
    byte geometry the overlap checks need, computed once. (A slotted class: this is on the hot path.)"""

    __slots__ = ("tensor", "n_rows", "row_stride", "start", "stride_bytes", "row_bytes", "end")

    def __init__(self, tensor: torch.Tensor, n_rows: int, row_stride: int):
        self.tensor = tensor          # the 2-D (n_rows, H) view, no copy (a weight stays 1-D)
        self.n_rows = n_rows
        self.row_stride = row_stride  # in elements
        item = tensor.element_size()
        self.start = tensor.data_ptr()
        self.stride_bytes = row_stride * item
        self.row_bytes = tensor.shape[-1] * item
        self.end = self.start + max(n_rows - 1, 0) * self.stride_bytes + self.row_bytes


def check_real(name: str, value) -> None:
    """A Python real number (not a bool): what the operators' ``float`` arguments accept."""
    if type(value) is not float and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")


def check_scalar(name: str, value, *, positive: bool) -> float:
    """eps (positive) or weight_offset: finite, and still finite (and > 0) once the kernel takes
    it as fp32. torch_ext/ops.cpp words the same checks the same way."""
    check_real(name, value)
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and value <= 0.0:
        raise ValueError(f"{name} must be > 0, got {value}")
    # The kernel takes these as fp32, rounded to nearest: past the fp32 range a value becomes inf
    # (native struct packing rounds as a C cast does, and never raises), and a tiny eps becomes 0,
    # which would let rstd become inf.
    as_fp32 = struct.unpack("f", struct.pack("f", value))[0]
    if math.isinf(as_fp32):
        raise ValueError(f"{name}={value} overflows float32")
    if positive and as_fp32 == 0.0:
        raise ValueError(f"{name}={value} rounds to 0 in float32; it must be > 0 there")
    return value


def check_tensor(name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {t.dtype}; supported dtypes are {_DTYPE_NAMES}")
    return t


def check_weight_dtype(dtype) -> None:
    """A module's weight dtype (its dtype= argument, or torch's default dtype where it is None)."""
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"dtype={dtype}: the weight's dtype must be one of {_DTYPE_NAMES}")


def check_head_counts(num_q_heads, num_kv_heads, head_dim) -> None:
    """The Python types of qk_rmsnorm_'s head counts: checked before the operator, whose schema would
    refuse a float with its own RuntimeError rather than a TypeError naming the argument."""
    for name, n in (("num_q_heads", num_q_heads), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)):
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"{name} must be an int, got {type(n).__name__}")


def check_shape(name: str, t: torch.Tensor, shape) -> None:
    """t has ``shape``: the one statement of the rule and its message (as_rows, and the fake
    implementations, which have no memory to view as rows)."""
    if t.shape != shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}")


def as_rows(name: str, t: torch.Tensor, shape: torch.Size) -> Rows:
    """Check that t has ``shape``, a contiguous last dim, and leading dims that flatten to rows."""
    check_shape(name, t, shape)
    H = shape[-1]
    if H > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name}: the last dimension must be contiguous (stride 1), "
                         f"got stride {t.stride(-1)}")
    try:
        t2 = t if t.dim() == 2 else t.view(-1, H)
    except RuntimeError:
        raise ValueError(f"{name}: the leading dimensions of a tensor with strides {t.stride()} "
                         f"cannot be flattened into rows of one stride; pass a contiguous tensor "
                         f"or a row-strided view") from None
    n_rows = t2.shape[0]
    row_stride = t2.stride(0) if n_rows > 1 else max(H, 1)
    if row_stride < 0:
        raise ValueError(f"{name}: negative row stride {row_stride}")
    return Rows(tensor=t2, n_rows=n_rows, row_stride=row_stride)


def check_devices(tensors: dict[str, torch.Tensor]) -> torch.device:
    names = list(tensors)
    first = tensors[names[0]].device
    for name in names[1:]:
        if tensors[name].device != first:
            raise ValueError(f"{name} is on {tensors[name].device} but {names[0]} is on {first}; "
                             f"all tensors must be on one device")
    return first


# Which input each output may alias exactly (same pointer, shape, dtype and strides).
MAY_ALIAS = {"out": ("x", "residual"), "residual_out": ("residual", "x")}


class ForwardCall:
    """A checked forward call: row views of every tensor, ready for a launch."""

    __slots__ = ("shape", "H", "device", "x", "residual", "weight", "out", "residual_out")

    def __init__(self, shape, H, device, x, residual, weight, out, residual_out):
        self.shape, self.H, self.device = shape, H, device
        self.x, self.residual, self.weight = x, residual, weight
        self.out, self.residual_out = out, residual_out  # Rows, or None: to be allocated


def _check_hf_weight(hf: bool, x, weight) -> None:
    if hf and weight.dtype != x.dtype:
        raise TypeError(f"numerics='hf' needs weight of x's dtype ({x.dtype}), got {weight.dtype}: "
                        f"HF's RMSNorm keeps its weight in the model dtype")


def _check_out_dtype(out, x) -> None:
    if out is not None and out.dtype != x.dtype:
        raise TypeError(f"out has dtype {out.dtype}; it must be x's dtype ({x.dtype})")


def _check_weight(weight, H: int) -> None:
    """(H,), contiguous: indexed by column only."""
    if weight.shape != (H,):
        raise ValueError(f"weight has shape {tuple(weight.shape)}, expected ({H},)")
    if H > 1 and weight.stride(0) != 1:
        raise ValueError(f"weight must be contiguous, got stride {weight.stride(0)}")


def check_forward_meta(x, residual, weight, out=None, residual_out=None, rstd=None, *, hf=False):
    """The rules of a forward call that need no memory: dtypes, shapes, the weight's layout, devices.
    Returns (shape, H, device). The fake implementations run these; ``check_forward`` runs them first."""
    x = check_tensor("x", x)
    residual = check_tensor("residual", residual)
    weight = check_tensor("weight", weight)
    if out is not None:
        out = check_tensor("out", out)
    if residual_out is not None:
        residual_out = check_tensor("residual_out", residual_out)
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (..., H)")
    H = x.shape[-1]
    # The dtype pairing before H, in the C ABI's order (tests/test_validation_parity.py).
    if residual.dtype not in (x.dtype, torch.float32):
        raise TypeError(f"residual has dtype {residual.dtype}; it must be x's dtype ({x.dtype}) "
                        f"or float32")
    if hf and residual.dtype != x.dtype:
        raise TypeError(f"numerics='hf' needs residual of x's dtype ({x.dtype}), got {residual.dtype}: "
                        f"HF models carry the residual stream in the model dtype")
    _check_hf_weight(hf, x, weight)
    if H == 0:
        raise ValueError("x has H = 0 (an empty last dimension); H must be > 0")
    _check_out_dtype(out, x)
    if residual_out is not None and residual_out.dtype != residual.dtype:
        raise TypeError(f"residual_out has dtype {residual_out.dtype}; it must be residual's dtype "
                        f"({residual.dtype})")
    _check_weight(weight, H)

    tensors = {"x": x, "residual": residual, "weight": weight}
    if out is not None:
        tensors["out"] = out
    if residual_out is not None:
        tensors["residual_out"] = residual_out
    if rstd is not None:
        tensors["rstd"] = rstd
    return x.shape, H, check_devices(tensors)


def check_same_shape(shape, tensors: dict) -> None:
    """Each tensor that is given has ``shape`` (check_shape)."""
    for name, t in tensors.items():
        if t is not None:
            check_shape(name, t, shape)


def _rows_of(x, residual, shape, outputs: dict):
    """x's and residual's rows, and each given output's (an in-place output reuses its input's checked
    view), each output checked for overlapping itself."""
    xr, rr = as_rows("x", x, shape), as_rows("residual", residual, shape)
    rows = {}
    for name, t in outputs.items():
        if t is x:
            rows[name] = xr
        elif t is residual:
            rows[name] = rr
        elif t is not None:
            rows[name] = as_rows(name, t, shape)
    inputs = {"x": xr, "residual": rr}
    for name, r in rows.items():
        check_no_self_overlap(name, r, inputs)
    return xr, rr, rows


def check_forward(x, residual, weight, out=None, residual_out=None, rstd=None, *, hf=False) -> ForwardCall:
    """Every check of a forward call on tensors (the scalars are checked by ``check_scalar``).

    ``out`` and ``residual_out`` may be None (the caller allocates them after this returns);
    ``rstd`` is checked only when given.
    """
    shape, H, device = check_forward_meta(x, residual, weight, out, residual_out, rstd, hf=hf)
    xr, rr, outputs = _rows_of(x, residual, shape, {"out": out, "residual_out": residual_out})
    inputs = {"x": xr, "residual": rr, "weight": Rows(weight, 1, H)}
    check_aliasing(outputs, inputs, MAY_ALIAS)
    if rstd is not None:
        if rstd.dtype != torch.float32 or rstd.shape != shape[:-1] or not rstd.is_contiguous():
            raise ValueError(f"rstd must be a contiguous float32 tensor of shape {tuple(shape[:-1])}, got "
                             f"{rstd.dtype} {tuple(rstd.shape)}")
        rs = Rows(rstd.view(1, -1), 1, 0) if rstd.numel() else None
        if rs is not None:
            for name, r in {**inputs, **outputs}.items():
                if _overlaps(rs, r):
                    raise ValueError(f"rstd overlaps {name}; it must not share memory with it")
    return ForwardCall(shape, H, device, xr, rr, inputs["weight"], outputs.get("out"), outputs.get("residual_out"))


# ----- quantized outputs ------------------------------------------------------------------------

# float8_e5m2 is left out (the issue made it optional): fp8 inference quantizes activations to e4m3,
# and each target dtype costs a set of kernels per arch (configs: the AOT budget).
QUANT_DTYPES = (torch.float8_e4m3fn, torch.int8, torch.float4_e2m1fn_x2)
QUANT_DTYPE_NAMES = {torch.int8: "int8", torch.float8_e4m3fn: "fp8e4m3", torch.float4_e2m1fn_x2: "fp4e2m1"}  # configs'
QUANT_ACTIVATION_DTYPES = (torch.float16, torch.bfloat16)
QUANT_GROUP_SIZES = (64, 128)
# Block-scaled formats (configs.BLOCK_QUANT_MODES): the scales' torch dtypes.
BLOCK_SCALE_DTYPES = {"e4m3": torch.float8_e4m3fn, "e8m0": torch.float8_e8m0fnu}
# fp8 and int8 GEMMs take K (here H) in multiples of 16 and 16-byte aligned rows; the quantized
# forward is built for that alignment alone (16-byte vectors, configs.vector_elems).
QUANT_ALIGN = 16
QUANT_ALIGN_BYTES = 16
QUANT_ALIGNED = ("out", "residual_out", "y", "x", "residual", "weight")
QUANT_MODE_NAMES = {configs.QUANT_STATIC: "static", configs.QUANT_PER_TOKEN: "token",
                    configs.QUANT_PER_GROUP: "group", configs.QUANT_NVFP4: "nvfp4", configs.QUANT_MXFP8: "mxfp8",
                    configs.QUANT_MXFP4: "mxfp4"}
BLOCK_MODES = ("nvfp4", "mxfp8", "mxfp4")
BLOCK_MODE_IDS = {QUANT_MODE_NAMES[m]: m for m in configs.BLOCK_QUANT_MODES}


def block_scale_dtype(mode: str) -> torch.dtype:
    """The scales' dtype of a block-scaled mode ("nvfp4", "mxfp8", "mxfp4")."""
    return BLOCK_SCALE_DTYPES[configs.BLOCK_SCALE_DTYPE[BLOCK_MODE_IDS[mode]]]


def q_shape(shape, quant_dtype) -> torch.Size:
    """q's shape: x's, or (..., H // 2) for fp4 (two elements a byte)."""
    if quant_dtype == torch.float4_e2m1fn_x2:
        return torch.Size((*shape[:-1], shape[-1] // 2))
    return torch.Size(shape)


def swizzled_scales_numel(n_rows: int, H: int, group_size: int) -> int:
    """Bytes of the swizzled scale layout: rows rounded up to 128, blocks to 4 (configs.SWIZZLE_*)."""
    r, b = configs.SWIZZLE_ROWS, configs.SWIZZLE_BLOCKS
    return -(-n_rows // r) * r * (-(-(H // group_size) // b) * b)


class QuantCall(ForwardCall):
    __slots__ = ("y", "scales", "scales_row_stride", "scales_group_stride", "group_size", "mode", "swizzled")


TMA_ROW_MULTIPLE = 4  # column-major scales: the column stride is the row count rounded up to 4 (16 bytes)


def alloc_scales(shape, group_size: int, mode: str, column_major: bool, device, swizzled: bool = False
                 ) -> Optional[torch.Tensor]:
    """The scales a quantized call returns: None for a static call (its scale is the caller's), [rows] per
    token, [rows, groups] row-major per group, or column-major with the column stride rounded up to a
    multiple of 4 rows (the TMA-aligned layout DeepGEMM and FlashInfer's block quant consume). Block-scaled:
    [rows, blocks] of the format's scale dtype, or swizzled, the padded tiles as one 1-D tensor."""
    if mode == "static":
        return None
    if mode in BLOCK_MODES:
        dtype = block_scale_dtype(mode)
        if swizzled:
            n = 1
            for d in shape[:-1]:
                n *= d
            return torch.empty((swizzled_scales_numel(n, shape[-1], group_size),), dtype=dtype, device=device)
        return torch.empty(quant_scales_shape(shape, group_size), dtype=dtype, device=device)
    want = quant_scales_shape(shape, group_size)
    if mode == "group" and column_major:
        n = 1
        for d in shape[:-1]:
            n *= d
        groups = shape[-1] // group_size
        n_pad = -(-n // TMA_ROW_MULTIPLE) * TMA_ROW_MULTIPLE
        return torch.empty((groups, n_pad), dtype=torch.float32, device=device).t()[:n].view(want)
    return torch.empty(want, dtype=torch.float32, device=device)


def quant_mode(scale, group_size, quant_dtype=None) -> str:
    """"static", "token", "group", "nvfp4", "mxfp8" or "mxfp4", from which arguments are given
    (configs.quant_kernel_mode's rule)."""
    return QUANT_MODE_NAMES[configs.quant_kernel_mode(scale is not None, group_size,
                                                      QUANT_DTYPE_NAMES.get(quant_dtype, ""))]


def _check_scale_tensor(name: str, t, device) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.float32 or t.numel() != 1:
        raise TypeError(f"{name} must be a 1-element float32 tensor, got {t.dtype} of shape {tuple(t.shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device} but x is on {device}; it must be on x's device")


def check_quant_meta(x, residual, weight, quant_dtype, scale=None, group_size=0, scale_ub=None,
                     out=None, residual_out=None, scales_out=None, y_out=None, *, ue8m0=False,
                     column_major=False, swizzled=False):
    """The rules of a quantized forward that need no memory. Returns (shape, H, device, mode). Into
    given outputs (``out`` given) quant_dtype is out's dtype: the caller passed no quant_dtype."""
    if not isinstance(quant_dtype, torch.dtype) or quant_dtype not in QUANT_DTYPES:
        if out is not None:
            raise TypeError(f"out has dtype {quant_dtype}; the quantized output must be torch.float8_e4m3fn, "
                            f"torch.int8 or torch.float4_e2m1fn_x2")
        raise TypeError(f"quant_dtype must be torch.float8_e4m3fn, torch.int8 or torch.float4_e2m1fn_x2, got "
                        f"{quant_dtype}")
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise TypeError(f"group_size must be an int, got {type(group_size).__name__}")
    x = check_tensor("x", x)
    if x.dtype not in QUANT_ACTIVATION_DTYPES:
        raise TypeError(f"x has dtype {x.dtype}; quantized outputs take x of float16 or bfloat16")
    if isinstance(residual, torch.Tensor) and residual.dtype != x.dtype:
        raise TypeError(f"residual has dtype {residual.dtype}; quantized outputs need residual of x's "
                        f"dtype ({x.dtype})")
    if isinstance(weight, torch.Tensor) and weight.dtype != x.dtype:
        raise TypeError(f"weight has dtype {weight.dtype}; quantized outputs need weight of x's dtype "
                        f"({x.dtype}), as a checkpoint has it")
    shape, H, device = check_forward_meta(x, residual, weight, None, residual_out)
    if quant_dtype == torch.float4_e2m1fn_x2 and group_size not in (16, 32):
        raise ValueError(f"float4_e2m1fn_x2 outputs are block-scaled: group_size must be 16 (NVFP4) or 32 "
                         f"(MXFP4), got {group_size}")
    mode = quant_mode(scale, group_size, quant_dtype)
    block = mode in BLOCK_MODES
    name = mode.upper()
    if block and mode != "nvfp4" and scale is not None:
        raise ValueError(f"{name} takes no scale (NVFP4 alone has a global scale)")
    if mode == "nvfp4" and scale is None:
        raise ValueError("NVFP4 needs scale, its global scale (a 1-element float32 tensor)")
    if scale is not None and group_size and not block:
        raise ValueError("scale (static) and group_size (per group) exclude each other; pass one")
    if group_size and not block and group_size not in QUANT_GROUP_SIZES:
        raise ValueError(f"group_size must be 64 or 128 (or 32 for MXFP8), got {group_size}")
    if group_size and H % group_size:
        raise ValueError(f"H={H} is not a multiple of group_size={group_size}")
    if H % QUANT_ALIGN:
        raise ValueError(f"H={H} is not a multiple of {QUANT_ALIGN}: quantized outputs need rows of "
                         f"16-element multiples, as fp8 and int8 GEMMs do")
    if scale is not None:
        _check_scale_tensor("scale", scale, device)
    if scale_ub is not None:
        if mode == "static":
            raise ValueError("scale_ub bounds a dynamic scale; a static scale takes none")
        if block:
            raise ValueError(f"scale_ub does not apply to {name}")
        _check_scale_tensor("scale_ub", scale_ub, device)
    if ue8m0 and mode == "static":
        raise ValueError("ue8m0_scales rounds dynamic scales; a static scale is used as given")
    if ue8m0 and block:
        raise ValueError(f"ue8m0_scales does not apply to {name}: its scales are "
                         f"{'e4m3' if mode == 'nvfp4' else 'e8m0 already'}")
    if column_major and mode != "group":
        raise ValueError("column_major_scales lays out per-group scales; pass group_size")
    if swizzled and not block:
        raise ValueError("swizzled_scales lays out the scales of a block-scaled format (NVFP4, MXFP8, MXFP4)")
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
        if out.dtype != quant_dtype:
            raise TypeError(f"out has dtype {out.dtype}; it must be quant_dtype ({quant_dtype})")
        if out.device != device:
            raise ValueError(f"out is on {out.device} but x is on {device}; all tensors must be on one device")
    if y_out is not None:
        y_out = check_tensor("y", y_out)
        if y_out.dtype != x.dtype:
            raise TypeError(f"y has dtype {y_out.dtype}; it must be x's dtype ({x.dtype})")
        if y_out.device != device:
            raise ValueError(f"y is on {y_out.device} but x is on {device}; all tensors must be on one device")
    if scales_out is not None:
        if mode == "static":
            raise ValueError("scales_out receives dynamic scales; a static call has none to write")
        if not isinstance(scales_out, torch.Tensor):
            raise TypeError(f"scales_out must be a torch.Tensor, got {type(scales_out).__name__}")
        want = quant_scales_shape(shape, group_size)
        want_dtype = block_scale_dtype(mode) if block else torch.float32
        if block and swizzled:
            n = 1
            for d in shape[:-1]:
                n *= d
            want = torch.Size((swizzled_scales_numel(n, H, group_size),))
        if scales_out.dtype != want_dtype or scales_out.shape != want:
            raise ValueError(f"scales_out must be {str(want_dtype).removeprefix('torch.')} of shape {tuple(want)}, "
                             f"got {scales_out.dtype} {tuple(scales_out.shape)}")
        if block and swizzled and want[0] > 1 and scales_out.stride(0) != 1:
            raise ValueError("scales_out: the swizzled layout is one contiguous buffer (stride 1)")
        if scales_out.device != device:
            raise ValueError(f"scales_out is on {scales_out.device} but x is on {device}; all tensors must be "
                             f"on one device")
    return shape, H, device, mode


def quant_scales_shape(shape, group_size) -> torch.Size:
    return torch.Size(shape[:-1]) if not group_size else torch.Size((*shape[:-1], shape[-1] // group_size))


def _scales_geometry(t: torch.Tensor, shape, group_size):
    """scales_out seen as [rows, groups]: (the 2-D view, row stride, group stride), in elements.
    ValueError if its leading dimensions do not flatten to rows of one stride, or if two scales
    could share an address (one of the two strides must step over the whole other dimension)."""
    n_groups = shape[-1] // group_size if group_size else 1
    try:
        t2 = t.view(-1, n_groups) if t.dim() != 2 or not group_size else t
    except RuntimeError:
        raise ValueError(f"scales_out: the leading dimensions of a tensor with strides {t.stride()} cannot be "
                         f"flattened into rows of one stride") from None
    n = t2.shape[0]
    if n == 0:  # no rows, no scales written
        return t2, 0, 0
    rs = t2.stride(0) if n > 1 else 0
    gs = t2.stride(1) if n_groups > 1 else 0
    if rs < 0 or gs < 0 or (n > 1 and n_groups > 1 and not (rs >= n_groups * gs or gs >= n * rs)) \
            or (n > 1 and rs == 0) or (n_groups > 1 and gs == 0):
        raise ValueError(f"scales_out: strides {tuple(t.stride())} make two scales share an address")
    return t2, rs, gs


def _span_rows(t: torch.Tensor) -> Rows:
    """Any tensor as one 'row' covering its whole byte extent (for conservative overlap checks)."""
    if t.numel() == 0:
        return Rows(t.reshape(1, 0), 0, 0)
    lo = sum(min(0, (n - 1) * s) for n, s in zip(t.shape, t.stride()))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(t.shape, t.stride())) + 1
    flat = torch.as_strided(t, (1, hi - lo), (hi - lo, 1), t.storage_offset() + lo)
    return Rows(flat, 1, hi - lo)


def check_quant(x, residual, weight, quant_dtype, scale=None, group_size=0, scale_ub=None, out=None,
                residual_out=None, scales_out=None, y_out=None, *, ue8m0=False, column_major=False,
                swizzled=False) -> QuantCall:
    """Every check of a quantized forward on tensors. out, residual_out, scales_out and y_out may be
    None (the caller allocates them after this returns)."""
    shape, H, device, mode = check_quant_meta(x, residual, weight, quant_dtype, scale, group_size, scale_ub,
                                              out, residual_out, scales_out, y_out, ue8m0=ue8m0,
                                              column_major=column_major, swizzled=swizzled)
    fp4 = quant_dtype == torch.float4_e2m1fn_x2
    xr, rr, outputs = _rows_of(x, residual, shape, {"out": None if fp4 else out, "residual_out": residual_out,
                                                    "y": y_out})
    if fp4 and out is not None:  # rows of H / 2 bytes
        qr = as_rows("out", out, q_shape(shape, quant_dtype))
        check_no_self_overlap("out", qr, {"x": xr, "residual": rr})
        outputs = {"out": qr, **outputs}
    inputs = {"x": xr, "residual": rr, "weight": Rows(weight, 1, H)}
    for name, t in (("scale", scale), ("scale_ub", scale_ub)):
        if t is not None:
            inputs[name] = _span_rows(t)
    check_aliasing(outputs, inputs, QUANT_MAY_ALIAS)
    if xr.n_rows > 0:  # no rows: nothing is read or written (the C ABI looks at no pointer)
        for name, rows in {**outputs, **inputs}.items():
            align = QUANT_ALIGN // 2 if fp4 and name == "out" else QUANT_ALIGN  # fp4: 16 elements, 8 bytes
            if name in QUANT_ALIGNED and rows.n_rows > 0 and (
                    rows.start % QUANT_ALIGN_BYTES or rows.row_stride % align and rows.n_rows > 1):
                raise ValueError(f"{name} must start on a 16-byte boundary and have a row stride that is a "
                                 f"multiple of {QUANT_ALIGN} elements (quantized outputs take aligned rows)")
    call = QuantCall(shape, H, device, xr, rr, inputs["weight"], outputs.get("out"), outputs.get("residual_out"))
    call.y = outputs.get("y")
    call.group_size = group_size or 0
    call.mode = mode
    call.swizzled = swizzled
    call.scales = None
    call.scales_row_stride = call.scales_group_stride = 0
    if scales_out is not None:
        if swizzled:
            call.scales = scales_out
        else:
            t2, call.scales_row_stride, call.scales_group_stride = _scales_geometry(scales_out, shape, group_size)
            call.scales = t2
        sr = _span_rows(scales_out)
        for name, rows in {**outputs, **inputs}.items():
            if _overlaps(sr, rows):
                raise ValueError(f"scales_out overlaps {name}; it must not share memory with it")
    return call


QUANT_MAY_ALIAS = {"out": (), "residual_out": ("residual", "x"), "y": ("x",)}


# ----- overlap of row-strided views -----------------------------------------------------------

def _overlaps(a: Rows, b: Rows) -> bool:
    """Whether any byte of a is also a byte of b. Exact for equal row strides, else conservative."""
    if a.n_rows == 0 or b.n_rows == 0 or a.end <= b.start or b.end <= a.start:
        return False  # the byte extents do not even meet: the common case, decided first
    na, nb, la, lb = a.n_rows, b.n_rows, a.row_bytes, b.row_bytes
    # A single row has no stride of its own: give it the other view's.
    sa = a.stride_bytes if na > 1 else (b.stride_bytes if nb > 1 else 0)
    sb = b.stride_bytes if nb > 1 else sa
    if sa != sb:
        return True  # different row strides and meeting extents: treat as overlap
    # Row j of b meets row i of a iff -lb < d + k*s < la, with k = j - i in [-(na-1), nb-1].
    d, s = b.start - a.start, sa
    if s == 0:
        return -lb < d < la
    k_lo = max(-(na - 1), (-lb - d) // s + 1)
    k_hi = min(nb - 1, -((d - la) // s) - 1)
    return k_lo <= k_hi


def _exact_alias(a: Rows, b: Rows) -> bool:
    ta, tb = a.tensor, b.tensor
    return (ta.data_ptr() == tb.data_ptr() and ta.dtype == tb.dtype and ta.shape == tb.shape
            and (a.n_rows <= 1 or a.row_stride == b.row_stride))


def _written_name(name: str, r: Rows, inputs: dict) -> str:
    """An output's name in messages: the input it is exactly, where it is written in place (an in-place
    caller passed x and residual, not out and residual_out): residual_out's own input first. The C
    ABI's written_name."""
    for iname in (("residual", "x") if name == "residual_out" else ("x", "residual")):
        i = inputs.get(iname)
        if i is not None and r.n_rows > 0 and _exact_alias(r, i):
            return iname
    return name


def _in_place_note(names, outputs) -> str:
    """" (x is written in place)", " (x and residual are written in place)" or ""."""
    moved = [n for n, o in zip(names, outputs) if n != o]
    if not moved:
        return ""
    return f" ({' and '.join(moved)} {'is' if len(moved) == 1 else 'are'} written in place)"


def check_no_self_overlap(name: str, r: Rows, inputs: dict | None = None) -> None:
    """An output whose rows share memory would have two programs writing one element."""
    H = r.tensor.shape[1]
    if r.n_rows > 1 and r.row_stride < H:
        shown = _written_name(name, r, inputs or {})
        raise ValueError(f"{shown}: row stride {r.row_stride} < H={H}, so its rows overlap; "
                         f"an output must not overlap itself{_in_place_note([shown], [name])}")


def check_aliasing(outputs: dict[str, Rows], inputs: dict[str, Rows],
                   may_alias: dict[str, tuple[str, ...]]) -> None:
    """Outputs may alias an input exactly when ``may_alias`` allows it; any other overlap is an error.

    Outputs never overlap each other, not even exactly.
    """
    out_names = list(outputs)
    for i, oname in enumerate(out_names):
        for other in out_names[i + 1:]:
            if _overlaps(outputs[oname], outputs[other]):
                a, b = (_written_name(n, outputs[n], inputs) for n in (oname, other))
                if a == b:  # both in place on one input: name the outputs
                    a, b = oname, other
                raise ValueError(f"{a} and {b} overlap in memory; outputs must not share memory"
                                 f"{_in_place_note([a, b], [oname, other])}")
        for iname, inp in inputs.items():
            if not _overlaps(outputs[oname], inp):
                continue
            if iname in may_alias.get(oname, ()) and _exact_alias(outputs[oname], inp):
                continue
            if iname in may_alias.get(oname, ()):
                raise ValueError(f"{oname} partly overlaps {iname}; it may alias {iname} only exactly "
                                 f"(same pointer, shape, dtype and strides)")
            raise ValueError(f"{oname} overlaps {iname}; {oname} must not share memory with {iname}")


# ----- the backward -----------------------------------------------------------------------------

def check_backward_meta(dy, dresidual_out, h, rstd, weight):
    """The rules of a backward call that need no memory: dy has x's dtype, h (the saved residual_out)
    and dresidual_out the residual's; rstd is the forward's. Returns the device."""
    dy = check_tensor("dy", dy)
    h = check_tensor("h", h)
    weight = check_tensor("weight", weight)
    # The dtype pairing before the shape, in the C ABI's order (tests/test_validation_parity.py).
    if h.dtype not in (dy.dtype, torch.float32):
        raise TypeError(f"h has dtype {h.dtype}; it must be dy's dtype ({dy.dtype}) or float32")
    if dresidual_out is not None:
        check_tensor("dresidual_out", dresidual_out)
        if dresidual_out.dtype != h.dtype:
            raise TypeError(f"dresidual_out has dtype {dresidual_out.dtype}; it must be h's dtype ({h.dtype})")
    if dy.dim() == 0 or dy.shape[-1] == 0:
        raise ValueError(f"dy has shape {tuple(dy.shape)}; it must be (..., H) with H > 0")
    shape, H = dy.shape, dy.shape[-1]
    if weight.shape != (H,) or (H > 1 and weight.stride(0) != 1):
        raise ValueError(f"weight must be a contiguous ({H},) tensor, got shape {tuple(weight.shape)}")
    if rstd.dtype != torch.float32 or rstd.shape != shape[:-1] or not rstd.is_contiguous():
        raise ValueError(f"rstd must be a contiguous float32 tensor of shape {tuple(shape[:-1])}, got "
                         f"{rstd.dtype} {tuple(rstd.shape)}")
    tensors = {"dy": dy, "h": h, "rstd": rstd, "weight": weight}
    if dresidual_out is not None:
        tensors["dresidual_out"] = dresidual_out
    return check_devices(tensors)


def check_backward(dy, dresidual_out, h, rstd, weight):
    """Every check of a backward call: returns the device and row views of dy, h (and dresidual_out)."""
    device = check_backward_meta(dy, dresidual_out, h, rstd, weight)
    shape = dy.shape
    rows = {"dy": as_rows("dy", dy, shape), "h": as_rows("h", h, shape)}
    if dresidual_out is not None:
        rows["dresidual_out"] = as_rows("dresidual_out", dresidual_out, shape)
    return device, rows


# ----- the plain norm (no residual) ---------------------------------------------------------------

class GroupedRows:
    """A tensor of shape (..., H) seen as rows addressed with one stride (``group_rows`` 1) or, for a
    3-D-or-more view whose leading dimensions do not flatten to one stride (a head's row inside a fused
    QKV buffer), as groups of ``group_rows`` rows: row r at ``(r // group_rows) * row_stride +
    (r % group_rows) * group_stride`` elements. No copy is made."""

    __slots__ = ("tensor", "n_rows", "row_stride", "group_rows", "group_stride", "start", "end")

    def __init__(self, tensor, n_rows, row_stride, group_rows, group_stride):
        self.tensor, self.n_rows, self.row_stride = tensor, n_rows, row_stride
        self.group_rows, self.group_stride = group_rows, group_stride
        item, H = tensor.element_size(), tensor.shape[-1]
        self.start = tensor.data_ptr()
        if n_rows == 0:
            self.end = self.start
        else:
            groups = -(-n_rows // group_rows)
            last = (groups - 1) * row_stride + (min(n_rows, group_rows) - 1) * group_stride
            self.end = self.start + (last + H) * item

    def as_group_of(self, group_rows: int) -> "GroupedRows":
        """The same rows addressed in groups of ``group_rows`` (a tensor of one row stride can take any)."""
        if self.group_rows == group_rows or self.n_rows <= 1:
            return GroupedRows(self.tensor, self.n_rows, self.row_stride, group_rows,
                               self.group_stride if self.group_rows == group_rows else self.row_stride)
        assert self.group_rows == 1
        return GroupedRows(self.tensor, self.n_rows, self.row_stride * group_rows, group_rows, self.row_stride)

    def same_view(self, other: "GroupedRows") -> bool:
        return (self.start == other.start and self.tensor.dtype == other.tensor.dtype
                and (self.n_rows <= 1 or (self.row_stride, self.group_rows, self.group_stride)
                     == (other.row_stride, other.group_rows, other.group_stride)))


def as_grouped_rows(name: str, t: torch.Tensor, shape) -> GroupedRows:
    """t seen as rows without a copy: one row stride where its leading dimensions flatten to one
    (as_rows), else groups of shape[-2] rows (the leading dimensions before it must flatten). Its
    last dimension must be contiguous."""
    check_shape(name, t, shape)
    H = shape[-1]
    if H > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name}: the last dimension must be contiguous (stride 1), got stride {t.stride(-1)}")
    try:
        t2 = t if t.dim() == 2 else t.view(-1, H)
        n = t2.shape[0]
        stride = t2.stride(0) if n > 1 else max(H, 1)
        if stride < 0:
            raise ValueError(f"{name}: negative row stride {stride}")
        return GroupedRows(t2, n, stride, 1, 0)
    except RuntimeError:
        pass
    try:
        t3 = t.view(-1, shape[-2], H)  # t.dim() >= 3 here: a 2-D tensor always views as rows
    except RuntimeError:
        raise ValueError(f"{name}: a tensor with strides {tuple(t.stride())} cannot be addressed as rows of "
                         f"two leading strides (the dimensions before the last two must flatten to one "
                         f"stride); pass a contiguous tensor or a view") from None
    outer, inner = t3.stride(0), t3.stride(1)
    if outer < 0 or inner < 0:
        raise ValueError(f"{name}: negative strides {tuple(t.stride())}")
    return GroupedRows(t3, t3.shape[0] * t3.shape[1], outer, t3.shape[1], inner)


def _rows_self_overlap(name: str, r: GroupedRows, H: int) -> None:
    """Two rows of an output sharing memory would have two programs writing one element."""
    if r.n_rows <= 1:
        return
    if r.group_rows == 1:
        if r.row_stride < H:
            raise ValueError(f"{name}: row stride {r.row_stride} < H={H}, so its rows overlap; "
                             f"an output must not overlap itself")
        return
    g = min(r.n_rows, r.group_rows)
    # Groups of rows: apart when each group's rows are apart and the groups step past each other.
    if (g > 1 and r.group_stride < H) or (r.n_rows > r.group_rows and r.row_stride < (g - 1) * r.group_stride + H):
        raise ValueError(f"{name}: strides ({r.row_stride}, {r.group_stride}) with H={H} make rows overlap; "
                         f"an output must not overlap itself")


class NormCall:
    """A checked plain-norm call: the rows of x and out in one addressing (the same group_rows)."""

    __slots__ = ("shape", "H", "device", "x", "out", "weight")


def check_rmsnorm_meta(x, weight, out=None, rstd=None, *, hf=False):
    """The rules of a plain-norm call that need no memory: dtypes, shapes, the weight's layout, devices.
    Returns (shape, H, device)."""
    x = check_tensor("x", x)
    weight = check_tensor("weight", weight)
    if out is not None:
        out = check_tensor("out", out)
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (..., H)")
    H = x.shape[-1]
    _check_hf_weight(hf, x, weight)
    if H == 0:
        raise ValueError("x has H = 0 (an empty last dimension); H must be > 0")
    _check_out_dtype(out, x)
    _check_weight(weight, H)
    tensors = {"x": x, "weight": weight}
    if out is not None:
        tensors["out"] = out
    if rstd is not None:
        tensors["rstd"] = rstd
    return x.shape, H, check_devices(tensors)


def check_rmsnorm(x, weight, out=None, rstd=None, *, hf=False) -> NormCall:
    """Every check of a plain-norm call on tensors. ``out`` None: the caller allocates a contiguous one
    after this returns (then call.out is None). out may be x exactly (in place); any other overlap of
    out with x, the weight or rstd is an error (a conservative test for views of two strides)."""
    shape, H, device = check_rmsnorm_meta(x, weight, out, rstd, hf=hf)
    xr = as_grouped_rows("x", x, shape)
    call = NormCall()
    call.shape, call.H, call.device, call.out, call.weight = shape, H, device, None, weight
    if out is not None:
        orr = xr if out is x else as_grouped_rows("out", out, shape)
        g = max(xr.group_rows, orr.group_rows)
        xr, orr = xr.as_group_of(g), orr.as_group_of(g)
        _rows_self_overlap("x" if out is x else "out", orr, H)
        if not orr.same_view(xr) and orr.n_rows and orr.start < xr.end and xr.start < orr.end:
            raise ValueError("out overlaps x; out may be x exactly (in place), or apart from it")
        w0 = weight.data_ptr()
        if orr.n_rows and orr.start < w0 + H * weight.element_size() and w0 < orr.end:
            raise ValueError("out overlaps weight; out must not share memory with weight")
        call.out = orr
    call.x = xr
    if rstd is not None:
        if rstd.dtype != torch.float32 or rstd.shape != shape[:-1] or not rstd.is_contiguous():
            raise ValueError(f"rstd must be a contiguous float32 tensor of shape {tuple(shape[:-1])}, got "
                             f"{rstd.dtype} {tuple(rstd.shape)}")
        if rstd.numel():
            r0, r1 = rstd.data_ptr(), rstd.data_ptr() + 4 * rstd.numel()
            for name, v in (("x", xr), ("out", call.out)):
                if v is not None and v.n_rows and r0 < v.end and v.start < r1:
                    raise ValueError(f"rstd overlaps {name}; it must not share memory with it")
            w0 = weight.data_ptr()
            if r0 < w0 + H * weight.element_size() and w0 < r1:
                raise ValueError("rstd overlaps weight; it must not share memory with it")
    return call


QK_MAX_HEAD_DIM = configs.QK_MAX_HEAD_DIM


class QkCall:
    """A checked QK-norm call: qkv as [tokens, width] rows of one stride."""

    __slots__ = ("tokens", "stride", "device")


def check_qk_rmsnorm_meta(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, *, hf=False):
    """The rules of qk_rmsnorm_ that need no memory. Returns qkv's device. qkv may be wider than q's
    and k's heads: the columns after them (v, or nothing) are never read or written."""
    check_head_counts(num_q_heads, num_kv_heads, head_dim)
    qkv = check_tensor("qkv", qkv)
    q_weight = check_tensor("q_weight", q_weight)
    k_weight = check_tensor("k_weight", k_weight)
    if qkv.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"qkv has dtype {qkv.dtype}; the QK norm takes float16 or bfloat16")
    if q_weight.dtype not in (qkv.dtype, torch.float32):
        raise TypeError(f"q_weight has dtype {q_weight.dtype}; it must be qkv's dtype ({qkv.dtype}) or float32")
    if k_weight.dtype != q_weight.dtype:
        raise TypeError(f"k_weight has dtype {k_weight.dtype}; it must be q_weight's ({q_weight.dtype})")
    _check_hf_weight(hf, qkv, q_weight)
    if num_q_heads < 1 or num_kv_heads < 1:
        raise ValueError(f"num_q_heads and num_kv_heads must be >= 1, got {num_q_heads} and {num_kv_heads}")
    if not 0 < head_dim <= QK_MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be in [1, {QK_MAX_HEAD_DIM}], got {head_dim}; for wider rows normalize "
                         f"the q and k views with rmsnorm_")
    if qkv.dim() != 2:
        raise ValueError(f"qkv has shape {tuple(qkv.shape)}; it must be 2-D, (tokens, width)")
    width = (num_q_heads + num_kv_heads) * head_dim
    if qkv.shape[1] < width:
        raise ValueError(f"qkv has width {qkv.shape[1]}, less than the q and k heads' "
                         f"({num_q_heads} + {num_kv_heads}) * {head_dim} = {width}")
    if qkv.shape[1] > 1 and qkv.stride(1) != 1:
        raise ValueError(f"qkv: the last dimension must be contiguous (stride 1), got stride {qkv.stride(1)}")
    for name, w in (("q_weight", q_weight), ("k_weight", k_weight)):
        if w.shape != (head_dim,):
            raise ValueError(f"{name} has shape {tuple(w.shape)}, expected ({head_dim},)")
        if head_dim > 1 and w.stride(0) != 1:
            raise ValueError(f"{name} must be contiguous, got stride {w.stride(0)}")
    return check_devices({"qkv": qkv, "q_weight": q_weight, "k_weight": k_weight})


def check_qk_rmsnorm(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, *, hf=False) -> QkCall:
    """Every check of qk_rmsnorm_: qkv's q and k heads are written in place, so neither weight may
    share memory with them."""
    device = check_qk_rmsnorm_meta(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, hf=hf)
    call = QkCall()
    call.tokens, call.device = qkv.shape[0], device
    call.stride = qkv.stride(0) if qkv.shape[0] > 1 else qkv.shape[1]
    width = (num_q_heads + num_kv_heads) * head_dim
    if call.tokens > 1 and call.stride < width:
        raise ValueError(f"qkv: row stride {call.stride} < the q and k heads' width {width}, so its rows overlap")
    if call.tokens:
        q0 = qkv.data_ptr()
        q1 = q0 + ((call.tokens - 1) * call.stride + width) * qkv.element_size()
        for name, w in (("q_weight", q_weight), ("k_weight", k_weight)):
            w0 = w.data_ptr()
            if q0 < w0 + head_dim * w.element_size() and w0 < q1:
                raise ValueError(f"{name} overlaps qkv; qkv is written in place and must not share memory with "
                                 f"{name}")
    return call


def plain_numerics(numerics) -> tuple[bool, bool]:
    """The plain-norm operators' numerics, an index into configs.PLAIN_NUMERICS, as (hf, round_once)."""
    if isinstance(numerics, bool) or not isinstance(numerics, int) or not 0 <= numerics < len(configs.PLAIN_NUMERICS):
        raise ValueError(f"numerics must be 0 (contract), 1 (hf) or 2 (hf_round_once), got {numerics!r}")
    return numerics != 0, numerics == 2
