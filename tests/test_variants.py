"""The norm variants that are fields of the one call: the weightless norm (weight None: Llama 4's L2
norm of q and k) and the scaled residual add (x_scale: Granite's and MiniCPM's residual_multiplier).

Both are runtime arguments of the same kernels, so their neutral values give the existing bits: a
weightless call is the call with a weight of ones, bit for bit, and x_scale=1 the unscaled add. The
other values are held to the float64 reference, and bad input is refused with nothing written."""

import pytest
import torch

import addrmsnorm
from addrmsnorm import reference as R
from addrmsnorm.tolerances import GRAD_TOLERANCES, Y_TOLERANCES

from conftest import DEVICE, ON_GPU, gpu_only, needs_kernels
from helpers import assert_refused

pytestmark = needs_kernels
OPS = torch.ops.addrmsnorm
NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
# Real widths on the GPU (a row of Llama's 4096; a looped 32768 row); small ones under the interpreter.
WIDTHS = [64, 4096, 32768] if ON_GPU else [64, 200]
ROWS = 33 if ON_GPU else 5


def _inputs(n, H, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x, r, w = (torch.randn(shape, generator=g).to(dtype).to(DEVICE) for shape in ((n, H), (n, H), (H,)))
    return x, r, w


def _close(actual, expected, dtype, what):
    R.assert_close(actual.float(), expected.float(), Y_TOLERANCES[NAMES[dtype]], what)


# ----- the weightless norm -----------------------------------------------------------------------

@pytest.mark.parametrize("H", WIDTHS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=lambda d: NAMES[d])
def test_weightless_is_a_weight_of_ones_bit_for_bit(H, dtype):
    x, r, _ = _inputs(ROWS, H, dtype, seed=H)
    ones = torch.ones(H, dtype=dtype, device=DEVICE)
    for numerics in ("contract", "hf"):
        y0, h0 = addrmsnorm.fused_add_rmsnorm(x, r, None, 1e-6, numerics=numerics)
        y1, h1 = addrmsnorm.fused_add_rmsnorm(x, r, ones, 1e-6, numerics=numerics)
        assert torch.equal(y0, y1) and torch.equal(h0, h1), (H, numerics)
        assert torch.equal(addrmsnorm.rmsnorm(x, None, 1e-6, numerics=numerics),
                           addrmsnorm.rmsnorm(x, ones, 1e-6, numerics=numerics)), (H, numerics)
    y0, h0 = addrmsnorm.fused_add_rmsnorm(x, r, None, 1e-6)
    xi, ri = x.clone(), r.clone()
    addrmsnorm.fused_add_rmsnorm_(xi, ri, None, 1e-6)
    assert torch.equal(xi, y0) and torch.equal(ri, h0)
    ref = R.fused_add_rmsnorm_ref(x, r, None, 1e-6)
    _close(y0, ref.y, dtype, "weightless fused y")
    _close(addrmsnorm.rmsnorm(x, None, 1e-6), R.rmsnorm_ref(x, None, 1e-6).y, dtype, "weightless plain y")


def test_weightless_qk_norm_is_the_l2_norm_of_every_head():
    T, nq, nkv, d = (64, 32, 8, 128) if ON_GPU else (3, 4, 2, 64)
    qkv = torch.randn(T, (nq + 2 * nkv) * d, dtype=torch.bfloat16, device=DEVICE)
    before = qkv.clone()
    addrmsnorm.qk_rmsnorm_(qkv, None, None, 1e-6, num_q_heads=nq, num_kv_heads=nkv, head_dim=d)
    heads = before[:, :(nq + nkv) * d].reshape(T, nq + nkv, d)
    _close(qkv[:, :(nq + nkv) * d].reshape(T, nq + nkv, d), R.rmsnorm_ref(heads, None, 1e-6).y, torch.bfloat16,
           "weightless QK")
    assert torch.equal(qkv[:, (nq + nkv) * d:], before[:, (nq + nkv) * d:]), "v was written"
    ones = torch.ones(d, dtype=torch.bfloat16, device=DEVICE)
    again = before.clone()
    addrmsnorm.qk_rmsnorm_(again, ones, ones, 1e-6, num_q_heads=nq, num_kv_heads=nkv, head_dim=d)
    assert torch.equal(again, qkv)


@pytest.mark.parametrize("quant_dtype,group_size", [(torch.float8_e4m3fn, None), (torch.int8, None),
                                                    (torch.float8_e4m3fn, 128)])
def test_weightless_quantized_outputs_are_a_weight_of_ones(quant_dtype, group_size):
    if ON_GPU and torch.cuda.get_device_capability() < (8, 9) and quant_dtype != torch.int8:
        pytest.skip("float8 needs sm_89")
    H = 4096 if ON_GPU else 256
    x, r, _ = _inputs(ROWS, H, seed=3)
    ones = torch.ones(H, dtype=x.dtype, device=DEVICE)
    for residual in (r, None):
        if residual is None:
            a = addrmsnorm.rmsnorm_quant(x, None, 1e-6, quant_dtype=quant_dtype, group_size=group_size, return_y=True)
            b = addrmsnorm.rmsnorm_quant(x, ones, 1e-6, quant_dtype=quant_dtype, group_size=group_size, return_y=True)
        else:
            a = addrmsnorm.fused_add_rmsnorm_quant(x, r, None, 1e-6, quant_dtype=quant_dtype, group_size=group_size,
                                                   return_y=True)
            b = addrmsnorm.fused_add_rmsnorm_quant(x, r, ones, 1e-6, quant_dtype=quant_dtype, group_size=group_size,
                                                   return_y=True)
        for u, v in zip(a, b):
            assert torch.equal(u.view(torch.uint8) if u.dtype == torch.float8_e4m3fn else u,
                               v.view(torch.uint8) if v.dtype == torch.float8_e4m3fn else v)


@pytest.mark.parametrize("fused", [True, False])
def test_weightless_gradients_match_float64(fused):
    H = 4096 if ON_GPU else 96
    x, r, _ = _inputs(ROWS, H, torch.float32, seed=5)
    x.requires_grad_()
    r.requires_grad_()
    xd, rd = x.detach().double().requires_grad_(), r.detach().double().requires_grad_()
    dy = torch.randn(ROWS, H, device=DEVICE)
    if fused:
        y, h = addrmsnorm.fused_add_rmsnorm(x, r, None, 1e-6)
        (y * dy).sum().add((h * h).sum()).backward()
        hd = xd + rd
        yd = hd * torch.rsqrt((hd * hd).mean(-1, keepdim=True) + 1e-6)
        (yd * dy.double()).sum().add((hd * hd).sum()).backward()
        R.assert_grad_close(r.grad, rd.grad, GRAD_TOLERANCES["fp32"], "dresidual")
    else:
        y = addrmsnorm.rmsnorm(x, None, 1e-6)
        (y * dy).sum().backward()
        yd = xd * torch.rsqrt((xd * xd).mean(-1, keepdim=True) + 1e-6)
        (yd * dy.double()).sum().backward()
    R.assert_grad_close(x.grad, xd.grad, GRAD_TOLERANCES["fp32"], "dx")
    dres, dx, dweight = OPS.norm_backward(dy, None, (x + r).detach() if fused else x.detach(),
                                          torch.ones(ROWS, device=DEVICE), None, 0.0, True)
    assert dweight.numel() == 0  # the weightless norm has no weight gradient, whatever weight_grad says


# ----- the scaled residual add ---------------------------------------------------------------------

@pytest.mark.parametrize("H", WIDTHS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=lambda d: NAMES[d])
def test_x_scale_one_is_the_unscaled_add_and_others_match_the_reference(H, dtype):
    x, r, w = _inputs(ROWS, H, dtype, seed=H + 1)
    y0, h0 = addrmsnorm.fused_add_rmsnorm(x, r, w, 1e-6)
    y1, h1 = addrmsnorm.fused_add_rmsnorm(x, r, w, 1e-6, x_scale=1.0)
    assert torch.equal(y0, y1) and torch.equal(h0, h1)
    alpha = 0.22  # Granite 3's residual_multiplier
    y, h = addrmsnorm.fused_add_rmsnorm(x, r, w, 1e-6, x_scale=alpha)
    ref = R.fused_add_rmsnorm_ref(x, r, w, 1e-6, x_scale=alpha)
    _close(y, ref.y, dtype, "scaled y")
    _close(h, ref.residual_out, dtype, "scaled residual_out")
    if ON_GPU:  # bit for bit where the interpreter rounds its stores as the GPU does not
        assert torch.equal(h, ref.residual_out)
    xi, ri = x.clone(), r.clone()
    addrmsnorm.fused_add_rmsnorm_(xi, ri, w, 1e-6, x_scale=alpha)
    assert torch.equal(xi, y) and torch.equal(ri, h)


@gpu_only
def test_x_scale_hf_numerics_is_granites_module_bit_for_bit():
    # Granite: hidden = residual + hidden * residual_multiplier in bf16, then LlamaRMSNorm.
    x, r, w = _inputs(64, 4096, seed=9)
    alpha = 0.22
    h_hf = r + x * alpha
    y, h = addrmsnorm.fused_add_rmsnorm(x, r, w, 1e-6, numerics="hf", x_scale=alpha)
    assert torch.equal(h, h_hf)
    var = h_hf.float().pow(2).mean(-1, keepdim=True)
    y_hf = w * (h_hf.float() * torch.rsqrt(var + 1e-6)).to(torch.bfloat16)
    assert torch.equal(y, y_hf)


def test_x_scale_quantized_matches_the_reference():
    H = 4096 if ON_GPU else 256
    x, r, w = _inputs(ROWS, H, seed=11)
    q, h, s = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, 1e-6, quant_dtype=torch.int8, x_scale=0.5)
    q1, h1, s1 = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, 1e-6, quant_dtype=torch.int8, x_scale=1.0)
    q0, h0, s0 = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, 1e-6, quant_dtype=torch.int8)
    assert torch.equal(q1, q0) and torch.equal(h1, h0) and torch.equal(s1, s0)
    ref = R.fused_add_rmsnorm_ref(x, r, w, 1e-6, x_scale=0.5)
    _close(h, ref.residual_out, torch.bfloat16, "scaled residual_out")
    s_ref = ref.y.abs().amax(-1).float() / 127
    torch.testing.assert_close(s.float(), s_ref, rtol=2 ** -6, atol=0)


