"""The sandwich norm (post_weight: Gemma 2/3's and GLM-4's post- and pre-norms around the residual add)
as a field of the one call: h = residual + rmsnorm(x; post_weight), y = rmsnorm(h; weight), one pass.

Held to the float64 reference (sandwich_rmsnorm_ref: p is not rounded before the add), to HF's eager
modules bit for bit under numerics="hf" (GPU), to itself across the in-place and functional forms and
across batch sizes, and to float64 gradients; bad input is refused with nothing written, and both
backends give the same bits and name the same argument."""

import pytest
import torch

import addrmsnorm
from addrmsnorm import reference as R
from addrmsnorm.tolerances import GRAD_TOLERANCES, QUANT_Y_RTOL, RSTD_TOLERANCE, Y_TOLERANCES

from conftest import DEVICE, ON_GPU, gpu_only, needs_kernels
from helpers import argument_named, assert_predicate_is_the_checks, assert_refused, strided_rows

pytestmark = needs_kernels
OPS = torch.ops.addrmsnorm
NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
# Real widths on the GPU: Llama's 4096, Gemma 3 27B's 5376 (the 8192-wide single pass), 20000 (the looped
# path; configs.SANDWICH_TABLE); small ones under the interpreter.
WIDTHS = [64, 4096, 5376, 20000] if ON_GPU else [64, 200]
ROWS = 33 if ON_GPU else 5


def _inputs(n, H, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x, r = (torch.randn(n, H, generator=g).to(dtype).to(DEVICE) for _ in range(2))
    pw, w = ((0.5 * torch.randn(H, generator=g)).to(dtype).to(DEVICE) for _ in range(2))
    return x, r, pw, w


def _close(actual, expected, dtype, what):
    R.assert_close(actual.float(), expected.float(), Y_TOLERANCES[NAMES[dtype]], what)


@pytest.mark.parametrize("H", WIDTHS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=lambda d: NAMES[d])
@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_sandwich_matches_the_reference(H, dtype, offset):
    x, r, pw, w = _inputs(ROWS, H, dtype, seed=H)
    y, h, rstd = addrmsnorm.sandwich_rmsnorm(x, r, pw, w, 1e-6, weight_offset=offset, return_rstd=True)
    ref = R.sandwich_rmsnorm_ref(x, r, pw, w, 1e-6, offset, offset)
    assert y.dtype == x.dtype and h.dtype == r.dtype and rstd.shape == (2, ROWS)
    _close(y, ref.y, dtype, "y")
    _close(h, ref.h, dtype, "residual_out")
    R.assert_close(rstd.double(), ref.rstd, RSTD_TOLERANCE, "rstd of h and of x")
    # The post weight's offset of its own; the weightless pre-norm.
    y2, h2 = addrmsnorm.sandwich_rmsnorm(x, r, pw, None, 1e-6, post_weight_offset=offset)
    ref2 = R.sandwich_rmsnorm_ref(x, r, pw, None, 1e-6, 0.0, offset)
    _close(y2, ref2.y, dtype, "weightless y")
    _close(h2, ref2.h, dtype, "weightless residual_out")


@pytest.mark.parametrize("H", WIDTHS)
def test_in_place_forms_and_rows_alone_give_the_same_bits(H):
    x, r, pw, w = _inputs(ROWS, H, seed=7)
    for numerics in ("contract", "hf"):
        y, h = addrmsnorm.sandwich_rmsnorm(x, r, pw, w, 1e-6, weight_offset=1.0, numerics=numerics)
        xi, ri = x.clone(), r.clone()
        addrmsnorm.sandwich_rmsnorm_(xi, ri, pw, w, 1e-6, weight_offset=1.0, numerics=numerics)
        assert torch.equal(xi, y) and torch.equal(ri, h), numerics
        xo, ro = x.clone(), r.clone()  # the other convention: x <- h
        addrmsnorm.sandwich_rmsnorm(xo, ro, pw, w, 1e-6, weight_offset=1.0, numerics=numerics, out=ro,
                                    residual_out=xo)
        assert torch.equal(ro, y) and torch.equal(xo, h), numerics
        # Batch invariance: a row alone gives its bits among the others.
        y1, h1 = addrmsnorm.sandwich_rmsnorm(x[3:4], r[3:4], pw, w, 1e-6, weight_offset=1.0, numerics=numerics)
        assert torch.equal(y1, y[3:4]) and torch.equal(h1, h[3:4]), numerics


@gpu_only
@pytest.mark.parametrize("H", [4096, 5376])
@pytest.mark.parametrize("offset", [1.0, 0.0], ids=["gemma", "glm"])
def test_hf_numerics_is_hfs_decoder_layer_bit_for_bit(H, offset):
    """Gemma 2/3's `residual + post_norm(x)`, then `pre_norm(h)` (1 + w, one rounding each), and GLM-4's
    LlamaRMSNorm form, in bf16 as HF runs them: bit for bit given the kernel's two rstd, which are within
    2 fp32 ulp of torch's (torch sums the squares in another order); end to end, y equal but where HF's own
    value sits within that distance of a rounding boundary."""
    eps = 1e-6
    x, r, pw, w = _inputs(64, H, seed=11)
    y, h, rstd = addrmsnorm.sandwich_rmsnorm(x, r, pw, w, eps, weight_offset=offset, numerics="hf", return_rstd=True)
    p = R.hf_norm_ref(x, rstd[1], pw, x.dtype, offset)  # HF's post-norm with our rstd of x
    assert torch.equal(h, p + r), "h is not HF's residual + post_norm(x)"
    assert torch.equal(y, R.hf_norm_ref(h, rstd[0], w, x.dtype, offset)), "y is not HF's pre_norm(h)"
    y_hf, h_hf = R.sandwich_hf_ref(x, r, pw, w, eps, offset)
    ulp2 = 2 * torch.finfo(torch.float32).eps
    for got, t in ((rstd[1], x), (rstd[0], h_hf)):
        want = torch.rsqrt(t.float().pow(2).mean(-1) + eps)
        assert ((got - want).abs() <= ulp2 * want).all()
    assert (y != y_hf).float().mean().item() < 1e-3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=lambda d: NAMES[d])
