"""The plain norm (addrmsnorm.rmsnorm, rmsnorm_, RMSNorm; torch.ops.addrmsnorm.rmsnorm, rmsnorm_,
rmsnorm_into): the fused kernel with the residual compiled out, against the one reference
(reference.rmsnorm_ref); for fp32 x, whose plain calls take the fused table's rows, bit for bit against the
fused operator with a zero residual, whose fp32 add is exact (16-bit x has its own rows,
configs.PLAIN_TABLE, which reduce in other orders). HF's roundings bit for bit given the kernel's rstd.
Per-head rows inside a fused QKV buffer (two leading strides) are normalized in place without a
copy, leaving the rest of the buffer untouched."""

import pytest
import torch

import addrmsnorm
from addrmsnorm.reference import RSTD_TOLERANCE, rmsnorm_grads_ref, rmsnorm_ref, truncate_to_bf16
from addrmsnorm.reference import GRAD_TOLERANCES_BY_DTYPE, assert_grad_close

from conftest import DEVICE, ON_GPU, gpu_only, needs_kernels
from helpers import DTYPES, assert_close, bits, y_tolerance, assert_refused

pytestmark = needs_kernels
OPS = torch.ops.addrmsnorm

# H at the table's boundaries: several rows per program, odd H (the re-read path), 2- and 8-byte rows,
# and past the single pass (the looped path, which reads x again in its second pass).
H_GRID = [1, 7, 128, 1000, 3000, 4100, 11111] + ([4096, 8192, 16384, 20000, 32768, 65536] if ON_GPU else [17000])
DTYPE_PAIRS = [("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32"), ("bf16", "fp32"), ("fp16", "bf16")]


def _inputs(N, H, xd, wd, seed=0, lead=None):
    g = torch.Generator().manual_seed(seed)
    shape = (N, H) if lead is None else (*lead, H)
    x = torch.randn(shape, generator=g).to(DTYPES[xd]).to(DEVICE)
    w = (1 + 0.1 * torch.randn(H, generator=g)).to(DTYPES[wd]).to(DEVICE)
    return x, w


def _fused_zero(x, w, **kw):
    """The fused operator's y with a zero residual of x's dtype: the plain norm's bits for fp32 x."""
    return addrmsnorm.fused_add_rmsnorm(x, torch.zeros_like(x), w, **kw)[0]


@pytest.mark.parametrize("H", H_GRID)
@pytest.mark.parametrize("xd,wd", DTYPE_PAIRS, ids=lambda p: p)
def test_against_the_reference_and_the_fused_op(H, xd, wd):
    N = 5 if H <= 20000 else 3
    x, w = _inputs(N, H, xd, wd, seed=H)
    before = bits(x).clone()
    y, rstd = addrmsnorm.rmsnorm(x, w, 1e-6, return_rstd=True)
    assert torch.equal(bits(x), before), "the functional form wrote x"
    ref = rmsnorm_ref(x, w, 1e-6)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert_close(y, ref.y, y_tolerance(x.dtype), f"{H} {xd}/{wd} y")
    assert_close(rstd, ref.rstd, RSTD_TOLERANCE, f"{H} {xd}/{wd} rstd")
    if x.dtype == torch.float32:
        assert torch.equal(bits(y), bits(_fused_zero(x, w))), "not the fused kernel's bits with a zero residual"


@pytest.mark.parametrize("numerics,offset", [("hf", 0.0), ("hf", 1.0), ("hf_round_once", 0.0), ("contract", 1.0)])
@pytest.mark.parametrize("xd", ["bf16", "fp16", "fp32"])
def test_numerics_and_weight_offset(numerics, offset, xd):
    """HF's roundings after the kernel's rstd, bit for bit: LlamaRMSNorm's weight * (x * rstd).to(dtype), or
    (x * rstd * (w + offset)) rounded once ("hf" with an offset, and "hf_round_once", OLMo 2's); rstd as
    torch's rsqrt of the mean computes it, within its tolerance. The contract within the reference's."""
    for H in (96, 3000) + ((20000,) if ON_GPU else (17000,)):
        x, w = _inputs(3, H, xd, xd, seed=7)
        y, rstd = addrmsnorm.rmsnorm(x, w, 1e-5, weight_offset=offset, numerics=numerics, return_rstd=True)
        if numerics == "contract":
            assert_close(y, rmsnorm_ref(x, w, 1e-5, offset).y, y_tolerance(x.dtype), f"{H} contract")
            continue
        once = numerics == "hf_round_once" or offset != 0.0

        def cast(t):  # the interpreter truncates fp32 -> bf16 conversions where a GPU rounds them
            return truncate_to_bf16(t) if x.dtype == torch.bfloat16 and not ON_GPU else t.to(x.dtype)
        n = x.float() * rstd.unsqueeze(-1)
        want = cast(n * (w.float() + offset)) if once else cast(cast(n).float() * w.float())
        assert torch.equal(bits(y), bits(want)), (H, numerics, offset)
        torch_rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-5)
        assert_close(rstd, torch_rstd.double(), RSTD_TOLERANCE, f"{H} rstd")


