"""The one reference implementation of the addrmsnorm contract, and the tolerances tests hold it to.

Every test and benchmark imports this module; nothing else re-implements the math.

    h            = float32(x) + float32(residual)
    residual_out = cast(h, residual_out dtype)
    rstd         = 1 / sqrt(sum(h*h) / H + eps)
    y            = cast(h * rstd * (float32(weight) + weight_offset), out dtype)

``fused_add_rmsnorm_ref`` computes h exactly as the contract says (an fp32 add, so residual_out is
bit-exact), then the normalization in ``compute_dtype``: float64 for the reference that kernels are
measured against, float32 for "what plain fp32 math gives" (used to bound drift over many layers).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .tolerances import (GRAD_TOLERANCES, INTERPRETER_BF16_TOLERANCE, QUANT_Y_RTOL,  # noqa: F401
                         RSTD_TOLERANCE, Tolerance, Y_TOLERANCES)


@dataclass(frozen=True)
class RefResult:
    y: torch.Tensor             # compute_dtype, not yet cast to the output dtype
    residual_out: torch.Tensor  # residual_out dtype, bit-exact per the contract
    rstd: torch.Tensor          # compute_dtype, shape x.shape[:-1]
    h: torch.Tensor             # fp32 sum, shape of x


def fused_add_rmsnorm_ref(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    weight_offset: float = 0.0,
    *,
    compute_dtype: torch.dtype = torch.float64,
    residual_out_dtype: torch.dtype | None = None,
    x_scale: float = 1.0,
) -> RefResult:
    """Reference forward: exact fp32 add, normalization in ``compute_dtype``. Runs on any device.
    weight None: the weightless norm (a weight of ones). x_scale: h = residual + x_scale * x, the
    product exact and the sum rounded to fp32 once (in fp64 first: as the kernels' fused multiply-add
    but for a double rounding of vanishing odds)."""
    residual_out_dtype = residual.dtype if residual_out_dtype is None else residual_out_dtype
    if x_scale == 1.0:
        h = x.float() + residual.float()  # the contract's fp32 add, rounded once
    else:
        h = (x.double() * float(torch.tensor(x_scale, dtype=torch.float32)) + residual.double()).float()
    if weight is None:
        weight = torch.ones(x.shape[-1], dtype=torch.float32, device=x.device)
    hc = h.to(compute_dtype)
    H = x.shape[-1]
    rstd = 1.0 / torch.sqrt((hc * hc).sum(dim=-1) / H + eps)
    w = weight.to(compute_dtype) + weight_offset
    y = hc * rstd.unsqueeze(-1) * w
    return RefResult(y=y, residual_out=h.to(residual_out_dtype), rstd=rstd, h=h)


def rmsnorm_ref(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6, weight_offset: float = 0.0, *,
                compute_dtype: torch.dtype = torch.float64) -> RefResult:
    """Reference plain norm: the fused contract with h = x (``fused_add_rmsnorm_ref`` with a zero
    residual, whose fp32 add is exact); residual_out is x in its own dtype."""
    return fused_add_rmsnorm_ref(x, torch.zeros_like(x), weight, eps, weight_offset, compute_dtype=compute_dtype)


def sandwich_rmsnorm_ref(x, residual, post_weight, weight, eps=1e-6, weight_offset=0.0, post_weight_offset=0.0, *,
                         compute_dtype: torch.dtype = torch.float64) -> RefResult:
    """Reference sandwich norm: p = rmsnorm(x; post_weight), h = residual + p, y = rmsnorm(h; weight),
    all in ``compute_dtype`` (p is not rounded before the add: the contract's one rounding per stored
    output). residual_out is h rounded once to residual's dtype; rstd is (2, rows...), h's then x's."""
    post = rmsnorm_ref(x, post_weight, eps, post_weight_offset, compute_dtype=compute_dtype)
    hc = post.y + residual.to(compute_dtype)
    if weight is None:
        weight = torch.ones(x.shape[-1], dtype=torch.float32, device=x.device)
    rstd = 1.0 / torch.sqrt((hc * hc).sum(dim=-1) / x.shape[-1] + eps)
    y = hc * rstd.unsqueeze(-1) * (weight.to(compute_dtype) + weight_offset)
    return RefResult(y=y, residual_out=hc.to(residual.dtype), rstd=torch.stack([rstd, post.rstd]), h=hc.float())


