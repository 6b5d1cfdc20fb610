// The C ABI's backward entry points: validate, size the persistent grid, launch the backward and
// the deterministic dweight reduction.
#include <cuda.h>

#include <cstdint>

#include "addrmsnorm/addrmsnorm.h"
#include "driver.h"
#include "errors.h"
#include "kernel_params.h"
#include "kernel_table.h"
#include "modules.h"
#include "validate.h"

using namespace addrmsnorm::detail;

namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % kAlignmentBytes == 0; }

}  // namespace

extern "C" ADDRMSNORM_API addrmsnorm_status addrmsnorm_fused_add_rmsnorm_backward_workspace_size(
    int64_t rows, int64_t hidden, addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype, uint64_t* bytes) {
    if (bytes == nullptr) return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "bytes is NULL");
    const int xs = dtype_size(x_dtype), rs = dtype_size(residual_dtype);
    if (xs == 0 || rs == 0) return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "x_dtype and residual_dtype must be addrmsnorm_dtype values");
    if (rows < 0 || rows > INT32_MAX || hidden <= 0 || hidden > INT32_MAX)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rows must be in [0, 2^31) and hidden in [1, 2^31)");
    addrmsnorm_status st;
    const Driver* d = driver(&st);
    if (d == nullptr) return st;
    int sms = 0;
    st = current_sm_count(*d, &sms);
    if (st != ADDRMSNORM_SUCCESS) return st;
    const int config = select_backward_config(hidden, xs, rs);
    *bytes = rows == 0 ? 0 : backward_workspace_bytes(rows, hidden, config, sms);
    return ADDRMSNORM_SUCCESS;
}

extern "C" ADDRMSNORM_API addrmsnorm_status addrmsnorm_fused_add_rmsnorm_backward_check(
    const void* dy, const void* dresidual_out, const void* h, const float* rstd, const void* weight,
    const void* dresidual, const void* dx, const void* dweight, const void* workspace, uint64_t workspace_bytes,
    int64_t rows, int64_t hidden, int64_t stride_dy, int64_t stride_dresidual_out, int64_t stride_h,
    int64_t stride_dresidual, int64_t stride_dx, addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype,
    addrmsnorm_dtype weight_dtype, float weight_offset, uint32_t flags) {
    return validate_backward(BackwardCall{dy, dresidual_out, h, rstd, weight, dresidual, dx, dweight, workspace,
                                          workspace_bytes, rows, hidden, stride_dy, stride_dresidual_out, stride_h,
                                          stride_dresidual, stride_dx, x_dtype, residual_dtype, weight_dtype,
                                          weight_offset, flags});
}

