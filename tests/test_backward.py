"""Training: the Triton backward through autograd, the backward operator on both backends, and
the C ABI's backward, against float64 autograd of the reference."""

import pytest
import torch

import addrmsnorm
from addrmsnorm import c_library, configs, jit_backend, ops
from addrmsnorm.reference import GRAD_TOLERANCES_BY_DTYPE, assert_grad_close, fused_add_rmsnorm_grads_ref

from conftest import DEVICE, ON_GPU, gpu_only, needs_kernels
from helpers import DTYPE_COMBOS, bits, combo_id, make_inputs

pytestmark = needs_kernels
LOOPED_H = 8300  # above configs.BACKWARD_SINGLE_PASS_MAX_H: 4-byte streams loop; 16-bit ones run one wide pass
LOOPED_H_16 = 16400  # above configs.BACKWARD_SINGLE_PASS_MAX_H_16: 16-bit streams loop too

if ON_GPU:
    SHAPES = [(1, 1), (1, 4096), (33, 7), (16384, 128), (4096, 1000), (2048, 4096), (1000, 8192),
              (300, LOOPED_H), (64, 32768), (16, 131072)]
else:
    SHAPES = [(1, 1), (5, 7), (9, 128), (6, 1000), (3, LOOPED_H), (2, LOOPED_H_16)]


def _leaves(N, H, combo, seed):
    x, r, w = make_inputs(N, H, combo, DEVICE, seed=seed)
    return x.requires_grad_(), r.requires_grad_(), w.requires_grad_()


def _tol(*dtypes):
    """The loosest tolerance among the dtypes a gradient went through (dy and h are read in x's and
    residual's dtypes whatever the gradient is stored in)."""
    return max((GRAD_TOLERANCES_BY_DTYPE[d] for d in dtypes), key=lambda t: t.rtol)


def _check_grads(x, r, w, eps, off, dy, dro, what):
    ref = fused_add_rmsnorm_grads_ref(x, r, w, eps, off, dy, dro)
    h = x.detach().double() + r.detach().double()
    rstd = torch.rsqrt(h.pow(2).mean(-1) + eps)
    terms = ((dy.double().abs() * (w.detach().double() + off).abs()).amax(-1) * rstd).max().item()  # |g| rstd
    for got, want, name, like, scale in ((x.grad, ref[0], "dx", x, terms), (r.grad, ref[1], "dresidual", r, terms),
                                         (w.grad, ref[2], "dweight", w, 0.0)):
        assert got is not None and got.dtype == like.dtype and got.shape == like.shape
        assert_grad_close(got, want, _tol(got.dtype, x.dtype, r.dtype), f"{what} {name}", scale)


@pytest.mark.parametrize("N,H", SHAPES)
@pytest.mark.parametrize("combo", DTYPE_COMBOS, ids=combo_id)
@pytest.mark.parametrize("with_dres_out", [True, False], ids=["dres_out", "y_only"])
def test_grads_match_reference(N, H, combo, with_dres_out):
    x, r, w = _leaves(N, H, combo, seed=N * 7 + H)
    eps, off = 1e-6, (0.5 if with_dres_out else 0.0)
    y, h = addrmsnorm.fused_add_rmsnorm(x, r, w, eps, weight_offset=off)
    gen = torch.Generator().manual_seed(H)
    dy = torch.randn(y.shape, generator=gen).to(y.dtype).to(DEVICE)
    dro = torch.randn(h.shape, generator=gen).to(h.dtype).to(DEVICE) if with_dres_out else None
    torch.autograd.backward([y, h] if with_dres_out else [y], [dy, dro] if with_dres_out else [dy])
    _check_grads(x, r, w, eps, off, dy, dro, f"{N}x{H} {combo_id(combo)}")


