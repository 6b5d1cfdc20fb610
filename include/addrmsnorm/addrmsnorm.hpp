// addrmsnorm: a thin C++ layer over the C ABI in addrmsnorm.h (same math, same rules): each call
// here fills one addrmsnorm_norm_args and calls addrmsnorm_norm.
//
//     h = float32(x) * x_scale + float32(residual);  residual_out = h;  out = h * rstd * (weight + offset)
//
// A weight of nullptr is the weightless norm (out = h * rstd); x_scale other than 1 the scaled residual add;
// a post_weight the sandwich norm (h = residual + rmsnorm(x; post_weight), Gemma 2/3, GLM-4; rstd then [2, rows]);
// a z in rmsnorm's NormArgs the gated norm (rmsnorm(x) * w * silu(z) over groups of group_size; Qwen3-Next, Mamba2);
// a b the pair (b's rows normalized with b_weight into b_out in the same launch; DeepSeek-V3's latent norms).
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
    addrmsnorm_numerics numerics = ADDRMSNORM_NUMERICS_CONTRACT;
    uint32_t flags = 0;  // ADDRMSNORM_FLAG_PDL
    float x_scale = 1.0f;  // h = residual + x_scale * x (Granite's residual_multiplier)
    const void* post_weight = nullptr;  // the sandwich norm's first weight, of weight_dtype
    float post_weight_offset = 0.0f;    // added to post_weight (Gemma: 1, as weight_offset)
};

namespace detail {
inline Status to_status(addrmsnorm_status s) {
    Status st;
    st.code = s;
    if (s != ADDRMSNORM_SUCCESS) st.message = addrmsnorm_last_error();
    return st;
}
inline int64_t stride_or_hidden(int64_t stride, int64_t hidden) { return stride == -1 ? hidden : stride; }
inline addrmsnorm_dtype c_dtype(Dtype d) { return static_cast<addrmsnorm_dtype>(d); }

inline addrmsnorm_norm_args to_c(const ForwardArgs& a) {
    addrmsnorm_norm_args c = addrmsnorm_norm_args_init();
    c.x = a.x;
    c.residual = a.residual;
    c.weight = a.weight;
    c.out = a.out;
    c.residual_out = a.residual_out;
    c.rstd = a.rstd;
    c.rows = a.rows;
    c.hidden = a.hidden;
    c.stride_x = stride_or_hidden(a.stride_x, a.hidden);
    c.stride_residual = stride_or_hidden(a.stride_residual, a.hidden);
    c.stride_out = stride_or_hidden(a.stride_out, a.hidden);
    c.stride_residual_out = stride_or_hidden(a.stride_residual_out, a.hidden);
    c.x_dtype = c_dtype(a.x_dtype);
    c.residual_dtype = c_dtype(a.residual_dtype);
    c.weight_dtype = c_dtype(a.weight_dtype);
    c.eps = a.eps;
    c.weight_offset = a.weight_offset;
    c.numerics = a.numerics;
    c.flags = a.flags;
    addrmsnorm_norm_args_set_x_scale(&c, a.x_scale);
    c.post_weight = a.post_weight;
    c.post_weight_offset = a.post_weight_offset;
    return c;
}
}  // namespace detail

// Launch on `stream` in the current CUDA context.
inline Status fused_add_rmsnorm(const ForwardArgs& a, addrmsnorm_stream stream = nullptr) {
    const addrmsnorm_norm_args c = detail::to_c(a);
    return detail::to_status(addrmsnorm_norm(&c, stream));
}

// The checks of fused_add_rmsnorm, exactly as it makes them, without the driver or the GPU: it reads
// no memory, so a caller can validate a call before any device memory exists.
inline Status fused_add_rmsnorm_check(const ForwardArgs& a) {
    const addrmsnorm_norm_args c = detail::to_c(a);
    return detail::to_status(addrmsnorm_norm_check(&c));
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
    addrmsnorm_numerics numerics = ADDRMSNORM_NUMERICS_CONTRACT;
    uint32_t flags = 0;  // ADDRMSNORM_FLAG_PDL
    // The gated norm (addrmsnorm.h): z of x_dtype, [rows, heads * hidden] rows of stride_z (-1: contiguous).
    const void* z = nullptr;
    int64_t stride_z = -1;
    int64_t group_size = 0;  // 0: the row
    bool norm_before_gate = true;  // false: rmsnorm(x * silu(z)) * w
    // The pair (addrmsnorm.h): b of x_dtype, [rows, b_hidden] rows of stride_b (-1: b_hidden), into b_out.
    const void* b = nullptr;
    const void* b_weight = nullptr;
    void* b_out = nullptr;
    int64_t b_hidden = 0;
    int64_t stride_b = -1;
    int64_t stride_b_out = -1;
};

