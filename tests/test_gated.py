"""The gated norm (z given: Qwen3-Next's, Mamba2's, Nemotron-H's and Falcon-H1's rmsnorm with a silu gate,
over groups of a row) as a field of the one call: rmsnorm(x) * w * silu(z), or rmsnorm(x * silu(z)) * w.

Held to the float64 reference (gated_rmsnorm_ref), to HF's eager modules bit for bit under numerics="hf"
(GPU), to itself across the in-place and functional forms and across batch sizes; bad input is refused
with nothing written, and both backends give the same bits and name the same argument."""

import pytest
import torch

import addrmsnorm
from addrmsnorm import reference as R
from addrmsnorm.tolerances import GRAD_TOLERANCES, QUANT_Y_RTOL, Y_TOLERANCES

from conftest import DEVICE, ON_GPU, needs_kernels, gpu_only
from helpers import argument_named, assert_predicate_is_the_checks, assert_refused, strided_rows

pytestmark = needs_kernels
OPS = torch.ops.addrmsnorm
NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
# (H, group_size): fla-core's benchmark widths (4096 in groups of 4096 and 1024), Qwen3-Next's value heads
# (32 heads of 128 in a row), Mamba2's one group of 8192 (GATED_TABLE's widest); small ones under the interpreter.
SHAPES = [(4096, None), (4096, 1024), (4096, 128), (8192, None), (2048, 256)] if ON_GPU else \
    [(128, None), (256, 64), (64, 8)]
ROWS = 33 if ON_GPU else 5


def _inputs(n, H, dtype=torch.bfloat16, seed=0, z_stride=None):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(n, H, generator=g).to(dtype).to(DEVICE)
    zbuf = (2 * torch.randn(n, z_stride or H, generator=g)).to(dtype).to(DEVICE)
    w = (1.0 + 0.5 * torch.randn(H, generator=g)).to(dtype).to(DEVICE)
    return x, zbuf[:, :H], w


def _close(actual, expected, dtype, what):
    R.assert_close(actual.float(), expected.float(), Y_TOLERANCES[NAMES[dtype]], what)


@pytest.mark.parametrize("H,group", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=lambda d: NAMES[d])
@pytest.mark.parametrize("before", [True, False], ids=["norm_first", "gate_first"])
def test_gated_matches_the_reference(H, group, dtype, before):
    # z a column slice of a wider buffer (Qwen3-Next's z), rows of a stride of their own.
    x, z, w = _inputs(ROWS, H, dtype, seed=H, z_stride=H + 64)
    y = addrmsnorm.gated_rmsnorm(x, z, w, 1e-6, group_size=group, norm_before_gate=before)
    assert y.dtype == x.dtype and y.shape == x.shape
    _close(y, R.gated_rmsnorm_ref(x, z, w, 1e-6, group, before), dtype, "y")
    # The weightless gated norm, and an offset weight.
    y0 = addrmsnorm.gated_rmsnorm(x, z, None, 1e-6, group_size=group, norm_before_gate=before)
    _close(y0, R.gated_rmsnorm_ref(x, z, None, 1e-6, group, before), dtype, "weightless y")
    y1 = addrmsnorm.gated_rmsnorm(x, z, w, 1e-6, group_size=group, norm_before_gate=before, weight_offset=1.0)
    _close(y1, R.gated_rmsnorm_ref(x, z, w, 1e-6, group, before, 1.0), dtype, "offset y")


@pytest.mark.parametrize("H,group", SHAPES)
def test_in_place_forms_leading_dims_and_rows_alone_give_the_same_bits(H, group):
    x, z, w = _inputs(ROWS, H, seed=7)
    for numerics in ("contract", "hf"):
        for before in (True, False):
            kw = dict(group_size=group, norm_before_gate=before, numerics=numerics)
            y = addrmsnorm.gated_rmsnorm(x, z, w, 1e-6, **kw)
            xi = x.clone()
            assert addrmsnorm.gated_rmsnorm(xi, z, w, 1e-6, out=xi, **kw) is xi
            assert torch.equal(xi, y), numerics
            xj = x.clone()  # norm_ in place: x <- y
            OPS.norm_(xj, None, w, 1e-6, 0.0, 1 if numerics == "hf" else 0, False, 1.0, None, 0.0, z,
                      group or 0, before)
            assert torch.equal(xj, y), numerics
            # (batch, seq, H) views; a row alone gives its bits among the others (batch invariance).
            y3 = addrmsnorm.gated_rmsnorm(x[:4].reshape(2, 2, H), z[:4].reshape(2, 2, H), w, 1e-6, **kw)
            assert torch.equal(y3.reshape(4, H), y[:4])
            y1 = addrmsnorm.gated_rmsnorm(x[3:4], z[3:4], w, 1e-6, **kw)
            assert torch.equal(y1, y[3:4]), numerics