def sandwich_hf_ref(x, residual, post_weight, weight, eps=1e-6, weight_offset=0.0):
    """HF's eager sandwich (Gemma 2/3's decoder layer, GLM-4's): the post-norm's output in x's dtype
    (hf_norm_ref), the add in x's dtype, then the pre-norm (hf_style_ref). Returns (y, h)."""
    xf = x.float()
    p = hf_norm_ref(x, torch.rsqrt(xf.pow(2).mean(-1) + eps), post_weight, x.dtype, weight_offset)
    return hf_style_ref(p, residual, weight, eps, weight_offset)


def gated_rmsnorm_ref(x, z, weight, eps=1e-6, group_size=None, norm_before_gate=True, weight_offset=0.0, *,
                      compute_dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Reference gated norm, all in ``compute_dtype`` (unrounded): each group of ``group_size`` columns
    (None: the row) normalized alone; norm_before_gate: rmsnorm(x) * w * silu(z), else
    rmsnorm(x * silu(z)) * w, the weight indexed by the column in the row (weight None: w = 1)."""
    H = x.shape[-1]
    g = H if group_size is None else group_size
    xc, zc = x.to(compute_dtype), z.to(compute_dtype)
    gate = zc * torch.sigmoid(zc)
    v = xc if norm_before_gate else xc * gate
    vg = v.reshape(*x.shape[:-1], H // g, g)
    rstd = 1.0 / torch.sqrt((vg * vg).sum(dim=-1, keepdim=True) / g + eps)
    w = torch.ones(H, dtype=compute_dtype, device=x.device) if weight is None else weight.to(compute_dtype)
    y = (vg * rstd).reshape(x.shape) * (w + weight_offset)
    return y * gate if norm_before_gate else y


def gated_hf_ref(x, z, weight, eps=1e-6, group_size=None, norm_before_gate=True) -> torch.Tensor:
    """HF's eager gated norms over groups of a row: Qwen3NextRMSNormGated (norm before gate: the
    normalized value rounded to x's dtype, times the weight in x's dtype, times silu(z) in fp32, rounded)
    and MambaRMSNormGated (gate first: x * silu(z) in fp32, then LlamaRMSNorm's two roundings)."""
    H = x.shape[-1]
    g = H if group_size is None else group_size
    shape, dt = x.shape, x.dtype
    xs, zs = x.reshape(-1, g), z.reshape(-1, g)
    w = torch.ones(g, dtype=dt, device=x.device) if weight is None else None
    h = xs.float()
    if not norm_before_gate:
        h = h * torch.nn.functional.silu(zs.float())
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    hv = h.to(dt).reshape(shape)
    y = (weight if w is None else torch.ones(H, dtype=dt, device=x.device)) * hv
    if norm_before_gate:
        y = y * torch.nn.functional.silu(z.float())
    return y.to(dt)


def sandwich_grads_ref(x, residual, post_weight, weight, eps, weight_offset, post_weight_offset, dy,
                       dresidual_out=None):
    """Gradients (dx, dresidual, dpost_weight, dweight) of the sandwich norm, by float64 autograd
    (weight None: weightless, dweight None)."""
    weightless = weight is None
    if weightless:
        weight = torch.ones(x.shape[-1], dtype=torch.float64, device=x.device)
    xs, rs, pws, ws = (t.detach().double().requires_grad_() for t in (x, residual, post_weight, weight))
    h = xs * torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + eps) * (pws + post_weight_offset) + rs
    _backward_of_norm(h, ws, eps, weight_offset, dy, dresidual_out)
    return xs.grad, rs.grad, pws.grad, None if weightless else ws.grad


def _backward_of_norm(h, w, eps, weight_offset, dy, dresidual_out):
    """Backpropagate dy through y = rmsnorm(h; w), and dresidual_out (if any) into h, in float64."""
    y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * (w + weight_offset)
    outs, grads = [y], [dy.double()]
    if dresidual_out is not None:
        outs.append(h)
        grads.append(dresidual_out.double())
    torch.autograd.backward(outs, grads)


