"""The pair (b given: DeepSeek-V3's and Kimi-K2's latent norms, q_a_layernorm and kv_a_layernorm) as a field of
the plain norm's call: two parts of the same rows, of two widths and two weights, in one launch.

The wider part runs on the plain norm's tile for its width and is held to the plain norm of it, bit for bit. The
narrower part runs in a tile of its own (packed rows, on the wider part's warps), whose sum of squares may associate
differently from the plain norm's tile: it is held to the float64 reference, to batch invariance (a row alone gives
the bits it gets among others) and to the same bits whichever of a and b it is. In the MLA shapes (1536 + 512 in one
buffer of 2112 columns, and in two buffers), in place and out of place; the rest of the row is untouched; bad input is refused with nothing written, and both backends give the same bits and name the same
argument."""

import pytest
import torch

import addrmsnorm
from addrmsnorm import reference as R
from addrmsnorm.tolerances import GRAD_TOLERANCES, Y_TOLERANCES

from conftest import DEVICE, ON_GPU, needs_kernels
from helpers import argument_named, assert_refused

pytestmark = needs_kernels
OPS = torch.ops.addrmsnorm
NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
ROWS = 33 if ON_GPU else 5
# (width of a, width of b, the buffer's width): DeepSeek-V3's q and kv latents with k_pe after them; Kimi-K2's
# are the same widths. Small ones under the interpreter.
MLA = (1536, 512, 2112)
SHAPES = [MLA, (4096, 8, 4104), (64, 8192, 8256)] if ON_GPU else [(64, 16, 88), (128, 64, 200)]


