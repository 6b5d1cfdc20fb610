"""The torch.ops.addrmsnorm operators: opcheck, torch.compile, CUDA graphs, both backends, errors,
the nn.Module and HF numerics."""

import os
import subprocess
import sys

import pytest
import torch

import addrmsnorm
from addrmsnorm import jit_backend, ops
from addrmsnorm.reference import hf_norm_ref, hf_style_ref, truncate_to_bf16

from conftest import DEVICE, ON_GPU, gpu_only, needs_kernels
from helpers import (BACKWARD_FIELDS, DTYPE_COMBOS, FORWARD_FIELDS, argument_named, assert_refused, bits,
                     check_forward, combo_id, make_inputs)

pytestmark = needs_kernels
OPS = torch.ops.addrmsnorm


def _strided(t):
    """t as a row-strided view into a wider buffer (rows do not start one H apart)."""
    buf = torch.empty(*t.shape[:-1], t.shape[-1] + 8, dtype=t.dtype, device=t.device)
    v = buf[..., :t.shape[-1]]
    v.copy_(t)
    return v


# ----- opcheck ----------------------------------------------------------------------------------

@pytest.mark.parametrize("combo", [DTYPE_COMBOS[0], DTYPE_COMBOS[3]], ids=combo_id)
@pytest.mark.parametrize("H", [64, 111])
def test_opcheck(combo, H):
    x, r, w = make_inputs(3, H, combo, DEVICE, seed=H)
    opcheck = torch.library.opcheck
    opcheck(OPS.norm.default, (x, r, w, 1e-6, 0.5, True, False))
    opcheck(OPS.norm.default, (x, r, w, 1e-5))
    opcheck(OPS.norm_.default, (x.clone(), r.clone(), w, 1e-6, 1.0, False))
    out, rout = torch.empty_like(x), torch.empty_like(r)
    rstd = torch.empty(3, device=DEVICE)
    opcheck(OPS.norm_into.default, (x, r, w, out, rout, rstd, 1e-6, 0.0, False))
    opcheck(OPS.norm_into.default, (_strided(x), r, w, out, _strided(rout), None, 1e-6))
    if combo[0] == combo[1]:
        opcheck(OPS.norm.default, (x, r, w, 1e-6, 0.0, False, True))


# ----- the ops agree with the reference, in every form -------------------------------------------

@pytest.mark.parametrize("combo", DTYPE_COMBOS, ids=combo_id)
def test_ops_match_reference(combo):
    N, H = 7, 200
    x, r, w = make_inputs(N, H, combo, DEVICE, seed=11)
    y, ro, rstd = OPS.norm(x, r, w, 1e-6, 0.25, True)
    check_forward(x, r, w, y, ro, rstd, 1e-6, 0.25, "functional op")
    y, ro, rstd = OPS.norm(x, r, w, 1e-6)
    assert rstd.numel() == 0
    xi, ri = x.clone(), r.clone()
    assert OPS.norm_(xi, ri, w, 1e-6) is None
    check_forward(x, r, w, xi, ri, None, 1e-6, 0.0, "in-place op")
    out, rout = _strided(torch.zeros_like(x)), torch.zeros_like(r)
    OPS.norm_into(_strided(x), r, w, out, rout, None, 1e-6)
    check_forward(x, r, w, out, rout, None, 1e-6, 0.0, "into op")


# ----- torch.compile ------------------------------------------------------------------------------

class _Block(torch.nn.Module):
    """A decoder-like stack: per layer an attention stand-in and an MLP stand-in, each ending in the
    fused add + norm whose residual output feeds the next."""

    def __init__(self, H, layers, dtype, in_place):
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.mix = torch.nn.ParameterList(
            [torch.nn.Parameter((torch.randn(H, H, generator=g) / H ** 0.5).to(dtype), requires_grad=False)
             for _ in range(2 * layers)])
        self.norms = torch.nn.ModuleList(
            [addrmsnorm.FusedAddRMSNorm(H, eps=1e-5, dtype=dtype) for _ in range(2 * layers)])
        for i, n in enumerate(self.norms):
            n.weight.requires_grad_(False)
            n.weight.copy_(1.0 + 0.01 * i)
        self.in_place = in_place

    def forward(self, x, residual):
        for m, norm in zip(self.mix, self.norms):
            x = torch.tanh(x @ m)
            if self.in_place:
                addrmsnorm.fused_add_rmsnorm_(x, residual, norm.weight, norm.eps)
            else:
                x, residual = norm(x, residual)
        return x, residual


