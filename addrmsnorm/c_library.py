"""ctypes access to the C++ runtime (libaddrmsnorm.so), for tests and the benchmark report.

It declares the C ABI of include/addrmsnorm/addrmsnorm.h; it is not the torch binding (that is a
compiled extension). The library is looked up at $ADDRMSNORM_LIB, else in the installed package,
else in build/ of the source tree (``locate.py``).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from . import locate, validation

DTYPE_ENUM = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}  # addrmsnorm_dtype


def library_path() -> Path | None:
    """libaddrmsnorm.so: $ADDRMSNORM_LIB, else the installed package's lib/, else build/ (locate.py)."""
    p = locate.find("libaddrmsnorm.so", "ADDRMSNORM_LIB")
    return p if p is not None and p.exists() else None


class NormArgs(ctypes.Structure):
    """addrmsnorm_norm_args, field for field (tests/test_c_runtime.py holds the two layouts equal)."""
    _fields_ = [("struct_size", ctypes.c_uint64), ("x", ctypes.c_void_p), ("rows", ctypes.c_int64),
                ("groups", ctypes.c_int64), ("hidden", ctypes.c_int64), ("stride_x", ctypes.c_int64),
                ("stride_x_group", ctypes.c_int64), ("x_dtype", ctypes.c_int), ("residual_dtype", ctypes.c_int),
                ("residual", ctypes.c_void_p), ("stride_residual", ctypes.c_int64),
                ("residual_out", ctypes.c_void_p), ("stride_residual_out", ctypes.c_int64),
                ("weight", ctypes.c_void_p), ("weight2", ctypes.c_void_p), ("weight2_from_group", ctypes.c_int64),
                ("weight_dtype", ctypes.c_int), ("numerics", ctypes.c_int), ("out", ctypes.c_void_p),
                ("stride_out", ctypes.c_int64), ("stride_out_group", ctypes.c_int64), ("rstd", ctypes.c_void_p),
                ("eps", ctypes.c_double), ("weight_offset", ctypes.c_double), ("flags", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32), ("quant", ctypes.c_void_p), ("y", ctypes.c_void_p),
                ("stride_y", ctypes.c_int64), ("x_scale", ctypes.c_double), ("post_weight", ctypes.c_void_p),
                ("post_weight_offset", ctypes.c_double), ("z", ctypes.c_void_p), ("stride_z", ctypes.c_int64),
                ("group_size", ctypes.c_int64), ("gate", ctypes.c_int32), ("gate_first", ctypes.c_int32),
                ("b", ctypes.c_void_p), ("b_weight", ctypes.c_void_p), ("b_out", ctypes.c_void_p),
                ("b_hidden", ctypes.c_int64), ("stride_b", ctypes.c_int64), ("stride_b_out", ctypes.c_int64),
                ("rope", ctypes.c_void_p), ("v_from_group", ctypes.c_int64)]


class Rope(ctypes.Structure):
    """addrmsnorm_rope."""
    _fields_ = [("style", ctypes.c_int32), ("rotary_dim", ctypes.c_int32), ("angle_dtype", ctypes.c_int),
                ("positions_dtype", ctypes.c_int), ("positions", ctypes.c_void_p), ("cos_sin_cache", ctypes.c_void_p),
                ("max_position", ctypes.c_int64), ("stride_cache", ctypes.c_int64), ("cos", ctypes.c_void_p),
                ("sin", ctypes.c_void_p), ("stride_cos", ctypes.c_int64), ("stride_sin", ctypes.c_int64)]


def rope_desc(*, positions=None, cos_sin_cache=None, cos=None, sin=None, rotary_dim=0, style=0) -> Rope:
    """The rotation's descriptor for tensors (2-D angles; positions int32 or int64)."""
    angles = cos_sin_cache if cos_sin_cache is not None else cos
    r = Rope(style, rotary_dim, DTYPE_ENUM.get(angles.dtype, 99) if angles is not None else 0,
             {torch.int32: 0, torch.int64: 1}.get(positions.dtype, 99) if positions is not None else 0)
    r.positions, r.cos_sin_cache, r.cos, r.sin = _ptr(positions), _ptr(cos_sin_cache), _ptr(cos), _ptr(sin)
    if cos_sin_cache is not None:
        r.max_position, r.stride_cache = cos_sin_cache.shape[0], cos_sin_cache.stride(0)
    r.stride_cos, r.stride_sin = _stride(cos), _stride(sin)
    return r


