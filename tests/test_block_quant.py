"""Block-scaled outputs (NVFP4, MXFP8, MXFP4) against reference.block_quantize_ref, bit for bit.

Integer activations in [-4, 4] and power-of-two weights make every step before the format exact or
correctly rounded in fp32 (the sum of squares is exact; rstd, its divide and sqrt, are correctly rounded in
both), so the reference computes the kernel's fp32 y exactly and every byte of q and of the scales must
match, on the GPU and under the interpreter (which rounds e4m3 arithmetically, as the int8 path does).
"""

import pytest
import torch
import triton
import triton.language as tl

import addrmsnorm
from addrmsnorm import configs, kernels, validation
from addrmsnorm.reference import block_quantize_ref, e2m1_codes_ref, e2m1_values_ref, swizzle_scales_ref

from conftest import DEVICE, ON_GPU, needs_kernels
from helpers import bits, expected_residual_out

pytestmark = needs_kernels

FORMATS = {"nvfp4": (torch.float4_e2m1fn_x2, 16), "mxfp8": (torch.float8_e4m3fn, 32),
           "mxfp4": (torch.float4_e2m1fn_x2, 32)}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# The rows of the standard grid whose H is a multiple of the block (4100, 11111 and 3000 are not), up to the
# looped path (> 32768), and rows of one and two blocks (a tile narrower than the swizzled layout's 4 blocks).
H_GRID = ([32, 64, 128, 512, 1024, 2048, 2880, 3584, 4096, 5120, 7168, 8192, 14336, 16384, 32768, 65536, 131072]
          if ON_GPU else [32, 64, 256, 4096, 32896])


def exact_inputs(N, H, dtype, seed, plain=False, zero_block=True, w_exp=(-2, 3)):
    """x and residual integers in [-4, 4] (|h| <= 8: every sum of squares exact up to H = 131072), the
    weight powers of two; the second 32 columns of every other row all zero (a block of amax 0)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-4, 5, (N, H), generator=g).to(dtype)
    r = torch.randint(-4, 5, (N, H), generator=g).to(dtype)
    if zero_block and H >= 64:
        x[::2, 32:64] = 0
        r[::2, 32:64] = 0
    w = (2.0 ** torch.randint(*w_exp, (H,), generator=g)).to(dtype)
    return x.to(DEVICE), r.to(DEVICE), w.to(DEVICE)


def exact_y(x, r, w, eps, plain=False):
    """The kernel's fp32 y, exactly: h * rstd * w with rstd = 1 / sqrt(sum(h * h) / H + eps), correctly rounded
    (the weight a power of two, so the looped path's (h * w) * rstd is the same value)."""
    h = x.float() if plain else x.float() + r.float()
    H = h.shape[-1]
    rstd = torch.reciprocal(torch.sqrt((h * h).sum(-1) / h.new_tensor(float(H)) + eps))
    return h * rstd[:, None] * w.float()


def run(fmt, x, r, w, eps, plain, global_scale=None, swizzled=False, **kw):
    qd, gs = FORMATS[fmt]
    if plain:
        q, s = addrmsnorm.rmsnorm_quant(x, w, eps, quant_dtype=qd, group_size=gs, scale=global_scale,
                                        swizzled_scales=swizzled, **kw)
        return q, s, None
    q, h, s = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, eps, quant_dtype=qd, group_size=gs, scale=global_scale,
                                                 swizzled_scales=swizzled, **kw)
    return q, s, h


def expect(fmt, y, global_scale, swizzled):
    q, s = block_quantize_ref(y, fmt, global_scale)
    return q, (swizzle_scales_ref(s) if swizzled else s)


def assert_bits(actual, expected, what):
    a, e = bits(actual), bits(expected)
    assert a.shape == e.shape, f"{what}: {a.numel()} bytes, expected {e.numel()}"
    differ = (a != e).nonzero()
    assert differ.numel() == 0, (f"{what}: {differ.numel()} of {a.numel()} bytes differ, first at byte "
                                 f"{int(differ[0])}: {int(a[differ[0]])} against {int(e[differ[0]])}")


