"""The plain norm's two other entry points, against the plain norm itself:

* qk_rmsnorm_: q's and k's heads of a fused QKV buffer in one launch give the bits of rmsnorm_ on each
  view (and so of the reference, tests/test_rmsnorm.py), each with its own weight, and leave v alone.
* rmsnorm_quant: the bits of fused_add_rmsnorm_quant with a zero residual, whose fp32 add is exact (and
  that one is held to the quantization reference in tests/test_quant.py).

On the GPU, the C ABI (through ctypes), the operators on the serving backend and the Triton JIT backend
give the same bits, and the operators capture in CUDA graphs and compile with fullgraph=True."""

import pytest
import torch

import addrmsnorm
from addrmsnorm import configs, jit_backend, validation

from conftest import DEVICE, ON_GPU, gpu_only, needs_kernels
from helpers import DTYPES, assert_refused, bits, c_library_or_skip

pytestmark = needs_kernels
OPS = torch.ops.addrmsnorm


def _qkv(T, nq, nk, D, dtype, seed=0, pad=0):
    g = torch.Generator().manual_seed(seed)
    width = (nq + 2 * nk) * D
    buf = (2 * torch.randn(T, width + pad, generator=g)).to(dtype).to(DEVICE)
    return buf[:, :width] if pad else buf


def _weights(D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed + 100)
    return tuple((1 + 0.2 * torch.randn(D, generator=g)).to(dtype).to(DEVICE) for _ in range(2))


def _views(qkv, nq, nk, D):
    T = qkv.shape[0]
    return (qkv[:, :nq * D].view(T, nq, D) if T else qkv[:, :nq * D].reshape(0, nq, D),
            qkv[:, nq * D:(nq + nk) * D].view(T, nk, D) if T else qkv[:, nq * D:(nq + nk) * D].reshape(0, nk, D))


CASES = [  # (T, nq, nk, D, x dtype, weight dtype, numerics, weight_offset, row padding)
    (9, 4, 2, 64, "bf16", "bf16", "contract", 0.0, 0),
    (5, 3, 1, 128, "fp16", "fp32", "contract", 0.0, 8),
    (7, 2, 2, 96, "fp16", "fp16", "hf", 0.0, 0),
    (2, 3, 1, 512, "bf16", "fp32", "contract", 1.0, 0),  # the widest head the QK norm takes
    (6, 4, 1, 128, "bf16", "bf16", "hf", 0.0, 0),  # Qwen3: LlamaRMSNorm's roundings
    (4, 2, 1, 256, "bf16", "bf16", "hf", 1.0, 16),  # Gemma 3: 1 + w
    (1, 8, 8, 128, "bf16", "bf16", "contract", 0.0, 0),  # decode: one token
    (3, 2, 1, 100, "fp16", "fp16", "contract", 0.0, 2),  # ALIGN 2 rows
]


@pytest.mark.parametrize("T,nq,nk,D,xd,wd,numerics,offset,pad", CASES)
def test_qk_norm_gives_the_bits_of_rmsnorm_on_each_view(T, nq, nk, D, xd, wd, numerics, offset, pad):
    qkv = _qkv(T, nq, nk, D, DTYPES[xd], seed=D + T, pad=pad)
    wq, wk = _weights(D, DTYPES[wd], seed=D)
    want = qkv.clone()
    q, k = _views(want, nq, nk, D)
    addrmsnorm.rmsnorm_(q, wq, 1e-5, weight_offset=offset, numerics=numerics)
    addrmsnorm.rmsnorm_(k, wk, 1e-5, weight_offset=offset, numerics=numerics)
    got = qkv.clone()
    assert addrmsnorm.qk_rmsnorm_(got, wq, wk, 1e-5, num_q_heads=nq, num_kv_heads=nk, head_dim=D,
                                  weight_offset=offset, numerics=numerics) is got
    assert torch.equal(bits(got), bits(want)), "q or k differ from rmsnorm_ on their views"
    assert torch.equal(bits(got[:, (nq + nk) * D:]), bits(qkv[:, (nq + nk) * D:])), "v was written"


def test_qk_norm_rows_alone_and_no_rows():
    """Batch invariance: a token's bits are the same alone or among others; no tokens is a no-op."""
    qkv = _qkv(12, 4, 2, 128, torch.bfloat16, seed=3)
    wq, wk = _weights(128, torch.bfloat16)
    all_rows = qkv.clone()
    addrmsnorm.qk_rmsnorm_(all_rows, wq, wk, num_q_heads=4, num_kv_heads=2, head_dim=128)
    for t in (0, 5, 11):
        one = qkv[t:t + 1].clone()
        addrmsnorm.qk_rmsnorm_(one, wq, wk, num_q_heads=4, num_kv_heads=2, head_dim=128)
        assert torch.equal(bits(one), bits(all_rows[t:t + 1]))
    addrmsnorm.qk_rmsnorm_(qkv[:0], wq, wk, num_q_heads=4, num_kv_heads=2, head_dim=128)


