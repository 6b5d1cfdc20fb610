"""Quantized outputs (addrmsnorm.fused_add_rmsnorm_quant) against the one reference
(reference.fused_add_rmsnorm_ref for y, reference.quantize_ref for q and the scales).

The Triton interpreter converts fp32 to float8 wrongly (triton 3.6: it neither rounds to nearest
even nor saturates; 1.0625 -> 1.125, -500 -> -256). Under it the kernel rounds float8 with fp32
arithmetic first, as it does int8 everywhere (the interpreter does that exactly, and converts the
rounded values exactly), so every case runs on the CPU too.
"""

import pytest
import torch

import addrmsnorm
from addrmsnorm import configs
from addrmsnorm.tolerances import QUANT_BOUNDARY_FRACTION, QUANT_BOUNDARY_FRACTION_LOOPED
from addrmsnorm.reference import (QUANT_QMAX, QUANT_Y_RTOL, fused_add_rmsnorm_ref, quant_cast_ref, quant_y_ref,
                                  quantize_ref)

from conftest import DEVICE, ON_GPU, needs_kernels
from helpers import DTYPES, assert_close, bits, expected_residual_out, make_inputs, y_tolerance

pytestmark = needs_kernels

QDTYPES = {"int8": torch.int8, "e4m3": torch.float8_e4m3fn}


def _qdtype(name):
    return QDTYPES[name]


def y_reference(x, r, w, eps, weight_offset=0.0):
    """The fp32 y the kernel quantizes (reference.quant_y_ref), with h rounded as this backend stores it."""
    h = fused_add_rmsnorm_ref(x, r, w, eps, weight_offset).h
    return quant_y_ref(x, r, w, eps, weight_offset, h_stored=expected_residual_out(h, r.dtype))


def check_q(q, y_ref, quant_dtype, inv):
    """q equals quant(y_ref * inv) except where that value is within 2 * QUANT_Y_RTOL of a rounding
    boundary; returns the number of such differing elements."""
    v = y_ref * inv
    want = quant_cast_ref(v, quant_dtype)
    differ = q.view(torch.uint8) != want.view(torch.uint8)
    if differ.any():
        t = 2 * QUANT_Y_RTOL.rtol
        near = quant_cast_ref(v * (1 - t), quant_dtype).view(torch.uint8) != \
            quant_cast_ref(v * (1 + t), quant_dtype).view(torch.uint8)
        far = differ & ~near
        assert not far.any(), f"{int(far.sum())} elements of q differ away from a rounding boundary"
    return int(differ.sum())


def _inv_of(scales, shape, group_size):
    if group_size is None:
        return (1.0 / scales.float()).unsqueeze(-1)
    return (1.0 / scales.float()).repeat_interleave(group_size, dim=-1)


# 16512 and 32768: the quantized single pass beyond the plain one's 16384; 32896, 65536 and 131072: the
# looped path (which keeps h in L2 between its passes)
H_GRID = [16, 64, 256, 4096] + ([5120, 8192, 16384, 32768, 65536, 131072] if ON_GPU else [16512, 32896])


