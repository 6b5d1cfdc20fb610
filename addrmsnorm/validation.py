"""Argument checks for the Python API. Everything here runs before any allocation or launch, so a
rejected call changes nothing. Errors are ValueError (bad values, shapes, layouts, devices) or
TypeError (bad types and dtypes), and each names the argument at fault.
"""

from __future__ import annotations

import ctypes
import math
import numbers
import struct
from typing import Optional

import torch

from . import configs

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_DTYPE_NAMES = "float16, bfloat16 or float32"
_TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "int32": torch.int32,
                 "int64": torch.int64}


def torch_dtypes(names) -> tuple:
    """configs' dtype names (a variant's rule, as data) as torch dtypes."""
    return tuple(_TORCH_DTYPES[n] for n in names)


def or_words(items) -> str:
    """Items in a message's words: "a", "a or b", "a, b or c" (the C runtime's word_list says the same)."""
    words = [str(i) for i in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def dtype_words(dtypes) -> str:
    """A variant's dtypes in a message's words: "float16 or bfloat16" (the C runtime's dtype_list says the same)."""
    return or_words(str(d).removeprefix("torch.") for d in dtypes)


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


def _check_given(x, **tensors) -> None:
    """x, then each other given tensor (None: not given), a torch.Tensor of a supported dtype, in the order named;
    x of at least one dimension, (..., H)."""
    check_tensor("x", x)
    for name, t in tensors.items():
        if t is not None:
            check_tensor(name, t)
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (..., H)")


def check_weight_dtype(dtype) -> None:
    """A module's weight dtype (its dtype= argument, or torch's default dtype where it is None)."""
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"dtype={dtype}: the weight's dtype must be one of {_DTYPE_NAMES}")


def check_head_counts(num_q_heads, num_kv_heads, head_dim, num_v_heads=0) -> None:
    """The Python types of qk_rmsnorm_'s head counts: checked before the operator, whose schema would
    refuse a float with its own RuntimeError rather than a TypeError naming the argument."""
    for name, n in (("num_q_heads", num_q_heads), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim),
                    ("num_v_heads", num_v_heads)):
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"{name} must be an int, got {type(n).__name__}")


def check_shape(name: str, t: torch.Tensor, shape) -> None:
    """t has ``shape``: the one statement of the rule and its message (as_rows, and the fake
    implementations, which have no memory to view as rows)."""
    if t.shape != shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}")


def _empty_rows(t: torch.Tensor, shape) -> torch.Tensor:
    """A tensor of no elements as rows (view(-1, 0) is ambiguous): any strides address nothing."""
    n = 1
    for d in shape[:-1]:
        n *= d
    return torch.as_strided(t, (n, shape[-1]), (max(shape[-1], 1), 1))


def as_rows(name: str, t: torch.Tensor, shape: torch.Size) -> Rows:
    """Check that t has ``shape``, a contiguous last dim, and leading dims that flatten to rows."""
    check_shape(name, t, shape)
    H = shape[-1]
    if H > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name}: the last dimension must be contiguous (stride 1), "
                         f"got stride {t.stride(-1)}")
    try:
        t2 = t if t.dim() == 2 else t.view(-1, H) if t.numel() else _empty_rows(t, shape)
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


class ForwardCall:
    """A checked forward call: row views of every tensor, ready for a launch."""

    __slots__ = ("shape", "H", "device", "x", "residual", "weight", "out", "residual_out", "eps", "weight_offset",
                 "hf", "x_scale", "post_weight", "post_weight_offset")

    def __init__(self, shape, H, device, x, residual, weight, out, residual_out):
        self.shape, self.H, self.device = shape, H, device
        self.x, self.residual, self.weight = x, residual, weight
        self.out, self.residual_out = out, residual_out  # Rows, or None: to be allocated


# ----- the two layers of every check ---------------------------------------------------------------
#
# Each kind of call is checked in two layers, in the order the C++ backend checks it:
#
# 1. the mapping: what the C ABI's struct cannot carry. Each tensor's dtype is one the C ABI names;
#    the outputs without a dtype field of their own have their input's; every tensor has the shape the
#    struct's rows and hidden describe (weights (H,) and contiguous, rstd and the scales in their
#    layout); all are on one device; each view's last dimension is contiguous and its leading ones
#    flatten to rows. torch_ext/ops.cpp makes these checks in this order.
# 2. the call's rules: the C runtime's (src/validate.cpp), asked through c_library.refuse_unless_accepted with
#    the mapped call as the C ABI's struct (the *_verdict functions), their refusals in a Python caller's
#    words (addrmsnorm_last_error_python): eps, weight_offset and numerics, then the kind's dtype pairings, H,
#    and the pointers' alignment and overlap. A call without memory (a fake), and an output not yet
#    allocated, passes stand-in addresses (StandIns).
#
# What this file still states of the rules (docs/guide.md, "Adding a variant"): sandwich_takes and gate_takes (they
# trace under torch.compile, where no C call runs).


def _check_out_dtype(out, x) -> None:
    if out is not None and out.dtype != x.dtype:
        raise TypeError(f"out has dtype {out.dtype}; it must be x's dtype ({x.dtype})")


def _check_vector(t, n: int, name: str = "weight") -> None:
    """(n,), contiguous: a weight (n = H, indexed by column only), or the rotation's positions (n = tokens)."""
    if t.shape != (n,):
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected ({n},)")
    if n > 1 and t.stride(0) != 1:
        raise ValueError(f"{name} must be contiguous, got stride {t.stride(0)}")


def rstd_shape(shape, sandwich: bool = False) -> torch.Size:
    """rstd's shape: one value a row, or for the sandwich norm two, (2, rows...): h's, then x's."""
    return torch.Size((2, *shape[:-1]) if sandwich else shape[:-1])


def _check_rstd_layout(rstd, shape, sandwich: bool = False) -> None:
    want = rstd_shape(shape, sandwich)
    if rstd is not None and (rstd.dtype != torch.float32 or rstd.shape != want or not rstd.is_contiguous()):
        raise ValueError(f"rstd must be a contiguous float32 tensor of shape {tuple(want)}, got "
                         f"{rstd.dtype} {tuple(rstd.shape)}")


def _check_post_weight(post_weight, weight, x, H: int) -> None:
    """The mapping of the sandwich norm's first weight: (H,), contiguous, of weight's dtype (one
    weight_dtype in the C ABI describes both)."""
    check_tensor("post_weight", post_weight)
    _check_vector(post_weight, H, "post_weight")
    if weight is not None and post_weight.dtype != weight.dtype:
        raise TypeError(f"post_weight has dtype {post_weight.dtype}; it must be weight's dtype ({weight.dtype})")


SANDWICH_DTYPES = torch_dtypes(configs.SANDWICH_DTYPES)
# The sandwich norm's, the gated norm's and the pair's one ALIGN: elements of one 16-bit 16-byte access.
VARIANT_ALIGN = configs.VARIANT_ALIGN


def starts_aligned(*tensors) -> bool:
    """Whether every tensor starts on a 16-byte boundary, for the patches' "would the kernels take it"; under
    torch.compile, where no pointer can be read while tracing, True: the operator checks the pointers when it
    runs, and refuses a misaligned one."""
    if torch.compiler.is_compiling():
        return True
    return all(t.data_ptr() % configs.ALIGNMENT_BYTES == 0 for t in tensors)


def sandwich_takes(x, residual, post_weight, weight) -> bool:
    """Whether the sandwich norm's kernels take a call on these tensors, by the rules above (for a patch that
    must fall back rather than refuse): x, residual and both weights of one dtype of SANDWICH_DTYPES, H a
    multiple of VARIANT_ALIGN, and every tensor on a 16-byte boundary (starts_aligned) with the strides of its
    leading dimensions of more than one in multiples of VARIANT_ALIGN elements (a sufficient form of the
    row-stride rule: HF's hidden states are contiguous)."""
    if x.dtype not in SANDWICH_DTYPES or not x.dtype == residual.dtype == post_weight.dtype == weight.dtype:
        return False
    if x.dim() == 0 or residual.shape != x.shape or x.shape[-1] % VARIANT_ALIGN:
        return False
    tensors = (x, residual, post_weight, weight)
    return starts_aligned(*tensors) and all(
        t.stride(-1) == 1 and all(s % VARIANT_ALIGN == 0 for s, d in zip(t.stride()[:-1], t.shape[:-1]) if d > 1)
        for t in tensors)