extern "C" ADDRMSNORM_API addrmsnorm_status addrmsnorm_fused_add_rmsnorm_backward(
    const void* dy, const void* dresidual_out, const void* h, const float* rstd, const void* weight,
    void* dresidual, void* dx, void* dweight, void* workspace, uint64_t workspace_size,
    int64_t rows, int64_t hidden, int64_t stride_dy, int64_t stride_dresidual_out, int64_t stride_h,
    int64_t stride_dresidual, int64_t stride_dx, addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype,
    addrmsnorm_dtype weight_dtype, float weight_offset, uint32_t flags, addrmsnorm_stream stream) {
    addrmsnorm_status st = validate_backward(BackwardCall{
        dy, dresidual_out, h, rstd, weight, dresidual, dx, dweight, workspace, workspace_size, rows, hidden,
        stride_dy, stride_dresidual_out, stride_h, stride_dresidual, stride_dx, x_dtype, residual_dtype,
        weight_dtype, weight_offset, flags});
    if (st != ADDRMSNORM_SUCCESS) return st;
    if (rows == 0 && dweight == nullptr) return ADDRMSNORM_SUCCESS;

    const Driver* d = driver(&st);
    if (d == nullptr) return st;
    int sms = 0;
    st = current_sm_count(*d, &sms);
    if (st != ADDRMSNORM_SUCCESS) return st;
    const int xs = dtype_size(x_dtype), rs = dtype_size(residual_dtype);
    const int config = select_backward_config(hidden, xs, rs);
    int32_t programs = 0;
    if (rows > 0) {
        const uint64_t need = backward_workspace_bytes(rows, hidden, config, sms);
        if (workspace_size < need)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                        "workspace has %llu bytes; this call needs %llu "
                        "(addrmsnorm_fused_add_rmsnorm_backward_workspace_size)",
                        (unsigned long long)workspace_size, (unsigned long long)need);
        programs = static_cast<int32_t>(backward_programs(rows, config, sms));
        if (rows == 1) stride_dy = stride_dresidual_out = stride_h = stride_dresidual = stride_dx = 0;
        const bool has_dro = dresidual_out != nullptr;
        const bool separate = x_dtype != residual_dtype;
        // Absent tensors: pointers the kernel does not touch (as the JIT launcher passes them).
        const void* dro = has_dro ? dresidual_out : h;
        void* dxp = separate ? dx : dresidual;
        if (!has_dro) stride_dresidual_out = stride_h;
        if (!separate) stride_dx = stride_dresidual;
        // configs.backward_align, generated (as on the JIT path).
        const bool pointers_aligned = aligned16(dy) && aligned16(dro) && aligned16(h) && aligned16(weight) &&
                                      aligned16(dresidual) && aligned16(dxp);
        const bool aligned =
            backward_align_class(pointers_aligned,
                                 hidden | stride_dy | stride_dresidual_out | stride_h | stride_dresidual | stride_dx,
                                 xs, rs) == 1;
        const int variant = backward_variant_index(config, x_dtype, residual_dtype, aligned);
        LoadedKernel k;
        st = get_built_kernel(*d, variant, "backward kernel", &k);
        if (st != ADDRMSNORM_SUCCESS) return st;
        BackwardParams p;
        p.dy_ptr = devptr(dy);
        p.dres_out_ptr = devptr(dro);
        p.h_ptr = devptr(h);
        p.rstd_ptr = devptr(rstd);
        p.weight_ptr = devptr(weight);
        p.dres_ptr = devptr(dresidual);
        p.dx_ptr = devptr(dxp);
        p.partial_ptr = devptr(workspace);
        // The looped path's row means follow the dweight partials in the workspace.
        p.mean_ptr = devptr(workspace) +
                     (kBackwardRowMeans[config] ? 4ull * static_cast<uint64_t>(programs) * hidden : 0);
        p.n_rows = static_cast<int32_t>(rows);
        p.H = static_cast<int32_t>(hidden);
        p.stride_dy_row = stride_dy;
        p.stride_dres_out_row = stride_dresidual_out;
        p.stride_h_row = stride_h;
        p.stride_dres_row = stride_dresidual;
        p.stride_dx_row = stride_dx;
        p.weight_offset = weight_offset;
        p.has_dres_out = has_dro ? 1 : 0;
        p.weight_dtype = static_cast<int32_t>(weight_dtype);
        st = launch_with(*d, k, static_cast<unsigned>(programs), p, stream, false);
        if (st != ADDRMSNORM_SUCCESS) return st;
    }
    if (dweight != nullptr) {  // column sums of the partials (zeros when rows == 0)
        const int variant = kDweightIndex[weight_dtype];
        LoadedKernel k;
        st = get_kernel(*d, variant, &k);
        if (st != ADDRMSNORM_SUCCESS) return st;
        DweightParams p;
        p.partial_ptr = devptr(workspace);
        p.dweight_ptr = devptr(dweight);
        p.n_partials = programs;
        p.H = static_cast<int32_t>(hidden);
        st = launch_with(*d, k, static_cast<unsigned>((hidden + kDweightBlockC - 1) / kDweightBlockC), p, stream,
                         false);
        if (st != ADDRMSNORM_SUCCESS) return st;
    }
    return ADDRMSNORM_SUCCESS;
}

// ----- the plain norm's backward: the fused backward with h = x and no residual gradient ----------

extern "C" ADDRMSNORM_API addrmsnorm_status addrmsnorm_rmsnorm_backward_check(
    const void* dy, const void* x, const float* rstd, const void* weight, const void* dx, const void* dweight,
    const void* workspace, uint64_t workspace_bytes, int64_t rows, int64_t hidden, int64_t stride_dy,
    int64_t stride_x, int64_t stride_dx, addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype, float weight_offset,
    uint32_t flags) {
    return validate_backward(BackwardCall{dy, nullptr, x, rstd, weight, dx, nullptr, dweight, workspace,
                                          workspace_bytes, rows, hidden, stride_dy, 0, stride_x, stride_dx, 0, x_dtype,
                                          x_dtype, weight_dtype, weight_offset, flags, true});
}

extern "C" ADDRMSNORM_API addrmsnorm_status addrmsnorm_rmsnorm_backward(
    const void* dy, const void* x, const float* rstd, const void* weight, void* dx, void* dweight, void* workspace,
    uint64_t workspace_bytes, int64_t rows, int64_t hidden, int64_t stride_dy, int64_t stride_x, int64_t stride_dx,
    addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype, float weight_offset, uint32_t flags,
    addrmsnorm_stream stream) {
    const addrmsnorm_status st = addrmsnorm_rmsnorm_backward_check(dy, x, rstd, weight, dx, dweight, workspace,
                                                                  workspace_bytes, rows, hidden, stride_dy, stride_x,
                                                                  stride_dx, x_dtype, weight_dtype, weight_offset,
                                                                  flags);
    if (st != ADDRMSNORM_SUCCESS) return st;
    // dresidual is dx (x_dtype == residual_dtype); the validation above named them as this function does.
    return addrmsnorm_fused_add_rmsnorm_backward(dy, nullptr, x, rstd, weight, dx, nullptr, dweight, workspace,
                                                 workspace_bytes, rows, hidden, stride_dy, 0, stride_x, stride_dx, 0,
                                                 x_dtype, x_dtype, weight_dtype, weight_offset, flags, stream);
}