@pytest.mark.parametrize("qname", list(QDTYPES))
@pytest.mark.parametrize("mode", ["static", "token", "group64", "group128"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("H", H_GRID)
def test_quant_matches_reference(qname, mode, dtype, H):
    quant_dtype = _qdtype(qname)
    gs = {"group64": 64, "group128": 128}.get(mode)
    if gs and H % gs:
        pytest.skip(f"H={H} is not a multiple of group_size={gs}")
    N = 67 if ON_GPU else 3
    x, r, w = make_inputs(N, H, (dtype, dtype, dtype), DEVICE, seed=H)
    eps = 1e-5
    ref, y32 = y_reference(x, r, w, eps)
    scale = torch.tensor([0.02 if quant_dtype == torch.int8 else 0.004], device=DEVICE) if mode == "static" else None
    q, ro, scales, y = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, eps, quant_dtype=quant_dtype, scale=scale,
                                                          group_size=gs, return_y=True)
    assert q.dtype == quant_dtype and q.shape == x.shape
    assert torch.equal(bits(ro), bits(expected_residual_out(ref.h, r.dtype))), "residual_out is not bit-exact"
    assert_close(y, ref.y, y_tolerance(x.dtype), "y")
    q_ref, s_ref = quantize_ref(y32, quant_dtype, scale=scale, group_size=gs)
    if mode == "static":
        assert scales is scale
        inv = torch.reciprocal(scale.float())
    else:
        assert scales.dtype == torch.float32 and scales.shape == s_ref.shape
        torch.testing.assert_close(scales, s_ref, rtol=2 * QUANT_Y_RTOL.rtol, atol=0)
        inv = _inv_of(scales, x.shape, gs)  # q against the kernel's own scales: isolates y's error
    n = check_q(q, y32, quant_dtype, inv)
    if dtype == "bf16":
        looped = H > configs.QUANT_SINGLE_PASS_MAX_H  # every mode loops there (tests/test_configs.py)
        fraction = QUANT_BOUNDARY_FRACTION_LOOPED if looped else QUANT_BOUNDARY_FRACTION
        assert n <= max(1, int(q.numel() * fraction)), f"{n} of {q.numel()} elements of q differ"


def test_dynamic_scales_are_exact_where_amax_is():
    """Integer activations and power-of-two weights make every sum of squares exact in fp32, so the
    kernel's y, amax and scales equal the reference's bit for bit, in every dynamic mode."""
    N, H = 5, 256
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-8, 9, (N, H), generator=g).to(torch.bfloat16).to(DEVICE)
    r = torch.randint(-8, 9, (N, H), generator=g).to(torch.bfloat16).to(DEVICE)
    w = (2.0 ** torch.randint(-2, 3, (H,), generator=g)).to(torch.bfloat16).to(DEVICE)
    h = x.float() + r.float()
    # exact sum; div and sqrt correctly rounded (a tensor divisor: torch multiplies by the reciprocal
    # of a Python scalar on CUDA)
    rstd = torch.reciprocal(torch.sqrt((h * h).sum(-1) / h.new_tensor(float(H)) + 1e-6))
    y32 = h * rstd.unsqueeze(-1) * w.float()
    for gs in (None, 64, 128):
        for ue8m0 in (False, True):
            q, _, s = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.int8, group_size=gs,
                                                         ue8m0_scales=ue8m0)
            q_ref, s_ref = quantize_ref(y32, torch.int8, group_size=gs, ue8m0=ue8m0)
            assert torch.equal(bits(s), bits(s_ref)), (gs, ue8m0)
            assert torch.equal(q, q_ref), (gs, ue8m0)