def _map_forward(x, residual, weight, out, residual_out, rstd, post_weight=None, z=None):
    """The mapping of a norm call (residual None: the plain norm) up to the views: dtypes, dims, the
    outputs' dtypes, the weights, devices. Returns (shape, H, device)."""
    _check_given(x=x, z=z, residual=residual, weight=weight, out=out, residual_out=residual_out)
    H = x.shape[-1]
    _check_out_dtype(out, x)
    if residual_out is not None and residual is not None and residual_out.dtype != residual.dtype:
        raise TypeError(f"residual_out has dtype {residual_out.dtype}; it must be residual's dtype "
                        f"({residual.dtype})")
    if weight is not None:
        _check_vector(weight, H)
    if post_weight is not None:
        _check_post_weight(post_weight, weight, x, H)
    tensors = {"x": x, "residual": residual, "weight": weight, "out": out, "residual_out": residual_out,
               "rstd": rstd, "post_weight": post_weight, "z": z}
    return x.shape, H, check_devices({k: t for k, t in tensors.items() if t is not None})


def _forward_scalars(eps, weight_offset, numerics, hf: bool, x_scale, post_weight_offset):
    """A norm call's scalars as the C ABI takes them: their Python types here (numerics: an index into
    configs.PLAIN_NUMERICS, or hf), their values the C runtime's rules. None: not given (eps: a stand-in)."""
    if not (type(eps) is type(weight_offset) is type(x_scale) is type(post_weight_offset) is float):  # the hot path's
        for name, value in (("eps", eps), ("weight_offset", weight_offset), ("x_scale", x_scale),
                            ("post_weight_offset", post_weight_offset)):
            if value is not None:
                check_real(name, value)
    if numerics is not None and type(numerics) is not int or numerics not in (None, 0, 1, 2):
        plain_numerics(numerics)  # refuses it
    index = numerics if numerics is not None and (numerics or not hf) else int(hf)
    return (1e-6 if eps is None else float(eps), 0.0 if weight_offset is None else float(weight_offset), index,
            float(x_scale), float(post_weight_offset or 0.0))


def _weights_scalars_gate(a, c, address, weight, other_weight, post_weight, eps: float, weight_offset: float,
                          numerics: int, x_scale: float, post_weight_offset: float, z, group_size, norm_before_gate
                          ) -> None:
    """The fields every forward call's struct fills alike: the weights (weight_dtype is weight's, else
    other_weight's, the one dtype the C ABI has for both: post_weight's or b_weight's), the scalars and flags, and
    the gate (z: Rows or None)."""
    a.weight = address(weight) if weight is not None else None
    first = weight if weight is not None else other_weight
    a.weight_dtype = c.DTYPE_ENUM[first.dtype] if first is not None else a.x_dtype
    a.post_weight = address(post_weight) if post_weight is not None else None
    a.eps, a.weight_offset, a.numerics = eps, weight_offset, _as_field(numerics)
    if x_scale != 1.0:
        a.flags |= c.FLAG_X_SCALE
        a.x_scale = x_scale
    a.post_weight_offset = post_weight_offset
    if z is not None:
        a.z, a.stride_z = address(z.tensor), z.row_stride
    a.group_size, a.gate_first = _as_field(group_size or 0), 0 if norm_before_gate else 1


def forward_verdict(x, residual, weight, out, residual_out, rstd, post_weight, shape, H: int, eps: float,
                    weight_offset: float, numerics: int, x_scale: float, post_weight_offset: float,
                    address=None, parts=None) -> None:
    """The C runtime's rules on a mapped fused call (addrmsnorm_norm_check, no driver), its refusal raised in a
    Python caller's words, as torch_ext/ops.cpp's norm_call raises it. x, residual, out and residual_out are
    Rows (or, for fakes, _FakeRows; out None: the functional form, whose new out and residual_out stand in);
    ``parts``: a gate's or a pair's (z, group_size, norm_before_gate, b, b_weight, b_out), which the C runtime
    refuses with a residual; ``address``: StandIns for fakes."""
    c = _c()

    address = address or _address
    stand_in = address if isinstance(address, StandIns) else StandIns()
    a = c.NormArgs()
    a.struct_size = ctypes.sizeof(c.NormArgs)
    a.rows, a.groups, a.hidden = x.n_rows, 1, H
    a.x, a.stride_x = address(x.tensor), x.row_stride
    a.x_dtype = c.DTYPE_ENUM[x.tensor.dtype]
    a.residual, a.stride_residual = address(residual.tensor), residual.row_stride
    a.residual_dtype = c.DTYPE_ENUM[residual.tensor.dtype]
    a.out, a.stride_out = (address(out.tensor), out.row_stride) if out is not None else (stand_in(), H)
    if residual_out is not None:
        a.residual_out, a.stride_residual_out = address(residual_out.tensor), residual_out.row_stride
    elif out is None:
        a.residual_out, a.stride_residual_out = stand_in(), H
    a.rstd = address(rstd) if rstd is not None else None
    z, group_size, norm_before_gate, b, b_weight, b_out = parts or (None, 0, True, None, None, None)
    _weights_scalars_gate(a, c, address, weight, post_weight, post_weight, eps, weight_offset, numerics, x_scale,
                          post_weight_offset, z, group_size, norm_before_gate)
    _pair_fields(a, address, b, b_weight, b_out)
    c.refuse_unless_accepted(a)


def _pair_fields(a, address, b, b_weight, b_out) -> None:
    """The pair's fields (b, b_out: Rows or None; b_weight a tensor): without b, its weight and output are passed on
    for the C runtime to refuse by name."""
    if b is not None:
        a.b, a.stride_b, a.b_hidden = address(b.tensor), b.row_stride, b.tensor.shape[-1]
        if b_out is not None:
            a.b_out, a.stride_b_out = address(b_out.tensor), b_out.row_stride
    elif b_out is not None:
        a.b_out = address(b_out.tensor)
    a.b_weight = address(b_weight) if b_weight is not None else None


def _fused_parts(x, weight, shape, z, group_size, norm_before_gate, b, b_weight, b_out, meta=False):
    """A gate's or a pair's tensors given to a fused call, mapped (the plain norm's mapping) for the C runtime to
    refuse with the residual; None where none is given."""
    if z is None and b is None and b_weight is None and b_out is None:
        return None
    zr, br, bo, _ = _map_plain_parts(x, weight, shape, z, group_size, b, b_weight, b_out, meta=meta)
    return zr, group_size, norm_before_gate, br, b_weight, bo


def check_forward_meta(x, residual, weight, out=None, residual_out=None, rstd=None, *, hf=False, eps=None,
                       weight_offset=None, numerics=None, x_scale=1.0, post_weight=None, post_weight_offset=0.0,
                       z=None, group_size=0, norm_before_gate=True, b=None, b_weight=None, b_out=None):
    """A fused call's checks without memory (the fake implementations'): the mapping, then the C runtime's
    rules on addresses that stand in for the tensors' (alignment and aliasing are checked when the call runs).
    Returns (shape, H, device)."""
    shape, H, device = _map_forward(x, residual, weight, out, residual_out, rstd, post_weight)
    parts = _fused_parts(x, weight, shape, z, group_size, norm_before_gate, b, b_weight, b_out, meta=True)
    check_same_shape(shape, {"out": out} if parts else {"residual": residual, "out": out, "residual_out": residual_out})
    _check_rstd_layout(rstd, shape, post_weight is not None)
    scalars = _forward_scalars(eps, weight_offset, numerics, hf, x_scale, post_weight_offset)
    n_rows = math.prod(shape[:-1])
    fake = StandIns()
    rows = {name: _fake_rows(t, n_rows, H) if t is not None else None
            for name, t in (("x", x), ("residual", residual), ("out", out), ("residual_out", residual_out))}
    forward_verdict(rows["x"], rows["residual"], weight, rows["out"], rows["residual_out"], rstd, post_weight, shape,
                    H, *scalars, address=fake, parts=parts)
    return shape, H, device


def check_same_shape(shape, tensors: dict) -> None:
    """Each tensor that is given has ``shape`` (check_shape)."""
    for name, t in tensors.items():
        if t is not None:
            check_shape(name, t, shape)


def _view_rows(x, residual, shape, outputs: dict):
    """x's and residual's rows, and each given output's (an in-place output reuses its input's view)."""
    xr, rr = as_rows("x", x, shape), as_rows("residual", residual, shape)
    rows = {}
    for name, t in outputs.items():
        if t is x:
            rows[name] = xr
        elif t is residual:
            rows[name] = rr
        elif t is not None:
            rows[name] = as_rows(name, t, shape)
    return xr, rr, rows


