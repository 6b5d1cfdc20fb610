// The C ABI's forward entry point: validate, dispatch through the generated table, launch.
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <utility>

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

// The call's tensors as the kernel takes them (validated, rows > 0), as the JIT launcher passes them (launcher.py):
// absent tensors are stand-ins the kernel does not touch, and a stride no row or group uses is 0, which keeps the
// alignment rule's answer the same on both paths.
struct ForwardViews {
    // The kernel's rows: `rows` of `groups` rows each, `hidden` wide. The gated norm's groups are a row's groups of
    // group_size columns; the QK norm's, a token's q and k heads; the pair's b rows are a second grid of the same rows.
    // The QK norm's v heads (Gemma 4's v_norm) are v_groups more rows after each group's, in programs of their own.
    int64_t rows, groups, hidden, v_groups;
    // Row strides (elements; 0 for a single row) and the group strides (0 for one group).
    int64_t stride_x, stride_residual, stride_out, stride_residual_out, stride_y, stride_z, stride_b, stride_b_out;
    int64_t stride_x_group, stride_out_group;
    // The weightless norm's weights are x (the weightless sandwich's, post_weight), never read; the QK norm's k
    // weight is weight2; without the sandwich, post_weight is the weight; without the pair, b_weight is.
    const void *weight, *weight2, *post_weight, *b_weight;
    // Without a residual (the plain norm and its variants): x stands in for residual, and out (quantized: x) for
    // residual_out; without the gate, z is x; without the pair, b is x and b_out out.
    const void *residual, *residual_out, *z, *b, *b_out;
    int64_t b_hidden;

    int64_t kernel_rows() const { return rows * groups; }
};

ForwardViews forward_views(const Call& c) {
    ForwardViews v{};
    const bool quant = c.kind == Call::kQuant, plain = c.residual == nullptr, gated = c.z != nullptr,
               pair = c.b != nullptr, qk = c.kind == Call::kQk;
    v.rows = c.rows;
    v.groups = c.groups;
    v.hidden = c.hidden;
    v.stride_x_group = c.stride_x_group;
    v.stride_out_group = c.stride_out_group;
    if (gated) {  // each row's groups of group_size columns (validated: one row stride, groups contiguous)
        v.hidden = c.group_size != 0 ? c.group_size : c.hidden;
        v.groups = c.hidden / v.hidden;
        v.stride_x_group = v.stride_out_group = v.hidden;
    }
    if (qk) v.stride_x_group = v.stride_out_group = c.hidden;  // a token's heads, contiguous
    if (qk && c.v_from_group != 0) {
        v.groups = c.v_from_group;
        v.v_groups = c.groups - c.v_from_group;
    }
    if (v.groups == 1) v.stride_x_group = v.stride_out_group = 0;
    const bool one = v.kernel_rows() == 1;  // a single row has no stride (nor group: groups is 1)
    auto row = [one](int64_t stride) { return one ? 0 : stride; };
    v.stride_x = row(c.stride_x);
    v.stride_out = row(c.stride_out);
    v.stride_residual = plain ? 0 : row(c.stride_residual);
    v.stride_residual_out = plain ? 0 : row(c.stride_residual_out);
    v.stride_y = row(c.stride_y);
    v.stride_z = gated ? row(c.stride_z) : 0;
    v.stride_b = pair ? row(c.stride_b) : 0;
    v.stride_b_out = pair ? row(c.stride_b_out) : 0;
    const bool sandwich = c.post_weight != nullptr;
    v.weight = c.weightless() ? (sandwich ? c.post_weight : c.x) : c.weight;
    v.weight2 = qk && !c.weightless() ? c.weight2 : v.weight;
    v.post_weight = sandwich ? c.post_weight : v.weight;
    v.b_weight = pair && !c.weightless() ? c.b_weight : v.weight;
    v.residual = plain ? c.x : c.residual;
    v.residual_out = !plain ? c.residual_out : quant ? c.x : c.out;
    v.z = gated ? c.z : c.x;
    v.b = pair ? c.b : c.x;
    v.b_out = pair ? c.b_out : c.out;
    v.b_hidden = pair ? c.b_hidden : v.hidden;
    return v;
}

// The kernel's view of the rotation's angles (without rope, x stands in, never read): a cos_sin_cache is cos by
// frequency, its sines rotary_dim / 2 elements on; HF's cos and sin are by column. One row has no stride.
struct Angles {
    const void* cos;
    const void* sin;
    const void* positions;
    int64_t stride_cos, stride_sin, rotary_dim;
};

