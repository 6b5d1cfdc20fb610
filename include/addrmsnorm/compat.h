/*
 * The entry points of addrmsnorm 0.1, kept as static inline wrappers over addrmsnorm_norm and
 * addrmsnorm_norm_backward (addrmsnorm.h includes this header). Code written against 0.1 compiles
 * unchanged and runs the one call; the library exports none of these names. New code fills an
 * addrmsnorm_norm_args instead: every variant is a field of it. docs/guide.md has the table from
 * each of these to its fields.
 *
 * Their flags: ADDRMSNORM_FLAG_HF_NUMERICS is numerics ADDRMSNORM_NUMERICS_HF, and with
 * ADDRMSNORM_FLAG_HF_ROUND_ONCE ADDRMSNORM_NUMERICS_HF_ROUND_ONCE; ADDRMSNORM_FLAG_PDL passes
 * through; any other bit (ROUND_ONCE alone included) reaches the call's flags, which refuse it.
 */
#ifndef ADDRMSNORM_COMPAT_H
#define ADDRMSNORM_COMPAT_H

#include "addrmsnorm/addrmsnorm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ADDRMSNORM_FLAG_HF_NUMERICS 0x1u
#define ADDRMSNORM_FLAG_HF_ROUND_ONCE 0x4u

/* The numerics of 0.1's flags; the rest of the flags in *rest. */
static inline addrmsnorm_numerics addrmsnorm_compat_numerics(uint32_t flags, uint32_t *rest) {
    if (!(flags & ADDRMSNORM_FLAG_HF_NUMERICS)) {
        *rest = flags;
        return ADDRMSNORM_NUMERICS_CONTRACT;
    }
    *rest = flags & ~(ADDRMSNORM_FLAG_HF_NUMERICS | ADDRMSNORM_FLAG_HF_ROUND_ONCE);
    return (flags & ADDRMSNORM_FLAG_HF_ROUND_ONCE) ? ADDRMSNORM_NUMERICS_HF_ROUND_ONCE : ADDRMSNORM_NUMERICS_HF;
}

static inline addrmsnorm_norm_args addrmsnorm_compat_fused(
    const void *x, const void *residual, const void *weight, const void *out, const void *residual_out,
    const float *rstd, int64_t rows, int64_t hidden, int64_t stride_x, int64_t stride_residual, int64_t stride_out,
    int64_t stride_residual_out, addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype,
    addrmsnorm_dtype weight_dtype, float eps, float weight_offset, uint32_t flags) {
    addrmsnorm_norm_args a = addrmsnorm_norm_args_init();
    a.x = x;
    a.residual = residual;
    a.weight = weight;
    a.out = (void *)out;
    a.residual_out = (void *)residual_out;
    a.rstd = (float *)rstd;
    a.rows = rows;
    a.hidden = hidden;
    a.stride_x = stride_x;
    a.stride_residual = stride_residual;
    a.stride_out = stride_out;
    a.stride_residual_out = stride_residual_out;
    a.x_dtype = x_dtype;
    a.residual_dtype = residual_dtype;
    a.weight_dtype = weight_dtype;
    a.eps = eps;
    a.weight_offset = weight_offset;
    a.numerics = addrmsnorm_compat_numerics(flags, &a.flags);
    return a;
}

static inline addrmsnorm_status addrmsnorm_fused_add_rmsnorm(
    const void *x, const void *residual, const void *weight, void *out, void *residual_out, float *rstd,
    int64_t rows, int64_t hidden, int64_t stride_x, int64_t stride_residual, int64_t stride_out,
    int64_t stride_residual_out, addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype,
    addrmsnorm_dtype weight_dtype, float eps, float weight_offset, uint32_t flags, addrmsnorm_stream stream) {
    const addrmsnorm_norm_args a = addrmsnorm_compat_fused(
        x, residual, weight, out, residual_out, rstd, rows, hidden, stride_x, stride_residual, stride_out,
        stride_residual_out, x_dtype, residual_dtype, weight_dtype, eps, weight_offset, flags);
    return addrmsnorm_norm(&a, stream);
}

