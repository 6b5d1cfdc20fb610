// The generated kernel table (build/generated/kernel_table.cpp, written by tools/aot_build.py from
// addrmsnorm/configs.py): every compiled specialization, its cubin per arch, and the dispatch rule.
#pragma once

namespace addrmsnorm {
namespace detail {

struct ForwardConfig {
    int block_h;           // columns per tile (single pass: >= H; looped: the chunk)
    int rows_per_program;  // rows per program
    int num_warps;
    bool looped;
};

struct KernelVariant {
    int kind;              // 0: forward, 1: backward, 2: dweight reduction
    int config;            // index into kConfigs (forward) or kBackwardConfigs
    int x_dtype, residual_dtype, weight_dtype;  // addrmsnorm_dtype values
    bool has_rstd;         // backward: has a dresidual_out
    int align_class;       // forward: ALIGN = 1 << align_class (configs.align_classes); backward: 0
                           // (ALIGN 1) or 1 (the vector). ALIGN > 1 also promises 16-byte aligned
                           // pointers, and H and strides multiples of ALIGN
    bool hf;               // HF_NUMERICS
};

struct CubinImage {
    unsigned offset;       // into addrmsnorm_cubin_blob
    unsigned size;
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
extern const ForwardConfig kConfigs[];
extern const int kNumVariants;
extern const KernelVariant kVariants[];
extern const CubinImage kImages[];  // [variant * kNumArchs + arch index]
extern const int kNumDtypes;
extern const int kNumAlignClasses;   // forward ALIGN classes: ALIGN = 1 << class, class < kNumAlignClasses
extern const short kVariantIndex[];  // [config][x][residual][weight][has_rstd][align_class][hf] -> variant | -1

// The backward: its configs and dispatch rule, [config][x][residual][weight][has_dres_out][aligned]
// -> variant, and the dweight reduction's variant per weight dtype.
extern const int kNumBackwardConfigs;
extern const ForwardConfig kBackwardConfigs[];
extern const short kBackwardIndex[];
extern const short kDweightIndex[];
extern const int kDweightBlockC;
int select_backward_config(long long H, int x_itemsize, int residual_itemsize);

inline int backward_variant_index(int config, int x, int residual, int weight, bool has_dres_out, bool aligned) {
    const int n = kNumDtypes;
    return kBackwardIndex[((((config * n + x) * n + residual) * n + weight) * 2 + (has_dres_out ? 1 : 0)) * 2 +
                          (aligned ? 1 : 0)];
}

// The dispatch rule: H and the element sizes -> index into kConfigs (-1 if none). Batch
// invariance rests on it never seeing the row count.
int select_forward_config(long long H, int x_itemsize, int residual_itemsize);

// The alignment rules (configs.align_elems, configs.backward_align): the ALIGN class to launch.
// `common` is H OR-ed with every row stride (stride 0 for a single row); pointers_aligned, whether
// every tensor pointer is kAlignmentBytes-aligned. Forward: ALIGN = 1 << class. Backward: 0 (ALIGN 1)
// or 1 (the 16-byte vector).
extern const int kAlignmentBytes;
int forward_align_class(bool pointers_aligned, long long common, int x_itemsize, int residual_itemsize, bool hf);
int backward_align_class(bool pointers_aligned, long long common, int x_itemsize, int residual_itemsize);

// The persistent backward grid (configs.backward_programs) and its workspace
// (configs.backward_workspace_floats, in bytes), for a backward config.
long long backward_programs(long long rows, int config, int sm_count);
unsigned long long backward_workspace_bytes(long long rows, long long hidden, int config, int sm_count);

inline int variant_index(int config, int x, int residual, int weight, bool has_rstd, int align_class, bool hf) {
    const int n = kNumDtypes;
    return kVariantIndex[(((((config * n + x) * n + residual) * n + weight) * 2 + (has_rstd ? 1 : 0)) *
                              kNumAlignClasses + align_class) * 2 + (hf ? 1 : 0)];
}

}  // namespace detail
}  // namespace addrmsnorm

extern "C" const unsigned char addrmsnorm_cubin_blob[];