def check_forward(x, residual, weight, out=None, residual_out=None, rstd=None, *, hf=False, eps=None,
                  weight_offset=None, numerics=None, x_scale=1.0, post_weight=None, post_weight_offset=0.0,
                  z=None, group_size=0, norm_before_gate=True, b=None, b_weight=None, b_out=None) -> ForwardCall:
    """Every check of a fused forward: the mapping (Python types, dtypes, shapes, devices), in
    torch_ext/ops.cpp's order, then the C runtime's rules (forward_verdict). ``out`` and ``residual_out`` may be
    None (the caller allocates them after this returns; they stand in). ``post_weight`` makes it the sandwich
    norm (h = residual + rmsnorm(x; post_weight))."""
    shape, H, device = _map_forward(x, residual, weight, out, residual_out, rstd, post_weight)
    parts = _fused_parts(x, weight, shape, z, group_size, norm_before_gate, b, b_weight, b_out)
    if parts is not None:  # refused for the residual by the C runtime, first: residual's rows are not mapped
        xr, outputs = as_rows("x", x, shape), {"out": as_rows("out", out, shape)} if out is not None else {}
        rr = _FakeRows(residual, xr.n_rows, xr.row_stride)
        if residual_out is not None:
            outputs["residual_out"] = _FakeRows(residual_out, xr.n_rows, xr.row_stride)
    else:
        xr, rr, outputs = _view_rows(x, residual, shape, {"out": out, "residual_out": residual_out})
    _check_rstd_layout(rstd, shape, post_weight is not None)
    eps, weight_offset, numerics, x_scale, post_weight_offset = _forward_scalars(
        eps, weight_offset, numerics, hf, x_scale, post_weight_offset)
    forward_verdict(xr, rr, weight, outputs.get("out"), outputs.get("residual_out"), rstd, post_weight, shape, H,
                    eps, weight_offset, numerics, x_scale, post_weight_offset, parts=parts)
    call = ForwardCall(shape, H, device, xr, rr, Rows(weight, 1, H) if weight is not None else None,
                       outputs.get("out"), outputs.get("residual_out"))
    call.eps, call.weight_offset, call.hf, call.x_scale = eps, weight_offset, numerics != 0, x_scale
    call.post_weight = Rows(post_weight, 1, H) if post_weight is not None else None
    call.post_weight_offset = post_weight_offset
    return call


# ----- quantized outputs ------------------------------------------------------------------------

# float8_e5m2 is left out (the issue made it optional): fp8 inference quantizes activations to e4m3,
# and each target dtype costs a set of kernels per arch (configs: the AOT budget).
QUANT_DTYPES = (torch.float8_e4m3fn, torch.int8, torch.float4_e2m1fn_x2)
QUANT_DTYPE_NAMES = {torch.int8: "int8", torch.float8_e4m3fn: "fp8e4m3", torch.float4_e2m1fn_x2: "fp4e2m1"}  # configs'
# Block-scaled formats (configs.BLOCK_QUANT_MODES): the scales' torch dtypes.
BLOCK_SCALE_DTYPES = {"e4m3": torch.float8_e4m3fn, "e8m0": torch.float8_e8m0fnu}
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
    __slots__ = ("y", "scales", "scales_row_stride", "scales_group_stride", "group_size", "mode", "swizzled", "gate")
    # eps and weight_offset: ForwardCall's slots


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


def _expected_scales_shape(shape, mode: str, group_size, swizzled: bool):
    """The scales' shape where the arguments define one: [rows] per token, [rows, H / group_size] per
    group and block-scaled (a group size that divides H), the swizzled layout as one padded run; None
    where the group size does not divide H (the rules refuse it)."""
    H = shape[-1]
    if mode == "token":
        return torch.Size(shape[:-1])
    if group_size <= 0 or H % group_size:
        return None
    if mode in BLOCK_MODES and swizzled:
        n = 1
        for d in shape[:-1]:
            n *= d
        return torch.Size((swizzled_scales_numel(n, H, group_size),))
    return quant_scales_shape(shape, group_size)


def _map_quant(x, residual, weight, quant_dtype, scale, group_size, scale_ub, out, residual_out, scales_out, y_out,
               column_major, swizzled, functional, post_weight=None, z=None):
    """The mapping of a quantized call up to the views. Returns (shape, H, device, mode, want): want the
    scales' shape (_expected_scales_shape)."""
    if not isinstance(quant_dtype, torch.dtype) or quant_dtype not in QUANT_DTYPES:
        if not functional:
            raise TypeError(f"out has dtype {quant_dtype}; the quantized output must be torch.float8_e4m3fn, "
                            f"torch.int8 or torch.float4_e2m1fn_x2")
        raise TypeError(f"quant_dtype must be torch.float8_e4m3fn, torch.int8 or torch.float4_e2m1fn_x2, got "
                        f"{quant_dtype}")
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise TypeError(f"group_size must be an int, got {type(group_size).__name__}")
    _check_given(x=x, residual=residual, weight=weight, residual_out=residual_out, y=y_out)
    shape, H = x.shape, x.shape[-1]
    if residual_out is not None and residual is not None and residual_out.dtype != residual.dtype:
        raise TypeError(f"residual_out has dtype {residual_out.dtype}; it must be residual's dtype "
                        f"({residual.dtype})")
    if y_out is not None and y_out.dtype != x.dtype:
        raise TypeError(f"y has dtype {y_out.dtype}; it must be x's dtype ({x.dtype})")
    if weight is not None:
        _check_vector(weight, H)
    if post_weight is not None:
        _check_post_weight(post_weight, weight, x, H)
    if z is not None:
        check_tensor("z", z)
        if z.dtype != x.dtype:
            raise TypeError(f"z has dtype {z.dtype}; it must be x's dtype ({x.dtype})")
    tensors = {"x": x, "residual": residual, "weight": weight, "out": out, "residual_out": residual_out,
               "y": y_out, "scales_out": scales_out, "scale": scale, "scale_ub": scale_ub, "post_weight": post_weight,
               "z": z}
    for name in ("out", "scales_out", "scale", "scale_ub"):
        if tensors[name] is not None and not isinstance(tensors[name], torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensors[name]).__name__}")
    device = check_devices({k: t for k, t in tensors.items() if t is not None})
    for name, t in (("scale", scale), ("scale_ub", scale_ub)):
        if t is not None and (t.dtype != torch.float32 or t.numel() != 1):
            raise TypeError(f"{name} must be a 1-element float32 tensor, got {t.dtype} of shape {tuple(t.shape)}")
    mode = quant_mode(scale, group_size, quant_dtype)
    block = mode in BLOCK_MODES
    want = _expected_scales_shape(shape, mode, group_size, swizzled)
    if functional:
        if column_major and mode != "group":
            raise ValueError("column_major_scales lays out per-group scales; pass group_size")
    elif scales_out is not None and mode != "static":  # a static call's scales_out: the rules refuse it
        want_dtype = block_scale_dtype(mode) if block else torch.float32
        if scales_out.dtype != want_dtype:
            raise ValueError(f"scales_out has dtype {scales_out.dtype}; it must be "
                             f"{str(want_dtype).removeprefix('torch.')}")
        if want is not None and scales_out.shape != want:
            raise ValueError(f"scales_out has shape {tuple(scales_out.shape)}, expected {tuple(want)}")
        if block and swizzled and scales_out.numel() > 1 and scales_out.stride(0) != 1:
            raise ValueError("scales_out: the swizzled layout is one contiguous buffer (stride 1)")
    return shape, H, device, mode, want


def quant_verdict(x, residual, weight, quant_dtype, mode: str, scale, group_size, scale_ub, ue8m0, swizzled, out,
                  residual_out, scales, y, shape, H: int, scalars: tuple, post_weight, z, gate_group_size,
                  norm_before_gate, address=None) -> None:
    """The C runtime's rules on a mapped quantized call (addrmsnorm_norm_check, no driver), raised in a Python
    caller's words, as torch_ext/ops.cpp's quant_call raises them. x, residual, out, residual_out, y and z are Rows
    (None where not given; out, residual_out and y of the functional form None: new, contiguous, they stand in);
    scales (tensor, row stride, group stride) or None (the functional form's dynamic scales stand in);
    ``address``: StandIns for fakes."""
    c = _c()
    address = address or _address
    stand_in = address if isinstance(address, StandIns) else StandIns()
    eps, weight_offset, _, x_scale, post_weight_offset = scalars
    functional = out is None
    q = c.Quant()
    q.mode, q.dtype = c.QUANT_MODES[mode], c.QUANT_DTYPE_ENUM.get(quant_dtype, 99)
    q.group_size = _as_field(group_size)
    q.flags = (c.QUANT_UE8M0 if ue8m0 else 0) | (c.QUANT_SWIZZLED if swizzled else 0)
    q.scale = address(scale) if scale is not None else None
    q.scale_ub = address(scale_ub) if scale_ub is not None else None
    if scales is not None:
        q.scales, q.scales_stride_row, q.scales_stride_group = address(scales[0]), scales[1], scales[2]
    elif functional and mode != "static":  # new scales, row-major (or swizzled): they stand in
        q.scales = stand_in()
        groups = H // group_size if (mode == "group" or mode in BLOCK_MODES) and group_size and H % group_size == 0 \
            else 1
        if not swizzled:
            q.scales_stride_row, q.scales_stride_group = (groups if x.n_rows > 1 else 0), (1 if groups > 1 else 0)
    a = c.NormArgs()
    a.struct_size = ctypes.sizeof(c.NormArgs)
    a.rows, a.groups, a.hidden = x.n_rows, 1, H
    a.x, a.stride_x = address(x.tensor), x.row_stride
    a.x_dtype = c.DTYPE_ENUM[x.tensor.dtype]
    if residual is not None:
        a.residual, a.stride_residual = address(residual.tensor), residual.row_stride
        a.residual_dtype = c.DTYPE_ENUM[residual.tensor.dtype]
        a.residual_out, a.stride_residual_out = ((address(residual_out.tensor), residual_out.row_stride)
                                                 if residual_out is not None else
                                                 ((stand_in(), H) if functional else (None, 0)))
    else:
        a.residual_dtype = a.x_dtype
        if residual_out is not None:  # for the C runtime to refuse by name
            a.residual_out, a.stride_residual_out = address(residual_out.tensor), residual_out.row_stride
    q_width = H // 2 if quant_dtype == torch.float4_e2m1fn_x2 else H
    a.out, a.stride_out = (address(out.tensor), out.row_stride) if out is not None else (stand_in(), q_width)
    if y is not None:
        a.y, a.stride_y = address(y.tensor), y.row_stride
    _weights_scalars_gate(a, c, address, weight, post_weight, post_weight, eps, weight_offset, 0, x_scale,
                          post_weight_offset, z, gate_group_size, norm_before_gate)
    a.quant = ctypes.addressof(q)
    c.refuse_unless_accepted(a)