static inline addrmsnorm_status addrmsnorm_fused_add_rmsnorm_check(
    const void *x, const void *residual, const void *weight, const void *out, const void *residual_out,
    const float *rstd, int64_t rows, int64_t hidden, int64_t stride_x, int64_t stride_residual, int64_t stride_out,
    int64_t stride_residual_out, addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype,
    addrmsnorm_dtype weight_dtype, float eps, float weight_offset, uint32_t flags) {
    const addrmsnorm_norm_args a = addrmsnorm_compat_fused(
        x, residual, weight, out, residual_out, rstd, rows, hidden, stride_x, stride_residual, stride_out,
        stride_residual_out, x_dtype, residual_dtype, weight_dtype, eps, weight_offset, flags);
    return addrmsnorm_norm_check(&a);
}

/* The quantized forms: residual NULL is the plain norm's (no residual_out). */
static inline addrmsnorm_norm_args addrmsnorm_compat_quant(
    const void *x, const void *residual, const void *weight, const void *q, const void *residual_out,
    const void *y, int64_t rows, int64_t hidden, int64_t stride_x, int64_t stride_residual, int64_t stride_q,
    int64_t stride_residual_out, int64_t stride_y, addrmsnorm_dtype x_dtype, float eps, float weight_offset,
    const addrmsnorm_quant *quant, uint32_t flags) {
    addrmsnorm_norm_args a = addrmsnorm_compat_fused(
        x, residual, weight, q, residual_out, NULL, rows, hidden, stride_x, stride_residual, stride_q,
        stride_residual_out, x_dtype, x_dtype, x_dtype, eps, weight_offset, flags);
    a.quant = quant;
    a.y = (void *)y;
    a.stride_y = stride_y;
    return a;
}

static inline addrmsnorm_status addrmsnorm_fused_add_rmsnorm_quant(
    const void *x, const void *residual, const void *weight, void *q, void *residual_out, void *y, int64_t rows,
    int64_t hidden, int64_t stride_x, int64_t stride_residual, int64_t stride_q, int64_t stride_residual_out,
    int64_t stride_y, addrmsnorm_dtype x_dtype, float eps, float weight_offset, const addrmsnorm_quant *quant,
    uint32_t flags, addrmsnorm_stream stream) {
    const addrmsnorm_norm_args a =
        addrmsnorm_compat_quant(x, residual, weight, q, residual_out, y, rows, hidden, stride_x, stride_residual,
                                stride_q, stride_residual_out, stride_y, x_dtype, eps, weight_offset, quant, flags);
    return addrmsnorm_norm(&a, stream);
}

static inline addrmsnorm_status addrmsnorm_fused_add_rmsnorm_quant_check(
    const void *x, const void *residual, const void *weight, const void *q, const void *residual_out, const void *y,
    int64_t rows, int64_t hidden, int64_t stride_x, int64_t stride_residual, int64_t stride_q,
    int64_t stride_residual_out, int64_t stride_y, addrmsnorm_dtype x_dtype, float eps, float weight_offset,
    const addrmsnorm_quant *quant, uint32_t flags) {
    const addrmsnorm_norm_args a =
        addrmsnorm_compat_quant(x, residual, weight, q, residual_out, y, rows, hidden, stride_x, stride_residual,
                                stride_q, stride_residual_out, stride_y, x_dtype, eps, weight_offset, quant, flags);
    return addrmsnorm_norm_check(&a);
}

static inline addrmsnorm_status addrmsnorm_rmsnorm_quant(
    const void *x, const void *weight, void *q, void *y, int64_t rows, int64_t hidden, int64_t stride_x,
    int64_t stride_q, int64_t stride_y, addrmsnorm_dtype x_dtype, float eps, float weight_offset,
    const addrmsnorm_quant *quant, uint32_t flags, addrmsnorm_stream stream) {
    const addrmsnorm_norm_args a = addrmsnorm_compat_quant(x, NULL, weight, q, NULL, y, rows, hidden, stride_x, 0,
                                                           stride_q, 0, stride_y, x_dtype, eps, weight_offset,
                                                           quant, flags);
    return addrmsnorm_norm(&a, stream);
}