@pytest.mark.parametrize("keep_h", [False, True])
@pytest.mark.parametrize("group_size", [None, 64, 128])
def test_looped_dynamic_amax_is_exact(keep_h, group_size):
    """The looped path's dynamic amax, on rows of 256 walked in chunks (64 wide per token; per group
    128, whole pairs of 64-wide groups). Per token it is taken in pass 1 as round(max |h_stored * w| *
    rstd) (its y is (h_stored * w) * rstd, and rounding is monotone); per group, from each chunk's y in
    pass 2. Rows whose largest |y| is unique, in the first or the last chunk, tied across chunks or
    within one, a zero row. Integer activations make the sum of squares, rstd and each h * w exact in
    fp32. With power-of-two weights y is exact too; then a weight of 2**100 where h is 0; then random
    bf16 weights, where y = (h * w) * rstd is rounded and rows hold near-ties. Every scale and every q
    must equal the reference's, which takes the amax of that y, computed in fp32 in that order."""
    from addrmsnorm.configs import KernelConfig
    from addrmsnorm.launcher import launch_quant_forward

    N, H = 6, 256
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-8, 9, (N, H), generator=g).float()
    r = torch.randint(-8, 9, (N, H), generator=g).float()
    w = 2.0 ** torch.randint(-2, 3, (H,), generator=g).float()
    w[[3, 200, 10, 11]] = 4.0
    x[0, 3], r[0, 3] = 40.0, 0.0        # unique, first chunk
    x[1, 200], r[1, 200] = 0.0, -40.0   # unique, last chunk
    x[2, 3], x[2, 200] = 40.0, -40.0    # tied across chunks
    r[2, 3] = r[2, 200] = 0.0
    x[3, 10], x[3, 11] = 40.0, 40.0     # tied within a chunk
    r[3, 10] = r[3, 11] = 0.0
    x[4], r[4] = 1.0, -1.0              # zero
    x[5, 100], r[5, 100] = 3.0, 60.0    # unique
    rounded = (1 + 0.3 * torch.randn(H, generator=g)).to(torch.bfloat16).float()
    rounded[[3, 200, 10, 11]] = rounded[[3, 200, 10, 11]].abs().max()
    for weights in ("exact", "huge", "rounded"):
        wk = rounded.clone() if weights == "rounded" else w.clone()
        xk = x.clone()
        if weights == "huge":
            wk[50] = 2.0 ** 100
            xk[:, 50] = -r[:, 50]  # h = 0 there: |y| = 0, and the weight alone must not pick the column
        xb, rb, wb = (t.to(torch.bfloat16).to(DEVICE) for t in (xk, r, wk))
        h = xk + r
        rstd = torch.reciprocal(torch.sqrt((h * h).sum(-1) / h.new_tensor(float(H)) + 1e-6))
        y32 = ((h * wk) * rstd.unsqueeze(-1)).to(DEVICE)
        q_ref, s_ref = quantize_ref(y32, torch.int8, group_size=group_size)
        q = torch.empty(N, H, dtype=torch.int8, device=DEVICE)
        ro = torch.empty_like(rb)
        s = torch.full(s_ref.shape, float("nan"), device=DEVICE)
        launch_quant_forward(xb, rb, wb, q, ro, None, None, s, None, n_rows=N, H=H, stride_x=H, stride_residual=H,
                             stride_q=H, stride_residual_out=H, stride_y=H, stride_s_row=s.stride(0),
                             stride_s_group=s.stride(-1) if group_size else 0, group_size=group_size or 0,
                             ue8m0=False, eps=1e-6, weight_offset=0.0,
                             config=KernelConfig(128 if group_size else 64, 1, 4, True, keep_h=keep_h))
        assert torch.equal(bits(s), bits(s_ref)), (weights, s, s_ref)
        assert torch.equal(q, q_ref), weights


def test_ue8m0_scales_are_the_next_power_of_two():
    x, r, w = make_inputs(4, 512, ("bf16", "bf16", "bf16"), DEVICE, seed=3)
    _, _, s = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.int8, group_size=128)
    _, _, s2 = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.int8, group_size=128, ue8m0_scales=True)
    m, _ = torch.frexp(s2)
    assert (m == 0.5).all(), "UE8M0 scales must be powers of two"
    assert (s2 >= s).all() and (s2 < 2 * s).all()


def test_scale_ub_clamps_amax():
    x, r, w = make_inputs(4, 256, ("bf16", "bf16", "bf16"), DEVICE, seed=4)
    ub = torch.tensor([0.5], device=DEVICE)
    _, _, s = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.int8, scale_ub=ub)
    assert torch.equal(s, torch.full_like(s, 0.5 / 127.0))  # every row's amax is above 0.5


