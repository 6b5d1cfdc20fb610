"""Triton kernels for the fused residual-add + RMSNorm forward pass.

This file is the one kernel source of addrmsnorm. The JIT launcher (``launcher.py``) and the
ahead-of-time C++ build both compile ``fused_add_rmsnorm_fwd`` from here, with the constexpr
specializations listed in ``configs.py``.

The contract, per row of H elements:

    h            = float32(x) + float32(residual)
    residual_out = cast(h, residual_out dtype)
    rstd         = 1 / sqrt(sum(h * h) / H + eps)
    y            = cast(h * rstd * (float32(weight) + weight_offset), out dtype)

Points the contract insists on, and how this source honours them:

* The add is done in fp32. x and residual are upcast right after their loads and never added in
  fp16/bf16: over many layers a narrow add loses bits of the residual stream and skews the variance.
* eps sits inside the square root, is added exactly once, here, and is owned by the caller of this
  kernel. The rstd this kernel writes already includes it, so a consumer of rstd (the backward pass)
  must not add eps again.
* The mean divides by H, the full row length. Masked lanes are loaded as 0.0 and add nothing to the
  sum of squares; dividing by the count of unmasked lanes would be wrong.
* The weight has shape (H,) and is indexed by column only. Whatever its dtype (fp16, bf16, fp32), it
  is upcast to fp32 and weight_offset (Gemma's 1 + w) is added in fp32 before the multiply.
* Every output is cast exactly once, at its store.
* Aliasing. out may be x or residual, and residual_out may be residual or x, with the same pointer
  and strides (outputs never alias each other; the launcher rejects that). Every program reads a
  tile in full before it stores any part of it, so exact aliasing is safe. The looped path stores
  residual_out chunk by chunk in pass 1, but each chunk's x and residual have already been read and
  pass 2 only reads residual_out, which holds h by then.
* Looped path precision: pass 2 reloads h from residual_out, so y is computed from h rounded to the
  residual_out dtype (exact for an fp32 residual stream). This costs at most half an ulp of that
  dtype in y, and saves keeping a whole row in registers.
* Row offsets are computed in int64, so tensors of more than 2**31 elements do not overflow.
* Alignment reaches the kernel as the ALIGN constexpr (H and every row stride are multiples of it),
  chosen by configs.align_elems for the JIT and the AOT build alike; H and the strides are not
  specialized by value, so the two paths compile the same code for the same call.
* HF numerics (the HF_NUMERICS constexpr, `numerics="hf"` in Python, ADDRMSNORM_FLAG_HF_NUMERICS in
  C) reproduces HF's LlamaRMSNorm applied after a residual add in the model dtype: it normalizes
  h rounded to the residual dtype, computes rstd as torch does (mean as sum * fp32(1/H), rsqrtf),
  and rounds h * rstd to the activation dtype before the weight multiply. It exists for bit
  compatibility with HF checkpoints' reference outputs; the contract's single rounding is the
  more accurate of the two.
* Batch invariance: a row's reduction order depends only on the constexpr configuration, which the
  dispatch rule picks from H and the dtypes, never from the row count.

The kernels know nothing of torch: they take pointers, sizes and strides.
"""

import triton
import triton.language as tl


@triton.jit
def _rstd_from_sum_sq(sum_sq, H, eps, HF_NUMERICS: tl.constexpr):
    if HF_NUMERICS:
        # What torch does for HF's `torch.rsqrt(h.pow(2).mean(-1) + eps)`: the mean multiplies by
        # the fp32 reciprocal of the count, and rsqrt is CUDA's rsqrtf (libdevice, 2 ulp).
        inv_h = tl.math.div_rn(1.0, H + 0.0)
        return tl.math.rsqrt(sum_sq * inv_h + eps)
    # Correctly rounded divide and sqrt: rstd should not depend on fast-math approximations.
    mean_sq = tl.math.div_rn(sum_sq, H + 0.0)  # H may arrive as the constexpr 1: no .to()
    return tl.math.div_rn(1.0, tl.math.sqrt_rn(mean_sq + eps))