static inline addrmsnorm_status addrmsnorm_rmsnorm_quant_check(
    const void *x, const void *weight, const void *q, const void *y, int64_t rows, int64_t hidden, int64_t stride_x,
    int64_t stride_q, int64_t stride_y, addrmsnorm_dtype x_dtype, float eps, float weight_offset,
    const addrmsnorm_quant *quant, uint32_t flags) {
    const addrmsnorm_norm_args a = addrmsnorm_compat_quant(x, NULL, weight, q, NULL, y, rows, hidden, stride_x, 0,
                                                           stride_q, 0, stride_y, x_dtype, eps, weight_offset,
                                                           quant, flags);
    return addrmsnorm_norm_check(&a);
}

/* The plain norm of x as [rows, heads, hidden]. */
static inline addrmsnorm_norm_args addrmsnorm_compat_plain(
    const void *x, const void *weight, const void *out, const float *rstd, int64_t rows, int64_t heads,
    int64_t hidden, int64_t stride_x, int64_t stride_x_head, int64_t stride_out, int64_t stride_out_head,
    addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype, float eps, float weight_offset, uint32_t flags) {
    addrmsnorm_norm_args a = addrmsnorm_compat_fused(x, NULL, weight, out, NULL, rstd, rows, hidden, stride_x, 0,
                                                     stride_out, 0, x_dtype, x_dtype, weight_dtype, eps,
                                                     weight_offset, flags);
    a.groups = heads;
    a.stride_x_group = stride_x_head;
    a.stride_out_group = stride_out_head;
    return a;
}

static inline addrmsnorm_status addrmsnorm_rmsnorm(
    const void *x, const void *weight, void *out, float *rstd, int64_t rows, int64_t heads, int64_t hidden,
    int64_t stride_x, int64_t stride_x_head, int64_t stride_out, int64_t stride_out_head, addrmsnorm_dtype x_dtype,
    addrmsnorm_dtype weight_dtype, float eps, float weight_offset, uint32_t flags, addrmsnorm_stream stream) {
    const addrmsnorm_norm_args a =
        addrmsnorm_compat_plain(x, weight, out, rstd, rows, heads, hidden, stride_x, stride_x_head, stride_out,
                                stride_out_head, x_dtype, weight_dtype, eps, weight_offset, flags);
    return addrmsnorm_norm(&a, stream);
}

static inline addrmsnorm_status addrmsnorm_rmsnorm_check(
    const void *x, const void *weight, const void *out, const float *rstd, int64_t rows, int64_t heads,
    int64_t hidden, int64_t stride_x, int64_t stride_x_head, int64_t stride_out, int64_t stride_out_head,
    addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype, float eps, float weight_offset, uint32_t flags) {
    const addrmsnorm_norm_args a =
        addrmsnorm_compat_plain(x, weight, out, rstd, rows, heads, hidden, stride_x, stride_x_head, stride_out,
                                stride_out_head, x_dtype, weight_dtype, eps, weight_offset, flags);
    return addrmsnorm_norm_check(&a);
}

/* q's heads, then k's, of a [tokens, width] buffer, in place: groups of head_dim, k's weight from
 * num_q_heads on. */
