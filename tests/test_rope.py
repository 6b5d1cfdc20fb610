"""The QK norm with the rotation (qk_rmsnorm_rope_): q's and k's heads of a fused QKV buffer normalized and rotated
in place in one pass, against the one reference (addrmsnorm.reference.qk_rmsnorm_rope_ref: the norm in float64,
then the rotation), and under numerics="hf" against HF's own modules: their formulas bit for bit given the
kernel's rstd (bf16 on the GPU alone: the interpreter truncates its bf16 stores).

Both rotation styles, partial rotation, both angle sources (positions into a cos_sin_cache, HF's cos and sin),
positions out of order and repeated, the head widths and head counts of the families, the refusals (nothing
written), and on the GPU the C ABI and both backends giving the same bits, CUDA graphs with PDL and
torch.compile."""

import math

import pytest
import torch

import addrmsnorm
from addrmsnorm import jit_backend
from addrmsnorm.reference import qk_rmsnorm_rope_ref, assert_close

from conftest import DEVICE, ON_GPU, gpu_only, needs_kernels
from helpers import DTYPES, assert_refused, bits, c_library_or_skip, y_tolerance

pytestmark = needs_kernels
OPS = torch.ops.addrmsnorm


def _qkv(T, nq, nk, D, dtype, seed=0, pad=0):
    g = torch.Generator().manual_seed(seed)
    width = (nq + 2 * nk) * D
    buf = (2 * torch.randn(T, width + pad, generator=g)).to(dtype).to(DEVICE)
    return buf[:, :width] if pad else buf


