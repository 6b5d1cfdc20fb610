"""The forward kernel against the reference over a boundary grid.

Under TRITON_INTERPRET=1 (CPU) the grid is small; on a GPU it is the full grid. Every case poisons
the outputs first (NaN), so an element the kernel forgets to write fails the check, and strided
cases check that the padding between rows is untouched.
"""

import pytest
import torch

import addrmsnorm
from addrmsnorm import configs
from addrmsnorm.configs import SINGLE_PASS_MAX_H, select_forward_config

from conftest import DEVICE, ON_GPU, gpu_only, needs_kernels
from helpers import DTYPE_COMBOS, bits, check_forward, combo_id, make_inputs

pytestmark = needs_kernels

LOOPED_H = SINGLE_PASS_MAX_H + 500  # the looped two-pass path (8-byte rows: no vector-typed single pass)
KEPT_H = configs.QUANT_SINGLE_PASS_MAX_H + 16  # the looped path, which keeps h in L2 between the passes
WIDE_H = 24576 if ON_GPU else SINGLE_PASS_MAX_H + 16  # vector-typed 16-bit calls: one pass up to 32768

if ON_GPU:
    NS = [1, 19, 99, 989, 16384]
    HS = [1, 111, 500, 1024, 3000, 3584, 4096, 5120, 8192, 11111, 16384, 65536, 131072, 262144]
    MODE_NS = [19, 989]
else:
    NS = [1, 3, 19]
    HS = [1, 7, 64, 111, 500, 3000, 4100, 8193, LOOPED_H]  # 8193: odd H, the re-read rule
    MODE_NS = [19]

# Keep the GPU grid's largest cases to a size whose fp64 reference fits comfortably, also with
# eight pytest-xdist workers sharing one GPU (989 x 262144 ran out of memory that way on an H200).
MAX_ELEMENTS = 200_000_000


def _skip_if_too_big(N, H):
    if N * H > MAX_ELEMENTS:
        pytest.skip(f"{N}x{H} exceeds the grid's element cap (the >2**31 case is tested apart)")


@pytest.mark.parametrize("combo", DTYPE_COMBOS, ids=combo_id)
@pytest.mark.parametrize("H", HS)
@pytest.mark.parametrize("N", NS)
def test_out_of_place(N, H, combo):
    _skip_if_too_big(N, H)
    x, r, w = make_inputs(N, H, combo, DEVICE, seed=N * 7919 + H)
    x0, r0, w0 = x.clone(), r.clone(), w.clone()
    out = torch.full_like(x, float("nan"))
    rout = torch.full_like(r, float("nan"))
    eps, off = 1e-6, (1.0 if H % 2 else 0.0)  # odd H also exercises Gemma's 1 + w
    y, ro, rstd = addrmsnorm.fused_add_rmsnorm(x, r, w, eps, weight_offset=off, out=out,
                                               residual_out=rout, return_rstd=True)
    assert y is out and ro is rout
    assert torch.equal(bits(x), bits(x0)) and torch.equal(bits(r), bits(r0))  # inputs untouched
    assert torch.equal(bits(w), bits(w0))
    check_forward(x0, r0, w0, y, ro, rstd, eps, off, what=f"{N}x{H}")


@pytest.mark.parametrize("combo", DTYPE_COMBOS[:4], ids=combo_id)
@pytest.mark.parametrize("H", HS)
@pytest.mark.parametrize("N", MODE_NS)
@pytest.mark.parametrize("mode", ["inplace_vllm", "inplace_x_gets_h", "out_aliases_residual",
                                  "strided", "allocating"])
