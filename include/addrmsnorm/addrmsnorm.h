/*
 * addrmsnorm: fused residual add + RMSNorm, launched from C or C++.
 *
 * Per row of `hidden` elements:
 *
 *     h            = float32(x) * x_scale + float32(residual)   (x_scale 1 unless ADDRMSNORM_FLAG_X_SCALE)
 *     residual_out = cast(h, residual dtype)
 *     rstd         = 1 / sqrt(sum(h*h) / hidden + eps)
 *     out          = cast(h * rstd * (float32(weight) + weight_offset), x dtype)   (weight 1 where NULL)
 *
 * The kernels are Triton kernels compiled ahead of time to cubins and embedded in this library.
 * The library needs no Python, Triton, nvcc or CUDA runtime: it opens libcuda.so.1 with dlopen on
 * first use and launches through the CUDA driver API. Where there is no driver, every launch
 * returns ADDRMSNORM_ERROR_NO_DRIVER; argument validation still runs first.
 *
 * Errors are values: every function returns a status, addrmsnorm_last_error() says what was wrong
 * and with which argument (thread-local), and the library never exits, aborts or prints.
 *
 * This header compiles as C99 and as C++. It does not include cuda.h: pass a CUstream or a
 * cudaStream_t as the stream (both are `struct CUstream_st *`), or NULL for the legacy stream.
 */
#ifndef ADDRMSNORM_ADDRMSNORM_H
#define ADDRMSNORM_ADDRMSNORM_H

#include <stdint.h>
#include <string.h>

#if defined(_WIN32)
#define ADDRMSNORM_API
#elif defined(ADDRMSNORM_BUILDING)
#define ADDRMSNORM_API __attribute__((visibility("default")))
#else
#define ADDRMSNORM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define ADDRMSNORM_VERSION_MAJOR 0
#define ADDRMSNORM_VERSION_MINOR 1
#define ADDRMSNORM_VERSION_PATCH 0

typedef enum addrmsnorm_status {
    ADDRMSNORM_SUCCESS = 0,
    ADDRMSNORM_ERROR_INVALID_ARGUMENT = 1,  /* a value, size, stride, pointer or overlap is wrong */
    ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE = 2, /* a dtype, or dtype combination, is not supported */
    ADDRMSNORM_ERROR_NO_DRIVER = 3,         /* libcuda.so.1 could not be loaded or lacks a symbol */
    ADDRMSNORM_ERROR_NO_CONTEXT = 4,        /* no CUDA context is current on the calling thread */
    ADDRMSNORM_ERROR_UNSUPPORTED_ARCH = 5,  /* no cubin was built for the device's capability */
    ADDRMSNORM_ERROR_CUDA = 6               /* a CUDA driver call failed; the message names it */
} addrmsnorm_status;

/* Element types. The values are stable. */
typedef enum addrmsnorm_dtype {
    ADDRMSNORM_FLOAT16 = 0,
    ADDRMSNORM_BFLOAT16 = 1,
    ADDRMSNORM_FLOAT32 = 2
} addrmsnorm_dtype;

/*
 * Numerics of a call.
 *
 * ADDRMSNORM_NUMERICS_CONTRACT: the contract above: fp32 through the chain, one rounding per stored
 * output.
 *
 * ADDRMSNORM_NUMERICS_HF: reproduce HF's RMSNorm bit for bit: normalize h rounded to residual_dtype
 * (after a residual add in the model dtype), rstd as torch computes it (mean = sum * fp32(1/hidden),
 * then rsqrtf). With weight_offset == 0, LlamaRMSNorm's form (Llama, Mistral, Qwen): round h * rstd
 * to x_dtype before multiplying by the weight; with weight_offset != 0, the form of HF's norms of an
 * offset weight (Gemma 1/2/3's 1 + w): multiply by (weight + weight_offset) in fp32 and round once.
 * Needs residual_dtype and weight_dtype equal to x_dtype.
 *
 * ADDRMSNORM_NUMERICS_HF_ROUND_ONCE (no residual, no quant): HF's norms that multiply by the weight in
 * fp32 and round once, whatever weight_offset is (OLMo 2's (weight * (x * rstd)).to(dtype)).
 *
 * The values are stable and are the torch operators' `numerics` argument.
 */
typedef enum addrmsnorm_numerics {
    ADDRMSNORM_NUMERICS_CONTRACT = 0,
    ADDRMSNORM_NUMERICS_HF = 1,
    ADDRMSNORM_NUMERICS_HF_ROUND_ONCE = 2
} addrmsnorm_numerics;

