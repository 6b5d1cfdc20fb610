"""Triton kernels for the fused residual-add + RMSNorm forward pass.

This file is the one kernel source of addrmsnorm. The JIT launcher (``launcher.py``) and the
ahead-of-time C++ build both compile ``rmsnorm_fwd`` from here, with the constexpr
specializations listed in ``configs.py``.

The contract, per row of H elements (x_scale 1 and the weight given, unless a call says otherwise:
the scaled residual add and the weightless norm, both runtime arguments):

    h            = float32(x) * x_scale + float32(residual)
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
* HF numerics (the HF_NUMERICS constexpr, `numerics="hf"` in Python, ADDRMSNORM_NUMERICS_HF in
  C) reproduces HF's RMSNorm applied after a residual add in the model dtype: it normalizes h
  rounded to the residual dtype and computes rstd as torch does (mean as sum * fp32(1/H), rsqrtf).
  Then HF_NUMERICS 1, LlamaRMSNorm's form (Llama, Mistral, Qwen), rounds h * rstd to the
  activation dtype before the weight multiply; HF_NUMERICS 2, the form of HF's norms of an offset
  weight (Gemma 1/2/3's `1 + w`), multiplies by the weight in fp32 and rounds once. The launchers
  pick 2 where weight_offset != 0 (configs.numerics_mode). It exists for compatibility with HF
  models' outputs; the contract's single rounding of the fp32 sum is the more accurate.
* What is a specialization and what is an argument. Constexprs are what changes the code's shape,
  its registers or its memory accesses: the tile (BLOCK_H, ROWS_PER_PROGRAM, LOOPED, WEIGHT_FIRST),
  ALIGN, HF_NUMERICS, PDL, and the pointer types (the weight typed, or as int16 bits). Whether rstd
  is written (write_rstd), whether residual_out has a gradient (has_dres_out) and which 16-bit
  type a weight's bits are (weight_dtype) are runtime arguments: a store in a branch at the end, a
  predicated load, or a branch around a conversion, never around a load. configs.py has the
  measurements behind this.
* Batch invariance: a row's reduction order depends only on the constexpr configuration, which the
  dispatch rule picks from H and the dtypes, never from the row count.
* Programmatic dependent launch (the PDL constexpr, compiled in wherever the arch has it: sm_90+).
  The first thing every program does is `griddepcontrol.wait`, before it reads or writes any
  memory: launched with the PDL attribute, the kernel may start while the kernel before it in the
  stream is still running, and the wait holds it until that kernel has finished and its writes are
  visible. It then lets the next kernel in the stream start early (`launch_dependents`); that
  kernel, if launched with PDL, must wait the same way. Launched without the attribute, both are
  no-ops.

* The plain norm (no residual) is this forward with RESIDUAL off: h is x, nothing is stored but y and
  rstd, and its rows are addressed GROUPED, (group, row in group) with two leading strides, so that a
  head's rows inside a fused QKV buffer are read in place. SPLIT (the QK norm) gives a group's rows from
  group_split on a second weight: a token's q heads and k heads in one launch. The quantized forward
  takes RESIDUAL too (the plain norm's quantized outputs).
* The sandwich norm (SANDWICH, with RESIDUAL) normalizes x first with its own weight, p = x * rstd_x *
  (post_weight + post_weight_offset), and adds p in x's place: p stays fp32 (HF numerics: rounded to x's
  dtype, as HF's post-norm returns it). rstd_x is a reduction of its own over x before h exists (the
  looped paths walk x once more for it), and is stored after the n_rows rstd of h.
* The gated norm (GATED, the plain norm's single pass) reads z's tile beside x's and gates with
  silu(z) = z / (1 + exp(-z)) in fp32: after the norm (gate_first 0; HF numerics round the weighted norm
  to x's dtype first, as Qwen3NextRMSNormGated does) or before it (gate_first 1: rmsnorm(x * silu(z))).
  A row's groups are the rows of a GROUPED group (stride_x_group the group's width), and each takes its
  columns of the weight. gate_first is a runtime argument, taken by selects (x * 1 and y * 1 are exact) rather
  than branches: a branch held h both ways across the reduction (sm_90: 74 registers against 60 at 8192 on 16 warps).
* The pair (PAIR, the plain norm's single pass over rows of one stride): two parts of the same rows, of
  two widths and two weights (MLA's q and kv latents), in one launch. The grid's first pair_split programs
  take x's rows and the rest b's, each program on the other part's pointers, width and strides (a uniform
  branch before any load). x is the wider part (the launchers put it first), on its config's tile; b's programs
  take PAIR_PACK of its rows in a tile of BLOCK_H / PAIR_PACK columns (configs.pair_pack), as many elements.

The kernels know nothing of torch: they take pointers, sizes and strides.
"""

import inspect

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

try:  # a package module; aot_build.py loads this file by path and never interprets
    from . import interpreter_compat as _interpreter_compat
except ImportError:
    _interpreter_compat = None
if _interpreter_compat is not None:
    _interpreter_compat.apply()  # NumPy >= 2.4 under TRITON_INTERPRET=1 (see that module)
# The CPU interpreter cannot run libdevice calls: _quantize rounds int8 another exact way under it.
_INTERPRETED = tl.constexpr(_interpreter_compat is not None and _interpreter_compat.interpreting())


@triton.jit
def _weight_f32(w_raw, weight_dtype):
    """A weight tile as loaded, upcast to fp32. A typed weight converts as its type says. The "w16"
    weight (configs.WEIGHT_W16) arrives as int16 bits, one kernel for fp16 and bf16 weights:
    the runtime weight_dtype (the C ABI's addrmsnorm_dtype, 1 for bf16) picks the conversion. The
    branch holds the conversion only, never the load, so it never delays a load."""
    if w_raw.dtype == tl.int16:
        if weight_dtype == 1:
            w = w_raw.to(tl.bfloat16, bitcast=True).to(tl.float32)
        else:
            w = w_raw.to(tl.float16, bitcast=True).to(tl.float32)
    else:
        w = w_raw.to(tl.float32)
    return w


@triton.jit
def _load_weight_any(weight_ptr, offs, mask, weight_dtype):
    """The backward's weight: untyped bytes, read as weight_dtype says (a uniform branch per load;
    the backward reads the weight once per program, or once per chunk after dy and h). weight_dtype 3
    (configs.WEIGHTLESS_DTYPE) is the weightless norm's: nothing read, every w 1."""
    if weight_dtype == 0:
        w = tl.load(weight_ptr.to(tl.pointer_type(tl.float16)) + offs, mask=mask, other=0.0).to(tl.float32)
    elif weight_dtype == 1:
        w = tl.load(weight_ptr.to(tl.pointer_type(tl.bfloat16)) + offs, mask=mask, other=0.0).to(tl.float32)
    elif weight_dtype == 2:
        w = tl.load(weight_ptr.to(tl.pointer_type(tl.float32)) + offs, mask=mask, other=0.0)
    else:
        w = tl.zeros(offs.shape, dtype=tl.float32) + 1.0
    return w


@triton.jit
def _load_w(weight_ptr, cols, mask, has_weight):
    """A weight tile as loaded. has_weight 0 is the weightless norm: nothing is read and the tile is
    zeros, to which _weight_offset adds 1 (so w is exactly 1). A predicated load, not a branch."""
    return tl.load(weight_ptr + cols, mask=mask & (has_weight != 0), other=0)


@triton.jit
def _weight_offset(weight_offset, has_weight):
    """The offset added to every loaded weight: the caller's, plus 1 for the weightless norm (whose
    loads are all predicated off, _load_w). Validation refuses an offset without a weight."""
    return weight_offset + (has_weight == 0).to(tl.float32)


@triton.jit
def _residual_add(x, r, x_scale, HF_NUMERICS: tl.constexpr):
    """h = residual + x_scale * x in fp32 (the scaled residual of Granite and MiniCPM; x_scale 1 is the
    plain add bit for bit, as a multiply by 1 is exact, fused into the add or not). HF's models scale
    in their dtype first, `residual + x * multiplier`, so HF numerics round x * x_scale to x's dtype."""
    xs = x.to(tl.float32) * x_scale
    if HF_NUMERICS:
        xs = xs.to(x.dtype).to(tl.float32)
    return xs + r.to(tl.float32)


@triton.jit
def _post_norm(x, rstd_x, wp, HF_NUMERICS: tl.constexpr):
    """The sandwich norm's first norm, p = rmsnorm(x; post_weight), the value the residual add takes in
    x's place: fp32 under the contract (no rounding before the add), rounded to x's dtype under HF
    numerics, as HF's post-attention and post-feedforward norms return it (Gemma 2/3, GLM-4)."""
    p = _scale(x.to(tl.float32), rstd_x, wp, x.dtype, HF_NUMERICS)
    if HF_NUMERICS:  # one return type: the rounded value, held in fp32 (exact)
        p = p.to(x.dtype).to(tl.float32)
    return p


@triton.jit
def _post_rstd(x_row, H, eps, BLOCK_H: tl.constexpr, HF_NUMERICS: tl.constexpr):
    """The looped paths' pass 0 of the sandwich norm: rstd of x, the first norm's, before any h exists."""
    acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    for start in range(0, H, BLOCK_H):
        cols = start + tl.arange(0, BLOCK_H)
        xf = tl.load(x_row + cols, mask=cols < H, other=0.0, eviction_policy="evict_last").to(tl.float32)
        acc += xf * xf
    return _rstd_from_sum_sq(tl.sum(acc, axis=0), H, eps, HF_NUMERICS)


@triton.jit
def _silu(z):
    """silu(z) = z / (1 + exp(-z)) in fp32, as torch computes it (an IEEE divide; CUDA's expf, which
    is libdevice's: the GPU's bits are HF's). The interpreter cannot run libdevice: its exp is NumPy's."""
    zf = z.to(tl.float32)
    if _INTERPRETED:
        e = tl.exp(-zf)
    else:
        e = tl.extra.cuda.libdevice.exp(-zf)
    return tl.math.div_rn(zf, 1.0 + e)