def _copy(t):
    """A copy of t with its strides (clone makes a padded view contiguous, and so aligned)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(t)


def _weights(D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed + 100)
    return tuple((1 + 0.2 * torch.randn(D, generator=g)).to(dtype).to(DEVICE) for _ in range(2))


def _cache(max_position, rotary_dim, dtype=torch.float32, base=10000.0):
    """vLLM's cos_sin_cache: a position's cosines of the pairs' frequencies, then their sines."""
    inv = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    f = torch.arange(max_position, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([f.cos(), f.sin()], dim=-1).to(dtype).to(DEVICE)


def _positions(T, max_position, dtype=torch.int64, seed=0):
    """Out of order and repeated, as a batch of sequences has them."""
    g = torch.Generator().manual_seed(seed)
    p = torch.randint(0, max_position, (T,), generator=g)
    if T > 2:
        p[1] = p[0]
    return p.to(dtype).to(DEVICE)


def _cos_sin(positions, cache, rotary_dim, style, dtype):
    """HF's per-column cos and sin for the same angles (NeoX: the halves repeated; GPT-J: each interleaved)."""
    half = rotary_dim // 2
    rows = cache[positions.long()].double()
    c, s = rows[:, :half], rows[:, half:]
    if style == "neox":
        c, s = torch.cat([c, c], -1), torch.cat([s, s], -1)
    else:
        c, s = c.repeat_interleave(2, -1), s.repeat_interleave(2, -1)
    return c.to(dtype), s.to(dtype)


def _check(got, qkv, nq, nk, D, want_q, want_k, tol, what):
    T = qkv.shape[0]
    assert_close(got[:, :nq * D].view(T, nq, D), want_q, tol, f"{what} q")
    assert_close(got[:, nq * D:(nq + nk) * D].view(T, nk, D), want_k, tol, f"{what} k")
    assert torch.equal(bits(got[:, (nq + nk) * D:]), bits(qkv[:, (nq + nk) * D:])), f"{what}: v was written"


# (T, nq, nk, D, rotary_dim, style, source, x dtype, weight dtype, angle dtype, positions dtype)
SMALL = [
    (5, 4, 2, 64, 64, "neox", "cache", "bf16", "bf16", "fp32", torch.int64),
    (5, 4, 2, 64, 32, "gptj", "cache", "bf16", "bf16", "bf16", torch.int32),  # partial, interleaved
    (3, 2, 1, 128, 128, "gptj", "cos_sin", "fp16", "fp32", "fp32", None),
    (4, 2, 1, 128, 64, "neox", "cos_sin", "bf16", "bf16", "bf16", None),  # GLM's half rotation
    (1, 4, 2, 64, 64, "neox", "cache", "fp16", "fp16", "fp16", torch.int64),  # decode
    (3, 2, 2, 256, 256, "neox", "cache", "bf16", None, "fp32", torch.int64),  # weightless (Llama 4's L2 norm)
]
BIG = [  # the families' head counts and widths, at a prefill's token count
    (300, 32, 8, 128, 128, "neox", "cache", "bf16", "bf16", "fp32", torch.int64),
    (300, 64, 4, 128, 128, "gptj", "cache", "bf16", "bf16", "bf16", torch.int32),
    (200, 16, 8, 256, 256, "neox", "cos_sin", "bf16", "bf16", "bf16", None),
    (200, 16, 8, 64, 32, "neox", "cache", "fp16", "fp16", "fp32", torch.int64),
    (200, 16, 8, 64, 32, "neox", "cos_sin", "fp16", "fp32", "fp32", None),  # float32 weights: cos and sin
]


def _run_case(T, nq, nk, D, rd, style, source, xd, wd, ad, pd, offset=0.0, seed=0):
    qkv = _qkv(T, nq, nk, D, DTYPES[xd], seed=seed + T + D)
    wq, wk = _weights(D, DTYPES[wd], seed=D) if wd is not None else (None, None)
    cache = _cache(4096, rd, DTYPES[ad])
    pos = _positions(T, 4096, pd or torch.int64, seed=T)
    angles = (dict(positions=pos, cos_sin_cache=cache) if source == "cache"
              else dict(zip(("cos", "sin"), _cos_sin(pos, cache, rd, style, DTYPES[ad]))))
    kw = dict(num_q_heads=nq, num_kv_heads=nk, head_dim=D, rotary_dim=rd, style=style, weight_offset=offset)
    got = qkv.clone()
    assert addrmsnorm.qk_rmsnorm_rope_(got, wq, wk, 1e-6, **angles, **kw) is got
    want_q, want_k = qk_rmsnorm_rope_ref(qkv, wq, wk, 1e-6, nq, nk, D, **angles, rotary_dim=rd, style=style,
                                         weight_offset=offset)
    _check(got, qkv, nq, nk, D, want_q, want_k, y_tolerance(DTYPES[xd]), f"{source} {style} rd={rd}")
    return qkv, got, angles, kw, (wq, wk)


@pytest.mark.parametrize("case", SMALL, ids=lambda c: "-".join(str(v) for v in c[:8]))
def test_against_the_reference(case):
    _run_case(*case)


@gpu_only
@pytest.mark.parametrize("case", BIG, ids=lambda c: "-".join(str(v) for v in c[:8]))
def test_against_the_reference_at_the_families_sizes(case):
    _run_case(*case)


@pytest.mark.parametrize("D,style,source", [(64, "neox", "cache"), (128, "gptj", "cos_sin"), (256, "neox", "cache")])
def test_misaligned_heads_take_the_misaligned_config(D, style, source):
    """Rows of an odd stride (ALIGN 1) run configs.ROPE_MISALIGNED_TABLE's config at every head_dim (one kernel
    a variant, tools/aot_build.py), against the same reference."""
    from addrmsnorm import configs
    assert configs.select_rope_config(D, aligned=False) == configs.ROPE_MISALIGNED_TABLE[0].config
    assert configs.select_rope_config(D, aligned=True) == configs._select(configs.ROPE_TABLE, D, 2, 2)
    T, nq, nk = 5, 2, 1
    qkv = _qkv(T, nq, nk, D, torch.bfloat16, seed=D, pad=1)
    assert qkv.stride(0) % 2 == 1
    wq, wk = _weights(D, torch.bfloat16, seed=D)
    cache, pos = _cache(64, D), _positions(T, 64)
    angles = (dict(positions=pos, cos_sin_cache=cache) if source == "cache"
              else dict(zip(("cos", "sin"), _cos_sin(pos, cache, D, style, torch.bfloat16))))
    got = _copy(qkv)
    assert got.stride(0) % 2 == 1
    addrmsnorm.qk_rmsnorm_rope_(got, wq, wk, 1e-6, num_q_heads=nq, num_kv_heads=nk, head_dim=D, style=style,
                                **angles)
    want_q, want_k = qk_rmsnorm_rope_ref(qkv, wq, wk, 1e-6, nq, nk, D, **angles, rotary_dim=D, style=style)
    _check(got, qkv, nq, nk, D, want_q, want_k, y_tolerance(torch.bfloat16), f"misaligned D={D}")


class _Chosen(Exception):
    pass


@pytest.mark.parametrize("style,rd,pad_cache,want", [
    ("neox", 128, 0, 8),  # the whole head rotated, on the vector
    ("neox", 64, 0, 1), ("neox", 48, 0, 1),  # a partial rotation (configs.rope_on_vector)
    ("neox", 128, 2, 1),  # the cache's rows off the vector
    ("gptj", 128, 0, 1),  # GPT-J's pairs (configs.rope_on_vector)
])
def test_the_vector_kernels_take_neox_with_the_angles_on_the_vector(monkeypatch, style, rd, pad_cache, want):
    """The JIT launcher's ALIGN for a rotation (forward.cpp's Angles rule has the same operands): the vector kernels
    read a head and its angles as two halves in whole vectors, so they take NeoX calls that rotate the whole head,
    with the angles' pointers, row strides and rotary_dim / 2 on the vector; every other call the ALIGN 1
    kernel."""
    from addrmsnorm import launcher, ops
    if ops.backend() != "triton":
        pytest.skip("the JIT launcher's choice (the cpp backend's is the C runtime's, the same rule)")
    seen = []

    class Spy:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                seen.append(kwargs["ALIGN"])
                raise _Chosen
            return launch

    monkeypatch.setattr(launcher, "rmsnorm_fwd", Spy())
    monkeypatch.setattr(launcher, "rmsnorm_fwd_unaligned", Spy())
    T, nq, nk, D = 4, 2, 1, 128
    qkv = _qkv(T, nq, nk, D, torch.bfloat16)
    wq, wk = _weights(D, torch.bfloat16)
    cache = _cache(16, rd)
    if pad_cache:
        cache = torch.nn.functional.pad(cache, (0, pad_cache))[:, :rd]
    with pytest.raises(_Chosen):
        addrmsnorm.qk_rmsnorm_rope_(qkv, wq, wk, 1e-6, num_q_heads=nq, num_kv_heads=nk, head_dim=D, style=style,
                                    positions=_positions(T, 16), cos_sin_cache=cache, rotary_dim=rd)
    assert seen == [want]


def test_gemma_offset_weight_and_both_sources_agree():
    """Gemma 3's 1 + w, and the two angle sources giving the same angles: the same heads."""
    qkv, a, _, kw, (wq, wk) = _run_case(6, 4, 2, 128, 128, "neox", "cache", "bf16", "bf16", "fp32", torch.int64,
                                        offset=1.0)
    cache, pos = _cache(4096, 128), _positions(6, 4096, seed=6)
    cos, sin = _cos_sin(pos, cache, 128, "neox", torch.float32)
    b = qkv.clone()
    addrmsnorm.qk_rmsnorm_rope_(b, wq, wk, 1e-6, cos=cos, sin=sin, **kw)
    assert torch.equal(bits(a), bits(b))


def test_rotation_by_zero_is_the_qk_norm():
    """Position 0 (cos 1, sin 0): qk_rmsnorm_ alone, at every style and rotary_dim. The ALIGN 1 kernel (GPT-J's
    pairs, a partial rotation) sums a head's squares over its whole row, as qk_rmsnorm_ does: its bits. The vector
    kernels (NeoX over the whole head) read a head once, as its halves, and sum sum(lo^2) + sum(hi^2) (the
    backward's order): within one rounding (adjacent bf16 values) of qk_rmsnorm_'s."""
    qkv = _qkv(7, 4, 2, 128, torch.bfloat16, seed=3)
    wq, wk = _weights(128, torch.bfloat16)
    plain = qkv.clone()
    addrmsnorm.qk_rmsnorm_(plain, wq, wk, num_q_heads=4, num_kv_heads=2, head_dim=128)
    for style in ("neox", "gptj"):
        for rd in (128, 64, 2):
            got = qkv.clone()
            addrmsnorm.qk_rmsnorm_rope_(got, wq, wk, num_q_heads=4, num_kv_heads=2, head_dim=128,
                                        positions=torch.zeros(7, dtype=torch.int64, device=DEVICE),
                                        cos_sin_cache=_cache(8, rd), rotary_dim=rd, style=style)
            if style == "neox" and rd == 128:
                steps = (got.view(torch.int16).int() - plain.view(torch.int16).int()).abs()
                assert int(steps.max()) <= 1 and torch.equal(got.sign(), plain.sign()), (style, rd)
            else:
                assert torch.equal(bits(got), bits(plain)), (style, rd)


def test_position_outside_the_cache():
    """Refused before anything is written (check_positions, eager); without the check the kernel reads nothing
    past the cache and writes nothing of that token, and the other tokens are rotated as usual."""
    qkv = _qkv(4, 2, 1, 64, torch.bfloat16, seed=5)
    wq, wk = _weights(64, torch.bfloat16)
    cache = _cache(16, 64)
    kw = dict(num_q_heads=2, num_kv_heads=1, head_dim=64, cos_sin_cache=cache)
    for bad in (16, -1):
        pos = torch.tensor([3, bad, 0, 15], device=DEVICE)
        assert_refused(ValueError, r"positions run from -?\d+ to \d+; cos_sin_cache has 16 rows",
                       lambda: addrmsnorm.qk_rmsnorm_rope_(qkv, wq, wk, positions=pos, **kw), qkv)
        got = qkv.clone()
        addrmsnorm.qk_rmsnorm_rope_(got, wq, wk, positions=pos, check_positions=False, **kw)
        assert torch.equal(bits(got[1]), bits(qkv[1])), "a token outside the cache was written"
        want = qkv.clone()
        keep = [0, 2, 3]
        rows = want[keep].clone()
        addrmsnorm.qk_rmsnorm_rope_(rows, wq, wk, positions=pos[keep], **kw)
        assert torch.equal(bits(got[keep]), bits(rows))


def test_refusals_name_the_argument_and_write_nothing():
    qkv = _qkv(4, 2, 1, 64, torch.bfloat16)
    wq, wk = _weights(64, torch.bfloat16)
    cache, pos = _cache(32, 64), _positions(4, 32)
    cos, sin = _cos_sin(pos, cache, 64, "neox", torch.bfloat16)
    kw = dict(num_q_heads=2, num_kv_heads=1, head_dim=64)

    def call(t=qkv, **over):
        args = {**kw, "positions": pos, "cos_sin_cache": cache, **over}
        return addrmsnorm.qk_rmsnorm_rope_(t, wq, wk, **{k: v for k, v in args.items() if v is not None})

    assert_refused(ValueError, "rotary_dim must be even and in \\[2, head_dim = 64\\]",
                   lambda: call(rotary_dim=63, cos_sin_cache=_cache(32, 64)[:, :63]), qkv)
    assert_refused(ValueError, "rotary_dim must be even and in \\[2, head_dim = 64\\]",
                   lambda: call(rotary_dim=66, cos_sin_cache=_cache(32, 66)), qkv)
    assert_refused(ValueError, r"cos_sin_cache has shape \(32, 64\); it must be \(max_position, 32\)",
                   lambda: call(rotary_dim=32), qkv)
    assert_refused(ValueError, "style is 'yarn'", lambda: call(style="yarn"), qkv)
    assert_refused(TypeError, "positions has dtype torch.float32; it must be int32 or int64",
                   lambda: call(positions=pos.float()), qkv)
    assert_refused(ValueError, r"positions has shape \(3,\), expected \(4,\)", lambda: call(positions=pos[:3]), qkv)
    assert_refused(TypeError, r"cos_sin_cache has dtype (torch\.)?float16; the angles are float32 or the heads' dtype",
                   lambda: call(cos_sin_cache=cache.half()), qkv)
    assert_refused(TypeError, "sin has dtype torch.float32; it must be cos's dtype",
                   lambda: call(positions=None, cos_sin_cache=None, cos=cos, sin=sin.float()), qkv)
    assert_refused(TypeError, r"q_weight has dtype (torch\.)?float32; with positions and a cos_sin_cache the weights are",
                   lambda: addrmsnorm.qk_rmsnorm_rope_(qkv, wq.float(), wk.float(), positions=pos, cos_sin_cache=cache,
                                                       **kw), qkv)
    assert_refused(ValueError, "not both", lambda: call(cos=cos, sin=sin), qkv)
    assert_refused(ValueError, "cos_sin_cache is None", lambda: call(cos_sin_cache=None), qkv)
    assert_refused(ValueError, "sin is None but cos is given",
                   lambda: call(positions=None, cos_sin_cache=None, cos=cos), qkv)
    assert_refused(ValueError, "numerics='hf' rotates as HF's apply_rotary_pos_emb",
                   lambda: call(numerics="hf"), qkv)
    assert_refused(ValueError, "cos overlaps the heads the call writes",
                   lambda: call(positions=None, cos_sin_cache=None, cos=qkv[:, 64:128], sin=sin), qkv)
    assert_refused(ValueError, "none is given", lambda: addrmsnorm.qk_rmsnorm_rope_(qkv, wq, wk, **kw), qkv)
    assert_refused(ValueError, r"head_dim must be at most 512 with the rotation|head_dim must be in \[1, 512\]",
                   lambda: addrmsnorm.qk_rmsnorm_rope_(_qkv(2, 1, 1, 1024, torch.bfloat16), None, None,
                                                       num_q_heads=1, num_kv_heads=1, head_dim=1024,
                                                       positions=pos[:2], cos_sin_cache=_cache(32, 1024)), qkv)
    # The operator itself: rotary_dim or rope_style without angles.
    assert_refused(ValueError, "rotary_dim or rope_style is set but no angles are given",
                   lambda: OPS.qk_rmsnorm_(qkv, wq, wk, 1e-6, 2, 1, 64, rotary_dim=32), qkv)
    g = qkv.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="qk_rmsnorm_ has no backward"):
        addrmsnorm.qk_rmsnorm_rope_(g, wq, wk, positions=pos, cos_sin_cache=cache, **kw)