def quant_y_ref(x, residual, weight, eps=1e-6, weight_offset=0.0, h_stored=None):
    """(reference, fp32 y) for the quantized kernels: the contract's y where a row fits one pass; on the
    looped path (H above the single-pass limit, in every mode) the kernel reloads h from residual_out
    for its second pass, so y there is the same rstd times h rounded to the residual dtype (h_stored:
    the residual_out the kernel wrote; default h rounded by torch)."""
    from . import configs

    ref = fused_add_rmsnorm_ref(x, residual, weight, eps, weight_offset)
    if x.shape[-1] <= configs.QUANT_SINGLE_PASS_MAX_H:
        return ref, ref.y.float()
    h = (ref.h.to(residual.dtype) if h_stored is None else h_stored).double()
    return ref, (h * ref.rstd.unsqueeze(-1) * (weight.double() + weight_offset)).float()


# Quantized outputs (addrmsnorm.fused_add_rmsnorm_quant): the largest magnitude of each target dtype,
# and the floor of amax (an all-zero group gets scale QUANT_AMAX_FLOOR / qmax, and q = 0).
QUANT_QMAX = {torch.float8_e4m3fn: 448.0, torch.int8: 127.0}
QUANT_AMAX_FLOOR = 1e-10


def quant_cast_ref(v: torch.Tensor, quant_dtype: torch.dtype) -> torch.Tensor:
    """fp32 -> the quant dtype as the contract says: int8 rounds half to even, then clamps to
    [-128, 127]; fp8 clamps to +-qmax, then rounds to nearest even (torch's own conversions)."""
    if quant_dtype == torch.int8:
        return v.round().clamp(-128, 127).to(torch.int8)
    qmax = QUANT_QMAX[quant_dtype]
    return v.clamp(-qmax, qmax).to(quant_dtype)


def ue8m0_ref(s: torch.Tensor) -> torch.Tensor:
    """2 ** ceil(log2(s)), exactly: s itself if it is a power of two, else the next one up."""
    m, e = torch.frexp(s)  # s = m * 2**e, 0.5 <= m < 1
    return torch.ldexp(torch.ones_like(s), torch.where(m == 0.5, e - 1, e))


def quantize_ref(y: torch.Tensor, quant_dtype: torch.dtype, *, scale: torch.Tensor | None = None,
                 group_size: int | None = None, scale_ub: torch.Tensor | None = None, ue8m0: bool = False):
    """q and the fp32 scales from y (..., H), in fp32 as the kernels compute them:

        static     q = quant(y * (1 / scale))                                  scales = scale
        dynamic    s = max(min(amax|y|, scale_ub), QUANT_AMAX_FLOOR) / qmax    per token: (...)
                   (ue8m0: 2 ** ceil(log2 s));  q = quant(y * (1 / s))         per group: (..., H / G)
    """
    y32 = y.float()
    if scale is not None:
        inv = torch.reciprocal(scale.float().reshape(()))
        return quant_cast_ref(y32 * inv, quant_dtype), scale
    H = y.shape[-1]
    G = H if group_size is None else group_size
    g = y32.reshape(*y.shape[:-1], H // G, G)
    amax = g.abs().amax(dim=-1)
    if scale_ub is not None:
        amax = torch.minimum(amax, scale_ub.float().reshape(()))
    # A tensor divisor: torch divides a CUDA tensor by a Python scalar as a multiply by its
    # reciprocal, which is not the correctly rounded quotient the kernels compute.
    s = torch.clamp_min(amax, QUANT_AMAX_FLOOR) / amax.new_tensor(QUANT_QMAX[quant_dtype])
    if ue8m0:
        s = ue8m0_ref(s)
    q = quant_cast_ref((g * torch.reciprocal(s).unsqueeze(-1)).reshape(y.shape), quant_dtype)
    return q, (s.squeeze(-1) if group_size is None else s)


def fused_add_rmsnorm_grads_ref(x, residual, weight, eps, weight_offset, dy, dresidual_out=None, x_scale=1.0):
    """Gradients (dx, dresidual, dweight) of the contract, by float64 autograd of the reference
    (weight None: the weightless norm, dweight None; x_scale: h = residual + x_scale * x)."""
    weightless = weight is None
    if weightless:
        weight = torch.ones(x.shape[-1], dtype=torch.float64, device=x.device)
    xs, rs, ws = (t.detach().double().requires_grad_() for t in (x, residual, weight))
    _backward_of_norm(xs * x_scale + rs, ws, eps, weight_offset, dy, dresidual_out)
    return xs.grad, rs.grad, None if weightless else ws.grad


def rmsnorm_grads_ref(x, weight, eps, weight_offset, dy):
    """Gradients (dx, dweight) of the plain norm, by float64 autograd."""
    xs, ws = (t.detach().double().requires_grad_() for t in (x, weight))
    y = xs * torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + eps) * (ws + weight_offset)
    torch.autograd.backward([y], [dy.double()])
    return xs.grad, ws.grad