Angles angles_of(const Call& c) {
    const addrmsnorm_rope* rope = c.rope;
    if (rope == nullptr) return {c.x, c.x, c.x, 0, 0, 0};
    const int64_t rotary_dim = rope->rotary_dim == 0 ? c.hidden : rope->rotary_dim;
    if (rope->positions != nullptr) {
        const char* cache = static_cast<const char*>(rope->cos_sin_cache);
        const int64_t stride = rope->max_position > 1 ? rope->stride_cache : 0;
        return {cache, cache + (rotary_dim / 2) * dtype_size(rope->angle_dtype), rope->positions, stride, stride,
                rotary_dim};
    }
    const bool one = c.rows == 1;
    return {rope->cos, rope->sin, c.x, one ? 0 : rope->stride_cos, one ? 0 : rope->stride_sin, rotary_dim};
}

// The kernel a call runs: its config (kConfigs), its variant (the built kernels' index; -1 none), and its name in
// messages. The rule of each kind is the generated one (kernel_table.h), as the JIT launcher applies it.
struct ForwardKernel {
    int config, variant;
    const char* what;
    int pack = 1;  // the pair: its narrower part's PAIR_PACK (configs.pair_pack)
};

ForwardKernel forward_kernel(const Call& c, const ForwardViews& v, const Angles& angles) {
    const int xs = dtype_size(c.x_dtype), rs = dtype_size(c.residual_dtype);
    const bool sandwich = c.post_weight != nullptr, gated = c.z != nullptr, pair = c.b != nullptr;
    int config = -1;
    if (c.kind == Call::kQuant) {
        const addrmsnorm_quant& qd = c.quant_desc;
        const int mode = static_cast<int>(qd.mode);  // the QUANT constexpr (configs.QUANT_MODES)
        const bool plain = c.residual == nullptr;
        config = sandwich ? select_sandwich_table_config(v.hidden, xs, xs, 0, false)
                 : gated  ? select_gated_table_config(v.hidden, xs, xs, 0, false)
                          : select_forward_config(v.hidden, xs, xs, mode, false, plain);
        const int variant =
            config < 0 ? -1 : quant_variant_index(config, c.x_dtype, qd.dtype, mode, plain, sandwich, gated);
        return {config, variant,
                sandwich ? "sandwich-norm quantized kernel" : gated ? "gated-norm quantized kernel" : "quantized kernel"};
    }
    if (c.kind == Call::kFused) {
        // configs.align_elems, generated: the widest built class that divides H and every stride, if every pointer
        // is 16-byte aligned.
        const bool pointers_aligned = aligned16(c.x) && aligned16(c.residual) && aligned16(v.weight) &&
                                      aligned16(c.out) && aligned16(c.residual_out) && aligned16(v.post_weight);
        const bool ends_only = c.hf() || sandwich || weight_slot(c.x_dtype, c.weight_dtype) == 2;
        const int align_class = forward_align_class(
            pointers_aligned, v.hidden | v.stride_x | v.stride_residual | v.stride_out | v.stride_residual_out, xs, rs,
            ends_only);
        const int numerics = numerics_mode(c.hf(), static_cast<float>(c.weight_offset), xs);
        const bool vector_typed = is_vector_typed(align_class, xs, rs, c.weight_dtype == c.x_dtype, numerics);
        config = sandwich ? select_sandwich_table_config(v.hidden, xs, rs, 0, false)
                          : select_forward_config(v.hidden, xs, rs, 0, vector_typed, false);
        if (config < 0) return {config, -1, "kernel"};
        return {config,
                sandwich ? sandwich_variant_index(config, c.x_dtype, c.weight_dtype, align_class, numerics)
                         : variant_index(config, c.x_dtype, c.residual_dtype, c.weight_dtype, align_class, numerics),
                sandwich ? "sandwich-norm kernel" : "kernel"};
    }
    const float offset = static_cast<float>(c.weight_offset);
    if (pair) {
        const void* pointers[6] = {c.x, v.weight, c.out, v.b, v.b_weight, v.b_out};
        int pack = 1;
        const int variant = pair_call_variant(pointers, 6, v.hidden | v.b_hidden, v.hidden, v.b_hidden,
                                              v.stride_x | v.stride_out | v.stride_b | v.stride_b_out, c.x_dtype,
                                              c.weight_dtype, offset, c.hf(), &config, &pack);
        return {config, variant, "pair kernel", pack};
    }
    if (gated) {
        const int variant = gated_call_variant(c.x, v.weight, v.z, c.out, v.hidden, v.stride_x | v.stride_out | v.stride_z,
                                               c.x_dtype, c.weight_dtype, offset, c.hf(), &config);
        return {config, variant, "gated-norm kernel"};
    }
    // The rotation: its variant (angles of x's dtype or fp32, then no positions, int32 or int64); the angles, like
    // the heads, on the vector (their pointers, row strides and rotary_dim / 2), and the vector kernels' calls alone
    // (configs.rope_on_vector) (launcher.py's align_elems call has the same operands).
    const addrmsnorm_rope* rope = c.rope;
    const bool qk = c.kind == Call::kQk;
    const int rope_variant =
        rope == nullptr ? -1
                        : (rope->angle_dtype == c.x_dtype ? 0 : 3) +
                              (rope->positions != nullptr ? (rope->positions_dtype == ADDRMSNORM_INT32 ? 1 : 2) : 0);
    const bool angles_aligned = aligned16(angles.cos) && aligned16(angles.sin) &&
                                (rope == nullptr || rope_on_vector(rope->style, angles.rotary_dim, v.hidden));
    const int64_t angle_strides = rope == nullptr ? 0 : angles.stride_cos | angles.stride_sin | angles.rotary_dim / 2;
    const int variant = plain_call_variant(
        c.x, v.weight, v.weight2, c.out, v.hidden,
        v.stride_x | v.stride_out | v.stride_x_group | v.stride_out_group | angle_strides, c.x_dtype, c.weight_dtype,
        offset, c.hf(), (c.flags & kFlagRoundOnce) != 0, qk, &config, rope_variant, angles_aligned, v.v_groups != 0);
    return {config, variant,
            rope != nullptr ? "QK-norm + RoPE kernel" : qk ? "QK-norm kernel" : "plain-norm kernel"};
}