def test_column_major_tma_aligned_scales():
    """column_major_scales: the same values as row-major, in [N, G] with stride (1, N rounded up to 4)."""
    N, H = 5, 512
    x, r, w = make_inputs(N, H, ("bf16", "bf16", "bf16"), DEVICE, seed=5)
    q, _, s = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.int8, group_size=128)
    q2, _, s2 = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.int8, group_size=128,
                                                   column_major_scales=True)
    assert s2.shape == (N, H // 128) and s2.stride() == (1, 8)
    assert torch.equal(s2, s) and torch.equal(q2, q)
    # Given as scales_out, any non-overlapping layout is written as it is laid out.
    out = torch.empty(H // 128, 16, device=DEVICE).t()[:N]
    addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.int8, group_size=128, scales_out=out)
    assert torch.equal(out, s)


def test_in_place_vllm_convention_and_strided_rows():
    """fused_add_rmsnorm_quant_: residual <- h, out <- q, x untouched; rows of a wider buffer."""
    N, H = 6, 256
    buf = torch.randn(N, H + 32, dtype=torch.bfloat16, device=DEVICE)
    x = buf[:, :H]
    x0 = x.clone()
    _, r, w = make_inputs(N, H, ("bf16", "bf16", "bf16"), DEVICE, seed=6)
    q_want, h_want, s_want = addrmsnorm.fused_add_rmsnorm_quant(x.contiguous(), r, w, quant_dtype=torch.int8)
    out = torch.empty(N, H, dtype=torch.int8, device=DEVICE)
    o, res, s = addrmsnorm.fused_add_rmsnorm_quant_(x, r, w, out=out)
    assert o is out and res is r
    assert torch.equal(out, q_want) and torch.equal(r, h_want) and torch.equal(s, s_want)
    assert torch.equal(x, x0)


def _fresh():
    x, r, w = make_inputs(4, 256, ("bf16", "bf16", "bf16"), DEVICE, seed=7)
    return x, r, w


@pytest.mark.parametrize("case, exc, words", [
    (lambda x, r, w: dict(quant_dtype=torch.float16), TypeError, "quant_dtype must be"),
    (lambda x, r, w: dict(quant_dtype=torch.float8_e5m2), TypeError, "quant_dtype must be torch.float8_e4m3fn, torch.int8 or"),
    (lambda x, r, w: dict(quant_dtype=torch.int8, scale=torch.tensor([1.0], dtype=torch.float64, device=x.device)),
     TypeError, "scale must be a 1-element float32 tensor"),
    (lambda x, r, w: dict(quant_dtype=torch.int8, scale=torch.ones(2, device=x.device)), TypeError,
     "scale must be a 1-element float32 tensor"),
    (lambda x, r, w: dict(quant_dtype=torch.int8, scale=0.5), TypeError, "scale must be a torch.Tensor"),
    (lambda x, r, w: dict(quant_dtype=torch.int8, group_size=32), ValueError, "group_size must be 64 or 128"),
    (lambda x, r, w: dict(quant_dtype=torch.int8, group_size=True), TypeError, "group_size must be an int"),
    (lambda x, r, w: dict(quant_dtype=torch.int8, group_size=64, scale=torch.ones(1, device=x.device)),
     ValueError, r"group_size (\(per group\) and scale \(static\) exclude each other|must be 0 outside)"),
    (lambda x, r, w: dict(quant_dtype=torch.int8, column_major_scales=True), ValueError, "pass group_size"),
    (lambda x, r, w: dict(quant_dtype=torch.int8, scale=torch.ones(1, device=x.device), ue8m0_scales=True),
     ValueError, "ue8m0_scales rounds dynamic scales"),
    (lambda x, r, w: dict(quant_dtype=torch.int8, out=torch.empty(4, 256, dtype=torch.int16, device=x.device)),
     TypeError, "out has dtype"),
    (lambda x, r, w: dict(quant_dtype=torch.int8, out=torch.empty(4, 128, dtype=torch.int8, device=x.device)),
     ValueError, "out has shape"),
    (lambda x, r, w: dict(quant_dtype=torch.int8, scales_out=torch.empty(5, device=x.device)), ValueError,
     r"scales_out (must be float32 of shape|has shape)"),
    (lambda x, r, w: dict(quant_dtype=torch.int8, group_size=128, scales_out=torch.empty(4, 2, device=x.device)[:, :1].expand(4, 2)),
     ValueError, "share an address"),
    (lambda x, r, w: dict(quant_dtype=torch.int8, out=x.view(torch.int8)[:, :256]), ValueError, "out overlaps x"),
])
def test_bad_calls_are_refused_by_name_and_change_nothing(case, exc, words):
    x, r, w = _fresh()
    kw = case(x, r, w)
    before = [t.clone() for t in (x, r)]
    outs = {k: t.clone() for k, t in kw.items() if isinstance(t, torch.Tensor) and k in ("out", "scales_out")}
    with pytest.raises(exc, match=words):
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, **kw)
    assert torch.equal(x, before[0]) and torch.equal(r, before[1])
    for k, t in outs.items():
        assert torch.equal(bits(kw[k]), bits(t)), f"{k} was written"