@pytest.mark.parametrize("swizzled", [False, True])
@pytest.mark.parametrize("plain", [False, True])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("H", H_GRID)
def test_block_formats_match_the_reference_bit_for_bit(fmt, H, dtype, plain, swizzled):
    qd, gs = FORMATS[fmt]
    if H % gs:
        pytest.skip(f"H={H} is not a multiple of the block ({gs})")
    N = 67 if ON_GPU else 3  # not a multiple of 128: the swizzled layout's padded rows
    x, r, w = exact_inputs(N, H, DTYPES[dtype], seed=H + gs)
    eps = 1e-6
    g = torch.tensor([0.37], device=DEVICE) if fmt == "nvfp4" else None
    q, s, h = run(fmt, x, r, w, eps, plain, g, swizzled)
    q_ref, s_ref = expect(fmt, exact_y(x, r, w, eps, plain), g, swizzled)
    assert q.dtype == qd and q.shape == q_ref.shape
    assert s.dtype == (torch.float8_e4m3fn if fmt == "nvfp4" else torch.float8_e8m0fnu)
    assert_bits(q, q_ref, "q")
    assert_bits(s, s_ref, "scales")
    if h is not None:
        assert torch.equal(bits(h), bits(expected_residual_out(x.float() + r.float(), r.dtype))), \
            "residual_out is not bit-exact"


@pytest.mark.parametrize("g", [1e-3, 0.37, 3000.0], ids=["subnormal-scales", "normal", "saturating"])
@pytest.mark.parametrize("swizzled", [False, True])
def test_nvfp4_global_scales_from_subnormal_to_saturating(g, swizzled):
    """g = 1e-3: block scales below e4m3's smallest normal (and some 0, whose q must be 0); g = 3000: scales
    saturate at 448 and q at 6."""
    N, H = (300, 4096) if ON_GPU else (5, 256)
    x, r, w = exact_inputs(N, H, torch.bfloat16, seed=7)
    gt = torch.tensor([g], device=DEVICE)
    q, s, _ = run("nvfp4", x, r, w, 1e-6, False, gt, swizzled)
    q_ref, s_ref = expect("nvfp4", exact_y(x, r, w, 1e-6), gt, swizzled)
    assert_bits(q, q_ref, "q")
    assert_bits(s, s_ref, "scales")
    s_lin = block_quantize_ref(exact_y(x, r, w, 1e-6), "nvfp4", gt)[1].float()
    if g == 1e-3:
        assert ((s_lin > 0) & (s_lin < 2.0 ** -6)).any(), "no subnormal scale was exercised"
    if g == 3000.0:
        assert (s_lin == 448).any(), "no saturated scale was exercised"
        codes = q.view(torch.uint8)
        assert ((codes & 0x7) == 7).any() or ((codes >> 4) & 0x7 == 7).any()


@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4"])
def test_mx_scales_down_to_the_smallest(fmt):
    """Weights of 2**-120 (bf16): amax / qmax falls below fp32's normals, and the scales reach biased exponents
    0 and 1 (2**-127, 2**-126); zero blocks get 0."""
    N, H = (64, 2048) if ON_GPU else (4, 128)
    x, r, w = exact_inputs(N, H, torch.bfloat16, seed=11, w_exp=(-121, -118))
    q, s, _ = run(fmt, x, r, w, 1e-6, False)
    y = exact_y(x, r, w, 1e-6)
    q_ref, s_ref = expect(fmt, y, None, False)
    assert_bits(q, q_ref, "q")
    assert_bits(s, s_ref, "scales")
    assert (s_ref.view(torch.uint8) <= 1).any(), "no scale at the bottom of e8m0 was exercised"