inline Status rmsnorm(const NormArgs& a, addrmsnorm_stream stream = nullptr) {
    const int64_t row = a.heads * a.hidden;
    addrmsnorm_norm_args c = addrmsnorm_norm_args_init();
    c.x = a.x;
    c.weight = a.weight;
    c.out = a.out;
    c.rstd = a.rstd;
    c.rows = a.rows;
    c.groups = a.heads;
    c.hidden = a.hidden;
    c.stride_x = a.stride_x == -1 ? row : a.stride_x;
    c.stride_x_group = detail::stride_or_hidden(a.stride_x_head, a.hidden);
    c.stride_out = a.stride_out == -1 ? row : a.stride_out;
    c.stride_out_group = detail::stride_or_hidden(a.stride_out_head, a.hidden);
    c.x_dtype = c.residual_dtype = detail::c_dtype(a.x_dtype);
    c.weight_dtype = detail::c_dtype(a.weight_dtype);
    c.eps = a.eps;
    c.weight_offset = a.weight_offset;
    c.numerics = a.numerics;
    c.flags = a.flags;
    if (a.z != nullptr) {
        c.z = a.z;
        c.stride_z = a.stride_z == -1 ? row : a.stride_z;
        c.group_size = a.group_size;
        c.gate = ADDRMSNORM_GATE_SILU;
        c.gate_first = a.norm_before_gate ? 0 : 1;
    }
    if (a.b != nullptr) {
        c.b = a.b;
        c.b_weight = a.b_weight;
        c.b_out = a.b_out;
        c.b_hidden = a.b_hidden;
        c.stride_b = a.stride_b == -1 ? a.b_hidden : a.stride_b;
        c.stride_b_out = a.stride_b_out == -1 ? a.b_hidden : a.stride_b_out;
    }
    return detail::to_status(addrmsnorm_norm(&c, stream));
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

// Per-head q and k norms of a fused QKV buffer, in place, in one launch: q's heads and k's are the groups
// of one call, k's weight (weight2) from num_q_heads on. stride_qkv -1: rows of (num_q_heads + 2 *
// num_kv_heads) * head_dim elements (q, k, v). flags: ADDRMSNORM_FLAG_PDL.
inline Status qk_rmsnorm_inplace(void* qkv, const void* q_weight, const void* k_weight, int64_t tokens,
                                 int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, Dtype dtype,
                                 Dtype weight_dtype, float eps = 1e-6f, int64_t stride_qkv = -1,
                                 uint32_t flags = 0, float weight_offset = 0.0f,
                                 addrmsnorm_stream stream = nullptr,
                                 addrmsnorm_numerics numerics = ADDRMSNORM_NUMERICS_CONTRACT,
                                 const addrmsnorm_rope* rope = nullptr) {
    addrmsnorm_norm_args c = addrmsnorm_norm_args_qk(
        qkv, q_weight, k_weight, tokens, num_q_heads, num_kv_heads, head_dim,
        stride_qkv == -1 ? (num_q_heads + 2 * num_kv_heads) * head_dim : stride_qkv);
    c.x_dtype = c.residual_dtype = detail::c_dtype(dtype);
    c.weight_dtype = detail::c_dtype(weight_dtype);
    c.eps = eps;
    c.weight_offset = weight_offset;
    c.numerics = numerics;
    c.flags = flags;
    c.rope = rope;
    return detail::to_status(addrmsnorm_norm(&c, stream));
}

// The rotation of qk_rmsnorm_inplace's heads (its `rope` argument), from vLLM's positions and cos_sin_cache
// ([max_position, rotary_dim]: cosines, then sines; stride_cache -1: rows of rotary_dim), or from HF's cos and
// sin ([tokens, rotary_dim] each, by column; strides -1: rows of rotary_dim, 0: one row for every token).
// rotary_dim: the rotated columns of a head (even, at most head_dim).
inline addrmsnorm_rope rope_cache(const void* positions, addrmsnorm_index_dtype positions_dtype,
                                  const void* cos_sin_cache, int64_t max_position, Dtype angle_dtype,
                                  int32_t rotary_dim, addrmsnorm_rope_style style = ADDRMSNORM_ROPE_NEOX,
                                  int64_t stride_cache = -1) {
    addrmsnorm_rope r{};
    r.style = style;
    r.rotary_dim = rotary_dim;
    r.angle_dtype = detail::c_dtype(angle_dtype);
    r.positions = positions;
    r.positions_dtype = positions_dtype;
    r.cos_sin_cache = cos_sin_cache;
    r.max_position = max_position;
    r.stride_cache = stride_cache == -1 ? rotary_dim : stride_cache;
    return r;
}

inline addrmsnorm_rope rope_cos_sin(const void* cos, const void* sin, Dtype angle_dtype, int32_t rotary_dim,
                                    addrmsnorm_rope_style style = ADDRMSNORM_ROPE_NEOX, int64_t stride_cos = -1,
                                    int64_t stride_sin = -1) {
    addrmsnorm_rope r{};
    r.style = style;
    r.rotary_dim = rotary_dim;
    r.angle_dtype = detail::c_dtype(angle_dtype);
    r.cos = cos;
    r.sin = sin;
    r.stride_cos = stride_cos == -1 ? rotary_dim : stride_cos;
    r.stride_sin = stride_sin == -1 ? rotary_dim : stride_sin;
    return r;
}

// ----- quantized outputs (addrmsnorm_norm_args.quant) ------------------------------------------------
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
    float x_scale = 1.0f;  // h = residual + x_scale * x
    // The sandwich norm's quantized outputs (addrmsnorm.h): its first weight, of x_dtype, and its offset.
    const void* post_weight = nullptr;
    float post_weight_offset = 0.0f;
    // The gated norm's quantized outputs (residual nullptr): z of x_dtype, rows of stride_z (-1: hidden).
    const void* z = nullptr;
    int64_t stride_z = -1;
    int64_t gate_group_size = 0;  // 0: the row
    bool norm_before_gate = true;
};