def test_empty_and_single_rows():
    x, z, w = _inputs(1, 64)
    y = addrmsnorm.gated_rmsnorm(x[:0], z[:0], w, 1e-6)
    assert y.shape == (0, 64)
    _close(addrmsnorm.gated_rmsnorm(x, z, w, 1e-6, group_size=8), R.gated_rmsnorm_ref(x, z, w, 1e-6, 8),
           x.dtype, "one row, eight groups")


@gpu_only
@pytest.mark.parametrize("H,group", [(4096, 128), (4096, None), (8192, None)])
@pytest.mark.parametrize("before", [True, False], ids=["qwen3_next", "mamba2"])
def test_hf_numerics_is_hfs_module_bit_for_bit(H, group, before):
    """Qwen3NextRMSNormGated (norm, then gate) and MambaRMSNormGated (gate, then norm), bf16 as HF runs
    them, against the HF forms of reference.gated_hf_ref: equal but where HF's own value sits within the
    fp32 distance of the two rstd (torch sums the squares in another order) of a rounding boundary."""
    x, z, w = _inputs(256, H, seed=11)
    y = addrmsnorm.gated_rmsnorm(x, z, w, 1e-6, group_size=group, norm_before_gate=before, numerics="hf")
    y_hf = R.gated_hf_ref(x, z, w, 1e-6, group, before)
    assert (y != y_hf).float().mean().item() < 1e-3


def test_gated_refuses_bad_input_and_writes_nothing():
    H = 256
    x, z, w = _inputs(4, H)
    r = torch.randn_like(x)
    out = torch.zeros_like(x)
    xs = torch.zeros(4, H + 4, dtype=x.dtype, device=DEVICE)  # rows of H + 4: a stride that is not 8's multiple
    xa = torch.zeros(4 * H + 1, dtype=x.dtype, device=DEVICE)  # x one element past a 16-byte boundary
    big = torch.zeros(1, 16384, dtype=x.dtype, device=DEVICE)
    cases = [
        (ValueError, "no residual", lambda: OPS.norm(x, r, w, 1e-6, 0.0, False, 0, False, 1.0, None, 0.0, z, 0,
                                                     True)),
        (TypeError, "z has dtype", lambda: addrmsnorm.gated_rmsnorm(x, z.half(), w)),
        (ValueError, "z has shape", lambda: addrmsnorm.gated_rmsnorm(x, z[:, :128], w)),
        (TypeError, "weight has dtype", lambda: addrmsnorm.gated_rmsnorm(x, z, w.float())),
        (ValueError, "must divide", lambda: addrmsnorm.gated_rmsnorm(x, z, w, group_size=96)),
        (ValueError, "multiple of 8", lambda: addrmsnorm.gated_rmsnorm(x, z, w, group_size=4)),
        (ValueError, "at most 8192", lambda: addrmsnorm.gated_rmsnorm(big, big, None)),
        (ValueError, "writes no rstd", lambda: OPS.norm(x, None, w, 1e-6, 0.0, True, 0, False, 1.0, None, 0.0, z, 0,
                                                        True)),
        (ValueError, "hf_round_once", lambda: addrmsnorm.gated_rmsnorm(x, z, w, numerics="hf_round_once")),
        (ValueError, "weight_offset 0", lambda: addrmsnorm.gated_rmsnorm(x, z, w, numerics="hf", weight_offset=1.0)),
        (ValueError, "multiples of 8", lambda: addrmsnorm.gated_rmsnorm(xs[:, :H], z, w)),
        (ValueError, "16-byte", lambda: addrmsnorm.gated_rmsnorm(xa[1:].view(4, H), z, w)),
        (ValueError, "group_size", lambda: OPS.norm(x, None, w, 1e-6, 0.0, False, 0, False, 1.0, None, 0.0, None,
                                                    64, True)),
        (ValueError, "norm_before_gate", lambda: OPS.norm(x, None, w, 1e-6, 0.0, False, 0, False, 1.0, None, 0.0,
                                                          None, 0, False)),
        (ValueError, "activation", lambda: addrmsnorm.gated_rmsnorm(x, z, w, activation="gelu")),
        (TypeError, "z must be a torch.Tensor", lambda: addrmsnorm.gated_rmsnorm(x, "z", w)),
        (ValueError, r"group_size must be None \(the whole row\)", lambda: addrmsnorm.gated_rmsnorm(x, z, w,
                                                                                                 group_size=0)),
        (ValueError, r"group_size must be None \(the whole row\)", lambda: addrmsnorm.gated_rmsnorm_quant(
            x, z, w, quant_dtype=torch.float8_e4m3fn, group_size=0)),
    ]
    for exc, match, call in cases:
        assert_refused((exc, RuntimeError) if ON_GPU else exc, match, call, x, z, r, out, w, xs, xa, big)
    # out overlapping z: refused, nothing written.
    assert_refused((ValueError, RuntimeError) if ON_GPU else ValueError, "overlaps z",
                   lambda: addrmsnorm.gated_rmsnorm(x, z, w, out=z), x, z, w)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=lambda d: NAMES[d])