/*
 * ADDRMSNORM_FLAG_PDL (addrmsnorm_norm_args.flags): launch with programmatic dependent launch (the
 * CUDA launch attribute CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION). The kernel may then
 * start while the previous kernel in the stream is still running; its first instruction waits on
 * the GPU (griddepcontrol.wait) until that kernel has finished and its writes are visible, so
 * results are the same bit for bit. This hides the launch latency of chains of small calls, in
 * streams and in captured CUDA graphs. Needs sm_90 or newer; on older devices the flag is accepted
 * and has no effect. Off by default: with it, this kernel's blocks can sit on the GPU, waiting,
 * while the previous kernel still runs, and the two overlap in a profiler's timeline.
 *
 * Whatever the flag, the sm_90+ forward signals early that the next kernel may launch
 * (griddepcontrol.launch_dependents). That matters only to a next kernel launched with PDL, which
 * by CUDA's rules must wait (cudaGridDependencySynchronize) before reading what this one wrote.
 */
#define ADDRMSNORM_FLAG_PDL 0x2u

/*
 * ADDRMSNORM_FLAG_X_SCALE (addrmsnorm_norm_args.flags): the scaled residual add of Granite and MiniCPM,
 * h = residual + x_scale * x, with x_scale the field of that name (finite in fp32). It needs a
 * residual, and x_scale nonzero (with 0 the add would ignore x). Without the flag the add is unscaled
 * and x_scale must be 0. With x_scale 1 the results are
 * those of the unscaled add, bit for bit. ADDRMSNORM_NUMERICS_HF rounds x * x_scale to x_dtype before
 * the add, as HF's models scale in their dtype (`residual + hidden_states * residual_multiplier`).
 */
#define ADDRMSNORM_FLAG_X_SCALE 0x8u

/* A CUDA stream: CUstream and cudaStream_t are both this type. NULL is the legacy default stream. */
typedef struct CUstream_st *addrmsnorm_stream;

/*
 * Quantized outputs (addrmsnorm_norm_args.quant): the norm writing q = quant(y) (and optionally y)
 * where it writes out, for fp8/int8 serving, whose next GEMM takes quantized input. y is the
 * contract's fp32 value.
 *
 *   ADDRMSNORM_QUANT_STATIC     q = quant(y * (1 / scale)), one fp32 scale read from device memory
 *   ADDRMSNORM_QUANT_PER_TOKEN  s = max(min(amax|y| of the row, scale_ub), 1e-10) / qmax per row,
 *                               rounded up to a power of two with ADDRMSNORM_QUANT_UE8M0;
 *                               q = quant(y * (1 / s)); s written to scales
 *   ADDRMSNORM_QUANT_PER_GROUP  the same per group of group_size (64 or 128) columns of a row
 *
 * quant: INT8 (qmax 127) rounds half to even, then clamps to [-128, 127]; FLOAT8_E4M3 (qmax 448)
 * clamps to +-448, then rounds to nearest even.
 *
 * Block-scaled formats (the inputs of Blackwell's block-scaled GEMMs): one scale byte per block of
 * group_size consecutive columns of a row, a the block's amax |y|, every step in fp32, rounded to nearest:
 *   ADDRMSNORM_QUANT_NVFP4  dtype FLOAT4_E2M1, group_size 16, scale: the global scale g (one fp32 in
 *                           device memory); s = e4m3(min((a / 6) * g, 448)), q = e2m1(y * (g / s)),
 *                           q = 0 where s = 0; scales are e4m3 bytes
 *   ADDRMSNORM_QUANT_MXFP8  dtype FLOAT8_E4M3, group_size 32, scale NULL; the scale 2^k, k = ceil(log2(a /
 *                           448)) and at least -127, q = e4m3(y * 2^-k); scales are e8m0 bytes (k + 127)
 *   ADDRMSNORM_QUANT_MXFP4  dtype FLOAT4_E2M1, group_size 32, as MXFP8 with a / 6
 * e2m1 rounds to nearest even and saturates at +-6; its sign bit is set where the value is negative. q of
 * FLOAT4_E2M1 holds two elements a byte, element 2i in the low nibble; its row stride (stride_out) counts
 * bytes and is a multiple of 8. Scales: [rows, hidden / group_size] bytes at (scales_stride_row,
 * scales_stride_group), or with ADDRMSNORM_QUANT_SWIZZLED the 128 x 4 tiles block-scaled GEMMs read
 * (strides unused): rows rounded up to 128, blocks to 4 (K4), element (m, k) at
 * ((m / 128) * (K4 / 4) + k / 4) * 512 + (m % 32) * 16 + ((m % 128) / 32) * 4 + k % 4, padding written
 * as zeros. They need sm_89 or newer (e4m3), like FLOAT8_E4M3.
 */