// The parameters both forward kernels take (rmsnorm_fwd and rmsnorm_quant_fwd), under the same names: the rows, x,
// the residual, the weight, the scalars, the sandwich norm's first weight and the gate.
template <typename Params>
void set_common(Params& p, const Call& c, const ForwardViews& v) {
    p.x_ptr = devptr(c.x);
    p.residual_ptr = devptr(v.residual);
    p.weight_ptr = devptr(v.weight);
    p.residual_out_ptr = devptr(v.residual_out);
    p.n_rows = static_cast<int32_t>(v.kernel_rows());
    p.H = static_cast<int32_t>(v.hidden);
    p.stride_x_row = v.stride_x;
    p.stride_residual_row = v.stride_residual;
    p.stride_residual_out_row = v.stride_residual_out;
    p.eps = static_cast<float>(c.eps);
    p.weight_offset = static_cast<float>(c.weight_offset);
    p.weight_dtype = static_cast<int32_t>(c.weight_dtype);
    p.has_weight = c.weightless() ? 0 : 1;
    p.x_scale = static_cast<float>(c.x_scale);
    p.group_rows = static_cast<int32_t>(v.groups);
    p.stride_x_group = v.stride_x_group;
    // The sandwich norm (read by SANDWICH alone).
    p.post_weight_ptr = devptr(v.post_weight);
    p.post_weight_offset = static_cast<float>(c.post_weight_offset);
    // The gated norm's gate (read by GATED alone).
    p.z_ptr = devptr(v.z);
    p.stride_z_row = v.stride_z;
    p.gate_first = c.gate_first;
}

// rmsnorm_fwd's parameters: the common ones, then the output and rstd, the QK norm's split, the pair and the
// rotation. `part_grid` is the programs of one part's rows.
void set_forward(ForwardParams& p, const Call& c, const ForwardViews& v, const Angles& a, unsigned part_grid) {
    set_common(p, c, v);
    p.out_ptr = devptr(c.out);
    p.stride_out_row = v.stride_out;
    p.rstd_ptr = devptr(c.rstd);  // may be null: the store is predicated on write_rstd
    p.write_rstd = c.rstd != nullptr ? 1 : 0;
    p.stride_out_group = v.stride_out_group;
    // The QK norm (SPLIT): a group's rows from weight2_from_group on take weight2.
    p.weight2_ptr = devptr(v.weight2);
    p.group_split = static_cast<int32_t>(c.kind == Call::kQk ? c.weight2_from_group : v.groups);
    p.v_rows = static_cast<int32_t>(v.v_groups);  // the programs past the parts' take them
    // The pair (PAIR): programs from pair_split on take b's rows.
    p.b_ptr = devptr(v.b);
    p.b_weight_ptr = devptr(v.b_weight);
    p.b_out_ptr = devptr(v.b_out);
    p.H_b = static_cast<int32_t>(v.b_hidden);
    p.stride_b_row = v.stride_b;
    p.stride_b_out_row = v.stride_b_out;
    p.pair_split = c.b != nullptr ? static_cast<int32_t>(part_grid) : 0;
    // The rotation (ROPE).
    const addrmsnorm_rope* rope = c.rope;
    const bool cached = rope != nullptr && rope->positions != nullptr;
    p.cos_ptr = devptr(a.cos);
    p.sin_ptr = devptr(a.sin);
    p.pos_ptr = devptr(a.positions);
    p.stride_cos = a.stride_cos;
    p.stride_sin = a.stride_sin;
    p.rope_half = static_cast<int32_t>(a.rotary_dim / 2);
    p.rope_style = rope != nullptr ? rope->style : 0;
    p.cos_by_freq = cached ? 1 : 0;
    p.max_position = cached ? rope->max_position : 0;
}