class NormBackwardArgs(ctypes.Structure):
    """addrmsnorm_norm_backward_args."""
    _fields_ = [("struct_size", ctypes.c_uint64), ("rows", ctypes.c_int64), ("hidden", ctypes.c_int64),
                ("dy", ctypes.c_void_p), ("stride_dy", ctypes.c_int64), ("dresidual_out", ctypes.c_void_p),
                ("stride_dresidual_out", ctypes.c_int64), ("h", ctypes.c_void_p), ("stride_h", ctypes.c_int64),
                ("rstd", ctypes.c_void_p), ("weight", ctypes.c_void_p), ("dresidual", ctypes.c_void_p),
                ("stride_dresidual", ctypes.c_int64), ("dx", ctypes.c_void_p), ("stride_dx", ctypes.c_int64),
                ("dweight", ctypes.c_void_p), ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_uint64),
                ("x_dtype", ctypes.c_int), ("residual_dtype", ctypes.c_int), ("weight_dtype", ctypes.c_int),
                ("flags", ctypes.c_uint32), ("weight_offset", ctypes.c_double), ("rope", ctypes.c_void_p),
                ("rope_groups", ctypes.c_int64), ("eps", ctypes.c_double)]


def load(path: Path | str) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    for name, args in (("addrmsnorm_norm", [ctypes.POINTER(NormArgs), ctypes.c_void_p]),
                       ("addrmsnorm_norm_check", [ctypes.POINTER(NormArgs)]),
                       ("addrmsnorm_norm_backward", [ctypes.POINTER(NormBackwardArgs), ctypes.c_void_p]),
                       ("addrmsnorm_norm_backward_check", [ctypes.POINTER(NormBackwardArgs)]),
                       ("addrmsnorm_norm_backward_workspace_size",
                        [ctypes.POINTER(NormBackwardArgs), ctypes.POINTER(ctypes.c_uint64)])):
        f = getattr(lib, name)
        f.restype, f.argtypes = ctypes.c_int, args
    lib.addrmsnorm_last_error.restype = ctypes.c_char_p
    lib.addrmsnorm_last_error_python.restype = ctypes.c_char_p
    lib.addrmsnorm_status_string.restype = ctypes.c_char_p
    lib.addrmsnorm_status_string.argtypes = [ctypes.c_int]
    lib.addrmsnorm_preload.restype = ctypes.c_int
    return lib


FLAG_PDL = 0x2  # ADDRMSNORM_FLAG_PDL
FLAG_X_SCALE = 0x8  # ADDRMSNORM_FLAG_X_SCALE
NUMERICS = {"contract": 0, "hf": 1, "hf_round_once": 2}  # addrmsnorm_numerics


EMPTY_ADDRESS = validation.EMPTY_ADDRESS  # a given tensor with no elements: an address never read


def _ptr(t):
    return (t.data_ptr() or EMPTY_ADDRESS) if t is not None else None


def _stride(t, dim=0, default=0):
    return t.stride(dim) if t is not None and t.dim() > dim else default


