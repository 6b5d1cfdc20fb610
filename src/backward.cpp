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

// The backward's tensors as the kernel takes them (validated, rows > 0): absent ones are stand-ins the kernel
// does not touch (as the JIT launcher passes them), and one row has no stride. The plain norm's dx is dresidual
// (x_dtype == residual_dtype, dx NULL); the weightless norm reads no weight (h stands in).
struct BackwardViews {
    const void *weight, *dro, *dx;
    int64_t stride_dy, stride_dro, stride_h, stride_dres, stride_dx;
};
BackwardViews backward_views(const BackwardCall& c) {
    const bool one = c.rows == 1, has_dro = c.dresidual_out != nullptr, separate = c.x_dtype != c.residual_dtype;
    BackwardViews v;
    v.weight = c.weight == nullptr ? c.h : c.weight;
    v.dro = has_dro ? c.dresidual_out : c.h;
    v.dx = separate ? c.dx : c.dresidual;
    v.stride_dy = one ? 0 : c.stride_dy;
    v.stride_h = one ? 0 : c.stride_h;
    v.stride_dres = one ? 0 : c.stride_dresidual;
    v.stride_dro = has_dro ? (one ? 0 : c.stride_dresidual_out) : v.stride_h;
    v.stride_dx = separate ? (one ? 0 : c.stride_dx) : v.stride_dres;
    return v;
}

// An angle tensor's row stride as the kernel reads it: one token's row has none.
int64_t angle_stride(const BackwardCall& c, int64_t stride) { return c.rows > c.rope_groups ? stride : 0; }

// The backward's config and kernel for those views.
struct BackwardKernel {
    int config, variant;
};
BackwardKernel backward_kernel(const BackwardCall& c, const BackwardViews& v) {
    const int xs = dtype_size(c.x_dtype), rs = dtype_size(c.residual_dtype);
    const int config = c.rope != nullptr ? select_rope_backward_config(c.hidden)
                                         : select_backward_config(c.hidden, xs, rs);
    // configs.backward_align, generated (as on the JIT path).
    // With the rotation, its angles too: cos's and sin's pointers, their row strides and rotary_dim / 2; and the
    // vector kernels' calls alone (configs.rope_on_vector) (launcher.py's backward_align call has the same
    // operands).
    const addrmsnorm_rope* rope = c.rope;
    const bool pointers_aligned = aligned16(c.dy) && aligned16(v.dro) && aligned16(c.h) && aligned16(v.weight) &&
                                  aligned16(c.dresidual) && aligned16(v.dx) &&
                                  (rope == nullptr || (aligned16(rope->cos) && aligned16(rope->sin) &&
                                                       rope_on_vector(rope->style, c.rotary_dim, c.hidden)));
    const int64_t strides = v.stride_dy | v.stride_dro | v.stride_h | v.stride_dres | v.stride_dx |
                            (rope != nullptr ? angle_stride(c, rope->stride_cos) | angle_stride(c, rope->stride_sin) |
                                                   c.rotary_dim / 2
                                             : 0);
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
    // No config (the rotation's head_dim past kQkMaxHeadDim): 0 bytes, and the call itself refuses it by name
    // (validate_rope), as it validates before it reads the workspace.
    *bytes = a.rows == 0 || config < 0 ? 0 : backward_workspace_bytes(a.rows, a.hidden, config, sms);
    return ADDRMSNORM_SUCCESS;
}

extern "C" ADDRMSNORM_API addrmsnorm_status addrmsnorm_norm_backward_check(const addrmsnorm_norm_backward_args* args) {
    BackwardCall c;
    const addrmsnorm_status st = validate_norm_backward(args, &c);
    if (st != ADDRMSNORM_SUCCESS || c.rows == 0) return st;
    return built_kernel(backward_kernel(c, backward_views(c)).variant, "backward kernel");
}

extern "C" ADDRMSNORM_API addrmsnorm_status addrmsnorm_norm_backward(const addrmsnorm_norm_backward_args* args,
                                                                    addrmsnorm_stream stream) {
    BackwardCall c;
    addrmsnorm_status st = validate_norm_backward(args, &c);
    if (st != ADDRMSNORM_SUCCESS) return st;
    const bool weightless = c.weight == nullptr;
    const float* rstd = c.rstd;
    void *dweight = const_cast<void*>(c.dweight), *workspace = const_cast<void*>(c.workspace);
    const uint64_t workspace_size = c.workspace_bytes;
    const int64_t rows = c.rows, hidden = c.hidden;
    const float weight_offset = c.weight_offset;
    const addrmsnorm_rope* rope = c.rope;  // the rotation's backward: rstd NULL, computed from h and eps
    if (rows == 0 && dweight == nullptr) return ADDRMSNORM_SUCCESS;
    const BackwardViews v = backward_views(c);
    const BackwardKernel kernel = rows > 0 ? backward_kernel(c, v) : BackwardKernel{0, 0};
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
        LoadedKernel k;
        st = get_built_kernel(*d, kernel.variant, "backward kernel", &k);
        if (st != ADDRMSNORM_SUCCESS) return st;
        BackwardParams p;
        p.dy_ptr = devptr(c.dy);
        p.dres_out_ptr = devptr(v.dro);
        p.h_ptr = devptr(c.h);
        p.rstd_ptr = devptr(rope != nullptr ? workspace : rstd);  // with rope: not read
        p.weight_ptr = devptr(v.weight);
        p.dres_ptr = devptr(c.dresidual);
        p.dx_ptr = devptr(v.dx);
        p.partial_ptr = devptr(workspace);
        // The looped path's row means follow the dweight partials in the workspace.
        p.mean_ptr = devptr(workspace) +
                     (kBackwardRowMeans[config] ? 4ull * static_cast<uint64_t>(programs) * hidden : 0);
        p.n_rows = static_cast<int32_t>(rows);
        p.H = static_cast<int32_t>(hidden);
        p.stride_dy_row = v.stride_dy;
        p.stride_dres_out_row = v.stride_dro;
        p.stride_h_row = v.stride_h;
        p.stride_dres_row = v.stride_dres;
        p.stride_dx_row = v.stride_dx;
        p.weight_offset = weight_offset;
        p.has_dres_out = c.dresidual_out != nullptr ? 1 : 0;
        p.weight_dtype = weightless ? kWeightlessDtype : static_cast<int32_t>(c.weight_dtype);
        // The rotation: fp32 cos and sin by column (without it, the workspace stands in, never read).
        p.cos_ptr = devptr(rope != nullptr ? rope->cos : workspace);
        p.sin_ptr = devptr(rope != nullptr ? rope->sin : workspace);
        p.stride_cos = rope != nullptr ? angle_stride(c, rope->stride_cos) : 0;
        p.stride_sin = rope != nullptr ? angle_stride(c, rope->stride_sin) : 0;
        p.rope_half = static_cast<int32_t>(c.rotary_dim / 2);
        p.rope_style = rope != nullptr ? rope->style : 0;
        p.group_rows = static_cast<int32_t>(rope != nullptr ? c.rope_groups : 1);
        p.eps = c.eps;
        st = launch_with(*d, k, static_cast<unsigned>(programs), p, stream, false);
        if (st != ADDRMSNORM_SUCCESS) return st;
    }
    if (dweight != nullptr) {  // column sums of the partials (zeros when rows == 0)
        const int variant = dweight_variant_index(c.weight_dtype);
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
