/*
 * addrmsnorm: fused residual add + RMSNorm, launched from C or C++.
 *
 * Per row of `hidden` elements:
 *
 *     h            = float32(x) + float32(residual)
 *     residual_out = cast(h, residual dtype)
 *     rstd         = 1 / sqrt(sum(h*h) / hidden + eps)
 *     out          = cast(h * rstd * (float32(weight) + weight_offset), x dtype)
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
 * Flags of addrmsnorm_fused_add_rmsnorm.
 *
 * ADDRMSNORM_FLAG_HF_NUMERICS: reproduce HF's RMSNorm after a residual add in the model dtype,
 * instead of the contract above: normalize h rounded to residual_dtype and compute rstd as torch
 * does (mean = sum * fp32(1/hidden), then rsqrtf). Then, with weight_offset == 0, LlamaRMSNorm's
 * form (Llama, Mistral, Qwen): round h * rstd to x_dtype before multiplying by the weight; with
 * weight_offset != 0, the form of HF's norms of an offset weight (Gemma 1/2/3's 1 + w): multiply
 * by (weight + weight_offset) in fp32 and round once. Needs residual_dtype and weight_dtype equal
 * to x_dtype.
 */
#define ADDRMSNORM_FLAG_HF_NUMERICS 0x1u

/*
 * ADDRMSNORM_FLAG_PDL: launch with programmatic dependent launch (the CUDA launch attribute
 * CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION). The kernel may then start while the
 * previous kernel in the stream is still running; its first instruction waits on the GPU
 * (griddepcontrol.wait) until that kernel has finished and its writes are visible, so results are
 * the same bit for bit. This hides the launch latency of chains of small calls, in streams and in
 * captured CUDA graphs. Needs sm_90 or newer; on older devices the flag is accepted and has no
 * effect. Off by default: with it, this kernel's blocks can sit on the GPU, waiting, while the
 * previous kernel still runs, and the two overlap in a profiler's timeline.
 *
 * Whatever the flag, the sm_90+ forward signals early that the next kernel may launch
 * (griddepcontrol.launch_dependents). That matters only to a next kernel launched with PDL, which
 * by CUDA's rules must wait (cudaGridDependencySynchronize) before reading what this one wrote.
 */
#define ADDRMSNORM_FLAG_PDL 0x2u

/*
 * ADDRMSNORM_FLAG_HF_ROUND_ONCE (the plain norm and the QK norm, with ADDRMSNORM_FLAG_HF_NUMERICS):
 * HF's norms that multiply by the weight in fp32 and round once, whatever weight_offset is (OLMo 2's
 * (weight * (x * rstd)).to(dtype)); ADDRMSNORM_FLAG_HF_NUMERICS alone does so only with an offset.
 */
#define ADDRMSNORM_FLAG_HF_ROUND_ONCE 0x4u

/* A CUDA stream: CUstream and cudaStream_t are both this type. NULL is the legacy default stream. */
typedef struct CUstream_st *addrmsnorm_stream;

/*
 * Fused residual add + RMSNorm forward, launched on `stream` in the calling thread's current
 * CUDA context (the stream must belong to it).
 *
 * Pointers are device pointers to rows of `hidden` contiguous elements; row r of x starts at
 * x + r * stride_x elements, and likewise for the others.
 *   x             [rows, hidden] of x_dtype (fp16, bf16 or fp32)
 *   residual      [rows, hidden] of residual_dtype: x_dtype, or fp32 (an fp32 residual stream)
 *   weight        [hidden] of weight_dtype (any of the three), the same for every row
 *   out           [rows, hidden] of x_dtype. May be x or residual exactly (same pointer and
 *                 stride, and residual's dtype equal to x's for the latter).
 *   residual_out  [rows, hidden] of residual_dtype. May be residual or x exactly.
 *                 In-place, vLLM/FlashInfer style: out = x, residual_out = residual.
 *                 In-place, the other style:       residual_out = x.
 *   rstd          [rows] fp32, or NULL not to write it.
 *   rows          >= 0; 0 is a no-op (pointers may then be NULL). At most 2^31 - 1.
 *   hidden        > 0, at most 2^31 - 1.
 *   stride_*      row strides in elements, >= 0. An output's stride must be >= hidden when
 *                 rows > 1 (its rows must not overlap). Ignored when rows == 1.
 *   eps           finite and > 0, added inside the square root, once.
 *   weight_offset finite; added to the weight in fp32 (1.0f for Gemma's 1 + w).
 *   flags         0, or ADDRMSNORM_FLAG_HF_NUMERICS and/or ADDRMSNORM_FLAG_PDL; other bits are
 *                 rejected.
 *
 * Outputs must not overlap each other, the weight, or an input other than by the exact aliasing
 * above. The call does no allocation, no synchronization and no host-device copy, and can be
 * captured in a CUDA graph (call addrmsnorm_preload() before capturing). It cannot see which
 * device a raw pointer lives on: that is the caller's to get right.
 */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_fused_add_rmsnorm(
    const void *x, const void *residual, const void *weight,
    void *out, void *residual_out, float *rstd,
    int64_t rows, int64_t hidden,
    int64_t stride_x, int64_t stride_residual, int64_t stride_out, int64_t stride_residual_out,
    addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype, addrmsnorm_dtype weight_dtype,
    float eps, float weight_offset, uint32_t flags, addrmsnorm_stream stream);