def test_qk_norm_leaves_the_columns_after_k_alone_whatever_the_width():
    # qkv may be wider than q + k (v after them) or exactly q + k: only q's and k's columns change.
    D, nq, nk = 64, 2, 1
    full = _qkv(3, nq, nk, D, torch.bfloat16)
    wq, wk = _weights(D, torch.bfloat16)
    qk_only = full[:, :(nq + nk) * D].clone()
    kw = dict(num_q_heads=nq, num_kv_heads=nk, head_dim=D)
    before = full.clone()
    addrmsnorm.qk_rmsnorm_(full, wq, wk, **kw)
    addrmsnorm.qk_rmsnorm_(qk_only, wq, wk, **kw)
    assert torch.equal(full[:, (nq + nk) * D:], before[:, (nq + nk) * D:])  # v untouched
    assert torch.equal(full[:, :(nq + nk) * D], qk_only)


def test_qk_norm_refusals_name_the_argument_and_write_nothing():
    qkv = _qkv(4, 2, 1, 64, torch.bfloat16)
    wq, wk = _weights(64, torch.bfloat16)
    kw = dict(num_q_heads=2, num_kv_heads=1, head_dim=64)
    call = lambda t=qkv, a=wq, b=wk, **over: addrmsnorm.qk_rmsnorm_(t, a, b, **{**kw, **over})  # noqa: E731
    assert_refused(ValueError, r"qkv has width 128, less than the q and k heads' \(2 \+ 1\) \* 64 = 192",
                   lambda: call(qkv[:, :128]), qkv)
    assert_refused(ValueError, r"k_weight has shape \(32,\), expected \(64,\)", lambda: call(b=wk[:32]), qkv)
    assert_refused(TypeError, "k_weight has dtype torch.float32; it must be q_weight's",
                   lambda: call(b=wk.float()), qkv)
    assert_refused(ValueError, "q_weight overlaps qkv", lambda: call(a=qkv[0, 64:128]), qkv)
    assert_refused(ValueError, "num_q_heads and num_kv_heads must be >= 1", lambda: call(num_kv_heads=0), qkv)
    assert_refused(ValueError, r"head_dim must be in \[1, 512\], got 0", lambda: call(head_dim=0), qkv)
    assert_refused(TypeError, r"qkv has dtype (torch\.)?float32; the QK norm takes float16 or bfloat16",
                   lambda: call(qkv.float(), wq.float(), wk.float()), qkv)
    assert_refused(TypeError, r"q_weight has dtype (torch\.)?float16; it must be qkv's dtype",
                   lambda: call(a=wq.half(), b=wk.half()), qkv)
    assert_refused(TypeError, r"(numerics='hf'|ADDRMSNORM_NUMERICS_HF) needs weight(_dtype)? (of|equal to) x",
                   lambda: call(a=wq.float(), b=wk.float(), numerics="hf"), qkv)
    assert_refused(ValueError, "eps must be > 0", lambda: addrmsnorm.qk_rmsnorm_(qkv, wq, wk, -1.0, **kw), qkv)
    # The Python types first, as TypeErrors naming the argument (not the operator schema's RuntimeError).
    for name, bad in (("num_q_heads", 2.5), ("num_kv_heads", "1"), ("head_dim", True)):
        assert_refused(TypeError, f"{name} must be an int, got {type(bad).__name__}",
                       lambda: call(**{name: bad}), qkv)
    g = qkv.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="qk_rmsnorm_ has no backward"):
        addrmsnorm.qk_rmsnorm_(g, wq, wk, **kw)


MODES = [dict(scale=0.02), dict(), dict(group_size=64), dict(group_size=128, ue8m0_scales=True),
         dict(scale_ub=3.0)]


def _quant_kwargs(m):
    return {k: torch.tensor([val], device=DEVICE) if k in ("scale", "scale_ub") else val for k, val in m.items()}