def test_opcheck_and_compile():
    import torch._dynamo

    qkv = _qkv(6, 2, 1, 64, torch.bfloat16, seed=9)
    wq, wk = _weights(64, torch.bfloat16)
    cache, pos = _cache(64, 64), _positions(6, 64)
    cos, sin = _cos_sin(pos, cache, 64, "gptj", torch.bfloat16)
    torch.library.opcheck(OPS.qk_rmsnorm_.default, (qkv.clone(), wq, wk, 1e-6, 2, 1, 64),
                          dict(positions=pos, cos_sin_cache=cache))
    torch.library.opcheck(OPS.qk_rmsnorm_.default, (qkv.clone(), wq, wk, 1e-6, 2, 1, 64),
                          dict(cos=cos, sin=sin, rotary_dim=64, rope_style=1))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()

    def f(qkv, pos):
        return addrmsnorm.qk_rmsnorm_rope_(qkv, wq, wk, num_q_heads=2, num_kv_heads=1, head_dim=64, positions=pos,
                                           cos_sin_cache=cache)

    with torch.no_grad():
        a = f(qkv.clone(), pos)
        b = torch.compile(f, fullgraph=True, backend="inductor" if ON_GPU else "aot_eager")(qkv.clone(), pos)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert torch.equal(bits(a), bits(b))