def _buffer(n, width, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(n, width, generator=g).to(dtype).to(DEVICE)


def _weights(Ha, Hb, dtype=torch.bfloat16, seed=1):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return tuple((1.0 + 0.5 * torch.randn(h, generator=g)).to(dtype).to(DEVICE) for h in (Ha, Hb))


def _assert_parts(a, wa, b, wb, ya, yb, numerics):
    """The wider part is the plain norm's bits; the narrower (its own tile) is within one rounding of the float64
    reference, and under HF's form within the plain norm's tolerance of the plain norm."""
    (x1, w1, y1), (x2, w2, y2) = sorted(((a, wa, ya), (b, wb, yb)), key=lambda t: -t[0].shape[-1])
    assert torch.equal(y1, addrmsnorm.rmsnorm(x1, w1, 1e-6, numerics=numerics))
    tol = Y_TOLERANCES[NAMES[x2.dtype]]
    if numerics == "contract":
        R.assert_close(y2.float(), R.rmsnorm_ref(x2, w2, 1e-6).y.float(), tol, "y of the narrower part")
    else:
        R.assert_close(y2.float(), addrmsnorm.rmsnorm(x2, w2, 1e-6, numerics=numerics).float(), tol,
                       "y of the narrower part")


@pytest.mark.parametrize("Ha,Hb,width", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=lambda d: NAMES[d])
@pytest.mark.parametrize("numerics", ["contract", "hf"])
def test_each_part_is_its_plain_norm_in_one_buffer_and_in_two(Ha, Hb, width, dtype, numerics):
    buf = _buffer(ROWS, width, dtype, seed=Ha)
    wa, wb = _weights(Ha, Hb, dtype)
    a, b = buf[:, :Ha], buf[:, Ha:Ha + Hb]
    ya, yb = addrmsnorm.rmsnorm_pair(a, wa, b, wb, 1e-6, numerics=numerics)
    _assert_parts(a, wa, b, wb, ya, yb, numerics)
    want_a, want_b = ya.clone(), yb.clone()
    # Two buffers of their own.
    ya2, yb2 = addrmsnorm.rmsnorm_pair(a.contiguous(), wa, b.contiguous(), wb, 1e-6, numerics=numerics)
    assert torch.equal(ya2, want_a) and torch.equal(yb2, want_b)
    # In place on the one buffer: the rest of the row (k_pe) untouched.
    before = buf.clone()
    assert addrmsnorm.rmsnorm_pair_(a, wa, b, wb, 1e-6, numerics=numerics)[0] is a
    assert torch.equal(buf[:, :Ha], want_a) and torch.equal(buf[:, Ha:Ha + Hb], want_b)
    assert torch.equal(buf[:, Ha + Hb:], before[:, Ha + Hb:])
    # A row alone gives its bits (batch invariance), and b the narrower or the wider part alike.
    yb1, ya1 = addrmsnorm.rmsnorm_pair(before[3:4, Ha:Ha + Hb], wb, before[3:4, :Ha], wa, 1e-6, numerics=numerics)
    assert torch.equal(ya1, want_a[3:4]) and torch.equal(yb1, want_b[3:4])


@pytest.mark.parametrize("Ha,Hb,pack", [(256, 64, 4), (64, 256, 4), (128, 32, 1), (64, 64, 1), (2048, 512, 4),
                                         (512, 2048, 4), (1536, 512, 4), (4096, 2048, 1), (8192, 1024, 4)])
def test_the_narrower_part_packs_its_rows_and_every_row_is_written(Ha, Hb, pack):
    """The narrower part's programs take pack of its rows in a tile of its width (configs.pair_pack), whichever of a
    and b it is: over row counts that leave a last program part full, every row of both parts is written, the wider
    part is its plain norm bit for bit, the narrower within the reference's tolerance, and each row's bits are
    those it gets alone."""
    from addrmsnorm import configs
    cfg = configs.select_pair_config(max(Ha, Hb), 2)
    assert configs.pair_pack(cfg.block_h, min(Ha, Hb)) == pack
    for n in ((1, 37, 1000) if ON_GPU else (1, 37)):
        if not ON_GPU and max(Ha, Hb) > 256:
            continue  # the interpreter's time
        buf = _buffer(n, Ha + Hb, seed=n + Ha)
        wa, wb = _weights(Ha, Hb)
        a, b = buf[:, :Ha], buf[:, Ha:]
        ya, yb = addrmsnorm.rmsnorm_pair(a, wa, b, wb, 1e-6)
        _assert_parts(a, wa, b, wb, ya, yb, "contract")
        for i in sorted({0, n // 2, n - 1}):
            ya1, yb1 = addrmsnorm.rmsnorm_pair(a[i:i + 1], wa, b[i:i + 1], wb, 1e-6)
            assert torch.equal(ya1, ya[i:i + 1]) and torch.equal(yb1, yb[i:i + 1])


def test_weightless_pair_and_empty_rows():
    buf = _buffer(ROWS, 200)
    a, b = buf[:, :128], buf[:, 128:192]
    ya, yb = addrmsnorm.rmsnorm_pair(a, None, b, None, 1e-6)
    assert torch.equal(ya, addrmsnorm.rmsnorm(a, None, 1e-6)) and torch.equal(yb, addrmsnorm.rmsnorm(b, None, 1e-6))
    ya, yb = addrmsnorm.rmsnorm_pair(a[:0], None, b[:0], None, 1e-6)
    assert ya.shape == (0, 128) and yb.shape == (0, 64)


def test_pair_refuses_bad_input_and_writes_nothing():
    buf = _buffer(4, 200)
    a, b = buf[:, :128], buf[:, 128:192]
    wa, wb = _weights(128, 64)
    other = _buffer(4, 64, seed=3)
    wide = torch.zeros(1, 8200, dtype=a.dtype, device=DEVICE)
    cases = [
        (TypeError, "float16 or bfloat16", lambda: addrmsnorm.rmsnorm_pair(a.float(), wa.float(), b.float(),
                                                                         wb.float())),
        (TypeError, "b has dtype", lambda: addrmsnorm.rmsnorm_pair(a, wa, b.half(), wb)),
        (TypeError, "b_weight has dtype", lambda: addrmsnorm.rmsnorm_pair(a, wa, b, wb.half())),
        (ValueError, "a's rows", lambda: addrmsnorm.rmsnorm_pair(a, wa, other[:3], wb)),
        (ValueError, "both weighted", lambda: addrmsnorm.rmsnorm_pair(a, wa, b, None)),
        (ValueError, "b_weight has shape", lambda: addrmsnorm.rmsnorm_pair(a, wa, b, wa)),
        (ValueError, "at most 8192", lambda: addrmsnorm.rmsnorm_pair(wide, None, wide[:, :8], None)),
        (ValueError, "multiples of 8", lambda: addrmsnorm.rmsnorm_pair(a[:, :100], wa[:100], b, wb)),
        (ValueError, "weight_offset 0", lambda: addrmsnorm.rmsnorm_pair(a, wa, b, wb, numerics="hf",
                                                                       weight_offset=1.0)),
        (ValueError, "no residual", lambda: OPS.norm_(a, other, wa, 1e-6, 0.0, 0, False, 1.0, None, 0.0, None, 0,
                                                      True, b, wb)),
        (ValueError, "b_weight is given but b is None",
         lambda: OPS.norm_(a, None, wa, 1e-6, 0.0, 0, False, 1.0, None, 0.0, None, 0, True, None, wb)),
        (ValueError, "b_out is None", lambda: OPS.norm_into(a, None, wa, a, None, None, 1e-6, 0.0, 0, False, 1.0,
                                                            None, 0.0, None, 0, True, b, wb, None)),
        (ValueError, "overlaps", lambda: addrmsnorm.rmsnorm_pair(a, wa, b, wb, out=(buf[:, 64:192], other))),
        (TypeError, "b must be a torch.Tensor", lambda: addrmsnorm.rmsnorm_pair(a, wa, "b", wb)),
        # The functions' own names, never the operator's x, weight or out:
        (ValueError, r"^a overlaps b|^b overlaps a", lambda: addrmsnorm.rmsnorm_pair_(buf[:, :128], wa, buf[:, 64:128],
                                                                                      wb[:64])),
        (ValueError, r"^a_weight has shape \(100,\)", lambda: addrmsnorm.rmsnorm_pair(a, wa[:100], b, wb)),
        (ValueError, r"^a_weight has shape \(100,\)", lambda: addrmsnorm.rmsnorm_pair_(a, wa[:100], b, wb)),
    ]
    for exc, match, call in cases:
        assert_refused((exc, RuntimeError) if ON_GPU else exc, match, call, buf, a, b, wa, wb, other)


def test_pair_gradients_are_the_two_plain_norms():
    """Autograd runs the two parts as two rmsnorm calls: the gradients are theirs."""
    buf = _buffer(ROWS, 200, torch.float32)
    wa, wb = _weights(128, 64, torch.float32)
    leaves = [t.clone().requires_grad_() for t in (buf[:, :128], wa, buf[:, 128:192], wb)]
    ya, yb = addrmsnorm.rmsnorm_pair(*leaves, 1e-6)
    (ya.sum() + 2 * yb.sum()).backward()
    refs = [t.detach().double().requires_grad_() for t in leaves]
    (R.rmsnorm_ref(refs[0], refs[1], 1e-6).y.sum() + 2 * R.rmsnorm_ref(refs[2], refs[3], 1e-6).y.sum()).backward()
    for name, leaf, ref in zip(("a", "a_weight", "b", "b_weight"), leaves, refs):
        R.assert_grad_close(leaf.grad, ref.grad, GRAD_TOLERANCES["fp32"], f"d{name}")
    with pytest.raises(RuntimeError, match="b requires grad"):
        addrmsnorm.rmsnorm_pair_(buf[:, :128].clone(), wa, leaves[2], wb)


def test_the_ops_take_the_pair_under_opcheck_and_compile():
    buf = _buffer(4, 200, seed=2)
    wa, wb = _weights(128, 64)
    a, b = buf[:, :128].contiguous(), buf[:, 128:192].contiguous()
    opcheck = torch.library.opcheck
    opcheck(OPS.norm_.default, (a.clone(), None, wa, 1e-6, 0.0, 0, False, 1.0, None, 0.0, None, 0, True, b.clone(), wb))
    opcheck(OPS.norm_into.default, (a, None, wa, torch.empty_like(a), None, None, 1e-6, 0.0, 1, False, 1.0, None, 0.0,
                                    None, 0, True, b, wb, torch.empty_like(b)))
    if not ON_GPU:
        return  # torch.compile of the interpreter's ops adds nothing the GPU suite does not cover
    want = addrmsnorm.rmsnorm_pair(a, wa, b, wb, 1e-6)
    f = torch.compile(lambda u, v: addrmsnorm.rmsnorm_pair(u, wa, v, wb, 1e-6), fullgraph=True)
    got = f(a, b)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    xa, xb = a.clone(), b.clone()
    addrmsnorm.rmsnorm_pair_(xa.clone(), wa, xb.clone(), wb, 1e-6, pdl=True)  # compile and load before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        addrmsnorm.rmsnorm_pair_(xa, wa, xb, wb, 1e-6, pdl=True)
    xa.copy_(a)
    xb.copy_(b)
    graph.replay()
    assert torch.equal(xa, want[0]) and torch.equal(xb, want[1])


@pytest.mark.parametrize("numerics", [0, 1])
def test_both_backends_give_the_same_bits_and_refusals(numerics):
    """The torch operators (the C++ extension on the GPU) and the Triton JIT backend called directly."""
    from addrmsnorm import jit_backend

    Ha, Hb, width = MLA if ON_GPU else (128, 64, 200)
    buf = _buffer(ROWS, width, seed=29)
    wa, wb = _weights(Ha, Hb)
    a, b = buf[:, :Ha], buf[:, Ha:Ha + Hb]
    outs = []
    for f in (OPS.norm_into, jit_backend.norm_into):
        oa, ob = torch.empty_like(a), torch.empty_like(b)
        f(a, None, wa, oa, None, None, 1e-6, 0.0, numerics, False, 1.0, None, 0.0, None, 0, True, b, wb, ob)
        outs.append((oa, ob))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    tail = (1.0, None, 0.0, None, 0, True)
    oa, ob = torch.empty_like(a), torch.empty_like(b)
    for call in (lambda f: f(a, None, wa, oa, None, None, 1e-6, 0.0, 0, False, *tail, b, None, ob),
                 lambda f: f(a, None, wa, oa, None, None, 1e-6, 0.0, 0, False, *tail, b.half(), wb, ob),
                 lambda f: f(a, None, wa, oa, None, None, 1e-6, 1.0, 1, False, *tail, b, wb, ob),
                 lambda f: f(a, None, wa, buf[:, Ha - 8:2 * Ha - 8], None, None, 1e-6, 0.0, 0, False, *tail, b, wb,
                             ob)):
        names = []
        for f in (OPS.norm_into, jit_backend.norm_into):
            with pytest.raises((ValueError, TypeError, RuntimeError)) as e:
                call(f)
            names.append(argument_named(str(e.value)))
        assert names[0] == names[1], names