def test_modes(mode, N, H, combo):
    """In place in both conventions, out into the residual buffer, row-strided views, and the
    allocating call."""
    _skip_if_too_big(N, H)
    x, r, w = make_inputs(N, H, combo, DEVICE, seed=H + 31 * N)
    x0, r0, w0 = x.clone(), r.clone(), w.clone()
    eps, off = 1e-5, 0.25
    if mode == "inplace_vllm":
        y, ro = addrmsnorm.fused_add_rmsnorm_(x, r, w, eps, weight_offset=off)
        assert y is x and ro is r
        rstd = None
    elif mode == "inplace_x_gets_h":
        if x.dtype != r.dtype:
            pytest.skip("x <- h needs residual_out in x's dtype")
        y, ro, rstd = addrmsnorm.fused_add_rmsnorm(x, r, w, eps, weight_offset=off,
                                                   residual_out=x, return_rstd=True)
        assert ro is x
    elif mode == "out_aliases_residual":
        if x.dtype != r.dtype:
            pytest.skip("out into residual needs residual in x's dtype")
        y, ro, rstd = addrmsnorm.fused_add_rmsnorm(x, r, w, eps, weight_offset=off,
                                                   out=r, residual_out=x, return_rstd=True)
        assert y is r and ro is x
    elif mode == "strided":
        pad = 13  # an odd pad: rows start at addresses with no common alignment
        def wide(t):
            buf = torch.full((N, H + pad), 7.0, dtype=t.dtype, device=t.device)
            buf[:, :H] = t
            return buf
        xb, rb = wide(x), wide(r)
        ob = torch.full((N, H + 2 * pad), 7.0, dtype=x.dtype, device=x.device)
        rob = torch.full((N, H + 3 * pad), 7.0, dtype=r.dtype, device=r.device)
        y, ro, rstd = addrmsnorm.fused_add_rmsnorm(xb[:, :H], rb[:, :H], w, eps, weight_offset=off,
                                                   out=ob[:, :H], residual_out=rob[:, :H],
                                                   return_rstd=True)
        for name, b in (("x", xb), ("residual", rb), ("out", ob), ("residual_out", rob)):
            assert (b[:, H:] == 7.0).all(), f"{name}: the padding between rows was written"
    else:
        y, ro, rstd = addrmsnorm.fused_add_rmsnorm(x, r, w, eps, weight_offset=off, return_rstd=True)
    check_forward(x0, r0, w0, y, ro, rstd, eps, off, what=f"{mode} {N}x{H}")


@pytest.mark.parametrize("lead", [(2, 3), (1,), (4, 1, 5)])
def test_leading_dims_are_flattened(lead):
    H = 111
    x, r, w = make_inputs(None, H, DTYPE_COMBOS[1], DEVICE, lead=lead)
    y, ro, rstd = addrmsnorm.fused_add_rmsnorm(x, r, w, return_rstd=True)
    assert y.shape == x.shape and ro.shape == x.shape and rstd.shape == lead
    check_forward(x, r, w, y, ro, rstd, 1e-6, 0.0)


def test_strided_3d_view_is_not_copied():
    """A (B, T, H) view of a wider buffer flattens to rows of one stride, with no copy."""
    B, T, H, W = 2, 3, 100, 128
    x, r, w = make_inputs(None, H, DTYPE_COMBOS[1], DEVICE, lead=(B, T))
    buf = torch.zeros(B, T, W, dtype=x.dtype, device=DEVICE)
    buf[..., :H] = x
    out = torch.full((B, T, W), 3.0, dtype=x.dtype, device=DEVICE)
    y, ro = addrmsnorm.fused_add_rmsnorm(buf[..., :H], r, w, out=out[..., :H])
    assert y.data_ptr() == out.data_ptr()
    assert (out[..., H:] == 3.0).all()
    check_forward(x, r, w, y, ro, None, 1e-6, 0.0)


def test_empty_rows_launch_nothing(monkeypatch):
    import addrmsnorm.jit_backend as J

    def boom(*a, **k):
        raise AssertionError("launched a kernel for N = 0")
    monkeypatch.setattr(J, "launch_forward", boom)
    x, r, w = make_inputs(0, 64, DTYPE_COMBOS[0], DEVICE)
    y, ro, rstd = J.norm(x, r, w, 1e-6, return_rstd=True)
    assert y.shape == (0, 64) and ro.shape == (0, 64) and rstd.shape == (0,)
    J.norm_(x, r, w, 1e-6)
    # And through the operators, on whichever backend serves this device.
    y, ro, rstd = addrmsnorm.fused_add_rmsnorm(x, r, w, return_rstd=True)
    assert y.shape == (0, 64) and ro.shape == (0, 64) and rstd.shape == (0,)
    y, ro = addrmsnorm.fused_add_rmsnorm_(x, r, w)
    assert y is x and ro is r


def _check_in_place_and_into_outputs(x, r, w, mode, what):
    """Run the forward in place ("in_place") or into NaN-filled given outputs, and check it."""
    x0, r0, w0 = x.clone(), r.clone(), w.clone()
    if mode == "in_place":
        y, ro = addrmsnorm.fused_add_rmsnorm_(x, r, w, 1e-6)
        assert y is x and ro is r
    else:
        y, ro = addrmsnorm.fused_add_rmsnorm(x, r, w, 1e-6, out=torch.full_like(x, float("nan")),
                                             residual_out=torch.full_like(r, float("nan")))
    check_forward(x0, r0, w0, y, ro, None, 1e-6, 0.0, what=what)


@pytest.mark.parametrize("combo", DTYPE_COMBOS[:4], ids=combo_id)
@pytest.mark.parametrize("mode", ["out_of_place", "in_place"])
def test_the_looped_path_that_keeps_h_in_l2(mode, combo):
    """Pass 1 stores h with an evict-last hint and pass 2 reloads it: into given outputs, and in
    place, where h overwrites the residual it was summed from and y the x."""
    x, r, w = make_inputs(5, KEPT_H, combo, DEVICE, seed=KEPT_H)
    assert select_forward_config(KEPT_H, x.element_size(), r.element_size()).keep_h
    _check_in_place_and_into_outputs(x, r, w, mode, f"5x{KEPT_H} {mode}")