@pytest.mark.parametrize("in_place", [False, True], ids=["module", "in_place"])
def test_compile_fullgraph_matches_eager(in_place):
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    N, H = 6, 64
    block = _Block(H, 4, torch.bfloat16, in_place).to(DEVICE)
    x, r, _ = make_inputs(N, H, DTYPE_COMBOS[0], DEVICE, seed=1)
    with torch.no_grad():
        y_eager, r_eager = block(x.clone(), r.clone())
        # Inductor on the GPU; on the CPU the kernels run in the interpreter, and aot_eager keeps
        # the test to seconds while still tracing the whole model through the fake impls.
        compiled = torch.compile(block, fullgraph=True, backend="inductor" if ON_GPU else "aot_eager")
        y_c, r_c = compiled(x.clone(), r.clone())
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert torch.equal(bits(y_c), bits(y_eager))
    assert torch.equal(bits(r_c), bits(r_eager))


# ----- CUDA graphs -------------------------------------------------------------------------------

@gpu_only
def test_cuda_graph_capture_and_replay():
    N, H = 16, 4096
    x, r, w = make_inputs(N, H, DTYPE_COMBOS[0], DEVICE, seed=2)
    sx, sr = x.clone(), r.clone()  # static input buffers
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up: load modules and JIT-compile outside the capture
        OPS.norm(sx.clone(), sr.clone(), w, 1e-6)
        OPS.norm_(sx.clone(), sr.clone(), w, 1e-6)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y, ro, _ = OPS.norm(sx, sr, w, 1e-6)
        OPS.norm_(sx, sr, w, 1e-6)  # second layer, in place on the static inputs
    for seed in (3, 4):
        x2, r2, _ = make_inputs(N, H, DTYPE_COMBOS[0], DEVICE, seed=seed)
        sx.copy_(x2)
        sr.copy_(r2)
        g.replay()
        torch.cuda.synchronize()
        y_e, ro_e, _ = OPS.norm(x2, r2, w, 1e-6)
        xi, ri = x2.clone(), r2.clone()
        OPS.norm_(xi, ri, w, 1e-6)
        for a, b in ((y, y_e), (ro, ro_e), (sx, xi), (sr, ri)):
            assert torch.equal(bits(a), bits(b))


# ----- backends ----------------------------------------------------------------------------------

def test_backend_is_reported():
    assert addrmsnorm.backend() in ("cpp", "triton")
    assert addrmsnorm.backend_reason()
    if not ON_GPU:
        assert addrmsnorm.backend() == "triton"
    elif torch.version.cuda and ops.extension_path() and os.environ.get(ops.BACKEND_ENV, "auto") == "auto":
        assert addrmsnorm.backend() == "cpp", addrmsnorm.backend_reason()


@pytest.mark.parametrize("env,want", [("triton", "triton"), ("bogus", "ValueError")])
def test_backend_environment_override(env, want):
    code = "import addrmsnorm; print(addrmsnorm.backend())"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, ops.BACKEND_ENV: env})
    if want == "ValueError":
        assert p.returncode != 0 and "ADDRMSNORM_BACKEND='bogus'" in p.stderr
    else:
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == want