typedef enum addrmsnorm_quant_dtype {
    ADDRMSNORM_QUANT_INT8 = 0,
    ADDRMSNORM_QUANT_FLOAT8_E4M3 = 1,
    ADDRMSNORM_QUANT_FLOAT4_E2M1 = 2
} addrmsnorm_quant_dtype;

typedef enum addrmsnorm_quant_mode {
    ADDRMSNORM_QUANT_STATIC = 1,
    ADDRMSNORM_QUANT_PER_TOKEN = 2,
    ADDRMSNORM_QUANT_PER_GROUP = 3,
    ADDRMSNORM_QUANT_NVFP4 = 4,
    ADDRMSNORM_QUANT_MXFP8 = 5,
    ADDRMSNORM_QUANT_MXFP4 = 6
} addrmsnorm_quant_mode;

/* addrmsnorm_quant.flags: round dynamic scales up to a power of two (DeepSeek-V3's UE8M0). */
#define ADDRMSNORM_QUANT_UE8M0 0x1u
/* addrmsnorm_quant.flags, block-scaled modes: scales in the swizzled 128 x 4 layout, one contiguous buffer
   of the padded tiles that starts on a 16-byte boundary. */
#define ADDRMSNORM_QUANT_SWIZZLED 0x2u

typedef struct addrmsnorm_quant {
    addrmsnorm_quant_mode mode;
    addrmsnorm_quant_dtype dtype;  /* of q */
    int32_t group_size;            /* PER_GROUP: 64 or 128; NVFP4 16; MXFP8, MXFP4 32; otherwise 0 */
    uint32_t flags;                /* 0, ADDRMSNORM_QUANT_UE8M0 (dynamic modes), ADDRMSNORM_QUANT_SWIZZLED (block) */
    const float *scale;            /* STATIC: device pointer to one fp32 scale; NVFP4: the global scale;
                                      otherwise NULL */
    const float *scale_ub;         /* per token, per group: NULL, or a device pointer to one fp32 bound of amax */
    void *scales;                  /* dynamic: fp32 scales, out; block-scaled: scale bytes, out; STATIC: NULL */
    int64_t scales_stride_row;     /* elements between the scales of consecutive rows (>= 0) */
    int64_t scales_stride_group;   /* PER_GROUP and block-scaled: elements between consecutive groups of a row.
                                      Row-major [rows, hidden / group_size]: (hidden / group_size, 1); DeepGEMM's
                                      column-major, TMA-aligned layout: (1, rows rounded up to 4) */
} addrmsnorm_quant;

/* The rotation's pairs of columns (addrmsnorm_rope.style). */
typedef enum addrmsnorm_rope_style {
    ADDRMSNORM_ROPE_NEOX = 0, /* column c with c + rotary_dim / 2 (HF's rotate_half) */
    ADDRMSNORM_ROPE_GPTJ = 1  /* column 2i with 2i + 1 (interleaved) */
} addrmsnorm_rope_style;

/* The dtype of addrmsnorm_rope.positions. */
typedef enum addrmsnorm_index_dtype {
    ADDRMSNORM_INT32 = 0,
    ADDRMSNORM_INT64 = 1
} addrmsnorm_index_dtype;

/*
 * The rotation (RoPE) of each normalized head, in the same pass (addrmsnorm_norm_args.rope): the QK norm's
 * heads, or the plain norm's of a [tokens, heads, head_dim] view (groups = heads; a 2-D call is one head a
 * token). Token t is rows' index r; its head h (columns c < rotary_dim) becomes, with y the normalized head,
 *
 *     out[c] = y[c] * cos[c] - y[p(c)] * sin[c]    for the first column of each pair
 *     out[c] = y[c] * cos[c] + y[p(c)] * sin[c]    for the second          (columns >= rotary_dim: y[c])
 *
 * where NeoX pairs c with p(c) = c + rotary_dim / 2 and GPT-J 2i with 2i + 1. The angles of token t:
 *
 *   positions given: row positions[t] of cos_sin_cache ([max_position, rotary_dim], row stride stride_cache):
 *                    its first rotary_dim / 2 columns the cosines of the pairs' frequencies, the rest their
 *                    sines (vLLM's layout); a position outside [0, max_position) is not read, and nothing of
 *                    its token is written (the caller's to prevent: the call cannot see device memory)
 *   positions NULL:  row t of cos and of sin ([tokens, rotary_dim] each, row strides stride_cos and
 *                    stride_sin, 0 to broadcast one row): the angle of each column, as HF's rotary
 *                    embedding gives them
 *
 * x_dtype fp16 or bf16; hidden (head_dim) at most 512; angle_dtype fp32 or x_dtype; rotary_dim even, in
 * [2, hidden] (0: hidden). ADDRMSNORM_NUMERICS_HF is the family's HF norm and apply_rotary_pos_emb bit for bit:
 * cos and sin of x_dtype (no cache), each product and the sum rounded to x_dtype. No residual, quant, z, b or
 * post_weight; no tensor of the rotation may overlap an output.
 */
