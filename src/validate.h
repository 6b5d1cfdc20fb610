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

// One norm call, read and checked by validate_norm: the caller's addrmsnorm_norm_args as the kernels take it. It
// flows whole from validation to the choice of a kernel to the launch (forward.cpp). Its fields are the caller's,
// with these read once:
//   - flags: ADDRMSNORM_FLAG_PDL, and the internal flags above (the numerics, the weightless norm);
//   - eps, weight_offset, post_weight_offset and x_scale: their float32 values (x_scale 1 unless
//     ADDRMSNORM_FLAG_X_SCALE scales x);
//   - groups: 0 read as 1;
//   - weight_dtype: x_dtype for the weightless norm (the weightless sandwich's is post_weight's);
//   - quant: this value's own copy of the caller's (so a Call is not copied).
struct Call : addrmsnorm_norm_args {
    // The rules a call takes and the kernels it runs: the quantized outputs (quant), the QK norm (weight2, or
    // weightless weight2_from_group), the fused forward (residual), or the plain norm (the gate and pair with it).
    enum Kind { kFused, kPlain, kQk, kQuant } kind = kPlain;
    addrmsnorm_quant quant_desc{};

    Call() : addrmsnorm_norm_args{} {}
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;
    bool weightless() const { return (flags & kFlagNoWeight) != 0; }
    bool hf() const { return (flags & kFlagHf) != 0; }
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

// The checks of each kind (validation.check_rmsnorm's, check_qk_rmsnorm's, check_quant's, check_forward's), after
// validate_norm's own; the kind's rules alone.
addrmsnorm_status validate_rmsnorm(const Call& c);
addrmsnorm_status validate_qk(const Call& c);
addrmsnorm_status validate_quant(const Call& c);
addrmsnorm_status validate_forward(const Call& c);

// The rotation's rules, for `tokens` rows of heads `hidden` wide, none of whose
// tensors may meet the written bytes [w0, w1). *rotary_dim gets the rotated columns (0 read as hidden).
addrmsnorm_status validate_rope(const addrmsnorm_rope& r, addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype,
                                int64_t tokens, int64_t hidden, bool hf, uintptr_t w0, uintptr_t w1,
                                int64_t* rotary_dim);

int dtype_size(addrmsnorm_dtype d);  // 0 if not a valid dtype

// The backward's dtypes and dimensions (the first of its checks; the workspace size needs them too).
addrmsnorm_status check_backward_shape(addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype,
                                       addrmsnorm_dtype weight_dtype, int64_t rows, int64_t hidden);

// The backward's checks that need no device (the workspace size needs one: see backward.cpp).
addrmsnorm_status validate_backward(const BackwardCall& c);

// Reads and checks `args` (every rule of its kind), filling *out. Nothing touches the driver.
addrmsnorm_status validate_norm(const addrmsnorm_norm_args* args, Call* out);

// Reads a backward call's struct and checks its flags and weight_offset.
addrmsnorm_status read_norm_backward(const addrmsnorm_norm_backward_args* args, addrmsnorm_norm_backward_args* out);

// Reads and checks a backward call; *out is the internal form (plain: the plain norm's backward,
// dresidual NULL and the gradient of x in dx).
addrmsnorm_status validate_norm_backward(const addrmsnorm_norm_backward_args* args, BackwardCall* out);

}  // namespace detail
}  // namespace addrmsnorm