def assert_grad_close(actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance, what: str,
                      scale: float = 0.0) -> None:
    """Max-normalized: max |actual - expected| <= rtol * max(max |expected|, scale) (GRAD_TOLERANCES).

    ``scale`` is the size of the terms the gradient is a difference of, where it can be larger
    than the gradient itself (dx when the rows are nearly constant: H = 1 gives dx ~ 0)."""
    scale = max(expected.abs().max().item(), scale)
    err = (actual.double() - expected).abs().max().item()
    if not err <= tol.rtol * scale + tol.atol:
        raise AssertionError(f"{what}: max error {err:.3e} > {tol.rtol:.3e} * max |grad| {scale:.3e} "
                             f"({tol.reason})")


def hf_norm_ref(h, rstd, weight, dtype, weight_offset=0.0):
    """HF's RMSNorm after its reduction, given rstd of shape h.shape[:-1]: LlamaRMSNorm's
    ``weight * (h * rstd).to(dtype)``, or with a weight offset Gemma's
    ``(h * rstd * (weight.float() + offset)).to(dtype)``."""
    n = h.float() * rstd.unsqueeze(-1)
    if weight_offset != 0.0:
        return (n * (weight.float() + weight_offset)).to(dtype)
    return n.to(dtype) * weight


def hf_style_ref(x, residual, weight, eps=1e-6, weight_offset=0.0):
    """HF's eager idiom: an add in x's dtype, then its RMSNorm (hf_norm_ref), rstd as torch computes it."""
    h = x + residual
    hf = h.float()
    return hf_norm_ref(h, torch.rsqrt(hf.pow(2).mean(-1) + eps), weight, x.dtype, weight_offset), h


# Tolerances are data with their reasons, in tolerances.py; here keyed by torch dtype.
GRAD_TOLERANCES_BY_DTYPE: dict[torch.dtype, Tolerance] = {
    torch.bfloat16: GRAD_TOLERANCES["bf16"],
    torch.float16: GRAD_TOLERANCES["fp16"],
    torch.float32: GRAD_TOLERANCES["fp32"],
}

TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.bfloat16: Y_TOLERANCES["bf16"],
    torch.float16: Y_TOLERANCES["fp16"],
    torch.float32: Y_TOLERANCES["fp32"],
}


def truncate_to_bf16(t: torch.Tensor) -> torch.Tensor:
    """fp32 -> bf16 by dropping the low 16 bits: what the Triton CPU interpreter stores."""
    bits = t.float().contiguous().view(torch.int32)
    return (bits >> 16).to(torch.int16).view(torch.bfloat16)


def assert_close(actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance, what: str) -> None:
    """Raise AssertionError with the worst element if |actual - expected| > atol + rtol*|expected|."""
    a = actual.double()
    e = expected.double()
    if a.shape != e.shape:
        raise AssertionError(f"{what}: shape {tuple(a.shape)} != {tuple(e.shape)}")
    if not torch.isfinite(a).all():
        raise AssertionError(f"{what}: non-finite values in the result")
    err = (a - e).abs()
    bound = tol.atol + tol.rtol * e.abs()
    bad = err > bound
    if bad.any():
        idx = int(torch.argmax((err - bound).flatten()))
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {a.numel()} elements out of tolerance "
            f"(rtol={tol.rtol:g}, atol={tol.atol:g}: {tol.reason}); worst at flat index {idx}: "
            f"got {a.flatten()[idx].item():.8g}, expected {e.flatten()[idx].item():.8g}")