def _rows_or_fakes(n_rows: int, meta: bool):
    """A mapping's rows of a tensor of a given shape: as_rows, or for fakes (no memory) the shape's check and
    _FakeRows."""
    def rows(name, t, t_shape):
        if meta:
            check_shape(name, t, t_shape)
            return _fake_rows(t, n_rows, t_shape[-1])
        return as_rows(name, t, t_shape)
    return rows


def _map_quant_rows(x, residual, out, residual_out, y_out, z, shape, quant_dtype, meta=False):
    """The rows of a quantized call's tensors (as_rows; _FakeRows for fakes): x, residual, out, residual_out, y
    and z, each None where not given (an in-place output shares its input's view)."""
    rows = _rows_or_fakes(math.prod(shape[:-1]), meta)

    zr = rows("z", z, shape) if z is not None else None
    xr = rows("x", x, shape)
    rr = rows("residual", residual, shape) if residual is not None else None
    orr = rows("out", out, q_shape(shape, quant_dtype)) if out is not None else None
    ro = None
    if residual_out is not None:
        ro = rr if residual_out is residual and rr is not None else rows("residual_out", residual_out, shape)
    yr = (xr if y_out is x else rows("y", y_out, shape)) if y_out is not None else None
    return xr, rr, orr, ro, yr, zr


def check_quant_meta(x, residual, weight, quant_dtype, scale=None, group_size=0, scale_ub=None,
                     out=None, residual_out=None, scales_out=None, y_out=None, *, ue8m0=False,
                     column_major=False, swizzled=False, eps=None, weight_offset=None, x_scale=1.0, post_weight=None,
                     post_weight_offset=0.0, z=None, gate_group_size=0, norm_before_gate=True):
    """A quantized call's checks without memory (the fakes'): the mapping, then the C runtime's rules on stand-in
    addresses. residual None: the plain norm's. Into given outputs (``out`` given) quant_dtype is out's dtype.
    Returns (shape, H, device, mode)."""
    functional = out is None
    shape, H, device, mode, want = _map_quant(x, residual, weight, quant_dtype, scale, group_size, scale_ub, out,
                                              residual_out, scales_out, y_out, column_major, swizzled, functional,
                                              post_weight, z)
    xr, rr, orr, ro, yr, zr = _map_quant_rows(x, residual, out, residual_out, y_out, z, shape, quant_dtype,
                                              meta=True)
    scalars = _forward_scalars(eps, weight_offset, None, False, x_scale, post_weight_offset)
    scales = _scales_of(scales_out, shape, mode, group_size, swizzled, want, meta=True)
    quant_verdict(xr, rr, weight, quant_dtype, mode, scale, group_size, scale_ub, ue8m0, swizzled, orr, ro, scales,
                  yr, shape, H, scalars, post_weight, zr, gate_group_size, norm_before_gate, address=StandIns())
    return shape, H, device, mode


def _scales_of(scales_out, shape, mode: str, group_size, swizzled: bool, want, meta=False):
    """scales_out as the C ABI takes it: (tensor, row stride, group stride), or None where not given. A static
    call's is passed on for the C runtime to refuse; the swizzled layout has no strides."""
    if scales_out is None:
        return None
    block = mode in BLOCK_MODES
    if mode == "static" or (block and swizzled):
        return scales_out, 0, 0
    gs = group_size if (mode == "group" or block) and want is not None else 0
    if meta:
        n_groups = shape[-1] // gs if gs else 1
        n = math.prod(shape[:-1])
        return (scales_out, scales_out.stride(0) if n > 1 and scales_out.dim() else 0,
                scales_out.stride(-1) if n_groups > 1 else 0)
    _, rs, sg = _scales_flattened(scales_out, shape, gs)
    return scales_out, rs, sg