@triton.jit
def _scale(h, rstd, w, out_dtype, HF_NUMERICS: tl.constexpr):
    # y before its store. The contract: h * rstd * w in fp32, rounded once. HF's LlamaRMSNorm
    # instead rounds the normalized value to the activation dtype and then multiplies by the
    # weight: `weight * (h * rstd).to(input_dtype)`.
    if HF_NUMERICS:
        return (h * rstd).to(out_dtype).to(tl.float32) * w
    return h * rstd * w


@triton.jit
def _single_pass_rows(
    x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr, rstd_ptr,
    n_rows, H,
    stride_x_row, stride_residual_row, stride_out_row, stride_residual_out_row,
    eps, weight_offset,
    BLOCK_H: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr, HAS_RSTD: tl.constexpr,
    HF_NUMERICS: tl.constexpr,
):
    # A [ROWS_PER_PROGRAM, BLOCK_H] tile: the whole of each row stays in registers.
    rows = tl.program_id(0).to(tl.int64) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    cols = tl.arange(0, BLOCK_H)
    row_mask = rows < n_rows
    col_mask = cols < H
    mask = row_mask[:, None] & col_mask[None, :]
    rows_2d = rows[:, None]
    cols_2d = cols[None, :]

    x = tl.load(x_ptr + rows_2d * stride_x_row + cols_2d, mask=mask, other=0.0)
    r = tl.load(residual_ptr + rows_2d * stride_residual_row + cols_2d, mask=mask, other=0.0)
    h = x.to(tl.float32) + r.to(tl.float32)  # fp32 add: the residual stream must not lose bits
    h_stored = h.to(residual_out_ptr.dtype.element_ty)
    tl.store(residual_out_ptr + rows_2d * stride_residual_out_row + cols_2d, h_stored, mask=mask)
    if HF_NUMERICS:  # HF normalizes the rounded residual it carries, not the fp32 sum
        h = h_stored.to(tl.float32)

    rstd = _rstd_from_sum_sq(tl.sum(h * h, axis=1), H, eps, HF_NUMERICS)
    if HAS_RSTD:
        tl.store(rstd_ptr + rows, rstd, mask=row_mask)

    w = tl.load(weight_ptr + cols, mask=col_mask, other=0.0).to(tl.float32) + weight_offset
    y = _scale(h, rstd[:, None], w[None, :], out_ptr.dtype.element_ty, HF_NUMERICS)
    tl.store(out_ptr + rows_2d * stride_out_row + cols_2d, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _looped_row(
    x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr, rstd_ptr,
    H,
    stride_x_row, stride_residual_row, stride_out_row, stride_residual_out_row,
    eps, weight_offset,
    BLOCK_H: tl.constexpr, HAS_RSTD: tl.constexpr, HF_NUMERICS: tl.constexpr,
):
    # One row per program, walked in BLOCK_H chunks twice.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x_row
    residual_row = residual_ptr + row * stride_residual_row
    out_row = out_ptr + row * stride_out_row
    residual_out_row = residual_out_ptr + row * stride_residual_out_row

    # Pass 1: h = x + residual, store it as residual_out, accumulate sum(h*h) per lane.
    acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    for start in range(0, H, BLOCK_H):
        cols = start + tl.arange(0, BLOCK_H)
        mask = cols < H
        x = tl.load(x_row + cols, mask=mask, other=0.0)
        r = tl.load(residual_row + cols, mask=mask, other=0.0)
        h = x.to(tl.float32) + r.to(tl.float32)  # fp32 add
        h_stored = h.to(residual_out_ptr.dtype.element_ty)
        tl.store(residual_out_row + cols, h_stored, mask=mask)
        if HF_NUMERICS:
            h = h_stored.to(tl.float32)
        acc += h * h
    rstd = _rstd_from_sum_sq(tl.sum(acc, axis=0), H, eps, HF_NUMERICS)
    if HAS_RSTD:
        tl.store(rstd_ptr + row, rstd)

    # Make every thread's pass-1 stores visible to the whole program before pass 2 reads them back.
    tl.debug_barrier()

    # Pass 2: reload h from residual_out (not from x + residual: an aliased output overwrote them).
    for start in range(0, H, BLOCK_H):
        cols = start + tl.arange(0, BLOCK_H)
        mask = cols < H
        h = tl.load(residual_out_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32) + weight_offset
        y = _scale(h, rstd, w, out_ptr.dtype.element_ty, HF_NUMERICS)
        tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


# H and the strides are not specialized by value: their alignment reaches the kernel only through
# the ALIGN constexpr, which the JIT launcher and the AOT build choose by the same rule, so both
# compile the same code (and give the same bits) for the same call.
@triton.jit(do_not_specialize=["n_rows", "H", "stride_x_row", "stride_residual_row", "stride_out_row",
                               "stride_residual_out_row"])
def fused_add_rmsnorm_fwd(
    x_ptr,                    # [n_rows, H] input activations (fp16, bf16 or fp32)
    residual_ptr,             # [n_rows, H] residual stream (x's dtype, or fp32)
    weight_ptr,               # [H] RMSNorm weight, any of the three float dtypes
    out_ptr,                  # [n_rows, H] normalized output, x's dtype; may alias x or residual
    residual_out_ptr,         # [n_rows, H] new residual h, residual's dtype; may alias residual or x
    rstd_ptr,                 # [n_rows] fp32 1/sqrt(mean(h*h) + eps); read only if HAS_RSTD
    n_rows,                   # number of rows
    H,                        # elements per row (the normalized dimension), > 0
    stride_x_row,             # elements between consecutive rows of x
    stride_residual_row,      # elements between consecutive rows of residual
    stride_out_row,           # elements between consecutive rows of out
    stride_residual_out_row,  # elements between consecutive rows of residual_out
    eps,                      # fp32, > 0, added inside the sqrt
    weight_offset,            # fp32, added to the weight (0.0 for LLaMA, 1.0 for Gemma)
    BLOCK_H: tl.constexpr,           # columns per tile: >= H when single-pass, the chunk when looped
    ROWS_PER_PROGRAM: tl.constexpr,  # rows per program (single-pass only; 1 when looped)
    LOOPED: tl.constexpr,            # two passes over a row too wide to keep in registers
    HAS_RSTD: tl.constexpr,          # write rstd
    ALIGN: tl.constexpr,             # H and every row stride are multiples of ALIGN elements
    HF_NUMERICS: tl.constexpr,       # HF LlamaRMSNorm's roundings instead of the contract's
):
    # (v // ALIGN) * ALIGN == v by the launcher's promise; written this way, it tells the compiler
    # that rows start on ALIGN-element boundaries and that the mask is uniform over ALIGN columns,
    # so it can use 16-byte accesses where H is a multiple of 8 (16-bit) or 4 (fp32), not only 16.
    H = (H // ALIGN) * ALIGN
    stride_x_row = (stride_x_row // ALIGN) * ALIGN
    stride_residual_row = (stride_residual_row // ALIGN) * ALIGN
    stride_out_row = (stride_out_row // ALIGN) * ALIGN
    stride_residual_out_row = (stride_residual_out_row // ALIGN) * ALIGN
    if LOOPED:
        _looped_row(x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr, rstd_ptr,
                    H, stride_x_row, stride_residual_row, stride_out_row, stride_residual_out_row,
                    eps, weight_offset, BLOCK_H, HAS_RSTD, HF_NUMERICS)
    else:
        _single_pass_rows(x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr, rstd_ptr,
                          n_rows, H,
                          stride_x_row, stride_residual_row, stride_out_row, stride_residual_out_row,
                          eps, weight_offset, BLOCK_H, ROWS_PER_PROGRAM, HAS_RSTD, HF_NUMERICS)