// rmsnorm_quant_fwd's parameters: the common ones, then q, y and the scales.
void set_quant(QuantForwardParams& p, const Call& c, const ForwardViews& v) {
    set_common(p, c, v);
    const addrmsnorm_quant& qd = c.quant_desc;
    p.q_ptr = devptr(c.out);
    p.stride_q_row = v.stride_out;
    p.y_ptr = devptr(c.y != nullptr ? c.y : c.x);
    p.stride_y_row = v.stride_y;
    p.write_y = c.y != nullptr ? 1 : 0;
    // Absent scales are passed as present ones the kernel does not touch (it branches on the mode).
    const void* scale = qd.scale, *scales = qd.scales;
    p.scale_ptr = devptr(scale != nullptr ? scale : scales);
    p.scales_ptr = devptr(scales != nullptr ? scales : scale);
    p.scale_ub_ptr = devptr(qd.scale_ub != nullptr ? static_cast<const void*>(qd.scale_ub) : (scales ? scales : scale));
    p.stride_s_row = qd.scales_stride_row;
    p.stride_s_group = qd.scales_stride_group;
    p.group_size = qd.mode >= ADDRMSNORM_QUANT_PER_GROUP ? qd.group_size : 0;
    p.has_ub = qd.scale_ub != nullptr ? 1 : 0;
    p.ue8m0 = (qd.flags & ADDRMSNORM_QUANT_UE8M0) ? 1 : 0;
    // Block-scaled, swizzled: scales for the rows rounded up to the tile (kSwizzleRows); the grid's last program
    // writes the padded rows' zeros.
    const bool swizzled = (qd.flags & ADDRMSNORM_QUANT_SWIZZLED) != 0;
    p.scale_rows = static_cast<int32_t>(swizzled ? swizzled_rows(c.rows) : v.kernel_rows());
    p.swizzled = swizzled ? 1 : 0;
}

// What a call does after choosing its kernel: launch it, or (kCheck: addrmsnorm_norm_check) only say whether it was
// built, touching no driver.
enum class Launch { kRun, kCheck };

addrmsnorm_status norm_call(const addrmsnorm_norm_args* args, addrmsnorm_stream stream, Launch how);

// Gemma 4's v heads are built at the vector alone (tools/aot_build.py's _qk_kinds): a QK call with them off it (ALIGN
// 1) runs as two, q's and k's heads, then v's as the weightless plain norm of their [tokens, v heads, hidden] view,
// the bits of the one launch.
addrmsnorm_status qk_then_v(const Call& c, const addrmsnorm_norm_args* args, addrmsnorm_stream stream, Launch how) {
    addrmsnorm_norm_args qk = *args;
    qk.groups = c.v_from_group;
    qk.v_from_group = 0;
    const int64_t offset = c.v_from_group * c.hidden * dtype_size(c.x_dtype);
    addrmsnorm_norm_args v = addrmsnorm_norm_args_init();
    v.x = static_cast<const char*>(c.x) + offset;
    v.out = static_cast<char*>(c.out) + offset;
    v.rows = c.rows;
    v.groups = c.groups - c.v_from_group;
    v.hidden = c.hidden;
    v.stride_x = args->stride_x;
    v.stride_out = args->stride_out;
    v.stride_x_group = v.stride_out_group = c.hidden;
    v.x_dtype = v.weight_dtype = c.x_dtype;
    v.numerics = args->numerics;
    v.eps = args->eps;
    v.flags = args->flags;
    if (addrmsnorm_status st = norm_call(&qk, stream, how); st != ADDRMSNORM_SUCCESS) return st;
    return norm_call(&v, stream, how);
}