typedef struct addrmsnorm_rope {
    int32_t style;              /* an addrmsnorm_rope_style */
    int32_t rotary_dim;         /* the rotated columns of a head: even, <= hidden; 0 is hidden */
    addrmsnorm_dtype angle_dtype;  /* of cos_sin_cache, or of cos and sin: fp32 or x_dtype */
    addrmsnorm_index_dtype positions_dtype;  /* of positions */
    const void *positions;      /* [rows] device pointer, or NULL (cos and sin) */
    const void *cos_sin_cache;  /* with positions: [max_position, rotary_dim]; else NULL */
    int64_t max_position;       /* with positions: cos_sin_cache's rows (> 0) */
    int64_t stride_cache;       /* with positions: elements between cos_sin_cache's rows */
    const void *cos, *sin;      /* without positions: [rows, rotary_dim] each; else NULL */
    int64_t stride_cos, stride_sin;  /* their row strides, in elements (>= 0) */
} addrmsnorm_rope;

/*
 * One norm call: the fused residual add + RMSNorm, the plain RMSNorm (residual NULL), the per-head
 * QK norm (weight2 given) and the quantized outputs of the first two (quant given), all one kernel
 * source and one set of rules. Start from addrmsnorm_norm_args_init(), which zeroes every field and
 * sets struct_size; a field this header adds later is zero in older callers' structs, and zero
 * always means "absent" or "as before".
 *
 * Pointers are device pointers. x is [rows, groups, hidden]: element (r, g, c) of x is at
 * x + r * stride_x + g * stride_x_group + c elements, and likewise for out (stride_out,
 * stride_out_group). groups 0 or 1 is a plain [rows, hidden] view (the group strides are then
 * ignored); groups > 1 reaches a head's row inside a fused QKV buffer without a copy (rows = tokens,
 * groups = heads, stride_x = the buffer's row stride, stride_x_group = head_dim). residual,
 * residual_out and y are [rows, hidden] with one row stride each. A stride is ignored where its
 * dimension has one entry.
 *
 *   x             of x_dtype (fp16, bf16 or fp32)
 *   residual      NULL (the plain norm), or of residual_dtype: x_dtype, or fp32 (an fp32 residual
 *                 stream); needs groups <= 1
 *   residual_out  with residual: of residual_dtype, out, h as the contract rounds it. May be residual
 *                 or x exactly (same pointer and stride). Without residual: NULL.
 *   weight        [hidden] of weight_dtype (any of the three), the same for every row and group; or
 *                 NULL, the weightless norm (Llama 4's L2 norm of q and k): out = h * rstd, nothing
 *                 read in the weight's place, weight_dtype ignored (but for post_weight's), weight_offset 0
 *   weight2       NULL, or the QK norm's k weight: [hidden] of weight_dtype; groups from
 *                 weight2_from_group on take it (q's heads, then k's, in one launch). With weight
 *                 NULL too (a weightless QK norm), weight2_from_group alone marks the QK norm. The QK norm
 *                 runs in place (out == x), on fp16 or bf16, hidden (head_dim) <= 512, with no rstd,
 *                 and names x "qkv", weight "q_weight" and weight2 "k_weight" in its messages.
 *                 v_from_group (0: none), after k's groups and before the last, starts v's heads (Gemma
 *                 4's v_norm): normalized in the same launch with no weight (w = 1) and not rotated.
 *   out           of x_dtype, or with quant of quant->dtype (q). May be x exactly (in place), or with
 *                 a residual of x's dtype, residual exactly.
 *                 In-place, vLLM/FlashInfer style: out = x, residual_out = residual.
 *                 In-place, the other style:       residual_out = x.
 *   rstd          [rows * groups] fp32 (row r, group g at r * groups + g), or NULL not to write it;
 *                 NULL with quant; [2, rows] with post_weight
 *   rows          >= 0; 0 is a no-op (pointers may then be NULL). rows * groups < 2^31.
 *   hidden        > 0, < 2^31
 *   strides       in elements, >= 0. An output's rows must not overlap.
 *   eps           finite, > 0 and > 0 in fp32; added inside the square root, once
 *   weight_offset finite in fp32; added to the weight in fp32 (1.0 for Gemma's 1 + w)
 *   numerics      an addrmsnorm_numerics (CONTRACT with quant)
 *   flags         ADDRMSNORM_FLAG_PDL, ADDRMSNORM_FLAG_X_SCALE, or neither; other bits are rejected
 *   x_scale       with ADDRMSNORM_FLAG_X_SCALE, the scale of x in the residual add; else 0
 *   post_weight   NULL, or [hidden] of weight_dtype: the sandwich norm (below); post_weight_offset its offset
 *   z             NULL, or the gated norm's gate (below), with stride_z, group_size, gate and gate_first;
 *                 with z NULL those are 0
 *   b             NULL, or the pair's second part (below), with b_weight, b_out, b_hidden, stride_b and
 *                 stride_b_out; with b NULL those are 0
 *   rope          NULL, or the rotation of each normalized head (addrmsnorm_rope, above): the QK norm's, or
 *                 the plain norm's
 *   quant         NULL, or the quantized epilogue (above); then x_dtype is fp16 or bf16, residual and
 *                 weight are of x_dtype, groups <= 1, hidden is a multiple of 16, and x, residual,
 *                 weight, out, residual_out and y start on 16-byte boundaries with row strides of
 *                 16-element multiples (fp8 and int8 GEMMs take such rows)
 *   y             with quant: NULL, or [rows, hidden] of x_dtype, out (may be x exactly); else NULL
 *
 * The kind of call follows from which of residual, weight2 and quant are NULL, and so do the rules
 * checked: a binding passes a non-NULL address for a tensor it was given even when the tensor is
 * empty (nothing is then read or written), so that an empty call is checked as its kind.
 *
 * Outputs must not overlap each other, the weights, or an input other than by the exact aliasing
 * above; the check takes each view's whole byte span. The call does no allocation, no
 * synchronization and no host-device copy, and can be captured in a CUDA graph (call
 * addrmsnorm_preload() before capturing). It cannot see which device a raw pointer lives on: that is
 * the caller's to get right.
 */