@triton.jit
def _rope_columns(cols, half, style):
    """The rotation's column pairs over the first 2 * half columns of a head (the rest are not rotated):
    each column's partner, its frequency (the angle's index in a cache of half cos then half sin), whether
    it is its pair's first (which takes -partner * sin), and whether it is rotated at all. style 0: NeoX's
    halves (HF's rotate_half), c with c + half; 1: GPT-J's interleaved pairs, 2i with 2i + 1."""
    rotated = cols < 2 * half
    gptj = style != 0
    first = tl.where(gptj, (cols % 2) == 0, cols < half)
    partner = tl.where(gptj, tl.where(first, cols + 1, cols - 1), tl.where(first, cols + half, cols - half))
    partner = tl.where(rotated, partner, cols)
    freq = tl.where(gptj, cols // 2, tl.where(first, cols, cols - half))
    return partner, freq, first & rotated, rotated


@triton.jit
def _mul_rn(a, b):
    """a * b in fp32, rounded once, as PTX's mul.rn.f32: an explicit rounding mode that ptxas never contracts
    into an FMA, in inline assembly that LLVM never narrows, and without libdevice's flush to zero. The
    interpreter's NumPy multiply is the same rounding."""
    if _INTERPRETED:
        return a * b
    return tl.inline_asm_elementwise("mul.rn.f32 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.float32, is_pure=True,
                                     pack=1)


@triton.jit
def _add_rn(a, b):
    """a + b in fp32 (PTX's add.rn.f32), as _mul_rn."""
    if _INTERPRETED:
        return a + b
    return tl.inline_asm_elementwise("add.rn.f32 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.float32, is_pure=True,
                                     pack=1)


@triton.jit
def _rope(y, yp, cos, sin, out_dtype, HF_NUMERICS: tl.constexpr):
    """The rotation of a normalized row: y * cos + yp * sin, where yp is the partner's normalized value and sin
    arrives signed (negated on each pair's first column: HF's rotate_half; columns past the rotary dims arrive with
    cos 1 and sin 0: y itself). The contract rotates the fp32 norm, one rounding at the store. HF's
    apply_rotary_pos_emb rotates the norm as its module returned it (rounded), and rounds each product and the
    sum: `q * cos + rotate_half(q) * sin` (rounding is symmetric: the negated product rounds to the negated
    rounding). Its products and sum go through _mul_rn and _add_rn: plain operators let the compiler contract
    `round(y * cos) + b` into one fp16 or bf16 FMA (fma.rn.f16x2 on sm_90), which skips the product's rounding."""
    if HF_NUMERICS:
        y = y.to(out_dtype).to(tl.float32)
        yp = yp.to(out_dtype).to(tl.float32)
        a = _mul_rn(y, cos).to(out_dtype).to(tl.float32)
        b = _mul_rn(yp, sin).to(out_dtype).to(tl.float32)
        return _add_rn(a, b)
    return y * cos + yp * sin


@triton.jit
def _token_positions(pos_ptr, tok, row_mask, mask, max_position, POSITIONS: tl.constexpr):
    """The row of the angles of each row's token: its position (POSITIONS: pos_ptr's, into a cache of max_position
    rows), else the token itself. A position outside the cache rotates nothing and writes nothing of its token: the
    masks returned leave its rows out."""
    if POSITIONS:
        pos = tl.load(pos_ptr + tok, mask=row_mask, other=0).to(tl.int64)
        in_cache = (pos >= 0) & (pos < max_position)
        pos = tl.where(in_cache, pos, 0)
        row_mask = row_mask & in_cache
        mask = mask & in_cache[:, None]
    else:
        pos = tok.to(tl.int64)
    return pos, row_mask, mask


@triton.jit
def _rope_halves(x_ptr, weight_ptr, weight2_ptr, out_ptr, n_rows, H, eps, group_rows, group_split,
                 stride_x_row, stride_x_group, stride_out_row, stride_out_group, has_weight, weight_dtype,
                 weight_offset, cos_ptr, sin_ptr, pos_ptr, stride_cos, stride_sin, half, max_position,
                 BLOCK_H: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr, POSITIONS: tl.constexpr,
                 HF_NUMERICS: tl.constexpr):
    """The QK norm with NeoX's rotation of every column (H = 2 * half <= BLOCK_H), one program's rows (a token's
    heads group_rows consecutive rows, those from group_split on taking weight2), each head read once, as its two
    halves lo = columns [0, half) and hi = [half, 2 * half), [R, BLOCK_H / 2] tiles of one layout: a thread holds
    both columns of each of its pairs. rstd from the halves' sums of squares (sum(lo^2) + sum(hi^2): the
    backward's order, _bwd_rope_halves); out_lo = y_lo cos_lo - y_hi sin_lo, out_hi = y_hi cos_hi + y_lo sin_hi
    (HF's rotate_half), each y from its own column's h, rstd and weight. Everything a row needs (its token,
    position, weight) is computed in the halves' layout. A cache's row (POSITIONS) is half cosines then half
    sines, by frequency: cos_hi = cos_lo and sin_hi = sin_lo, read once; HF's cos and sin are by column, each half
    read. A position outside the cache writes nothing."""
    rows = tl.program_id(0).to(tl.int64) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    c = tl.arange(0, BLOCK_H // 2)
    cc = c[None, :]
    row_mask = rows < n_rows
    r32 = rows.to(tl.int32)
    tok = r32 // group_rows
    in_group = r32 - tok * group_rows
    m = row_mask[:, None] & (c < half)[None, :]
    # The position's gather first: a cache's row waits on it, and the head's loads do not (they keep m; the rows
    # whose position is outside the cache, left out of m_a, are read and never written).
    pos, _, m_a = _token_positions(pos_ptr, tok, row_mask, m, max_position, POSITIONS)
    x_rows = _row_offset(rows, stride_x_row, group_rows, stride_x_group, True)[:, None]
    x_lo = tl.load(x_ptr + x_rows + cc, mask=m, other=0.0).to(tl.float32)
    x_hi = tl.load(x_ptr + x_rows + (cc + half), mask=m, other=0.0).to(tl.float32)
    rstd = _rstd_from_sum_sq(tl.sum(x_lo * x_lo, axis=1) + tl.sum(x_hi * x_hi, axis=1), H, eps, HF_NUMERICS)
    m = m_a
    out_dtype = out_ptr.dtype.element_ty
    # the weight of each row's part (q's or k's) as a tile: one layout with x's halves, no conversion
    w_off = _weight_offset(weight_offset, has_weight)
    w_rows = tl.where((in_group >= group_split)[:, None], weight2_ptr, weight_ptr) + cc
    wm = m & (has_weight != 0)
    w_lo = _weight_f32(tl.load(w_rows, mask=wm, other=0), weight_dtype) + w_off
    w_hi = _weight_f32(tl.load(w_rows + half, mask=wm, other=0), weight_dtype) + w_off
    y_lo = _scale(x_lo, rstd[:, None], w_lo, out_dtype, HF_NUMERICS)
    y_hi = _scale(x_hi, rstd[:, None], w_hi, out_dtype, HF_NUMERICS)
    a_row = pos[:, None] * stride_cos + cc
    if POSITIONS:
        cos_lo = tl.load(cos_ptr + a_row, mask=m, other=1.0).to(tl.float32)
        sin_hi = tl.load(cos_ptr + (a_row + half), mask=m, other=0.0).to(tl.float32)
        cos_hi = cos_lo
        sin_lo = sin_hi
    else:
        s_row = pos[:, None] * stride_sin + cc
        cos_lo = tl.load(cos_ptr + a_row, mask=m, other=1.0).to(tl.float32)
        cos_hi = tl.load(cos_ptr + (a_row + half), mask=m, other=1.0).to(tl.float32)
        sin_lo = tl.load(sin_ptr + s_row, mask=m, other=0.0).to(tl.float32)
        sin_hi = tl.load(sin_ptr + (s_row + half), mask=m, other=0.0).to(tl.float32)
    out_rows = _row_offset(rows, stride_out_row, group_rows, stride_out_group, True)[:, None]
    # sin negated in fp32 (the interpreter negates bf16 wrongly)
    tl.store(out_ptr + out_rows + cc, _rope(y_lo, y_hi, cos_lo, -sin_lo, out_dtype, HF_NUMERICS).to(out_dtype),
             mask=m)
    tl.store(out_ptr + out_rows + (cc + half), _rope(y_hi, y_lo, cos_hi, sin_hi, out_dtype, HF_NUMERICS).to(out_dtype),
             mask=m)


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
    # y before its store. The contract: h * rstd * w in fp32, rounded once, and so do HF's norms of
    # an offset weight (Gemma's `(h * rstd * (1 + w.float())).type_as(h)`: HF_NUMERICS 2). HF's
    # LlamaRMSNorm (HF_NUMERICS 1) instead rounds the normalized value to the activation dtype and
    # then multiplies by the weight: `weight * (h * rstd).to(input_dtype)`.
    if HF_NUMERICS == 1:
        return (h * rstd).to(out_dtype).to(tl.float32) * w
    return h * rstd * w


# ----- quantized outputs (rmsnorm_quant_fwd) ----------------------------------------------
#
# y is the contract's fp32 value. QUANT 1 (static): q = quant(y * (1 / scale)), the scale read from
# memory. QUANT 2 (per token) and QUANT 3 (per group of 64 or 128 columns; group_size, a runtime
# argument: the 128-wide amax is the max of two 64-wide ones, so one kernel serves both sizes):
# s = max(min(amax|y|, scale_ub), QUANT_AMAX_FLOOR) / qmax, rounded up to a power of two with ue8m0,
# and q = quant(y * (1 / s)); the scales are written as fp32. quant: int8 clamps to [-128, 127] and
# rounds half to even; float8_e4m3fn clamps to +-448 and converts, which rounds to nearest even. Clamping first also keeps the product y * inv from being contracted into the rounding add.


@triton.jit
def _rint(v):
    """v rounded to an integer, half to even (|v| < 2**22)."""
    if _INTERPRETED:
        # Adding and subtracting 1.5 * 2**23 leaves v rounded to an integer, half to even (fp32
        # round-to-nearest-even): the same values as rint below.
        return (v + 12582912.0) - 12582912.0
    # rint (cvt.rni: half to even) holds fewer registers than the add trick: per-token int8 at
    # block 32768 (32 warps) 62 registers against 63 and 8 bytes of stack on sm_90, and at block
    # 8192 (8 warps) 64 against 71.
    return tl.extra.cuda.libdevice.rint(v)


@triton.jit
def _quantize(v, q_dtype: tl.constexpr):
    if q_dtype == tl.int8:
        return _rint(tl.minimum(tl.maximum(v, -128.0), 127.0)).to(tl.int8)
    # float8_e4m3fn (validation.QUANT_DTYPES): qmax 448
    c = tl.minimum(tl.maximum(v, -448.0), 448.0)
    if _INTERPRETED:
        # The interpreter's fp32 -> float8 conversion neither rounds to nearest even nor saturates
        # (triton 3.6: 1.0625 -> 1.125), but converts e4m3 values exactly. So round first, exactly, as
        # int8 does: to a multiple of the spacing of e4m3 values at c's binade, 2**(e - 3) with 3
        # mantissa bits, where e is c's exponent, at least -6 (below it the subnormals' spacing 2**-9).
        # |c| / spacing < 16, so _rint rounds it to an integer, half to even.
        e = tl.maximum(((c.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127, -6)
        spacing = ((e - 3 + 127) << 23).to(tl.float32, bitcast=True)
        c = _rint(c / spacing) * spacing
    return c.to(q_dtype)


@triton.jit
def _e2m1(v):
    """The e2m1 (fp4) code of v, 0-15 in an int32: rounded to nearest even, saturating at +-6; the sign
    bit set where v < 0 (a negative value that rounds to 0 is -0, code 8). With e = max(exponent of
    |v|, 0) (0, 1 or 2 below 6), the values of the binade are n * 2**(e - 1) and the code is n + 2 * e.
    One fp32 add rounds |v| there: c = 1.5 * 2**(22 + e) has a spacing of 2**(e - 1), so the sum's
    bits are c's plus n (n <= 4), and its bits above the mantissa's top one, (bits >> 22) = 299 + 2 * e,
    give the binade back. Exact on every arch and under the interpreter, with no float-to-int
    conversion: the forward's block-scaled fp4 epilogue is instruction-bound (perf-notes)."""
    a = tl.minimum(tl.abs(v), 6.0)
    c = (tl.maximum(a.to(tl.int32, bitcast=True), 0x3F800000) & 0x7F800000) + 0x0B400000
    t = (a + c.to(tl.float32, bitcast=True)).to(tl.int32, bitcast=True)
    return (t & 7) + (t >> 22) + tl.where(v < 0, -291, -299)


@triton.jit
def _dynamic_scale(amax, scale_ub_ptr, has_ub, ue8m0, q_dtype: tl.constexpr):
    """s = max(min(amax, scale_ub), floor) / qmax, then (ue8m0) rounded up to a power of two."""
    if has_ub != 0:
        amax = tl.minimum(amax, tl.load(scale_ub_ptr))
    qmax: tl.constexpr = 127.0 if q_dtype == tl.int8 else 448.0
    s = tl.math.div_rn(tl.maximum(amax, 1e-10), qmax)  # 1e-10: configs.QUANT_AMAX_FLOOR
    if ue8m0 != 0:  # 2**ceil(log2(s)) from the bits: bump the exponent unless the mantissa is 0
        bits = s.to(tl.int32, bitcast=True)
        e = (bits >> 23) + ((bits & 0x7FFFFF) != 0).to(tl.int32)
        s = (e << 23).to(tl.float32, bitcast=True)
    return s


@triton.jit
def _quant_groups(y, rows, row_mask, col0, H, scales_ptr, scale_ub_ptr, stride_s_row, stride_s_group,
                  group_size, has_ub, ue8m0, q_dtype: tl.constexpr, R: tl.constexpr, B: tl.constexpr):
    """Per-group scales of a [R, B] tile whose first column is col0 (a multiple of 128), written to
    scales; returns y * (1 / s) per group. group_size is 64 or 128."""
    if B >= 128:
        # As [R, pairs, 2, 64]: a 128-wide group is a pair of 64-wide ones, its amax the pair's max,
        # broadcast back over the pair. Every step stays in one layout (the tile's, and its slices):
        # no layout conversion through shared memory per tile.
        P: tl.constexpr = B // 128
        y4 = tl.reshape(y, [R, P, 2, 64])
        a64 = tl.max(tl.abs(y4), axis=3)
        a = tl.where(group_size == 128, tl.max(a64, axis=2)[:, :, None], a64)
        s = _dynamic_scale(a, scale_ub_ptr, has_ub, ue8m0, q_dtype)
        k = 2 * tl.arange(0, P)[None, :, None] + tl.arange(0, 2)[None, None, :]  # the 64-wide group
        per = group_size // 64
        smask = row_mask[:, None, None] & ((col0 + k * 64) < H) & ((k % per) == 0)
        tl.store(scales_ptr + rows[:, None, None] * stride_s_row + ((col0 // 64 + k) // per) * stride_s_group,
                 s, mask=smask)
        return tl.reshape(y4 * tl.math.div_rn(1.0, s)[:, :, :, None], [R, B])
    else:  # a 64-wide tile: 64-wide groups only (a 128-wide group needs H >= 128, so B >= 128)
        a64 = tl.max(tl.abs(y), axis=1)
        s = _dynamic_scale(a64, scale_ub_ptr, has_ub, ue8m0, q_dtype)
        tl.store(scales_ptr + rows * stride_s_row + (col0 // 64) * stride_s_group, s, mask=row_mask & (col0 < H))
        return y * tl.math.div_rn(1.0, s)[:, None]


# Block-scaled outputs (QUANT 4-6, configs.BLOCK_QUANT_MODES; Blackwell's GEMM inputs): one scale per
# block of BLK consecutive columns of a row (NVFP4 16, MX 32); y is the contract's fp32 value, a its
# block's amax |y|, every operation in fp32 and rounded to nearest:
#   NVFP4 (4): s = e4m3(min((a / 6) * g, 448)), g the global scale read from memory;
#              m = g / float(s) (0 where s == 0); q = e2m1(y * m)
#   MXFP8 (5), MXFP4 (6): t = a / qmax (448, 6); the scale 2**k with k = ceil(log2(t)) from t's bits,
#              at least -127 (biased exponent max(k + 127, 0): 0 for a == 0); q = quant(y * 2**-k)
# Scales are bytes (the e4m3 or e8m0 bits). Linear: scales[row * stride_s_row + block * stride_s_group].
# Swizzled (the 128 x 4 tiles of cuBLASLt's and CUTLASS's block-scaled GEMMs): element (m, k) at
# ((m // 128) * (K4 // 4) + k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + k % 4, K4 the block
# count rounded up to 4, rows rounded up to 128 (scale_rows): padding is written as zeros, which is
# what a block of y = 0 gets. A real row's padded blocks run its own code on masked loads; the padded
# rows of the last tile are written by the grid's last program (_swizzle_padding).


@triton.jit
def _quant_blocks(y, rows, srow_mask, col0, H, scale_ptr, scales_ptr, stride_s_row, stride_s_group, swizzled,
                  QUANT: tl.constexpr, R: tl.constexpr, B: tl.constexpr):
    """The block scales of a [R, B] tile of y whose first column is col0 (a multiple of B), written to
    scales for the rows of srow_mask; returns the values to round (y times each block's multiplier)."""
    BLK: tl.constexpr = 16 if QUANT == 4 else 32
    NB: tl.constexpr = B // BLK
    y3 = tl.reshape(y, [R, NB, BLK])
    a = tl.max(tl.abs(y3), axis=2)
    if QUANT == 4:
        g = tl.load(scale_ptr)
        s8 = _quantize(tl.math.div_rn(a, 6.0) * g, tl.float8e4nv)  # >= 0: clamped to 448, rounded to nearest even
        sf = s8.to(tl.float32)
        m = tl.where(sf == 0.0, 0.0, tl.math.div_rn(g, tl.where(sf == 0.0, 1.0, sf)))
        sbyte = s8.to(tl.uint8, bitcast=True)
    else:
        t = tl.math.div_rn(a, 448.0 if QUANT == 5 else 6.0)
        bits = t.to(tl.int32, bitcast=True)
        biased = tl.where(bits >= 0x800000, (bits >> 23) + ((bits & 0x7FFFFF) != 0).to(tl.int32),
                          (bits > 0x400000).to(tl.int32))
        m = ((254 - biased) << 23).to(tl.float32, bitcast=True)  # 2**(127 - biased): biased <= 253 for finite y
        sbyte = biased.to(tl.uint8)
    n_blocks = H // BLK
    k = col0 // BLK + tl.arange(0, NB)[None, :]
    r = rows[:, None]
    k4 = (n_blocks + 3) // 4 * 4
    if swizzled != 0:
        offs = ((r // 128) * (k4 // 4) + k // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + k % 4
        tl.store(scales_ptr + offs, sbyte, mask=srow_mask[:, None] & (k < k4))
        if 4 * BLK > B:  # a tile narrower than 4 blocks: the padded blocks of its only tile, as zeros
            kp = NB + tl.arange(0, 4)[None, :]
            offs = (r // 128) * (k4 // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + kp
            tl.store(scales_ptr + offs, tl.zeros([R, 4], dtype=tl.uint8), mask=srow_mask[:, None] & (kp < k4))
    else:
        tl.store(scales_ptr + r * stride_s_row + k * stride_s_group, sbyte, mask=srow_mask[:, None] & (k < n_blocks))
    return tl.reshape(y3 * m[:, :, None], [R, B])


@triton.jit
def _swizzle_padding(scales_ptr, n_rows, H, QUANT: tl.constexpr):
    """The swizzled scales of the rows from n_rows to the end of its 128-row tile, as zeros: written by
    the grid's last program, which carries real rows too (a grid over the padded rows spent 127
    programs on padding alone at n_rows = 1). Row m's scales of blocks 4j..4j+3 are one 4-byte word,
    word (m % 32) * 4 + m // 32 of the tile's 512-byte block j (validation: swizzled scales start on a
    16-byte boundary), so each step stores KB blocks' words, one per padded row, with an add apiece."""
    BLK: tl.constexpr = 16 if QUANT == 4 else 32
    KB: tl.constexpr = 4
    n_kb = (H // BLK + 3) // 4  # 512-byte blocks per tile
    tile = n_rows // 128
    words = scales_ptr.to(tl.pointer_type(tl.int32), bitcast=True) + tile.to(tl.int64) * n_kb * 128
    m = tl.arange(0, 128)
    word = ((m % 32) * 4 + m // 32)[None, :]
    pad = (m >= n_rows - tile * 128)[None, :]
    kb = tl.arange(0, KB)[:, None]
    for j in range(0, n_kb, KB):
        tl.store(words + (j + kb) * 128 + word, tl.zeros([KB, 128], dtype=tl.int32), mask=pad & (j + kb < n_kb))


@triton.jit
def _store_q(q_ptr, row_off, col0, v, mask_rows, H, QUANT: tl.constexpr, R: tl.constexpr, B: tl.constexpr):
    """q = quant(v) of a [R, B] tile at columns col0.. of rows at q_ptr + row_off ([R, 1] offsets).
    fp4 (QUANT 4, 6): two codes a byte, column 2i in the low nibble (torch's float4_e2m1fn_x2)."""
    if QUANT == 4 or QUANT == 6:
        lo, hi = tl.split(tl.reshape(_e2m1(v), [R, B // 2, 2]))
        c = col0 // 2 + tl.arange(0, B // 2)[None, :]
        tl.store(q_ptr + row_off + c, (lo | (hi << 4)).to(tl.uint8), mask=mask_rows[:, None] & (c < H // 2))
    else:
        c = col0 + tl.arange(0, B)[None, :]
        tl.store(q_ptr + row_off + c, _quantize(v, q_ptr.dtype.element_ty), mask=mask_rows[:, None] & (c < H))


@triton.jit
def _aligned(v, ALIGN: tl.constexpr):
    """v, which the launcher promises is a multiple of ALIGN, written as one: (v // ALIGN) * ALIGN tells
    the compiler that rows start on ALIGN-element boundaries and that a mask is uniform over ALIGN
    columns, so it can use accesses of ALIGN elements (up to 16 bytes). Each kernel's H and row strides
    pass through it first."""
    return (v // ALIGN) * ALIGN


@triton.jit
def _row_offset(rows, stride_row, group_rows, stride_group, GROUPED: tl.constexpr):
    """Elements from a tensor's start to each row (int64). GROUPED: the rows of a 3-D view (groups,
    group_rows, H) with two leading strides, as a head's row inside a fused QKV buffer is; else rows of
    one stride."""
    if GROUPED:
        # In int32 (n_rows is): a 32-bit division per row, not a 64-bit one.
        r32 = rows.to(tl.int32)
        g = r32 // group_rows
        return g.to(tl.int64) * stride_row + (r32 - g * group_rows).to(tl.int64) * stride_group
    return rows * stride_row


@triton.jit
def _out_rows(rows_2d, rows, stride_row, group_rows, stride_group, GROUPED: tl.constexpr):
    if GROUPED:
        return _row_offset(rows, stride_row, group_rows, stride_group, GROUPED)[:, None]
    return rows_2d * stride_row


@triton.jit
def _single_pass_rows(
    x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr,
    n_rows, H,
    stride_x_row, stride_residual_row, stride_out_row, stride_residual_out_row,
    eps, weight_offset, weight_dtype,
    BLOCK_H: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr, WEIGHT_FIRST: tl.constexpr, EVICT_LAST: tl.constexpr,
    RESIDUAL: tl.constexpr,
    # The unquantized forward: rstd (stored if write_rstd) and HF's roundings.
    rstd_ptr=None, write_rstd=0, HF_NUMERICS: tl.constexpr = 0,
    # GROUPED: rows as (group, row in group), two leading strides; SPLIT: the QK norm's second weight.
    GROUPED: tl.constexpr = False, group_rows=1, stride_x_group=0, stride_out_group=0,
    SPLIT: tl.constexpr = False, weight2_ptr=None, group_split=0,
    # The quantized epilogue (QUANT != 0, configs.QUANT_MODES): q in out's place, y if write_y.
    QUANT: tl.constexpr = 0, y_ptr=None, stride_y_row=0, write_y=0, scale_ptr=None, scales_ptr=None,
    scale_ub_ptr=None, stride_s_row=0, stride_s_group=0, group_size=0, has_ub=0, ue8m0=0, swizzled=0,
    # The weightless norm (has_weight 0) and the scaled residual add (x_scale).
    has_weight=1, x_scale=1.0,
    # SANDWICH: x is first normalized with its own weight (post_weight, post_weight_offset), and that
    # is added to the residual; the rstd of x is stored after the n_rows rstd of h.
    SANDWICH: tl.constexpr = False, post_weight_ptr=None, post_weight_offset=0.0,
    # GATED (GROUPED, no residual): y = rmsnorm(x) * silu(z) (gate_first 0, norm before gate) or
    # rmsnorm(x * silu(z)) (gate_first 1), each group of stride_x_group columns of a row normalized on
    # its own, the weight indexed by the column in the row (a group's rows step it by stride_x_group).
    GATED: tl.constexpr = False, z_ptr=None, stride_z_row=0, gate_first=0,
    # The grid's programs from first_program on take these rows (PAIR: the second part's programs).
    first_program=0,
    # ROPE (GROUPED, no residual): each normalized row rotated (_rope), its token's angles from cos and sin.
    ROPE: tl.constexpr = False, POSITIONS: tl.constexpr = False, cos_ptr=None, sin_ptr=None, pos_ptr=None,
    stride_cos=0, stride_sin=0, rope_half=0, rope_style=0, cos_by_freq=0, max_position=0,
):
    # A [ROWS_PER_PROGRAM, BLOCK_H] tile: the whole of each row stays in registers. The prologue builds h (the
    # residual add and its scale, the sandwich norm's first norm, the gate's product), the reduction gives rstd,
    # and the epilogues follow, each under its constexpr: the weight (the split's second weight, the gate's
    # columns), the rotation, the gate, the store or the quantization, rstd.
    rows = (tl.program_id(0) - first_program).to(tl.int64) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    cols = tl.arange(0, BLOCK_H)
    row_mask = rows < n_rows
    col_mask = cols < H
    mask = row_mask[:, None] & col_mask[None, :]
    rows_2d = rows[:, None]
    cols_2d = cols[None, :]
    x_rows, second, z_rows, w_cols = _tile_rows(rows, rows_2d, cols_2d, stride_x_row, group_rows, stride_x_group,
                                                group_split, stride_z_row, GROUPED, SPLIT, GATED)
    if WEIGHT_FIRST:  # in flight with x and residual (GATED: z), rather than after the reduction
        if GATED:
            w_raw = _load_w(weight_ptr, w_cols, mask, has_weight)
        else:
            w_raw = _load_w(weight_ptr, cols, col_mask, has_weight)
    # Evict-last: L2 keeps these lines over others (torch.compile's first read carries the same hint).
    x = tl.load(x_ptr + x_rows + cols_2d, mask=mask, other=0.0,
                eviction_policy="evict_last" if EVICT_LAST else "")
    if RESIDUAL:
        h, rstd_x = _residual_prologue(x, residual_ptr, residual_out_ptr, rows_2d, cols, cols_2d, col_mask, mask,
                                       stride_residual_row, stride_residual_out_row, H, eps, x_scale, weight_dtype,
                                       post_weight_ptr, post_weight_offset, EVICT_LAST, SANDWICH, HF_NUMERICS)
        g = 0.0
    else:  # the plain norm: h is x, exactly (no add, no rounding, nothing stored)
        h, g = _plain_prologue(x, z_ptr, z_rows, cols_2d, mask, gate_first, EVICT_LAST, GATED)
        rstd_x = 0.0

    rstd = _rstd_from_sum_sq(tl.sum(h * h, axis=1), H, eps, HF_NUMERICS)

    w_off = _weight_offset(weight_offset, has_weight)
    if GATED:
        if not WEIGHT_FIRST:
            w_raw = _load_w(weight_ptr, w_cols, mask, has_weight)
        w = _weight_f32(w_raw, weight_dtype) + w_off
    else:
        if not WEIGHT_FIRST:
            w_raw = _load_w(weight_ptr, cols, col_mask, has_weight)
        w = (_weight_f32(w_raw, weight_dtype) + w_off)[None, :]
    if SPLIT:
        w = _split_weight(w, weight2_ptr, cols, col_mask, second, has_weight, weight_dtype, w_off)
    y = _scale(h, rstd[:, None], w, out_ptr.dtype.element_ty, HF_NUMERICS)
    if ROPE:  # ALIGN 1 (rmsnorm_fwd sends the vector's calls to _rope_halves): the normalized row rotated
        y, row_mask, mask = _rope_epilogue(y, x_ptr, x_rows, weight_ptr, weight2_ptr, out_ptr, rows, cols, row_mask,
                                           col_mask, mask, rstd, second, group_rows, has_weight, weight_dtype,
                                           w_off, cos_ptr, sin_ptr, pos_ptr, stride_cos, stride_sin, rope_half,
                                           rope_style, cos_by_freq, max_position, SPLIT, POSITIONS, HF_NUMERICS)
    if GATED:
        y = _gate_epilogue(y, g, gate_first, out_ptr.dtype.element_ty, HF_NUMERICS)
    _store_epilogue(y, out_ptr, y_ptr, rows, rows_2d, cols_2d, row_mask, mask, H, stride_out_row, stride_y_row,
                    group_rows, stride_out_group, write_y, scale_ptr, scales_ptr, scale_ub_ptr, stride_s_row,
                    stride_s_group, group_size, has_ub, ue8m0, swizzled, GROUPED, QUANT, ROWS_PER_PROGRAM, BLOCK_H)
    # rstd last, in a branch after every other load and store: a branch in the middle would split the
    # kernel for the scheduler (measured: +14 registers at H = 11111), and a predicated store there
    # cost 2-7% at small, latency-bound shapes and 5% at 8184 x 4100 bf16/fp32 (registers).
    if write_rstd != 0:
        tl.store(rstd_ptr + rows, rstd, mask=row_mask)
        if SANDWICH:
            tl.store(rstd_ptr + n_rows + rows, rstd_x, mask=row_mask)


@triton.jit
def _tile_rows(rows, rows_2d, cols_2d, stride_x_row, group_rows, stride_x_group, group_split, stride_z_row,
               GROUPED: tl.constexpr, SPLIT: tl.constexpr, GATED: tl.constexpr):
    """A tile's row offsets into x, as the fused op has always computed them (GROUPED, the plain norm's two leading
    strides, only where it is compiled in; out's are computed at its store, not held across the row), and what the
    variants need of each row: SPLIT, whether it takes weight2 (the QK norm: a group's rows, a token's heads, from
    group_split on); GATED, z's row offsets (the same token and group) and the weight's columns of the row's
    group. What a variant not compiled in would need is 0."""
    second = 0
    z_rows = 0
    w_cols = 0
    if GROUPED:
        x_rows = _row_offset(rows, stride_x_row, group_rows, stride_x_group, GROUPED)[:, None]
        if SPLIT:
            r32 = rows.to(tl.int32)
            second = (r32 - (r32 // group_rows) * group_rows) >= group_split
        if GATED:
            g32 = rows.to(tl.int32)
            tok = g32 // group_rows
            part = (g32 - tok * group_rows).to(tl.int64) * stride_x_group
            z_rows = (tok.to(tl.int64) * stride_z_row + part)[:, None]
            w_cols = part[:, None] + cols_2d
    else:
        x_rows = rows_2d * stride_x_row
    return x_rows, second, z_rows, w_cols


@triton.jit
def _residual_prologue(x, residual_ptr, residual_out_ptr, rows_2d, cols, cols_2d, col_mask, mask,
                       stride_residual_row, stride_residual_out_row, H, eps, x_scale, weight_dtype, post_weight_ptr,
                       post_weight_offset, EVICT_LAST: tl.constexpr, SANDWICH: tl.constexpr,
                       HF_NUMERICS: tl.constexpr):
    """RESIDUAL: h = residual + x_scale * x in fp32, stored as the new residual; SANDWICH: x first normalized with
    its own weight (post_weight), the rstd of x returned beside h (0 without)."""
    r = tl.load(residual_ptr + rows_2d * stride_residual_row + cols_2d, mask=mask, other=0.0,
                eviction_policy="evict_last" if EVICT_LAST else "")
    rstd_x = 0.0
    if SANDWICH:  # x -> rmsnorm(x; post_weight): a reduction of its own before the add
        wp = _weight_f32(tl.load(post_weight_ptr + cols, mask=col_mask, other=0), weight_dtype) + post_weight_offset
        xf = x.to(tl.float32)
        rstd_x = _rstd_from_sum_sq(tl.sum(xf * xf, axis=1), H, eps, HF_NUMERICS)
        x = _post_norm(x, rstd_x[:, None], wp[None, :], HF_NUMERICS)
    h = _residual_add(x, r, x_scale, HF_NUMERICS)  # fp32 add: the residual stream must not lose bits
    h_stored = h.to(residual_out_ptr.dtype.element_ty)
    tl.store(residual_out_ptr + rows_2d * stride_residual_out_row + cols_2d, h_stored, mask=mask)
    if HF_NUMERICS:  # HF normalizes the rounded residual it carries, not the fp32 sum
        h = h_stored.to(tl.float32)
    return h, rstd_x


@triton.jit
def _plain_prologue(x, z_ptr, z_rows, cols_2d, mask, gate_first, EVICT_LAST: tl.constexpr, GATED: tl.constexpr):
    """The plain norm: h is x, exactly (no add, no rounding, nothing stored). GATED: silu(z) returned beside h (0
    without), and with gate_first h = x * silu(z), the product in fp32, unrounded (HF's too)."""
    h = x.to(tl.float32)
    g = 0.0
    if GATED:
        g = _silu(tl.load(z_ptr + z_rows + cols_2d, mask=mask, other=0.0,
                          eviction_policy="evict_last" if EVICT_LAST else ""))
        # gate_first: rmsnorm(x * silu(z)); a select, not a branch (x * 1 is x exactly), so that the compiler holds
        # one h across the reduction rather than both
        h = h * tl.where(gate_first != 0, g, 1.0)
    return h, g


@triton.jit
def _split_weight(w, weight2_ptr, cols, col_mask, second, has_weight, weight_dtype, w_off):
    """SPLIT (the QK norm): the rows from a group's group_split on (its k heads) take weight2."""
    w2 = _weight_f32(_load_w(weight2_ptr, cols, col_mask, has_weight), weight_dtype) + w_off
    return tl.where(second[:, None], w2[None, :], w)


@triton.jit
def _rope_epilogue(y, x_ptr, x_rows, weight_ptr, weight2_ptr, out_ptr, rows, cols, row_mask, col_mask, mask, rstd,
                   second, group_rows, has_weight, weight_dtype, w_off, cos_ptr, sin_ptr, pos_ptr, stride_cos,
                   stride_sin, rope_half, rope_style, cos_by_freq, max_position, SPLIT: tl.constexpr,
                   POSITIONS: tl.constexpr, HF_NUMERICS: tl.constexpr):
    """ROPE at ALIGN 1: each normalized row y rotated by its token's angles, any style, any rotary_dim (scalar
    accesses: the partner and the angles read at their indices). Returns y and the masks: a position outside the
    cache (POSITIONS) rotates nothing and writes nothing of its token."""
    r32 = rows.to(tl.int32)
    tok = r32 // group_rows
    pos, row_mask, mask = _token_positions(pos_ptr, tok, row_mask, mask, max_position, POSITIONS)
    # cos and sin as _rope takes them, in fp32: 1 and 0 past the rotated columns (the masked loads' other), sin
    # negated on each pair's first column (after the conversion: the interpreter negates bf16 wrongly).
    partner, freq, first, rotated = _rope_columns(cols, rope_half, rope_style)
    rot_mask = row_mask[:, None] & (rotated & col_mask)[None, :]
    xp = tl.load(x_ptr + x_rows + partner[None, :], mask=mask, other=0.0)
    a_cols = tl.where(cos_by_freq != 0, freq, cols)[None, :]
    cos = tl.load(cos_ptr + pos[:, None] * stride_cos + a_cols, mask=rot_mask, other=1.0).to(tl.float32)
    sin = tl.load(sin_ptr + pos[:, None] * stride_sin + a_cols, mask=rot_mask, other=0.0).to(tl.float32)
    sin = tl.where(first[None, :], -sin, sin)
    wp = (_weight_f32(_load_w(weight_ptr, partner, col_mask, has_weight), weight_dtype) + w_off)[None, :]
    if SPLIT:
        wp = _split_weight(wp, weight2_ptr, partner, col_mask, second, has_weight, weight_dtype, w_off)
    yp = _scale(xp.to(tl.float32), rstd[:, None], wp, out_ptr.dtype.element_ty, HF_NUMERICS)
    return _rope(y, yp, cos, sin, out_ptr.dtype.element_ty, HF_NUMERICS), row_mask, mask


@triton.jit
def _gate_epilogue(y, g, gate_first, out_dtype, HF_NUMERICS: tl.constexpr):
    """GATED, gate_first 0: the norm, then the gate; HF rounds the weighted norm to x's dtype first."""
    norm_first = gate_first == 0
    if HF_NUMERICS:
        y = tl.where(norm_first, y.to(out_dtype).to(tl.float32), y)
    return y * tl.where(norm_first, g, 1.0)  # (selects, as in the prologue: y * 1 is y exactly)


@triton.jit
def _store_epilogue(y, out_ptr, y_ptr, rows, rows_2d, cols_2d, row_mask, mask, H, stride_out_row, stride_y_row,
                    group_rows, stride_out_group, write_y, scale_ptr, scales_ptr, scale_ub_ptr, stride_s_row,
                    stride_s_group, group_size, has_ub, ue8m0, swizzled, GROUPED: tl.constexpr, QUANT: tl.constexpr,
                    ROWS_PER_PROGRAM: tl.constexpr, BLOCK_H: tl.constexpr):
    """The tile's output: y stored in out's dtype (QUANT 0), or quantized (configs.QUANT_MODES: static, per
    token, per group, block-scaled) into q in out's place, with y too if write_y."""
    if QUANT == 0:
        tl.store(out_ptr + _out_rows(rows_2d, rows, stride_out_row, group_rows, stride_out_group, GROUPED) + cols_2d,
                 y.to(out_ptr.dtype.element_ty), mask=mask)
    elif QUANT >= 4:  # block-scaled
        v = _quant_blocks(y, rows, row_mask, 0, H, scale_ptr, scales_ptr, stride_s_row, stride_s_group,
                          swizzled, QUANT, ROWS_PER_PROGRAM, BLOCK_H)
        _store_q(out_ptr, _out_rows(rows_2d, rows, stride_out_row, group_rows, stride_out_group, GROUPED), 0, v,
                 row_mask, H, QUANT, ROWS_PER_PROGRAM, BLOCK_H)
        if write_y != 0:
            tl.store(y_ptr + _out_rows(rows_2d, rows, stride_y_row, group_rows, stride_out_group, GROUPED) + cols_2d,
                     y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        if QUANT == 1:
            v = y * tl.math.div_rn(1.0, tl.load(scale_ptr))
        else:
            if QUANT == 2:
                s = _dynamic_scale(tl.max(tl.abs(y), axis=1), scale_ub_ptr, has_ub, ue8m0,
                                   out_ptr.dtype.element_ty)
                tl.store(scales_ptr + rows * stride_s_row, s, mask=row_mask)
                v = y * tl.math.div_rn(1.0, s)[:, None]
            else:
                v = _quant_groups(y, rows, row_mask, 0, H, scales_ptr, scale_ub_ptr, stride_s_row,
                                  stride_s_group, group_size, has_ub, ue8m0, out_ptr.dtype.element_ty,
                                  ROWS_PER_PROGRAM, BLOCK_H)
        tl.store(out_ptr + _out_rows(rows_2d, rows, stride_out_row, group_rows, stride_out_group, GROUPED) + cols_2d,
                 _quantize(v, out_ptr.dtype.element_ty), mask=mask)
        if write_y != 0:
            tl.store(y_ptr + _out_rows(rows_2d, rows, stride_y_row, group_rows, stride_out_group, GROUPED) + cols_2d,
                     y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _loads_before_stores():
    # A barrier between a chunk's loads and its stores, on the paths that walk a row in chunks and
    # store as they go. In place, where the chunk is not 32-byte aligned (odd H), one warp's store
    # shares a 32-byte sector with a neighbouring warp's load of the same chunk; the likely cost is a
    # load that meets a store to its sector and waits for it. With every warp's loads issued first,
    # 16384 x 11111 bf16 in place ran 527-528 us instead of 596-602, as fast as into given outputs
    # (523-527 us, unchanged) (H200). It orders nothing the
    # results depend on: the same bits either way.
    tl.debug_barrier()


@triton.jit
def _looped_row(
    x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr,
    H,
    stride_x_row, stride_residual_row, stride_out_row, stride_residual_out_row,
    eps, weight_offset, weight_dtype,
    BLOCK_H: tl.constexpr, KEEP_H: tl.constexpr, RESIDUAL: tl.constexpr,
    # As _single_pass_rows's groups (the looped path has no SPLIT).
    rstd_ptr=None, write_rstd=0, HF_NUMERICS: tl.constexpr = 0,
    GROUPED: tl.constexpr = False, group_rows=1, stride_x_group=0, stride_out_group=0,
    QUANT: tl.constexpr = 0, y_ptr=None, stride_y_row=0, write_y=0, scale_ptr=None, scales_ptr=None,
    scale_ub_ptr=None, stride_s_row=0, stride_s_group=0, group_size=0, has_ub=0, ue8m0=0, swizzled=0,
    has_weight=1, x_scale=1.0,
    SANDWICH: tl.constexpr = False, post_weight_ptr=None, post_weight_offset=0.0, n_rows=0,
    # GATED (GROUPED, no residual, QUANT 0): a program's row is one group of a token's row, as _tile_rows has it:
    # z's group beside x's, the weight's columns of that group; silu(z) read in pass 1 only where it gates h.
    GATED: tl.constexpr = False, z_ptr=None, stride_z_row=0, gate_first=0,
):
    # One row per program, walked in BLOCK_H chunks twice (SANDWICH: three times, pass 0 for x's rstd). KEEP_H: L2 hints that h is read again
    # (stored evict-last, evict-first on its last read), so that the passes after the first find it in
    # L2 when the rows in flight outgrow it.
    row = tl.program_id(0).to(tl.int64)
    w_off = _weight_offset(weight_offset, has_weight)
    x_row = x_ptr + _row_offset(row, stride_x_row, group_rows, stride_x_group, GROUPED)
    residual_row = residual_ptr + row * stride_residual_row
    out_row = out_ptr + _row_offset(row, stride_out_row, group_rows, stride_out_group, GROUPED)
    residual_out_row = residual_out_ptr + row * stride_residual_out_row
    # The plain norm stores no h: pass 2 reads x again (each chunk before its own store, in place too).
    h_row = residual_out_row if RESIDUAL else x_row
    z_row = x_row  # GATED's; unread otherwise
    w_row = weight_ptr
    if GATED:
        tok = row // group_rows
        part = (row - tok * group_rows) * stride_x_group
        z_row = z_ptr + tok * stride_z_row + part
        w_row = weight_ptr + part
    if SANDWICH:
        rstd_x = _post_rstd(x_row, H, eps, BLOCK_H, HF_NUMERICS)

    # Pass 1: h = x + residual, store it as residual_out, accumulate sum(h*h) per lane. Per token, also
    # each lane's largest |u|, u = h_stored * w: the row's amax (below).
    acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    # One running max per 8 adjacent columns, not per column: the 8 sit in one thread (the 16-byte
    # accesses of 16-bit rows), so the fold is in registers, and the state costs an eighth of acc's
    # (chunk 16384 with 32 warps: 60-62 registers, against 64 and 24 bytes of stack per column).
    u_max = tl.zeros([BLOCK_H // 8], dtype=tl.float32)
    for start in range(0, H, BLOCK_H):
        cols = start + tl.arange(0, BLOCK_H)
        mask = cols < H
        if RESIDUAL:
            x = tl.load(x_row + cols, mask=mask, other=0.0)
            r = tl.load(residual_row + cols, mask=mask, other=0.0)
        else:
            h_stored = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_last" if KEEP_H else "")
        if QUANT == 2:
            w = _weight_f32(_load_w(weight_ptr, cols, mask, has_weight), weight_dtype) + w_off
        if SANDWICH:
            wp = _weight_f32(tl.load(post_weight_ptr + cols, mask=mask, other=0), weight_dtype) + post_weight_offset
            x = _post_norm(x, rstd_x, wp, HF_NUMERICS)
        if RESIDUAL:
            _loads_before_stores()
            h = _residual_add(x, r, x_scale, HF_NUMERICS)  # fp32 add
            h_stored = h.to(residual_out_ptr.dtype.element_ty)
            tl.store(residual_out_row + cols, h_stored, mask=mask, eviction_policy="evict_last" if KEEP_H else "")
            if HF_NUMERICS:
                h = h_stored.to(tl.float32)
        else:
            h = h_stored.to(tl.float32)
            if GATED:
                if gate_first != 0:  # rmsnorm(x * silu(z))
                    h = h * _silu(tl.load(z_row + cols, mask=mask, other=0.0))
        acc += h * h
        if QUANT == 2:
            u = tl.abs(h_stored.to(tl.float32) * w)
            u_max = tl.maximum(u_max, tl.max(tl.reshape(u, [BLOCK_H // 8, 8]), axis=1))
    rstd = _rstd_from_sum_sq(tl.sum(acc, axis=0), H, eps, HF_NUMERICS)
    if rstd_ptr is not None:  # the unquantized forward: a predicated store
        tl.store(rstd_ptr + row, rstd, mask=write_rstd != 0)
        if SANDWICH:
            tl.store(rstd_ptr + n_rows + row, rstd_x, mask=write_rstd != 0)

    # Make every thread's pass-1 stores visible to the whole program before pass 2 reads them back.
    tl.debug_barrier()

    inv = 1.0  # quantized: 1 / the scale of the whole row (static, or per token)
    if QUANT == 1:
        inv = tl.math.div_rn(1.0, tl.load(scale_ptr))
    if QUANT == 2:
        # Per token, the row's amax without a pass of its own: pass 2's y is (h_stored * w) * rstd =
        # u * rstd, rounded after each multiply, and x -> round(x * rstd) is monotone for rstd > 0, so
        # the largest |y| of the row is round(max |u| * rstd), bit for bit.
        s = _dynamic_scale(tl.max(u_max, axis=0) * rstd, scale_ub_ptr, has_ub, ue8m0, out_ptr.dtype.element_ty)
        tl.store(scales_ptr + row * stride_s_row, s)
        inv = tl.math.div_rn(1.0, s)

    # Pass 2: reload h from residual_out (not from x + residual: an aliased output overwrote them).
    for start in range(0, H, BLOCK_H):
        cols = start + tl.arange(0, BLOCK_H)
        mask = cols < H
        h = tl.load(h_row + cols, mask=mask, other=0.0,
                    eviction_policy="evict_first" if KEEP_H else "").to(tl.float32)
        g = 0.0
        if GATED:
            g = _silu(tl.load(z_row + cols, mask=mask, other=0.0))
            if gate_first != 0:
                h = h * g
        w = _weight_f32(_load_w(w_row, cols, mask, has_weight), weight_dtype) + w_off
        if not RESIDUAL:
            _loads_before_stores()  # in place, y overwrites the x this pass reads
        if QUANT == 0:
            y = _scale(h, rstd, w, out_ptr.dtype.element_ty, HF_NUMERICS)
            if GATED:
                y = _gate_epilogue(y, g, gate_first, out_ptr.dtype.element_ty, HF_NUMERICS)
            tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
        else:
            # (h_stored * w) first: with a weight of h's 16-bit type and no offset the product is exact
            # in fp32, so y is rounded once; per token, pass 1's u is this product.
            y = (h * w) * rstd
            v = y * inv
            one = tl.zeros([1], dtype=tl.int64) + row
            if QUANT >= 4:
                v = _quant_blocks(tl.reshape(y, [1, BLOCK_H]), one, one == row, start, H, scale_ptr, scales_ptr,
                                  stride_s_row, stride_s_group, swizzled, QUANT, 1, BLOCK_H)
                _store_q(out_row, tl.zeros([1, 1], dtype=tl.int64), start, v, one == row, H, QUANT, 1, BLOCK_H)
            if QUANT == 3:  # per group
                v = tl.reshape(_quant_groups(tl.reshape(y, [1, BLOCK_H]), one, one == row, start, H,
                                             scales_ptr, scale_ub_ptr, stride_s_row, stride_s_group,
                                             group_size, has_ub, ue8m0, out_ptr.dtype.element_ty,
                                             1, BLOCK_H), [BLOCK_H])
            if QUANT < 4:
                tl.store(out_row + cols, _quantize(v, out_ptr.dtype.element_ty), mask=mask)
            if write_y != 0:
                tl.store(y_ptr + row * stride_y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _reread_row(
    x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr, rstd_ptr,
    H,
    stride_x_row, stride_residual_row, stride_out_row, stride_residual_out_row,
    eps, weight_offset, write_rstd, weight_dtype,
    BLOCK_H: tl.constexpr, HF_NUMERICS: tl.constexpr,
    group_rows, stride_x_group, stride_out_group, RESIDUAL: tl.constexpr, GROUPED: tl.constexpr,
    has_weight=1, x_scale=1.0,
    SANDWICH: tl.constexpr = False, post_weight_ptr=None, post_weight_offset=0.0, n_rows=0,
):
    # One row per program, in BLOCK_H chunks, holding nothing across the reduction. Pass 1 reads x
    # and residual and only sums the squares (evict-last: pass 2 reads them again); pass 2 reads
    # them again (mostly from L1/L2, evict-first), recomputes h in fp32 and stores residual_out and
    # y. Pass 1 writes nothing, and pass 2 reads each chunk before it stores that chunk's outputs
    # from the same threads, so an aliased output is safe; y comes from the fp32 h, as the contract
    # says.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + _row_offset(row, stride_x_row, group_rows, stride_x_group, GROUPED)
    out_row = out_ptr + _row_offset(row, stride_out_row, group_rows, stride_out_group, GROUPED)
    residual_row = residual_ptr + row * stride_residual_row
    if SANDWICH:  # pass 0: x's rstd; passes 1 and 2 then normalize each chunk of x before the add
        rstd_x = _post_rstd(x_row, H, eps, BLOCK_H, HF_NUMERICS)
    acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    for start in range(0, H, BLOCK_H):
        cols = start + tl.arange(0, BLOCK_H)
        mask = cols < H
        x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_last")
        if RESIDUAL:
            r = tl.load(residual_row + cols, mask=mask, other=0.0, eviction_policy="evict_last")
            if SANDWICH:
                wp = _weight_f32(tl.load(post_weight_ptr + cols, mask=mask, other=0, eviction_policy="evict_last"),
                                 weight_dtype) + post_weight_offset
                x = _post_norm(x, rstd_x, wp, HF_NUMERICS)
            h = _residual_add(x, r, x_scale, HF_NUMERICS)
            if HF_NUMERICS:
                h = h.to(residual_out_ptr.dtype.element_ty).to(tl.float32)
        else:
            h = x.to(tl.float32)
        acc += h * h
    rstd = _rstd_from_sum_sq(tl.sum(acc, axis=0), H, eps, HF_NUMERICS)
    for start in range(0, H, BLOCK_H):
        cols = start + tl.arange(0, BLOCK_H)
        mask = cols < H
        x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first")
        if RESIDUAL:
            r = tl.load(residual_row + cols, mask=mask, other=0.0, eviction_policy="evict_first")
        w = _weight_f32(tl.load(weight_ptr + cols, mask=mask & (has_weight != 0), other=0,
                                eviction_policy="evict_last"), weight_dtype) + _weight_offset(weight_offset, has_weight)
        if SANDWICH:
            wp = _weight_f32(tl.load(post_weight_ptr + cols, mask=mask, other=0, eviction_policy="evict_last"),
                             weight_dtype) + post_weight_offset
        _loads_before_stores()
        if RESIDUAL:
            if SANDWICH:
                x = _post_norm(x, rstd_x, wp, HF_NUMERICS)
            h = _residual_add(x, r, x_scale, HF_NUMERICS)
            h_stored = h.to(residual_out_ptr.dtype.element_ty)
            tl.store(residual_out_ptr + row * stride_residual_out_row + cols, h_stored, mask=mask)
            if HF_NUMERICS:
                h = h_stored.to(tl.float32)
        else:
            h = x.to(tl.float32)
        y = _scale(h, rstd, w, out_ptr.dtype.element_ty, HF_NUMERICS)
        tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    if write_rstd != 0:
        tl.store(rstd_ptr + row, rstd)
        if SANDWICH:
            tl.store(rstd_ptr + n_rows + row, rstd_x)


def _runtime_ints(fn) -> tuple:
    """A kernel's integer parameters (annotated tl.int32 or tl.int64), in their order: the ones the JIT must not
    specialize by value. H and the strides reach the kernel's code only through the ALIGN constexpr, which the
    JIT launcher and the AOT build choose by the same rule, so both compile the same code (and give the same
    bits) for the same call; the flags and counts are runtime values on both paths."""
    return tuple(name for name, p in inspect.signature(fn).parameters.items()
                 if p.annotation in (tl.int32, tl.int64, "tl.int32", "tl.int64"))


@triton.jit
def _pair_rows(x_ptr, weight_ptr, out_ptr, rstd_ptr, n_rows, H, stride_x_row, stride_out_row, eps, weight_offset,
               weight_dtype, write_rstd, has_weight, first_program, BLOCK_H: tl.constexpr,
               ROWS_PER_PROGRAM: tl.constexpr, WEIGHT_FIRST: tl.constexpr, EVICT_LAST: tl.constexpr,
               HF_NUMERICS: tl.constexpr):
    """PAIR: one part's rows, the plain norm's single pass (rows of one stride), from first_program on."""
    _single_pass_rows(x_ptr, x_ptr, weight_ptr, out_ptr, out_ptr, n_rows, H, stride_x_row, 0, stride_out_row, 0, eps,
                      weight_offset, weight_dtype, BLOCK_H, ROWS_PER_PROGRAM, WEIGHT_FIRST, EVICT_LAST, False,
                      rstd_ptr=rstd_ptr, write_rstd=write_rstd, HF_NUMERICS=HF_NUMERICS, has_weight=has_weight,
                      first_program=first_program)


def rmsnorm_fwd(
    x_ptr,                    # [n_rows, H] input activations (fp16, bf16 or fp32)
    residual_ptr,             # [n_rows, H] residual stream (x's dtype, or fp32)
    weight_ptr,               # [H] RMSNorm weight, typed, or the int16 bits of an fp16/bf16 weight
    out_ptr,                  # [n_rows, H] normalized output, x's dtype; may alias x or residual
    residual_out_ptr,         # [n_rows, H] new residual h, residual's dtype; may alias residual or x
    rstd_ptr,                 # [n_rows] fp32 1/sqrt(mean(h*h) + eps); written only if write_rstd
    n_rows: tl.int32,         # number of rows
    H: tl.int32,              # elements per row (the normalized dimension), > 0
    stride_x_row: tl.int64,   # elements between consecutive rows of x
    stride_residual_row: tl.int64,  # elements between consecutive rows of residual
    stride_out_row: tl.int64,  # elements between consecutive rows of out
    stride_residual_out_row: tl.int64,  # elements between consecutive rows of residual_out
    eps: tl.float32,          # fp32, > 0, added inside the sqrt
    weight_offset: tl.float32,  # fp32, added to the weight (0.0 for LLaMA, 1.0 for Gemma)
    write_rstd: tl.int32,     # i32: nonzero to write rstd (a predicated store, not a specialization)
    weight_dtype: tl.int32,   # i32: the weight's addrmsnorm_dtype (tells fp16 from bf16 int16 bits)
    group_rows: tl.int32,     # GROUPED: rows per group (a 3-D view's middle dimension); else unused
    stride_x_group: tl.int64,  # GROUPED: elements between consecutive rows of a group of x
    stride_out_group: tl.int64,  # GROUPED: the same for out (stride_*_row then steps between groups)
    weight2_ptr,              # SPLIT: the weight of a group's rows from group_split on (QK norm: k's); typed as weight
    group_split: tl.int32,    # SPLIT: rows of a group before it take weight, the others weight2
    has_weight: tl.int32,     # i32: 0 for the weightless norm (no weight read: w = 1 + weight_offset, offset 0)
    x_scale: tl.float32,      # fp32: h = residual + x_scale * x (1.0: the unscaled add, the same bits)
    post_weight_ptr,          # SANDWICH: [H] the first norm's weight, typed as weight; else a stand-in, unread
    post_weight_offset: tl.float32,  # SANDWICH: added to post_weight in fp32
    z_ptr,                    # GATED: [n_rows, H] the gate, x's dtype; else a stand-in, unread
    stride_z_row: tl.int64,   # GATED: elements between consecutive rows of z (a slice may have its own)
    gate_first: tl.int32,     # GATED: 0 rmsnorm(x) * silu(z), 1 rmsnorm(x * silu(z))
    b_ptr,                    # PAIR: [n_rows, H_b] the second part's rows, x's dtype; else a stand-in, unread
    b_weight_ptr,             # PAIR: [H_b] its weight, typed as weight
    b_out_ptr,                # PAIR: [n_rows, H_b] its output; may alias b exactly
    H_b: tl.int32,            # PAIR: the second part's width
    stride_b_row: tl.int64,   # PAIR: elements between consecutive rows of b
    stride_b_out_row: tl.int64,  # PAIR: the same for b_out
    pair_split: tl.int32,     # PAIR: the programs of the first part; programs from it on take b
    cos_ptr,                  # ROPE: the angles' cosines, fp32 or x's dtype: [positions or tokens, *] rows
    sin_ptr,                  # ROPE: their sines, as cos (in a cos_sin_cache, cos's pointer plus rope_half)
    pos_ptr,                  # ROPE, POSITIONS: [tokens] int32 or int64, the row of cos and sin of each token
    stride_cos: tl.int64,     # ROPE: elements between consecutive rows of cos
    stride_sin: tl.int64,     # ROPE: the same for sin
    rope_half: tl.int32,      # ROPE: rotary_dim / 2 (a head's columns from rotary_dim on are not rotated)
    rope_style: tl.int32,     # ROPE: 0 NeoX (rotate_half), 1 GPT-J (interleaved pairs)
    cos_by_freq: tl.int32,    # ROPE: 1 cos and sin indexed by frequency (a cache), 0 by column (HF's cos, sin)
    max_position: tl.int64,   # ROPE, POSITIONS: the cache's rows; a token's position must be below it
    v_rows: tl.int32,         # V_HEADS: each group's rows after its group_rows (Gemma 4's v heads)
    BLOCK_H: tl.constexpr,           # columns per tile: >= H when single-pass, the chunk when looped
    ROWS_PER_PROGRAM: tl.constexpr,  # rows per program (single-pass only; 1 when looped)
    LOOPED: tl.constexpr,            # two passes over a row too wide to keep in registers
    ALIGN: tl.constexpr,             # H and every row stride are multiples of ALIGN elements
    HF_NUMERICS: tl.constexpr,       # 0: the contract; 1, 2: HF's roundings (configs.numerics_mode)
    PDL: tl.constexpr = False,       # grid-dependency control (sm_90+): wait, then release the next
    WEIGHT_FIRST: tl.constexpr = False,  # single pass: load the weight before the reduction
    REREAD: tl.constexpr = False,    # looped: pass 2 re-reads x and residual (not residual_out)
    EVICT_LAST: tl.constexpr = False,  # single pass: x and residual loaded with the evict-last hint
    KEEP_H: tl.constexpr = False,    # looped: h kept in L2 for pass 2 (stored evict-last)
    RESIDUAL: tl.constexpr = True,   # False: the plain norm, h = x; residual and residual_out untouched
    GROUPED: tl.constexpr = False,   # rows addressed as (group, row in group): two leading strides
    SPLIT: tl.constexpr = False,     # GROUPED, single pass: two weights by the row's place in its group
    SANDWICH: tl.constexpr = False,  # RESIDUAL: h = residual + rmsnorm(x; post_weight); rstd [2, n_rows]
    GATED: tl.constexpr = False,     # GROUPED, single pass, no residual: the gated norm (silu of z)
    PAIR: tl.constexpr = False,      # single pass, no residual: two parts' rows (x, then b) in one launch
    ROPE: tl.constexpr = False,      # GROUPED, single pass, no residual: each normalized head rotated (RoPE)
    POSITIONS: tl.constexpr = False,  # ROPE: a token's angles at the row pos_ptr gives (else its own row)
    V_HEADS: tl.constexpr = False,   # SPLIT: v_rows more rows after each group's (Gemma 4's v heads), weightless
    PAIR_PACK: tl.constexpr = 1,     # PAIR: the second part's tile, [ROWS_PER_PROGRAM * PAIR_PACK, BLOCK_H / PAIR_PACK]
):
    if PDL:
        gdc_wait()  # nothing before this touches memory: the previous kernel may still be running
        gdc_launch_dependents()
    H = _aligned(H, ALIGN)
    stride_x_row = _aligned(stride_x_row, ALIGN)
    stride_residual_row = _aligned(stride_residual_row, ALIGN)
    stride_out_row = _aligned(stride_out_row, ALIGN)
    stride_residual_out_row = _aligned(stride_residual_out_row, ALIGN)
    if GROUPED:
        stride_x_group = _aligned(stride_x_group, ALIGN)
        stride_out_group = _aligned(stride_out_group, ALIGN)
    if GATED:
        stride_z_row = _aligned(stride_z_row, ALIGN)
    if PAIR:
        H_b = _aligned(H_b, ALIGN)
        stride_b_row = _aligned(stride_b_row, ALIGN)
        stride_b_out_row = _aligned(stride_b_out_row, ALIGN)
    if ROPE:  # the angles' rows, and rotary_dim, on the same promise (launcher.py's align_elems call)
        stride_cos = _aligned(stride_cos, ALIGN)
        stride_sin = _aligned(stride_sin, ALIGN)
    v_program = False
    if V_HEADS:  # the programs past the q and k heads' take the v heads (v_rows of them after each group's)
        v_program = tl.program_id(0) >= tl.cdiv(n_rows, ROWS_PER_PROGRAM)
    if PAIR:
        # The wider part (x: the launchers put it first) on the config's tile, then from pair_split on the narrower
        # (b) in a tile of BLOCK_H / PAIR_PACK columns and PAIR_PACK times the rows, as many elements
        # (configs.pair_pack): each program on its part's pointers, width and strides.
        if tl.program_id(0) >= pair_split:
            _pair_rows(b_ptr, b_weight_ptr, b_out_ptr, rstd_ptr, n_rows, H_b, stride_b_row, stride_b_out_row, eps,
                       weight_offset, weight_dtype, write_rstd, has_weight, pair_split, BLOCK_H // PAIR_PACK,
                       ROWS_PER_PROGRAM * PAIR_PACK, WEIGHT_FIRST, EVICT_LAST, HF_NUMERICS)
        else:
            _pair_rows(x_ptr, weight_ptr, out_ptr, rstd_ptr, n_rows, H, stride_x_row, stride_out_row, eps,
                       weight_offset, weight_dtype, write_rstd, has_weight, 0, BLOCK_H, ROWS_PER_PROGRAM,
                       WEIGHT_FIRST, EVICT_LAST, HF_NUMERICS)
    elif v_program:
        # Gemma 4's v_norm: the weightless plain norm (no rotation) of the rows from group_rows on in each group,
        # rows of their own so that q's and k's rows run as they do without them
        _single_pass_rows(x_ptr + group_rows * stride_x_group, x_ptr, weight_ptr,
                          out_ptr + group_rows * stride_out_group, out_ptr, n_rows // group_rows * v_rows, H,
                          stride_x_row, 0, stride_out_row, 0, eps, 0.0, weight_dtype,
                          BLOCK_H, ROWS_PER_PROGRAM, WEIGHT_FIRST, EVICT_LAST, False, HF_NUMERICS=HF_NUMERICS,
                          GROUPED=True, group_rows=v_rows, stride_x_group=stride_x_group,
                          stride_out_group=stride_out_group, has_weight=has_weight * 0,
                          first_program=tl.cdiv(n_rows, ROWS_PER_PROGRAM))
    elif LOOPED and REREAD:
        _reread_row(x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr, rstd_ptr,
                    H, stride_x_row, stride_residual_row, stride_out_row, stride_residual_out_row,
                    eps, weight_offset, write_rstd, weight_dtype, BLOCK_H, HF_NUMERICS,
                    group_rows, stride_x_group, stride_out_group, RESIDUAL, GROUPED,
                    has_weight=has_weight, x_scale=x_scale, SANDWICH=SANDWICH, post_weight_ptr=post_weight_ptr,
                    post_weight_offset=post_weight_offset, n_rows=n_rows)
    elif LOOPED:
        _looped_row(x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr,
                    H, stride_x_row, stride_residual_row, stride_out_row, stride_residual_out_row,
                    eps, weight_offset, weight_dtype, BLOCK_H, KEEP_H, RESIDUAL,
                    rstd_ptr=rstd_ptr, write_rstd=write_rstd, HF_NUMERICS=HF_NUMERICS,
                    GROUPED=GROUPED, group_rows=group_rows, stride_x_group=stride_x_group,
                    stride_out_group=stride_out_group, has_weight=has_weight, x_scale=x_scale,
                    SANDWICH=SANDWICH, post_weight_ptr=post_weight_ptr, post_weight_offset=post_weight_offset,
                    n_rows=n_rows, GATED=GATED, z_ptr=z_ptr, stride_z_row=stride_z_row, gate_first=gate_first)
    elif ROPE and ALIGN > 1:
        # NeoX with the whole head rotated (configs.rope_on_vector: the launchers send every other call to ALIGN 1),
        # rotary_dim / 2, the angles' pointers and their row strides on ALIGN's promise (launcher.py's align_elems
        # call); rstd is not stored.
        _rope_halves(x_ptr, weight_ptr, weight2_ptr, out_ptr, n_rows, H, eps, group_rows, group_split,
                     stride_x_row, stride_x_group, stride_out_row, stride_out_group, has_weight, weight_dtype,
                     weight_offset, cos_ptr, sin_ptr, pos_ptr, stride_cos, stride_sin, _aligned(rope_half, ALIGN),
                     max_position, BLOCK_H, ROWS_PER_PROGRAM, POSITIONS, HF_NUMERICS)
    else:
        _single_pass_rows(x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr,
                          n_rows, H,
                          stride_x_row, stride_residual_row, stride_out_row, stride_residual_out_row,
                          eps, weight_offset, weight_dtype,
                          BLOCK_H, ROWS_PER_PROGRAM, WEIGHT_FIRST, EVICT_LAST, RESIDUAL,
                          rstd_ptr=rstd_ptr, write_rstd=write_rstd, HF_NUMERICS=HF_NUMERICS,
                          GROUPED=GROUPED, group_rows=group_rows, stride_x_group=stride_x_group,
                          stride_out_group=stride_out_group,
                          SPLIT=SPLIT, weight2_ptr=weight2_ptr, group_split=group_split,
                          has_weight=has_weight, x_scale=x_scale, SANDWICH=SANDWICH,
                          post_weight_ptr=post_weight_ptr, post_weight_offset=post_weight_offset,
                          GATED=GATED, z_ptr=z_ptr, stride_z_row=stride_z_row, gate_first=gate_first,
                          ROPE=ROPE, POSITIONS=POSITIONS, cos_ptr=cos_ptr,
                          sin_ptr=sin_ptr, pos_ptr=pos_ptr, stride_cos=stride_cos, stride_sin=stride_sin,
                          rope_half=rope_half, rope_style=rope_style, cos_by_freq=cos_by_freq,
                          max_position=max_position)


rmsnorm_fwd = triton.jit(rmsnorm_fwd, do_not_specialize=_runtime_ints(rmsnorm_fwd))


def rmsnorm_quant_fwd(
    x_ptr,                    # [n_rows, H] input activations (fp16 or bf16)
    residual_ptr,             # [n_rows, H] residual stream, x's dtype
    weight_ptr,               # [H] RMSNorm weight, typed as x, or fp32
    q_ptr,                    # [n_rows, H] quantized y: float8_e4m3fn or int8; fp4 (QUANT 4, 6): [n_rows, H / 2] bytes
    residual_out_ptr,         # [n_rows, H] new residual h; may alias residual or x
    y_ptr,                    # [n_rows, H] y in x's dtype; written only if write_y
    scale_ptr,                # [1] fp32: QUANT 1's scale, QUANT 4's global scale
    scales_ptr,               # scales out: fp32 QUANT 2 [n_rows], QUANT 3 [n_rows, H / group_size]; bytes QUANT 4-6
    scale_ub_ptr,             # [1] fp32 upper bound of amax, read only if has_ub
    n_rows: tl.int32, H: tl.int32,
    stride_x_row: tl.int64, stride_residual_row: tl.int64, stride_q_row: tl.int64, stride_residual_out_row: tl.int64, stride_y_row: tl.int64,
    stride_s_row: tl.int64,   # elements between the scales of consecutive rows
    stride_s_group: tl.int64,  # elements between the scales of consecutive groups of a row
    eps: tl.float32, weight_offset: tl.float32,
    group_size: tl.int32,     # QUANT 3: 64 or 128
    write_y: tl.int32, has_ub: tl.int32, ue8m0: tl.int32,  # i32 flags
    weight_dtype: tl.int32,   # i32: the weight's addrmsnorm_dtype
    scale_rows: tl.int32,     # QUANT 4-6: rows with scales (n_rows, or swizzled n_rows rounded up to 128)
    swizzled: tl.int32,       # QUANT 4-6: nonzero for the 128 x 4 tiled scale layout
    has_weight: tl.int32,     # i32: 0 for the weightless norm (as rmsnorm_fwd)
    x_scale: tl.float32,      # fp32: h = residual + x_scale * x (as rmsnorm_fwd)
    post_weight_ptr,          # SANDWICH: [H] the first norm's weight, typed as weight (as rmsnorm_fwd)
    post_weight_offset: tl.float32,
    z_ptr,                    # GATED: the gate, x's dtype (as rmsnorm_fwd); else a stand-in, unread
    stride_z_row: tl.int64,   # GATED: elements between consecutive rows of z
    gate_first: tl.int32,     # GATED: 0 rmsnorm(x) * silu(z), 1 rmsnorm(x * silu(z))
    group_rows: tl.int32,     # GATED: a row's groups (each of H columns: H is the group here)
    stride_x_group: tl.int64,  # GATED: elements between a row's groups (H), in x, z, q and y alike
    BLOCK_H: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr, LOOPED: tl.constexpr, ALIGN: tl.constexpr,
    QUANT: tl.constexpr,      # 1 static, 2 per token, 3 per group, 4 NVFP4, 5 MXFP8, 6 MXFP4 (configs.QUANT_MODES)
    PDL: tl.constexpr = False, WEIGHT_FIRST: tl.constexpr = False, EVICT_LAST: tl.constexpr = False,
    KEEP_H: tl.constexpr = False,
    RESIDUAL: tl.constexpr = True,  # False: the plain norm's quantized outputs (residual, residual_out unused)
    SANDWICH: tl.constexpr = False,  # as rmsnorm_fwd's (no rstd is written here)
    GATED: tl.constexpr = False,     # no residual, single pass: the gated norm's q (static; per token with one group)
):
    """The forward with q = quant(y) in out's place: the same row helpers, QUANT != 0 (see above)."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    H = _aligned(H, ALIGN)
    stride_x_row = _aligned(stride_x_row, ALIGN)
    stride_residual_row = _aligned(stride_residual_row, ALIGN)
    stride_q_row = _aligned(stride_q_row, ALIGN)
    stride_residual_out_row = _aligned(stride_residual_out_row, ALIGN)
    stride_y_row = _aligned(stride_y_row, ALIGN)
    if GATED:
        stride_z_row = _aligned(stride_z_row, ALIGN)
        stride_x_group = _aligned(stride_x_group, ALIGN)
    if LOOPED:
        tl.static_assert(not GATED, "the gated norm's quantized outputs take single-pass rows alone")
        _looped_row(x_ptr, residual_ptr, weight_ptr, q_ptr, residual_out_ptr,
                    H, stride_x_row, stride_residual_row, stride_q_row, stride_residual_out_row,
                    eps, weight_offset, weight_dtype, BLOCK_H, KEEP_H, RESIDUAL,
                    QUANT=QUANT, y_ptr=y_ptr, stride_y_row=stride_y_row, write_y=write_y, scale_ptr=scale_ptr,
                    scales_ptr=scales_ptr, scale_ub_ptr=scale_ub_ptr, stride_s_row=stride_s_row,
                    stride_s_group=stride_s_group, group_size=group_size, has_ub=has_ub, ue8m0=ue8m0,
                    swizzled=swizzled, has_weight=has_weight, x_scale=x_scale, SANDWICH=SANDWICH,
                    post_weight_ptr=post_weight_ptr, post_weight_offset=post_weight_offset)
    else:
        _single_pass_rows(x_ptr, residual_ptr, weight_ptr, q_ptr, residual_out_ptr,
                          n_rows, H,
                          stride_x_row, stride_residual_row, stride_q_row, stride_residual_out_row,
                          eps, weight_offset, weight_dtype,
                          BLOCK_H, ROWS_PER_PROGRAM, WEIGHT_FIRST, EVICT_LAST, RESIDUAL,
                          QUANT=QUANT, y_ptr=y_ptr, stride_y_row=stride_y_row, write_y=write_y,
                          scale_ptr=scale_ptr, scales_ptr=scales_ptr, scale_ub_ptr=scale_ub_ptr,
                          stride_s_row=stride_s_row, stride_s_group=stride_s_group, group_size=group_size,
                          has_ub=has_ub, ue8m0=ue8m0, swizzled=swizzled, has_weight=has_weight, x_scale=x_scale,
                          SANDWICH=SANDWICH, post_weight_ptr=post_weight_ptr, post_weight_offset=post_weight_offset,
                          GROUPED=GATED, group_rows=group_rows, stride_x_group=stride_x_group,
                          stride_out_group=stride_x_group, GATED=GATED, z_ptr=z_ptr, stride_z_row=stride_z_row,
                          gate_first=gate_first)
    if QUANT >= 4:  # after every row's loads and stores, as rstd's store (see _single_pass_rows)
        if (swizzled != 0) & (scale_rows > n_rows) & (tl.program_id(0) == tl.num_programs(0) - 1):
            _swizzle_padding(scales_ptr, n_rows, H, QUANT)


rmsnorm_quant_fwd = triton.jit(rmsnorm_quant_fwd, do_not_specialize=_runtime_ints(rmsnorm_quant_fwd))


# ----- backward ------------------------------------------------------------------------------------
#
# With n = h * rstd (h read back from residual_out, as saved by the forward) and g = dy * (w + offset):
#
#     dh        = rstd * (g - n * mean(g * n))        mean over the row's H elements
#     dresidual = dh + d(residual_out)                the gradient that reached residual_out, if any
#     dx        = dresidual                           the same values (one tensor if dtypes agree)
#     dweight   = sum over rows of dy * n             the offset does not change it
#
# dweight is reduced without atomics, so the same inputs always give the same bits: each program
# owns a contiguous block of rows and writes its partial column sums, in fp32, to its own row of a
# workspace; `rmsnorm_dweight` then sums the partials column by column in a fixed order.
# The grid is persistent (a few programs per SM, see configs.backward_programs) so that the
# partials stay few. On the looped path (wide rows) pass 1 stores each row's mean(g * n) in the
# workspace, and pass 2 walks the program's rows chunk by chunk, so that a chunk's dweight partial
# is summed in registers and written once.


@triton.jit
def _bwd_single_pass(
    dy_ptr, dres_out_ptr, h_ptr, rstd_ptr, weight_ptr, dres_ptr, dx_ptr, partial_ptr,
    n_rows, H,
    stride_dy_row, stride_dres_out_row, stride_h_row, stride_dres_row, stride_dx_row,
    weight_offset, has_dres_out, weight_dtype,
    BLOCK_H: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr, SEPARATE_DX: tl.constexpr, STAGES: tl.constexpr,
    # ROPE (the plain norm's rows, a token's heads group_rows consecutive rows): dy is first rotated back, by
    # the transpose of the forward's rotation, and rstd is computed from h with eps (the rotation's forward
    # stores none).
    ROPE: tl.constexpr = False, cos_ptr=None, sin_ptr=None, stride_cos=0, stride_sin=0, rope_half=0,
    rope_style=0, group_rows=1, eps=0.0,
):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    n_blocks = tl.cdiv(n_rows, ROWS_PER_PROGRAM)
    blocks_per_program = tl.cdiv(n_blocks, n_programs)
    cols = tl.arange(0, BLOCK_H)
    col_mask = cols < H
    cols_2d = cols[None, :]
    w = _load_weight_any(weight_ptr, cols, col_mask, weight_dtype) + weight_offset
    dw = tl.zeros([BLOCK_H], dtype=tl.float32)
    first = pid.to(tl.int64) * blocks_per_program  # int64 bounds: the loop variable is int64
    for block in tl.range(first, tl.minimum(first + blocks_per_program, n_blocks), num_stages=STAGES):
        rows = block * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
        row_mask = rows < n_rows
        mask = row_mask[:, None] & col_mask[None, :]
        rows_2d = rows[:, None]
        dy = tl.load(dy_ptr + rows_2d * stride_dy_row + cols_2d, mask=mask, other=0.0).to(tl.float32)
        h = tl.load(h_ptr + rows_2d * stride_h_row + cols_2d, mask=mask, other=0.0).to(tl.float32)
        if ROPE:
            # out[c] = y[c] cos[c] -+ y[p(c)] sin[c] (- for the pair's first column), so the gradient of y is
            # dy[c] cos[c] +- dy[p(c)] sin[p(c)] (+ for the first): the partner's dy from L1, its sine by column.
            tok = (rows.to(tl.int32) // group_rows).to(tl.int64)[:, None]
            partner, freq, pair_first, rotated = _rope_columns(cols, rope_half, rope_style)
            # cos and sin are rows by column, the partner's dy and sine read at its index (ALIGN 1: any style, any
            # rotary_dim; the vector kernels take _bwd_rope_halves).
            rot_mask = row_mask[:, None] & (rotated & col_mask)[None, :]
            sin_p = tl.load(sin_ptr + tok * stride_sin + partner[None, :], mask=rot_mask, other=0.0)
            dyp = tl.load(dy_ptr + rows_2d * stride_dy_row + partner[None, :], mask=mask, other=0.0)
            dyp = dyp.to(tl.float32)
            cos = tl.load(cos_ptr + tok * stride_cos + cols_2d, mask=rot_mask, other=1.0).to(tl.float32)
            cos = tl.where(rotated[None, :], cos, 1.0)
            sin_p = tl.where(rotated[None, :], sin_p.to(tl.float32), 0.0)
            dy = dy * cos + tl.where(pair_first[None, :], dyp, -dyp) * sin_p
            rstd = _rstd_from_sum_sq(tl.sum(h * h, axis=1), H, eps, 0)
        else:
            rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
        n = h * rstd[:, None]
        g = dy * w[None, :]
        c = tl.sum(g * n, axis=1) / H
        dh = rstd[:, None] * (g - n * c[:, None])
        # Predicated, not branched: with has_dres_out = 0 the load is masked off and adds 0.
        dh += tl.load(dres_out_ptr + rows_2d * stride_dres_out_row + cols_2d, mask=mask & (has_dres_out != 0),
                      other=0.0).to(tl.float32)
        tl.store(dres_ptr + rows_2d * stride_dres_row + cols_2d, dh.to(dres_ptr.dtype.element_ty), mask=mask)
        if SEPARATE_DX:
            tl.store(dx_ptr + rows_2d * stride_dx_row + cols_2d, dh.to(dx_ptr.dtype.element_ty), mask=mask)
        dw += tl.sum(dy * n, axis=0)
    tl.store(partial_ptr + pid.to(tl.int64) * H + cols, dw, mask=col_mask)


@triton.jit
def _rope_halves_grad(dy_lo, dy_hi, h_lo, h_hi, w_lo, w_hi, cos_lo, cos_hi, sin_lo, sin_hi, H, eps):
    """A tile of heads' gradients through the NeoX rotation and the norm, each head as its two halves, fp32: the
    forward's out_lo = y_lo cos_lo - y_hi sin_lo, out_hi = y_hi cos_hi + y_lo sin_hi give y's gradient
    g_lo = dy_lo cos_lo + dy_hi sin_hi, g_hi = dy_hi cos_hi - dy_lo sin_lo; then the norm's, rstd from h and eps.
    Returns (dh_lo, dh_hi, g_lo, g_hi, n_lo, n_hi): the gradient of h, and y's and the normalized row's, whose
    products are the tile's dweight terms."""
    g_lo = dy_lo * cos_lo + dy_hi * sin_hi
    g_hi = dy_hi * cos_hi - dy_lo * sin_lo
    rstd = _rstd_from_sum_sq(tl.sum(h_lo * h_lo, axis=1) + tl.sum(h_hi * h_hi, axis=1), H, eps, 0)[:, None]
    n_lo = h_lo * rstd
    n_hi = h_hi * rstd
    gw_lo = g_lo * w_lo
    gw_hi = g_hi * w_hi
    mean = ((tl.sum(gw_lo * n_lo, axis=1) + tl.sum(gw_hi * n_hi, axis=1)) / H)[:, None]
    return rstd * (gw_lo - n_lo * mean), rstd * (gw_hi - n_hi * mean), g_lo, g_hi, n_lo, n_hi


@triton.jit
def _bwd_rope_halves(
    dy_ptr, dres_out_ptr, h_ptr, weight_ptr, dres_ptr, dx_ptr, partial_ptr,
    n_rows, H, stride_dy_row, stride_dres_out_row, stride_h_row, stride_dres_row, stride_dx_row,
    weight_offset, has_dres_out, weight_dtype, cos_ptr, sin_ptr, stride_cos, stride_sin, half, group_rows, eps,
    BLOCK_H: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr, SEPARATE_DX: tl.constexpr, STAGES: tl.constexpr,
):
    """The backward of _rope_halves (NeoX, every column rotated: H = 2 * half), on _bwd_single_pass's plan: each
    row as its two halves, [R, BLOCK_H / 2] tiles of one layout, so that a thread holds both columns of its pairs;
    the arithmetic is _rope_halves_grad's (rstd from h and eps: the rotation's forward stores none). cos and sin
    are rows by column.

    A tile's rows are one token's heads (a token's group_rows heads in tiles of ROWS_PER_PROGRAM, the last one
    masked where they do not divide), so the token's cos and sin are read once a tile, as vectors: read a head at
    a time they were twice the bytes of its dy and h, from L2. Where ROWS_PER_PROGRAM divides group_rows the tiles
    are the rows' ranges they always were."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    chunks = tl.cdiv(group_rows, ROWS_PER_PROGRAM)  # a token's tiles
    n_blocks = tl.cdiv(n_rows, group_rows) * chunks
    blocks_per_program = tl.cdiv(n_blocks, n_programs)
    c = tl.arange(0, BLOCK_H // 2)
    c_mask = c < half
    cc = c[None, :]
    w_lo = (_load_weight_any(weight_ptr, c, c_mask, weight_dtype) + weight_offset)[None, :]
    w_hi = (_load_weight_any(weight_ptr, c + half, c_mask, weight_dtype) + weight_offset)[None, :]
    # The dweight partials of the program's rows, summed over the tile's rows once, after the loop: summed a tile
    # at a time, across the warps that hold its rows, each tile waited on shared memory and a barrier.
    dw_lo = tl.zeros([ROWS_PER_PROGRAM, BLOCK_H // 2], dtype=tl.float32)
    dw_hi = tl.zeros([ROWS_PER_PROGRAM, BLOCK_H // 2], dtype=tl.float32)
    first = pid.to(tl.int64) * blocks_per_program  # int64 bounds: the loop variable is int64
    first32 = pid * blocks_per_program
    for block in tl.range(first, tl.minimum(first + blocks_per_program, n_blocks), num_stages=STAGES):
        b32 = (block - first).to(tl.int32) + first32  # a 32-bit division: the blocks are at most n_rows
        tok32 = b32 // chunks
        in_tok = (b32 - tok32 * chunks) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
        tok = tok32.to(tl.int64)
        rows = tok * group_rows + in_tok
        row_mask = (in_tok < group_rows) & (rows < n_rows)
        m = row_mask[:, None] & c_mask[None, :]
        rows_2d = rows[:, None]
        dy_row = dy_ptr + rows_2d * stride_dy_row + cc
        h_row = h_ptr + rows_2d * stride_h_row + cc
        dy_lo = tl.load(dy_row, mask=m, other=0.0).to(tl.float32)
        dy_hi = tl.load(dy_row + half, mask=m, other=0.0).to(tl.float32)
        h_lo = tl.load(h_row, mask=m, other=0.0).to(tl.float32)
        h_hi = tl.load(h_row + half, mask=m, other=0.0).to(tl.float32)
        cos_row = cos_ptr + tok * stride_cos + c
        sin_row = sin_ptr + tok * stride_sin + c
        cos_lo = tl.load(cos_row, mask=c_mask, other=1.0).to(tl.float32)[None, :]
        cos_hi = tl.load(cos_row + half, mask=c_mask, other=1.0).to(tl.float32)[None, :]
        sin_lo = tl.load(sin_row, mask=c_mask, other=0.0).to(tl.float32)[None, :]
        sin_hi = tl.load(sin_row + half, mask=c_mask, other=0.0).to(tl.float32)[None, :]
        dh_lo, dh_hi, g_lo, g_hi, n_lo, n_hi = _rope_halves_grad(dy_lo, dy_hi, h_lo, h_hi, w_lo, w_hi, cos_lo, cos_hi,
                                                                  sin_lo, sin_hi, H, eps)
        # Predicated, not branched: with has_dres_out = 0 the loads are masked off and add 0.
        dro_row = dres_out_ptr + rows_2d * stride_dres_out_row + cc
        dh_lo += tl.load(dro_row, mask=m & (has_dres_out != 0), other=0.0).to(tl.float32)
        dh_hi += tl.load(dro_row + half, mask=m & (has_dres_out != 0), other=0.0).to(tl.float32)
        dres_row = dres_ptr + rows_2d * stride_dres_row + cc
        tl.store(dres_row, dh_lo.to(dres_ptr.dtype.element_ty), mask=m)
        tl.store(dres_row + half, dh_hi.to(dres_ptr.dtype.element_ty), mask=m)
        if SEPARATE_DX:
            dx_row = dx_ptr + rows_2d * stride_dx_row + cc
            tl.store(dx_row, dh_lo.to(dx_ptr.dtype.element_ty), mask=m)
            tl.store(dx_row + half, dh_hi.to(dx_ptr.dtype.element_ty), mask=m)
        dw_lo += g_lo * n_lo
        dw_hi += g_hi * n_hi
    partial_row = partial_ptr + pid.to(tl.int64) * H + c
    tl.store(partial_row, tl.sum(dw_lo, axis=0), mask=c_mask)
    tl.store(partial_row + half, tl.sum(dw_hi, axis=0), mask=c_mask)


@triton.jit
def _bwd_looped(
    dy_ptr, dres_out_ptr, h_ptr, rstd_ptr, weight_ptr, dres_ptr, dx_ptr, partial_ptr, mean_ptr,
    n_rows, H,
    stride_dy_row, stride_dres_out_row, stride_h_row, stride_dres_row, stride_dx_row,
    weight_offset, has_dres_out, weight_dtype,
    BLOCK_H: tl.constexpr, SEPARATE_DX: tl.constexpr, STAGES: tl.constexpr,
):
    pid = tl.program_id(0)
    rows_per_program = tl.cdiv(n_rows, tl.num_programs(0))
    first = pid.to(tl.int64) * rows_per_program  # int64 bounds: row offsets are int64
    last = tl.minimum(first + rows_per_program, n_rows)
    # Pass 1: mean(g * n) of each of this program's rows, kept in the workspace.
    for r64 in range(first, last):
        rstd = tl.load(rstd_ptr + r64)
        acc = tl.zeros([BLOCK_H], dtype=tl.float32)
        for start in tl.range(0, H, BLOCK_H, num_stages=STAGES):
            cols = start + tl.arange(0, BLOCK_H)
            mask = cols < H
            dy = tl.load(dy_ptr + r64 * stride_dy_row + cols, mask=mask, other=0.0).to(tl.float32)
            h = tl.load(h_ptr + r64 * stride_h_row + cols, mask=mask, other=0.0).to(tl.float32)
            w = _load_weight_any(weight_ptr, cols, mask, weight_dtype) + weight_offset
            acc += dy * w * (h * rstd)
        tl.store(mean_ptr + r64, tl.sum(acc, axis=0) / H)
    tl.debug_barrier()  # pass 2 reads the means that other threads of this program stored
    # Pass 2: chunk by chunk over the program's rows; the chunk's dweight partial stays in registers.
    for start in range(0, H, BLOCK_H):
        cols = start + tl.arange(0, BLOCK_H)
        mask = cols < H
        w = _load_weight_any(weight_ptr, cols, mask, weight_dtype) + weight_offset
        dw = tl.zeros([BLOCK_H], dtype=tl.float32)
        for r64 in tl.range(first, last, num_stages=STAGES):
            rstd = tl.load(rstd_ptr + r64)
            c = tl.load(mean_ptr + r64)
            dy = tl.load(dy_ptr + r64 * stride_dy_row + cols, mask=mask, other=0.0).to(tl.float32)
            h = tl.load(h_ptr + r64 * stride_h_row + cols, mask=mask, other=0.0).to(tl.float32)
            n = h * rstd
            dh = rstd * (dy * w - n * c)
            dh += tl.load(dres_out_ptr + r64 * stride_dres_out_row + cols, mask=mask & (has_dres_out != 0),
                          other=0.0).to(tl.float32)
            tl.store(dres_ptr + r64 * stride_dres_row + cols, dh.to(dres_ptr.dtype.element_ty), mask=mask)
            if SEPARATE_DX:
                tl.store(dx_ptr + r64 * stride_dx_row + cols, dh.to(dx_ptr.dtype.element_ty), mask=mask)
            dw += dy * n
        tl.store(partial_ptr + pid.to(tl.int64) * H + cols, dw, mask=mask)


def rmsnorm_bwd(
    dy_ptr,               # [n_rows, H] gradient of y (x's dtype)
    dres_out_ptr,         # [n_rows, H] gradient of residual_out (residual's dtype); read if has_dres_out
    h_ptr,                # [n_rows, H] residual_out as the forward wrote it (residual's dtype)
    rstd_ptr,             # [n_rows] fp32, from the forward
    weight_ptr,           # [H] untyped bytes: weight_dtype says how to read them
    dres_ptr,             # [n_rows, H] out: gradient of residual (residual's dtype), and of x unless SEPARATE_DX
    dx_ptr,               # [n_rows, H] out: gradient of x (x's dtype); written if SEPARATE_DX
    partial_ptr,          # [n_programs, H] fp32 workspace: each program's dweight partial
    mean_ptr,             # [n_rows] fp32 workspace (looped path): each row's mean(g * n)
    n_rows: tl.int32, H: tl.int32,
    stride_dy_row: tl.int64, stride_dres_out_row: tl.int64, stride_h_row: tl.int64, stride_dres_row: tl.int64, stride_dx_row: tl.int64,
    weight_offset: tl.float32,  # fp32
    has_dres_out: tl.int32,  # i32: nonzero if residual_out has a gradient (a predicated load)
    weight_dtype: tl.int32,  # i32: the weight's addrmsnorm_dtype (0 fp16, 1 bf16, 2 fp32), 3: none (w = 1)
    cos_ptr,                 # ROPE: [tokens, *] fp32, the angle's cosine of each column of a token's heads
    sin_ptr,                 # ROPE: its sine, likewise
    stride_cos: tl.int64,    # ROPE: elements between consecutive rows of cos (0: one row for every token)
    stride_sin: tl.int64,    # ROPE: the same for sin
    rope_half: tl.int32,     # ROPE: rotary_dim / 2 (a head's columns from rotary_dim on are not rotated)
    rope_style: tl.int32,    # ROPE: 0 NeoX (rotate_half), 1 GPT-J (interleaved pairs)
    group_rows: tl.int32,    # ROPE: a token's heads, consecutive rows (row r is token r // group_rows)
    eps: tl.float32,         # ROPE: the forward's eps (rstd is computed from h; rstd_ptr is not read)
    BLOCK_H: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr, LOOPED: tl.constexpr,
    SEPARATE_DX: tl.constexpr,  # x's dtype differs from residual's (an fp32 residual stream)
    ALIGN: tl.constexpr,        # H and every row stride are multiples of ALIGN elements
    STAGES: tl.constexpr = 1,   # software-pipelining depth of the row (looped: chunk) loops (1: none)
    ROPE: tl.constexpr = False,  # single pass, the plain norm: the backward of the QK norm with the rotation
):
    H = _aligned(H, ALIGN)
    stride_dy_row = _aligned(stride_dy_row, ALIGN)
    stride_dres_out_row = _aligned(stride_dres_out_row, ALIGN)
    stride_h_row = _aligned(stride_h_row, ALIGN)
    stride_dres_row = _aligned(stride_dres_row, ALIGN)
    stride_dx_row = _aligned(stride_dx_row, ALIGN)
    if ROPE:
        stride_cos = _aligned(stride_cos, ALIGN)
        stride_sin = _aligned(stride_sin, ALIGN)
    if LOOPED:
        _bwd_looped(dy_ptr, dres_out_ptr, h_ptr, rstd_ptr, weight_ptr, dres_ptr, dx_ptr, partial_ptr, mean_ptr,
                    n_rows, H, stride_dy_row, stride_dres_out_row, stride_h_row, stride_dres_row, stride_dx_row,
                    weight_offset, has_dres_out, weight_dtype, BLOCK_H, SEPARATE_DX, STAGES)
    elif ROPE and ALIGN > 1:  # NeoX, every column rotated (configs.rope_on_vector)
        _bwd_rope_halves(dy_ptr, dres_out_ptr, h_ptr, weight_ptr, dres_ptr, dx_ptr, partial_ptr,
                         n_rows, H, stride_dy_row, stride_dres_out_row, stride_h_row, stride_dres_row, stride_dx_row,
                         weight_offset, has_dres_out, weight_dtype, cos_ptr, sin_ptr, stride_cos, stride_sin,
                         _aligned(rope_half, ALIGN), group_rows, eps, BLOCK_H, ROWS_PER_PROGRAM, SEPARATE_DX, STAGES)
    else:
        # ROPE at ALIGN 1 walks its rows one at a time: its per-column partner and angle reads leave Triton free to
        # spread a tile's rows over lanes, and then every lane of a column stored the same dweight partial to one
        # shared-memory word on its way to the global store (compute-sanitizer's racecheck hazards; perf-notes).
        # The grid and workspace stay the config's: a program's rows are the same range either way.
        _bwd_single_pass(dy_ptr, dres_out_ptr, h_ptr, rstd_ptr, weight_ptr, dres_ptr, dx_ptr, partial_ptr,
                         n_rows, H, stride_dy_row, stride_dres_out_row, stride_h_row, stride_dres_row,
                         stride_dx_row, weight_offset, has_dres_out, weight_dtype, BLOCK_H,
                         1 if ROPE else ROWS_PER_PROGRAM, SEPARATE_DX, STAGES, ROPE=ROPE, cos_ptr=cos_ptr,
                         sin_ptr=sin_ptr, stride_cos=stride_cos, stride_sin=stride_sin, rope_half=rope_half,
                         rope_style=rope_style, group_rows=group_rows, eps=eps)


rmsnorm_bwd = triton.jit(rmsnorm_bwd, do_not_specialize=_runtime_ints(rmsnorm_bwd))


# ALIGN = 1 launches of the JIT: the same two kernels, blind to their pointers' alignment. Left to
# itself the JIT marks every 16-byte-aligned pointer divisible by 16; at ALIGN > 1 that is the
# promise the AOT build compiles in too, but at ALIGN = 1 (odd H, odd strides, a misaligned
# pointer) the AOT kernel knows nothing of its pointers. Aligned pointers there let Triton give a
# 16-byte weight load a wider layout that other tensors then share, which changes how a reduction
# groups its elements: the looped path that re-reads x and residual summed the squares of 5 x 11111
# fp16 rows in another order through the JIT than through the C++ runtime (the H200 suite's
# test_backends_give_identical_bits). These handles compile exactly what the AOT build compiles.
def _unaligned(kernel):
    """The kernel's handle with neither its integers nor its pointers (the parameters named *_ptr)
    specialized."""
    pointers = tuple(name for name in inspect.signature(kernel.fn).parameters if name.endswith("_ptr"))
    return triton.jit(kernel.fn, do_not_specialize=_runtime_ints(kernel.fn), do_not_specialize_on_alignment=pointers)


rmsnorm_fwd_unaligned = _unaligned(rmsnorm_fwd)
rmsnorm_bwd_unaligned = _unaligned(rmsnorm_bwd)


@triton.jit(do_not_specialize=["n_partials", "H"])
def rmsnorm_dweight(
    partial_ptr,          # [n_partials, H] fp32, from rmsnorm_bwd
    dweight_ptr,          # [H] out, the weight's dtype
    n_partials: tl.int32, H: tl.int32,
    BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr,
):
    # Column sums of the partials, in a fixed order: the same partials always give the same bits.
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_mask = cols < H
    acc = tl.zeros([BLOCK_P, BLOCK_C], dtype=tl.float32)
    for start in range(0, n_partials, BLOCK_P):
        p = start + tl.arange(0, BLOCK_P)
        mask = (p < n_partials)[:, None] & col_mask[None, :]
        acc += tl.load(partial_ptr + p.to(tl.int64)[:, None] * H + cols[None, :], mask=mask, other=0.0)
    tl.store(dweight_ptr + cols, tl.sum(acc, axis=0).to(dweight_ptr.dtype.element_ty), mask=col_mask)