@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "weightless"])
def test_sandwich_gradients_match_float64(dtype, weighted):
    H = 4096 if ON_GPU else 64
    x, r, pw, w = _inputs(ROWS, H, dtype, seed=5)
    w = w if weighted else None
    leaves = [t.clone().requires_grad_() for t in (x, r, pw)] + ([w.clone().requires_grad_()] if weighted else [])
    y, h = addrmsnorm.sandwich_rmsnorm(*leaves[:3], leaves[3] if weighted else None, 1e-6, weight_offset=0.0)
    g = torch.Generator(device="cpu").manual_seed(1)
    dy, dh = (torch.randn(ROWS, H, generator=g).to(dtype).to(DEVICE) for _ in range(2))
    torch.autograd.backward([y, h], [dy, dh])
    want = R.sandwich_grads_ref(x, r, pw, w, 1e-6, 0.0, 0.0, dy, dh)
    tol = GRAD_TOLERANCES[NAMES[dtype]]
    for name, leaf, expected in zip(("x", "residual", "post_weight", "weight"), leaves, want):
        R.assert_grad_close(leaf.grad, expected, tol, f"d{name}")
    # Only y used: residual_out's gradient is absent.
    xs = x.clone().requires_grad_()
    y, _ = addrmsnorm.sandwich_rmsnorm(xs, r, pw, w, 1e-6)
    y.backward(dy)
    R.assert_grad_close(xs.grad, R.sandwich_grads_ref(x, r, pw, w, 1e-6, 0.0, 0.0, dy)[0], tol, "dx, y alone")