@pytest.mark.parametrize("dtype", [torch.float16] + ([torch.bfloat16] if ON_GPU else []), ids=["fp16", "bf16"][:1 + ON_GPU])
@pytest.mark.parametrize("family", ["qwen3", "gemma3"])
def test_hf_numerics_are_hfs_formulas(family, dtype, capsys):
    """numerics="hf": the family's HF q/k norm module, then transformers' apply_rotary_pos_emb, with cos and sin
    of the heads' dtype (as HF's rotary embedding gives them). Bit for bit given the kernel's normalized heads
    (its own output rotated by zero: HF's products by 1 and 0 are exact); end to end against HF's own modules,
    equal except where the last fp32 bit of rstd decides a rounding (torch sums a head's squares in another order).
    The count of such elements is printed (the guide quotes it). fp16 also runs under the interpreter (whose
    bf16 stores truncate: bf16 is the GPU's)."""
    transformers = pytest.importorskip("transformers")
    if family == "qwen3":
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm as Norm, apply_rotary_pos_emb
        offset = 0.0
    else:
        from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm as Norm, apply_rotary_pos_emb
        offset = 1.0
    del transformers
    T, nq, nk, D = (2048, 32, 8, 128) if ON_GPU else (48, 8, 2, 128)
    eps = 1e-6
    qkv = _qkv(T, nq, nk, D, dtype, seed=11)
    wq, wk = _weights(D, dtype, seed=2)
    if offset:
        wq, wk = wq - 1, wk - 1
    cache, pos = _cache(8192, D), _positions(T, 8192)
    cos, sin = _cos_sin(pos, cache, D, "neox", dtype)
    got = qkv.clone()
    addrmsnorm.qk_rmsnorm_rope_(got, wq, wk, eps, num_q_heads=nq, num_kv_heads=nk, head_dim=D, cos=cos, sin=sin,
                                weight_offset=offset, numerics="hf")
    normalized = qkv.clone()  # the same kernel's heads, rotated by zero
    addrmsnorm.qk_rmsnorm_rope_(normalized, wq, wk, eps, num_q_heads=nq, num_kv_heads=nk, head_dim=D,
                                cos=torch.ones_like(cos), sin=torch.zeros_like(sin), weight_offset=offset,
                                numerics="hf")

    def rope(n):  # HF's rotation of (T, heads, D) normalized heads, in HF's (batch, heads, seq, D) layout
        t = n.transpose(0, 1)[None]
        return apply_rotary_pos_emb(t, t, cos[None], sin[None])[0][0].transpose(0, 1)

    from addrmsnorm.reference import hf_norm_ref
    differ_total, elements = 0, 0
    for part, (lo, hi), w in (("q", (0, nq), wq), ("k", (nq, nq + nk), wk)):
        x = qkv[:, lo * D:hi * D].view(T, hi - lo, D)
        ours = got[:, lo * D:hi * D].view(T, hi - lo, D)
        y = normalized[:, lo * D:hi * D].view(T, hi - lo, D)
        assert torch.equal(ours, rope(y)), f"{part}: not HF's apply_rotary_pos_emb of the kernel's normalized heads"
        m = Norm(D, eps=eps).to(device=DEVICE, dtype=dtype)
        with torch.no_grad():
            m.weight.copy_(w)
            hf = rope(m(x[None])[0])
        rstd_hf = torch.rsqrt(x.float().pow(2).mean(-1) + eps)
        near = rope(hf_norm_ref(x, rstd_hf * (1 - 3e-7), w, dtype, offset)) != \
            rope(hf_norm_ref(x, rstd_hf * (1 + 3e-7), w, dtype, offset))
        differ = ours != hf
        assert not (differ & ~near).any(), \
            f"{part}: {int((differ & ~near).sum())} elements differ from HF's modules away from a rounding tie"
        differ_total += int(differ.sum())
        elements += differ.numel()
    with capsys.disabled():
        print(f"\nrope hf {family} {str(dtype)[6:]} {T} x ({nq}+{nk}) x {D}: {differ_total} of {elements} elements "
              f"differ from HF's own modules (each where the last fp32 bit of rstd decides a rounding)")