@pytest.mark.parametrize("mode", range(len(MODES)))
@pytest.mark.parametrize("qdtype", [torch.float8_e4m3fn, torch.int8], ids=["e4m3", "int8"])
@pytest.mark.parametrize("H", [128, 4096] + ([32768, 65536] if ON_GPU else [17024]))
def test_rmsnorm_quant_gives_the_bits_of_the_fused_op_with_a_zero_residual(mode, qdtype, H):
    """Bit for bit where both take one row shape; where the plain norm has rows of its own
    (configs' plain_quant_only), rstd may differ in its last bit (the squares summed in another
    order): then y within one rounding, scales to 2**-20 and q within one code, nearly all equal."""
    if qdtype == torch.float8_e4m3fn and ON_GPU and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("float8 needs sm_89")
    g = torch.Generator().manual_seed(H + mode)
    x = (3 * torch.randn(5, H, generator=g)).to(torch.bfloat16).to(DEVICE)
    w = (1 + 0.1 * torch.randn(H, generator=g)).to(torch.bfloat16).to(DEVICE)
    kw = _quant_kwargs(MODES[mode])
    q, scales, y = addrmsnorm.rmsnorm_quant(x, w, quant_dtype=qdtype, return_y=True, **kw)
    fq, _, fscales, fy = addrmsnorm.fused_add_rmsnorm_quant(x, torch.zeros_like(x), w, quant_dtype=qdtype,
                                                            return_y=True, **kw)
    qm = configs.quant_kernel_mode("scale" in kw, kw.get("group_size", 0), validation.QUANT_DTYPE_NAMES[qdtype])
    if configs.select_forward_config(H, 2, 2, qm) == configs.select_forward_config(H, 2, 2, qm, plain=True):
        assert torch.equal(bits(q), bits(fq)) and torch.equal(bits(y), bits(fy))
        assert torch.equal(bits(scales), bits(fscales))
    else:
        torch.testing.assert_close(y, fy, rtol=2 ** -7, atol=0)
        torch.testing.assert_close(scales, fscales, rtol=2 ** -20, atol=0)
        qf, fqf = q.float(), fq.float()
        assert ((qf - fqf).abs() <= torch.maximum(torch.ones_like(fqf), fqf.abs() / 8)).all()
        assert (qf != fqf).float().mean() < 1e-3
    # Into given outputs, with a padded row stride for q.
    qbuf = torch.zeros(5, H + 16, dtype=qdtype, device=DEVICE)
    sc = None if "scale" in kw else torch.empty_like(fscales)
    q2, s2 = addrmsnorm.rmsnorm_quant(x, w, quant_dtype=qdtype, out=qbuf[:, :H], scales_out=sc, **kw)
    assert torch.equal(bits(q2), bits(q)) and torch.equal(bits(s2), bits(scales))
    assert not bits(qbuf[:, H:]).any(), "the padding was written"


def test_rmsnorm_quant_refusals():
    x = torch.randn(4, 64, device=DEVICE).to(torch.bfloat16)
    w = torch.ones(64, device=DEVICE, dtype=torch.bfloat16)
    assert_refused(TypeError, r"x(_dtype is | has dtype torch\.)float32; quantized outputs take x of float16 or bfloat16",
                   lambda: addrmsnorm.rmsnorm_quant(x.float(), w.float(), quant_dtype=torch.int8), x)
    assert_refused(ValueError, "H=40 is not a multiple of 16",
                   lambda: addrmsnorm.rmsnorm_quant(x[:, :40], w[:40], quant_dtype=torch.int8), x)
    y = torch.zeros(4, 64, dtype=torch.bfloat16, device=DEVICE)
    assert_refused(ValueError, "out overlaps x",
                   lambda: OPS.norm_quant_into(x, None, w, x.view(torch.int8)[:, :64], None, None, None, 1e-6,
                                                torch.ones(1, device=DEVICE)), x, y)
    g = x.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="quantized outputs are for inference"):
        addrmsnorm.rmsnorm_quant(g, w, quant_dtype=torch.int8)


def test_opcheck_and_compile():
    import torch._dynamo

    qkv = _qkv(6, 2, 1, 64, torch.bfloat16, seed=9)
    wq, wk = _weights(64, torch.bfloat16)
    x = torch.randn(6, 128, device=DEVICE).to(torch.bfloat16)
    w = torch.ones(128, device=DEVICE, dtype=torch.bfloat16)
    opcheck = torch.library.opcheck
    opcheck(OPS.qk_rmsnorm_.default, (qkv.clone(), wq, wk, 1e-6, 2, 1, 64))
    opcheck(OPS.norm_quant.default, (x, None, w, 1e-6, torch.int8, None, 64))
    opcheck(OPS.norm_quant_into.default, (x, None, w, torch.empty(6, 128, dtype=torch.int8, device=DEVICE), None,
                                          torch.empty(6, device=DEVICE), None, 1e-6))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()

    def f(qkv, x):
        addrmsnorm.qk_rmsnorm_(qkv, wq, wk, num_q_heads=2, num_kv_heads=1, head_dim=64)
        return qkv, addrmsnorm.rmsnorm_quant(x, w, quant_dtype=torch.int8)

    with torch.no_grad():
        a, (qa, sa) = f(qkv.clone(), x)
        b, (qb, sb) = torch.compile(f, fullgraph=True, backend="inductor" if ON_GPU else "aot_eager")(qkv.clone(), x)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert torch.equal(bits(a), bits(b)) and torch.equal(qa, qb) and torch.equal(sa, sb)