def quant_scales_shape(shape, group_size) -> torch.Size:
    return torch.Size(shape[:-1]) if not group_size else torch.Size((*shape[:-1], shape[-1] // group_size))


def _scales_flattened(t: torch.Tensor, shape, group_size):
    """scales_out seen as [rows, groups]: (the 2-D view, row stride, group stride), in elements; its
    leading dimensions must flatten to rows of one stride (the mapping)."""
    n_groups = shape[-1] // group_size if group_size else 1
    try:
        t2 = t.view(-1, n_groups) if t.dim() != 2 or not group_size else t
    except RuntimeError:
        raise ValueError(f"scales_out: the leading dimensions of a tensor with strides {t.stride()} cannot be "
                         f"flattened into rows of one stride") from None
    n = t2.shape[0]
    rs = t2.stride(0) if n > 1 else 0
    gs = t2.stride(1) if n_groups > 1 else 0
    return t2, rs, gs


def _scales_geometry(t: torch.Tensor, shape, group_size):
    """scales_out (allocated here) as [rows, groups]: (the 2-D view, row stride, group stride)."""
    return _scales_flattened(t, shape, group_size)


def check_quant(x, residual, weight, quant_dtype, scale=None, group_size=0, scale_ub=None, out=None,
                residual_out=None, scales_out=None, y_out=None, *, ue8m0=False, column_major=False,
                swizzled=False, eps=None, weight_offset=None, x_scale=1.0, post_weight=None,
                post_weight_offset=0.0, z=None, gate_group_size=0, norm_before_gate=True) -> QuantCall:
    """Every check of a quantized forward: the mapping (Python types, dtypes, shapes, devices), in
    torch_ext/ops.cpp's order, then the C runtime's rules (quant_verdict). residual None: the plain norm's (no
    residual_out). out None: the functional form, whose q, residual_out, scales and y the caller allocates after
    this returns (they stand in; set them on the call)."""
    functional = out is None
    shape, H, device, mode, want = _map_quant(x, residual, weight, quant_dtype, scale, group_size, scale_ub, out,
                                              residual_out, scales_out, y_out, column_major, swizzled, functional,
                                              post_weight, z)
    xr, rr, orr, ro, yr, zr = _map_quant_rows(x, residual, out, residual_out, y_out, z, shape, quant_dtype)
    scales = _scales_of(scales_out, shape, mode, group_size, swizzled, want)
    scalars = _forward_scalars(eps, weight_offset, None, False, x_scale, post_weight_offset)
    quant_verdict(xr, rr, weight, quant_dtype, mode, scale, group_size, scale_ub, ue8m0, swizzled, orr, ro, scales,
                  yr, shape, H, scalars, post_weight, zr, gate_group_size, norm_before_gate)
    eps, weight_offset, _, x_scale, post_weight_offset = scalars
    block = mode in BLOCK_MODES
    call = QuantCall(shape, H, device, xr, rr if rr is not None else xr,
                     None if weight is None else Rows(weight, 1, H), orr, ro)
    call.x_scale = x_scale
    call.post_weight = None if post_weight is None else Rows(post_weight, 1, H)
    call.post_weight_offset = post_weight_offset
    call.y = yr
    call.group_size = group_size or 0
    call.mode = mode
    call.swizzled = swizzled
    call.eps, call.weight_offset = eps, weight_offset
    call.scales = None
    call.scales_row_stride = call.scales_group_stride = 0
    if scales is not None and mode != "static":
        call.scales = scales_out if (block and swizzled) else _scales_flattened(
            scales_out, shape, group_size if (mode == "group" or block) and want is not None else 0)[0]
        call.scales_row_stride, call.scales_group_stride = scales[1], scales[2]
    call.gate = None
    if z is not None:
        call.gate = GateCall()
        call.gate.z, call.gate.group_size = zr, gate_group_size or H
        call.gate.gate_first = 0 if norm_before_gate else 1
    return call


# ----- the backward -----------------------------------------------------------------------------

def _map_backward(dy, dresidual_out, h, rstd, weight):
    dy = check_tensor("dy", dy)
    h = check_tensor("h", h)
    if weight is not None:  # None: the weightless norm's backward
        weight = check_tensor("weight", weight)
    if dresidual_out is not None:
        check_tensor("dresidual_out", dresidual_out)
    if dy.dim() == 0:
        raise ValueError("dy must have at least one dimension (..., H)")
    H = dy.shape[-1]
    if dresidual_out is not None and dresidual_out.dtype != h.dtype:
        raise TypeError(f"dresidual_out has dtype {dresidual_out.dtype}; it must be h's dtype ({h.dtype})")
    tensors = {"dy": dy, "h": h} if rstd is None else {"dy": dy, "h": h, "rstd": rstd}
    if weight is not None:
        _check_vector(weight, H)
        tensors["weight"] = weight
    if dresidual_out is not None:
        tensors["dresidual_out"] = dresidual_out
    return H, check_devices(tensors)


def _backward_scalars(weight_offset, eps):
    """The backward's scalars as C takes them: their Python types here, their values the C runtime's rules."""
    if weight_offset is not None:
        check_real("weight_offset", weight_offset)
    check_real("eps", eps)
    return (0.0 if weight_offset is None else float(weight_offset)), float(eps)


def check_backward_meta(dy, dresidual_out, h, rstd, weight, *, weight_offset=None, cos=None, sin=None,
                        rope_groups=0, rotary_dim=0, rope_style=0, eps=0.0, weight_grad=True):
    """A backward call's checks without memory (the fake implementation's): the mapping, then the C runtime's
    rules on addresses that stand in for the tensors' (their alignment and aliasing are checked when the call
    runs). Returns the device."""
    H, device = _map_backward(dy, dresidual_out, h, rstd, weight)
    check_same_shape(dy.shape, {"h": h, "dresidual_out": dresidual_out})
    _check_rstd_layout(rstd, dy.shape)
    n_rows = math.prod(dy.shape[:-1])
    strides = _map_backward_rope(n_rows, H, device, cos, sin, rope_groups, rotary_dim, rope_style)
    weight_offset, eps = _backward_scalars(weight_offset, eps)
    fake = StandIns()
    rows = {name: _fake_rows(t, n_rows, H) for name, t in (("dy", dy), ("h", h), ("dresidual_out", dresidual_out))
            if t is not None}
    backward_verdict(rows, H, rstd, weight, weight_offset, strides, cos, sin, rope_groups, rotary_dim, rope_style,
                     eps, weight_grad, address=fake)
    return device


def check_backward(dy, dresidual_out, h, rstd, weight, *, weight_offset=None, cos=None, sin=None, rope_groups=0,
                   rotary_dim=0, rope_style=0, eps=0.0, weight_grad=True):
    """Every check of a backward call: the mapping (what the C runtime cannot see: Python types, dtypes, shapes,
    devices), in torch_ext/ops.cpp's order, then the C runtime's rules (backward_verdict; the outputs, new, stand
    in). Returns (device, row views of dy, h and dresidual_out, weight_offset, eps, the angles' row strides or
    None)."""
    H, device = _map_backward(dy, dresidual_out, h, rstd, weight)
    shape = dy.shape
    rows = {"dy": as_rows("dy", dy, shape), "h": as_rows("h", h, shape)}
    if dresidual_out is not None:
        rows["dresidual_out"] = as_rows("dresidual_out", dresidual_out, shape)
    _check_rstd_layout(rstd, shape)
    strides = _map_backward_rope(rows["dy"].n_rows, H, device, cos, sin, rope_groups, rotary_dim, rope_style)
    weight_offset, eps = _backward_scalars(weight_offset, eps)
    backward_verdict(rows, H, rstd, weight, weight_offset, strides, cos, sin, rope_groups, rotary_dim, rope_style,
                     eps, weight_grad)
    return device, rows, weight_offset, eps, strides


class _FakeRows:
    """A fake's rows for the C runtime's rules: Rows without the addresses (a fake has none)."""

    __slots__ = ("tensor", "n_rows", "row_stride")

    def __init__(self, tensor, n_rows: int, row_stride: int):
        self.tensor, self.n_rows, self.row_stride = tensor, n_rows, row_stride


def _fake_rows(t, n_rows: int, H: int) -> _FakeRows:
    return _FakeRows(t, n_rows, t.stride(-2) if t.dim() > 1 and n_rows > 1 else max(H, 1))


class StandIns:
    """Addresses for what has no memory yet: a fake's (t given: its region plus the view's offset) or an output
    the call has not allocated (no t). Each one region of 2^40 bytes apart from the others and above where an
    allocator's addresses start, so that none meets another or a real tensor."""

    def __init__(self):
        self._n = 0

    def __call__(self, t=None):
        self._n += 1
        return (self._n << 40) + (t.storage_offset() * t.element_size() if t is not None else 0)


def _as_field(v: int) -> int:
    """An int argument as a C enum or int32 field: out of range stays out of range (-1), for C to refuse."""
    return v if -2**31 <= v < 2**31 else -1


# A given tensor with no elements still passes an address (torch gives it none): NULL would say "absent", and
# residual NULL is the plain norm. Nothing is read or written there: such a call is a no-op or refused.
EMPTY_ADDRESS = 1 << 12


def _address(t):
    return t.data_ptr() or EMPTY_ADDRESS


_C_LIBRARY = []  # c_library, imported on the first check (it imports this module)


def _c():
    if not _C_LIBRARY:
        from . import c_library
        _C_LIBRARY.append(c_library)
    return _C_LIBRARY[0]


def backward_verdict(rows: dict, H: int, rstd, weight, weight_offset: float, strides, cos, sin, groups: int,
                     rotary_dim: int, style: int, eps: float, weight_grad: bool, address=_address) -> None:
    """The C runtime's rules on a mapped backward call (addrmsnorm_norm_backward_check, no driver), its refusal
    raised in a Python caller's words, as torch_ext/ops.cpp's norm_backward raises it. The outputs (the functional
    form's, new) and the workspace (the JIT's own) stand in; ``address``: StandIns for fakes."""
    c = _c()

    a = c.NormBackwardArgs()
    a.struct_size = ctypes.sizeof(c.NormBackwardArgs)
    dy, h, dro = rows["dy"], rows["h"], rows.get("dresidual_out")
    a.rows, a.hidden = dy.n_rows, H
    a.dy, a.stride_dy = address(dy.tensor), dy.row_stride
    a.h, a.stride_h = address(h.tensor), h.row_stride
    if dro is not None:
        a.dresidual_out, a.stride_dresidual_out = address(dro.tensor), dro.row_stride
    a.x_dtype = c.DTYPE_ENUM[dy.tensor.dtype]
    a.residual_dtype = c.DTYPE_ENUM[h.tensor.dtype]
    a.weight_dtype = c.DTYPE_ENUM[weight.dtype] if weight is not None else a.residual_dtype
    a.rstd = address(rstd) if rstd is not None else None
    a.weight = address(weight) if weight is not None else None
    a.weight_offset, a.eps, a.rope_groups = weight_offset, eps, groups
    stand_in = address if isinstance(address, StandIns) else StandIns()
    roped = strides is not None
    separate = a.x_dtype != a.residual_dtype
    dres = stand_in()
    a.dresidual = None if roped else dres
    a.dx = dres if roped else (stand_in() if separate else None)
    a.stride_dresidual = a.stride_dx = H
    if weight is not None and weight_grad:
        a.dweight = stand_in()
    a.workspace, a.workspace_bytes = stand_in(), 0  # the JIT's own partials: never the C runtime's to size
    rope = None
    if roped:
        angles = cos if cos is not None else sin
        rope = c.Rope(_as_field(style), _as_field(rotary_dim), c.DTYPE_ENUM.get(angles.dtype, 99), 0)
        rope.cos, rope.sin = (address(cos) if cos is not None else None), (address(sin) if sin is not None else None)
        rope.stride_cos, rope.stride_sin = strides.get("cos", 0), strides.get("sin", 0)
        a.rope = ctypes.addressof(rope)
    c.refuse_unless_accepted(a)


def _map_backward_rope(n_rows, H, device, cos, sin, groups, rotary_dim, style):
    """The rotation's mapping in the backward (cos or sin given; torch_ext/ops.cpp's norm_backward, through
    rope_of): the types, cos and sin (tokens, rotary_dim) rows of one dtype, the tokens rows / rope_groups where
    that divides. Returns their row strides, or None (no rotation)."""
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise TypeError(f"rope_groups must be an int, got {type(groups).__name__}")
    if cos is None and sin is None:
        return map_rope(0, H, device, None, None, None, None, rotary_dim, style)  # None, or the refusal of a style
    if groups > 0 and n_rows % groups == 0:
        tokens = n_rows // groups
    else:  # rope_groups is refused among the values (the C runtime's rule): the angles' rows are not checked
        angles = cos if isinstance(cos, torch.Tensor) else sin
        tokens = angles.shape[0] if isinstance(angles, torch.Tensor) and angles.dim() == 2 else 0
    return map_rope(tokens, H, device, None, None, cos, sin, rotary_dim, style)


# ----- the gated norm (z given: Qwen3-Next's and Mamba2's norm with a silu gate) ------------------------

GATED_DTYPES = torch_dtypes(configs.GATED_DTYPES)
GATE_ACTIVATIONS = configs.GATE_ACTIVATIONS


class GateCall:
    """A checked gated call's gate: z's rows, the group (columns normalized together) and the order
    (gate_first 0: rmsnorm(x) * silu(z); 1: rmsnorm(x * silu(z)))."""

    __slots__ = ("z", "group_size", "gate_first")


def gate_activation_index(activation) -> int:
    """The activation's index in configs.GATE_ACTIVATIONS (the C ABI's addrmsnorm_gate, less 1)."""
    if activation not in GATE_ACTIVATIONS:
        raise ValueError(f"activation is {activation!r}; the gated norm's gate is one of {GATE_ACTIVATIONS}")
    return GATE_ACTIVATIONS.index(activation)


def gate_takes(x, z, weight) -> bool:
    """Whether the gated kernels take a call on these tensors (the C runtime's gate rules restated, for a patch
    that must fall back rather than refuse, and that must trace under torch.compile): 16-bit x, z and weight of one
    dtype, rows of one stride, the row (the group) a multiple of 8 of at most GATED_MAX_GROUP, 16-byte
    aligned starts and row strides (a single row has none)."""
    if x.dtype not in GATED_DTYPES or z.dtype != x.dtype or (weight is not None and weight.dtype != x.dtype):
        return False
    if x.dim() != 2 or z.shape != x.shape or x.stride(-1) != 1 or z.stride(-1) != 1:
        return False
    H = x.shape[-1]
    return (H % VARIANT_ALIGN == 0 and H <= configs.GATED_MAX_GROUP
            and (x.shape[0] <= 1 or all(t.stride(0) % VARIANT_ALIGN == 0 for t in (x, z)))  # one row: no stride
            and starts_aligned(x, z, *(() if weight is None else (weight,))))


# ----- the pair (b given: two parts of the same rows, MLA's q and kv latents, in one launch) -------------


class PairCall:
    """A checked pair's second part: b's rows, its weight and its output's rows (None: b_out is allocated
    after the check)."""

    __slots__ = ("b", "weight", "out", "H")


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
        t2 = t if t.dim() == 2 else t.view(-1, H) if t.numel() else _empty_rows(t, shape)
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


class NormCall:
    """A checked plain-norm call: the rows of x and out in one addressing (the same group_rows)."""

    __slots__ = ("shape", "H", "device", "x", "out", "weight", "eps", "weight_offset", "hf", "round_once", "gate",
                 "pair")


def _map_plain_parts(x, weight, shape, z, group_size, b, b_weight, b_out, meta=False):
    """The mapping of the plain norm's gate (z) and pair (b, b_weight, b_out), in torch_ext/ops.cpp's order (its
    gate_of and norm_call): the dtypes the struct takes from another tensor, the shapes, the devices, the rows of
    one stride, and group_size's Python type. Returns the rows of z, b and b_out (None where not given; for fakes,
    ``meta``, _FakeRows) and b's width (0 without b)."""
    rows = _rows_or_fakes(math.prod(shape[:-1]), meta)

    zr = br = bo = None
    if z is not None:
        if z.dtype != x.dtype:
            raise TypeError(f"z has dtype {z.dtype}; it must be x's dtype ({x.dtype})")
        check_devices({"x": x, "z": z})
        zr = rows("z", z, shape)
    if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int)):
        raise ValueError(f"group_size is {group_size!r}; it must be an int dividing H = {shape[-1]}")
    if b is None:  # b's output without b: passed on by address, for the C runtime to refuse by name
        return zr, None, (_FakeRows(check_tensor("b_out", b_out), 0, 0) if b_out is not None else None), 0
    check_tensor("b", b)
    if b.dtype != x.dtype:
        raise TypeError(f"b has dtype {b.dtype}; it must be x's dtype ({x.dtype})")
    if b_weight is not None:
        check_tensor("b_weight", b_weight)
        if weight is not None and b_weight.dtype != weight.dtype:
            raise TypeError(f"b_weight has dtype {b_weight.dtype}; it must be weight's dtype ({weight.dtype})")
    if b_out is not None:
        check_tensor("b_out", b_out)
        if b_out.dtype != x.dtype:
            raise TypeError(f"b_out has dtype {b_out.dtype}; it must be x's dtype ({x.dtype})")
    check_devices({k: t for k, t in (("x", x), ("b", b), ("b_weight", b_weight), ("b_out", b_out)) if t is not None})
    if b.dim() != len(shape) or tuple(b.shape[:-1]) != tuple(shape[:-1]):
        raise ValueError(f"b has shape {tuple(b.shape)}; it must have x's rows, {tuple(shape[:-1])} + (width,)")
    Hb = b.shape[-1]
    if b_weight is not None:
        _check_vector(b_weight, Hb, "b_weight")
    br = rows("b", b, b.shape)
    if b_out is not None:
        bo = br if b_out is b else rows("b_out", b_out, b.shape)
    return zr, br, bo, Hb