/*
 * Checks the arguments of addrmsnorm_fused_add_rmsnorm exactly as it does, without touching the
 * driver or launching anything. Useful on machines with no GPU, and for bindings that want to
 * fail early.
 */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_fused_add_rmsnorm_check(
    const void *x, const void *residual, const void *weight,
    const void *out, const void *residual_out, const float *rstd,
    int64_t rows, int64_t hidden,
    int64_t stride_x, int64_t stride_residual, int64_t stride_out, int64_t stride_residual_out,
    addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype, addrmsnorm_dtype weight_dtype,
    float eps, float weight_offset, uint32_t flags);

/*
 * Quantized outputs: the forward above, writing q = quant(y) (and optionally y) where it writes
 * out, for fp8/int8 serving, whose next GEMM takes quantized input. y is the contract's fp32 value.
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
 * FLOAT4_E2M1 holds two elements a byte, element 2i in the low nibble; its row stride (stride_q) counts
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
/* addrmsnorm_quant.flags, block-scaled modes: scales in the swizzled 128 x 4 layout. */
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

/*
 *   x, residual, weight, residual_out: as addrmsnorm_fused_add_rmsnorm, with residual and weight of
 *                  x_dtype, which is FLOAT16 or BFLOAT16
 *   q              [rows, hidden] of quant->dtype, out; must not overlap anything
 *   y              [rows, hidden] of x_dtype, out, or NULL; may be x exactly
 *   hidden         a multiple of 16; x, residual, weight, q, residual_out and y start on 16-byte
 *                  boundaries, and every row stride is a multiple of 16 elements (fp8 and int8 GEMMs
 *                  take such rows)
 *   flags          0, or ADDRMSNORM_FLAG_PDL
 */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_fused_add_rmsnorm_quant(
    const void *x, const void *residual, const void *weight,
    void *q, void *residual_out, void *y,
    int64_t rows, int64_t hidden,
    int64_t stride_x, int64_t stride_residual, int64_t stride_q, int64_t stride_residual_out, int64_t stride_y,
    addrmsnorm_dtype x_dtype, float eps, float weight_offset, const addrmsnorm_quant *quant,
    uint32_t flags, addrmsnorm_stream stream);

/* The checks of addrmsnorm_fused_add_rmsnorm_quant, without the driver. */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_fused_add_rmsnorm_quant_check(
    const void *x, const void *residual, const void *weight,
    const void *q, const void *residual_out, const void *y,
    int64_t rows, int64_t hidden,
    int64_t stride_x, int64_t stride_residual, int64_t stride_q, int64_t stride_residual_out, int64_t stride_y,
    addrmsnorm_dtype x_dtype, float eps, float weight_offset, const addrmsnorm_quant *quant, uint32_t flags);