@gpu_only
def test_c_abi_and_both_backends_give_the_same_bits():
    from addrmsnorm import c_library
    lib = c_library_or_skip()
    for T, nq, nk, D in ((1, 32, 8, 128), (300, 16, 4, 128), (77, 8, 2, 256)):
        qkv = _qkv(T, nq, nk, D, torch.bfloat16, seed=T)
        wq, wk = _weights(D, torch.bfloat16)
        op, jit, c = qkv.clone(), qkv.clone(), qkv.clone()
        addrmsnorm.qk_rmsnorm_(op, wq, wk, num_q_heads=nq, num_kv_heads=nk, head_dim=D)
        jit_backend.qk_rmsnorm_(jit, wq, wk, 1e-6, nq, nk, D)
        c_library.qk_rmsnorm(lib, c, wq, wk, nq, nk, D)
        # The plain norm on q's view through the C ABI (two leading strides), out of place.
        qv = qkv[:, :nq * D].view(T, nq, D)
        yq = torch.empty(T, nq, D, dtype=torch.bfloat16, device=DEVICE)
        rstd = torch.empty(T * nq, device=DEVICE)
        c_library.rmsnorm(lib, qv, wq, yq, rstd)
        torch.cuda.synchronize()
        assert torch.equal(bits(op), bits(jit)) and torch.equal(bits(op), bits(c)), (T, nq, nk, D)
        assert torch.equal(bits(yq), bits(op[:, :nq * D].view(T, nq, D)))
        assert torch.equal(rstd.view(T, nq), addrmsnorm.rmsnorm(qv, wq, return_rstd=True)[1])
    for H in (4096, 8192, 32768):
        g = torch.Generator().manual_seed(H)
        x = torch.randn(33, H, generator=g).to(torch.bfloat16).to(DEVICE)
        w = (1 + 0.1 * torch.randn(H, generator=g)).to(torch.bfloat16).to(DEVICE)
        y = torch.empty_like(x)
        c_library.rmsnorm(lib, x, w, y)
        for kw in MODES:
            kw = _quant_kwargs(kw)
            want = addrmsnorm.rmsnorm_quant(x, w, quant_dtype=torch.float8_e4m3fn, return_y=True, **kw)
            jit = jit_backend.norm_quant(x, None, w, 1e-6, torch.float8_e4m3fn, kw.get("scale"), kw.get("group_size", 0),
                                         kw.get("scale_ub"), ue8m0_scales=kw.get("ue8m0_scales", False), return_y=True)
            jit = (jit[0], jit[2])  # q and the scales
            q = torch.empty(33, H, dtype=torch.float8_e4m3fn, device=DEVICE)
            yq = torch.empty_like(x)
            scales = None if "scale" in kw else torch.empty(want[1].shape, device=DEVICE)
            c_library.rmsnorm_quant(lib, x, w, q, yq, scale=kw.get("scale"), group_size=kw.get("group_size", 0),
                                    scale_ub=kw.get("scale_ub"), scales=scales, ue8m0=kw.get("ue8m0_scales", False))
            torch.cuda.synchronize()
            assert torch.equal(bits(q), bits(want[0])) and torch.equal(bits(q), bits(jit[0])), (H, kw)
            assert torch.equal(bits(yq), bits(want[2]))
            if scales is not None:
                assert torch.equal(scales, want[1]) and torch.equal(scales, jit[1])
        assert torch.equal(bits(y), bits(addrmsnorm.rmsnorm(x, w)))
        # The backward through the C ABI and through autograd: the same bits.
        xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
        yg, rstd = addrmsnorm.rmsnorm(xg, wg, return_rstd=True)
        dy = torch.randn_like(x)
        yg.backward(dy)
        dx, dw = c_library.rmsnorm_backward(lib, dy, x, rstd, w)
        torch.cuda.synchronize()
        assert torch.equal(bits(dx), bits(xg.grad)) and torch.equal(bits(dw), bits(wg.grad)), H


@gpu_only
def test_qk_norm_in_a_cuda_graph_with_pdl():
    qkv = _qkv(64, 32, 8, 128, torch.bfloat16, seed=1)
    wq, wk = _weights(128, torch.bfloat16)
    static = qkv.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        addrmsnorm.qk_rmsnorm_(static.clone(), wq, wk, num_q_heads=32, num_kv_heads=8, head_dim=128, pdl=True)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        addrmsnorm.qk_rmsnorm_(static, wq, wk, num_q_heads=32, num_kv_heads=8, head_dim=128, pdl=True)
    for seed in (2, 3):
        fresh = _qkv(64, 32, 8, 128, torch.bfloat16, seed=seed)
        static.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        addrmsnorm.qk_rmsnorm_(fresh, wq, wk, num_q_heads=32, num_kv_heads=8, head_dim=128)
        assert torch.equal(bits(static), bits(fresh))
