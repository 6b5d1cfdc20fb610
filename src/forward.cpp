// The C ABI's forward entry point: validate, dispatch through the generated table, launch.
#include <cuda.h>

#include <algorithm>
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

// The kernel's view of the rotation's angles (without rope, x stands in, never read): a cos_sin_cache is cos by
// frequency, its sines rotary_dim / 2 elements on; HF's cos and sin are by column. One row has no stride.
struct Angles {
    const void* cos;
    const void* sin;
    const void* positions;
    int64_t stride_cos, stride_sin;
};

Angles angles_of(const addrmsnorm_rope* rope, const void* x, int64_t rotary_dim, int64_t rows) {
    if (rope == nullptr) return {x, x, x, 0, 0};
    if (rope->positions != nullptr) {
        const char* cache = static_cast<const char*>(rope->cos_sin_cache);
        const int64_t stride = rope->max_position > 1 ? rope->stride_cache : 0;
        return {cache, cache + (rotary_dim / 2) * dtype_size(rope->angle_dtype), rope->positions, stride, stride};
    }
    return {rope->cos, rope->sin, x, rows > 1 ? rope->stride_cos : 0, rows > 1 ? rope->stride_sin : 0};
}

// The rotation's parameters of rmsnorm_fwd (read only by the ROPE kernels).
void set_rope(ForwardParams& p, const Angles& a, const addrmsnorm_rope* rope, int64_t rotary_dim) {
    p.cos_ptr = devptr(a.cos);
    p.sin_ptr = devptr(a.sin);
    p.pos_ptr = devptr(a.positions);
    p.stride_cos = a.stride_cos;
    p.stride_sin = a.stride_sin;
    p.rope_half = static_cast<int32_t>(rotary_dim / 2);
    p.rope_style = rope != nullptr ? rope->style : 0;
    p.cos_by_freq = rope != nullptr && rope->positions != nullptr ? 1 : 0;
    p.max_position = rope != nullptr && rope->positions != nullptr ? rope->max_position : 0;
}

// What the launches do after choosing their kernel: launch it, or (kCheck: addrmsnorm_norm_check) only say whether
// it was built, touching no driver.
enum class Launch { kRun, kCheck };