def norm_args(x, weight, out, *, residual=None, residual_out=None, rstd=None, eps=1e-6, weight_offset=0.0,
              numerics=0, flags=0, weight2=None, weight2_from_group=0, quant=None, y=None,
              x_scale=None, post_weight=None, post_weight_offset=0.0, z=None, group_size=0,
              norm_before_gate=True, b=None, b_weight=None, b_out=None) -> NormArgs:
    """addrmsnorm_norm_args for tensors: x and out (rows, H) or (rows, groups, H) with their strides; residual,
    residual_out and y (rows, H); quant a Quant (kept alive by the caller). weight None: the weightless
    norm; x_scale: sets ADDRMSNORM_FLAG_X_SCALE and the field; post_weight: the sandwich norm (weight_dtype
    is post_weight's where weight is None); z (rows, H): the gated norm; b, b_weight, b_out: the pair."""
    a = NormArgs()
    a.struct_size = ctypes.sizeof(NormArgs)
    grouped = x.dim() == 3
    a.x, a.rows, a.hidden = _ptr(x), x.shape[0], x.shape[-1]
    a.groups = x.shape[1] if grouped else 1
    a.stride_x, a.stride_x_group = x.stride(0), (x.stride(1) if grouped else 0)
    a.x_dtype = DTYPE_ENUM.get(x.dtype, 99)
    a.residual, a.stride_residual = _ptr(residual), _stride(residual)
    a.residual_dtype = DTYPE_ENUM.get(residual.dtype, 99) if residual is not None else a.x_dtype
    a.residual_out, a.stride_residual_out = _ptr(residual_out), _stride(residual_out)
    a.weight = _ptr(weight)
    a.weight_dtype = DTYPE_ENUM.get(weight.dtype, 99) if weight is not None else a.x_dtype
    if post_weight is not None and weight is None:
        a.weight_dtype = DTYPE_ENUM.get(post_weight.dtype, 99)
    a.post_weight, a.post_weight_offset = _ptr(post_weight), post_weight_offset
    a.weight2, a.weight2_from_group = _ptr(weight2), weight2_from_group
    a.out, a.stride_out = _ptr(out), out.stride(0)
    a.stride_out_group = out.stride(1) if out.dim() == 3 else 0
    a.rstd = _ptr(rstd)
    a.eps, a.weight_offset, a.numerics, a.flags = eps, weight_offset, numerics, flags
    a.quant = ctypes.cast(ctypes.pointer(quant), ctypes.c_void_p) if quant is not None else None
    a.y, a.stride_y = _ptr(y), _stride(y)
    if x_scale is not None:
        a.flags |= FLAG_X_SCALE
        a.x_scale = x_scale
    a.z, a.stride_z = _ptr(z), _stride(z)
    a.group_size, a.gate_first = group_size, 0 if norm_before_gate else 1
    a.b, a.b_weight, a.b_out = _ptr(b), _ptr(b_weight), _ptr(b_out)
    if b is not None:
        a.b_hidden, a.stride_b, a.stride_b_out = b.shape[-1], _stride(b), _stride(b_out)
    return a


def backward_args(dy, h, rstd, weight, *, dresidual_out=None, dresidual=None, dx=None, dweight=None, workspace=None,
                  workspace_bytes=0, weight_offset=0.0, flags=0, residual_dtype=None, rope=None, rope_groups=0,
                  eps=0.0) -> NormBackwardArgs:
    """The backward's struct for 2-D tensors. rope: a Rope (kept alive by the caller), the rotation's backward
    over rows of rope_groups heads a token."""
    a = NormBackwardArgs()
    a.struct_size = ctypes.sizeof(NormBackwardArgs)
    a.rows, a.hidden = dy.shape
    a.dy, a.stride_dy = _ptr(dy), dy.stride(0)
    a.dresidual_out, a.stride_dresidual_out = _ptr(dresidual_out), _stride(dresidual_out)
    a.h, a.stride_h = _ptr(h), h.stride(0)
    a.rstd, a.weight = _ptr(rstd), _ptr(weight)
    a.dresidual, a.stride_dresidual = _ptr(dresidual), _stride(dresidual)
    a.dx, a.stride_dx = _ptr(dx), _stride(dx)
    a.dweight, a.workspace, a.workspace_bytes = _ptr(dweight), _ptr(workspace), workspace_bytes
    a.x_dtype = DTYPE_ENUM.get(dy.dtype, 99)
    a.residual_dtype = DTYPE_ENUM.get(residual_dtype or h.dtype, 99)
    a.weight_dtype = DTYPE_ENUM.get(weight.dtype, 99) if weight is not None else a.x_dtype
    a.flags, a.weight_offset = flags, weight_offset
    a.rope = ctypes.cast(ctypes.pointer(rope), ctypes.c_void_p) if rope is not None else None
    a.rope_groups, a.eps = rope_groups, eps
    return a


def check(lib, args) -> int:
    """addrmsnorm_norm_check or addrmsnorm_norm_backward_check: the status (the message in last_error)."""
    f = lib.addrmsnorm_norm_check if isinstance(args, NormArgs) else lib.addrmsnorm_norm_backward_check
    return f(ctypes.byref(args))


_RULES: list = []  # the library the JIT backend's checks ask, loaded once