/*
 * Backward of addrmsnorm_fused_add_rmsnorm (contract numerics), for training. With
 * n = h * rstd and g = dy * (weight + weight_offset), per row:
 *
 *     dresidual = rstd * (g - n * mean(g * n)) + dresidual_out
 *     dx        = dresidual (in x_dtype)
 *     dweight   = sum over rows of dy * n
 *
 *   dy             [rows, hidden] of x_dtype: the gradient of out (y)
 *   dresidual_out  [rows, hidden] of residual_dtype: the gradient of residual_out, or NULL if none
 *   h              [rows, hidden] of residual_dtype: residual_out as the forward wrote it
 *   rstd           [rows] fp32, as the forward wrote it
 *   weight         [hidden] of weight_dtype
 *   dresidual      [rows, hidden] of residual_dtype, out: the gradient of residual, and of x when
 *                  x_dtype == residual_dtype (dx must then be NULL)
 *   dx             [rows, hidden] of x_dtype, out, when x_dtype != residual_dtype (fp32 residual)
 *   dweight        [hidden] of weight_dtype, out; NULL not to compute it. Deterministic: no atomics,
 *                  the same inputs give the same bits on the same device.
 *   workspace      fp32 scratch of addrmsnorm_fused_add_rmsnorm_backward_workspace_size() bytes
 *                  (it depends on the device's SM count), 4-byte aligned, owned by the caller
 *   flags          must be 0.
 *
 * Outputs (dresidual, dx, dweight, workspace) must not overlap each other or any input. Strides
 * and the rest follow addrmsnorm_fused_add_rmsnorm. Two kernels are launched on `stream`; no
 * allocation, no synchronization.
 */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_fused_add_rmsnorm_backward(
    const void *dy, const void *dresidual_out, const void *h, const float *rstd, const void *weight,
    void *dresidual, void *dx, void *dweight, void *workspace, uint64_t workspace_bytes,
    int64_t rows, int64_t hidden,
    int64_t stride_dy, int64_t stride_dresidual_out, int64_t stride_h, int64_t stride_dresidual,
    int64_t stride_dx,
    addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype, addrmsnorm_dtype weight_dtype,
    float weight_offset, uint32_t flags, addrmsnorm_stream stream);

/* The backward's argument checks, without the driver (the workspace's size is checked at launch). */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_fused_add_rmsnorm_backward_check(
    const void *dy, const void *dresidual_out, const void *h, const float *rstd, const void *weight,
    const void *dresidual, const void *dx, const void *dweight, const void *workspace,
    uint64_t workspace_bytes, int64_t rows, int64_t hidden,
    int64_t stride_dy, int64_t stride_dresidual_out, int64_t stride_h, int64_t stride_dresidual,
    int64_t stride_dx,
    addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype, addrmsnorm_dtype weight_dtype,
    float weight_offset, uint32_t flags);

/*
 * Bytes of workspace addrmsnorm_fused_add_rmsnorm_backward needs for `rows` x `hidden` on the
 * device of the calling thread's current context (0 when rows == 0).
 */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_fused_add_rmsnorm_backward_workspace_size(
    int64_t rows, int64_t hidden, addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype,
    uint64_t *bytes);

/*
 * The plain RMSNorm (no residual), the forward above with the add and residual_out compiled out:
 *
 *     rstd = 1 / sqrt(sum(x*x) / hidden + eps)        over float32(x)
 *     out  = cast(x * rstd * (float32(weight) + weight_offset), x dtype)
 *
 * x is [rows, heads, hidden] with two leading strides: element (r, j, c) of x is at
 * x + r * stride_x + j * stride_x_head + c elements, and likewise for out. heads = 1 is a plain
 * [rows, hidden] view (stride_x_head and stride_out_head are then ignored). heads > 1 reaches a
 * head's row inside a fused QKV buffer without a copy: for the q part of a [tokens, qkv_width]
 * buffer, rows = tokens, heads = num_q_heads, stride_x = qkv_width, stride_x_head = head_dim.
 *   weight        [hidden] of weight_dtype, the same for every row and head
 *   out           of x_dtype, may be x exactly (same pointer and strides: in place)
 *   rstd          [rows * heads] fp32 (row r, head j at r * heads + j), or NULL
 *   rows, heads   rows >= 0, heads >= 1, rows * heads < 2^31; rows == 0 is a no-op
 *   flags         0, or ADDRMSNORM_FLAG_HF_NUMERICS (HF's RMSNorm: LlamaRMSNorm's roundings, or with
 *                 weight_offset != 0 the offset-weight form; weight_dtype must be x_dtype), with it
 *                 ADDRMSNORM_FLAG_HF_ROUND_ONCE, and/or ADDRMSNORM_FLAG_PDL
 * out must not overlap x (other than exactly), the weight or rstd, nor itself; the check takes
 * each view's whole byte span, so views that interleave in one buffer are refused.
 */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_rmsnorm(
    const void *x, const void *weight, void *out, float *rstd,
    int64_t rows, int64_t heads, int64_t hidden,
    int64_t stride_x, int64_t stride_x_head, int64_t stride_out, int64_t stride_out_head,
    addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype,
    float eps, float weight_offset, uint32_t flags, addrmsnorm_stream stream);

/* The checks of addrmsnorm_rmsnorm, without the driver. */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_rmsnorm_check(
    const void *x, const void *weight, const void *out, const float *rstd,
    int64_t rows, int64_t heads, int64_t hidden,
    int64_t stride_x, int64_t stride_x_head, int64_t stride_out, int64_t stride_out_head,
    addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype,
    float eps, float weight_offset, uint32_t flags);