@pytest.mark.parametrize("heads,kv_heads,D", [(4, 2, 32), (32, 8, 128)])
def test_heads_of_a_fused_qkv_buffer_in_place(heads, kv_heads, D):
    """q and k of vLLM's fused QKV buffer: views (T, heads, D) with strides (qkv width, D, 1)."""
    T = 9
    g = torch.Generator().manual_seed(D)
    qkv = torch.randn(T, (heads + 2 * kv_heads) * D, generator=g).to(torch.float16).to(DEVICE)
    q_size, k_size = heads * D, kv_heads * D
    wq = (1 + 0.1 * torch.randn(D, generator=g)).to(torch.float16).to(DEVICE)
    wk = (1 + 0.1 * torch.randn(D, generator=g)).to(torch.float16).to(DEVICE)
    before = qkv.clone()
    q = qkv[:, :q_size].view(T, heads, D)
    k = qkv[:, q_size:q_size + k_size].view(T, kv_heads, D)
    assert q.stride() == (qkv.shape[1], D, 1)
    want_q = addrmsnorm.rmsnorm(before[:, :q_size].reshape(T, heads, D).contiguous(), wq)  # contiguous rows
    want_k = addrmsnorm.rmsnorm(before[:, q_size:q_size + k_size].reshape(T, kv_heads, D).contiguous(), wk)
    assert addrmsnorm.rmsnorm_(q, wq) is q
    addrmsnorm.rmsnorm_(k, wk)
    assert torch.equal(bits(q), bits(want_q)) and torch.equal(bits(k), bits(want_k))
    assert torch.equal(qkv[:, q_size + k_size:], before[:, q_size + k_size:]), "v was written"
    # The functional form reads the same view, and into a given out of two strides too.
    view = before[:, :q_size].view(T, heads, D)
    assert torch.equal(bits(addrmsnorm.rmsnorm(view, wq)), bits(want_q))
    dst = torch.zeros_like(before)
    out = dst[:, :q_size].view(T, heads, D)
    rstd = torch.empty(T, heads, dtype=torch.float32, device=DEVICE)
    addrmsnorm.rmsnorm(view, wq, out=out, return_rstd=True)
    ops_out = torch.zeros_like(dst)
    OPS.norm_into(view, None, wq, ops_out[:, :q_size].view(T, heads, D), None, rstd, 1e-6)
    assert torch.equal(bits(out), bits(want_q)) and torch.equal(dst[:, q_size:], torch.zeros_like(dst[:, q_size:]))
    assert torch.equal(ops_out, dst)
    assert_close(rstd, rmsnorm_ref(view, wq).rstd, RSTD_TOLERANCE, "rstd of the heads")


def test_row_strided_views_and_rows_alone():
    """A row-strided view is read without a copy, and a row's bits are the same alone or among others."""
    H = 1000
    x, w = _inputs(7, H, "bf16", "bf16", seed=3)
    buf = torch.zeros(7, H + 24, dtype=x.dtype, device=DEVICE)
    buf[:, :H] = x
    y = addrmsnorm.rmsnorm(buf[:, :H], w)
    assert torch.equal(bits(y), bits(addrmsnorm.rmsnorm(x, w)))
    for i in (0, 3, 6):
        assert torch.equal(bits(addrmsnorm.rmsnorm(x[i:i + 1], w)), bits(y[i:i + 1]))
    assert addrmsnorm.rmsnorm(x[:0], w).shape == (0, H)