@pytest.mark.parametrize("xdtype,rdtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.float32),
                                           (torch.bfloat16, torch.bfloat16)], ids=["fp32", "bf16/fp32", "bf16"])
@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "weightless"])
def test_variant_gradients_match_float64(xdtype, rdtype, weighted):
    H = 4096 if ON_GPU else 96
    alpha = 0.25
    x, r, w = _inputs(ROWS, H, torch.float32, seed=13)
    x, r = x.to(xdtype).requires_grad_(), r.to(rdtype).requires_grad_()
    w = w.requires_grad_() if weighted else None
    dy = torch.randn(ROWS, H, device=DEVICE).to(xdtype)
    dres_out = torch.randn(ROWS, H, device=DEVICE).to(rdtype)
    y, h = addrmsnorm.fused_add_rmsnorm(x, r, w, 1e-6, x_scale=alpha)
    torch.autograd.backward([y, h], [dy, dres_out])
    gx, gr, gw = R.fused_add_rmsnorm_grads_ref(x, r, w, 1e-6, 0.0, dy, dres_out, x_scale=alpha)
    name = NAMES[torch.bfloat16] if torch.bfloat16 in (xdtype, rdtype) else "fp32"
    tol = GRAD_TOLERANCES[name]
    R.assert_grad_close(x.grad, gx, tol, "dx")
    R.assert_grad_close(r.grad, gr, tol, "dresidual")
    if weighted:
        R.assert_grad_close(w.grad, gw, tol, "dweight")