/*
 * Per-head q and k norms of a fused QKV buffer, in place and in one launch (Qwen3, Gemma 3).
 * qkv is [tokens, width] with row stride stride_qkv elements (width >= (num_q_heads +
 * num_kv_heads) * head_dim; v, after k, is not touched): q's heads are the first num_q_heads *
 * head_dim columns, k's the next num_kv_heads * head_dim. Each head's row of head_dim elements is
 * normalized as addrmsnorm_rmsnorm does it, q's with q_weight and k's with k_weight ([head_dim]
 * each, both of weight_dtype: dtype or FLOAT32). A row's bits are those of addrmsnorm_rmsnorm on the
 * same row.
 *   dtype        ADDRMSNORM_FLOAT16 or ADDRMSNORM_BFLOAT16
 *   head_dim     > 0, at most 512 (the kernels built for it; wider heads: addrmsnorm_rmsnorm per view)
 *   flags        as addrmsnorm_rmsnorm's
 */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_qk_rmsnorm(
    void *qkv, const void *q_weight, const void *k_weight,
    int64_t tokens, int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, int64_t stride_qkv,
    addrmsnorm_dtype dtype, addrmsnorm_dtype weight_dtype,
    float eps, float weight_offset, uint32_t flags, addrmsnorm_stream stream);

/* The checks of addrmsnorm_qk_rmsnorm, without the driver. */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_qk_rmsnorm_check(
    const void *qkv, const void *q_weight, const void *k_weight,
    int64_t tokens, int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, int64_t stride_qkv,
    addrmsnorm_dtype dtype, addrmsnorm_dtype weight_dtype,
    float eps, float weight_offset, uint32_t flags);

/*
 * The plain norm's quantized outputs (fp8 serving of a first layer's input norm): as
 * addrmsnorm_fused_add_rmsnorm_quant with no residual, y = the plain norm's fp32 value. x is
 * [rows, hidden] with row stride stride_x; weight of x_dtype; q, y, quant and the alignment rules
 * as there.
 */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_rmsnorm_quant(
    const void *x, const void *weight, void *q, void *y,
    int64_t rows, int64_t hidden, int64_t stride_x, int64_t stride_q, int64_t stride_y,
    addrmsnorm_dtype x_dtype, float eps, float weight_offset, const addrmsnorm_quant *quant,
    uint32_t flags, addrmsnorm_stream stream);

/* The checks of addrmsnorm_rmsnorm_quant, without the driver. */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_rmsnorm_quant_check(
    const void *x, const void *weight, const void *q, const void *y,
    int64_t rows, int64_t hidden, int64_t stride_x, int64_t stride_q, int64_t stride_y,
    addrmsnorm_dtype x_dtype, float eps, float weight_offset, const addrmsnorm_quant *quant, uint32_t flags);

/*
 * Backward of addrmsnorm_rmsnorm for [rows, hidden] views (contract numerics): the fused backward
 * with h = x and no residual gradient. dx = rstd * (g - n * mean(g * n)), n = x * rstd,
 * g = dy * (weight + weight_offset); dweight = sum over rows of dy * n, deterministic.
 *   dy, x          [rows, hidden] of x_dtype; rstd [rows] fp32 as the forward wrote it
 *   dx             [rows, hidden] of x_dtype, out
 *   dweight        [hidden] of weight_dtype, out, or NULL
 *   workspace      addrmsnorm_fused_add_rmsnorm_backward_workspace_size(rows, hidden, x_dtype, x_dtype)
 *                  bytes
 */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_rmsnorm_backward(
    const void *dy, const void *x, const float *rstd, const void *weight,
    void *dx, void *dweight, void *workspace, uint64_t workspace_bytes,
    int64_t rows, int64_t hidden, int64_t stride_dy, int64_t stride_x, int64_t stride_dx,
    addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype, float weight_offset, uint32_t flags,
    addrmsnorm_stream stream);

/* The checks of addrmsnorm_rmsnorm_backward, without the driver. */
ADDRMSNORM_API addrmsnorm_status addrmsnorm_rmsnorm_backward_check(
    const void *dy, const void *x, const float *rstd, const void *weight,
    const void *dx, const void *dweight, const void *workspace, uint64_t workspace_bytes,
    int64_t rows, int64_t hidden, int64_t stride_dy, int64_t stride_x, int64_t stride_dx,
    addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype, float weight_offset, uint32_t flags);

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

/* The CUDA compute capabilities this library carries cubins for, e.g. "sm_80, sm_90, sm_100". */
ADDRMSNORM_API const char *addrmsnorm_built_archs(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ADDRMSNORM_ADDRMSNORM_H */