typedef struct addrmsnorm_norm_args {
    uint64_t struct_size; /* sizeof(addrmsnorm_norm_args) as the caller compiled it */
    const void *x;
    int64_t rows, groups, hidden;
    int64_t stride_x, stride_x_group;
    addrmsnorm_dtype x_dtype;
    addrmsnorm_dtype residual_dtype;
    const void *residual;
    int64_t stride_residual;
    void *residual_out;
    int64_t stride_residual_out;
    const void *weight;
    const void *weight2;
    int64_t weight2_from_group;
    addrmsnorm_dtype weight_dtype;
    addrmsnorm_numerics numerics;
    void *out;
    int64_t stride_out, stride_out_group;
    float *rstd;
    double eps;
    double weight_offset;
    uint32_t flags;
    uint32_t reserved; /* 0 */
    const addrmsnorm_quant *quant;
    void *y;
    int64_t stride_y;
    double x_scale; /* with ADDRMSNORM_FLAG_X_SCALE. An older caller's struct_size that ends before it is
                       accepted, and it and the fields after it read as 0 */
    const void *post_weight;   /* NULL, or the sandwich norm's first weight (below) */
    double post_weight_offset; /* with post_weight: added to it in fp32; else 0 */
    const void *z;             /* NULL, or the gated norm's gate: [rows, hidden] of x_dtype (below) */
    int64_t stride_z;          /* z's row stride, in elements (z may be a column slice of a wider buffer) */
    int64_t group_size;        /* the columns normalized together: divides hidden; 0 is hidden */
    int32_t gate;              /* an addrmsnorm_gate */
    int32_t gate_first;        /* 0: rmsnorm(x) * w * act(z) (norm before gate); 1: rmsnorm(x * act(z)) * w */
    const void *b;             /* NULL, or the pair's second part: [rows, b_hidden] of x_dtype (below) */
    const void *b_weight;      /* with b: [b_hidden] of weight_dtype (NULL with weight NULL) */
    void *b_out;               /* with b: [rows, b_hidden] of x_dtype; may be b exactly */
    int64_t b_hidden, stride_b, stride_b_out;
    const addrmsnorm_rope *rope; /* NULL, or the rotation of each normalized head (above) */
    int64_t v_from_group;        /* the QK norm: 0, or the groups from it on (after k's: Gemma 4's v heads),
                                    normalized with no weight and not rotated (below) */
} addrmsnorm_norm_args;

