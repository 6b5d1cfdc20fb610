// Argument validation for the C ABI: the same cases, with the same meaning, as the Python API's
// addrmsnorm/validation.py. Runs before the driver is touched.
#pragma once

#include <cstdint>

#include "addrmsnorm/addrmsnorm.h"

namespace addrmsnorm {
namespace detail {

// The internal flags of a checked call: the numerics as the kernels choose them, and PDL.
constexpr uint32_t kFlagHf = 0x1u;          // ADDRMSNORM_NUMERICS_HF or _HF_ROUND_ONCE
constexpr uint32_t kFlagRoundOnce = 0x4u;   // ADDRMSNORM_NUMERICS_HF_ROUND_ONCE
constexpr uint32_t kFlagNoWeight = 0x10u;   // weight NULL: the weightless norm (weight_dtype is x_dtype)
static_assert((ADDRMSNORM_FLAG_PDL & (kFlagHf | kFlagRoundOnce | kFlagNoWeight)) == 0 &&
                  (ADDRMSNORM_FLAG_X_SCALE & (kFlagHf | kFlagRoundOnce | kFlagNoWeight)) == 0,
              "the internal flags are distinct from the public ones");

struct ForwardCall {
    const void* x;
    const void* residual;
    const void* weight;
    const void* out;
    const void* residual_out;
    const float* rstd;
    int64_t rows, hidden;
    int64_t stride_x, stride_residual, stride_out, stride_residual_out;
    addrmsnorm_dtype x_dtype, residual_dtype, weight_dtype;
    float eps, weight_offset;
    uint32_t flags;
    float x_scale = 1.0f;       // h = residual + x_scale * x
    const void* post_weight = nullptr;  // the sandwich norm: h = residual + rmsnorm(x; post_weight)
    float post_weight_offset = 0.0f;
};

struct BackwardCall {
    const void* dy;
    const void* dresidual_out;  // may be NULL
    const void* h;
    const float* rstd;
    const void* weight;
    const void* dresidual;
    const void* dx;             // NULL unless x_dtype != residual_dtype
    const void* dweight;        // may be NULL
    const void* workspace;
    uint64_t workspace_bytes;
    int64_t rows, hidden;
    int64_t stride_dy, stride_dresidual_out, stride_h, stride_dresidual, stride_dx;
    addrmsnorm_dtype x_dtype, residual_dtype, weight_dtype;
    float weight_offset;
    uint32_t flags;
    bool plain = false;         // addrmsnorm_rmsnorm_backward: h is x, dresidual is dx (their names)
    const addrmsnorm_rope* rope = nullptr;  // the rotation's backward (rstd NULL: computed from h and eps)
    int64_t rope_groups = 1;
    float eps = 0.0f;
    int64_t rotary_dim = 0;     // with rope: the rotated columns (validate_rope's answer)
};

struct QuantCall {
    const void* x;
    const void* residual;
    const void* weight;
    const void* q;
    const void* residual_out;
    const void* y;              // may be NULL
    int64_t rows, hidden;
    int64_t stride_x, stride_residual, stride_q, stride_residual_out, stride_y;
    addrmsnorm_dtype x_dtype;
    float eps, weight_offset;
    const addrmsnorm_quant* quant;
    uint32_t flags;
    bool plain = false;         // addrmsnorm_rmsnorm_quant: residual is x, no residual_out (NULL)
    float x_scale = 1.0f;       // h = residual + x_scale * x
    const void* post_weight = nullptr;  // the sandwich norm's first weight (SANDWICH), of x_dtype
    float post_weight_offset = 0.0f;
    // The gated norm's gate (GATED; addrmsnorm_norm_args' z, stride_z, group_size, gate, gate_first).
    const void* z = nullptr;
    int64_t stride_z = 0, gate_group_size = 0;
    int32_t gate = 0, gate_first = 0;
};

// addrmsnorm_rmsnorm's views: [rows, heads, hidden] with two leading strides each.
struct NormCall {
    const void* x;
    const void* weight;
    const void* out;
    const float* rstd;
    int64_t rows, heads, hidden;
    int64_t stride_x, stride_x_head, stride_out, stride_out_head;
    addrmsnorm_dtype x_dtype, weight_dtype;
    float eps, weight_offset;
    uint32_t flags;
    // The gated norm (z given): z's rows, the group, the activation and the order (addrmsnorm_norm_args').
    const void* z = nullptr;
    int64_t stride_z = 0, group_size = 0;
    int32_t gate = 0, gate_first = 0;
    // The pair (b given): the second part's rows, weight and output (addrmsnorm_norm_args').
    const void* b = nullptr;
    const void* b_weight = nullptr;
    const void* b_out = nullptr;
    int64_t b_hidden = 0, stride_b = 0, stride_b_out = 0;
};

// addrmsnorm_rmsnorm's checks (validation.check_rmsnorm's rules).
addrmsnorm_status validate_rmsnorm(const NormCall& c);

struct QkCall {
    const void* qkv;
    const void* q_weight;
    const void* k_weight;
    int64_t tokens, num_q_heads, num_kv_heads, head_dim, stride_qkv;
    addrmsnorm_dtype dtype, weight_dtype;
    float eps, weight_offset;
    uint32_t flags;
    const addrmsnorm_rope* rope = nullptr;  // the rotation of each normalized head (rotary_dim 0 read as hidden)
};

// The rotation's rules (validation.check_rope's), for `tokens` rows of heads `hidden` wide, none of whose
// tensors may meet the written bytes [w0, w1). *rotary_dim gets the rotated columns (0 read as hidden).
addrmsnorm_status validate_rope(const addrmsnorm_rope& r, addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype,
                                int64_t tokens, int64_t hidden, bool hf, uintptr_t w0, uintptr_t w1,
                                int64_t* rotary_dim);

// addrmsnorm_qk_rmsnorm's checks (validation.check_qk_rmsnorm's rules; head_dim up to kQkMaxHeadDim).
addrmsnorm_status validate_qk(const QkCall& c);

int dtype_size(addrmsnorm_dtype d);  // 0 if not a valid dtype

// The quantized forward's checks (validation.check_quant's rules).
addrmsnorm_status validate_quant(const QuantCall& c);

// The backward's dtypes and dimensions (the first of its checks; the workspace size needs them too).
addrmsnorm_status check_backward_shape(addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype,
                                       addrmsnorm_dtype weight_dtype, int64_t rows, int64_t hidden);

// The backward's checks that need no device (the workspace size needs one: see backward.cpp).
addrmsnorm_status validate_backward(const BackwardCall& c);

// ADDRMSNORM_SUCCESS, or an error status with the last error naming the argument.
addrmsnorm_status validate_forward(const ForwardCall& c);

// One norm call, as addrmsnorm_norm reads it: the caller's struct (of any size this library knows)
// copied, and the kind of call it describes, with that kind's own description.
struct NormCallArgs {
    enum Kind { kFused, kPlain, kQk, kQuant } kind;
    addrmsnorm_norm_args a;  // the caller's fields; those it did not have are zero
    ForwardCall fused;
    NormCall plain;
    QkCall qk;
    QuantCall quant;
    addrmsnorm_quant quant_desc;
};

// Reads and checks `args` (every rule of its kind), filling *out. Nothing touches the driver.
addrmsnorm_status validate_norm(const addrmsnorm_norm_args* args, NormCallArgs* out);

// Reads a backward call's struct and checks its flags and weight_offset.
addrmsnorm_status read_norm_backward(const addrmsnorm_norm_backward_args* args, addrmsnorm_norm_backward_args* out);

// Reads and checks a backward call; *out is the internal form (plain: the plain norm's backward,
// dresidual NULL and the gradient of x in dx).
addrmsnorm_status validate_norm_backward(const addrmsnorm_norm_backward_args* args, BackwardCall* out);

}  // namespace detail
}  // namespace addrmsnorm