@gpu_only
def test_c_abi_and_both_backends_give_the_same_bits():
    from addrmsnorm import c_library
    lib = c_library_or_skip()
    for T, nq, nk, D, rd, style, pd, pad in ((1, 32, 8, 128, 128, 0, torch.int64, 0),
                                             (300, 16, 4, 128, 64, 1, torch.int32, 0),
                                             (77, 8, 2, 256, 256, 0, torch.int64, 0),
                                             (300, 16, 4, 128, 128, 0, torch.int64, 1)):  # misaligned rows
        qkv = _qkv(T, nq, nk, D, torch.bfloat16, seed=T, pad=pad)
        wq, wk = _weights(D, torch.bfloat16)
        cache, pos = _cache(4096, rd), _positions(T, 4096, pd)
        op, jit, c = _copy(qkv), _copy(qkv), _copy(qkv)
        assert op.stride(0) == qkv.stride(0)
        OPS.qk_rmsnorm_(op, wq, wk, 1e-6, nq, nk, D, positions=pos, cos_sin_cache=cache, rotary_dim=rd,
                        rope_style=style)
        jit_backend.qk_rmsnorm_(jit, wq, wk, 1e-6, nq, nk, D, positions=pos, cos_sin_cache=cache, rotary_dim=rd,
                                rope_style=style)
        rope = c_library.rope_desc(positions=pos, cos_sin_cache=cache, rotary_dim=rd, style=style)
        c_library.qk_rmsnorm(lib, c, wq, wk, nq, nk, D, rope=rope)
        torch.cuda.synchronize()
        assert torch.equal(bits(op), bits(jit)) and torch.equal(bits(op), bits(c)), (T, nq, nk, D)


@gpu_only
def test_in_a_cuda_graph_with_pdl():
    """Decode: 64 dependent calls in one graph, the positions a device tensor the replay reads."""
    nq, nk, D = 32, 8, 128
    qkv = _qkv(64, nq, nk, D, torch.bfloat16, seed=1)
    wq, wk = _weights(D, torch.bfloat16)
    cache = _cache(4096, D)
    pos = _positions(64, 4096)
    kw = dict(num_q_heads=nq, num_kv_heads=nk, head_dim=D, cos_sin_cache=cache, pdl=True)
    static = qkv.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        addrmsnorm.qk_rmsnorm_rope_(static.clone(), wq, wk, positions=pos, **kw)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        addrmsnorm.qk_rmsnorm_rope_(static, wq, wk, positions=pos, **kw)
    for seed in (2, 3):
        fresh = _qkv(64, nq, nk, D, torch.bfloat16, seed=seed)
        static.copy_(fresh)
        pos.copy_(_positions(64, 4096, seed=seed))
        graph.replay()
        torch.cuda.synchronize()
        addrmsnorm.qk_rmsnorm_rope_(fresh, wq, wk, positions=pos, **kw)
        assert torch.equal(bits(static), bits(fresh))


def _grads_ref(q, k, wq, wk, eps, angles, rd, style, dq, dk, offset=0.0, create_graph=False):
    """The functional form's gradients by float64 autograd of the reference (q, k: (T, heads, D))."""
    T, nq, D = q.shape
    qd, kd = (t.detach().double().requires_grad_() for t in (q, k))
    wqd, wkd = (t.detach().double().requires_grad_() for t in (wq, wk))
    qkv = torch.cat([qd.reshape(T, -1), kd.reshape(T, -1)], 1)
    a = {n: (t.double() if t.is_floating_point() else t) for n, t in angles.items()}
    rq, rk = qk_rmsnorm_rope_ref(qkv, wqd, wkd, eps, nq, k.shape[1], D, rotary_dim=rd, style=style,
                                 weight_offset=offset, **a)
    loss = (rq * dq.double()).sum() + (rk * dk.double()).sum()
    return torch.autograd.grad(loss, (qd, kd, wqd, wkd), create_graph=create_graph), (qd, kd, wqd, wkd)


@pytest.mark.parametrize("style,rd,source", [("neox", 64, "cache"), ("gptj", 32, "cos_sin")])
def test_functional_form_and_its_backward_against_float64(style, rd, source):
    """qk_rmsnorm_rope: (q, k) out of place, with HF's (batch, seq, heads, head_dim) shapes, and its gradients
    against float64 autograd of the reference."""
    from addrmsnorm.reference import GRAD_TOLERANCES_BY_DTYPE, assert_grad_close
    B, S, nq, nk, D = 2, 5, 4, 2, 64
    g = torch.Generator().manual_seed(7)
    q = torch.randn(B, S, nq, D, generator=g).to(torch.bfloat16).to(DEVICE).requires_grad_()
    k = torch.randn(B, S, nk, D, generator=g).to(torch.bfloat16).to(DEVICE).requires_grad_()
    wq, wk = (w.clone().requires_grad_() for w in _weights(D, torch.bfloat16))
    cache, pos = _cache(64, rd), _positions(B * S, 64)
    if source == "cache":
        angles = dict(positions=pos, cos_sin_cache=cache)
        call_angles = dict(positions=pos.view(B, S), cos_sin_cache=cache)
    else:
        c, s = _cos_sin(pos, cache, rd, style, torch.bfloat16)
        angles, call_angles = dict(cos=c, sin=s), dict(cos=c.view(B, S, rd), sin=s.view(B, S, rd))
    oq, ok = addrmsnorm.qk_rmsnorm_rope(q, k, wq, wk, 1e-6, rotary_dim=rd, style=style, **call_angles)
    assert oq.shape == q.shape and ok.shape == k.shape
    want_q, want_k = qk_rmsnorm_rope_ref(torch.cat([q.reshape(B * S, -1), k.reshape(B * S, -1)], 1).detach(), wq,
                                         wk, 1e-6, nq, nk, D, rotary_dim=rd, style=style, **angles)
    tol = y_tolerance(torch.bfloat16)
    assert_close(oq.detach().reshape(B * S, nq, D), want_q, tol, "q")
    assert_close(ok.detach().reshape(B * S, nk, D), want_k, tol, "k")
    dq, dk = torch.randn_like(oq), torch.randn_like(ok)
    got = torch.autograd.grad((oq * dq).sum() + (ok * dk).sum(), (q, k, wq, wk))
    want, _ = _grads_ref(q.reshape(B * S, nq, D), k.reshape(B * S, nk, D), wq, wk, 1e-6, angles, rd, style,
                         dq.reshape(B * S, nq, D), dk.reshape(B * S, nk, D))
    gtol = GRAD_TOLERANCES_BY_DTYPE[torch.bfloat16]
    for name, a, b in zip(("dq", "dk", "dq_weight", "dk_weight"), got, want):
        assert_grad_close(a.reshape(b.shape), b, gtol, name)