/* The gated norm's activation of z. */
typedef enum addrmsnorm_gate {
    ADDRMSNORM_GATE_SILU = 0 /* z * sigmoid(z), in fp32 */
} addrmsnorm_gate;

/*
 * The sandwich norm (post_weight given: Gemma 2/3's and GLM-4's post- and pre-norms around the residual add),
 * in one pass:
 *
 *     p            = x * rstd_x * (post_weight + post_weight_offset)   rstd_x = 1 / sqrt(sum(x*x) / H + eps)
 *     h            = p + residual                                      fp32, p not rounded first
 *     residual_out = cast(h), y = cast(h * rstd * (weight + weight_offset)), as the fused call
 *
 * It is the fused call (residual given, no weight2, no ADDRMSNORM_FLAG_X_SCALE) with residual_dtype
 * equal to x_dtype and weight_dtype (post_weight's, and weight's if given) x_dtype or fp32. rstd, if given, is
 * [2, rows]: rstd of h, then rstd_x. ADDRMSNORM_NUMERICS_HF: HF's modules bit for bit (p rounded to x_dtype,
 * as HF's post-norm returns it; the add rounded to x_dtype; then the fused call's HF form), with
 * post_weight_offset equal to weight_offset. post_weight must not overlap an output. With quant (y into a GEMM's
 * input): fp8 static, per token and per group, NVFP4 and MXFP8, under the quantized call's rules.
 *
 * The gated norm (z given: Qwen3-Next's and Qwen3.5's Qwen3NextRMSNormGated, Mamba2's, Nemotron-H's and
 * Falcon-H1's MambaRMSNormGated), in one pass, each group of group_size columns of a row on its own:
 *
 *     gate_first 0:  y = cast(v * rstd * (weight + weight_offset) * silu(z)),  v = x
 *     gate_first 1:  y = cast(v * rstd * (weight + weight_offset)),            v = x * silu(z)
 *                    rstd = 1 / sqrt(sum(v*v over the group) / group_size + eps), all in fp32
 *
 * It is the plain call (residual, weight2 and quant NULL, groups 0 or 1) with z of x_dtype (any of the three),
 * weight_dtype x_dtype (or weight NULL), group_size a multiple of 8 of at most 8192, no rstd;
 * x, z, out and weight on 16-byte boundaries and row strides of multiples of 8. The weight is indexed by
 * the column in the row. ADDRMSNORM_NUMERICS_HF (weight_offset 0): HF's modules' roundings (gate_first 0:
 * the normalized value rounded to x_dtype, times the weight rounded again, times silu(z) in fp32; 1:
 * LlamaRMSNorm's two roundings of v). out may be x exactly, and must not overlap z.
 *
 * The pair (b given: DeepSeek-V3's and Kimi-K2's latent norms, q_a_layernorm and kv_a_layernorm), in one
 * launch: the plain norm of x's rows into out, and of b's rows (as many, b_hidden wide) with b_weight into
 * b_out. It is the plain call (residual, weight2, quant and z NULL, groups 0 or 1, no rstd) with x_dtype fp16
 * or bf16, weight_dtype x_dtype (both weights given, or both NULL), hidden and b_hidden multiples of 8 of at
 * most 8192, row strides of multiples of 8 and every tensor on a 16-byte boundary. ADDRMSNORM_NUMERICS_HF
 * is LlamaRMSNorm's form (weight_offset 0). out may be x exactly and b_out b exactly; the two parts may be
 * column slices of one buffer (rows of one stride whose columns do not meet); no output may overlap any
 * other tensor.
 */
/* Every field zero, struct_size set: the starting point of every call. */
static inline addrmsnorm_norm_args addrmsnorm_norm_args_init(void) {
    addrmsnorm_norm_args a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof(addrmsnorm_norm_args);
    return a;
}

/* The scaled residual add: x_scale 1 is the unscaled add and leaves the struct as it is; any other value
 * sets ADDRMSNORM_FLAG_X_SCALE and the field. */