// The one call, validated: its kernel launched, or (Launch::kCheck) only found among the built ones. A call of no
// rows launches nothing and needs no kernel.
addrmsnorm_status norm_call(const addrmsnorm_norm_args* args, addrmsnorm_stream stream, Launch how) {
    Call c;
    addrmsnorm_status st = validate_norm(args, &c);
    if (st != ADDRMSNORM_SUCCESS || c.rows == 0) return st;
    if (c.b != nullptr && c.b_hidden > c.hidden) {  // the pair's narrower part second, as launcher.py has it
        std::swap(c.x, c.b);
        std::swap(c.out, c.b_out);
        std::swap(c.weight, c.b_weight);
        std::swap(c.hidden, c.b_hidden);
        std::swap(c.stride_x, c.stride_b);
        std::swap(c.stride_out, c.stride_b_out);
    }
    const ForwardViews v = forward_views(c);
    const Angles angles = angles_of(c);
    const ForwardKernel fk = forward_kernel(c, v, angles);
    if (fk.variant < 0 && v.v_groups != 0) return qk_then_v(c, args, stream, how);
    // No config: the quantized calls' rule says it as "not built" (built_kernel), the others' as no configuration.
    if (fk.config < 0 && c.kind != Call::kQuant)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "no kernel configuration for these dtypes");
    if (how == Launch::kCheck) return built_kernel(fk.variant, fk.what);
    const Driver* d = driver(&st);
    if (d == nullptr) return st;
    LoadedKernel k;
    st = get_built_kernel(*d, fk.variant, fk.what, &k);
    if (st != ADDRMSNORM_SUCCESS) return st;
    const KernelConfig& cfg = kConfigs[fk.config];
    auto programs = [&cfg](int64_t rows) {
        return static_cast<unsigned>((rows + cfg.rows_per_program - 1) / cfg.rows_per_program);
    };
    const unsigned part_grid = programs(v.kernel_rows());
    const bool pdl = (c.flags & ADDRMSNORM_FLAG_PDL) != 0;
    if (c.kind == Call::kQuant) {
        QuantForwardParams p;
        set_quant(p, c, v);
        return launch_with(*d, k, part_grid, p, stream, pdl);
    }
    ForwardParams p;
    set_forward(p, c, v, angles, part_grid);
    const unsigned b_grid =
        c.b != nullptr ? static_cast<unsigned>(pair_packed_programs(v.rows, cfg.rows_per_program, fk.pack)) : 0u;
    return launch_with(*d, k, part_grid + b_grid + programs(v.rows * v.v_groups), p, stream, pdl);
}

}  // namespace

extern "C" ADDRMSNORM_API addrmsnorm_status addrmsnorm_preload(void) {
    addrmsnorm_status st;
    const Driver* d = driver(&st);
    if (d == nullptr) return st;
    return preload_all(*d);
}

extern "C" ADDRMSNORM_API addrmsnorm_status addrmsnorm_use_primary_context(int device) {
    addrmsnorm_status st;
    const Driver* d = driver(&st);
    if (d == nullptr) return st;
    int count = 0;
    CUresult r = d->cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS) return cuda_fail(*d, r, "cuDeviceGetCount");
    if (device < 0 || device >= count)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "device %d does not exist (%d CUDA devices)", device, count);
    CUdevice dev;
    r = d->cuDeviceGet(&dev, device);
    if (r != CUDA_SUCCESS) return cuda_fail(*d, r, "cuDeviceGet");
    CUcontext ctx;
    r = d->cuDevicePrimaryCtxRetain(&ctx, dev);
    if (r != CUDA_SUCCESS) return cuda_fail(*d, r, "cuDevicePrimaryCtxRetain");
    r = d->cuCtxSetCurrent(ctx);
    if (r != CUDA_SUCCESS) return cuda_fail(*d, r, "cuCtxSetCurrent");
    return ADDRMSNORM_SUCCESS;
}

extern "C" ADDRMSNORM_API const char* addrmsnorm_built_archs(void) { return kArchList; }

extern "C" ADDRMSNORM_API addrmsnorm_status addrmsnorm_norm_check(const addrmsnorm_norm_args* args) {
    return norm_call(args, nullptr, Launch::kCheck);
}

extern "C" ADDRMSNORM_API addrmsnorm_status addrmsnorm_norm(const addrmsnorm_norm_args* args,
                                                           addrmsnorm_stream stream) {
    return norm_call(args, stream, Launch::kRun);
}