static inline addrmsnorm_norm_args addrmsnorm_compat_qk(
    const void *qkv, const void *q_weight, const void *k_weight, int64_t tokens, int64_t num_q_heads,
    int64_t num_kv_heads, int64_t head_dim, int64_t stride_qkv, addrmsnorm_dtype dtype, addrmsnorm_dtype weight_dtype,
    float eps, float weight_offset, uint32_t flags) {
    addrmsnorm_norm_args a = addrmsnorm_norm_args_qk(qkv, q_weight, k_weight, tokens, num_q_heads, num_kv_heads,
                                                     head_dim, stride_qkv);
    a.x_dtype = dtype;
    a.residual_dtype = dtype;
    a.weight_dtype = weight_dtype;
    a.eps = eps;
    a.weight_offset = weight_offset;
    a.numerics = addrmsnorm_compat_numerics(flags, &a.flags);
    return a;
}

static inline addrmsnorm_status addrmsnorm_qk_rmsnorm(
    void *qkv, const void *q_weight, const void *k_weight, int64_t tokens, int64_t num_q_heads, int64_t num_kv_heads,
    int64_t head_dim, int64_t stride_qkv, addrmsnorm_dtype dtype, addrmsnorm_dtype weight_dtype, float eps,
    float weight_offset, uint32_t flags, addrmsnorm_stream stream) {
    const addrmsnorm_norm_args a = addrmsnorm_compat_qk(qkv, q_weight, k_weight, tokens, num_q_heads, num_kv_heads,
                                                        head_dim, stride_qkv, dtype, weight_dtype, eps,
                                                        weight_offset, flags);
    return addrmsnorm_norm(&a, stream);
}

static inline addrmsnorm_status addrmsnorm_qk_rmsnorm_check(
    const void *qkv, const void *q_weight, const void *k_weight, int64_t tokens, int64_t num_q_heads,
    int64_t num_kv_heads, int64_t head_dim, int64_t stride_qkv, addrmsnorm_dtype dtype, addrmsnorm_dtype weight_dtype,
    float eps, float weight_offset, uint32_t flags) {
    const addrmsnorm_norm_args a = addrmsnorm_compat_qk(qkv, q_weight, k_weight, tokens, num_q_heads, num_kv_heads,
                                                        head_dim, stride_qkv, dtype, weight_dtype, eps,
                                                        weight_offset, flags);
    return addrmsnorm_norm_check(&a);
}

/* ----- the backward ----- */

static inline addrmsnorm_norm_backward_args addrmsnorm_compat_backward(
    const void *dy, const void *dresidual_out, const void *h, const float *rstd, const void *weight,
    const void *dresidual, const void *dx, const void *dweight, const void *workspace, uint64_t workspace_bytes,
    int64_t rows, int64_t hidden, int64_t stride_dy, int64_t stride_dresidual_out, int64_t stride_h,
    int64_t stride_dresidual, int64_t stride_dx, addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype,
    addrmsnorm_dtype weight_dtype, float weight_offset, uint32_t flags) {
    addrmsnorm_norm_backward_args a = addrmsnorm_norm_backward_args_init();
    a.dy = dy;
    a.dresidual_out = dresidual_out;
    a.h = h;
    a.rstd = rstd;
    a.weight = weight;
    a.dresidual = (void *)dresidual;
    a.dx = (void *)dx;
    a.dweight = (void *)dweight;
    a.workspace = (void *)workspace;
    a.workspace_bytes = workspace_bytes;
    a.rows = rows;
    a.hidden = hidden;
    a.stride_dy = stride_dy;
    a.stride_dresidual_out = stride_dresidual_out;
    a.stride_h = stride_h;
    a.stride_dresidual = stride_dresidual;
    a.stride_dx = stride_dx;
    a.x_dtype = x_dtype;
    a.residual_dtype = residual_dtype;
    a.weight_dtype = weight_dtype;
    a.weight_offset = weight_offset;
    a.flags = flags;
    return a;
}