def test_second_order_gradient_is_not_silently_zero():
    """The backward is torch operations: its own gradient (double backward) is the float64 reference's."""
    T, nq, nk, D = 3, 2, 1, 64
    g = torch.Generator().manual_seed(8)
    q = torch.randn(T, nq, D, generator=g).to(torch.bfloat16).to(DEVICE).requires_grad_()
    k = torch.randn(T, nk, D, generator=g).to(torch.bfloat16).to(DEVICE).requires_grad_()
    wq, wk = (w.clone().requires_grad_() for w in _weights(D, torch.bfloat16))
    cache, pos = _cache(16, D), _positions(T, 16)
    oq, ok = addrmsnorm.qk_rmsnorm_rope(q, k, wq, wk, positions=pos, cos_sin_cache=cache)
    dq, dk = torch.randn_like(oq), torch.randn_like(ok)
    gq, = torch.autograd.grad((oq * dq).sum() + (ok * dk).sum(), (q,), create_graph=True)
    second, = torch.autograd.grad(gq.float().pow(2).sum(), (wq,))
    (rgq, *_), (_, _, rwq, _) = _grads_ref(q, k, wq, wk, 1e-6, dict(positions=pos, cos_sin_cache=cache), D, "neox",
                                           dq, dk, create_graph=True)
    rsecond, = torch.autograd.grad(rgq.pow(2).sum(), (rwq,))
    assert second.abs().max() > 0
    torch.testing.assert_close(second.double(), rsecond, rtol=0.05, atol=0.05 * rsecond.abs().max().item())


def test_one_batch_row_of_cos_and_sin_is_broadcast():
    """HF's rotary embedding gives cos and sin of one batch row, (1, seq, rotary_dim), when every sequence has
    the same positions: the functional form broadcasts them over q's batch, as apply_rotary_pos_emb does, and
    refuses a shape that does not broadcast, by name."""
    B, S, nq, nk, D = 2, 6, 2, 1, 64
    g = torch.Generator().manual_seed(9)
    q = torch.randn(B, S, nq, D, generator=g).to(torch.bfloat16).to(DEVICE)
    k = torch.randn(B, S, nk, D, generator=g).to(torch.bfloat16).to(DEVICE)
    wq, wk = _weights(D, torch.bfloat16)
    pos = torch.arange(S, device=DEVICE)
    c, s = _cos_sin(pos, _cache(16, D), D, "neox", torch.bfloat16)
    one = addrmsnorm.qk_rmsnorm_rope(q, k, wq, wk, cos=c[None], sin=s[None])
    full = addrmsnorm.qk_rmsnorm_rope(q, k, wq, wk, cos=c.expand(B, S, D), sin=s.expand(B, S, D))
    for a, b in zip(one, full):
        assert torch.equal(bits(a), bits(b))
    with pytest.raises(ValueError, match=r"cos and sin of shape \(3, 6, 64\) do not broadcast"):
        addrmsnorm.qk_rmsnorm_rope(q, k, wq, wk, cos=c.expand(3, S, D), sin=s.expand(3, S, D))
    with pytest.raises(TypeError, match="cos must be a torch.Tensor or None, got list"):
        addrmsnorm.qk_rmsnorm_rope(q, k, wq, wk, cos=[1.0], sin=s[None])


# ----- the backward operator with the rotation (rmsnorm_bwd's ROPE) ------------------------------------------

@pytest.mark.parametrize("D,style,rd,weighted,offset", [(64, "neox", 64, True, 0.0), (128, "gptj", 64, True, 1.0),
                                                        (256, "neox", 128, False, 0.0), (512, "gptj", 512, True, 0.0)])
def test_backward_operator_with_the_rotation_matches_the_torch_gradient(D, style, rd, weighted, offset):
    """norm_backward with cos and sin (the functional form's backward, one pass a part) against the same gradient
    in torch operations (autograd.qk_rope_backward, itself checked against float64 above): both styles, partial
    rotation, weightless and Gemma's 1 + w, head_dim 64 to 512, tokens that do not fill a program."""
    from addrmsnorm import autograd
    from addrmsnorm.reference import GRAD_TOLERANCES_BY_DTYPE, assert_grad_close
    T, heads = 7, 3
    g = torch.Generator().manual_seed(D)
    x = torch.randn(T, heads, D, generator=g).to(torch.bfloat16).to(DEVICE)
    dy = torch.randn(T, heads, D, generator=g).to(torch.bfloat16).to(DEVICE)
    w = (0.2 * torch.randn(D, generator=g)).to(torch.bfloat16).to(DEVICE) if weighted else None
    c, s = _cos_sin(_positions(T, 64), _cache(64, rd), rd, style, torch.float32)
    rs = 0 if style == "neox" else 1
    dx, _, dw = OPS.norm_backward(dy.reshape(-1, D), None, x.reshape(-1, D), None, w, offset, weighted, c, s, heads,
                                  rd, rs, 1e-6)
    want_dx, want_dw = autograd.qk_rope_backward(x, w, dy, 1e-6, offset, c, s, rd, rs)
    tol = GRAD_TOLERANCES_BY_DTYPE[torch.bfloat16]
    assert_grad_close(dx.view(T, heads, D), want_dx, tol, "dx")
    if weighted:
        assert_grad_close(dw, want_dw, tol, "dweight")
    else:
        assert dw.numel() == 0


