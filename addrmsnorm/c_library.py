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


def load(path: Path | str) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    f = lib.addrmsnorm_fused_add_rmsnorm
    f.restype = ctypes.c_int
    f.argtypes = ([ctypes.c_void_p] * 6 + [ctypes.c_int64] * 6 + [ctypes.c_int] * 3 +
                  [ctypes.c_float, ctypes.c_float, ctypes.c_uint32, ctypes.c_void_p])
    lib.addrmsnorm_last_error.restype = ctypes.c_char_p
    lib.addrmsnorm_preload.restype = ctypes.c_int
    return lib


FLAG_HF_NUMERICS = 0x1  # ADDRMSNORM_FLAG_HF_NUMERICS
FLAG_PDL = 0x2          # ADDRMSNORM_FLAG_PDL


def forward(lib, x, residual, weight, out, residual_out, rstd=None, eps=1e-6, weight_offset=0.0, flags=0):
    """One call on 2-D row-strided tensors, on torch's current stream; raises with the library's
    message on failure."""
    N, H = x.shape
    st = lib.addrmsnorm_fused_add_rmsnorm(
        x.data_ptr(), residual.data_ptr(), weight.data_ptr(), out.data_ptr(), residual_out.data_ptr(),
        rstd.data_ptr() if rstd is not None else None, N, H,
        x.stride(0), residual.stride(0), out.stride(0), residual_out.stride(0),
        DTYPE_ENUM[x.dtype], DTYPE_ENUM[residual.dtype], DTYPE_ENUM[weight.dtype], eps, weight_offset, flags,
        torch.cuda.current_stream().cuda_stream)
    if st != 0:
        raise RuntimeError(lib.addrmsnorm_last_error().decode())


def declare_backward(lib) -> None:
    f = lib.addrmsnorm_fused_add_rmsnorm_backward
    f.restype = ctypes.c_int
    f.argtypes = ([ctypes.c_void_p] * 9 + [ctypes.c_uint64] + [ctypes.c_int64] * 7 + [ctypes.c_int] * 3 +
                  [ctypes.c_float, ctypes.c_uint32, ctypes.c_void_p])
    g = lib.addrmsnorm_fused_add_rmsnorm_backward_workspace_size
    g.restype = ctypes.c_int
    g.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]


