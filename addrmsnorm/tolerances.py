"""Tolerances of the kernels' outputs against the float64 reference, as data with their reasons.

Torch-free, so that the ahead-of-time C++ build can read it too (its tests use the same numbers).
A check passes when |actual - expected| <= atol + rtol * |expected|.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    reason: str


# y, rounded to its dtype by the kernel, against the float64 reference y. Keys: x's dtype.
Y_TOLERANCES: dict[str, Tolerance] = {
    "bf16": Tolerance(
        rtol=2.0**-7, atol=1e-6,
        reason="half an ulp (2**-8) from the final cast, plus up to half an ulp more on the looped "
               "path, which reloads h rounded to the residual dtype; fp32 math adds ~1e-6",
    ),
    "fp16": Tolerance(
        rtol=2.0**-10, atol=1e-6,
        reason="half an ulp (2**-11) from the final cast, plus up to half an ulp more on the looped "
               "path, which reloads h rounded to the residual dtype; fp32 math adds ~1e-6",
    ),
    "fp32": Tolerance(
        rtol=2e-5, atol=1e-6,
        reason="fp32 sum of squares: tree and per-lane summation over up to 2**18 terms costs a few "
               "1e-6 relative; the multiplies add a few ulps (6e-8 each)",
    ),
}

# Quantized outputs: the kernel quantizes its fp32 y, which differs from the reference's (fp64, then
# fp32) by this much, relative; q may differ from the reference's only where y * (1 / s) lies within
# twice this (y's error and the dynamic scale's, which comes from an amax of such a y) of a rounding
# boundary of the quant dtype. tests/test_quant.py also counts such elements.
QUANT_Y_RTOL = Tolerance(
    rtol=4e-6, atol=0.0,
    reason="y = h * rstd * w in fp32: rstd from an fp32 sum of squares in another order than the "
           "reference's (a few 1e-7 relative for the H of the test grid, a few 1e-6 at 2**18 terms) and "
           "two rounded multiplies",
)

# How many elements of q may differ from the reference's, every one of them at a rounding boundary (as
# above), as a fraction of q's elements, for bf16 inputs. In one pass, where y is the contract's value:
QUANT_BOUNDARY_FRACTION = 1e-4
# On the looped path (H above configs.QUANT_SINGLE_PASS_MAX_H) y comes from h rounded to bf16: y / s
# is then a product of two 8-bit mantissas (h and w) times one fp32 factor, and per token that factor
# cancels (v = 448 * h w / max |h w|), so v lands exactly on a rounding midpoint far more often, and
# the kernel's two fp32 roundings (y, then y * (1 / s)) and the reference's one decide those ties.
# Emulated in fp32 on the CPU for 67 x 65536 bf16, per-token fp8: 5.9e-5 of the elements against
# 2.0e-6 in one pass; measured on the H200: 1.07e-4 (when y was (h * rstd) * w, before the per-token
# amax came from pass 1; the GPU suite holds today's (h * w) * rstd to the same bound).
QUANT_BOUNDARY_FRACTION_LOOPED = 5e-4


@dataclass(frozen=True)
class ModelTolerance:
    """A patched transformers model (addrmsnorm.hf) against the same model unpatched, each as
    max |patched - unpatched| / max |unpatched| over the tensor (tests/test_hf.py)."""
    logits: float           # numerics="hf": logits and every hidden state
    head_logits: float      # numerics="hf" with per-head q/k norms (Qwen3, Gemma 3): many short rows, more flips
    rounding_logits: float  # a model that rounds elsewhere: numerics="contract", or torch.compile's kernels
    loss: float             # training: each step's loss, relative
    grad: float             # training: each parameter's gradient after the last of 3 AdamW steps
    reason: str


HF_MODEL_TOLERANCES: dict[str, ModelTolerance] = {
    "fp32": ModelTolerance(
        logits=1e-5, head_logits=1e-5, rounding_logits=1e-5, loss=1e-6, grad=1e-4,
        reason="the fused kernel sums each row's squares in another order than torch (a few fp32 "
               "ulps of rstd); fp32 models round nothing else differently. Gradients: ours are "
               "computed from the saved h and rstd in fp32, HF's by autograd through its ops",
    ),
    "bf16": ModelTolerance(
        logits=2.0**-8, head_logits=2.0**-7, rounding_logits=2.0**-5, loss=2.0**-10, grad=2.0**-3,
        reason="hf: the kernel rounds where HF does, so y differs only by an ulp where the last bit of "
               "rstd (another summation order) decides a rounding, and such flips propagate; measured "
               "on the H200: 0 (bit-identical logits) for all seven families. Per-head q/k norms (Qwen3, "
               "Gemma 3) normalize many rows of 128 and flip more often (47 of 10,485,760 elements in bf16 at "
               "2048 tokens, 32 + 8 heads, H100): Qwen3's logits at batch 2 measured 4.5e-3 (H100). "
               "Elsewhere rounded: "
               "numerics='contract' rounds the fp32 sum once where HF rounds twice, and inductor's "
               "fused kernels keep intermediates of the attention and MLP in fp32; either moves "
               "logits by bf16 noise amplified over the layers (measured <= 1.1e-2 and 1.4e-2). Training: our backward is the contract's gradient in "
               "fp32 where HF's autograd rounds to bf16 at each op; after 3 AdamW steps (lr 1e-4) "
               "measured loss <= 2.2e-4 and gradients <= 3.8e-2 (the worst parameter of 7 families)",
    ),
}

# rstd is always fp32; the same summation-order argument as fp32 y bounds it.
RSTD_TOLERANCE = Tolerance(rtol=1e-5, atol=0.0,
                           reason="fp32 sum of squares over up to 2**18 terms, then div/sqrt rounded")

# Under TRITON_INTERPRET=1 the CPU interpreter stores fp32 -> bf16 by truncation rather than by
# rounding to nearest even (seen with triton 3.6: the stored bits equal the top 16 bits of the
# fp32). That costs up to one bf16 ulp in place of half of one.
INTERPRETER_BF16_TOLERANCE = Tolerance(
    rtol=2.0**-6, atol=1e-6,
    reason="the interpreter truncates fp32 -> bf16 (a whole ulp, 2**-7) at both the residual_out "
           "store that the looped path reloads and the final cast",
)

# Gradients (dx, dresidual, dweight) against float64 autograd of the reference, as a fraction of the
# largest |gradient| of that tensor, or of max |dy * w * rstd| for dx and dresidual where that is
# larger (max-normalized: dx is a difference of terms of that size, so an elementwise relative bound
# would not hold for any implementation). A gradient takes the loosest tolerance among its own dtype
# and those of x and residual, which dy and h are read in.
GRAD_TOLERANCES: dict[str, Tolerance] = {
    "bf16": Tolerance(
        rtol=2.0**-6, atol=0.0,
        reason="the backward reads h as the forward stored it (rounded to bf16, 2**-9 relative) and "
               "dy in bf16, and rounds its result to bf16 (2**-9); twice that for the interpreter's "
               "truncating stores",
    ),
    "fp16": Tolerance(
        rtol=2.0**-9, atol=0.0,
        reason="h and dy in fp16 (2**-12 each) and the final rounding (2**-12), with margin",
    ),
    "fp32": Tolerance(
        rtol=2e-5, atol=0.0,
        reason="fp32 reductions over a row (mean(g*n)) and over up to 16384 rows (dweight, in "
               "per-program partials then a fixed-order sum): a few 1e-6 relative",
    ),
}