# Block-scaled formats (addrmsnorm.fused_add_rmsnorm_quant with NVFP4, MXFP8, MXFP4): the formulas of
# docs/guide.md, in torch, every step fp32 and rounded to nearest (torch's own conversions where torch has
# them; e2m1 by its definition).
BLOCK_FORMATS = {"nvfp4": (16, 6.0), "mxfp8": (32, 448.0), "mxfp4": (32, 6.0)}  # block size, qmax


def e2m1_codes_ref(v: torch.Tensor) -> torch.Tensor:
    """The e2m1 codes (0-15, uint8) of fp32 v: round to nearest even among 0, 0.5, 1, 1.5, 2, 3, 4, 6,
    saturating at 6; the sign bit set where v < 0."""
    a = v.abs().clamp(max=6.0)
    _, ex = torch.frexp(a)  # a = m * 2**ex, 0.5 <= m < 1 (a = 0: ex = 0)
    e = (ex - 1).clamp(min=0)  # the binade's exponent, at least 0 (0.5 is e2m1's one subnormal step)
    n = torch.round(torch.ldexp(a, 1 - e))  # half to even; exact: a times a power of two
    return (n.to(torch.int32) + 2 * e.to(torch.int32) + 8 * (v < 0).to(torch.int32)).to(torch.uint8)


def e2m1_values_ref(codes: torch.Tensor) -> torch.Tensor:
    """The fp32 values of e2m1 codes."""
    table = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], device=codes.device)
    c = codes.to(torch.int64)
    return torch.where(c >= 8, -1.0, 1.0) * table[c & 7]