# ----- refusals: nothing written -------------------------------------------------------------------

def test_variants_refuse_bad_input_and_write_nothing():
    x, r, w = _inputs(4, 64, seed=17)
    cases = [
        (lambda: addrmsnorm.fused_add_rmsnorm_(x, r, None, 1e-6, weight_offset=1.0), ValueError, "weight_offset"),
        (lambda: addrmsnorm.rmsnorm_(x, None, 1e-6, weight_offset=1.0), ValueError, "weight_offset"),
        (lambda: addrmsnorm.fused_add_rmsnorm_(x, r, w, 1e-6, x_scale=float("inf")), ValueError, "x_scale"),
        (lambda: addrmsnorm.fused_add_rmsnorm_(x, r, w, 1e-6, x_scale=1e39), ValueError, "x_scale"),
        (lambda: addrmsnorm.fused_add_rmsnorm_(x, r, w, 1e-6, x_scale=0.0), ValueError, "x_scale"),
        (lambda: OPS.norm_(x, None, w, 1e-6, 0.0, 0, False, 0.5), ValueError, "x_scale"),
    ]
    for call, exc, name in cases:
        assert_refused(exc, name, call, x, r)
    qkv = torch.randn(2, 8 * 64, dtype=torch.bfloat16, device=DEVICE)
    for qw, kw, name in ((None, w, "q_weight"), (w, None, "k_weight")):
        assert_refused(ValueError, name, lambda: addrmsnorm.qk_rmsnorm_(qkv, qw, kw, 1e-6, num_q_heads=4,
                                                                        num_kv_heads=2, head_dim=64), qkv)
    with pytest.raises(TypeError, match="x_scale"):
        addrmsnorm.fused_add_rmsnorm(x, r, w, 1e-6, x_scale="2")


