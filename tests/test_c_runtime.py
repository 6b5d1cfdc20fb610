"""The C++ runtime (AOT cubins through the C ABI) against the reference and against the JIT path.

Loads the library from $ADDRMSNORM_LIB (scripts/test.sh points it at the build), through ctypes.
Where both paths compile the same specialization (the aligned one: every pointer 16-byte aligned,
H and strides multiples of the 16-byte vector) they must give identical bits: one kernel source,
one config table, one alignment rule.
"""

import pytest
import torch

import addrmsnorm
from addrmsnorm import c_library
from addrmsnorm.configs import align_elems

from conftest import ON_GPU
from helpers import DTYPE_COMBOS, bits, check_forward, combo_id, make_inputs

LIB_PATH = c_library.library_path()

pytestmark = [
    pytest.mark.skipif(not ON_GPU, reason="needs a GPU (the C++ runtime launches compiled cubins)"),
    pytest.mark.skipif(LIB_PATH is None, reason="no C++ library (build it: cmake -S . -B build && cmake --build build)"),
]


def _lib():
    return c_library.load(LIB_PATH)


def c_forward(lib, x, r, w, out, rout, rstd, eps, off):
    c_library.forward(lib, x, r, w, out, rout, rstd, eps, off)


@pytest.mark.parametrize("combo", DTYPE_COMBOS, ids=combo_id)
@pytest.mark.parametrize("H", [1, 111, 128, 3000, 4096, 4100, 11111, 16384, 20000, 65536])
@pytest.mark.parametrize("N", [1, 19, 989])
def test_c_abi_matches_reference_and_jit(N, H, combo):
    lib = _lib()
    x, r, w = make_inputs(N, H, combo, "cuda", seed=N + H)
    eps, off = 1e-6, 0.5
    out, rout = torch.full_like(x, float("nan")), torch.full_like(r, float("nan"))
    rstd = torch.full((N,), float("nan"), device="cuda")
    c_forward(lib, x, r, w, out, rout, rstd, eps, off)
    torch.cuda.synchronize()
    check_forward(x, r, w, out, rout, rstd, eps, off, what=f"C ABI {N}x{H}")
    y, ro, rs = addrmsnorm.fused_add_rmsnorm(x, r, w, eps, weight_offset=off, return_rstd=True)
    strides = (0,) * 4 if N == 1 else (H,) * 4
    if align_elems((x.data_ptr(), r.data_ptr(), w.data_ptr(), out.data_ptr(), rout.data_ptr()), H, strides,
                   x.element_size(), r.element_size()) > 1:
        assert torch.equal(bits(out), bits(y)), "C ABI and JIT differ on the same specialization"
        assert torch.equal(bits(rstd), bits(rs))
    assert torch.equal(bits(rout), bits(ro))


def test_c_abi_in_place_and_strided():
    lib = _lib()
    N, H = 37, 4100
    x, r, w = make_inputs(N, H, ("bf16", "fp32", "bf16"), "cuda", seed=5)
    x0, r0 = x.clone(), r.clone()
    c_forward(lib, x, r, w, x, r, None, 1e-5, 0.0)  # vLLM convention
    torch.cuda.synchronize()
    check_forward(x0, r0, w, x, r, None, 1e-5, 0.0, what="C ABI in place")
    xb = torch.randn(N, H + 9, device="cuda").to(torch.bfloat16)
    rb = torch.randn(N, H + 3, device="cuda").to(torch.bfloat16)
    ob = torch.full((N, H + 5), 7.0, device="cuda", dtype=torch.bfloat16)
    rob = torch.full((N, H + 1), 7.0, device="cuda", dtype=torch.bfloat16)
    c_forward(lib, xb[:, :H], rb[:, :H], w, ob[:, :H], rob[:, :H], None, 1e-5, 0.0)
    torch.cuda.synchronize()
    check_forward(xb[:, :H], rb[:, :H], w, ob[:, :H], rob[:, :H], None, 1e-5, 0.0, what="C ABI strided")
    assert (ob[:, H:] == 7).all() and (rob[:, H:] == 7).all()