@pytest.mark.skipif(ops.extension_path() is None, reason="the C++ extension is not built")
def test_extension_registers_a_cuda_kernel_for_every_op():
    """The extension links and loads against this torch, even a CPU-only one (as in CI)."""
    code = ("import torch, addrmsnorm\nfrom addrmsnorm import ops\n"
            "torch.ops.load_library(str(ops.extension_path()))\n"
            "for name in ops.SCHEMAS:\n"
            "    assert torch._C._dispatch_has_kernel_for_dispatch_key('addrmsnorm::' + name, 'CUDA'), name\n"
            "print('ok')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, ops.BACKEND_ENV: "triton"})
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


@gpu_only
@pytest.mark.skipif(ops.backend() != "cpp", reason="the C++ extension is not the backend in this process")
@pytest.mark.parametrize("combo", DTYPE_COMBOS, ids=combo_id)
@pytest.mark.parametrize("N,H", [(1, 4096), (33, 3000), (64, 4100), (5, 11111), (3, 65536)])
def test_backends_give_identical_bits(combo, N, H):
    x, r, w = make_inputs(N, H, combo, DEVICE, seed=N + H)
    hfs = (False, True) if combo[0] == combo[1] == combo[2] else (False,)  # HF: one dtype for all three
    for hf in hfs:
        a = OPS.norm(x, r, w, 1e-6, 0.5, True, hf)  # C++ backend
        b = jit_backend.norm(x, r, w, 1e-6, 0.5, True, int(hf))
        for ta, tb in zip(a, b):
            assert torch.equal(bits(ta), bits(tb)), f"hf={hf}"
        xa, ra, xb, rb = _strided(x), r.clone(), _strided(x), r.clone()
        OPS.norm_(xa, ra, w, 1e-6, 0.0, hf)
        jit_backend.norm_(xb, rb, w, 1e-6, 0.0, int(hf))
        assert torch.equal(bits(xa), bits(xb)) and torch.equal(bits(ra), bits(rb))


@gpu_only
def test_op_from_a_fresh_thread():
    """A worker thread (as in a serving framework's pool) with no CUDA context current yet."""
    import threading

    x, r, w = make_inputs(4, 256, DTYPE_COMBOS[0], DEVICE, seed=8)
    got, err = {}, []

    def work():
        try:
            got["y"] = OPS.norm(x, r, w, 1e-6)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - reported below
            err.append(e)
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not err, err
    check_forward(x, r, w, got["y"][0], got["y"][1], None, 1e-6, 0.0, "fresh thread")


# ----- errors through the operators ----------------------------------------------------------------

def test_op_errors_are_python_exceptions():
    x, r, w = make_inputs(4, 64, DTYPE_COMBOS[0], DEVICE)
    with pytest.raises(TypeError, match="x has dtype torch.int32"):
        OPS.norm(x.to(torch.int32), r, w, 1e-6)
    with pytest.raises(TypeError, match=r"residual(_dtype is | has dtype torch\.)float16; it must be x"):
        OPS.norm_(x, r.half(), w, 1e-6)
    with pytest.raises(TypeError, match=r"(numerics='hf'|ADDRMSNORM_NUMERICS_HF) needs residual(_dtype)? (of|equal to) x"):
        OPS.norm(x, r.float(), w, 1e-6, 0.0, False, True)
    with pytest.raises(TypeError, match=r"(numerics='hf'|ADDRMSNORM_NUMERICS_HF) needs weight(_dtype)? (of|equal to) x"):
        OPS.norm(x, r, w.float(), 1e-6, 0.0, False, True)
    with pytest.raises(ValueError, match=r"weight has shape \(65,\), expected \(64,\)"):
        OPS.norm(x, r, torch.ones(65, device=DEVICE, dtype=w.dtype), 1e-6)
    with pytest.raises(ValueError, match="eps must be > 0"):
        OPS.norm(x, r, w, 0.0)
    with pytest.raises(ValueError, match="x and residual overlap in memory"):
        OPS.norm_(x, x, w, 1e-6)
    with pytest.raises(ValueError, match="rstd must be a contiguous float32 tensor of shape"):
        OPS.norm_into(x, r, w, torch.empty_like(x), torch.empty_like(r),
                                   torch.empty(5, device=DEVICE), 1e-6)
    if ON_GPU:
        with pytest.raises(ValueError, match="residual is on cpu but x is on cuda"):
            OPS.norm(x, r.cpu(), w, 1e-6)
        with pytest.raises(ValueError, match="x is on cpu; addrmsnorm runs on CUDA tensors"):
            OPS.norm(x.cpu(), r.cpu(), w.cpu(), 1e-6)


# ----- the module and HF numerics -----------------------------------------------------------------

def test_module_loads_an_hf_state_dict_and_matches_the_function():
    H = 96
    m = addrmsnorm.FusedAddRMSNorm(H, eps=1e-5, device=DEVICE, dtype=torch.bfloat16)
    assert torch.equal(m.weight, torch.ones(H, device=DEVICE, dtype=torch.bfloat16))
    hf_state = {"weight": (1.0 + 0.1 * torch.randn(H)).to(torch.bfloat16)}  # LlamaRMSNorm's state dict
    m.load_state_dict(hf_state)
    x, r, _ = make_inputs(5, H, DTYPE_COMBOS[0], DEVICE, seed=4)
    with torch.no_grad():
        y, ro = m(x, r)
        y2, ro2 = addrmsnorm.fused_add_rmsnorm(x, r, m.weight, 1e-5)
    assert torch.equal(bits(y), bits(y2)) and torch.equal(bits(ro), bits(ro2))
    gemma = addrmsnorm.FusedAddRMSNorm(H, weight_offset=1.0, device=DEVICE)
    assert torch.equal(gemma.weight, torch.zeros(H, device=DEVICE))  # (1 + w) starts at 1
    assert "numerics='contract'" in repr(m)
    with pytest.raises(ValueError, match="numerics must be 'contract' or 'hf'"):
        addrmsnorm.FusedAddRMSNorm(H, numerics="llama")
    with pytest.raises(ValueError, match="hidden_size must be a positive int"):
        addrmsnorm.FusedAddRMSNorm(0)


@pytest.mark.parametrize("weight_offset", [0.0, 1.0])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("H", [128, 4096, 5120] + ([32768] if ON_GPU else [17000]))
def test_hf_numerics(dtype, H, weight_offset):
    """numerics="hf" is HF's RMSNorm on (x + residual) in the model dtype: LlamaRMSNorm's form, or
    with a weight offset Gemma's (``(h * rstd * (1 + w.float())).type_as(h)``).

    On the GPU: residual_out is bit-exact; y is bit-exact against HF's formula given our rstd; and
    against HF's formula end to end, y differs only where the last fp32 bit of rstd decides a
    rounding of y (torch sums the squares in another order than we do, so the fp32 sums can
    differ in their last bit; nothing else differs).
    """
    N = 64 if ON_GPU else 3
    x, r, w = make_inputs(N, H, (dtype, dtype, dtype), DEVICE, seed=H)
    if weight_offset:
        w = (w.float() - 1.0).to(w.dtype)  # a Gemma weight: 1 + w is near 1
    eps = 1e-5
    m = addrmsnorm.FusedAddRMSNorm(H, eps=eps, weight_offset=weight_offset, numerics="hf", device=DEVICE,
                                   dtype=x.dtype)
    with torch.no_grad():
        m.weight.copy_(w)
        y, ro = m(x, r)
    _, _, rstd = OPS.norm(x, r, w, eps, weight_offset, True, True)
    y_hf, h_hf = hf_style_ref(x, r, w, eps, weight_offset)
    if not ON_GPU:
        # The interpreter truncates fp32 -> bf16 conversions instead of rounding them, so HF's
        # formula is evaluated here with the interpreter's conversion, and our rstd.
        def cast(t):
            return truncate_to_bf16(t) if x.dtype == torch.bfloat16 else t.to(x.dtype)
        h = cast(x.float() + r.float())
        assert torch.equal(bits(ro), bits(h))
        n = h.float() * rstd.unsqueeze(-1)
        want = cast(n * (w.float() + weight_offset)) if weight_offset else cast(cast(n).float() * w.float())
        assert torch.equal(bits(y), bits(want))
        rstd_torch = torch.rsqrt(h.float().pow(2).mean(-1) + eps)
        torch.testing.assert_close(rstd, rstd_torch, rtol=4e-7, atol=0)
        return
    assert torch.equal(bits(ro), bits(h_hf)), "residual_out is not HF's x + residual"
    assert torch.equal(bits(y), bits(hf_norm_ref(h_hf, rstd, w, x.dtype, weight_offset))), \
        "after the reduction, y is not HF's formula bit for bit"
    # End to end: rstd within 2 fp32 ulp of torch's, and y equal wherever HF's own h * rstd is not
    # within that distance of a rounding boundary of the output dtype.
    hf32 = h_hf.float()
    rstd_hf = torch.rsqrt(hf32.pow(2).mean(-1) + eps)
    assert ((rstd - rstd_hf).abs() <= 2 * torch.finfo(torch.float32).eps * rstd_hf).all()
    differ = y != y_hf
    if differ.any():
        n_lo = hf_norm_ref(h_hf, rstd_hf * (1 - 3e-7), w, x.dtype, weight_offset)
        n_hi = hf_norm_ref(h_hf, rstd_hf * (1 + 3e-7), w, x.dtype, weight_offset)
        decided_by_last_bit = n_lo != n_hi
        assert not (differ & ~decided_by_last_bit).any(), \
            f"{int((differ & ~decided_by_last_bit).sum())} elements differ from HF away from a rounding tie"
    # And numerics="hf" is not the contract: on 16-bit data its roundings show.
    if dtype != "fp32":
        y_contract, _ = addrmsnorm.fused_add_rmsnorm(x, r, w, eps, weight_offset=weight_offset)
        assert not torch.equal(bits(y_contract), bits(y))


def test_fake_implementations_raise_the_backends_errors():
    """The fake (meta) implementations run validation.py's memory-free rules, so torch.compile and
    meta tensors reject a bad call as the backends do: the same exception, naming the same argument
    (the C++ backend carries the C runtime's words, the fakes validation.py's)."""
    x, r, w = make_inputs(4, 64, DTYPE_COMBOS[0], DEVICE)
    meta = lambda t: torch.empty_like(t, device="meta")  # noqa: E731
    cases = [
        (lambda a, b, c: OPS.norm(a, b.half(), c, 1e-6), TypeError, FORWARD_FIELDS),
        (lambda a, b, c: OPS.norm(a, b[:3], c, 1e-6), ValueError, FORWARD_FIELDS),
        (lambda a, b, c: OPS.norm_(a, b, c[:63], 1e-6), ValueError, FORWARD_FIELDS),
        (lambda a, b, c: OPS.norm_into(a, b, c, a.float(), b, None, 1e-6), TypeError, FORWARD_FIELDS),
        (lambda a, b, c: OPS.norm_into(a, b, c, a, b[:2], None, 1e-6), ValueError, FORWARD_FIELDS),
        (lambda a, b, c: OPS.norm_backward(a, None, b.half(), torch.ones(4, device=a.device), c),
         TypeError, BACKWARD_FIELDS),
    ]
    for i, (call, exc, fields) in enumerate(cases):
        with pytest.raises(exc) as real:
            call(x, r, w)
        with pytest.raises(exc) as fake:
            call(meta(x), meta(r), meta(w))
        assert argument_named(str(fake.value), fields) == argument_named(str(real.value), fields), (
            i, str(fake.value), str(real.value))


def test_into_outputs_take_residual_out_exactly_when_residual_is_given():
    """norm_into and norm_quant_into: residual_out goes with residual (None with None), and the plain norm's
    numerics 2 is refused with a residual; nothing is written."""
    x = torch.randn(4, 64, device=DEVICE)
    r, w = torch.randn(4, 64, device=DEVICE), torch.ones(64, device=DEVICE)
    out, ro = torch.zeros(4, 64, device=DEVICE), torch.zeros(4, 64, device=DEVICE)
    assert_refused(ValueError, "residual_out is given but residual is None: the plain norm writes no residual",
                   lambda: OPS.norm_into(x, None, w, out, ro, None, 1e-6), out, ro)
    assert_refused(ValueError, "residual_out is None but residual is given: the fused norm writes h there",
                   lambda: OPS.norm_into(x, r, w, out, None, None, 1e-6), out)
    assert_refused(ValueError, r"(numerics 2 \(hf_round_once\)|ADDRMSNORM_NUMERICS_HF_ROUND_ONCE) is the plain and QK norms'",
                   lambda: OPS.norm_into(x, r, w, out, ro, None, 1e-6, 0.0, 2), out, ro)
    xb, rb, wb = x.bfloat16(), r.bfloat16(), w.bfloat16()
    q = torch.zeros(4, 64, dtype=torch.int8, device=DEVICE)
    scale = torch.ones(1, device=DEVICE)
    assert_refused(ValueError, "residual_out is given but residual is None",
                   lambda: OPS.norm_quant_into(xb, None, wb, q, rb.clone(), None, None, 1e-6, scale), q)
    assert_refused(ValueError, "residual_out is None but residual is given",
                   lambda: OPS.norm_quant_into(xb, rb, wb, q, None, None, None, 1e-6, scale), q)


def test_a_tail_named_once_is_the_schemas_positions():
    """ops.tail: the arguments a module or a patch names once, in the schema's order with its defaults between,
    cut after the last one that is not a default; an argument the operator does not have is refused."""
    assert ops.tail("norm", "eps", weight_offset=0.0, numerics=0, pdl=False) == ()
    assert ops.tail("norm", "eps", weight_offset=1.0) == (1.0,)
    assert ops.tail("norm", "eps", pdl=True) == (0.0, False, 0, True)
    assert ops.tail("norm_", "eps", numerics=1) == (0.0, 1)
    with pytest.raises(TypeError, match="no argument 'bogus'"):
        ops.tail("norm", "eps", bogus=1)