def test_sandwich_refuses_bad_input_and_writes_nothing():
    H = 256
    x, r, pw, w = _inputs(4, H)
    out = torch.zeros_like(x)
    xs = torch.zeros(4, H + 4, dtype=x.dtype, device=DEVICE)  # rows of H + 4: a stride that is not 8's multiple
    xa = torch.zeros(4 * H + 1, dtype=x.dtype, device=DEVICE)  # x one element past a 16-byte boundary
    cases = [
        (ValueError, "needs a residual", lambda: OPS.norm(x, None, w, 1e-6, 0.0, False, 0, False, 1.0, pw, 0.0)),
        (ValueError, "x_scale", lambda: OPS.norm(x, r, w, 1e-6, 0.0, False, 0, False, 0.5, pw, 0.0)),
        (TypeError, "post_weight has dtype", lambda: addrmsnorm.sandwich_rmsnorm(x, r, pw.half(), w)),
        (TypeError, "post_weight", lambda: addrmsnorm.sandwich_rmsnorm(x, r, pw.half(), None)),
        (TypeError, "residual", lambda: addrmsnorm.sandwich_rmsnorm(x, r.float(), pw, w)),
        (TypeError, "float16 or bfloat16", lambda: addrmsnorm.sandwich_rmsnorm(x.float(), r.float(), pw.float(),
                                                                              w.float())),
        (TypeError, "post_weight", lambda: addrmsnorm.sandwich_rmsnorm(x, r, pw.float(), w.float())),
        (ValueError, "multiple of 8", lambda: addrmsnorm.sandwich_rmsnorm(x[:, :-1], r[:, :-1], pw[:-1], w[:-1])),
        (ValueError, "multiples of 8", lambda: addrmsnorm.sandwich_rmsnorm(xs[:, :H], r, pw, w)),
        (ValueError, "16-byte", lambda: addrmsnorm.sandwich_rmsnorm(xa[1:].view(4, H), r, pw, w)),
        (ValueError, "post_weight has shape", lambda: addrmsnorm.sandwich_rmsnorm(x, r, pw[:-1], w)),
        (ValueError, "post_weight_offset equal to weight_offset",
         lambda: addrmsnorm.sandwich_rmsnorm(x, r, pw, w, numerics="hf", post_weight_offset=1.0)),
        (ValueError, "post_weight_offset", lambda: OPS.norm(x, r, w, 1e-6, 0.0, False, 0, False, 1.0, None, 1.0)),
        (ValueError, "rstd must be", lambda: OPS.norm_into(x, r, w, out, torch.empty_like(r),
                                                          torch.empty(4, device=DEVICE), 1e-6, 0.0, 0, False, 1.0,
                                                          pw, 0.0)),
        (TypeError, "post_weight must be a torch.Tensor", lambda: addrmsnorm.sandwich_rmsnorm(x, r, "w", w)),
    ]
    for exc, match, call in cases:
        assert_refused((exc, RuntimeError) if ON_GPU else exc, match, call, x, r, out, pw, w, xs, xa)
    # post_weight inside an output: refused, nothing written.
    buf = torch.zeros(4, H, dtype=x.dtype, device=DEVICE)
    assert_refused((ValueError, RuntimeError) if ON_GPU else ValueError, "overlaps post_weight",
                   lambda: addrmsnorm.sandwich_rmsnorm(x, r, buf[3], w, out=buf), x, r, buf, w)


def test_the_ops_take_the_sandwich_under_opcheck_and_compile():
    x, r, pw, w = _inputs(4, 256, seed=2)
    opcheck = torch.library.opcheck
    opcheck(OPS.norm.default, (x, r, w, 1e-6, 1.0, True, 0, False, 1.0, pw, 1.0))
    opcheck(OPS.norm_.default, (x.clone(), r.clone(), w, 1e-6, 0.0, 1, False, 1.0, pw, 0.0))
    if not ON_GPU:
        return  # torch.compile of the interpreter's ops adds nothing the GPU suite does not cover
    f = torch.compile(lambda a, b: addrmsnorm.sandwich_rmsnorm(a, b, pw, w, 1e-6, weight_offset=1.0), fullgraph=True)
    y, h = f(x, r)
    y0, h0 = addrmsnorm.sandwich_rmsnorm(x, r, pw, w, 1e-6, weight_offset=1.0)
    assert torch.equal(y, y0) and torch.equal(h, h0)
    # In a CUDA graph: captured once, replayed on new inputs.
    xs, rs = x.clone(), r.clone()
    addrmsnorm.sandwich_rmsnorm_(xs.clone(), rs.clone(), pw, w, 1e-6)  # compile and load before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        addrmsnorm.sandwich_rmsnorm_(xs, rs, pw, w, 1e-6, weight_offset=1.0)
    xs.copy_(x)
    rs.copy_(r)
    graph.replay()
    assert torch.equal(xs, y0) and torch.equal(rs, h0)