def test_x_and_residual_are_not_saved():
    """Autograd saves h and rstd only: changing x and residual after the forward changes nothing."""
    x, r, w = _leaves(6, 256, DTYPE_COMBOS[0], seed=1)
    xd, rd = x.detach().clone(), r.detach().clone()
    xi, ri = x * 1, r * 1  # non-leaf inputs we can overwrite
    y, h = addrmsnorm.fused_add_rmsnorm(xi, ri, w)
    dy = torch.ones_like(y)
    with torch.no_grad():
        xi.zero_()
        ri.fill_(7.0)
    y.backward(dy)
    ref = fused_add_rmsnorm_grads_ref(xd, rd, w, 1e-6, 0.0, dy)
    assert_grad_close(x.grad, ref[0], GRAD_TOLERANCES_BY_DTYPE[torch.bfloat16], "dx")
    assert_grad_close(w.grad, ref[2], GRAD_TOLERANCES_BY_DTYPE[torch.bfloat16], "dweight")


def test_one_gradient_tensor_for_x_and_residual():
    """Same dtypes: the backward writes the gradient once and hands the same tensor to x and residual."""
    x, r, w = make_inputs(4, 64, DTYPE_COMBOS[0], DEVICE)
    h = (x.float() + r.float()).to(r.dtype)
    rstd = torch.rsqrt(h.float().pow(2).mean(-1) + 1e-6)
    y_grad = torch.randn_like(x)
    from addrmsnorm.autograd import NormFunction

    class Ctx:
        saved_tensors = (h, rstd, w)
        weight_offset, x_dtype, plain, x_scale, sandwich = 0.0, x.dtype, False, 1.0, False
        needs_input_grad = (True, True, False, False, False, False, False, False)
    dx, dres, dw, *_ = NormFunction.backward(Ctx, y_grad, None, None)
    assert dx is dres and dw is None


@pytest.mark.parametrize("N,H", [(4096, 512), (64, LOOPED_H)] if ON_GPU else [(40, 64), (5, LOOPED_H)])
def test_dweight_is_deterministic(N, H):
    x, r, w = make_inputs(N, H, DTYPE_COMBOS[3], DEVICE, seed=5)
    h = (x.float() + r.float()).to(r.dtype)
    rstd = torch.rsqrt(h.float().pow(2).mean(-1) + 1e-6)
    dy = torch.randn_like(x)
    runs = [ops.norm_backward(dy, None, h, rstd, w, 0.0, True) for _ in range(3)]
    for a in runs[1:]:
        for ta, tb in zip(runs[0], a):
            assert torch.equal(bits(ta), bits(tb))


def test_module_trains():
    H = 64
    m = addrmsnorm.FusedAddRMSNorm(H, device=DEVICE, dtype=torch.float32)
    x, r, _ = _leaves(8, H, DTYPE_COMBOS[2], seed=3)
    y, h = m(x, r)
    (y.square().sum() + h.sum()).backward()  # dy and dresidual_out both reach the op
    assert m.weight.grad is not None and x.grad is not None and r.grad is not None
    ref = fused_add_rmsnorm_grads_ref(x, r, m.weight, 1e-6, 0.0, 2 * y.detach(), torch.ones_like(h))
    assert_grad_close(m.weight.grad, ref[2], GRAD_TOLERANCES_BY_DTYPE[torch.float32], "module dweight")
    assert_grad_close(x.grad, ref[0], GRAD_TOLERANCES_BY_DTYPE[torch.float32], "module dx")


def test_compiled_training_step_matches_eager():
    import torch._dynamo

    torch._dynamo.reset()
    H = 128
    m = addrmsnorm.FusedAddRMSNorm(H, device=DEVICE, dtype=torch.float32)

    def step(x, r):
        y, h = m(torch.tanh(x), r)
        return (y * y).sum() + h.sum()
    x, r, _ = _leaves(16, H, DTYPE_COMBOS[2], seed=9)
    step(x, r).backward()
    want = (x.grad.clone(), r.grad.clone(), m.weight.grad.clone())
    x.grad = r.grad = m.weight.grad = None
    compiled = torch.compile(step, fullgraph=True, backend="inductor" if ON_GPU else "aot_eager")
    compiled(x, r).backward()
    for got, w_ in zip((x.grad, r.grad, m.weight.grad), want):
        assert_grad_close(got, w_.double(), GRAD_TOLERANCES_BY_DTYPE[torch.float32], "compiled vs eager")


