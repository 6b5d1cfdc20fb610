"""Programmatic dependent launch: a chain of dependent calls gives the same bits with PDL as without.

Each call reads what the previous one wrote, and with PDL every call may start before the previous
has finished: a missing or misplaced grid-dependency wait would show as a difference here. On the
CPU (the interpreter) the flag is accepted and changes nothing, which is checked too.
"""

import pytest
import torch

import addrmsnorm
from addrmsnorm import c_library, jit_backend, ops
from addrmsnorm.launcher import pdl_compiled

from conftest import DEVICE, ON_GPU, gpu_only, needs_kernels
from helpers import DTYPE_COMBOS, bits, combo_id, make_inputs

pytestmark = needs_kernels
LAYERS = 64 if ON_GPU else 3


def _chain(step, x, r, weights):
    """LAYERS dependent calls: each normalizes the previous call's outputs, in place."""
    for w in weights:
        step(x, r, w)
    return x, r


def _run_chain(step, N, H, combo, graph: bool):
    x, r, w = make_inputs(N, H, combo, DEVICE, seed=N + H)
    weights = [(w.float() * (1 + 0.01 * i)).to(w.dtype) for i in range(LAYERS)]
    if not graph:
        return _chain(step, x, r, weights)
    sx, sr = x.clone(), r.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up (load, compile) outside the capture
        _chain(step, sx.clone(), sr.clone(), weights[:1])
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        _chain(step, sx, sr, weights)
    sx.copy_(x)
    sr.copy_(r)
    g.replay()
    return sx, sr


def _steps(pdl: bool):
    steps = {
        "python API": lambda x, r, w: addrmsnorm.fused_add_rmsnorm_(x, r, w, 1e-6, pdl=pdl),
        "functional op": lambda x, r, w: ops.norm_into(x, r, w, x, r, None, 1e-6, pdl=pdl),
        "JIT backend": lambda x, r, w: jit_backend.norm_(x, r, w, 1e-6, pdl=pdl),
    }
    lib_path = c_library.library_path() if ON_GPU else None
    if lib_path is not None:
        lib = c_library.load(lib_path)
        flags = c_library.FLAG_PDL if pdl else 0
        steps["C ABI"] = lambda x, r, w: c_library.forward(lib, x.view(-1, x.shape[-1]), r.view(-1, r.shape[-1]), w,
                                                           x.view(-1, x.shape[-1]), r.view(-1, r.shape[-1]),
                                                           flags=flags)
    return steps


@pytest.mark.parametrize("graph", [False, True] if ON_GPU else [False], ids=lambda g: "graph" if g else "stream")
@pytest.mark.parametrize("N,H", [(1, 4096), (8, 8192), (64, 4100), (3000, 1024)] if ON_GPU else [(3, 40)])
@pytest.mark.parametrize("combo", [DTYPE_COMBOS[0], DTYPE_COMBOS[3]], ids=combo_id)
def test_pdl_chain_gives_the_same_bits(combo, N, H, graph):
    plain, with_pdl = _steps(False), _steps(True)
    ref_x, ref_r = _run_chain(plain["python API"], N, H, combo, graph)
    for name in plain:
        for label, step in ((f"{name} without PDL", plain[name]), (f"{name} with PDL", with_pdl[name])):
            x, r = _run_chain(step, N, H, combo, graph)
            torch.cuda.synchronize() if ON_GPU else None
            assert torch.equal(bits(x), bits(ref_x)), f"{label}: y differs from the plain chain"
            assert torch.equal(bits(r), bits(ref_r)), f"{label}: the residual differs from the plain chain"


@gpu_only
def test_pdl_chain_after_a_slow_writer():
    """The first PDL call follows a long kernel that writes its inputs: it must wait for it."""
    N, H = 4096, 4096
    x, r, w = make_inputs(N, H, DTYPE_COMBOS[0], DEVICE, seed=9)
    big = torch.randn(64 << 20, device=DEVICE)
    for pdl in (False, True):
        xs, rs = torch.empty_like(x), torch.empty_like(r)
        torch.cuda.synchronize()
        big.mul_(1.0)  # keep the GPU busy, then write the inputs from a kernel
        xs.copy_(x)
        rs.copy_(r)
        for _ in range(4):
            addrmsnorm.fused_add_rmsnorm_(xs, rs, w, 1e-6, pdl=pdl)
        if not pdl:
            want = (xs.clone(), rs.clone())
    torch.cuda.synchronize()
    assert torch.equal(bits(xs), bits(want[0])) and torch.equal(bits(rs), bits(want[1]))


@gpu_only
def test_pdl_is_compiled_in_on_hopper_and_newer():
    major, minor = torch.cuda.get_device_capability()
    assert pdl_compiled(torch.device("cuda")) == (major >= 9)


def test_pdl_must_be_a_bool():
    x, r, w = make_inputs(2, 16, DTYPE_COMBOS[0], DEVICE)
    with pytest.raises(TypeError, match="pdl must be a bool"):
        addrmsnorm.fused_add_rmsnorm_(x, r, w, pdl=1)
    with pytest.raises(TypeError, match="pdl must be a bool"):
        addrmsnorm.FusedAddRMSNorm(16, pdl="yes")