@pytest.mark.parametrize("numerics", [0, 1])
def test_both_backends_give_the_same_bits_and_refusals(numerics):
    """The torch operators (the C++ extension on the GPU) and the Triton JIT backend called directly."""
    from addrmsnorm import jit_backend

    H = 5376 if ON_GPU else 128
    x, r, pw, w = _inputs(ROWS, H, seed=29)
    for weight in (w, None):
        a = OPS.norm(x, r, weight, 1e-6, return_rstd=True, numerics=numerics, post_weight=pw)
        b = jit_backend.norm(x, r, weight, 1e-6, return_rstd=True, numerics=numerics, post_weight=pw)
        assert all(torch.equal(u, v) for u, v in zip(a, b)), numerics
    for call in (lambda f: f(x, None, w, 1e-6, 0.0, False, 0, False, 1.0, pw, 0.0),
                 lambda f: f(x, r, w, 1e-6, 0.0, False, 0, False, 0.5, pw, 0.0),
                 lambda f: f(x, r, w, 1e-6, 1.0, False, 1, False, 1.0, pw, 0.0),
                 lambda f: f(x, r, None, 1e-6, 0.0, False, 0, False, 1.0, pw.half(), 0.0)):
        names = []
        for f in (OPS.norm, jit_backend.norm):
            with pytest.raises((ValueError, TypeError, RuntimeError)) as e:
                call(f)
            names.append(argument_named(str(e.value)))
        assert names[0] == names[1], names


# The sandwich norm's quantized outputs (post_weight in the quantized call): each mode against the float64
# reference's y quantized the reference's way; q may differ only where the kernel's fp32 y and the reference's
# round to two sides of a code's boundary (a fraction of the elements bounded here).
SANDWICH_QUANT_CASES = [("static", torch.float8_e4m3fn, None), ("token", torch.float8_e4m3fn, None),
                        ("group", torch.float8_e4m3fn, 128), ("nvfp4", torch.float4_e2m1fn_x2, 16),
                        ("mxfp8", torch.float8_e4m3fn, 32)]


@pytest.mark.parametrize("mode,qd,gs", SANDWICH_QUANT_CASES, ids=[c[0] for c in SANDWICH_QUANT_CASES])
@pytest.mark.parametrize("H", [4096, 5376] if ON_GPU else [256])
def test_sandwich_quantized_outputs_match_the_reference(mode, qd, gs, H):
    x, r, pw, w = _inputs(ROWS, H, seed=H + 3)
    scale = torch.tensor([0.01], device=DEVICE) if mode in ("static", "nvfp4") else None
    q, h, scales, y = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, 1e-6, quant_dtype=qd, scale=scale, group_size=gs,
                                                         weight_offset=1.0, post_weight=pw, return_y=True)
    y0, h0 = addrmsnorm.sandwich_rmsnorm(x, r, pw, w, 1e-6, weight_offset=1.0)
    assert torch.equal(h, h0) and torch.equal(y, y0), "h and y are not the sandwich norm's"
    y32 = R.sandwich_rmsnorm_ref(x, r, pw, w, 1e-6, 1.0, 1.0).y.float()
    if mode in ("nvfp4", "mxfp8"):
        q_ref, s_ref = R.block_quantize_ref(y32, mode, scale)
    else:
        q_ref, s_ref = R.quantize_ref(y32, qd, scale=scale, group_size=gs)
    differ = (q.view(torch.uint8) != q_ref.view(torch.uint8)).float().mean().item()
    assert differ <= 0.01, f"{differ:.2%} of q's bytes differ from the reference's"
    if mode in ("token", "group"):  # fp32 scales: amax / 448 of y, within y's error
        torch.testing.assert_close(scales, s_ref, rtol=2 * QUANT_Y_RTOL.rtol, atol=0)
    elif mode != "static":  # e4m3 and e8m0 scales: codes, differing only at a boundary
        assert scales.shape == s_ref.shape
        sd = (scales.float() != s_ref.float()).float().mean().item()
        assert sd <= 0.01, f"{sd:.2%} of the scales differ from the reference's"
    # In place, vLLM's convention: residual <- h, out <- q.
    rr, out = r.clone(), torch.empty_like(q)
    addrmsnorm.fused_add_rmsnorm_quant_(x, rr, w, 1e-6, out=out, scale=scale, group_size=gs, weight_offset=1.0,
                                        post_weight=pw, scales_out=None if mode == "static" else torch.empty_like(scales))
    assert torch.equal(rr, h) and torch.equal(out.view(torch.uint8), q.view(torch.uint8))