def test_module_loads_an_hf_state_dict_and_matches_the_function():
    H = 256
    x, w = _inputs(4, H, "bf16", "bf16", seed=5)
    m = addrmsnorm.RMSNorm(H, eps=1e-5, device=DEVICE, dtype=torch.bfloat16)
    m.load_state_dict({"weight": w})
    assert torch.equal(bits(m(x)), bits(addrmsnorm.rmsnorm(x, w, 1e-5)))
    g = addrmsnorm.RMSNorm(H, weight_offset=1.0, numerics="hf", device=DEVICE, dtype=torch.bfloat16)
    assert torch.equal(bits(g(x)), bits(addrmsnorm.rmsnorm(x, g.weight.detach(), weight_offset=1.0, numerics="hf")))


@pytest.mark.parametrize("xd,wd", [("bf16", "bf16"), ("fp32", "fp32"), ("fp16", "fp32")])
@pytest.mark.parametrize("H", [64, 1000] + ([20000] if ON_GPU else []))
def test_backward_against_float64(xd, wd, H):
    x, w = _inputs(6, H, xd, wd, seed=11)
    x.requires_grad_()
    w.requires_grad_()
    y = addrmsnorm.rmsnorm(x, w, 1e-6)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(y.dtype).to(DEVICE)
    y.backward(dy)
    dx_ref, dw_ref = rmsnorm_grads_ref(x, w, 1e-6, 0.0, dy)
    tol = GRAD_TOLERANCES_BY_DTYPE[x.dtype]
    assert x.grad.dtype == x.dtype and w.grad.dtype == w.dtype
    assert_grad_close(x.grad, dx_ref, tol, "dx")
    assert_grad_close(w.grad, dw_ref, GRAD_TOLERANCES_BY_DTYPE[w.dtype], "dweight")


def test_backward_of_a_view_of_two_strides():
    T, heads, D = 5, 4, 64
    base = torch.randn(T, 2 * heads * D, device=DEVICE, requires_grad=True)
    q = base[:, :heads * D].view(T, heads, D)
    w = torch.randn(D, device=DEVICE, requires_grad=True)
    y = addrmsnorm.rmsnorm(q, w)
    dy = torch.randn_like(y)
    y.backward(dy)
    dx_ref, dw_ref = rmsnorm_grads_ref(q, w, 1e-6, 0.0, dy)
    assert_grad_close(base.grad[:, :heads * D].reshape(T, heads, D), dx_ref, GRAD_TOLERANCES_BY_DTYPE[torch.float32], "dx")
    assert torch.equal(base.grad[:, heads * D:], torch.zeros_like(base.grad[:, heads * D:]))
    assert_grad_close(w.grad, dw_ref, GRAD_TOLERANCES_BY_DTYPE[torch.float32], "dweight")



def test_bad_input_is_refused_by_name_and_writes_nothing():
    x, w = _inputs(4, 64, "fp32", "fp32", seed=2)
    assert_refused(ValueError, r"weight has shape \(65,\), expected \(64,\)",
             lambda: addrmsnorm.rmsnorm(x, torch.ones(65, device=DEVICE)), x)
    assert_refused(TypeError, "out has dtype torch.float16; it must be x's dtype",
             lambda: addrmsnorm.rmsnorm(x, w, out=torch.zeros(4, 64, dtype=torch.float16, device=DEVICE)), x)
    buf = torch.zeros(5, 64, device=DEVICE)
    assert_refused(ValueError, "out overlaps x", lambda: addrmsnorm.rmsnorm(buf[:4], w, out=buf[1:]), buf)
    e = torch.randn(1, 64, device=DEVICE).expand(4, 64)
    assert_refused(ValueError, "x: row stride 0 < H=64, so its rows overlap", lambda: addrmsnorm.rmsnorm_(e, w), w)
    assert_refused(ValueError, "eps must be > 0", lambda: addrmsnorm.rmsnorm_(x, w, 0.0), x)
    assert_refused(TypeError, r"(numerics='hf'|ADDRMSNORM_NUMERICS_HF) needs weight(_dtype)? (of|equal to) x",
             lambda: addrmsnorm.rmsnorm_(x, w.double().to(torch.float16), numerics="hf"), x)
    t = torch.randn(3, 5, 7, 64, device=DEVICE)[:, :4, :6]  # leading dims of three strides, in any order
    assert_refused(ValueError, "cannot be addressed as rows of two leading strides", lambda: addrmsnorm.rmsnorm_(t, w), t)
    xg = x.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="for training call addrmsnorm.rmsnorm"):
        addrmsnorm.rmsnorm_(xg, w)