def test_functional_form_backward_runs_the_operator_and_double_backward_the_torch_ops(monkeypatch):
    """A first-order backward of qk_rmsnorm_rope is the backward operator with the rotation (one call a part); with
    create_graph it is the torch operations, which autograd differentiates again (the test above)."""
    calls = []
    real = OPS.norm_backward.default
    from addrmsnorm import functional
    monkeypatch.setattr(functional.ops, "norm_backward", lambda *a, **k: (calls.append(k["cos"] is not None), real(*a, **k))[1])
    T, nq, nk, D = 4, 2, 1, 64
    g = torch.Generator().manual_seed(11)
    q = torch.randn(T, nq, D, generator=g).to(torch.bfloat16).to(DEVICE).requires_grad_()
    k = torch.randn(T, nk, D, generator=g).to(torch.bfloat16).to(DEVICE).requires_grad_()
    wq, wk = (w.clone().requires_grad_() for w in _weights(D, torch.bfloat16))
    oq, ok = addrmsnorm.qk_rmsnorm_rope(q, k, wq, wk, positions=_positions(T, 16), cos_sin_cache=_cache(16, D))
    ((oq.float() ** 2).sum() + ok.float().sum()).backward()
    assert calls == [True, True]
    assert q.grad is not None and wk.grad is not None and wk.grad.abs().max() > 0


def test_the_one_launch_prototype_gives_the_gradient():
    """devtools/rope_bwd_one_launch.py (issue 66's design: q's and k's heads and both dweights in one launch, the
    cache read by position) holds its gradients to the torch operations' within the backward's tolerance."""
    from helpers import load_devtool

    tool = load_devtool("rope_bwd_one_launch")
    tool.check(DEVICE, ((16, 4, 2, 64), (9, 3, 1, 128)), heads=2, warps=1)
    tool.check(DEVICE, ((9, 3, 1, 128),), heads=4, warps=1)  # tiles wider than either part's heads: masked
    # the loads ahead: the next token's position and cache row, a part's next tile (past the last: masked)
    tool.check(DEVICE, ((16, 4, 2, 64), (9, 3, 1, 128)), heads=2, warps=1, prefetch=True, tile_prefetch=True)


@pytest.mark.parametrize("style", [0, 1])
@pytest.mark.parametrize("T, D, rd", [(9, 64, 64), (9, 128, 64), (9, 256, 256), (8192, 128, 128), (8192, 256, 64)])
def test_the_backwards_one_gather_gives_the_angles_of_the_checked_path(style, T, D, rd):
    """The backward's angles for positions known to be rows of the cache come from one gather, as views of one
    tensor: the same values, bit for bit, as the path that makes positions outside the cache NaN, and rows of
    consecutive columns (the stride the kernel takes); at a prefill's T too."""
    from addrmsnorm import autograd
    cache, p = _cache(4096, D), _positions(T, 4096)
    want = autograd.rope_angles(p, cache, None, None, rd, style)
    got = autograd.rope_angles(p, cache, None, None, rd, style, inside=True)
    for a, b in zip(got, want):
        assert a.shape == b.shape == (T, rd) and a.stride(-1) == 1 and a.dtype == torch.float32
        assert torch.equal(a, b)


@pytest.mark.parametrize("case", ["rstd", "dtype", "groups", "residual", "eps", "head_dim"])
def test_backward_operator_with_the_rotation_refuses_bad_input(case):
    T, heads, D = 4, 2, 64
    x = torch.randn(T * heads, D).to(torch.bfloat16).to(DEVICE)
    dy = torch.randn(T * heads, D).to(torch.bfloat16).to(DEVICE)
    w = torch.ones(D, dtype=torch.bfloat16, device=DEVICE)
    c, s = _cos_sin(_positions(T, 16), _cache(16, D), D, "neox", torch.float32)
    args = dict(dy=dy, dresidual_out=None, h=x, rstd=None, weight=w, cos=c, sin=s, rope_groups=heads, eps=1e-6)
    exc, match = ValueError, None
    if case == "rstd":
        args["rstd"], match = torch.ones(T * heads, device=DEVICE), "rstd must be (None|NULL)"
    elif case == "dtype":
        args["cos"], args["sin"], exc, match = c.to(torch.bfloat16), s.to(torch.bfloat16), TypeError, "float32"
    elif case == "groups":
        args["rope_groups"], match = 3, "rope_groups"
    elif case == "residual":
        args["dresidual_out"], match = torch.zeros_like(x), "plain norm"
    elif case == "eps":
        args["eps"], match = 0.0, "eps"
    else:
        big = torch.randn(T * heads, 1024).to(torch.bfloat16).to(DEVICE)
        cb, sb = _cos_sin(_positions(T, 16), _cache(16, 1024), 1024, "neox", torch.float32)
        args.update(dy=big, h=big.clone(), weight=torch.ones(1024, dtype=torch.bfloat16, device=DEVICE), cos=cb,
                    sin=sb)
        match = "head_dim must be at most 512"
    with pytest.raises(exc, match=match):
        OPS.norm_backward(args["dy"], args["dresidual_out"], args["h"], args["rstd"], args["weight"], 0.0, True,
                          args["cos"], args["sin"], args["rope_groups"], 0, 0, args["eps"])