def test_sandwich_quantized_refusals_name_the_argument():
    x, r, pw, w = _inputs(4, 256)
    s = torch.tensor([0.01], device=DEVICE)
    cases = [
        (ValueError, "post_weight", lambda: addrmsnorm.fused_add_rmsnorm_quant(
            x, r, w, quant_dtype=torch.int8, scale=s, post_weight=pw)),
        (ValueError, "post_weight", lambda: addrmsnorm.fused_add_rmsnorm_quant(
            x, r, w, quant_dtype=torch.float4_e2m1fn_x2, group_size=32, post_weight=pw)),
        (ValueError, "x_scale", lambda: addrmsnorm.fused_add_rmsnorm_quant(
            x, r, w, quant_dtype=torch.float8_e4m3fn, scale=s, post_weight=pw, x_scale=0.5)),
        (ValueError, "needs a residual", lambda: OPS.norm_quant(x, None, w, 1e-6, torch.float8_e4m3fn, s, 0, None,
                                                                False, False, 0.0, False, False, False, 1.0, pw, 0.0)),
        (TypeError, "post_weight", lambda: addrmsnorm.fused_add_rmsnorm_quant(
            x, r, w, quant_dtype=torch.float8_e4m3fn, scale=s, post_weight=pw.half())),
    ]
    for exc, match, call in cases:
        assert_refused((exc, RuntimeError) if ON_GPU else exc, match, call, x, r, pw, w)


def test_the_hf_patch_asks_the_checks_whether_the_sandwich_takes_a_call():
    """hf.py falls back to two launches where the sandwich norm would refuse: its predicate
    (validation.sandwich_takes) says yes exactly where the checks admit the call, over dtypes, widths, starts
    off the 16-byte boundary and row strides (each tensor in a buffer of its own: no overlaps)."""
    import random

    from addrmsnorm import validation

    rng = random.Random(11)

    def tensors(dt, n, H, of):  # x, residual, post_weight, weight
        x, r = strided_rows(rng, dt, n, H, DEVICE), strided_rows(rng, of(dt), n, H, DEVICE)
        return x, r, strided_rows(rng, of(dt), 1, H, DEVICE)[0], strided_rows(rng, of(dt), 1, H, DEVICE)[0]

    assert_predicate_is_the_checks(
        rng, (64, 72, 128), tensors,
        lambda x, r, pw, w: validation.check_forward(x, r, w, eps=1e-6, weight_offset=0.0, numerics=0,
                                                     post_weight=pw, post_weight_offset=0.0),
        validation.sandwich_takes)


def test_the_hf_patch_predicates_trace_under_compile():
    """hf.py asks sandwich_takes and gate_takes inside the models it patches, and a patched model compiles with
    fullgraph=True: the predicates read no pointer while tracing (validation.starts_aligned)."""
    from addrmsnorm import validation

    def f(x, r, pw, w):
        return x + 1 if validation.sandwich_takes(x, r, pw, w) and validation.gate_takes(x, r, w) else x - 1

    x, r, pw, w = _inputs(ROWS, 64)
    want = f(x, r, pw, w)
    assert torch.equal(want, x + 1)  # the kernels take these: the branch under test
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x, r, pw, w)
    assert torch.equal(got, want)