def backward(lib, dy, dresidual_out, h, rstd, weight, weight_offset=0.0):
    """The C ABI backward on 2-D row-strided tensors, on torch's current stream:
    returns (dresidual, dx or None, dweight); raises with the library's message on failure."""
    declare_backward(lib)
    N, H = dy.shape
    dres = torch.empty(N, H, dtype=h.dtype, device=dy.device)
    dx = torch.empty(N, H, dtype=dy.dtype, device=dy.device) if dy.dtype != h.dtype else None
    dweight = torch.empty_like(weight)
    size = ctypes.c_uint64()
    if lib.addrmsnorm_fused_add_rmsnorm_backward_workspace_size(N, H, DTYPE_ENUM[dy.dtype], DTYPE_ENUM[h.dtype],
                                                                 ctypes.byref(size)) != 0:
        raise RuntimeError(lib.addrmsnorm_last_error().decode())
    ws = torch.empty(max(1, (size.value + 3) // 4), dtype=torch.float32, device=dy.device)
    st = lib.addrmsnorm_fused_add_rmsnorm_backward(
        dy.data_ptr(), dresidual_out.data_ptr() if dresidual_out is not None else None, h.data_ptr(),
        rstd.data_ptr(), weight.data_ptr(), dres.data_ptr(), dx.data_ptr() if dx is not None else None,
        dweight.data_ptr(), ws.data_ptr(), size.value, N, H,
        dy.stride(0), dresidual_out.stride(0) if dresidual_out is not None else H, h.stride(0), H, H,
        DTYPE_ENUM[dy.dtype], DTYPE_ENUM[h.dtype], DTYPE_ENUM[weight.dtype], weight_offset, 0,
        torch.cuda.current_stream().cuda_stream)
    if st != 0:
        raise RuntimeError(lib.addrmsnorm_last_error().decode())
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


def declare_quant(lib) -> None:
    args = [ctypes.c_void_p] * 6 + [ctypes.c_int64] * 7 + [ctypes.c_int, ctypes.c_float, ctypes.c_float,
                                                           ctypes.POINTER(Quant), ctypes.c_uint32]
    f = lib.addrmsnorm_fused_add_rmsnorm_quant
    f.restype, f.argtypes = ctypes.c_int, args + [ctypes.c_void_p]
    g = lib.addrmsnorm_fused_add_rmsnorm_quant_check
    g.restype, g.argtypes = ctypes.c_int, args


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
    """One quantized call on 2-D row-strided tensors, on torch's current stream; raises on failure."""
    declare_quant(lib)
    N, H = x.shape
    desc = quant_desc(q, **quant)
    st = lib.addrmsnorm_fused_add_rmsnorm_quant(
        x.data_ptr(), residual.data_ptr(), weight.data_ptr(), q.data_ptr(), residual_out.data_ptr(),
        y.data_ptr() if y is not None else None, N, H, x.stride(0), residual.stride(0), q.stride(0),
        residual_out.stride(0), y.stride(0) if y is not None else H, DTYPE_ENUM[x.dtype], eps, weight_offset,
        ctypes.byref(desc), flags, torch.cuda.current_stream().cuda_stream)
    if st != 0:
        raise RuntimeError(lib.addrmsnorm_last_error().decode())


# ----- the plain norm ------------------------------------------------------------------------------

_NORM_ARGS = ([ctypes.c_void_p] * 4 + [ctypes.c_int64] * 7 + [ctypes.c_int] * 2 +
              [ctypes.c_float, ctypes.c_float, ctypes.c_uint32])
_QK_ARGS = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 5 + [ctypes.c_int] * 2 + [ctypes.c_float, ctypes.c_float,
                                                                                 ctypes.c_uint32]
_PLAIN_QUANT_ARGS = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 5 + [ctypes.c_int, ctypes.c_float, ctypes.c_float,
                                                                    ctypes.POINTER(Quant), ctypes.c_uint32]
_PLAIN_BACKWARD_ARGS = [ctypes.c_void_p] * 7 + [ctypes.c_uint64] + [ctypes.c_int64] * 5 + [ctypes.c_int] * 2 + [
    ctypes.c_float, ctypes.c_uint32]


def declare_plain(lib) -> None:
    """The plain norm's functions, with their _check twins (which take no stream)."""
    for name, args in (("addrmsnorm_rmsnorm", _NORM_ARGS), ("addrmsnorm_qk_rmsnorm", _QK_ARGS),
                       ("addrmsnorm_rmsnorm_quant", _PLAIN_QUANT_ARGS),
                       ("addrmsnorm_rmsnorm_backward", _PLAIN_BACKWARD_ARGS)):
        f, g = getattr(lib, name), getattr(lib, name + "_check")
        f.restype, f.argtypes = ctypes.c_int, args + [ctypes.c_void_p]
        g.restype, g.argtypes = ctypes.c_int, args


def _raise(lib, st) -> None:
    if st != 0:
        raise RuntimeError(lib.addrmsnorm_last_error().decode())


def rmsnorm_args(x, weight, out, rstd=None, eps=1e-6, weight_offset=0.0, flags=0) -> tuple:
    """addrmsnorm_rmsnorm's arguments (no stream) for x and out of shape (rows, H) or (rows, heads, H)."""
    def strides(t):
        return (t.stride(0), t.stride(1)) if t.dim() == 3 else (t.stride(0), t.shape[-1])
    heads = x.shape[1] if x.dim() == 3 else 1
    (sx, sxh), (so, soh) = strides(x), strides(out)
    return (x.data_ptr(), weight.data_ptr(), out.data_ptr(), rstd.data_ptr() if rstd is not None else None,
            x.shape[0], heads, x.shape[-1], sx, sxh, so, soh, DTYPE_ENUM[x.dtype], DTYPE_ENUM[weight.dtype], eps,
            weight_offset, flags)


def rmsnorm(lib, x, weight, out, rstd=None, eps=1e-6, weight_offset=0.0, flags=0) -> None:
    declare_plain(lib)
    _raise(lib, lib.addrmsnorm_rmsnorm(*rmsnorm_args(x, weight, out, rstd, eps, weight_offset, flags),
                                       torch.cuda.current_stream().cuda_stream))


def qk_rmsnorm(lib, qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, eps=1e-6, weight_offset=0.0,
               flags=0) -> None:
    declare_plain(lib)
    _raise(lib, lib.addrmsnorm_qk_rmsnorm(
        qkv.data_ptr(), q_weight.data_ptr(), k_weight.data_ptr(), qkv.shape[0], num_q_heads, num_kv_heads, head_dim,
        qkv.stride(0), DTYPE_ENUM[qkv.dtype], DTYPE_ENUM[q_weight.dtype], eps, weight_offset, flags,
        torch.cuda.current_stream().cuda_stream))


def rmsnorm_quant(lib, x, weight, q, y=None, eps=1e-6, weight_offset=0.0, flags=0, **quant) -> None:
    declare_plain(lib)
    N, H = x.shape
    desc = quant_desc(q, **quant)
    _raise(lib, lib.addrmsnorm_rmsnorm_quant(
        x.data_ptr(), weight.data_ptr(), q.data_ptr(), y.data_ptr() if y is not None else None, N, H, x.stride(0),
        q.stride(0), y.stride(0) if y is not None else H, DTYPE_ENUM[x.dtype], eps, weight_offset,
        ctypes.byref(desc), flags, torch.cuda.current_stream().cuda_stream))


def rmsnorm_backward(lib, dy, x, rstd, weight, weight_offset=0.0):
    """(dx, dweight) of the plain norm through the C ABI, on torch's current stream."""
    declare_plain(lib)
    declare_backward(lib)
    N, H = dy.shape
    dx, dweight = torch.empty(N, H, dtype=x.dtype, device=x.device), torch.empty_like(weight)
    size = ctypes.c_uint64()
    _raise(lib, lib.addrmsnorm_fused_add_rmsnorm_backward_workspace_size(N, H, DTYPE_ENUM[x.dtype],
                                                                         DTYPE_ENUM[x.dtype], ctypes.byref(size)))
    ws = torch.empty(max(1, (size.value + 3) // 4), dtype=torch.float32, device=x.device)
    _raise(lib, lib.addrmsnorm_rmsnorm_backward(
        dy.data_ptr(), x.data_ptr(), rstd.data_ptr(), weight.data_ptr(), dx.data_ptr(), dweight.data_ptr(),
        ws.data_ptr(), size.value, N, H, dy.stride(0), x.stride(0), H, DTYPE_ENUM[x.dtype], DTYPE_ENUM[weight.dtype],
        weight_offset, 0, torch.cuda.current_stream().cuda_stream))
    return dx, dweight