def rules_library() -> ctypes.CDLL:
    """libaddrmsnorm.so for its checks (addrmsnorm_norm_check and addrmsnorm_norm_backward_check touch no driver):
    the one validator of every call, whichever backend runs it. Without it (a source tree that was never built)
    the JIT backend runs no call: it would have no rules to admit one by."""
    if not _RULES:
        path = library_path()
        if path is None:
            raise ImportError("addrmsnorm checks every call with its C runtime (libaddrmsnorm.so), which was not "
                              "found (not installed, not in build/, $ADDRMSNORM_LIB unset): build it (scripts/build.sh, "
                              "or pip install), or point $ADDRMSNORM_LIB at one")
        _RULES.append(load(path))
    return _RULES[0]


STATUS_ERRORS = {1: ValueError, 2: TypeError}  # ADDRMSNORM_ERROR_INVALID_ARGUMENT, _UNSUPPORTED_DTYPE


def refuse_unless_accepted(args) -> None:
    """The C runtime's verdict on a call (NormArgs or NormBackwardArgs), raised in a Python caller's words as the
    torch extension raises it: ValueError, TypeError, else RuntimeError."""
    lib = rules_library()
    st = check(lib, args)
    if st != 0:
        msg = lib.addrmsnorm_last_error_python().decode()
        error = STATUS_ERRORS.get(st)
        raise error(msg) if error else RuntimeError(f"addrmsnorm: {lib.addrmsnorm_status_string(st).decode()}: {msg}")


def _raise(lib, st) -> None:
    if st != 0:
        raise RuntimeError(lib.addrmsnorm_last_error().decode())


def launch(lib, args) -> None:
    """The call on torch's current stream; raises with the library's message on failure."""
    stream = torch.cuda.current_stream().cuda_stream
    f = lib.addrmsnorm_norm if isinstance(args, NormArgs) else lib.addrmsnorm_norm_backward
    _raise(lib, f(ctypes.byref(args), stream))


def forward(lib, x, residual, weight, out, residual_out, rstd=None, eps=1e-6, weight_offset=0.0, flags=0,
            numerics=0):
    """One fused call on 2-D row-strided tensors."""
    launch(lib, norm_args(x, weight, out, residual=residual, residual_out=residual_out, rstd=rstd, eps=eps,
                          weight_offset=weight_offset, numerics=numerics, flags=flags))