// The fused forward's launch (validated).
addrmsnorm_status launch_fused(const ForwardCall& c, addrmsnorm_stream stream, Launch how) {
    const bool weightless = (c.flags & kFlagNoWeight) != 0;
    const bool sandwich = c.post_weight != nullptr;
    // The weightless norm: x in the weight's place, typed as x and never read (has_weight 0); the weightless
    // sandwich's stand-in is post_weight, typed as the weights are. Without SANDWICH, weight stands in for
    // post_weight.
    const void *x = c.x, *residual = c.residual, *weight = weightless ? (sandwich ? c.post_weight : c.x) : c.weight,
               *out = c.out, *residual_out = c.residual_out, *post_weight = sandwich ? c.post_weight : weight;
    const float* rstd = c.rstd;
    const int64_t rows = c.rows, hidden = c.hidden;
    int64_t stride_x = c.stride_x, stride_residual = c.stride_residual, stride_out = c.stride_out,
            stride_residual_out = c.stride_residual_out;
    const addrmsnorm_dtype x_dtype = c.x_dtype, residual_dtype = c.residual_dtype, weight_dtype = c.weight_dtype;
    const float eps = c.eps, weight_offset = c.weight_offset;
    const uint32_t flags = c.flags;
    if (rows == 1) {  // a single row has no stride; 0 keeps the alignment promise trivially true
        stride_x = stride_residual = stride_out = stride_residual_out = 0;
    }
    // configs.align_elems, generated (as on the JIT path, so that both run the same specialization):
    // the widest built class that divides H and every stride, if every pointer is 16-byte aligned.
    const bool hf = (flags & kFlagHf) != 0;
    const bool pointers_aligned = aligned16(x) && aligned16(residual) && aligned16(weight) && aligned16(out) &&
                                  aligned16(residual_out) && aligned16(post_weight);
    const bool ends_only = hf || sandwich || weight_slot(x_dtype, weight_dtype) == 2;
    const int xs = dtype_size(x_dtype), rs = dtype_size(residual_dtype);
    const int align_class = forward_align_class(
        pointers_aligned, hidden | stride_x | stride_residual | stride_out | stride_residual_out, xs, rs, ends_only);
    const int numerics = numerics_mode(hf, weight_offset, xs);
    const bool vector_typed = is_vector_typed(align_class, xs, rs, weight_dtype == x_dtype, numerics);
    const int config = sandwich ? select_sandwich_table_config(hidden, xs, rs, 0, false)
                                : select_forward_config(hidden, xs, rs, 0, vector_typed, false);
    if (config < 0) return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "no kernel configuration for these dtypes");
    const int variant = sandwich ? sandwich_variant_index(config, x_dtype, weight_dtype, align_class, numerics)
                                 : variant_index(config, x_dtype, residual_dtype, weight_dtype, align_class, numerics);
    const char* what = sandwich ? "sandwich-norm kernel" : "kernel";
    if (how == Launch::kCheck) return built_kernel(variant, what);
    addrmsnorm_status st;
    const Driver* d = driver(&st);
    if (d == nullptr) return st;
    LoadedKernel k;
    st = get_built_kernel(*d, variant, what, &k);
    if (st != ADDRMSNORM_SUCCESS) return st;

    const KernelConfig& cfg = kConfigs[config];
    ForwardParams p;
    p.x_ptr = devptr(x);
    p.residual_ptr = devptr(residual);
    p.weight_ptr = devptr(weight);
    p.out_ptr = devptr(out);
    p.residual_out_ptr = devptr(residual_out);
    p.rstd_ptr = devptr(rstd);  // may be null: the store is predicated on write_rstd
    p.n_rows = static_cast<int32_t>(rows);
    p.H = static_cast<int32_t>(hidden);
    p.stride_x_row = stride_x;
    p.stride_residual_row = stride_residual;
    p.stride_out_row = stride_out;
    p.stride_residual_out_row = stride_residual_out;
    p.eps = eps;
    p.weight_offset = weight_offset;
    p.write_rstd = rstd != nullptr ? 1 : 0;
    p.weight_dtype = static_cast<int32_t>(weight_dtype);
    p.group_rows = 1;  // rows of one stride: the grouped addressing is compiled out (GROUPED)
    p.stride_x_group = 0;
    p.stride_out_group = 0;
    p.weight2_ptr = devptr(weight);  // one weight (SPLIT is compiled out)
    p.group_split = 1;
    p.has_weight = weightless ? 0 : 1;
    p.x_scale = c.x_scale;
    p.post_weight_ptr = devptr(post_weight);  // read only by the SANDWICH kernels
    p.post_weight_offset = c.post_weight_offset;
    p.z_ptr = devptr(x);  // no gate (GATED off): a stand-in, unread
    p.stride_z_row = 0;
    p.gate_first = 0;
    p.b_ptr = devptr(x);  // no pair (PAIR off): stand-ins, unread
    p.b_weight_ptr = devptr(weight);
    p.b_out_ptr = devptr(out);
    p.H_b = static_cast<int32_t>(hidden);
    p.stride_b_row = 0;
    p.stride_b_out_row = 0;
    p.pair_split = 0;
    set_rope(p, angles_of(nullptr, x, 0, rows), nullptr, 0);
    const unsigned grid = static_cast<unsigned>((rows + cfg.rows_per_program - 1) / cfg.rows_per_program);
    return launch_with(*d, k, grid, p, stream, (flags & ADDRMSNORM_FLAG_PDL) != 0);
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

