// The generated kernel table (build/generated/kernel_table.cpp, written by tools/aot_build.py from
// addrmsnorm/configs.py): every compiled specialization, its cubin per arch, and the dispatch rule.
#pragma once

#include "addrmsnorm/addrmsnorm.h"
#include "kernel_keys.h"

namespace addrmsnorm {
namespace detail {

struct KernelConfig {
    int block_h;           // columns per tile (single pass: >= H; looped: the chunk)
    int rows_per_program;  // rows per program
    int num_warps;
    bool looped;
};

struct CubinImage {
    unsigned offset;       // into addrmsnorm_cubin_blob
    unsigned packed_size;  // bytes in the blob: every run of 1-256 zero bytes as 0x00, (run length - 1)
    unsigned size;         // bytes of the cubin, unpacked (0: not built for this arch)
    int num_warps;
    unsigned shared;       // dynamic shared memory bytes
    unsigned global_scratch_size;   // must be 0: the launch passes a null scratch pointer
    unsigned profile_scratch_size;  // must be 0, likewise
    const char* name;      // kernel symbol in the cubin
    bool grid_dependency;  // waits on the previous grid first (the PDL constexpr): may launch with PDL
};

extern const int kNumArchs;
extern const int kArchs[];
extern const char kArchList[];
extern const int kNumConfigs;
extern const KernelConfig kConfigs[];
extern const int kNumVariants;
extern const CubinImage kImages[];  // [variant * kNumArchs + arch index]
extern const int kNumDtypes;
extern const int kNumAlignClasses;   // forward ALIGN classes: ALIGN = 1 << class, class < kNumAlignClasses
extern const int kNumWeightSlots;
extern const int kNumNumerics;

// The one lookup of the built kernels: every kernel's key (kernel_keys.h's pack_kernel_key), ascending, and its
// variant (the index of kImages' rows).
extern const int kNumKernelKeys;
extern const unsigned long long kKernelKeys[];
extern const short kKeyVariants[];

// A key of a kind, a config and the dtypes; its other fields are 0 (none) until a caller sets them by name.
inline KernelKey kernel_key(KernelKind kind, int config, int x, int residual) {
    KernelKey k{};
    k.kind = kind;
    k.config = config;
    k.x = x;
    k.residual = residual;
    return k;
}

// The variant built for a key, or -1.
inline int find_kernel(const KernelKey& key) {
    const unsigned long long k = pack_kernel_key(key);
    int lo = 0, hi = kNumKernelKeys;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (kKernelKeys[mid] < k) lo = mid + 1; else hi = mid;
    }
    return lo < kNumKernelKeys && kKernelKeys[lo] == k ? kKeyVariants[lo] : -1;
}

// The backward: its configs and dispatch rule, its kernel (one for every weight dtype, read by its runtime dtype),
// and the dweight reduction's per weight dtype.
extern const int kNumBackwardConfigs;
extern const KernelConfig kBackwardConfigs[];
extern const int kNumQuantDtypes;
extern const int kNumQuantModes;    // the QUANT constexpr: addrmsnorm_quant_mode's six modes, 1 to 6
extern const int kDweightBlockC;
int select_backward_config(long long H, int x_itemsize, int residual_itemsize);

inline int backward_variant_index(int config, int x, int residual, bool aligned) {
    KernelKey k = kernel_key(KernelKind::Backward, config, x, residual);
    k.align_class = aligned ? 1 : 0;
    return find_kernel(k);
}
inline int dweight_variant_index(int weight) {
    KernelKey k = kernel_key(KernelKind::Dweight, 0, ADDRMSNORM_FLOAT32, ADDRMSNORM_FLOAT32);
    k.weight = weight;
    return find_kernel(k);
}
// The rotation's backward (rmsnorm_bwd with ROPE), and its config (configs.select_rope_backward_config:
// configs.ROPE_BACKWARD_TABLE's generated rule, 16-bit heads).
int select_rope_backward_table_config(long long H, int x_itemsize, int residual_itemsize);
inline int select_rope_backward_config(long long H) { return select_rope_backward_table_config(H, 2, 2); }
inline int rope_backward_variant_index(int config, int x, bool aligned) {
    KernelKey k = kernel_key(KernelKind::RopeBackward, config, x, x);
    k.align_class = aligned ? 1 : 0;
    return find_kernel(k);
}

// The rules that pick a call's kernel, generated from configs.py as tables of its answers
// (tools/aot_build.py, _call_rules): nothing here restates them.
// configs.forward_weight_arg: the forward is typed for a weight of x's dtype (slot 0) and for an
// fp32 weight (slot 1); any other weight runs the "w16" variant on its int16 bits (slot 2).
extern const signed char kWeightSlot[];     // [x][weight], addrmsnorm_dtype values
extern const signed char kNumericsMode[];   // [hf][weight_offset != 0][round_once][x_itemsize == 4]
extern const bool kVectorTyped[];           // [align class][x_itemsize == 4][residual_itemsize == 4][typed][numerics]
inline int weight_slot(int x, int weight) { return kWeightSlot[x * 3 + weight]; }

// The dispatch rule: H and the element sizes -> index into kConfigs (-1 if none); `quant`: 0 for the
// plain forward, else the quantized forward's QUANT mode, which alone takes configs.FORWARD_TABLE's
// rows whose quant_modes name it; `vector_typed`
// (is_vector_typed below) for the plain calls that alone take its vector_typed_only rows; `plain` for the
// plain norm's quantized calls, which alone take its plain_quant_only rows. Batch
// invariance rests on it never seeing the row count.
int select_forward_config(long long H, int x_itemsize, int residual_itemsize, int quant, bool vector_typed,
                          bool plain);
// configs.PLAIN_TABLE's rule, and configs.select_plain_config (the table of configs.PLAIN_TABLES for x's
// element size), both generated.
int select_plain_table_config(long long H, int x_itemsize, int residual_itemsize, int quant, bool vector_typed);
int select_plain_config(long long H, int x_itemsize, bool vector_typed);
// configs.SANDWICH_TABLE's rule (configs.select_sandwich_config), generated.
int select_sandwich_table_config(long long H, int x_itemsize, int residual_itemsize, int quant, bool vector_typed);

// The alignment rules (configs.align_elems, configs.backward_align): the ALIGN class to launch.
// `common` is H OR-ed with every row stride (stride 0 for a single row); pointers_aligned, whether
// every tensor pointer is kAlignmentBytes-aligned. Forward: ALIGN = 1 << class. Backward: 0 (ALIGN 1)
// or 1 (the 16-byte vector).
extern const int kAlignmentBytes;
// ends_only: HF numerics and the "w16" weight are built for ALIGN 1 and the vector only.
int forward_align_class(bool pointers_aligned, long long common, int x_itemsize, int residual_itemsize,
                        bool ends_only);
int backward_align_class(bool pointers_aligned, long long common, int x_itemsize, int residual_itemsize);

// The persistent backward grid (configs.backward_programs) and its workspace
// (configs.backward_workspace_floats, in bytes), for a backward config.
long long backward_programs(long long rows, int config, int sm_count);
unsigned long long backward_workspace_bytes(long long rows, long long hidden, int config, int sm_count);
// Whether a backward config's workspace holds a mean per row after its dweight partials (the looped
// path that walks its rows chunk by chunk).
extern const bool kBackwardRowMeans[];

// configs.numerics_mode: the HF_NUMERICS of a call. weight_offset is the fp32 value the kernel adds
// (configs asks whether it is nonzero as fp32: |w| > 2^-150).
inline int numerics_mode(bool hf, float weight_offset, int x_itemsize, bool round_once = false) {
    return kNumericsMode[((hf * 2 + (weight_offset != 0.0f)) * 2 + round_once) * 2 + (x_itemsize == 4)];
}

// configs.is_vector_typed: select_forward_config's vector_typed for a plain call.
inline bool is_vector_typed(int align_class, int x_itemsize, int residual_itemsize, bool weight_is_x_dtype,
                            int numerics) {
    return kVectorTyped[(((align_class * 2 + (x_itemsize == 4)) * 2 + (residual_itemsize == 4)) * 2 +
                         weight_is_x_dtype) * kNumNumerics + numerics];
}

// A forward kernel of a kind (the fused, plain, QK, sandwich, gated or pair kernels) for a call's dtypes (weight:
// its addrmsnorm_dtype, read as its weight slot), alignment class and numerics; the rotation's adds its variant.
inline int forward_variant(KernelKind kind, int config, int x, int residual, int weight, int align_class,
                           int numerics, int rope = 0, int pack = 0) {
    KernelKey k = kernel_key(kind, config, x, residual);
    k.weight = weight_slot(x, weight);
    k.align_class = align_class;
    k.numerics = numerics;
    k.rope = rope;
    k.pack = pack;
    return find_kernel(k);
}

inline int variant_index(int config, int x, int residual, int weight, int align_class, int numerics) {
    return forward_variant(KernelKind::Forward, config, x, residual, weight, align_class, numerics);
}

// The quantized forward's kernel: fused, plain, the sandwich norm's or the gated norm's (16-bit x, its weight).
inline int quant_variant_index(int config, int x, int quant_dtype, int quant, bool plain = false,
                               bool sandwich = false, bool gated = false) {
    const KernelKind kind = gated      ? KernelKind::GatedQuantForward
                            : sandwich ? KernelKind::SandwichQuantForward
                            : plain    ? KernelKind::PlainQuantForward
                                       : KernelKind::QuantForward;
    KernelKey k = kernel_key(kind, config, x, x);
    k.quant = quant;
    k.q = quant_dtype + 1;
    return find_kernel(k);
}

extern const int kWeightlessDtype;  // configs.WEIGHTLESS_DTYPE: the backward's weight_dtype with no weight
extern const int kQkMaxHeadDim;  // configs.QK_MAX_HEAD_DIM: the widest head the QK norm is built for

// v_heads: the kernel that also normalizes v's heads (Gemma 4's v_norm; V_HEADS).
inline int qk_variant_index(int config, int x, int weight, int align_class, int numerics, bool v_heads = false) {
    return forward_variant(v_heads ? KernelKind::QkvForward : KernelKind::QkForward, config, x, x, weight, align_class,
                           numerics);
}

inline int sandwich_variant_index(int config, int x, int weight, int align_class, int numerics) {
    return forward_variant(KernelKind::SandwichForward, config, x, x, weight, align_class, numerics);
}

extern const int kGatedMaxGroup;  // configs.GATED_MAX_GROUP: the widest group the gated norm is built for
// configs.GATED_TABLE's rule (configs.select_gated_config), generated.
int select_gated_table_config(long long H, int x_itemsize, int residual_itemsize, int quant, bool vector_typed);

inline int gated_variant_index(int config, int x, int weight, int align_class, int numerics) {
    return forward_variant(KernelKind::GatedForward, config, x, x, weight, align_class, numerics);
}

inline int plain_variant_index(int config, int x, int weight, int align_class, int numerics) {
    return forward_variant(KernelKind::PlainForward, config, x, x, weight, align_class, numerics);
}

// The plain norm's kernel for a call (the QK norm's with qk), as the JIT launcher picks it: the alignment
// class of the pointers, H and every stride (OR-ed into `strides`; 0 for a single row), the numerics,
// then the config (*config) and the variant (-1: none built). The QK norm, like HF numerics and the
// "w16" weight, is built for ALIGN 1 and the vector alone.
extern const int kNumRopeVariants;  // configs.ROPE_VARIANTS: (angle dtype x's or fp32) x (positions none, i32, i64)

// The rotation's variant of a call (angle_x: the angles of x's dtype; positions: 0 none, 1 int32, 2 int64).
inline int rope_variant_index(int config, int x, int weight, int align_class, int numerics, bool angle_x,
                              int positions, bool v_heads = false) {
    return forward_variant(v_heads ? KernelKind::RopeVForward : KernelKind::RopeForward, config, x, x, weight,
                           align_class, numerics, 1 + (angle_x ? 0 : 3) + positions);
}

// configs.ROPE_TABLE's and ROPE_MISALIGNED_TABLE's rules, generated; configs.select_rope_config: heads on the
// 16-byte vector take the first, others the misaligned table's.
int select_rope_table_config(long long H, int x_itemsize, int residual_itemsize, int quant, bool vector_typed);
int select_rope_misaligned_table_config(long long H, int x_itemsize, int residual_itemsize, int quant,
                                        bool vector_typed);
inline int select_rope_config(long long H, bool aligned) {
    return aligned ? select_rope_table_config(H, 2, 2, 0, false)
                   : select_rope_misaligned_table_config(H, 2, 2, 0, false);
}

// rope: -1 for no rotation, else its variant's last index (rope_variant_index's (angle_x ? 0 : 3) + positions);
// angles_aligned: the rotation's cos and sin pointers are 16-byte aligned (their strides and rotary_dim are OR-ed
// into `strides`); v_heads: the QK norm's kernels that also normalize v's heads.
inline int plain_call_variant(const void* x, const void* weight, const void* weight2, const void* out, long long hidden,
                              long long strides, addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype,
                              float weight_offset, bool hf, bool round_once, bool qk, int* config, int rope = -1,
                              bool angles_aligned = true, bool v_heads = false) {
    auto aligned = [](const void* p) { return reinterpret_cast<unsigned long long>(p) % kAlignmentBytes == 0; };
    const bool pointers_aligned = aligned(x) && aligned(weight) && aligned(weight2) && aligned(out) && angles_aligned;
    const bool ends_only = hf || qk || rope >= 0 || weight_slot(x_dtype, weight_dtype) == 2;
    const int xs = x_dtype == ADDRMSNORM_FLOAT32 ? 4 : 2;
    const int align_class = forward_align_class(pointers_aligned, hidden | strides, xs, xs, ends_only);
    const int numerics = numerics_mode(hf, weight_offset, xs, round_once);
    const bool vector_typed = is_vector_typed(align_class, xs, xs, weight_dtype == x_dtype, numerics);
    *config = rope >= 0 ? select_rope_config(hidden, align_class > 0) : select_plain_config(hidden, xs, vector_typed);
    if (*config < 0) return -1;
    if (rope >= 0)
        return rope_variant_index(*config, x_dtype, weight_dtype, align_class, numerics, rope < 3, rope % 3, v_heads);
    return qk ? qk_variant_index(*config, x_dtype, weight_dtype, align_class, numerics, v_heads)
              : plain_variant_index(*config, x_dtype, weight_dtype, align_class, numerics);
}

extern const int kPairMaxWidth;  // configs.PAIR_MAX_WIDTH: the widest part the pair is built for
// The variants' admission rules, generated from configs.py (validation.py reads the same): VARIANT_ALIGN, the
// sandwich norm's, the pair's and the rotation's dtypes (bits of addrmsnorm_dtype; the gated norm takes every
// dtype), and the quantized outputs built for the sandwich and gated norms (bits of (mode, quant dtype)).
extern const int kVariantAlign;
extern const unsigned kSandwichDtypes, kPairDtypes, kRopeDtypes;
extern const unsigned kSandwichQuant, kGatedQuant;
// The quantized outputs' rules (configs.QUANT_ACTIVATION_DTYPES, QUANT_ALIGN, QUANT_GROUP_SIZES, BLOCK_QUANT_SIZE):
// x's dtypes (bits of addrmsnorm_dtype), the alignment in elements, the per-group sizes, each mode's block
// (kBlockQuantSize[mode - 1], 0 outside the block formats).
extern const unsigned kQuantActivationDtypes;
extern const int kQuantAlign, kNumQuantGroupSizes;
extern const int kQuantGroupSizes[], kBlockQuantSize[];
// The swizzled scale layout's tile (configs.SWIZZLE_ROWS, SWIZZLE_BLOCKS): rows and blocks rounded up to it.
extern const int kSwizzleRows, kSwizzleBlocks;
inline int64_t swizzled_rows(int64_t rows) { return (rows + kSwizzleRows - 1) / kSwizzleRows * kSwizzleRows; }
inline int64_t swizzled_blocks(int64_t blocks) { return (blocks + kSwizzleBlocks - 1) / kSwizzleBlocks * kSwizzleBlocks; }

inline bool takes_dtype(unsigned dtypes, int dtype) { return dtype >= 0 && dtype < 32 && ((dtypes >> dtype) & 1u); }

// Whether built (kSandwichQuant or kGatedQuant) has the quantized output of mode (1-6) in quant_dtype; with
// quant_dtype -1, in any dtype.
inline bool quant_built(unsigned built, int mode, int quant_dtype) {
    if (mode < 1 || (mode - 1) * kNumQuantDtypes >= 32 || quant_dtype < -1 || quant_dtype >= kNumQuantDtypes) return false;
    const unsigned of_mode = (built >> ((mode - 1) * kNumQuantDtypes)) & ((1u << kNumQuantDtypes) - 1);
    return quant_dtype < 0 ? of_mode != 0 : ((of_mode >> quant_dtype) & 1u);
}
extern const int kNumRopeStyles;    // configs.ROPE_STYLES
extern const bool kRopeOnVector[];  // configs.rope_on_vector: [style][rotary_dim == head_dim]
// configs.rope_on_vector: whether a rotation may take the vector kernels (given its heads' and angles' alignment).
inline bool rope_on_vector(int style, long long rotary_dim, long long head_dim) {
    return style >= 0 && style < kNumRopeStyles && kRopeOnVector[style * 2 + (rotary_dim == head_dim ? 1 : 0)];
}
extern const bool kRopeFp32WeightsWithPositions;  // configs.ROPE_FP32_WEIGHTS_WITH_POSITIONS: fp32 weights built
                                                 // for the rotation by positions into a cache (else refused)
// configs.PAIR_TABLE's rule (configs.select_pair_config), generated.
int select_pair_table_config(long long H, int x_itemsize, int residual_itemsize, int quant, bool vector_typed);
// configs.pair_pack, generated: the index in kPairPacks (configs.PAIR_PACKS) of the narrower part's pack.
int pair_pack_index(int block_h, long long narrower);
extern const int kPairPacks[];
// configs.pair_grid's second term: the narrower part's rows in programs of rows_per_program * pack each.
inline long long pair_packed_programs(long long rows, int rows_per_program, int pack) {
    const long long per = static_cast<long long>(rows_per_program) * pack;
    return (rows + per - 1) / per;
}

// The pair's kernel for a call, as the JIT launcher picks it: vector-aligned rows alone (validation refuses
// others), the contract or HF's Llama form, the config by the wider part (the first: forward.cpp puts it there),
// the narrower packed (*pack, configs.pair_pack).
inline int pair_call_variant(const void* const* pointers, int n_pointers, long long widths, long long wider,
                             long long narrower, long long strides, addrmsnorm_dtype x_dtype,
                             addrmsnorm_dtype weight_dtype, float weight_offset, bool hf, int* config, int* pack) {
    bool pointers_aligned = true;
    for (int i = 0; i < n_pointers; ++i)
        pointers_aligned = pointers_aligned && reinterpret_cast<unsigned long long>(pointers[i]) % kAlignmentBytes == 0;
    const int align_class = forward_align_class(pointers_aligned, widths | strides, 2, 2, true);
    const int numerics = numerics_mode(hf, weight_offset, 2);
    *config = select_pair_table_config(wider, 2, 2, 0, false);
    if (*config < 0) return -1;
    const int pack_index = pair_pack_index(kConfigs[*config].block_h, narrower);
    *pack = kPairPacks[pack_index];
    return forward_variant(KernelKind::PairForward, *config, x_dtype, x_dtype, weight_dtype, align_class, numerics, 0,
                           pack_index);
}

// The gated norm's kernel for a call, as the JIT launcher picks it: vector-aligned rows alone are built
// (validation refuses others), the contract or HF's form, the config by the group (hidden).
inline int gated_call_variant(const void* x, const void* weight, const void* z, const void* out, long long hidden,
                              long long strides, addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype,
                              float weight_offset, bool hf, int* config) {
    auto aligned = [](const void* p) { return reinterpret_cast<unsigned long long>(p) % kAlignmentBytes == 0; };
    const bool pointers_aligned = aligned(x) && aligned(weight) && aligned(z) && aligned(out);
    const int xs = x_dtype == ADDRMSNORM_FLOAT32 ? 4 : 2;
    const int align_class = forward_align_class(pointers_aligned, hidden | strides, xs, xs, true);
    const int numerics = numerics_mode(hf, weight_offset, xs);
    *config = select_gated_table_config(hidden, xs, xs, 0, false);
    if (*config < 0) return -1;
    return gated_variant_index(*config, x_dtype, weight_dtype, align_class, numerics);
}

}  // namespace detail
}  // namespace addrmsnorm

extern "C" const unsigned char addrmsnorm_cubin_blob[];