def pack_fp4_ref(codes: torch.Tensor) -> torch.Tensor:
    """Two codes a byte, element 2i in the low nibble (torch.float4_e2m1fn_x2's layout)."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).view(torch.float4_e2m1fn_x2)


def swizzle_scales_ref(s: torch.Tensor) -> torch.Tensor:
    """[rows, blocks] scale bytes in the 128 x 4 tiled layout, index by index: element (m, k) at
    ((m // 128) * (K4 // 4) + k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + k % 4, rows padded
    to 128 and blocks to 4 (K4) with zeros."""
    rows, blocks = s.shape
    k4 = -(-blocks // 4) * 4
    out = torch.zeros(-(-rows // 128) * 128 * k4, dtype=torch.uint8, device=s.device)
    m = torch.arange(rows, device=s.device)[:, None]
    k = torch.arange(blocks, device=s.device)[None, :]
    at = ((m // 128) * (k4 // 4) + k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + k % 4
    out[at.reshape(-1)] = s.view(torch.uint8).reshape(-1)
    return out


def block_quantize_ref(y: torch.Tensor, fmt: str, global_scale: torch.Tensor | None = None):
    """(q, scales) of fp32 y (rows, H) in a block-scaled format ("nvfp4", "mxfp8", "mxfp4"): q as the op
    returns it (fp4 packed, float4_e2m1fn_x2 (rows, H // 2); float8_e4m3fn (rows, H)), scales (rows,
    H // block) as float8_e4m3fn (NVFP4) or float8_e8m0fnu (MX), linear."""
    block, qmax = BLOCK_FORMATS[fmt]
    y = y.float()
    rows, H = y.shape
    yb = y.reshape(rows, H // block, block)
    a = yb.abs().amax(dim=-1)
    if fmt == "nvfp4":
        g = global_scale.float().reshape(())
        t = a / a.new_tensor(6.0) * g  # a tensor divisor: the correctly rounded quotient
        s8 = t.clamp(max=448.0).to(torch.float8_e4m3fn)
        sf = s8.float()
        m = torch.where(sf == 0, torch.zeros_like(sf), g / torch.where(sf == 0, torch.ones_like(sf), sf))
        codes = e2m1_codes_ref((yb * m[..., None]).reshape(rows, H))
        return pack_fp4_ref(codes), s8
    t = a / a.new_tensor(qmax)
    mant, ex = torch.frexp(t)  # t = mant * 2**ex: ceil(log2 t) = ex - 1 where t is a power of two, else ex
    k = torch.where(mant == 0.5, ex - 1, ex)
    biased = torch.where(t == 0, torch.zeros_like(k), (k + 127).clamp(0, 254))
    m = torch.ldexp(torch.ones_like(t), 127 - biased)
    v = (yb * m[..., None]).reshape(rows, H)
    scales = biased.to(torch.uint8).view(torch.float8_e8m0fnu)
    if fmt == "mxfp8":
        return v.clamp(-448.0, 448.0).to(torch.float8_e4m3fn), scales
    return pack_fp4_ref(e2m1_codes_ref(v)), scales


# ----- the rotation (RoPE) of normalized heads ----------------------------------------------------------

def rope_angles_ref(positions, cos_sin_cache, cos, sin, rotary_dim: int, style: str):
    """A token's cos and sin per rotated column, (T, rotary_dim), from either source: a cos_sin_cache row
    (half cos, half sin, by frequency) at each position, spread over the columns as the style pairs them;
    or HF's cos and sin, already per column."""
    if cos is not None:
        return cos, sin
    half = rotary_dim // 2
    rows = cos_sin_cache[positions.long()]
    c, s = rows[:, :half], rows[:, half:rotary_dim]
    if style == "neox":
        return torch.cat([c, c], dim=-1), torch.cat([s, s], dim=-1)
    return c.repeat_interleave(2, dim=-1), s.repeat_interleave(2, dim=-1)


def _rotate_ref(v, style: str):
    """rotate_half (NeoX) or its interleaved form (GPT-J): the partner of each column, the first's negated."""
    if style == "neox":
        a, b = v.chunk(2, dim=-1)
        return torch.cat([-b, a], dim=-1)
    a, b = v[..., 0::2], v[..., 1::2]
    return torch.stack([-b, a], dim=-1).flatten(-2)


def rope_ref(y, cos, sin, rotary_dim: int, style: str, *, hf_dtype=None):
    """The rotation of heads y (T, heads, head_dim) by per-column angles (T, rotary_dim), broadcast over heads;
    the columns past rotary_dim are y's. The contract: in y's precision (float64 for the reference), no
    rounding. ``hf_dtype``: HF's apply_rotary_pos_emb, y and the angles in that dtype, each product and the
    sum rounded to it."""
    c, s = cos[:, None, :], sin[:, None, :]
    if hf_dtype is not None:
        y, c, s = y.to(hf_dtype), c.to(hf_dtype), s.to(hf_dtype)
    else:
        c, s = c.to(y.dtype), s.to(y.dtype)
    r, rest = y[..., :rotary_dim], y[..., rotary_dim:]
    return torch.cat([r * c + _rotate_ref(r, style) * s, rest], dim=-1)


def qk_rmsnorm_rope_ref(qkv, q_weight, k_weight, eps, num_q_heads, num_kv_heads, head_dim, *, positions=None,
                        cos_sin_cache=None, cos=None, sin=None, rotary_dim=None, style="neox", weight_offset=0.0,
                        hf=False):
    """qk_rmsnorm_rope_'s q and k heads, (T, heads, head_dim): the contract's in float64 (rmsnorm_ref per head,
    then rope_ref), or with ``hf`` HF's modules (hf_norm_ref per head, then HF's rotation in qkv's dtype)."""
    T, rd = qkv.shape[0], head_dim if rotary_dim is None else rotary_dim
    c, s = rope_angles_ref(positions, cos_sin_cache, cos, sin, rd, style)
    out = []
    for start, n, w in ((0, num_q_heads, q_weight), (num_q_heads, num_kv_heads, k_weight)):
        heads = qkv[:, start * head_dim:(start + n) * head_dim].reshape(T, n, head_dim)
        if hf:
            hfl = heads.float()
            rstd = torch.rsqrt(hfl.pow(2).mean(-1) + eps)
            wt = torch.ones(head_dim, dtype=qkv.dtype, device=qkv.device) if w is None else w
            y = hf_norm_ref(heads, rstd, wt, qkv.dtype, weight_offset)
            out.append(rope_ref(y, c, s, rd, style, hf_dtype=qkv.dtype))
        else:
            y = rmsnorm_ref(heads, w, eps, weight_offset).y
            out.append(rope_ref(y, c.double(), s.double(), rd, style))
    return out[0], out[1]