namespace {

// The quantized forward's launch, fused or plain (residual and residual_out then unused: x stands in).
addrmsnorm_status launch_quant(const QuantCall& c, addrmsnorm_stream stream, Launch how) {
    int64_t stride_x = c.stride_x, stride_residual = c.plain ? 0 : c.stride_residual, stride_q = c.stride_q,
            stride_residual_out = c.plain ? 0 : c.stride_residual_out, stride_y = c.stride_y;
    const float eps = c.eps, weight_offset = c.weight_offset;
    if (c.rows == 1) stride_x = stride_residual = stride_q = stride_residual_out = stride_y = 0;
    const int xs = dtype_size(c.x_dtype);
    const addrmsnorm_quant& qd = *c.quant;
    const int mode = static_cast<int>(qd.mode);  // the QUANT constexpr (configs.QUANT_MODES)
    const bool sandwich = c.post_weight != nullptr;  // on the sandwich norm's rows (configs.SANDWICH_TABLE)
    // The gated norm: each row's groups of group_size columns as the rows of a group (validated: rows of one
    // stride; per token with one group a row), on its rows (configs.GATED_TABLE).
    const bool gated = c.z != nullptr;
    const int64_t group = gated && c.gate_group_size != 0 ? c.gate_group_size : c.hidden;
    const int64_t groups = c.hidden / group;
    int64_t stride_z = gated ? c.stride_z : 0;
    if (c.rows == 1) stride_z = 0;
    const int config = sandwich ? select_sandwich_table_config(c.hidden, xs, xs, 0, false)
                       : gated  ? select_gated_table_config(group, xs, xs, 0, false)
                                : select_forward_config(c.hidden, xs, xs, mode, false, c.plain);
    const int variant =
        config < 0 ? -1 : quant_variant_index(config, c.x_dtype, qd.dtype, mode, c.plain, sandwich, gated);
    const char* what = sandwich ? "sandwich-norm quantized kernel" : gated ? "gated-norm quantized kernel"
                                                                         : "quantized kernel";
    if (how == Launch::kCheck) return built_kernel(variant, what);
    addrmsnorm_status st;
    const Driver* d = driver(&st);
    if (d == nullptr) return st;
    LoadedKernel k;
    st = get_built_kernel(*d, variant, what, &k);
    if (st != ADDRMSNORM_SUCCESS) return st;

    const KernelConfig& cfg = kConfigs[config];
    const void* residual = c.plain ? c.x : c.residual;
    const void* residual_out = c.plain ? c.x : c.residual_out;
    // Absent pointers are passed as present ones the kernel does not touch (it branches on the flags).
    QuantForwardParams p;
    p.x_ptr = devptr(c.x);
    p.residual_ptr = devptr(residual);
    const bool weightless = (c.flags & kFlagNoWeight) != 0;
    p.weight_ptr = devptr(weightless ? c.x : c.weight);  // weightless: x stands in, never read
    p.q_ptr = devptr(c.q);
    p.residual_out_ptr = devptr(residual_out);
    p.y_ptr = devptr(c.y != nullptr ? c.y : c.x);
    p.scale_ptr = devptr(qd.scale != nullptr ? static_cast<const void*>(qd.scale) : qd.scales);
    p.scales_ptr = devptr(qd.scales != nullptr ? qd.scales : static_cast<const void*>(qd.scale));
    p.scale_ub_ptr = devptr(qd.scale_ub != nullptr ? static_cast<const void*>(qd.scale_ub)
                                                   : (qd.scales ? qd.scales : static_cast<const void*>(qd.scale)));
    const int32_t n_rows = static_cast<int32_t>(c.rows * groups);
    p.n_rows = n_rows;
    p.H = static_cast<int32_t>(group);
    p.stride_x_row = stride_x;
    p.stride_residual_row = stride_residual;
    p.stride_q_row = stride_q;
    p.stride_residual_out_row = stride_residual_out;
    p.stride_y_row = stride_y;
    p.stride_s_row = qd.scales_stride_row;
    p.stride_s_group = qd.scales_stride_group;
    p.eps = eps;
    p.weight_offset = weight_offset;
    p.group_size = qd.mode >= ADDRMSNORM_QUANT_PER_GROUP ? qd.group_size : 0;
    p.write_y = c.y != nullptr ? 1 : 0;
    p.has_ub = qd.scale_ub != nullptr ? 1 : 0;
    p.ue8m0 = (qd.flags & ADDRMSNORM_QUANT_UE8M0) ? 1 : 0;
    p.weight_dtype = static_cast<int32_t>(c.x_dtype);
    // Block-scaled, swizzled: scales for the rows rounded up to 128; the grid's last program writes the
    // padded rows' zeros.
    const bool swizzled = (qd.flags & ADDRMSNORM_QUANT_SWIZZLED) != 0;
    p.scale_rows = swizzled ? static_cast<int32_t>((c.rows + 127) / 128 * 128) : n_rows;
    p.swizzled = swizzled ? 1 : 0;
    p.has_weight = weightless ? 0 : 1;
    p.x_scale = c.x_scale;
    // The weightless sandwich: post_weight stands in for the weight (never read), as launch_fused has it.
    if (sandwich && weightless) p.weight_ptr = devptr(c.post_weight);
    p.post_weight_ptr = devptr(sandwich ? c.post_weight : (weightless ? c.x : c.weight));  // read by SANDWICH alone
    p.post_weight_offset = sandwich ? c.post_weight_offset : 0.0f;
    p.z_ptr = devptr(gated ? c.z : c.x);  // read only by the GATED kernels
    p.stride_z_row = stride_z;
    p.gate_first = gated ? c.gate_first : 0;
    p.group_rows = static_cast<int32_t>(groups);
    p.stride_x_group = groups > 1 ? group : 0;
    const unsigned grid = static_cast<unsigned>((n_rows + cfg.rows_per_program - 1) / cfg.rows_per_program);
    return launch_with(*d, k, grid, p, stream, (c.flags & ADDRMSNORM_FLAG_PDL) != 0);
}

}  // namespace