// The fused forward writing q = quant(y) (and y if asked), or the plain norm's where residual is nullptr.
inline Status fused_add_rmsnorm_quant(const QuantArgs& a, addrmsnorm_stream stream = nullptr) {
    const int64_t q_row = a.quant.dtype == ADDRMSNORM_QUANT_FLOAT4_E2M1 ? a.hidden / 2 : a.hidden;
    addrmsnorm_norm_args c = addrmsnorm_norm_args_init();
    c.x = a.x;
    c.residual = a.residual;
    c.weight = a.weight;
    c.out = a.q;
    c.residual_out = a.residual != nullptr ? a.residual_out : nullptr;  // the plain norm writes no residual
    c.y = a.y;
    c.rows = a.rows;
    c.hidden = a.hidden;
    c.stride_x = detail::stride_or_hidden(a.stride_x, a.hidden);
    c.stride_residual = detail::stride_or_hidden(a.stride_residual, a.hidden);
    c.stride_out = detail::stride_or_hidden(a.stride_q, q_row);
    c.stride_residual_out = detail::stride_or_hidden(a.stride_residual_out, a.hidden);
    c.stride_y = detail::stride_or_hidden(a.stride_y, a.hidden);
    c.x_dtype = c.residual_dtype = c.weight_dtype = detail::c_dtype(a.x_dtype);
    c.eps = a.eps;
    c.weight_offset = a.weight_offset;
    c.quant = &a.quant;
    c.flags = a.flags;
    addrmsnorm_norm_args_set_x_scale(&c, a.x_scale);
    c.post_weight = a.post_weight;
    c.post_weight_offset = a.post_weight_offset;
    if (a.z != nullptr) {
        c.z = a.z;
        c.stride_z = detail::stride_or_hidden(a.stride_z, a.hidden);
        c.group_size = a.gate_group_size;
        c.gate = ADDRMSNORM_GATE_SILU;
        c.gate_first = a.norm_before_gate ? 0 : 1;
    }
    return detail::to_status(addrmsnorm_norm(&c, stream));
}

// The plain norm's quantized outputs (residual and residual_out unused).
inline Status rmsnorm_quant(const QuantArgs& a, addrmsnorm_stream stream = nullptr) {
    QuantArgs plain = a;
    plain.residual = nullptr;
    return fused_add_rmsnorm_quant(plain, stream);
}

inline Status preload() { return detail::to_status(addrmsnorm_preload()); }

// Make CUDA device `device`'s primary context (the CUDA runtime's) current on this thread. Without a
// driver or a GPU it says so, as every launching call does.
inline Status use_primary_context(int device = 0) { return detail::to_status(addrmsnorm_use_primary_context(device)); }

}  // namespace addrmsnorm

#endif  // ADDRMSNORM_ADDRMSNORM_HPP