def plain_verdict(x, out, weight, rstd, H: int, scalars: tuple, z, group_size, norm_before_gate, b, b_weight, b_out,
                  post_weight, return_rstd: bool, address=None, residual_out=None) -> None:
    """The C runtime's rules on a mapped plain-norm call (addrmsnorm_norm_check, no driver), raised in a Python
    caller's words, as torch_ext/ops.cpp's norm_call raises them. x and out are GroupedRows of one addressing (out
    None: new, contiguous, it stands in), z, b and b_out Rows (each None where not given; for fakes, _FakeRows),
    b_weight a tensor; a requested rstd (return_rstd) stands in too; ``address``: StandIns for fakes."""
    c = _c()

    address = address or _address
    stand_in = address if isinstance(address, StandIns) else StandIns()
    eps, weight_offset, numerics, x_scale, post_weight_offset = scalars
    g = getattr(x, "group_rows", 1)
    a = c.NormArgs()
    a.struct_size = ctypes.sizeof(c.NormArgs)
    a.rows, a.groups, a.hidden = x.n_rows // g if g > 1 else x.n_rows, g, H
    a.x, a.stride_x, a.stride_x_group = address(x.tensor), x.row_stride, getattr(x, "group_stride", 0)
    a.x_dtype = a.residual_dtype = c.DTYPE_ENUM[x.tensor.dtype]
    if out is not None:
        a.out, a.stride_out, a.stride_out_group = address(out.tensor), out.row_stride, getattr(out, "group_stride", 0)
    else:
        a.out, a.stride_out, a.stride_out_group = stand_in(), (g * H if g > 1 else H), (H if g > 1 else 0)
    a.rstd = address(rstd) if rstd is not None else (stand_in() if return_rstd else None)
    a.residual_out = address(residual_out) if residual_out is not None else None  # refused: no residual
    _weights_scalars_gate(a, c, address, weight, b_weight, post_weight, eps, weight_offset, numerics, x_scale,
                          post_weight_offset, z, group_size, norm_before_gate)
    _pair_fields(a, address, b, b_weight, b_out)
    c.refuse_unless_accepted(a)


def check_rmsnorm_meta(x, weight, out=None, rstd=None, *, hf=False, eps=None, weight_offset=None, numerics=None,
                       x_scale=1.0, post_weight=None, post_weight_offset=0.0, z=None, group_size=0,
                       norm_before_gate=True, return_rstd=False, b=None, b_weight=None, b_out=None, residual_out=None):
    """A plain-norm call's checks without memory (the fake implementations'): the mapping, then the C runtime's
    rules on stand-in addresses. Returns (shape, H, device)."""
    shape, H, device = _map_forward(x, None, weight, out, residual_out, rstd, z=z)
    if out is not None and out is not x:
        check_same_shape(shape, {"out": out})
    zr, br, bo, _ = _map_plain_parts(x, weight, shape, z, group_size, b, b_weight, b_out, meta=True)
    _check_rstd_layout(rstd, shape)
    scalars = _forward_scalars(eps, weight_offset, numerics, hf, x_scale, post_weight_offset)
    n_rows = math.prod(shape[:-1])
    plain_verdict(_fake_rows(x, n_rows, H), _fake_rows(out, n_rows, H) if out is not None else None, weight, rstd,
                  H, scalars, zr, group_size, norm_before_gate, br, b_weight, bo, post_weight, return_rstd,
                  address=StandIns(), residual_out=residual_out)
    return shape, H, device