def test_swizzle_reference_index_by_index():
    """reference.swizzle_scales_ref against the formula, one element at a time, with padded rows and blocks."""
    rows, blocks = 130, 6
    s = torch.arange(rows * blocks, dtype=torch.int64).remainder(251).add(1).to(torch.uint8).reshape(rows, blocks)
    k4 = 8
    want = [0] * (256 * k4)
    for m in range(rows):
        for k in range(blocks):
            want[((m // 128) * (k4 // 4) + k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + k % 4] = \
                int(s[m, k])
    assert swizzle_scales_ref(s).tolist() == want


def test_e2m1_reference_rounds_to_nearest_even_and_saturates():
    v = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.99, 1e9, -0.1, -0.0, 0.26, -3.0])
    assert e2m1_values_ref(e2m1_codes_ref(v)).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, -0.0,
                                                           0.0, 0.5, -3.0]
    assert e2m1_codes_ref(torch.tensor([-0.1, -0.0])).tolist() == [8, 0]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_into_given_outputs_and_in_place_write_the_same_bits(fmt):
    qd, gs = FORMATS[fmt]
    N, H = (33, 1024) if ON_GPU else (3, 128)
    x, r, w = exact_inputs(N, H, torch.float16, seed=3)
    g = torch.tensor([0.5], device=DEVICE) if fmt == "nvfp4" else None
    q0, _, s0 = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=qd, group_size=gs, scale=g,
                                                   swizzled_scales=True)
    out = torch.empty_like(q0)
    scales_out = torch.empty_like(s0)
    r2 = r.clone()
    q1, h1, s1 = addrmsnorm.fused_add_rmsnorm_quant_(x, r2, w, out=out, group_size=gs, scale=g,
                                                     scales_out=scales_out, swizzled_scales=True)
    assert q1 is out and s1 is scales_out and h1 is r2
    assert_bits(q1, q0, "q in place")
    assert_bits(s1, s0, "scales in place")
    assert torch.equal(bits(r2), bits(expected_residual_out(x.float() + r.float(), r.dtype)))


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("plain", [False, True])
@pytest.mark.parametrize("H", [2304, 32896])  # one pass (144 NVFP4 blocks: padding in 3 steps of 16 words), looped
def test_swizzled_padding_is_written_over_a_buffer_of_garbage(fmt, plain, H):
    """The padded rows' zero scales are written by the grid's last program, over whatever scales_out held:
    into a buffer of 0xFF bytes, every byte must be the reference's, the padding's zeros included."""
    qd, gs = FORMATS[fmt]
    for N in ((1, 67, 133, 256) if ON_GPU else (1, 5)):  # 133: the padding of the second tile; 256: none
        x, r, w = exact_inputs(N, H, torch.bfloat16, seed=N)
        g = torch.tensor([0.25], device=DEVICE) if fmt == "nvfp4" else None
        q_ref, s_ref = expect(fmt, exact_y(x, r, w, 1e-6, plain), g, True)
        scales_out = torch.full(s_ref.shape, 255, dtype=torch.uint8, device=DEVICE).view(
            torch.float8_e4m3fn if fmt == "nvfp4" else torch.float8_e8m0fnu)
        if plain:
            q, s = addrmsnorm.rmsnorm_quant(x, w, 1e-6, quant_dtype=qd, group_size=gs, scale=g,
                                            scales_out=scales_out, swizzled_scales=True)
        else:
            q, _, s = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, 1e-6, quant_dtype=qd, group_size=gs, scale=g,
                                                         scales_out=scales_out, swizzled_scales=True)
        assert s is scales_out
        assert_bits(q, q_ref, f"q, N={N}")
        assert_bits(s, s_ref, f"swizzled scales over 0xFF, N={N}")


@pytest.mark.parametrize("plain", [False, True])
def test_swizzled_scales_out_off_a_16_byte_boundary_is_refused_with_nothing_written(plain):
    x, r, w = exact_inputs(3, 64, torch.bfloat16, seed=7)
    buf = torch.zeros(validation.swizzled_scales_numel(3, 64, 32) + 1, dtype=torch.uint8, device=DEVICE)
    scales_out = buf[1:].view(torch.float8_e8m0fnu)  # one byte past an aligned start
    kw = dict(quant_dtype=torch.float8_e4m3fn, group_size=32, scales_out=scales_out, swizzled_scales=True)
    with pytest.raises(ValueError, match="scales_out must start on a 16-byte boundary"):
        if plain:
            addrmsnorm.rmsnorm_quant(x, w, **kw)
        else:
            addrmsnorm.fused_add_rmsnorm_quant(x, r, w, **kw)
    assert torch.count_nonzero(buf) == 0


def test_scale_dtype_and_default_group_size_choose_the_format():
    x, r, w = exact_inputs(2, 64, torch.bfloat16, seed=5)
    g = torch.tensor([1.0], device=DEVICE)
    q, _, s = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.float4_e2m1fn_x2, scale=g)
    assert s.dtype == torch.float8_e4m3fn and s.shape == (2, 4)  # fp4 without group_size: NVFP4
    q, _, s = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.float4_e2m1fn_x2,
                                                 scale_dtype=torch.float8_e8m0fnu)
    assert s.dtype == torch.float8_e8m0fnu and s.shape == (2, 2)  # e8m0 scales: MXFP4
    with pytest.raises(ValueError, match="NVFP4 writes scales of torch.float8_e4m3fn"):
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.float4_e2m1fn_x2, group_size=16, scale=g,
                                           scale_dtype=torch.float8_e8m0fnu)