static inline void addrmsnorm_norm_args_set_x_scale(addrmsnorm_norm_args *a, double x_scale) {
    if (x_scale != 1.0) {
        a->flags |= ADDRMSNORM_FLAG_X_SCALE;
        a->x_scale = x_scale;
    }
}

/* The QK norm's layout, the one place it is written: q's heads, then k's, of a [tokens, width]
 * buffer as the groups of one in-place call (groups of head_dim, k_weight from num_q_heads on).
 * addrmsnorm_norm_args_qkv adds v's heads after k's (Gemma 4's v_norm: no weight, no rotation).
 * stride_qkv is the buffer's row stride, in elements. The dtypes, eps, weight_offset, numerics and
 * flags are the caller's to set. */
static inline addrmsnorm_norm_args addrmsnorm_norm_args_qk(const void *qkv, const void *q_weight, const void *k_weight,
                                                           int64_t tokens, int64_t num_q_heads, int64_t num_kv_heads,
                                                           int64_t head_dim, int64_t stride_qkv) {
    addrmsnorm_norm_args a = addrmsnorm_norm_args_init();
    a.x = qkv;
    a.out = (void *)qkv;
    a.weight = q_weight;
    a.weight2 = k_weight;
    a.weight2_from_group = num_q_heads;
    a.rows = tokens;
    a.groups = num_q_heads + num_kv_heads;
    a.hidden = head_dim;
    a.stride_x = stride_qkv;
    a.stride_out = stride_qkv;
    a.stride_x_group = head_dim;
    a.stride_out_group = head_dim;
    return a;
}

static inline addrmsnorm_norm_args addrmsnorm_norm_args_qkv(const void *qkv, const void *q_weight,
                                                            const void *k_weight, int64_t tokens, int64_t num_q_heads,
                                                            int64_t num_kv_heads, int64_t num_v_heads,
                                                            int64_t head_dim, int64_t stride_qkv) {
    addrmsnorm_norm_args a = addrmsnorm_norm_args_qk(qkv, q_weight, k_weight, tokens, num_q_heads, num_kv_heads,
                                                     head_dim, stride_qkv);
    if (num_v_heads != 0) {
        a.v_from_group = num_q_heads + num_kv_heads;
        a.groups += num_v_heads;
    }
    return a;
}

/* Launch one norm call on `stream`, in the calling thread's current CUDA context (the stream must
 * belong to it). Arguments are checked first, with nothing written on error. */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_norm(const addrmsnorm_norm_args *args, addrmsnorm_stream stream);

/* The checks of addrmsnorm_norm, exactly as it makes them, without touching the driver or launching
 * anything: for machines with no GPU, and for bindings that want to fail early. */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_norm_check(const addrmsnorm_norm_args *args);

/*
 * Backward of a norm call without quant or weight2 (contract numerics), for training, over
 * [rows, hidden] views. With n = h * rstd and g = dy * (weight + weight_offset), per row:
 *
 *     dh        = rstd * (g - n * mean(g * n)) + dresidual_out
 *     dweight   = sum over rows of dy * n
 *
 * The fused call's backward: dresidual = dh, and dx = dh too (in x_dtype). The plain norm's: h is x,
 * and dx = dh.
 *
 *   dy             of x_dtype: the gradient of out (y)
 *   dresidual_out  of residual_dtype: the gradient of residual_out, or NULL if none (NULL for the
 *                  plain norm)
 *   h              of residual_dtype: residual_out as the forward wrote it, or the plain norm's x
 *                  (residual_dtype = x_dtype)
 *   rstd           [rows] fp32, as the forward wrote it
 *   weight         [hidden] of weight_dtype, or NULL: the weightless norm's backward (g = dy, dweight
 *                  NULL, weight_offset 0)
 *   dresidual      of residual_dtype, out: the fused call's gradient of residual, and of x when
 *                  x_dtype == residual_dtype (dx is then NULL). NULL for the plain norm.
 *   dx             of x_dtype, out: the gradient of x when it is not dresidual: with an fp32 residual,
 *                  and for the plain norm (dresidual NULL)
 *   dweight        [hidden] of weight_dtype, out; NULL not to compute it. Deterministic: no atomics,
 *                  the same inputs give the same bits on the same device.
 *   workspace      fp32 scratch of addrmsnorm_norm_backward_workspace_size() bytes (it depends on the
 *                  device's SM count), 4-byte aligned, owned by the caller
 *   flags          must be 0.
 *   rope           NULL, or the rotation the forward applied to each normalized head (the QK norm with the
 *                  rotation, each of its parts on its own): the plain norm's backward (dresidual_out and
 *                  dresidual NULL, dx given) over rows = tokens * rope_groups heads of hidden <= 512, fp16 or
 *                  bf16, a token's heads consecutive rows (row r is token r / rope_groups). dy is rotated back
 *                  first (the transpose of the forward's rotation: the rotation by the negative angle), then
 *                  the norm's backward runs. The angles are cos and sin by column (positions NULL),
 *                  angle_dtype fp32, rows of [tokens, rotary_dim]. rstd is NULL: the forward stored none,
 *                  and each row's is computed from h and eps, as the forward computed it.
 *   rope_groups    with rope: the heads of a token (> 0, dividing rows)
 *   eps            with rope: the forward's eps
 *
 * Outputs (dresidual, dx, dweight, workspace) must not overlap each other or any input. Two kernels
 * are launched on `stream`; no allocation, no synchronization.
 */