def test_opcheck():
    x, w = _inputs(6, 96, "bf16", "bf16", seed=4)
    opcheck = torch.library.opcheck
    opcheck(OPS.norm.default, (x, None, w, 1e-6))
    opcheck(OPS.norm.default, (x, None, w, 1e-6, 0.5, True, 0))
    opcheck(OPS.norm_.default, (x.clone(), None, w, 1e-6))
    opcheck(OPS.norm_into.default, (x, None, w, torch.empty_like(x), None, torch.empty(6, device=DEVICE), 1e-6))


def test_compile_fullgraph_matches_eager():
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    x, w = _inputs(6, 64, "bf16", "bf16", seed=6)
    qkv = torch.randn(6, 4 * 64, device=DEVICE).to(torch.bfloat16)

    def f(x, qkv):
        y = addrmsnorm.rmsnorm(x, w)
        addrmsnorm.rmsnorm_(qkv[:, :128].view(6, 2, 64), w)
        return y, qkv

    with torch.no_grad():
        y_e, qkv_e = f(x, qkv.clone())
        y_c, qkv_c = torch.compile(f, fullgraph=True, backend="inductor" if ON_GPU else "aot_eager")(x, qkv.clone())
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert torch.equal(bits(y_c), bits(y_e)) and torch.equal(bits(qkv_c), bits(qkv_e))


@gpu_only
def test_cuda_graph_capture_and_replay():
    x, w = _inputs(16, 4096, "bf16", "bf16", seed=8)
    sx = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # JIT-compile outside the capture
        addrmsnorm.rmsnorm(sx, w, pdl=True)
        addrmsnorm.rmsnorm_(sx.clone(), w)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = addrmsnorm.rmsnorm(sx, w, pdl=True)
        addrmsnorm.rmsnorm_(sx, w)
    for seed in (1, 2):
        x2, _ = _inputs(16, 4096, "bf16", "bf16", seed=seed)
        sx.copy_(x2)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(bits(y), bits(addrmsnorm.rmsnorm(x2, w)))
        assert torch.equal(bits(sx), bits(addrmsnorm.rmsnorm(x2, w)))


def test_permuted_views_are_normalized_in_their_memory_order():
    """HF's head layout, q_proj(x).view(B, T, heads, D).transpose(1, 2): no two strides in the given
    order, rows of one stride in memory order. y keeps x's strides, with the bits of the contiguous call."""
    B, T, heads, D = 2, 5, 4, 64
    x, w = _inputs(B * T * heads, D, "bf16", "bf16", seed=12)
    x4 = x.view(B, T, heads, D).transpose(1, 2)
    want = addrmsnorm.rmsnorm(x, w).view(B, T, heads, D).transpose(1, 2)
    y, rstd = addrmsnorm.rmsnorm(x4, w, return_rstd=True)
    assert y.shape == x4.shape and y.stride() == x4.stride() and rstd.shape == x4.shape[:-1]
    assert torch.equal(bits(y), bits(want))
    inplace = x4.clone()
    assert addrmsnorm.rmsnorm_(inplace, w) is inplace and torch.equal(bits(inplace), bits(want))


@pytest.mark.parametrize("cls", [addrmsnorm.RMSNorm, addrmsnorm.FusedAddRMSNorm])
def test_module_refuses_a_weight_dtype_the_kernels_do_not_take(cls):
    for dtype in (torch.int32, torch.float64):
        with pytest.raises(TypeError, match=f"dtype={dtype}: the weight's dtype must be one of float16, bfloat16"):
            cls(64, dtype=dtype)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # dtype=None takes torch's default: checked too
    try:
        with pytest.raises(TypeError, match="dtype=torch.float64"):
            cls(64)
    finally:
        torch.set_default_dtype(prev)
