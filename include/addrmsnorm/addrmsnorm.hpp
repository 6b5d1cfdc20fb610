// addrmsnorm: a thin C++ layer over the C ABI in addrmsnorm.h (same math, same rules).
//
//     h = float32(x) + float32(residual);  residual_out = h;  out = h * rstd * (weight + offset)
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

inline Status preload() { return detail::to_status(addrmsnorm_preload()); }

}  // namespace addrmsnorm

#endif  // ADDRMSNORM_ADDRMSNORM_HPP