static inline addrmsnorm_status addrmsnorm_fused_add_rmsnorm_backward(
    const void *dy, const void *dresidual_out, const void *h, const float *rstd, const void *weight, void *dresidual,
    void *dx, void *dweight, void *workspace, uint64_t workspace_bytes, int64_t rows, int64_t hidden,
    int64_t stride_dy, int64_t stride_dresidual_out, int64_t stride_h, int64_t stride_dresidual, int64_t stride_dx,
    addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype, addrmsnorm_dtype weight_dtype, float weight_offset,
    uint32_t flags, addrmsnorm_stream stream) {
    const addrmsnorm_norm_backward_args a = addrmsnorm_compat_backward(
        dy, dresidual_out, h, rstd, weight, dresidual, dx, dweight, workspace, workspace_bytes, rows, hidden,
        stride_dy, stride_dresidual_out, stride_h, stride_dresidual, stride_dx, x_dtype, residual_dtype,
        weight_dtype, weight_offset, flags);
    return addrmsnorm_norm_backward(&a, stream);
}

static inline addrmsnorm_status addrmsnorm_fused_add_rmsnorm_backward_check(
    const void *dy, const void *dresidual_out, const void *h, const float *rstd, const void *weight,
    const void *dresidual, const void *dx, const void *dweight, const void *workspace, uint64_t workspace_bytes,
    int64_t rows, int64_t hidden, int64_t stride_dy, int64_t stride_dresidual_out, int64_t stride_h,
    int64_t stride_dresidual, int64_t stride_dx, addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype,
    addrmsnorm_dtype weight_dtype, float weight_offset, uint32_t flags) {
    const addrmsnorm_norm_backward_args a = addrmsnorm_compat_backward(
        dy, dresidual_out, h, rstd, weight, dresidual, dx, dweight, workspace, workspace_bytes, rows, hidden,
        stride_dy, stride_dresidual_out, stride_h, stride_dresidual, stride_dx, x_dtype, residual_dtype,
        weight_dtype, weight_offset, flags);
    return addrmsnorm_norm_backward_check(&a);
}

static inline addrmsnorm_status addrmsnorm_fused_add_rmsnorm_backward_workspace_size(
    int64_t rows, int64_t hidden, addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype, uint64_t *bytes) {
    addrmsnorm_norm_backward_args a = addrmsnorm_norm_backward_args_init();
    a.rows = rows;
    a.hidden = hidden;
    a.x_dtype = x_dtype;
    a.residual_dtype = residual_dtype;
    return addrmsnorm_norm_backward_workspace_size(&a, bytes);
}

/* The plain norm's backward: h is x, and the gradient of x goes to dx (dresidual NULL). */
static inline addrmsnorm_status addrmsnorm_rmsnorm_backward(
    const void *dy, const void *x, const float *rstd, const void *weight, void *dx, void *dweight, void *workspace,
    uint64_t workspace_bytes, int64_t rows, int64_t hidden, int64_t stride_dy, int64_t stride_x, int64_t stride_dx,
    addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype, float weight_offset, uint32_t flags,
    addrmsnorm_stream stream) {
    const addrmsnorm_norm_backward_args a = addrmsnorm_compat_backward(
        dy, NULL, x, rstd, weight, NULL, dx, dweight, workspace, workspace_bytes, rows, hidden, stride_dy, 0,
        stride_x, 0, stride_dx, x_dtype, x_dtype, weight_dtype, weight_offset, flags);
    return addrmsnorm_norm_backward(&a, stream);
}

static inline addrmsnorm_status addrmsnorm_rmsnorm_backward_check(
    const void *dy, const void *x, const float *rstd, const void *weight, const void *dx, const void *dweight,
    const void *workspace, uint64_t workspace_bytes, int64_t rows, int64_t hidden, int64_t stride_dy,
    int64_t stride_x, int64_t stride_dx, addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype, float weight_offset,
    uint32_t flags) {
    const addrmsnorm_norm_backward_args a = addrmsnorm_compat_backward(
        dy, NULL, x, rstd, weight, NULL, dx, dweight, workspace, workspace_bytes, rows, hidden, stride_dy, 0,
        stride_x, 0, stride_dx, x_dtype, x_dtype, weight_dtype, weight_offset, flags);
    return addrmsnorm_norm_backward_check(&a);
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ADDRMSNORM_COMPAT_H */