// ----- the plain norm ------------------------------------------------------------------------------

namespace {

// The gated norm's gate for launch_plain: z's rows and the order (validated).
struct Gate {
    const void* z;
    int64_t stride_z;
    int32_t gate_first;
};

// The pair's second part for launch_plain (validated).
struct PairPart {
    const void* b;
    const void* b_weight;
    const void* b_out;
    int64_t b_hidden, stride_b, stride_b_out;
};

// One launch of the plain forward (RESIDUAL off, GROUPED) over x as [rows, heads, hidden] with two
// leading strides (elements). With weight2 (the QK norm: SPLIT), a group's rows from `split` on take
// weight2. With a gate (GATED), heads are a row's groups of hidden columns, each with its columns of
// the weight.
addrmsnorm_status launch_plain(const void* x, const void* weight, const void* weight2, int32_t split, void* out,
                               float* rstd, int64_t rows, int64_t heads, int64_t hidden, int64_t stride_x,
                               int64_t stride_x_head, int64_t stride_out, int64_t stride_out_head,
                               addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype, float eps, float weight_offset,
                               uint32_t flags, addrmsnorm_stream stream, Launch how, const Gate* gate = nullptr,
                               const PairPart* pair = nullptr, const addrmsnorm_rope* rope = nullptr) {
    if (heads == 1) stride_x_head = stride_out_head = 0;  // one stride: the head strides are unused
    int64_t stride_z = gate != nullptr ? gate->stride_z : 0;
    int64_t stride_b = pair != nullptr ? pair->stride_b : 0, stride_b_out = pair != nullptr ? pair->stride_b_out : 0;
    if (rows * heads == 1) stride_x = stride_out = stride_x_head = stride_out_head = stride_z = stride_b = stride_b_out = 0;
    const bool weightless = (flags & kFlagNoWeight) != 0;
    if (weightless) weight = x, weight2 = nullptr;  // x stands in, never read; no second weight to split on
    const void* b_weight = pair == nullptr ? weight : weightless ? x : pair->b_weight;
    const bool qk = weight2 != nullptr;
    const void* w2 = qk ? weight2 : weight;
    int config = -1;
    // The rotation: its variant (angles of x's dtype or fp32, then no positions, int32 or int64), and the
    // kernel's view of the angles: a cache's sines start rotary_dim / 2 past its cosines, by frequency.
    const bool cached = rope != nullptr && rope->positions != nullptr;
    const int rope_variant = rope == nullptr ? -1
                                             : (rope->angle_dtype == x_dtype ? 0 : 3) +
                                                   (cached ? (rope->positions_dtype == ADDRMSNORM_INT32 ? 1 : 2) : 0);
    const int64_t rotary_dim = rope == nullptr ? 0 : rope->rotary_dim == 0 ? hidden : rope->rotary_dim;
    // The angles, like the heads, on the vector (their pointers, row strides and rotary_dim / 2), and the vector
    // kernels' calls alone (configs.rope_on_vector) (launcher.py's align_elems call has the same operands).
    const Angles angles = angles_of(rope, x, rotary_dim, rows);
    const bool angles_aligned =
        aligned16(angles.cos) && aligned16(angles.sin) && (rope == nullptr || rope_on_vector(rope->style, rotary_dim, hidden));
    const int64_t angle_strides = rope == nullptr ? 0 : angles.stride_cos | angles.stride_sin | rotary_dim / 2;
    const void* pair_pointers[6] = {x, weight, out, pair ? pair->b : x, b_weight, pair ? pair->b_out : out};
    const int variant =
        pair != nullptr ? pair_call_variant(pair_pointers, 6, hidden | pair->b_hidden, std::max(hidden, pair->b_hidden),
                                            stride_x | stride_out | stride_b | stride_b_out, x_dtype, weight_dtype,
                                            weight_offset, (flags & kFlagHf) != 0, &config)
        : gate != nullptr ? gated_call_variant(x, weight, gate->z, out, hidden, stride_x | stride_out | stride_z,
                                             x_dtype, weight_dtype, weight_offset, (flags & kFlagHf) != 0, &config)
                        : plain_call_variant(x, weight, w2, out, hidden, stride_x | stride_out | stride_x_head |
                                             stride_out_head | angle_strides, x_dtype, weight_dtype, weight_offset,
                                             (flags & kFlagHf) != 0, (flags & kFlagRoundOnce) != 0, qk, &config,
                                             rope_variant, angles_aligned);
    if (config < 0) return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "no kernel configuration for these dtypes");
    const char* what = pair != nullptr   ? "pair kernel"
                       : gate != nullptr ? "gated-norm kernel"
                       : rope != nullptr ? "QK-norm + RoPE kernel"
                       : qk              ? "QK-norm kernel"
                                         : "plain-norm kernel";
    if (how == Launch::kCheck) return built_kernel(variant, what);
    addrmsnorm_status st;
    const Driver* d = driver(&st);
    if (d == nullptr) return st;
    LoadedKernel k;
    st = get_built_kernel(*d, variant, what, &k);
    if (st != ADDRMSNORM_SUCCESS) return st;
    const KernelConfig& cfg = kConfigs[config];
    // rmsnorm_fwd with RESIDUAL off: x stands in for residual, and out for residual_out.
    ForwardParams p;
    p.x_ptr = devptr(x);
    p.residual_ptr = devptr(x);
    p.weight_ptr = devptr(weight);
    p.out_ptr = devptr(out);
    p.residual_out_ptr = devptr(out);
    p.rstd_ptr = devptr(rstd);
    const int32_t n_rows = static_cast<int32_t>(rows * heads);
    p.n_rows = n_rows;
    p.H = static_cast<int32_t>(hidden);
    p.stride_x_row = stride_x;
    p.stride_residual_row = 0;
    p.stride_out_row = stride_out;
    p.stride_residual_out_row = 0;
    p.eps = eps;
    p.weight_offset = weight_offset;
    p.write_rstd = rstd != nullptr ? 1 : 0;
    p.weight_dtype = static_cast<int32_t>(weight_dtype);
    p.group_rows = static_cast<int32_t>(heads);
    p.stride_x_group = stride_x_head;
    p.stride_out_group = stride_out_head;
    p.weight2_ptr = devptr(w2);
    p.group_split = qk ? split : static_cast<int32_t>(heads);
    p.has_weight = weightless ? 0 : 1;
    p.x_scale = 1.0f;  // no residual add
    p.post_weight_ptr = devptr(weight);  // no sandwich
    p.post_weight_offset = 0.0f;
    p.z_ptr = devptr(gate != nullptr ? gate->z : x);  // read only by the GATED kernels
    p.stride_z_row = stride_z;
    p.gate_first = gate != nullptr ? gate->gate_first : 0;
    // The pair: programs from pair_split on take b's rows (read only by the PAIR kernels).
    const unsigned part_grid = static_cast<unsigned>((n_rows + cfg.rows_per_program - 1) / cfg.rows_per_program);
    p.b_ptr = devptr(pair != nullptr ? pair->b : x);
    p.b_weight_ptr = devptr(b_weight);
    p.b_out_ptr = devptr(pair != nullptr ? pair->b_out : out);
    p.H_b = static_cast<int32_t>(pair != nullptr ? pair->b_hidden : hidden);
    p.stride_b_row = stride_b;
    p.stride_b_out_row = stride_b_out;
    p.pair_split = pair != nullptr ? static_cast<int32_t>(part_grid) : 0;
    set_rope(p, angles, rope, rotary_dim);
    const unsigned grid = part_grid * (pair != nullptr ? 2u : 1u);
    return launch_with(*d, k, grid, p, stream, (flags & ADDRMSNORM_FLAG_PDL) != 0);
}

}  // namespace

