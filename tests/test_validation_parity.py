"""The C ABI's validation and the Python API's agree, case by case.

The same checks live in two languages (addrmsnorm/validation.py for the Python API and
src/validate.cpp for the C ABI), so this test draws random calls -- views of one shared buffer
with random offsets and strides, random dtypes, eps and aliasing -- and asks both whether each is
valid. `addrmsnorm_fused_add_rmsnorm_check` touches no driver, so this runs on the CPU: it needs
only the built library (scripts/test.sh builds it before the Python suites).
"""

import math
import random

import pytest
import torch

import addrmsnorm
from addrmsnorm import validation
from addrmsnorm import c_library

from conftest import DEVICE

LIB_PATH = c_library.library_path()
pytestmark = [
    pytest.mark.skipif(LIB_PATH is None, reason="no C++ library (build it: cmake -S . -B build && cmake --build build)"),
    pytest.mark.skipif(DEVICE is None, reason="the Python API needs CUDA or the Triton interpreter"),
]

DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def _python_verdict(x, r, w, out, rout, eps, monkeypatch):
    try:  # the checks of the JIT backend, without a launch
        validation.check_scalar("eps", eps, positive=True)
        validation.check_forward(x, r, w, out, rout)
        return "ok"
    except TypeError:
        return "type"
    except ValueError:
        return "value"


def _c_verdict(lib, x, r, w, out, rout, eps):
    N, H = x.shape
    st = lib.addrmsnorm_fused_add_rmsnorm_check(
        x.data_ptr(), r.data_ptr(), w.data_ptr(), out.data_ptr(), rout.data_ptr(), None, N, H,
        x.stride(0), r.stride(0), out.stride(0), rout.stride(0),
        c_library.DTYPE_ENUM[x.dtype], c_library.DTYPE_ENUM[r.dtype], c_library.DTYPE_ENUM[w.dtype],
        eps, 0.0, 0)
    return {0: "ok", 1: "value", 2: "type"}.get(st, f"status {st}")


def test_random_calls_get_the_same_verdict(monkeypatch):
    import ctypes

    lib = c_library.load(LIB_PATH)
    lib.addrmsnorm_fused_add_rmsnorm_check.restype = ctypes.c_int
    lib.addrmsnorm_fused_add_rmsnorm_check.argtypes = ([ctypes.c_void_p] * 6 + [ctypes.c_int64] * 6 +
                                                       [ctypes.c_int] * 3 + [ctypes.c_float] * 2 + [ctypes.c_uint32])
    rng = random.Random(0)
    buf = torch.zeros(1 << 16, dtype=torch.uint8, device=DEVICE)
    seen = {"ok": 0, "value": 0, "type": 0}

    def view(dtype, N, H):
        item = torch.tensor([], dtype=dtype).element_size()
        stride = rng.choice([H, H, H + rng.randint(1, 5), max(H // 2, 1), 2 * H])
        span = ((N - 1) * stride + H) * item
        off = rng.randrange(0, 4096, item) if rng.random() < 0.5 else rng.randrange(8192, len(buf) - span, item)
        return torch.as_strided(buf[off:off + span].view(dtype), (N, H), (stride, 1))

    for _ in range(1000):
        N, H = rng.choice([1, 2, 5]), rng.choice([1, 8, 13, 64])
        xd = rng.choice(DTYPES)
        rd = rng.choice([xd, xd, torch.float32, rng.choice(DTYPES)])
        wd = rng.choice(DTYPES)
        x, r = view(xd, N, H), view(rd, N, H)
        w = view(wd, 1, H)[0]
        # The C ABI has no dtype of its own for out and residual_out (they are x's and residual's),
        # so only calls it can express are drawn: out of x's dtype, residual_out of residual's,
        # aliasing x or residual where the dtypes allow it.
        out = x if rng.random() < 0.2 else (r if rng.random() < 0.1 and rd == xd else view(xd, N, H))
        rout = r if rng.random() < 0.2 else (x if rng.random() < 0.1 and rd == xd else view(rd, N, H))
        eps = rng.choice([1e-6, 1e-5, 0.0, -1.0, math.inf, 1e-50])
        py = _python_verdict(x, r, w, out, rout, eps, monkeypatch)
        c = _c_verdict(lib, x, r, w, out, rout, eps)
        assert py == c, (f"Python says {py}, C says {c} ({addrmsnorm_last_error(lib)}): N={N} H={H} "
                         f"x={xd} r={rd} w={wd} out={out.dtype} rout={rout.dtype} eps={eps} "
                         f"strides x{x.stride(0)} r{r.stride(0)} o{out.stride(0)} ro{rout.stride(0)}")
        seen[py] += 1
    # The draw must exercise every verdict, or the agreement above means little.
    assert all(v >= 15 for v in seen.values()), seen


def addrmsnorm_last_error(lib):
    return lib.addrmsnorm_last_error().decode()