def test_functional_refusals_name_q_and_k():
    """The functional form's q and k are named as such, never the buffer it builds: mixed or unsupported dtypes,
    HF's transposed layout (shown by the strides, also where heads == seq), rotary_dim 0 (None is head_dim)."""
    B, S, nq, nk, D = 1, 4, 4, 2, 64
    q = torch.randn(B, S, nq, D, device=DEVICE, dtype=torch.bfloat16)
    k = torch.randn(B, S, nk, D, device=DEVICE, dtype=torch.bfloat16)
    wq, wk = _weights(D, torch.bfloat16)
    pos, cache = _positions(B * S, 16), _cache(16, D)
    kw = dict(positions=pos, cos_sin_cache=cache)
    cases = [
        (TypeError, r"k has dtype torch.float16; it must be q's dtype", lambda: addrmsnorm.qk_rmsnorm_rope(
            q, k.half(), wq, wk, **kw)),
        (TypeError, r"q has dtype torch.float32; qk_rmsnorm_rope takes float16 or bfloat16",
         lambda: addrmsnorm.qk_rmsnorm_rope(q.float(), k.float(), wq, wk, **kw)),
        (TypeError, r"q has dtype torch.int32", lambda: addrmsnorm.qk_rmsnorm_rope(q.int(), k.int(), wq, wk, **kw)),
        (ValueError, r"rotary_dim must be None \(head_dim\)", lambda: addrmsnorm.qk_rmsnorm_rope(
            q, k, wq, wk, rotary_dim=0, **kw)),
        (ValueError, r"rotary_dim must be None \(head_dim\)", lambda: addrmsnorm.qk_rmsnorm_rope_(
            torch.zeros(B * S, (nq + 2 * nk) * D, device=DEVICE, dtype=torch.bfloat16), wq, wk, num_q_heads=nq,
            num_kv_heads=nk, head_dim=D, rotary_dim=0, **kw)),
    ]
    for exc, match, call in cases:
        with pytest.raises(exc, match=match):
            call()
    # HF's layout after its transpose, with heads == seq (4 and 4): the shapes cannot tell, the strides can.
    qt = torch.randn(B, S, S, D, device=DEVICE, dtype=torch.bfloat16).transpose(1, 2)
    kt = torch.randn(B, S, S, D, device=DEVICE, dtype=torch.bfloat16).transpose(1, 2)
    with pytest.raises(ValueError, match=r"q has shape \(1, 4, 4, 64\) and strides .*a transposed view"):
        addrmsnorm.qk_rmsnorm_rope(qt, kt, wq, wk, **kw)


def test_functional_positions_outside_the_cache_without_the_check():
    """check_positions=False and a position past the cache: that token's q and k come back NaN (never its input
    passed off as normalized), the others as with the check; the backward refuses the positions by name."""
    T, nq, nk, D = 5, 2, 1, 64
    q = torch.randn(T, nq, D, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(T, nk, D, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    wq, wk = _weights(D, torch.bfloat16)
    cache = _cache(16, D)
    pos = torch.tensor([0, 3, 16, 2, 15], device=DEVICE)  # 16 is past the cache's 16 rows
    with pytest.raises(ValueError, match=r"positions run from 0 to 16; cos_sin_cache has 16 rows"):
        addrmsnorm.qk_rmsnorm_rope(q, k, wq, wk, positions=pos, cos_sin_cache=cache)
    oq, ok = addrmsnorm.qk_rmsnorm_rope(q, k, wq, wk, positions=pos, cos_sin_cache=cache, check_positions=False)
    assert torch.isnan(oq[2].float()).all() and torch.isnan(ok[2].float()).all()
    good = torch.tensor([0, 1, 3, 4], device=DEVICE)
    wq_, wk_ = addrmsnorm.qk_rmsnorm_rope(q[good], k[good], wq, wk, positions=pos[good], cos_sin_cache=cache)
    assert torch.equal(bits(oq[good]), bits(wq_)) and torch.equal(bits(ok[good]), bits(wk_))
    with pytest.raises(ValueError, match=r"qk_rmsnorm_rope's backward: positions run from 0 to 16"):
        (oq.float().sum() + ok.float().sum()).backward()


def test_the_hf_patch_asks_the_checks_whether_the_rotation_takes_a_call():
    """hf.py runs HF's own attention where qk_rmsnorm_rope would refuse: its predicate (hf._rope_takes, which must
    trace under torch.compile and so cannot ask the C runtime) says yes exactly where the call is admitted, over
    the heads', weights' and angles' dtypes, head_dim and the numerics (the patch's own conditions, one eps for
    both norms and no autocast, held fixed)."""
    import random
    import types

    from addrmsnorm import configs, hf

    rng = random.Random(13)
    T, nq, nk = 2, 2, 1
    seen = {True: 0, False: 0}
    for _ in range(120):
        dt = rng.choice([torch.bfloat16, torch.float16, torch.float16, torch.float32])
        D = rng.choice([64, 64, 128, 1024])
        wdt, cdt = (rng.choice([dt, dt, torch.float32, torch.bfloat16]) for _ in range(2))
        numerics = rng.choice([0, 1])
        norm = types.SimpleNamespace(weight=torch.ones(D, dtype=wdt, device=DEVICE), eps=1e-6)
        attn = types.SimpleNamespace(q_norm=norm, k_norm=norm, head_dim=D)
        q = torch.randn(1, T, nq, D, device=DEVICE).to(dt)
        k = torch.randn(1, T, nk, D, device=DEVICE).to(dt)
        cos = torch.randn(1, T, D, device=DEVICE).to(cdt)
        try:
            addrmsnorm.qk_rmsnorm_rope(q, k, norm.weight, norm.weight, 1e-6, cos=cos, sin=cos,
                                       numerics=configs.PLAIN_NUMERICS[numerics])
            admitted = True
        except (TypeError, ValueError):
            admitted = False
        assert hf._rope_takes(attn, q, cos, numerics) == admitted, (dt, D, wdt, cdt, numerics)
        seen[admitted] += 1
    assert min(seen.values()) >= 20, seen