@pytest.mark.parametrize("combo", [DTYPE_COMBOS[0], DTYPE_COMBOS[1], DTYPE_COMBOS[5]], ids=combo_id)
@pytest.mark.parametrize("mode", ["out_of_place", "in_place"])
def test_the_vector_typed_single_pass_beyond_16384(mode, combo):
    """At 16384 < H <= 32768 a 16-bit call with 16-byte rows and the weight of x's dtype keeps the row
    in one pass; with an fp32 weight (the last combo) the same rows loop. Both match the reference,
    into given outputs and in place."""
    x, r, w = make_inputs(5, WIDE_H, combo, DEVICE, seed=WIDE_H)
    typed = w.dtype == x.dtype
    cfg = select_forward_config(WIDE_H, 2, 2, vector_typed=configs.is_vector_typed(8, 2, 2, typed, configs.CONTRACT))
    assert cfg.looped != typed and (typed or cfg.keep_h)
    _check_in_place_and_into_outputs(x, r, w, mode, f"5x{WIDE_H} {mode}")


def test_the_launcher_asks_for_the_vector_typed_rows_only_for_such_calls(monkeypatch):
    """The JIT launcher's vector_typed (configs.is_vector_typed): 16-byte rows, the weight of x's dtype
    and the contract's numerics, each needed; forward.cpp has the same rule (tests/cpp/host_test.cpp)."""
    from addrmsnorm import launcher

    seen = []
    real = launcher.select_forward_config

    def spy(*args, **kwargs):
        seen.append(kwargs.get("vector_typed"))
        return real(*args, **kwargs)

    monkeypatch.setattr(launcher, "select_forward_config", spy)
    H = WIDE_H
    x, r, w = make_inputs(2, H + 8, DTYPE_COMBOS[0], DEVICE, seed=1)
    w32 = w.float()

    def call(xv, rv, wv, hf=False):
        out, ro = torch.empty_like(xv), torch.empty_like(rv)
        launcher.launch_forward(xv, rv, wv, out, ro, None, n_rows=xv.shape[0], H=xv.shape[-1],
                                stride_x=xv.stride(0), stride_residual=rv.stride(0), stride_out=H,
                                stride_residual_out=H, eps=1e-6, weight_offset=0.0, hf=hf)

    call(x[:, :H], r[:, :H], w[:H])                   # 16-byte rows (stride H + 8), typed weight: True
    call(x[:, :H], r[:, :H], w32[:H])                 # an fp32 weight: False
    call(x[:, :H], r[:, :H], w[:H], hf=True)          # HF numerics: False
    call(x[:, 4:H + 4], r[:, 4:H + 4], w[4:H + 4])    # rows start 8 bytes off 16: False
    assert seen == [True, False, False, False]


