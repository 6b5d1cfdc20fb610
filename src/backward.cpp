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

// The backward's config and kernel (validated, rows > 0), as the launch passes its tensors: absent ones are
// stand-ins the kernel does not touch, one row has no stride.
struct BackwardKernel {
    int config, variant;
};
BackwardKernel backward_kernel(const BackwardCall& c) {
    const int xs = dtype_size(c.x_dtype), rs = dtype_size(c.residual_dtype);
    const int config = c.rope != nullptr ? select_rope_backward_config(c.hidden)
                                         : select_backward_config(c.hidden, xs, rs);
    const bool one = c.rows == 1, has_dro = c.dresidual_out != nullptr, separate = c.x_dtype != c.residual_dtype;
    const void* weight = c.weight == nullptr ? c.h : c.weight;
    const void* dro = has_dro ? c.dresidual_out : c.h;
    const void* dxp = separate ? c.dx : c.dresidual;
    const int64_t strides = one ? 0
                                : c.stride_dy | (has_dro ? c.stride_dresidual_out : c.stride_h) | c.stride_h |
                                      c.stride_dresidual | (separate ? c.stride_dx : c.stride_dresidual);
    // configs.backward_align, generated (as on the JIT path).
    const bool pointers_aligned = aligned16(c.dy) && aligned16(dro) && aligned16(c.h) && aligned16(weight) &&
                                  aligned16(c.dresidual) && aligned16(dxp);
    const bool aligned = backward_align_class(pointers_aligned, c.hidden | strides, xs, rs) == 1;
    return {config, c.rope != nullptr ? rope_backward_variant_index(config, c.x_dtype, aligned)
                                      : backward_variant_index(config, c.x_dtype, c.residual_dtype, aligned)};
}

}  // namespace

extern "C" ADDRMSNORM_API addrmsnorm_status addrmsnorm_norm_backward_workspace_size(
    const addrmsnorm_norm_backward_args* args, uint64_t* bytes) {
    if (bytes == nullptr) return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "bytes is NULL");
    addrmsnorm_norm_backward_args a;
    addrmsnorm_status st = read_norm_backward(args, &a);
    if (st != ADDRMSNORM_SUCCESS) return st;
    st = check_backward_shape(a.x_dtype, a.residual_dtype, a.weight_dtype, a.rows, a.hidden);
    if (st != ADDRMSNORM_SUCCESS) return st;
    const int xs = dtype_size(a.x_dtype), rs = dtype_size(a.residual_dtype);
    const Driver* d = driver(&st);
    if (d == nullptr) return st;
    int sms = 0;
    st = current_sm_count(*d, &sms);
    if (st != ADDRMSNORM_SUCCESS) return st;
    // rope is read by struct_size: a caller built before it has none.
    const int config = a.rope != nullptr ? select_rope_backward_config(a.hidden) : select_backward_config(a.hidden, xs, rs);
    *bytes = a.rows == 0 ? 0 : backward_workspace_bytes(a.rows, a.hidden, config, sms);
    return ADDRMSNORM_SUCCESS;
}

extern "C" ADDRMSNORM_API addrmsnorm_status addrmsnorm_norm_backward_check(const addrmsnorm_norm_backward_args* args) {
    BackwardCall c;
    const addrmsnorm_status st = validate_norm_backward(args, &c);
    if (st != ADDRMSNORM_SUCCESS || c.rows == 0) return st;
    return built_kernel(backward_kernel(c).variant, "backward kernel");
}

extern "C" ADDRMSNORM_API addrmsnorm_status addrmsnorm_norm_backward(const addrmsnorm_norm_backward_args* args,
                                                                    addrmsnorm_stream stream) {
    BackwardCall c;
    addrmsnorm_status st = validate_norm_backward(args, &c);
    if (st != ADDRMSNORM_SUCCESS) return st;
    // The internal form: the plain norm's dx is dresidual (x_dtype == residual_dtype), dx NULL.
    // The weightless norm: h in the weight's place, never read (has_weight 0).
    const bool weightless = c.weight == nullptr;
    const void *dy = c.dy, *dresidual_out = c.dresidual_out, *h = c.h, *weight = weightless ? c.h : c.weight;
    const float* rstd = c.rstd;
    void *dresidual = const_cast<void*>(c.dresidual), *dx = const_cast<void*>(c.dx),
         *dweight = const_cast<void*>(c.dweight), *workspace = const_cast<void*>(c.workspace);
    const uint64_t workspace_size = c.workspace_bytes;
    const int64_t rows = c.rows, hidden = c.hidden;
    int64_t stride_dy = c.stride_dy, stride_dresidual_out = c.stride_dresidual_out, stride_h = c.stride_h,
            stride_dresidual = c.stride_dresidual, stride_dx = c.stride_dx;
    const addrmsnorm_dtype x_dtype = c.x_dtype, residual_dtype = c.residual_dtype, weight_dtype = c.weight_dtype;
    const float weight_offset = c.weight_offset;
    const addrmsnorm_rope* rope = c.rope;  // the rotation's backward: rstd NULL, computed from h and eps
    if (rows == 0 && dweight == nullptr) return ADDRMSNORM_SUCCESS;
    const BackwardKernel kernel = rows > 0 ? backward_kernel(c) : BackwardKernel{0, 0};
    if (rows > 0 && (st = built_kernel(kernel.variant, "backward kernel")) != ADDRMSNORM_SUCCESS) return st;

    const Driver* d = driver(&st);
    if (d == nullptr) return st;
    int sms = 0;
    st = current_sm_count(*d, &sms);
    if (st != ADDRMSNORM_SUCCESS) return st;
    const int config = kernel.config;
    int32_t programs = 0;
    if (rows > 0) {
        const uint64_t need = backward_workspace_bytes(rows, hidden, config, sms);
        if (workspace_size < need)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                        "workspace has %llu bytes; this call needs %llu "
                        "(addrmsnorm_norm_backward_workspace_size)",
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
        LoadedKernel k;
        st = get_built_kernel(*d, kernel.variant, "backward kernel", &k);
        if (st != ADDRMSNORM_SUCCESS) return st;
        BackwardParams p;
        p.dy_ptr = devptr(dy);
        p.dres_out_ptr = devptr(dro);
        p.h_ptr = devptr(h);
        p.rstd_ptr = devptr(rope != nullptr ? workspace : rstd);  // with rope: not read
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
        p.weight_dtype = weightless ? kWeightlessDtype : static_cast<int32_t>(weight_dtype);
        // The rotation: fp32 cos and sin by column (without it, the workspace stands in, never read).
        p.cos_ptr = devptr(rope != nullptr ? rope->cos : workspace);
        p.sin_ptr = devptr(rope != nullptr ? rope->sin : workspace);
        p.stride_cos = rope != nullptr && rows > c.rope_groups ? rope->stride_cos : 0;
        p.stride_sin = rope != nullptr && rows > c.rope_groups ? rope->stride_sin : 0;
        p.rope_half = static_cast<int32_t>(c.rotary_dim / 2);
        p.rope_style = rope != nullptr ? rope->style : 0;
        p.group_rows = static_cast<int32_t>(rope != nullptr ? c.rope_groups : 1);
        p.eps = c.eps;
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
