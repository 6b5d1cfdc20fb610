"""ctypes access to the C++ runtime (libaddrmsnorm.so), for tests and the benchmark report.

It declares the C ABI of include/addrmsnorm/addrmsnorm.h; it is not the torch binding (that is a
compiled extension). The library is looked up at $ADDRMSNORM_LIB, else build/libaddrmsnorm.so in
the source tree.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
DTYPE_ENUM = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}  # addrmsnorm_dtype


def library_path() -> Path | None:
    env = os.environ.get("ADDRMSNORM_LIB")
    for p in ([Path(env)] if env else []) + [REPO / "build" / "libaddrmsnorm.so"]:
        if p.exists():
            return p
    return None


def load(path: Path | str) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    f = lib.addrmsnorm_fused_add_rmsnorm
    f.restype = ctypes.c_int
    f.argtypes = ([ctypes.c_void_p] * 6 + [ctypes.c_int64] * 6 + [ctypes.c_int] * 3 +
                  [ctypes.c_float, ctypes.c_float, ctypes.c_uint32, ctypes.c_void_p])
    lib.addrmsnorm_last_error.restype = ctypes.c_char_p
    lib.addrmsnorm_preload.restype = ctypes.c_int
    return lib


def forward(lib, x, residual, weight, out, residual_out, rstd=None, eps=1e-6, weight_offset=0.0):
    """One call on 2-D row-strided tensors, on torch's current stream; raises with the library's
    message on failure."""
    N, H = x.shape
    st = lib.addrmsnorm_fused_add_rmsnorm(
        x.data_ptr(), residual.data_ptr(), weight.data_ptr(), out.data_ptr(), residual_out.data_ptr(),
        rstd.data_ptr() if rstd is not None else None, N, H,
        x.stride(0), residual.stride(0), out.stride(0), residual_out.stride(0),
        DTYPE_ENUM[x.dtype], DTYPE_ENUM[residual.dtype], DTYPE_ENUM[weight.dtype], eps, weight_offset, 0,
        torch.cuda.current_stream().cuda_stream)
    if st != 0:
        raise RuntimeError(lib.addrmsnorm_last_error().decode())