@pytest.mark.parametrize("api", ["functional", "vllm"])
@pytest.mark.parametrize("kw, words", [
    (dict(column_major_scales=1), "column_major_scales must be a bool, got int"),
    (dict(ue8m0_scales=None), "ue8m0_scales must be a bool, got NoneType"),
    (dict(pdl=1), "pdl must be a bool, got int"),
    (dict(scale_ub=0.5), "scale_ub must be a torch.Tensor"),
    (dict(scale=1), "scale must be a torch.Tensor"),
    (dict(scales_out=[0.0] * 4), "scales_out must be a torch.Tensor, got list"),
    (dict(eps=True), "eps must be a real number, got bool"),
])
def test_python_types_are_refused_by_name_in_both_apis(api, kw, words):
    """The Python API's type checks (one expression for the common call, then a named error), in the
    functional form with caller-given outputs and in vLLM's in-place form: each names its argument and
    writes nothing."""
    x, r, w = _fresh()
    before = [t.clone() for t in (x, r)]
    out = torch.zeros(4, 256, dtype=torch.int8, device=DEVICE)
    kw = dict(kw)  # the parametrized dict is shared by both APIs' runs
    eps = kw.pop("eps", 1e-6)
    with pytest.raises(TypeError, match=words):
        if api == "functional":
            addrmsnorm.fused_add_rmsnorm_quant(x, r, w, eps, quant_dtype=torch.int8, out=out, **kw)
        else:
            addrmsnorm.fused_add_rmsnorm_quant_(x, r, w, eps, out=out, **kw)
    assert torch.equal(x, before[0]) and torch.equal(r, before[1])
    assert not out.any()


def test_return_y_must_be_a_bool():
    x, r, w = _fresh()
    with pytest.raises(TypeError, match="return_y must be a bool, got str"):
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.int8, return_y="yes")


def test_shape_rules():
    x, r, w = make_inputs(4, 200, ("bf16", "bf16", "bf16"), DEVICE, seed=8)
    with pytest.raises(ValueError, match="H=200 is not a multiple of 16"):
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.int8)
    x, r, w = make_inputs(4, 192, ("bf16", "bf16", "bf16"), DEVICE, seed=8)
    with pytest.raises(ValueError, match="H=192 is not a multiple of group_size=128"):
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.int8, group_size=128)
    x, r, w = make_inputs(4, 256, ("fp32", "fp32", "fp32"), DEVICE, seed=8)
    with pytest.raises(TypeError, match="quantized outputs take x of float16 or bfloat16"):
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.int8)
    buf = torch.randn(4, 264, dtype=torch.bfloat16, device=DEVICE)
    _, r, w = make_inputs(4, 256, ("bf16", "bf16", "bf16"), DEVICE, seed=8)
    with pytest.raises(ValueError, match="x must start on a 16-byte boundary"):
        addrmsnorm.fused_add_rmsnorm_quant(buf[:, 8:], r, w, quant_dtype=torch.int8)


def test_no_autograd():
    x, r, w = _fresh()
    x.requires_grad_()
    with pytest.raises(RuntimeError, match="addrmsnorm::norm_quant has no backward, but x requires grad"):
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.int8)
    with torch.no_grad():
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.int8)


