// addrmsnorm: a thin C++ layer over the C ABI in addrmsnorm.h (same math, same rules).
//
//     h = float32(x) + float32(residual);  residual_out = h;  out = h * rstd * (weight + offset)
//
// and the plain norm (h = x, no residual): rmsnorm, rmsnorm_inplace, qk_rmsnorm_inplace; and the quantized
// outputs of both (fused_add_rmsnorm_quant, rmsnorm_quant), with a descriptor per mode (quant_static ... quant_mxfp4).
//
// Errors stay values: calls return an addrmsnorm::Status, which carries the code and the message.
#ifndef ADDRMSNORM_ADDRMSNORM_HPP
#define ADDRMSNORM_ADDRMSNORM_HPP

#include <cstdint>
#include <string>

#include "addrmsnorm/addrmsnorm.h"

namespace addrmsnorm {

enum class Dtype : int {
    float16 = ADDRMSNORM_FLOAT16,
    bfloat16 = ADDRMSNORM_BFLOAT16,
    float32 = ADDRMSNORM_FLOAT32,
};

struct Status {
    addrmsnorm_status code = ADDRMSNORM_SUCCESS;
    std::string message;  // addrmsnorm_last_error() at the time of the failure; empty on success

    bool ok() const { return code == ADDRMSNORM_SUCCESS; }
    explicit operator bool() const { return ok(); }
    const char* name() const { return addrmsnorm_status_string(code); }
};

// Arguments of one forward call. A stride of -1 means "contiguous rows" (stride = hidden).
struct ForwardArgs {
    const void* x = nullptr;
    const void* residual = nullptr;
    const void* weight = nullptr;
    void* out = nullptr;
    void* residual_out = nullptr;
    float* rstd = nullptr;  // optional
    int64_t rows = 0;
    int64_t hidden = 0;
    int64_t stride_x = -1;
    int64_t stride_residual = -1;
    int64_t stride_out = -1;
    int64_t stride_residual_out = -1;
    Dtype x_dtype = Dtype::bfloat16;
    Dtype residual_dtype = Dtype::bfloat16;
    Dtype weight_dtype = Dtype::bfloat16;
    float eps = 1e-6f;
    float weight_offset = 0.0f;
    uint32_t flags = 0;
};

namespace detail {
inline Status to_status(addrmsnorm_status s) {
    Status st;
    st.code = s;
    if (s != ADDRMSNORM_SUCCESS) st.message = addrmsnorm_last_error();
    return st;
}
inline int64_t stride_or_hidden(int64_t stride, int64_t hidden) { return stride == -1 ? hidden : stride; }
}  // namespace detail

// Launch on `stream` in the current CUDA context.
inline Status fused_add_rmsnorm(const ForwardArgs& a, addrmsnorm_stream stream = nullptr) {
    return detail::to_status(addrmsnorm_fused_add_rmsnorm(
        a.x, a.residual, a.weight, a.out, a.residual_out, a.rstd, a.rows, a.hidden,
        detail::stride_or_hidden(a.stride_x, a.hidden), detail::stride_or_hidden(a.stride_residual, a.hidden),
        detail::stride_or_hidden(a.stride_out, a.hidden),
        detail::stride_or_hidden(a.stride_residual_out, a.hidden),
        static_cast<addrmsnorm_dtype>(a.x_dtype), static_cast<addrmsnorm_dtype>(a.residual_dtype),
        static_cast<addrmsnorm_dtype>(a.weight_dtype), a.eps, a.weight_offset, a.flags, stream));
}

// The checks of fused_add_rmsnorm, exactly as it makes them, without the driver or the GPU: it reads
// no memory, so a caller can validate a call before any device memory exists.
inline Status fused_add_rmsnorm_check(const ForwardArgs& a) {
    return detail::to_status(addrmsnorm_fused_add_rmsnorm_check(
        a.x, a.residual, a.weight, a.out, a.residual_out, a.rstd, a.rows, a.hidden,
        detail::stride_or_hidden(a.stride_x, a.hidden), detail::stride_or_hidden(a.stride_residual, a.hidden),
        detail::stride_or_hidden(a.stride_out, a.hidden),
        detail::stride_or_hidden(a.stride_residual_out, a.hidden),
        static_cast<addrmsnorm_dtype>(a.x_dtype), static_cast<addrmsnorm_dtype>(a.residual_dtype),
        static_cast<addrmsnorm_dtype>(a.weight_dtype), a.eps, a.weight_offset, a.flags));
}

// In place, vLLM/FlashInfer convention: residual <- x + residual, then x <- y.
inline Status fused_add_rmsnorm_inplace(void* x, void* residual, const void* weight, int64_t rows,
                                        int64_t hidden, Dtype x_dtype, Dtype residual_dtype,
                                        Dtype weight_dtype, float eps = 1e-6f,
                                        addrmsnorm_stream stream = nullptr) {
    ForwardArgs a;
    a.x = x;
    a.residual = residual;
    a.weight = weight;
    a.out = x;
    a.residual_out = residual;
    a.rows = rows;
    a.hidden = hidden;
    a.x_dtype = x_dtype;
    a.residual_dtype = residual_dtype;
    a.weight_dtype = weight_dtype;
    a.eps = eps;
    return fused_add_rmsnorm(a, stream);
}

// The plain norm (no residual) of x, [rows, heads, hidden] with two leading strides. heads = 1 with
// the default strides is a contiguous [rows, hidden]; a stride of -1 means contiguous (rows: heads *
// hidden elements apart, heads: hidden apart).
struct NormArgs {
    const void* x = nullptr;
    const void* weight = nullptr;
    void* out = nullptr;
    float* rstd = nullptr;  // optional, [rows * heads]
    int64_t rows = 0;
    int64_t heads = 1;
    int64_t hidden = 0;
    int64_t stride_x = -1;
    int64_t stride_x_head = -1;
    int64_t stride_out = -1;
    int64_t stride_out_head = -1;
    Dtype x_dtype = Dtype::bfloat16;
    Dtype weight_dtype = Dtype::bfloat16;
    float eps = 1e-6f;
    float weight_offset = 0.0f;
    uint32_t flags = 0;
};

inline Status rmsnorm(const NormArgs& a, addrmsnorm_stream stream = nullptr) {
    const int64_t row = a.heads * a.hidden;
    return detail::to_status(addrmsnorm_rmsnorm(
        a.x, a.weight, a.out, a.rstd, a.rows, a.heads, a.hidden, a.stride_x == -1 ? row : a.stride_x,
        detail::stride_or_hidden(a.stride_x_head, a.hidden), a.stride_out == -1 ? row : a.stride_out,
        detail::stride_or_hidden(a.stride_out_head, a.hidden), static_cast<addrmsnorm_dtype>(a.x_dtype),
        static_cast<addrmsnorm_dtype>(a.weight_dtype), a.eps, a.weight_offset, a.flags, stream));
}

// In place: x <- rmsnorm(x), contiguous [rows, hidden].
inline Status rmsnorm_inplace(void* x, const void* weight, int64_t rows, int64_t hidden, Dtype x_dtype,
                              Dtype weight_dtype, float eps = 1e-6f, addrmsnorm_stream stream = nullptr) {
    NormArgs a;
    a.x = x;
    a.weight = weight;
    a.out = x;
    a.rows = rows;
    a.hidden = hidden;
    a.x_dtype = x_dtype;
    a.weight_dtype = weight_dtype;
    a.eps = eps;
    return rmsnorm(a, stream);
}

// Per-head q and k norms of a fused QKV buffer, in place, in one launch (addrmsnorm_qk_rmsnorm).
// stride_qkv -1: rows of (num_q_heads + 2 * num_kv_heads) * head_dim elements (q, k, v).
inline Status qk_rmsnorm_inplace(void* qkv, const void* q_weight, const void* k_weight, int64_t tokens,
                                 int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, Dtype dtype,
                                 Dtype weight_dtype, float eps = 1e-6f, int64_t stride_qkv = -1,
                                 uint32_t flags = 0, float weight_offset = 0.0f,
                                 addrmsnorm_stream stream = nullptr) {
    const int64_t stride = stride_qkv == -1 ? (num_q_heads + 2 * num_kv_heads) * head_dim : stride_qkv;
    return detail::to_status(addrmsnorm_qk_rmsnorm(qkv, q_weight, k_weight, tokens, num_q_heads, num_kv_heads,
                                                   head_dim, stride, static_cast<addrmsnorm_dtype>(dtype),
                                                   static_cast<addrmsnorm_dtype>(weight_dtype), eps, weight_offset,
                                                   flags, stream));
}

// ----- quantized outputs (addrmsnorm_fused_add_rmsnorm_quant, addrmsnorm_rmsnorm_quant) ---------------
// The descriptor of each mode. Scales: fp32 for the dynamic modes; bytes (e4m3 or e8m0) for the block-scaled
// formats, [rows, hidden / block] row-major unless `swizzled` (the 128 x 4 tiles: one buffer of rows rounded
// up to 128 times blocks rounded up to 4, see addrmsnorm.h).
inline addrmsnorm_quant quant_static(addrmsnorm_quant_dtype dtype, const float* scale) {
    return addrmsnorm_quant{ADDRMSNORM_QUANT_STATIC, dtype, 0, 0u, scale, nullptr, nullptr, 0, 0};
}
inline addrmsnorm_quant quant_per_token(addrmsnorm_quant_dtype dtype, float* scales, bool ue8m0 = false) {
    return addrmsnorm_quant{ADDRMSNORM_QUANT_PER_TOKEN, dtype, 0, ue8m0 ? ADDRMSNORM_QUANT_UE8M0 : 0u, nullptr,
                            nullptr, scales, 1, 0};
}
inline addrmsnorm_quant quant_per_group(addrmsnorm_quant_dtype dtype, int32_t group_size, float* scales,
                                        int64_t hidden, bool ue8m0 = false) {
    return addrmsnorm_quant{ADDRMSNORM_QUANT_PER_GROUP, dtype, group_size, ue8m0 ? ADDRMSNORM_QUANT_UE8M0 : 0u,
                            nullptr, nullptr, scales, hidden / group_size, 1};
}
namespace detail {
inline addrmsnorm_quant block(addrmsnorm_quant_mode mode, addrmsnorm_quant_dtype dtype, int32_t block_size,
                              const float* global_scale, void* scales, int64_t hidden, bool swizzled) {
    return addrmsnorm_quant{mode, dtype, block_size, swizzled ? ADDRMSNORM_QUANT_SWIZZLED : 0u, global_scale,
                            nullptr, scales, swizzled ? 0 : hidden / block_size, swizzled ? 0 : 1};
}
}  // namespace detail
inline addrmsnorm_quant quant_nvfp4(const float* global_scale, void* scales, int64_t hidden, bool swizzled = false) {
    return detail::block(ADDRMSNORM_QUANT_NVFP4, ADDRMSNORM_QUANT_FLOAT4_E2M1, 16, global_scale, scales, hidden,
                         swizzled);
}
inline addrmsnorm_quant quant_mxfp8(void* scales, int64_t hidden, bool swizzled = false) {
    return detail::block(ADDRMSNORM_QUANT_MXFP8, ADDRMSNORM_QUANT_FLOAT8_E4M3, 32, nullptr, scales, hidden,
                         swizzled);
}
inline addrmsnorm_quant quant_mxfp4(void* scales, int64_t hidden, bool swizzled = false) {
    return detail::block(ADDRMSNORM_QUANT_MXFP4, ADDRMSNORM_QUANT_FLOAT4_E2M1, 32, nullptr, scales, hidden,
                         swizzled);
}

// Arguments of one quantized call: residual nullptr is the plain norm's (addrmsnorm_rmsnorm_quant; no
// residual_out). A stride of -1 means contiguous rows: hidden elements, or for fp4 q hidden / 2 bytes.
struct QuantArgs {
    const void* x = nullptr;
    const void* residual = nullptr;
    const void* weight = nullptr;
    void* q = nullptr;
    void* residual_out = nullptr;
    void* y = nullptr;  // optional: y in x's dtype
    int64_t rows = 0;
    int64_t hidden = 0;
    int64_t stride_x = -1;
    int64_t stride_residual = -1;
    int64_t stride_q = -1;
    int64_t stride_residual_out = -1;
    int64_t stride_y = -1;
    Dtype x_dtype = Dtype::bfloat16;
    float eps = 1e-6f;
    float weight_offset = 0.0f;
    addrmsnorm_quant quant{};
    uint32_t flags = 0;
};

inline Status rmsnorm_quant(const QuantArgs& a, addrmsnorm_stream stream = nullptr);

// The fused forward writing q = quant(y) (and y if asked), or the plain norm's where residual is nullptr.
inline Status fused_add_rmsnorm_quant(const QuantArgs& a, addrmsnorm_stream stream = nullptr) {
    if (a.residual == nullptr) return rmsnorm_quant(a, stream);
    const int64_t q_row = a.quant.dtype == ADDRMSNORM_QUANT_FLOAT4_E2M1 ? a.hidden / 2 : a.hidden;
    return detail::to_status(addrmsnorm_fused_add_rmsnorm_quant(
        a.x, a.residual, a.weight, a.q, a.residual_out, a.y, a.rows, a.hidden,
        detail::stride_or_hidden(a.stride_x, a.hidden), detail::stride_or_hidden(a.stride_residual, a.hidden),
        detail::stride_or_hidden(a.stride_q, q_row), detail::stride_or_hidden(a.stride_residual_out, a.hidden),
        detail::stride_or_hidden(a.stride_y, a.hidden), static_cast<addrmsnorm_dtype>(a.x_dtype), a.eps,
        a.weight_offset, &a.quant, a.flags, stream));
}

inline Status rmsnorm_quant(const QuantArgs& a, addrmsnorm_stream stream) {
    const int64_t q_row = a.quant.dtype == ADDRMSNORM_QUANT_FLOAT4_E2M1 ? a.hidden / 2 : a.hidden;
    return detail::to_status(addrmsnorm_rmsnorm_quant(
        a.x, a.weight, a.q, a.y, a.rows, a.hidden, detail::stride_or_hidden(a.stride_x, a.hidden),
        detail::stride_or_hidden(a.stride_q, q_row), detail::stride_or_hidden(a.stride_y, a.hidden),
        static_cast<addrmsnorm_dtype>(a.x_dtype), a.eps, a.weight_offset, &a.quant, a.flags, stream));
}

inline Status preload() { return detail::to_status(addrmsnorm_preload()); }

// Make CUDA device `device`'s primary context (the CUDA runtime's) current on this thread. Without a
// driver or a GPU it says so, as every launching call does.
inline Status use_primary_context(int device = 0) { return detail::to_status(addrmsnorm_use_primary_context(device)); }

}  // namespace addrmsnorm

#endif  // ADDRMSNORM_ADDRMSNORM_HPP