def check_rmsnorm(x, weight, out=None, rstd=None, *, hf=False, eps=None, weight_offset=None,
                  numerics=None, x_scale=1.0, post_weight=None, post_weight_offset=0.0, z=None, group_size=0,
                  norm_before_gate=True, return_rstd=False, b=None, b_weight=None, b_out=None, residual_out=None) -> NormCall:
    """Every check of a plain-norm call: the mapping (Python types, dtypes, shapes, devices), in
    torch_ext/ops.cpp's order, then the C runtime's rules (plain_verdict). ``out`` None: the caller allocates a
    contiguous one after this returns (then call.out is None). z given is the gated norm (call.gate), b the
    pair (call.pair)."""
    shape, H, device = _map_forward(x, None, weight, out, residual_out, rstd, z=z)
    zr, br, bo, Hb = _map_plain_parts(x, weight, shape, z, group_size, b, b_weight, b_out)
    xr = as_grouped_rows("x", x, shape)
    orr = None
    if out is not None:
        orr = xr if out is x else as_grouped_rows("out", out, shape)
        g = max(xr.group_rows, orr.group_rows)
        xr, orr = xr.as_group_of(g), orr.as_group_of(g)
    _check_rstd_layout(rstd, shape)
    scalars = _forward_scalars(eps, weight_offset, numerics, hf, x_scale, post_weight_offset)
    plain_verdict(xr, orr, weight, rstd, H, scalars, zr, group_size, norm_before_gate, br, b_weight, bo,
                  post_weight, return_rstd, residual_out=residual_out)
    eps, weight_offset, numerics = scalars[:3]
    call = NormCall()
    call.shape, call.H, call.device, call.out, call.weight = shape, H, device, orr, weight
    call.eps, call.weight_offset = eps, weight_offset
    call.hf, call.round_once = numerics != 0, numerics == 2
    call.x = xr
    call.gate = call.pair = None
    if z is not None:
        call.gate = GateCall()
        call.gate.z, call.gate.group_size = zr, group_size or H
        call.gate.gate_first = 0 if norm_before_gate else 1
    if b is not None:
        call.pair = PairCall()
        call.pair.b, call.pair.weight, call.pair.out, call.pair.H = br, b_weight, bo, Hb
    return call


QK_MAX_HEAD_DIM = configs.QK_MAX_HEAD_DIM


# ----- the rotation (RoPE) of normalized heads: the QK norm's, or the plain norm's of (tokens, heads, head_dim) --

ROPE_STYLES = configs.ROPE_STYLES  # the C ABI's addrmsnorm_rope_style: 0 NeoX (rotate_half), 1 GPT-J
ROPE_DTYPES = torch_dtypes(configs.ROPE_DTYPES)  # the rotation's kernels take 16-bit heads
POSITION_DTYPES = torch_dtypes(configs.POSITION_DTYPES)


class RopeCall:
    """A checked rotation: the launcher's rope tuple (launcher.launch_forward) and what the position check
    needs. cos_sin_cache is passed as cos (its rows' first rotary_dim / 2 columns) and sin (the view past
    them), indexed by frequency; HF's cos and sin by column."""

    __slots__ = ("cos", "sin", "positions", "stride_cos", "stride_sin", "rotary_dim", "style", "by_freq",
                 "max_position")

    def launch(self) -> tuple:
        return (self.cos, self.sin, self.positions, self.stride_cos, self.stride_sin, self.rotary_dim, self.style,
                self.by_freq, self.max_position)


def rope_style_index(style) -> int:
    """A style's name as the operators' rope_style: "neox" 0, "gptj" 1."""
    if style not in ROPE_STYLES:
        raise ValueError(f"style is {style!r}; the rotation's styles are {ROPE_STYLES} (NeoX's rotate_half, "
                         f"GPT-J's interleaved pairs)")
    return ROPE_STYLES.index(style)


def _angle_rows(name: str, t, rotary_dim: int, rows: int | None) -> int:
    """An angle tensor's mapping: 2-D (rows, rotary_dim), the last dimension contiguous. Returns its row stride."""
    if t.dim() != 2 or (rows is not None and t.shape[0] != rows) or t.shape[1] != rotary_dim:
        want = f"({rows if rows is not None else 'max_position'}, {rotary_dim})"
        raise ValueError(f"{name} has shape {tuple(t.shape)}; it must be {want}, a row of rotary_dim angles "
                         f"{'a token' if rows is not None else 'a position'}")
    if rotary_dim > 1 and t.stride(1) != 1:
        raise ValueError(f"{name}: the last dimension must be contiguous (stride 1), got stride {t.stride(1)}")
    return t.stride(0) if t.shape[0] > 1 else rotary_dim


def check_rope_types(positions, cos_sin_cache, cos, sin, rotary_dim, style) -> None:
    """The rotation's arguments' Python types (map_rope's first rule; the functional forms check them before
    they reshape the angles)."""
    for name, t in (("positions", positions), ("cos_sin_cache", cos_sin_cache), ("cos", cos), ("sin", sin)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor or None, got {type(t).__name__}")
    for name, n in (("rotary_dim", rotary_dim), ("rope_style", style)):
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"{name} must be an int, got {type(n).__name__}")


def map_rope(tokens: int, head_dim: int, device, positions, cos_sin_cache, cos, sin, rotary_dim, style):
    """The rotation's mapping (torch_ext/ops.cpp's rope_of), tensor by tensor: Python types, each given tensor's
    dtype, shape with rotary_dim (0: head_dim), contiguity and device. Returns the angles' row strides by name
    (None: no rotation given)."""
    check_rope_types(positions, cos_sin_cache, cos, sin, rotary_dim, style)
    if positions is None and cos_sin_cache is None and cos is None and sin is None:
        if rotary_dim != 0 or style != 0:
            raise ValueError("rotary_dim or rope_style is set but no angles are given: the rotation takes positions "
                             "and cos_sin_cache, or cos and sin")
        return None
    rd_given = head_dim if rotary_dim == 0 else rotary_dim
    strides = {}
    if positions is not None:
        if positions.dtype not in POSITION_DTYPES:
            raise TypeError(f"positions has dtype {positions.dtype}; it must be int32 or int64")
        _check_vector(positions, tokens, "positions")  # one a token
    for name, t, rows in (("cos_sin_cache", cos_sin_cache, None), ("cos", cos, tokens), ("sin", sin, tokens)):
        if t is not None:
            check_tensor(name, t)
            if name == "sin" and cos is not None and sin.dtype != cos.dtype:  # the C ABI has one angle dtype
                raise TypeError(f"sin has dtype {sin.dtype}; it must be cos's dtype ({cos.dtype})")
            strides[name] = _angle_rows(name, t, rd_given, rows)
    for name, t in (("positions", positions), ("cos_sin_cache", cos_sin_cache), ("cos", cos), ("sin", sin)):
        if t is not None and t.device != device:
            raise ValueError(f"{name} is on {t.device} but qkv is on {device}; all tensors must be on one device")
    return strides