def test_operators_opcheck_and_compile():
    x, r, w = _fresh()
    ops = torch.ops.addrmsnorm
    for args in [(torch.int8, None, 0), (torch.int8, torch.tensor([0.02], device=DEVICE), 0), (torch.int8, None, 128)]:
        torch.library.opcheck(ops.norm_quant.default, (x, r, w, 1e-6, *args))
    out, ro = torch.empty(4, 256, dtype=torch.int8, device=DEVICE), torch.empty_like(r)
    torch.library.opcheck(ops.norm_quant_into.default,
                          (x, r, w, out, ro, torch.empty(4, 2, device=DEVICE), None, 1e-6, None, 128))

    def f(x, r, w):
        return addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.int8, group_size=64, return_y=True)
    want = f(x, r, w)
    got = torch.compile(f, fullgraph=True, backend="inductor" if ON_GPU else "aot_eager")(x, r, w)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_the_operator_allocates_only_what_the_call_asks_for():
    """The allocating operator returns None for the scales of a static call and for y without
    return_y (no zero-size placeholders: each costs an allocation per eager call)."""
    x, r, w = _fresh()
    op = torch.ops.addrmsnorm.norm_quant.default
    scale = torch.tensor([0.02], device=DEVICE)
    q, h, s, y = op(x, r, w, 1e-6, torch.int8, scale)
    assert s is None and y is None and q.shape == x.shape and h.shape == x.shape
    q, h, s, y = op(x, r, w, 1e-6, torch.int8)
    assert s.shape == x.shape[:-1] and y is None
    q, h, s, y = op(x, r, w, 1e-6, torch.int8, None, 128, return_y=True)
    assert s.shape == (*x.shape[:-1], x.shape[-1] // 128) and y.shape == x.shape and y.dtype == x.dtype


def test_qmax_table():
    assert QUANT_QMAX[torch.float8_e4m3fn] == torch.finfo(torch.float8_e4m3fn).max
    assert DTYPES["bf16"] == torch.bfloat16


# ----- the C ABI and the two backends (GPU) ----------------------------------------------------------

MODES = [dict(scale=0.02), dict(), dict(group_size=64), dict(group_size=128, ue8m0_scales=True),
         dict(scale_ub=0.5)]


def _quant_kwargs(m, device):
    kw = dict(m)
    for k in ("scale", "scale_ub"):
        if k in kw:
            kw[k] = torch.tensor([kw[k]], device=device)
    return kw


@pytest.mark.skipif(not ON_GPU, reason="the C ABI and the cpp backend launch compiled cubins")
@pytest.mark.parametrize("qname", ["int8", "e4m3"])
@pytest.mark.parametrize("mode", range(len(MODES)))
@pytest.mark.parametrize("H", [128, 4096, 5120, 32768, 32896])
def test_c_abi_and_both_backends_give_the_same_bits(qname, mode, H):
    """The C ABI through ctypes, the operator (on whichever backend serves CUDA) and the Triton JIT
    backend called directly: the same q, residual_out, scales and y, bit for bit."""
    from addrmsnorm import c_library, jit_backend
    lib_path = c_library.library_path()
    if lib_path is None:
        pytest.skip("no C++ library")
    quant_dtype = QDTYPES[qname]
    N = 33
    x, r, w = make_inputs(N, H, ("bf16", "bf16", "bf16"), DEVICE, seed=H + mode)
    kw = _quant_kwargs(MODES[mode], DEVICE)
    gs = kw.get("group_size", 0)
    ue8m0 = kw.get("ue8m0_scales", False)
    want = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=quant_dtype, return_y=True, **kw)
    jit = jit_backend.norm_quant(x, r, w, 1e-6, quant_dtype, kw.get("scale"), gs, kw.get("scale_ub"),
                                 ue8m0_scales=ue8m0, return_y=True)
    lib = c_library.load(lib_path)
    q = torch.empty(N, H, dtype=quant_dtype, device=DEVICE)
    ro, y = torch.empty_like(r), torch.empty_like(x)
    scales = None if "scale" in kw else torch.empty(want[2].shape, device=DEVICE)
    c_library.forward_quant(lib, x, r, w, q, ro, y, scale=kw.get("scale"), group_size=gs,
                            scale_ub=kw.get("scale_ub"), scales=scales, ue8m0=ue8m0)
    torch.cuda.synchronize()
    for name, a, b, c in (("q", want[0], jit[0], q), ("residual_out", want[1], jit[1], ro), ("y", want[3], jit[3], y)):
        assert torch.equal(bits(a), bits(c)), f"{name}: the C ABI differs from the operator"
        assert torch.equal(bits(a), bits(b)), f"{name}: the JIT backend differs from the operator"
    if scales is not None:
        assert torch.equal(bits(want[2]), bits(scales)) and torch.equal(bits(want[2]), bits(jit[2]))


@pytest.mark.skipif(not ON_GPU, reason="CUDA graphs")
@pytest.mark.parametrize("mode", range(len(MODES)))
def test_cuda_graph_capture_and_replay(mode):
    """Captured in a CUDA graph (the static scale is read from memory at replay: changing it between
    replays changes q), the operators give the eager results."""
    N, H = 8, 4096
    x, r, w = make_inputs(N, H, ("bf16", "bf16", "bf16"), DEVICE, seed=9)
    kw = _quant_kwargs(MODES[mode], DEVICE)
    want = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.float8_e4m3fn, **kw)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.float8_e4m3fn, **kw)  # warm-up
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        got = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.float8_e4m3fn, **kw)
    g.replay()
    torch.cuda.synchronize()
    for a, b in zip(got, want):
        assert torch.equal(bits(a), bits(b))
    if "scale" in kw:
        kw["scale"].mul_(2)
        g.replay()
        again = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.float8_e4m3fn, **kw)
        torch.cuda.synchronize()
        assert torch.equal(bits(got[0]), bits(again[0])) and not torch.equal(bits(got[0]), bits(want[0]))