typedef struct addrmsnorm_norm_backward_args {
    uint64_t struct_size; /* sizeof(addrmsnorm_norm_backward_args) as the caller compiled it */
    int64_t rows, hidden;
    const void *dy;
    int64_t stride_dy;
    const void *dresidual_out;
    int64_t stride_dresidual_out;
    const void *h;
    int64_t stride_h;
    const float *rstd;
    const void *weight;
    void *dresidual;
    int64_t stride_dresidual;
    void *dx;
    int64_t stride_dx;
    void *dweight;
    void *workspace;
    uint64_t workspace_bytes;
    addrmsnorm_dtype x_dtype, residual_dtype, weight_dtype;
    uint32_t flags;
    double weight_offset;
    const addrmsnorm_rope *rope; /* NULL, or the rotation of each head (above) */
    int64_t rope_groups;
    double eps;
} addrmsnorm_norm_backward_args;

static inline addrmsnorm_norm_backward_args addrmsnorm_norm_backward_args_init(void) {
    addrmsnorm_norm_backward_args a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof(addrmsnorm_norm_backward_args);
    return a;
}

ADDRMSNORM_API addrmsnorm_status addrmsnorm_norm_backward(const addrmsnorm_norm_backward_args *args,
                                                         addrmsnorm_stream stream);

/* The backward's argument checks, without the driver (the workspace's size is checked at launch). */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_norm_backward_check(const addrmsnorm_norm_backward_args *args);

/*
 * Bytes of workspace addrmsnorm_norm_backward needs for args' rows, hidden and dtypes on the device
 * of the calling thread's current context (0 when rows == 0). Reads no pointer of args.
 */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_norm_backward_workspace_size(const addrmsnorm_norm_backward_args *args,
                                                                        uint64_t *bytes);

/*
 * Loads every kernel into the calling thread's current CUDA context, so that later calls do no
 * module loading (do this before capturing a CUDA graph). Thread-safe; loading happens once per
 * context. Kernels are otherwise loaded on first use.
 */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_preload(void);

/*
 * Makes the primary context of CUDA device `device` (an ordinal) current on the calling thread,
 * retaining it, as cudaSetDevice does. For callers whose thread has no current context yet (a
 * fresh worker thread) and who share the CUDA runtime's context, as PyTorch does.
 */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_use_primary_context(int device);

/* A static description of a status ("invalid argument", ...). Never NULL. */
ADDRMSNORM_API const char *addrmsnorm_status_string(addrmsnorm_status status);

/*
 * The message of the last failing call on this thread, naming the argument or driver call at
 * fault; "" if no call has failed on this thread. Valid until the next call on this thread.
 */
ADDRMSNORM_API const char *addrmsnorm_last_error(void);

/*
 * The same message in a Python caller's words, for the Python bindings (the torch extension and the
 * JIT backend's checks): an argument not given is None, not NULL, and a field the Python operators
 * take under another name is named as they name it. Valid until the next call on this thread.
 */
ADDRMSNORM_API const char *addrmsnorm_last_error_python(void);

/* The CUDA compute capabilities this library carries cubins for, e.g. "sm_80, sm_90, sm_100". */
ADDRMSNORM_API const char *addrmsnorm_built_archs(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* The 0.1 entry points (addrmsnorm_fused_add_rmsnorm, addrmsnorm_rmsnorm, ...), as inline wrappers
 * over addrmsnorm_norm: source compatible, no exported symbol. */
#include "addrmsnorm/compat.h"

#endif /* ADDRMSNORM_ADDRMSNORM_H */