def test_the_ops_take_the_variants_under_opcheck_and_compile():
    x, r, w = _inputs(3, 64, seed=19)
    opcheck = torch.library.opcheck
    opcheck(OPS.norm.default, (x, r, None, 1e-6))
    opcheck(OPS.norm.default, (x, None, None, 1e-6))
    opcheck(OPS.norm.default, (x, r, w, 1e-6, 0.0, False, 0, False, 0.5))
    opcheck(OPS.norm_.default, (x.clone(), r.clone(), None, 1e-6, 0.0, 0, False, 0.5))
    if not ON_GPU:
        return  # torch.compile of the interpreter's ops adds nothing the GPU suite does not cover
    f = torch.compile(lambda a, b: addrmsnorm.fused_add_rmsnorm(a, b, None, 1e-6, x_scale=0.5), fullgraph=True)
    got = f(x, r)
    want = addrmsnorm.fused_add_rmsnorm(x, r, None, 1e-6, x_scale=0.5)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


# ----- both backends ----------------------------------------------------------------------------------

@pytest.mark.parametrize("weighted,x_scale", [(False, 1.0), (True, 0.22), (False, 0.22)],
                         ids=["weightless", "x_scale", "both"])
def test_both_backends_give_the_same_bits_and_refusals(weighted, x_scale):
    """The torch operators (the C++ extension on the GPU) and the Triton JIT backend called directly:
    the same outputs bit for bit, and the same refusal naming the same argument."""
    from addrmsnorm import jit_backend

    H = 4096 if ON_GPU else 128
    x, r, w = _inputs(ROWS, H, seed=23)
    w = w if weighted else None
    for numerics in (0, 1):
        a = OPS.norm(x, r, w, 1e-6, return_rstd=True, numerics=numerics, x_scale=x_scale)
        b = jit_backend.norm(x, r, w, 1e-6, return_rstd=True, numerics=numerics, x_scale=x_scale)
        assert all(torch.equal(u, v) for u, v in zip(a, b)), numerics
    a = OPS.norm(x, None, w, 1e-6)
    b = jit_backend.norm(x, None, w, 1e-6)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    for call in (lambda f: f(x, None, w, 1e-6, 0.0, False, 0, False, 0.5),
                 lambda f: f(x, r, None, 1e-6, 1.0, False, 0, False, x_scale),
                 lambda f: f(x, r, w, 1e-6, 0.0, False, 0, False, 0.0)):
        names = []
        for f in (OPS.norm, jit_backend.norm):
            with pytest.raises((ValueError, RuntimeError)) as e:
                call(f)
            names.append(str(e.value).split()[0])
        assert names[0] == names[1], names