@pytest.mark.parametrize("before", [True, False], ids=["norm_first", "gate_first"])
@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "weightless"])
def test_gated_gradients_match_float64(dtype, before, weighted):
    """dx, dz and dweight against autograd of the float64 reference, in groups (and a weight offset)."""
    H, group = (4096, 128) if ON_GPU else (64, 16)
    x, z, w = _inputs(ROWS, H, dtype, seed=5)
    w = w if weighted else None
    leaves = [t.clone().requires_grad_() for t in (x, z)] + ([w.clone().requires_grad_()] if weighted else [])
    offset = 0.5 if weighted else 0.0
    y = addrmsnorm.gated_rmsnorm(leaves[0], leaves[1], leaves[2] if weighted else None, 1e-6, group_size=group,
                                 norm_before_gate=before, weight_offset=offset)
    dy = torch.randn(ROWS, H, generator=torch.Generator().manual_seed(1)).to(dtype).to(DEVICE)
    y.backward(dy)
    refs = [t.detach().double().requires_grad_() for t in (x, z)] + ([w.detach().double().requires_grad_()]
                                                                      if weighted else [])
    R.gated_rmsnorm_ref(refs[0], refs[1], refs[2] if weighted else None, 1e-6, group, before, offset).backward(
        dy.double())
    tol = GRAD_TOLERANCES[NAMES[dtype]]
    for name, leaf, ref in zip(("x", "z", "weight"), leaves, refs):
        R.assert_grad_close(leaf.grad, ref.grad, tol, f"d{name}")


def test_gated_second_order_gradient_is_not_silently_zero():
    """The backward is torch operations: a gradient of a gradient is taken, and agrees with float64."""
    x, z, w = _inputs(4, 64, torch.float32, seed=3)
    xs = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(addrmsnorm.gated_rmsnorm(xs, z, w, 1e-6).pow(2).sum(), xs, create_graph=True)
    g.sum().backward()
    xr = x.double().requires_grad_()
    (gr,) = torch.autograd.grad(R.gated_rmsnorm_ref(xr, z, w, 1e-6).pow(2).sum(), xr, create_graph=True)
    gr.sum().backward()
    assert xs.grad.abs().max() > 0
    R.assert_grad_close(xs.grad, xr.grad, GRAD_TOLERANCES["fp32"], "d2x")


def test_the_ops_take_the_gate_under_opcheck_and_compile():
    x, z, w = _inputs(4, 256, seed=2)
    opcheck = torch.library.opcheck
    opcheck(OPS.norm.default, (x, None, w, 1e-6, 0.0, False, 0, False, 1.0, None, 0.0, z, 64, False))
    opcheck(OPS.norm_.default, (x.clone(), None, w, 1e-6, 0.0, 1, False, 1.0, None, 0.0, z, 0, True))
    if not ON_GPU:
        return  # torch.compile of the interpreter's ops adds nothing the GPU suite does not cover
    f = torch.compile(lambda a, b: addrmsnorm.gated_rmsnorm(a, b, w, 1e-6, group_size=128), fullgraph=True)
    y0 = addrmsnorm.gated_rmsnorm(x, z, w, 1e-6, group_size=128)
    assert torch.equal(f(x, z), y0)
    xs, out = x.clone(), torch.empty_like(x)
    addrmsnorm.gated_rmsnorm(xs, z, w, 1e-6, group_size=128, out=out)  # compile and load before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        addrmsnorm.gated_rmsnorm(xs, z, w, 1e-6, group_size=128, out=out)
    out.zero_()
    graph.replay()
    assert torch.equal(out, y0)