@pytest.mark.parametrize("kwargs, match", [
    ({"quant_dtype": torch.float4_e2m1fn_x2, "group_size": 16}, r"scale is (None|NULL); NVFP4"),
    ({"quant_dtype": torch.float4_e2m1fn_x2, "group_size": 64}, r"group_size must be (16 \(NVFP4\) or 32|32 for MXFP4)"),
    ({"quant_dtype": torch.float8_e4m3fn, "group_size": 32, "scale": "g"}, "MXFP8 takes no scale"),
    ({"quant_dtype": torch.float4_e2m1fn_x2, "group_size": 32, "ue8m0_scales": True}, "ue8m0_scales does not apply"),
    ({"quant_dtype": torch.float8_e4m3fn, "group_size": 64, "swizzled_scales": True}, "swizzled_scales lays out"),
    ({"quant_dtype": torch.float4_e2m1fn_x2, "group_size": 32, "scale_ub": "g"}, "scale_ub does not apply to MXFP4"),
    ({"quant_dtype": torch.float8_e4m3fn, "group_size": 32, "H": 48}, "H=48 is not a multiple of group_size=32"),
])
def test_block_format_errors_name_the_argument(kwargs, match):
    kwargs = dict(kwargs)
    H = kwargs.pop("H", 64)
    x, r, w = exact_inputs(2, H, torch.bfloat16, seed=1)
    g = torch.tensor([1.0], device=DEVICE)
    for k in ("scale", "scale_ub"):
        if kwargs.get(k) == "g":
            kwargs[k] = g
    with pytest.raises(ValueError, match=match):
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, **kwargs)
    with pytest.raises(ValueError, match=match):
        addrmsnorm.rmsnorm_quant(x, w, **kwargs)


def test_fp4_out_of_the_wrong_shape_and_scales_of_the_wrong_dtype_are_refused():
    x, r, w = exact_inputs(2, 64, torch.bfloat16, seed=2)
    out = torch.empty((2, 64), dtype=torch.float4_e2m1fn_x2, device=DEVICE)
    with pytest.raises(ValueError, match=r"out has shape \(2, 64\), expected \(2, 32\)"):
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.float4_e2m1fn_x2, group_size=32, out=out)
    scales = torch.empty((2, 2), dtype=torch.float32, device=DEVICE)
    with pytest.raises(ValueError, match=r"scales_out (must be float8_e8m0fnu of shape|has dtype torch\.float32; it must be float8_e8m0fnu)"):
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.float4_e2m1fn_x2, group_size=32,
                                           scales_out=scales)


def test_block_modes_take_the_per_group_rows():
    """The per-group rows, except the fp4 epilogues' own at 2048 < H <= 4096 and 6144 < H <= 8192
    (test_configs)."""
    for mode in configs.BLOCK_QUANT_MODES:
        fp4 = mode in (configs.QUANT_NVFP4, configs.QUANT_MXFP4)
        for H in (64, 2048, 5120, 32768, 65536) if fp4 else (64, 4096, 8192, 32768, 65536):
            assert configs.select_forward_config(H, 2, 2, quant=mode) == \
                configs.select_forward_config(H, 2, 2, quant=configs.QUANT_PER_GROUP)


@triton.jit
def _e2m1_codes(v_ptr, c_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(c_ptr + i, kernels._e2m1(tl.load(v_ptr + i, mask=i < n)), mask=i < n)


@needs_kernels
def test_the_kernels_e2m1_matches_the_reference_at_every_tie_and_binade_edge():
    """kernels._e2m1 (one fp32 add on the bits) against the reference's rounding: every e2m1 value, every
    tie between two of them, one ulp either side of each, the binades' edges, -0, denormals and values
    past the saturation, both signs, and random values spread over the range."""
    points = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0,
                           1e-45, 1e-38, 5.9e-39, 0.125, 6.5, 7.0, 1e30, float("inf")])
    near = torch.cat([torch.nextafter(points, torch.full_like(points, float("inf"))),
                      torch.nextafter(points, torch.zeros_like(points))])
    gen = torch.Generator().manual_seed(0)
    v = torch.cat([points, near, 8 * torch.rand(4000, generator=gen)])
    v = torch.cat([v, -v]).to(DEVICE)
    c = torch.empty(v.shape, dtype=torch.int32, device=DEVICE)
    _e2m1_codes[(triton.cdiv(v.numel(), 1024),)](v, c, v.numel(), BLOCK=1024)
    assert c.tolist() == e2m1_codes_ref(v).to(torch.int32).tolist()