def test_backward_errors():
    x, r, w = make_inputs(4, 64, DTYPE_COMBOS[0], DEVICE)
    rstd = torch.ones(4, device=DEVICE)
    with pytest.raises(TypeError, match=r"(h has dtype torch\.|residual_dtype is )float16"):
        ops.norm_backward(x, None, r.half(), rstd, w, 0.0, True)
    with pytest.raises(ValueError, match="rstd must be a contiguous float32 tensor"):
        ops.norm_backward(x, None, r, torch.ones(5, device=DEVICE), w, 0.0, True)
    with pytest.raises(ValueError, match=r"weight has shape \(65,\), expected \(64,\)"):
        ops.norm_backward(x, None, r, rstd, torch.ones(65, device=DEVICE), 0.0, True)


@gpu_only
@pytest.mark.skipif(ops.backend() != "cpp", reason="the C++ extension is not the backend in this process")
@pytest.mark.parametrize("combo", DTYPE_COMBOS, ids=combo_id)
@pytest.mark.parametrize("N,H", [(1, 4096), (4099, 1000), (64, 3000), (40, LOOPED_H), (8, 65536)])
def test_backends_and_c_abi_give_identical_gradients(combo, N, H):
    x, r, w = make_inputs(N, H, combo, DEVICE, seed=N + H)
    h = (x.float() + r.float()).to(r.dtype)
    rstd = torch.rsqrt(h.float().pow(2).mean(-1) + 1e-6)
    dy = torch.randn_like(x)
    dro = torch.randn_like(h)
    for g in (dro, None):
        a = ops.norm_backward(dy, g, h, rstd, w, 0.25, True)  # C++ extension
        b = jit_backend.norm_backward(dy, g, h, rstd, w, 0.25)
        lib = c_library.load(c_library.library_path())
        c = c_library.backward(lib, dy, g, h, rstd, w, 0.25)
        # Where H is a multiple of the 16-byte vector both paths compile the same specialization. At
        # other H the JIT also specializes on the pointers' actual alignment, which the AOT build
        # cannot know, so the code (and its FMA contraction) may differ: equal within tolerance there.
        same_code = H % configs.vector_elems(x.element_size(), r.element_size()) == 0
        for ta, tb, tc in zip(a, b, c):
            if tc is None:
                assert ta.numel() == 0 and tb.numel() == 0
                continue
            assert torch.equal(bits(ta), bits(tc)), "the torch extension and the C ABI differ"
            if same_code:
                assert torch.equal(bits(ta), bits(tb)), "the C++ and Triton JIT backends differ"
            else:
                tol = GRAD_TOLERANCES_BY_DTYPE[ta.dtype]
                assert_grad_close(ta, tb.double(), tol, "C++ against Triton JIT backend")


@pytest.mark.parametrize("H", [96, LOOPED_H])
def test_strided_rows_give_the_same_gradients(H):
    """dy, dresidual_out and h as row-strided views (rows H + 8 apart) give the contiguous call's bits."""
    x, r, w = make_inputs(5, H, DTYPE_COMBOS[3], DEVICE, seed=H)
    h = (x.float() + r.float()).to(r.dtype)
    rstd = torch.rsqrt(h.float().pow(2).mean(-1) + 1e-6)
    dy, dro = torch.randn_like(x), torch.randn_like(h)

    def strided(t):
        buf = torch.zeros(t.shape[0], t.shape[1] + 8, dtype=t.dtype, device=t.device)
        buf[:, :t.shape[1]] = t
        return buf[:, :t.shape[1]]
    want = ops.norm_backward(dy, dro, h, rstd, w, 0.0, True)
    got = ops.norm_backward(strided(dy), strided(dro), strided(h), rstd, w, 0.0, True)
    for a, b in zip(want, got):
        assert torch.equal(bits(a), bits(b))