def workspace(lib, dy, residual_dtype):
    """The backward's workspace for dy's rows: (tensor, bytes)."""
    size = ctypes.c_uint64()
    a = NormBackwardArgs()
    a.struct_size = ctypes.sizeof(NormBackwardArgs)
    a.rows, a.hidden = dy.shape
    a.x_dtype, a.residual_dtype = DTYPE_ENUM[dy.dtype], DTYPE_ENUM[residual_dtype]
    _raise(lib, lib.addrmsnorm_norm_backward_workspace_size(ctypes.byref(a), ctypes.byref(size)))
    return torch.empty(max(1, (size.value + 3) // 4), dtype=torch.float32, device=dy.device), size.value


def backward(lib, dy, dresidual_out, h, rstd, weight, weight_offset=0.0):
    """The fused backward on 2-D row-strided tensors: (dresidual, dx or None, dweight)."""
    N, H = dy.shape
    dres = torch.empty(N, H, dtype=h.dtype, device=dy.device)
    dx = torch.empty(N, H, dtype=dy.dtype, device=dy.device) if dy.dtype != h.dtype else None
    dweight = torch.empty_like(weight)
    ws, size = workspace(lib, dy, h.dtype)
    launch(lib, backward_args(dy, h, rstd, weight, dresidual_out=dresidual_out, dresidual=dres, dx=dx,
                              dweight=dweight, workspace=ws, workspace_bytes=size, weight_offset=weight_offset))
    return dres, dx, dweight


# ----- quantized outputs -------------------------------------------------------------------------

QUANT_MODES = {name: mode for mode, name in validation.QUANT_MODE_NAMES.items()}  # addrmsnorm_quant_mode
QUANT_DTYPE_ENUM = {torch.int8: 0, torch.float8_e4m3fn: 1, torch.float4_e2m1fn_x2: 2}  # addrmsnorm_quant_dtype
QUANT_UE8M0 = 0x1
QUANT_SWIZZLED = 0x2


class Quant(ctypes.Structure):
    """addrmsnorm_quant."""
    _fields_ = [("mode", ctypes.c_int), ("dtype", ctypes.c_int), ("group_size", ctypes.c_int32),
                ("flags", ctypes.c_uint32), ("scale", ctypes.c_void_p), ("scale_ub", ctypes.c_void_p),
                ("scales", ctypes.c_void_p), ("scales_stride_row", ctypes.c_int64),
                ("scales_stride_group", ctypes.c_int64)]


def quant_desc(q: torch.Tensor, *, scale=None, group_size=0, scale_ub=None, scales=None, ue8m0=False,
               swizzled=False) -> Quant:
    """The descriptor of a quantized call, from tensors (scales 1-D per token, 2-D per group or block, or 1-D
    swizzled); the mode as validation.quant_mode names it from q's dtype, scale and group_size."""
    mode = validation.quant_mode(scale, group_size, q.dtype)
    flags = (QUANT_UE8M0 if ue8m0 else 0) | (QUANT_SWIZZLED if swizzled else 0)
    strided = scales is not None and not swizzled
    return Quant(QUANT_MODES[mode], QUANT_DTYPE_ENUM.get(q.dtype, 99), group_size, flags,
                 scale.data_ptr() if scale is not None else None, scale_ub.data_ptr() if scale_ub is not None else None,
                 scales.data_ptr() if scales is not None else None,
                 scales.stride(0) if strided and scales.dim() > 0 else 0,
                 scales.stride(1) if strided and scales.dim() > 1 else 0)


def forward_quant(lib, x, residual, weight, q, residual_out, y=None, eps=1e-6, weight_offset=0.0, flags=0, **quant):
    """One quantized call on 2-D row-strided tensors (residual None: the plain norm's)."""
    desc = quant_desc(q, **quant)
    launch(lib, norm_args(x, weight, q, residual=residual, residual_out=residual_out, eps=eps,
                          weight_offset=weight_offset, flags=flags, quant=desc, y=y))


# ----- the plain norm ------------------------------------------------------------------------------

def rmsnorm(lib, x, weight, out, rstd=None, eps=1e-6, weight_offset=0.0, numerics=0, flags=0) -> None:
    """The plain norm of x and out of shape (rows, H) or (rows, groups, H)."""
    launch(lib, norm_args(x, weight, out, rstd=rstd, eps=eps, weight_offset=weight_offset, numerics=numerics,
                          flags=flags))


def qk_args(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, eps=1e-6, weight_offset=0.0, numerics=0,
            flags=0, rope=None, num_v_heads=0) -> NormArgs:
    """The QK norm of a (tokens, width) buffer, in place: its q and k heads (then v's, weightless and not rotated)
    as groups of head_dim. rope: a Rope (kept alive by the caller)."""
    T = qkv.shape[0]
    heads = num_q_heads + num_kv_heads + num_v_heads
    view = torch.as_strided(qkv, (T, heads, head_dim), (qkv.stride(0) if T > 1 else qkv.shape[1], head_dim, 1))
    a = norm_args(view, q_weight, view, eps=eps, weight_offset=weight_offset, numerics=numerics, flags=flags,
                  weight2=k_weight, weight2_from_group=num_q_heads)
    a.rope = ctypes.cast(ctypes.pointer(rope), ctypes.c_void_p) if rope is not None else None
    a.v_from_group = num_q_heads + num_kv_heads if num_v_heads else 0
    return a


def qk_rmsnorm(lib, qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, eps=1e-6, weight_offset=0.0,
               numerics=0, flags=0, rope=None, num_v_heads=0) -> None:
    launch(lib, qk_args(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, eps, weight_offset, numerics,
                        flags, rope, num_v_heads))


def rmsnorm_quant(lib, x, weight, q, y=None, eps=1e-6, weight_offset=0.0, flags=0, **quant) -> None:
    forward_quant(lib, x, None, weight, q, None, y, eps, weight_offset, flags, **quant)


def rmsnorm_backward(lib, dy, x, rstd, weight, weight_offset=0.0):
    """(dx, dweight) of the plain norm: h is x, the gradient of x in dx."""
    N, H = dy.shape
    dx, dweight = torch.empty(N, H, dtype=x.dtype, device=x.device), torch.empty_like(weight)
    ws, size = workspace(lib, dy, x.dtype)
    launch(lib, backward_args(dy, x, rstd, weight, dx=dx, dweight=dweight, workspace=ws, workspace_bytes=size,
                              weight_offset=weight_offset))
    return dx, dweight