@pytest.mark.parametrize("numerics", [0, 1])
def test_both_backends_give_the_same_bits_and_refusals(numerics):
    """The torch operators (the C++ extension on the GPU) and the Triton JIT backend called directly."""
    from addrmsnorm import jit_backend

    H = 4096 if ON_GPU else 128
    x, z, w = _inputs(ROWS, H, seed=29, z_stride=H + 8)
    for weight in (w, None):
        for group, before in ((0, True), (64, False)):
            a = OPS.norm(x, None, weight, 1e-6, numerics=numerics, z=z, group_size=group, norm_before_gate=before)
            b = jit_backend.norm(x, None, weight, 1e-6, numerics=numerics, z=z, group_size=group,
                                 norm_before_gate=before)
            assert torch.equal(a[0], b[0]), (numerics, group, before)
    tail = (1.0, None, 0.0)
    for call in (lambda f: f(x, x.clone(), w, 1e-6, 0.0, False, 0, False, *tail, z, 0, True),
                 lambda f: f(x, None, w, 1e-6, 0.0, False, 0, False, *tail, z, 48, True),
                 lambda f: f(x, None, w.float(), 1e-6, 0.0, False, 0, False, *tail, z, 0, True),
                 lambda f: f(x, None, w, 1e-6, 1.0, False, 1, False, *tail, z, 0, True),
                 lambda f: f(x, None, w, 1e-6, 0.0, False, 0, False, *tail, z.half(), 0, True),
                 lambda f: f(x, None, w, 1e-6, 0.0, False, 0, False, *tail, None, 64, True)):
        names = []
        for f in (OPS.norm, jit_backend.norm):
            with pytest.raises((ValueError, TypeError, RuntimeError)) as e:
                call(f)
            names.append(argument_named(str(e.value)))
        assert names[0] == names[1], names


@pytest.mark.parametrize("static", [True, False], ids=["static", "per_token"])
@pytest.mark.parametrize("before", [True, False], ids=["norm_first", "gate_first"])
def test_gated_quantized_outputs_match_the_reference(static, before):
    """fp8 q of the gated norm's fp32 y (out_proj's input): static in groups, per token over the row; q may differ
    from the float64 reference's only where the kernel's fp32 y and the reference's sit on two sides of a code's
    boundary."""
    H, group = (4096, 128) if ON_GPU else (256, 64)
    x, z, w = _inputs(ROWS, H, seed=13, z_stride=H + 64)
    g = group if static else None
    scale = torch.tensor([0.01], device=DEVICE) if static else None
    q, scales, y = addrmsnorm.gated_rmsnorm_quant(x, z, w, 1e-6, quant_dtype=torch.float8_e4m3fn, scale=scale,
                                                  group_size=g, norm_before_gate=before, return_y=True)
    assert torch.equal(y, addrmsnorm.gated_rmsnorm(x, z, w, 1e-6, group_size=g, norm_before_gate=before))
    y32 = R.gated_rmsnorm_ref(x, z, w, 1e-6, g, before).float()
    q_ref, s_ref = R.quantize_ref(y32, torch.float8_e4m3fn, scale=scale)
    differ = (q.view(torch.uint8) != q_ref.view(torch.uint8)).float().mean().item()
    assert differ <= 0.01, f"{differ:.2%} of q's bytes differ from the reference's"
    if not static:
        torch.testing.assert_close(scales, s_ref, rtol=2 * QUANT_Y_RTOL.rtol, atol=0)
    # Into given outputs, the same bytes.
    out = torch.empty_like(q)
    addrmsnorm.gated_rmsnorm_quant(x, z, w, 1e-6, quant_dtype=torch.float8_e4m3fn, scale=scale, group_size=g,
                                   norm_before_gate=before, out=out,
                                   scales_out=None if static else torch.empty_like(scales))
    assert torch.equal(out.view(torch.uint8), q.view(torch.uint8))


def test_gated_quantized_refusals_name_the_argument():
    x, z, w = _inputs(4, 256)
    s = torch.tensor([0.01], device=DEVICE)
    fp8 = torch.float8_e4m3fn
    cases = [
        (ValueError, "group_size is", lambda: addrmsnorm.gated_rmsnorm_quant(x, z, w, quant_dtype=fp8, group_size=64)),
        (ValueError, "takes the quantized outputs static and token", lambda: addrmsnorm.gated_rmsnorm_quant(
            x, z, w, quant_dtype=torch.int8, scale=s)),
        (ValueError, "group_size is", lambda: addrmsnorm.gated_rmsnorm_quant(x, z, w, quant_dtype=fp8, scale=s,
                                                                               group_size=96)),
        (TypeError, "z has dtype", lambda: addrmsnorm.gated_rmsnorm_quant(x, z.half(), w, quant_dtype=fp8, scale=s)),
        (ValueError, "no residual", lambda: OPS.norm_quant(x, x.clone(), w, 1e-6, fp8, s, 0, None, False, False, 0.0,
                                                           False, False, False, 1.0, None, 0.0, z, 0, True)),
    ]
    for exc, match, call in cases:
        assert_refused((exc, RuntimeError) if ON_GPU else exc, match, call, x, z, w)