@pytest.mark.parametrize("H", [111, 4096] + ([11111, 24576, 65536] if ON_GPU else [LOOPED_H]))
@pytest.mark.parametrize("combo", [DTYPE_COMBOS[0], DTYPE_COMBOS[3]], ids=combo_id)
def test_batch_invariance(H, combo):
    """A row's outputs are bitwise the same alone as among 989 rows, at any position."""
    N = 989 if ON_GPU else 37
    x, r, w = make_inputs(N, H, combo, DEVICE, seed=H)
    y, ro, rstd = addrmsnorm.fused_add_rmsnorm(x, r, w, return_rstd=True)
    for i in (0, 1, N // 2, N - 2, N - 1):
        yi, roi, rstdi = addrmsnorm.fused_add_rmsnorm(x[i:i + 1], r[i:i + 1], w, return_rstd=True)
        assert torch.equal(bits(yi), bits(y[i:i + 1])), f"row {i}: y differs alone vs in a batch"
        assert torch.equal(bits(roi), bits(ro[i:i + 1]))
        assert torch.equal(bits(rstdi), bits(rstd[i:i + 1])), f"row {i}: rstd differs"
    # The same row moved to another position among other rows.
    perm = torch.roll(torch.arange(N), 5)
    y2, _, rstd2 = addrmsnorm.fused_add_rmsnorm(x[perm], r[perm], w, return_rstd=True)
    assert torch.equal(bits(y2), bits(y[perm])) and torch.equal(bits(rstd2), bits(rstd[perm]))


@pytest.mark.parametrize("H", [4100, 3002] if ON_GPU else [20, 42])
@pytest.mark.parametrize("combo", [DTYPE_COMBOS[0], DTYPE_COMBOS[3]], ids=combo_id)
def test_batch_invariance_in_narrow_alignment_classes(H, combo):
    """H a multiple of 4 (8-byte rows) or of 2 elements but not of 8: rows take 8- or 4-byte accesses.
    A row alone in a tensor of its own gives the same bits as in its batch, at any position."""
    N = 301 if ON_GPU else 19
    x, r, w = make_inputs(N, H, combo, DEVICE, seed=H)
    y, ro, rstd = addrmsnorm.fused_add_rmsnorm(x, r, w, return_rstd=True)
    for i in (0, 1, 2, 3, N - 1):
        yi, roi, rstdi = addrmsnorm.fused_add_rmsnorm(x[i:i + 1].clone(), r[i:i + 1].clone(), w, return_rstd=True)
        assert torch.equal(bits(yi), bits(y[i:i + 1])), f"row {i}: y differs alone vs in a batch"
        assert torch.equal(bits(roi), bits(ro[i:i + 1])) and torch.equal(bits(rstdi), bits(rstd[i:i + 1]))


def _rmsnorm_chain(fused, x, residual, weights, mats):
    """64 layers of: (y, residual) = fused(x, residual, w); x = y @ W."""
    for w, m in zip(weights, mats):
        y, residual = fused(x, residual, w)
        x = y @ m
    return residual


@pytest.mark.parametrize("stream", ["narrow", "fp32"])
@pytest.mark.parametrize("dtype", ["bf16"] if ON_GPU else ["fp16"])
def test_64_layer_drift(dtype, stream):
    """Over 64 layers the residual stream drifts from float64 no more than the contract's fp32-add
    math does. With an fp32 residual stream, it also drifts clearly less than an implementation
    that adds in the narrow dtype (which shows the test can tell the difference)."""
    from addrmsnorm.reference import fused_add_rmsnorm_ref, hf_style_ref
    from helpers import DTYPES

    dt = DTYPES[dtype]
    rdt = dt if stream == "narrow" else torch.float32
    gen = torch.Generator().manual_seed(1234)
    N, H, L = (64, 1024, 64) if ON_GPU else (8, 256, 64)
    x0 = torch.randn(N, H, generator=gen).to(DEVICE)
    r0 = torch.randn(N, H, generator=gen).mul(4).to(DEVICE)
    ws = [(1 + 0.1 * torch.randn(H, generator=gen)).to(DEVICE) for _ in range(L)]
    ms = [(torch.randn(H, H, generator=gen) / H ** 0.5).to(DEVICE) for _ in range(L)]

    def ref64(x, res, w):
        return fused_add_rmsnorm_ref(x, res, w, 1e-6).y, x + res  # all float64, the add too

    def contract_fp32(x, res, w):
        out = fused_add_rmsnorm_ref(x, res, w, 1e-6, compute_dtype=torch.float32)
        return out.y.to(x.dtype), out.residual_out

    def ours(x, res, w):
        return addrmsnorm.fused_add_rmsnorm(x, res, w, 1e-6)

    def narrow_add(x, res, w):
        return hf_style_ref(x, res.to(x.dtype), w, 1e-6)  # the residual stream drops to x's dtype

    truth = _rmsnorm_chain(ref64, x0.double(), r0.double(), [w.double() for w in ws],
                           [m.double() for m in ms])

    def drift(fn):
        res = _rmsnorm_chain(fn, x0.to(dt), r0.to(rdt), [w.to(dt) for w in ws],
                             [m.to(dt) for m in ms])
        return ((res.double() - truth).norm() / truth.norm()).item()

    d_ours, d_fp32 = drift(ours), drift(contract_fp32)
    print(f"drift ours={d_ours:.3e} fp32-contract={d_fp32:.3e}")
    assert d_ours <= 1.25 * d_fp32 + 1e-7, (d_ours, d_fp32)
    if stream == "fp32":
        d_narrow = drift(narrow_add)
        print(f"drift narrow-add={d_narrow:.3e}")
        assert d_narrow > 1.5 * d_ours, (d_narrow, d_ours)


@gpu_only
@pytest.mark.large
def test_more_than_2_31_elements():
    """Row offsets past 2**31 elements: the last rows of a (16385, 131072) bf16 tensor."""
    N, H = 16385, 131072
    assert N * H > 2 ** 31
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(N, H, device="cuda", dtype=torch.bfloat16, generator=gen)
    r = torch.randn(N, H, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(H, device="cuda", dtype=torch.bfloat16, generator=gen)
    tail = slice(N - 3, N)
    xt, rt = x[tail].clone(), r[tail].clone()
    y, ro, rstd = addrmsnorm.fused_add_rmsnorm_(x, r, w)[0], r, None
    check_forward(xt, rt, w, y[tail], ro[tail], rstd, 1e-6, 0.0, what="rows past 2**31 elements")