def rope_call(tokens: int, head_dim: int, positions, cos_sin_cache, cos, sin, rotary_dim, style, strides) -> RopeCall:
    """An admitted rotation as the launcher takes it (RopeCall), from map_rope's strides."""
    cached = positions is not None or cos_sin_cache is not None
    rd = head_dim if rotary_dim == 0 else rotary_dim
    call = RopeCall()
    call.rotary_dim, call.style, call.by_freq = rd, style, int(cached)
    if cached:
        call.max_position = cos_sin_cache.shape[0]
        call.cos, call.sin = cos_sin_cache, cos_sin_cache[:, rd // 2:]
        call.stride_cos = call.stride_sin = strides["cos_sin_cache"]
        call.positions = positions
    else:
        call.stride_cos, call.stride_sin = strides["cos"], strides["sin"]
        call.cos, call.sin, call.positions, call.max_position = cos, sin, None, 0
    return call


def check_positions_in_cache(positions, max_position: int) -> None:
    """positions below the cache's rows, read back to the host (a synchronization): the eager functions' check
    (the kernel itself writes nothing of a token whose position is outside the cache)."""
    if positions.numel() == 0:
        return
    lo, hi = torch.aminmax(positions)
    lo, hi = int(lo), int(hi)
    if lo < 0 or hi >= max_position:
        raise ValueError(f"positions run from {lo} to {hi}; cos_sin_cache has {max_position} rows (positions "
                         f"must be in [0, {max_position}))")


class QkCall:
    """A checked QK-norm call: qkv as [tokens, width] rows of one stride, and its rotation (None: none)."""

    __slots__ = ("tokens", "stride", "device", "eps", "weight_offset", "hf", "round_once", "rope")


def _map_qk(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, num_v_heads=0):
    check_head_counts(num_q_heads, num_kv_heads, head_dim, num_v_heads)
    qkv = check_tensor("qkv", qkv)
    if (q_weight is None) != (k_weight is None):  # (torch_ext/ops.cpp's qk_rmsnorm_ says why it is stated here)
        given, missing = ("q_weight", "k_weight") if k_weight is None else ("k_weight", "q_weight")
        raise ValueError(f"{missing} is None but {given} is given: the QK norm takes both weights, or neither "
                         f"(weightless)")
    for name, w in (("q_weight", q_weight), ("k_weight", k_weight)):
        if w is not None:
            check_tensor(name, w)
    if q_weight is not None and k_weight.dtype != q_weight.dtype:
        raise TypeError(f"k_weight has dtype {k_weight.dtype}; it must be q_weight's dtype ({q_weight.dtype})")
    if qkv.dim() != 2:
        raise ValueError(f"qkv has shape {tuple(qkv.shape)}; it must be 2-D, (tokens, width)")
    if head_dim >= 1:  # else the C runtime's head_dim rule (below) names the argument the caller got wrong
        for name, w in (("q_weight", q_weight), ("k_weight", k_weight)):
            if w is not None:
                _check_vector(w, head_dim, name)
    device = check_devices({name: t for name, t in (("qkv", qkv), ("q_weight", q_weight), ("k_weight", k_weight))
                            if t is not None})
    width = (num_q_heads + num_kv_heads + num_v_heads) * head_dim
    if num_q_heads >= 1 and num_kv_heads >= 1 and num_v_heads >= 0 and head_dim >= 1 and qkv.shape[1] < width:
        heads = (f"q, k and v heads' ({num_q_heads} + {num_kv_heads} + {num_v_heads})" if num_v_heads else
                 f"q and k heads' ({num_q_heads} + {num_kv_heads})")
        raise ValueError(f"qkv has width {qkv.shape[1]}, less than the {heads} * {head_dim} = {width}")
    if qkv.shape[1] > 1 and qkv.stride(1) != 1:
        raise ValueError(f"qkv: the last dimension must be contiguous (stride 1), got stride {qkv.stride(1)}")
    return device


def qk_verdict(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, num_v_heads, scalars: tuple, positions,
               cos_sin_cache, cos, sin, rotary_dim, style, strides, address=None) -> None:
    """The C runtime's rules on a mapped QK call (addrmsnorm_norm_check, no driver), raised in a Python caller's
    words, as torch_ext/ops.cpp's qk_rmsnorm_ raises them: qkv's heads as the groups of one in-place call
    (addrmsnorm_norm_args_qkv's layout), the rotation's descriptor where angles are given. ``address``: StandIns
    for fakes."""
    c = _c()
    address = address or _address
    eps, weight_offset, numerics = scalars[:3]
    T = qkv.shape[0]
    a = c.NormArgs()
    a.struct_size = ctypes.sizeof(c.NormArgs)
    a.x = a.out = address(qkv)
    a.weight = address(q_weight) if q_weight is not None else None
    a.weight2 = address(k_weight) if k_weight is not None else None
    a.weight2_from_group = num_q_heads
    a.rows, a.groups, a.hidden = T, num_q_heads + num_kv_heads, head_dim
    a.stride_x = a.stride_out = qkv.stride(0) if T > 1 else qkv.shape[1]
    a.stride_x_group = a.stride_out_group = head_dim
    if num_v_heads:
        a.v_from_group = num_q_heads + num_kv_heads
        a.groups += num_v_heads
    a.x_dtype = a.residual_dtype = c.DTYPE_ENUM[qkv.dtype]
    a.weight_dtype = c.DTYPE_ENUM[q_weight.dtype] if q_weight is not None else a.x_dtype
    a.eps, a.weight_offset, a.numerics = eps, weight_offset, _as_field(numerics)
    rope = None
    if strides is not None:
        angles = next((t for t in (cos_sin_cache, cos, sin) if t is not None), None)  # the struct's one dtype
        rope = c.Rope(_as_field(style), _as_field(rotary_dim),
                      c.DTYPE_ENUM.get(angles.dtype, 99) if angles is not None else 0,
                      POSITION_DTYPE_ENUM.get(positions.dtype, 99) if positions is not None else 0)
        rope.positions = address(positions) if positions is not None else None
        if cos_sin_cache is not None:
            rope.cos_sin_cache, rope.max_position = address(cos_sin_cache), cos_sin_cache.shape[0]
            rope.stride_cache = strides["cos_sin_cache"]
        rope.cos = address(cos) if cos is not None else None
        rope.sin = address(sin) if sin is not None else None
        rope.stride_cos, rope.stride_sin = strides.get("cos", 0), strides.get("sin", 0)
        a.rope = ctypes.addressof(rope)
    c.refuse_unless_accepted(a)


POSITION_DTYPE_ENUM = {torch.int32: 0, torch.int64: 1}  # addrmsnorm_index_dtype


def _map_qk_call(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, eps, weight_offset, numerics, hf,
                 positions, cos_sin_cache, cos, sin, rotary_dim, rope_style, num_v_heads):
    """qk_rmsnorm_'s mapping (torch_ext/ops.cpp's, in its order): returns (device, the rotation's strides or None,
    the scalars)."""
    device = _map_qk(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, num_v_heads)
    strides = map_rope(qkv.shape[0], head_dim, device, positions, cos_sin_cache, cos, sin, rotary_dim, rope_style)
    return device, strides, _forward_scalars(eps, weight_offset, numerics, hf, 1.0, 0.0)


def check_qk_rmsnorm_meta(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, *, hf=False, eps=None,
                          weight_offset=None, numerics=None, positions=None, cos_sin_cache=None, cos=None, sin=None,
                          rotary_dim=0, rope_style=0, num_v_heads=0):
    """qk_rmsnorm_'s checks without memory (the fake's): the mapping, then the C runtime's rules on stand-in
    addresses. Returns qkv's device. qkv may be wider than q's and k's heads (and v's, num_v_heads): the columns
    after them are never read or written."""
    device, strides, scalars = _map_qk_call(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, eps,
                                            weight_offset, numerics, hf, positions, cos_sin_cache, cos, sin,
                                            rotary_dim, rope_style, num_v_heads)
    qk_verdict(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, num_v_heads, scalars, positions,
               cos_sin_cache, cos, sin, rotary_dim, rope_style, strides, address=StandIns())
    return device


def check_qk_rmsnorm(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, *, hf=False, eps=None,
                     weight_offset=None, numerics=None, positions=None, cos_sin_cache=None, cos=None, sin=None,
                     rotary_dim=0, rope_style=0, num_v_heads=0) -> QkCall:
    """Every check of qk_rmsnorm_: the mapping, then the C runtime's rules (qk_verdict: qkv's heads are written in
    place, so neither weight may share memory with them, nor may the rotation's angles or positions)."""
    device, strides, scalars = _map_qk_call(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, eps,
                                            weight_offset, numerics, hf, positions, cos_sin_cache, cos, sin,
                                            rotary_dim, rope_style, num_v_heads)
    qk_verdict(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, num_v_heads, scalars, positions,
               cos_sin_cache, cos, sin, rotary_dim, rope_style, strides)
    eps, weight_offset, numerics = scalars[:3]
    call = QkCall()
    call.tokens, call.device = qkv.shape[0], device
    call.eps, call.weight_offset, call.hf, call.round_once = eps, weight_offset, numerics != 0, numerics == 2
    call.stride = qkv.stride(0) if qkv.shape[0] > 1 else qkv.shape[1]
    call.rope = None if strides is None else rope_call(call.tokens, head_dim, positions, cos_sin_cache, cos, sin,
                                                       rotary_dim, rope_style, strides)
    return call


def plain_numerics(numerics) -> tuple[bool, bool]:
    """The plain-norm operators' numerics, an index into configs.PLAIN_NUMERICS, as (hf, round_once)."""
    if isinstance(numerics, bool) or not isinstance(numerics, int) or not 0 <= numerics < len(configs.PLAIN_NUMERICS):
        raise ValueError(f"numerics must be 0 (contract), 1 (hf) or 2 (hf_round_once), got {numerics!r}")
    return numerics != 0, numerics == 2