def test_the_hf_patch_asks_the_checks_whether_the_gated_norm_takes_a_call():
    """hf.py runs HF's own gated norm where ours would refuse: its predicate (validation.gate_takes) says yes
    exactly where the checks admit the call, over dtypes, widths, one and several rows, starts off the 16-byte
    boundary and row strides (each tensor in a buffer of its own: no overlaps)."""
    import random

    from addrmsnorm import validation

    rng = random.Random(12)

    def tensors(dt, n, H, of):  # x, z, weight
        x, z = strided_rows(rng, dt, n, H, DEVICE), strided_rows(rng, of(dt), n, H, DEVICE)
        return x, z, strided_rows(rng, of(dt), 1, H, DEVICE)[0]

    assert_predicate_is_the_checks(
        rng, (64, 128, 136), tensors,
        lambda x, z, w: validation.check_rmsnorm(x, w, eps=1e-6, weight_offset=0.0, numerics=0, z=z),
        validation.gate_takes)


@pytest.mark.parametrize("before", [True, False], ids=["norm_first", "gate_first"])
@pytest.mark.parametrize("numerics", ["contract", "hf"])
def test_the_looped_path_gates_too(monkeypatch, before, numerics):
    """A group walked in chunks (the looped path, for groups too wide to hold in registers: a tuning candidate)
    gives the reference's y (HF's numerics: the single pass's, within the tolerance): z's group and the weight's
    columns of each group read beside x's, in both orders."""
    from addrmsnorm import configs

    chunk = 1024 if ON_GPU else 64
    cases = [(8192, None), (4 * chunk, chunk)] if ON_GPU else [(256, None), (4 * chunk, chunk)]
    inputs = [_inputs(ROWS, h, torch.bfloat16, seed=h, z_stride=h + 64) for h, _ in cases]
    kw = dict(norm_before_gate=before, numerics=numerics)
    single = [addrmsnorm.gated_rmsnorm(x, z, w, 1e-6, group_size=g, **kw) for (x, z, w), (_, g) in zip(inputs, cases)]
    monkeypatch.setattr(configs, "select_gated_config",
                        lambda *_: configs.KernelConfig(block_h=chunk, rows_per_program=1, num_warps=4, looped=True))
    for (x, z, w), (h, g), want in zip(inputs, cases, single):
        y = addrmsnorm.gated_rmsnorm(x, z, w, 1e-6, group_size=g, **kw)
        if numerics == "contract":
            want = R.gated_rmsnorm_ref(x, z, w, 1e-6, g, before)
        _close(y, want, torch.bfloat16, f"looped y, {h} in groups of {g}")


@pytest.mark.parametrize("before", [True, False], ids=["norm_first", "gate_first"])
@pytest.mark.parametrize("numerics", ["contract", "hf"])
def test_the_weight_loaded_first_gives_the_same_bits(monkeypatch, before, numerics):
    """weight_first (a tuning candidate: each group's columns of the weight loaded with x and z, before the
    reduction) changes when the weight arrives, not the arithmetic: the table row's bits, for groups narrower than
    the row (a program's rows span groups) and one group a row."""
    import dataclasses

    from addrmsnorm import configs

    cases = [(2048, 128), (8192, None)] if ON_GPU else [(256, 64), (128, None)]
    kw = dict(norm_before_gate=before, numerics=numerics)
    for h, g in cases:
        x, z, w = _inputs(ROWS, h, torch.bfloat16, seed=h, z_stride=h + 64)
        want = addrmsnorm.gated_rmsnorm(x, z, w, 1e-6, group_size=g, **kw)
        first = dataclasses.replace(configs.select_gated_config(g or h, 2), weight_first=True)
        with monkeypatch.context() as m:
            m.setattr(configs, "select_gated_config", lambda *_: first)
            got = addrmsnorm.gated_rmsnorm(x, z, w, 1e-6, group_size=g, **kw)
        assert torch.equal(got, want), (h, g)