// ----- the one call -------------------------------------------------------------------------------

namespace {

// The one call, validated: its kernel launched, or (Launch::kCheck) only found among the built ones. A call of
// no rows launches nothing and needs no kernel.
addrmsnorm_status norm_call(const addrmsnorm_norm_args* args, addrmsnorm_stream stream, Launch how) {
    NormCallArgs n;
    const addrmsnorm_status st = validate_norm(args, &n);
    if (st != ADDRMSNORM_SUCCESS || n.a.rows == 0) return st;
    switch (n.kind) {
        case NormCallArgs::kFused: return launch_fused(n.fused, stream, how);
        case NormCallArgs::kQuant: return launch_quant(n.quant, stream, how);
        case NormCallArgs::kPlain: {
            const NormCall& c = n.plain;
            if (c.b != nullptr) {
                const PairPart pair{c.b, c.b_weight, c.b_out, c.b_hidden, c.stride_b, c.stride_b_out};
                return launch_plain(c.x, c.weight, nullptr, 0, const_cast<void*>(c.out), nullptr, c.rows, 1, c.hidden,
                                    c.stride_x, 0, c.stride_out, 0, c.x_dtype, c.weight_dtype, c.eps, c.weight_offset,
                                    c.flags, stream, how, nullptr, &pair);
            }
            if (c.z != nullptr) {
                // The gated norm: each row's groups of group_size columns as a group of rows (validated: one
                // row stride, groups contiguous in the row).
                const int64_t g = c.group_size == 0 ? c.hidden : c.group_size;
                const Gate gate{c.z, c.stride_z, c.gate_first};
                return launch_plain(c.x, c.weight, nullptr, 0, const_cast<void*>(c.out), nullptr, c.rows, c.hidden / g,
                                    g, c.stride_x, g, c.stride_out, g, c.x_dtype, c.weight_dtype, c.eps,
                                    c.weight_offset, c.flags, stream, how, &gate);
            }
            return launch_plain(c.x, c.weight, nullptr, 0, const_cast<void*>(c.out), const_cast<float*>(c.rstd),
                                c.rows, c.heads, c.hidden, c.stride_x, c.stride_x_head, c.stride_out,
                                c.stride_out_head, c.x_dtype, c.weight_dtype, c.eps, c.weight_offset, c.flags, stream,
                                how);
        }
        case NormCallArgs::kQk: {
            // A token's q heads, then its k heads: one group of rows, k's weight from the q heads' count on.
            const QkCall& c = n.qk;
            return launch_plain(c.qkv, c.q_weight, c.k_weight, static_cast<int32_t>(c.num_q_heads),
                                const_cast<void*>(c.qkv), nullptr, c.tokens, c.num_q_heads + c.num_kv_heads,
                                c.head_dim, c.stride_qkv, c.head_dim, c.stride_qkv, c.head_dim, c.dtype,
                                c.weight_dtype, c.eps, c.weight_offset, c.flags, stream, how, nullptr, nullptr, c.rope);
        }
    }
    return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "unknown call kind");
}

}  // namespace

extern "C" ADDRMSNORM_API addrmsnorm_status addrmsnorm_norm_check(const addrmsnorm_norm_args* args) {
    return norm_call(args, nullptr, Launch::kCheck);
}

extern "C" ADDRMSNORM_API addrmsnorm_status addrmsnorm_norm(const addrmsnorm_norm_args* args,
                                                           addrmsnorm_stream stream) {
    return norm_call(args, stream, Launch::kRun);
}
