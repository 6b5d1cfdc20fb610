// Host-side tests: they need no GPU and no driver. Validation (the same cases as the Python API's),
// the generated dispatch rule against the Python one, and the kernel table.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "addrmsnorm/addrmsnorm.h"
#include "addrmsnorm/addrmsnorm.hpp"
#include "kernel_table.h"

namespace {
// What each variant is (KernelVariant, kVariants), in kernel_table.cpp's order: generated for these tests alone.
using addrmsnorm::detail::KernelKind;
#include "variants.inc"
}  // namespace

namespace {

using addrmsnorm::detail::kConfigs;

// Fake device addresses: validation never dereferences them.
uintptr_t base(int i) { return (uintptr_t)0x10000000u * (uintptr_t)(i + 1); }

struct Call {
    uintptr_t x = base(0), residual = base(1), weight = base(2), out = base(3), residual_out = base(4);
    uintptr_t rstd = 0;
    int64_t rows = 5, hidden = 96;
    int64_t sx = 96, sr = 96, so = 96, sro = 96;
    addrmsnorm_dtype xd = ADDRMSNORM_BFLOAT16, rd = ADDRMSNORM_BFLOAT16, wd = ADDRMSNORM_BFLOAT16;
    float eps = 1e-6f, offset = 0.0f;
    uint32_t flags = 0;

    addrmsnorm_status check() const {
        return addrmsnorm_fused_add_rmsnorm_check((const void*)x, (const void*)residual, (const void*)weight,
                                                  (const void*)out, (const void*)residual_out, (const float*)rstd,
                                                  rows, hidden, sx, sr, so, sro, xd, rd, wd, eps, offset, flags);
    }
};

void expect_error(const Call& c, addrmsnorm_status want, const std::string& needle) {
    const addrmsnorm_status got = c.check();
    EXPECT_EQ(got, want) << addrmsnorm_last_error();
    EXPECT_NE(std::string(addrmsnorm_last_error()).find(needle), std::string::npos)
        << "message \"" << addrmsnorm_last_error() << "\" does not mention \"" << needle << "\"";
}

TEST(Validation, ValidCallPasses) {
    Call c;
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
}

TEST(Validation, BadEps) {
    Call c;
    for (float eps : {0.0f, -1e-6f}) {
        c.eps = eps;
        expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "eps must be > 0");
    }
    for (float eps : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        c.eps = eps;
        expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "eps must be finite");
    }
}

TEST(Validation, BadWeightOffset) {
    Call c;
    c.offset = std::numeric_limits<float>::quiet_NaN();
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "weight_offset must be finite");
}

TEST(Validation, HiddenZeroOrHuge) {
    Call c;
    c.hidden = 0;
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "hidden (H) must be > 0");
    c.hidden = int64_t(1) << 31;
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "hidden (H) must be < 2^31");
}

TEST(Validation, Rows) {
    Call c;
    c.rows = -1;
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rows must be >= 0");
    c.rows = 0;  // a no-op: even NULL pointers are fine
    c.x = c.residual = c.weight = c.out = c.residual_out = 0;
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS);
}

TEST(Validation, Dtypes) {
    Call c;
    c.xd = (addrmsnorm_dtype)7;
    expect_error(c, ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "x_dtype 7");
    c = Call();
    c.wd = (addrmsnorm_dtype)-1;
    expect_error(c, ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "weight_dtype");
    c = Call();
    c.xd = ADDRMSNORM_FLOAT16;
    c.rd = ADDRMSNORM_BFLOAT16;
    expect_error(c, ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "residual_dtype is bfloat16; it must be x_dtype (float16) or float32");
    c.rd = ADDRMSNORM_FLOAT32;  // an fp32 residual stream is fine
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
}

TEST(Validation, NullAndMisalignedPointers) {
    Call c;
    c.weight = 0;  // the weightless norm
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    c.offset = 1.0f;
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "weight_offset is 1 but weight is NULL");
    c = Call();
    c.residual_out += 1;
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "residual_out is not aligned");
    c = Call();
    c.rstd = base(5) + 2;
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rstd is not aligned");
}

TEST(Validation, NegativeStride) {
    Call c;
    c.sr = -96;
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "stride_residual must be >= 0");
}

TEST(Validation, OutputOverlapsItself) {
    Call c;
    c.so = 48;
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "out: row stride 48 < H=96");
    c.rows = 1;  // one row has no stride to overlap with
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
}

TEST(Validation, OutputsOverlapEachOther) {
    Call c;
    c.residual_out = c.out;
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "out and residual_out overlap");
    c = Call();
    c.out = c.residual_out = c.x;  // both in place on x
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "out and residual_out overlap");
}

TEST(Validation, ExactAliasingIsAllowed) {
    Call c;
    c.out = c.x;
    c.residual_out = c.residual;  // vLLM / FlashInfer in place
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    c = Call();
    c.residual_out = c.x;  // x <- h
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    c = Call();
    c.out = c.residual;
    c.residual_out = c.x;
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
}

TEST(Validation, PartialOverlap) {
    Call c;
    c.out = c.x + 96 * 2;  // one row further on
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "out partly overlaps x");
    c = Call();
    c.out = c.x;
    c.so = 200;  // same pointer, other stride
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "out partly overlaps x");
    c = Call();
    c.rd = ADDRMSNORM_FLOAT32;
    c.out = c.residual;  // bf16 out over an fp32 residual: not an exact alias
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "out partly overlaps residual");
}

TEST(Validation, OutputOverlapsWeight) {
    Call c;
    c.residual_out = c.weight;
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "residual_out overlaps weight");
}

TEST(Validation, RstdOverlap) {
    Call c;
    c.rstd = c.out + 8;
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rstd overlaps out");
}

TEST(Validation, DisjointHalvesOfOneBuffer) {
    Call c;  // out and residual_out as the two halves of a [rows, 2*hidden] buffer
    c.out = base(7);
    c.residual_out = base(7) + 96 * 2;
    c.so = c.sro = 192;
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
}

TEST(Validation, Flags) {
    Call c;
    c.flags = 4;
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "flags has unknown bits 0x4");
    c.flags = ADDRMSNORM_FLAG_PDL | 16;
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "flags has unknown bits 0x10");
    c.flags = ADDRMSNORM_FLAG_PDL | ADDRMSNORM_FLAG_X_SCALE;  // through the 0.1 entry point: x_scale is 0
    expect_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "x_scale is 0");
    c.flags = ADDRMSNORM_FLAG_PDL;
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    c.flags = ADDRMSNORM_FLAG_HF_NUMERICS | ADDRMSNORM_FLAG_PDL;
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    c.flags = ADDRMSNORM_FLAG_HF_NUMERICS;
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    c.rd = ADDRMSNORM_FLOAT32;  // HF numerics need the residual in x's dtype
    expect_error(c, ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "ADDRMSNORM_NUMERICS_HF needs residual_dtype");
    c.rd = c.xd;
    c.wd = ADDRMSNORM_FLOAT32;  // and the weight in x's dtype, as HF's module keeps it
    expect_error(c, ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "ADDRMSNORM_NUMERICS_HF needs weight_dtype");
    c.flags = 0;
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();  // the contract takes any weight
}

TEST(Validation, LaunchValidatesBeforeTheDriver) {
    // With bad arguments the launch fails as invalid, whether or not a driver exists.
    EXPECT_EQ(addrmsnorm_fused_add_rmsnorm((void*)base(0), (void*)base(1), (void*)base(2), (void*)base(3),
                                           (void*)base(4), nullptr, 4, 0, 0, 0, 0, 0, ADDRMSNORM_BFLOAT16,
                                           ADDRMSNORM_BFLOAT16, ADDRMSNORM_BFLOAT16, 1e-6f, 0.f, 0, nullptr),
              ADDRMSNORM_ERROR_INVALID_ARGUMENT);
}

TEST(Status, Strings) {
    for (int s = 0; s <= 6; ++s) {
        const std::string str = addrmsnorm_status_string((addrmsnorm_status)s);
        EXPECT_FALSE(str.empty());
        EXPECT_NE(str, "unknown status");
    }
    EXPECT_STREQ(addrmsnorm_status_string((addrmsnorm_status)99), "unknown status");
}

TEST(Status, CppWrapperCarriesTheMessage) {
    addrmsnorm::ForwardArgs a;
    a.rows = 3;
    a.hidden = 0;
    const addrmsnorm::Status st = addrmsnorm::fused_add_rmsnorm(a);
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(st.code, ADDRMSNORM_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(st.message.find("hidden"), std::string::npos);
}

// The rule a generated case holds the C++ to: the forward's (quantized or not), or a variant's table.
enum class DispatchRule { kForward, kPlain, kSandwich, kGated, kPair, kRope };

struct DispatchCase {
    DispatchRule rule;
    long long H;
    int x_size, residual_size;
    int quant;  // 0: the plain forward; else the quantized forward's QUANT mode
    bool vector_typed;
    bool plain;  // a quantized call of the plain norm
    int block_h, rows_per_program, num_warps;
    bool looped;
    int config;  // the config's index in kConfigs (configs of one tile may differ in their flags)
};
const DispatchCase kCases[] = {
#include "dispatch_cases.inc"
};

TEST(Dispatch, GeneratedRuleMatchesThePythonRule) {
    for (const DispatchCase& c : kCases) {
        int i = -1;
        switch (c.rule) {
            case DispatchRule::kForward:
                i = addrmsnorm::detail::select_forward_config(c.H, c.x_size, c.residual_size, c.quant, c.vector_typed,
                                                              c.plain);
                break;
            case DispatchRule::kPlain:
                i = addrmsnorm::detail::select_plain_config(c.H, c.x_size, c.vector_typed);
                break;
            case DispatchRule::kSandwich:
                i = addrmsnorm::detail::select_sandwich_table_config(c.H, c.x_size, c.residual_size, 0, false);
                break;
            case DispatchRule::kGated:
                i = addrmsnorm::detail::select_gated_table_config(c.H, c.x_size, c.residual_size, 0, false);
                break;
            case DispatchRule::kPair:
                i = addrmsnorm::detail::select_pair_table_config(c.H, c.x_size, c.residual_size, 0, false);
                break;
            case DispatchRule::kRope:  // vector_typed: the heads on the 16-byte vector
                i = addrmsnorm::detail::select_rope_config(c.H, c.vector_typed);
                break;
        }
        ASSERT_GE(i, 0);
        EXPECT_EQ(kConfigs[i].block_h, c.block_h) << "H=" << c.H << " rule " << static_cast<int>(c.rule) << " quant "
                                                  << c.quant << " vt " << c.vector_typed;
        EXPECT_EQ(kConfigs[i].rows_per_program, c.rows_per_program) << "H=" << c.H << " quant " << c.quant;
        EXPECT_EQ(kConfigs[i].num_warps, c.num_warps) << "H=" << c.H << " quant " << c.quant;
        EXPECT_EQ(kConfigs[i].looped, c.looped) << "H=" << c.H << " quant " << c.quant;
        EXPECT_EQ(i, c.config) << "H=" << c.H << " rule " << static_cast<int>(c.rule) << " quant " << c.quant
                               << " vt " << c.vector_typed;
    }
}

// Every (x, residual) dtype pair the kernels accept (configs.ACTIVATION_PAIRS).
const addrmsnorm_dtype kActivationPairs[5][2] = {{ADDRMSNORM_FLOAT16, ADDRMSNORM_FLOAT16},
                                                 {ADDRMSNORM_BFLOAT16, ADDRMSNORM_BFLOAT16},
                                                 {ADDRMSNORM_FLOAT32, ADDRMSNORM_FLOAT32},
                                                 {ADDRMSNORM_FLOAT16, ADDRMSNORM_FLOAT32},
                                                 {ADDRMSNORM_BFLOAT16, ADDRMSNORM_FLOAT32}};

TEST(Dispatch, EverySupportedCallHasAKernelForEveryArch) {
    using namespace addrmsnorm::detail;
    for (long long H : {1LL, 64LL, 111LL, 4096LL, 11111LL, 16384LL, 16385LL, 24576LL, 32767LL, 32768LL, 262144LL})
        for (const auto& p : kActivationPairs)
            for (int w = 0; w < 3; ++w)
                    for (int align_class = 0; align_class < kNumAlignClasses; ++align_class)
                    for (bool hf : {false, true})
                    for (float weight_offset : {0.0f, 1.0f}) {
                        if (H % 2 == 1 && align_class > 0) continue;  // odd rows: ALIGN 1 only
                        if (hf && (p[0] != p[1] || w != p[0])) continue;  // HF: residual and weight of x's dtype
                        const int xs = p[0] == ADDRMSNORM_FLOAT32 ? 4 : 2, rs = p[1] == ADDRMSNORM_FLOAT32 ? 4 : 2;
                        const int numerics = numerics_mode(hf, weight_offset, xs);
                        // Only the classes the alignment rule can return: with every pointer aligned,
                        // `common` = 1 << align_class asks for exactly that class, if it is built.
                        const bool ends_only = hf || weight_slot(p[0], w) == 2;
                        if (forward_align_class(true, 1LL << align_class, xs, rs, ends_only) != align_class) continue;
                        const bool vt = is_vector_typed(align_class, xs, rs, w == p[0], numerics);
                        const int cfg = select_forward_config(H, xs, rs, 0, vt, false);
                        const int v = variant_index(cfg, p[0], p[1], w, align_class, numerics);
                        ASSERT_GE(v, 0) << "H=" << H << " align class " << align_class;
                        EXPECT_EQ(kVariants[v].kind, KernelKind::Forward);
                        EXPECT_EQ(kVariants[v].config, cfg);
                        EXPECT_EQ(kVariants[v].x_dtype, p[0]);
                        EXPECT_EQ(kVariants[v].residual_dtype, p[1]);
                        EXPECT_EQ(kVariants[v].weight, w == p[0] ? 0 : w == ADDRMSNORM_FLOAT32 ? 1 : 2);
                        EXPECT_EQ(kVariants[v].align_class, align_class);
                        EXPECT_EQ(kVariants[v].numerics, numerics);
                        for (int a = 0; a < kNumArchs; ++a) {
                            const CubinImage& img = kImages[v * kNumArchs + a];
                            EXPECT_GT(img.size, 0u);
                            EXPECT_EQ(img.global_scratch_size, 0u);
                            EXPECT_EQ(img.profile_scratch_size, 0u);
                            EXPECT_EQ(img.num_warps, kConfigs[cfg].num_warps);
                            EXPECT_EQ(img.grid_dependency, kArchs[a] >= 90) << "arch " << kArchs[a];
                        }
                    }
}

TEST(Dispatch, EveryBackwardCallHasAKernelForEveryArch) {
    using namespace addrmsnorm::detail;
    for (long long H : {1LL, 64LL, 111LL, 4096LL, 8192LL, 8193LL, 262144LL})
        for (const auto& p : kActivationPairs)
            for (bool aligned : {false, true}) {
                const int xs = p[0] == ADDRMSNORM_FLOAT32 ? 4 : 2, rs = p[1] == ADDRMSNORM_FLOAT32 ? 4 : 2;
                const int cfg = select_backward_config(H, xs, rs);
                const int v = backward_variant_index(cfg, p[0], p[1], aligned);
                ASSERT_GE(v, 0) << "H=" << H;
                EXPECT_EQ(kVariants[v].kind, KernelKind::Backward);
                EXPECT_EQ(kVariants[v].config, cfg);
                EXPECT_EQ(kVariants[v].x_dtype, p[0]);
                EXPECT_EQ(kVariants[v].residual_dtype, p[1]);
                EXPECT_EQ(kVariants[v].weight, -1);  // every weight dtype, by its runtime dtype
                EXPECT_EQ(kVariants[v].align_class, aligned ? 1 : 0);
                for (int a = 0; a < kNumArchs; ++a) {
                    EXPECT_GT(kImages[v * kNumArchs + a].size, 0u);
                    EXPECT_EQ(kImages[v * kNumArchs + a].num_warps, kBackwardConfigs[cfg].num_warps);
                }
            }
    // The rotation's backward: 16-bit heads up to kQkMaxHeadDim, its own table's rule.
    for (long long H : {2LL, 64LL, 66LL, 128LL, 200LL, 256LL, 512LL})
        for (int x : {ADDRMSNORM_FLOAT16, ADDRMSNORM_BFLOAT16})
            for (bool aligned : {false, true}) {
                const int cfg = select_rope_backward_config(H);
                ASSERT_GE(cfg, 0) << "H=" << H;
                const int v = rope_backward_variant_index(cfg, x, aligned);
                ASSERT_GE(v, 0) << "H=" << H;
                EXPECT_EQ(kVariants[v].kind, KernelKind::RopeBackward);
                EXPECT_EQ(kVariants[v].config, cfg);
                EXPECT_EQ(kVariants[v].x_dtype, x);
                EXPECT_EQ(kVariants[v].align_class, aligned ? 1 : 0);
                EXPECT_FALSE(kBackwardConfigs[cfg].looped);
                EXPECT_GE(kBackwardConfigs[cfg].block_h, H);
                for (int a = 0; a < kNumArchs; ++a) EXPECT_GT(kImages[v * kNumArchs + a].size, 0u);
            }
    EXPECT_LT(select_rope_backward_config(kQkMaxHeadDim + 1), 0);
    for (int w = 0; w < 3; ++w) {
        ASSERT_GE(dweight_variant_index(w), 0);
        EXPECT_EQ(kVariants[dweight_variant_index(w)].kind, KernelKind::Dweight);
        EXPECT_EQ(kVariants[dweight_variant_index(w)].weight, w);
    }
}

struct AlignCase {
    bool pointers_aligned;
    long long H, stride;
    int x_size, residual_size;
    bool ends_only;
    int forward_class, backward_class;
};
const AlignCase kAlignCases[] = {
#define ADDRMSNORM_ALIGN_CASES
#include "rule_cases.inc"
#undef ADDRMSNORM_ALIGN_CASES
};

TEST(Dispatch, GeneratedAlignmentRulesMatchThePythonRules) {
    using namespace addrmsnorm::detail;
    for (const AlignCase& c : kAlignCases) {
        const long long common = c.H | c.stride;
        EXPECT_EQ(forward_align_class(c.pointers_aligned, common, c.x_size, c.residual_size, c.ends_only),
                  c.forward_class)
            << "H=" << c.H << " stride=" << c.stride << " sizes " << c.x_size << "/" << c.residual_size
            << " ends_only=" << c.ends_only;
        EXPECT_EQ(backward_align_class(c.pointers_aligned, common, c.x_size, c.residual_size), c.backward_class)
            << "H=" << c.H << " stride=" << c.stride << " sizes " << c.x_size << "/" << c.residual_size;
    }
}

struct GridCase {
    long long rows, H;
    int x_size, residual_size, sms;
    long long programs;
    unsigned long long workspace_bytes;
};
const GridCase kGridCases[] = {
#define ADDRMSNORM_BACKWARD_GRID_CASES
#include "rule_cases.inc"
#undef ADDRMSNORM_BACKWARD_GRID_CASES
};

TEST(Dispatch, GeneratedBackwardGridMatchesThePythonRule) {
    using namespace addrmsnorm::detail;
    for (const GridCase& c : kGridCases) {
        const int config = select_backward_config(c.H, c.x_size, c.residual_size);
        ASSERT_GE(config, 0);
        EXPECT_EQ(backward_programs(c.rows, config, c.sms), c.programs) << "rows=" << c.rows << " H=" << c.H;
        EXPECT_EQ(backward_workspace_bytes(c.rows, c.H, config, c.sms), c.workspace_bytes)
            << "rows=" << c.rows << " H=" << c.H << " sms=" << c.sms;
    }
}

struct NumericsCase {
    bool hf;
    float weight_offset;
    int x_itemsize, mode;
};
const NumericsCase kNumericsCases[] = {
#define ADDRMSNORM_NUMERICS_CASES
#include "rule_cases.inc"
#undef ADDRMSNORM_NUMERICS_CASES
};

// kernel_table.h's numerics_mode reads a table generated from configs: hold it to configs.numerics_mode's answers,
// including offsets that are zero only once rounded to fp32 (7e-46) and those that are not (1e-45).
TEST(Dispatch, NumericsModeMatchesThePythonRule) {
    using namespace addrmsnorm::detail;
    for (const NumericsCase& c : kNumericsCases)
        EXPECT_EQ(numerics_mode(c.hf, c.weight_offset, c.x_itemsize), c.mode)
            << "hf=" << c.hf << " weight_offset=" << c.weight_offset << " x_itemsize=" << c.x_itemsize;
}

struct VectorTypedCase {
    int align_class, x_itemsize, residual_itemsize;
    bool weight_is_x_dtype;
    int numerics;
    bool vector_typed;
};
const VectorTypedCase kVectorTypedCases[] = {
#define ADDRMSNORM_VECTOR_TYPED_CASES
#include "rule_cases.inc"
#undef ADDRMSNORM_VECTOR_TYPED_CASES
};

// kernel_table.h's is_vector_typed reads a generated table: hold it to configs.is_vector_typed's answers.
TEST(Dispatch, VectorTypedMatchesThePythonRule) {
    using namespace addrmsnorm::detail;
    for (const VectorTypedCase& c : kVectorTypedCases)
        EXPECT_EQ(is_vector_typed(c.align_class, c.x_itemsize, c.residual_itemsize, c.weight_is_x_dtype, c.numerics),
                  c.vector_typed)
            << "align class " << c.align_class << " x " << c.x_itemsize << " residual " << c.residual_itemsize
            << " typed " << c.weight_is_x_dtype << " numerics " << c.numerics;
}

struct PairCase {
    long long rows, wider, narrower;
    int block_h, pack;
    long long split, programs;
};
const PairCase kPairCases[] = {
#define ADDRMSNORM_PAIR_CASES
#include "rule_cases.inc"
#undef ADDRMSNORM_PAIR_CASES
};

// The pair's config, its narrower part's pack and the grid, as forward.cpp reaches them: configs.pair_pack's and
// configs.pair_grid's answers.
TEST(Dispatch, PairPackAndGridMatchThePythonRules) {
    using namespace addrmsnorm::detail;
    for (const PairCase& c : kPairCases) {
        const int config = select_pair_table_config(c.wider, 2, 2, 0, false);
        ASSERT_GE(config, 0) << c.wider;
        const KernelConfig& cfg = kConfigs[config];
        EXPECT_EQ(cfg.block_h, c.block_h) << c.wider;
        const int pack = kPairPacks[pair_pack_index(cfg.block_h, c.narrower)];
        EXPECT_EQ(pack, c.pack) << c.wider << " + " << c.narrower;
        const long long split = (c.rows + cfg.rows_per_program - 1) / cfg.rows_per_program;
        EXPECT_EQ(split, c.split);
        EXPECT_EQ(split + pair_packed_programs(c.rows, cfg.rows_per_program, pack), c.programs)
            << c.rows << " rows, " << c.wider << " + " << c.narrower;
    }
}

TEST(Dispatch, BuiltArchsAreListed) {
    const std::string archs = addrmsnorm_built_archs();
    EXPECT_NE(archs.find("sm_"), std::string::npos);
}

}  // namespace

// ----- backward validation ---------------------------------------------------------------------

struct BwdCall {
    uintptr_t dy = base(0), dro = 0, h = base(1), rstd = base(2), weight = base(3), dres = base(4), dx = 0,
              dweight = base(5), workspace = base(6);
    uint64_t workspace_bytes = 1 << 20;
    int64_t rows = 5, hidden = 96, sdy = 96, sdro = 96, sh = 96, sdres = 96, sdx = 96;
    addrmsnorm_dtype xd = ADDRMSNORM_BFLOAT16, rd = ADDRMSNORM_BFLOAT16, wd = ADDRMSNORM_BFLOAT16;
    float offset = 0.0f;
    uint32_t flags = 0;

    addrmsnorm_status check() const {
        return addrmsnorm_fused_add_rmsnorm_backward_check(
            (const void*)dy, (const void*)dro, (const void*)h, (const float*)rstd, (const void*)weight,
            (const void*)dres, (const void*)dx, (const void*)dweight, (const void*)workspace, workspace_bytes, rows,
            hidden, sdy, sdro, sh, sdres, sdx, xd, rd, wd, offset, flags);
    }
};

void expect_bwd_error(const BwdCall& c, addrmsnorm_status want, const std::string& needle) {
    EXPECT_EQ(c.check(), want) << addrmsnorm_last_error();
    EXPECT_NE(std::string(addrmsnorm_last_error()).find(needle), std::string::npos) << addrmsnorm_last_error();
}

TEST(BackwardValidation, GoodCallsPass) {
    BwdCall c;
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    c.dro = base(7);
    c.dweight = 0;
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    c.rd = ADDRMSNORM_FLOAT32;  // an fp32 residual stream: dx is a separate output
    c.dx = base(8);
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
}

TEST(BackwardValidation, BadCalls) {
    BwdCall c;
    c.dx = base(8);
    expect_bwd_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "dx must be NULL when x_dtype == residual_dtype");
    c = BwdCall();
    c.rd = ADDRMSNORM_FLOAT32;
    expect_bwd_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "dx is NULL");
    c = BwdCall();
    c.rd = ADDRMSNORM_FLOAT16;
    expect_bwd_error(c, ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "residual_dtype is float16");
    c = BwdCall();
    c.h = 0;
    expect_bwd_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "h is NULL");
    c = BwdCall();
    c.dres = c.dy + 64;  // dresidual partly over dy
    expect_bwd_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "dresidual overlaps dy");
    c = BwdCall();
    c.workspace = c.dweight + 8;
    expect_bwd_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "overlaps");
    c = BwdCall();
    c.sdres = 48;
    expect_bwd_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "dresidual: row stride 48 < H=96");
    c = BwdCall();
    c.flags = 1;
    expect_bwd_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "flags must be 0");
    c = BwdCall();
    c.hidden = 0;
    expect_bwd_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "hidden (H) must be in [1, 2^31)");
}

// ----- quantized outputs ------------------------------------------------------------------------

// The (quant dtype, mode) pairs a call may make (configs.quant_dtypes_of): int8 and fp8 in modes 1-3,
// fp4 in NVFP4 and MXFP4, fp8 in MXFP8.
bool quant_pair(int q, int mode) {
    if (mode <= ADDRMSNORM_QUANT_PER_GROUP) return q != ADDRMSNORM_QUANT_FLOAT4_E2M1;
    return q == (mode == ADDRMSNORM_QUANT_MXFP8 ? ADDRMSNORM_QUANT_FLOAT8_E4M3 : ADDRMSNORM_QUANT_FLOAT4_E2M1);
}

TEST(Dispatch, EveryQuantizedCallHasAKernelForEveryArch) {
    using namespace addrmsnorm::detail;
    for (long long H : {16LL, 64LL, 128LL, 4096LL, 16384LL, 16400LL, 32768LL, 32784LL, 65536LL, 65552LL, 262144LL})
        for (addrmsnorm_dtype x : {ADDRMSNORM_FLOAT16, ADDRMSNORM_BFLOAT16})
            for (int q = 0; q < kNumQuantDtypes; ++q)
                for (int mode = 1; mode <= kNumQuantModes; ++mode) {
                    if (!quant_pair(q, mode)) continue;
                    const int cfg = select_forward_config(H, 2, 2, mode, false, false);
                    const int v = quant_variant_index(cfg, x, q, mode);
                    ASSERT_GE(v, 0) << "H=" << H;
                    EXPECT_EQ(kVariants[v].kind, KernelKind::QuantForward);
                    EXPECT_EQ(kVariants[v].config, cfg);
                    EXPECT_EQ(kVariants[v].x_dtype, x);
                    EXPECT_EQ(kVariants[v].quant, mode);
                    EXPECT_EQ(kVariants[v].quant_dtype, q);
                    for (int a = 0; a < kNumArchs; ++a) {
                        const CubinImage& img = kImages[v * kNumArchs + a];
                        if (q != ADDRMSNORM_QUANT_INT8 && kArchs[a] < 89) {  // no e4m3 before sm_89
                            EXPECT_EQ(img.size, 0u);
                            continue;
                        }
                        EXPECT_GT(img.size, 0u);
                        EXPECT_EQ(img.num_warps, kConfigs[cfg].num_warps);
                        EXPECT_EQ(img.grid_dependency, kArchs[a] >= 90);
                    }
                }
}

struct QuantCallArgs {
    alignas(16) static char buf[1 << 16];
    // Disjoint 16-byte aligned regions of one buffer (never dereferenced: the check reads no memory).
    static const char* at(size_t offset) { return buf + offset; }
    int64_t rows = 4, hidden = 128;
    const char* x = at(0);
    const char* r = at(4096);
    const char* w = at(8192);
    const char* q = at(12288);
    const char* ro = at(16384);
    const char* y = nullptr;
    float* scales = reinterpret_cast<float*>(buf + 20480);
    addrmsnorm_quant quant{ADDRMSNORM_QUANT_PER_GROUP, ADDRMSNORM_QUANT_FLOAT8_E4M3, 64, 0, nullptr, nullptr, nullptr, 2, 1};
    int64_t sx = 128, sr = 128, sq = 128, sro = 128, sy = 128;
    addrmsnorm_dtype xd = ADDRMSNORM_BFLOAT16;
    float eps = 1e-6f;
    uint32_t flags = 0;
    addrmsnorm_status check() {
        quant.scales = scales;
        return addrmsnorm_fused_add_rmsnorm_quant_check(x, r, w, q, ro, y, rows, hidden, sx, sr, sq, sro, sy, xd, eps,
                                                        0.0f, &quant, flags);
    }
};
alignas(16) char QuantCallArgs::buf[1 << 16];

void expect_quant_error(QuantCallArgs c, addrmsnorm_status want, const std::string& needle) {
    const addrmsnorm_status got = c.check();
    EXPECT_EQ(got, want) << addrmsnorm_last_error();
    EXPECT_NE(std::string(addrmsnorm_last_error()).find(needle), std::string::npos)
        << "message \"" << addrmsnorm_last_error() << "\" does not mention \"" << needle << "\"";
}

TEST(QuantValidation, GoodCallsPass) {
    QuantCallArgs c;
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    c.quant.mode = ADDRMSNORM_QUANT_PER_TOKEN;
    c.quant.group_size = 0;
    c.quant.flags = ADDRMSNORM_QUANT_UE8M0;
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    c.y = c.x;  // y may be x exactly
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
}

TEST(QuantValidation, BlockScaledFormats) {
    QuantCallArgs c;  // MXFP8: fp8 q, blocks of 32, e8m0 bytes, no scale
    c.quant = addrmsnorm_quant{ADDRMSNORM_QUANT_MXFP8, ADDRMSNORM_QUANT_FLOAT8_E4M3, 32, 0, nullptr, nullptr, nullptr, 4, 1};
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    c.quant.flags = ADDRMSNORM_QUANT_SWIZZLED;  // strides unused: one buffer of 128 rows x 4 blocks
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    c.quant.dtype = ADDRMSNORM_QUANT_FLOAT4_E2M1;
    expect_quant_error(c, ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "MXFP8 writes q as ADDRMSNORM_QUANT_FLOAT8_E4M3");
    c = QuantCallArgs();  // NVFP4: fp4 q of 64-byte rows, blocks of 16, the global scale
    const float* g = reinterpret_cast<const float*>(QuantCallArgs::at(28672));
    c.quant = addrmsnorm_quant{ADDRMSNORM_QUANT_NVFP4, ADDRMSNORM_QUANT_FLOAT4_E2M1, 16, 0, g, nullptr, nullptr, 8, 1};
    c.sq = 64;
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    c.sq = 72;  // 144 elements: a multiple of 16 (8 bytes)
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    c.sq = 60;
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "out: row stride 60 < H=64");
    c.sq = 68;
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "out must start on a 16-byte boundary");
    c.sq = 64;
    c.quant.scale = nullptr;
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "NVFP4 reads its global scale there");
    c.quant.scale = g;
    c.quant.group_size = 32;
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "group_size must be 16 for NVFP4 (its block), got 32");
    c.quant.group_size = 16;
    c.quant.flags = ADDRMSNORM_QUANT_UE8M0;
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "ue8m0_scales does not apply to NVFP4");
    c = QuantCallArgs();  // MXFP4 takes no scale; fp4 needs a block mode; swizzling needs one
    c.quant = addrmsnorm_quant{ADDRMSNORM_QUANT_MXFP4, ADDRMSNORM_QUANT_FLOAT4_E2M1, 32, 0, g, nullptr, nullptr, 4, 1};
    c.sq = 64;
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "MXFP4 takes no scale");
    c.quant.mode = ADDRMSNORM_QUANT_PER_TOKEN;
    c.quant.scale = nullptr;
    c.quant.group_size = 0;
    expect_quant_error(c, ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "needs a block-scaled mode");
    c = QuantCallArgs();
    c.quant.flags = ADDRMSNORM_QUANT_SWIZZLED;
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "swizzled_scales lays out the scales of a block-scaled");
}

// The C++ layer's descriptors are calls the C ABI's checks accept, and its quantized calls reach those checks
// with the strides it fills in (fp4 q: hidden / 2 bytes a row). Checks only: no pointer is dereferenced.
TEST(QuantValidation, CppLayerDescriptorsAndCalls) {
    QuantCallArgs c;
    const float* g = reinterpret_cast<const float*>(QuantCallArgs::at(28672));
    void* s = const_cast<char*>(QuantCallArgs::at(24576));
    const struct { addrmsnorm_quant q; int64_t stride_q; } ok[] = {
        {addrmsnorm::quant_static(ADDRMSNORM_QUANT_FLOAT8_E4M3, g), 128},
        {addrmsnorm::quant_per_token(ADDRMSNORM_QUANT_INT8, c.scales, true), 128},
        {addrmsnorm::quant_per_group(ADDRMSNORM_QUANT_FLOAT8_E4M3, 64, c.scales, 128), 128},
        {addrmsnorm::quant_nvfp4(g, s, 128), 64},
        {addrmsnorm::quant_nvfp4(g, s, 128, true), 64},
        {addrmsnorm::quant_mxfp8(s, 128), 128},
        {addrmsnorm::quant_mxfp4(s, 128, true), 64},
    };
    for (const auto& k : ok) {
        EXPECT_EQ(addrmsnorm_fused_add_rmsnorm_quant_check(c.x, c.r, c.w, c.q, c.ro, nullptr, c.rows, c.hidden, 128, 128,
                                                           k.stride_q, 128, 128, ADDRMSNORM_BFLOAT16, 1e-6f, 0.0f, &k.q, 0),
                  ADDRMSNORM_SUCCESS) << "mode " << k.q.mode << ": " << addrmsnorm_last_error();
        EXPECT_EQ(addrmsnorm_rmsnorm_quant_check(c.x, c.w, c.q, nullptr, c.rows, c.hidden, 128, k.stride_q, 128,
                                                 ADDRMSNORM_BFLOAT16, 1e-6f, 0.0f, &k.q, 0),
                  ADDRMSNORM_SUCCESS) << "mode " << k.q.mode << ": " << addrmsnorm_last_error();
    }
    addrmsnorm::QuantArgs a;  // NVFP4 without its global scale: refused before any device work
    a.x = c.x;
    a.residual = c.r;
    a.weight = c.w;
    a.q = const_cast<char*>(c.q);
    a.residual_out = const_cast<char*>(c.ro);
    a.rows = c.rows;
    a.hidden = c.hidden;
    a.quant = addrmsnorm::quant_nvfp4(nullptr, s, c.hidden);
    addrmsnorm::Status st = addrmsnorm::fused_add_rmsnorm_quant(a);
    EXPECT_EQ(st.code, ADDRMSNORM_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(st.message.find("NVFP4 reads its global scale there"), std::string::npos) << st.message;
    a.residual = nullptr;  // the plain norm's
    a.quant = addrmsnorm::quant_mxfp4(s, c.hidden);
    a.quant.group_size = 16;
    st = addrmsnorm::fused_add_rmsnorm_quant(a);
    EXPECT_NE(st.message.find("group_size must be 32 for MXFP4"), std::string::npos) << st.message;
}

TEST(QuantValidation, BadCalls) {
    QuantCallArgs c;
    c.quant.dtype = static_cast<addrmsnorm_quant_dtype>(7);
    expect_quant_error(c, ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "quant->dtype 7 is not");
    c = QuantCallArgs();
    c.quant.group_size = 32;
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "group_size must be 64 or 128, got 32");
    c = QuantCallArgs();
    c.hidden = 192;
    c.quant.group_size = 128;
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "H=192 is not a multiple of group_size=128");
    c = QuantCallArgs();
    c.quant.mode = ADDRMSNORM_QUANT_PER_TOKEN;
    c.quant.group_size = 0;
    c.hidden = 120;
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "H=120 is not a multiple of 16");
    c = QuantCallArgs();
    c.xd = ADDRMSNORM_FLOAT32;
    expect_quant_error(c, ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "quantized outputs take x of float16 or bfloat16");
    c = QuantCallArgs();
    c.quant.mode = ADDRMSNORM_QUANT_STATIC;
    c.quant.group_size = 0;
    c.scales = nullptr;
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "scale is NULL");
    c.rows = 0;  // no rows: no pointer is looked at
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    c = QuantCallArgs();
    c.x = QuantCallArgs::at(8);
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "x must start on a 16-byte boundary");
    c = QuantCallArgs();
    c.q = c.x;
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "out overlaps x");
    c = QuantCallArgs();
    c.quant.scales_stride_row = 1;  // rows of 2 groups, stride 1 and 1: two scales on one address
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "make two scales share an address");
    c = QuantCallArgs();
    c.scales = reinterpret_cast<float*>(const_cast<char*>(c.w));
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "scales_out overlaps weight");
    c = QuantCallArgs();
    c.flags = ADDRMSNORM_FLAG_HF_NUMERICS;
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "quantized outputs take the contract's numerics");
    c.flags = 16;
    expect_quant_error(c, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "flags has unknown bits 0x10");
}

// ----- the plain norm ---------------------------------------------------------------------------

TEST(Dispatch, EveryGatedNormCallHasAKernelForEveryArch) {
    using namespace addrmsnorm::detail;
    // The gated norm: x, z and weight of one dtype, vector-aligned rows, the contract or HF's form (as
    // forward.cpp's gated_call_variant asks once the call is validated), every group it takes.
    alignas(16) static const unsigned char buf[64] = {};
    for (long long g : {8LL, 64LL, 128LL, 1024LL, 4096LL, 5000LL, 8192LL})
        for (addrmsnorm_dtype x : {ADDRMSNORM_FLOAT16, ADDRMSNORM_BFLOAT16, ADDRMSNORM_FLOAT32})
            for (bool hf : {false, true}) {
                int cfg = -1;
                const int v = gated_call_variant(buf, buf, buf, buf, g, 8 * g, x, x, 0.0f, hf, &cfg);
                ASSERT_GE(v, 0) << "gated group " << g << " x " << x << " hf " << hf;
                EXPECT_EQ(kVariants[v].kind, KernelKind::GatedForward);
                EXPECT_EQ(kVariants[v].config, cfg);
                EXPECT_EQ(kVariants[v].x_dtype, x);
                EXPECT_GE(kConfigs[cfg].block_h, g);
                for (int a = 0; a < kNumArchs; ++a) EXPECT_GT(kImages[v * kNumArchs + a].size, 0u);
            }
}

TEST(Dispatch, EveryPairCallHasAKernelForEveryArch) {
    using namespace addrmsnorm::detail;
    // The pair: 16-bit parts with weights of their dtype, vector-aligned rows, the contract or HF's Llama form
    // (as forward.cpp's pair_call_variant asks once the call is validated, the wider part first), the tile of the
    // wider part, and the narrower's packed in a tile that holds it.
    alignas(16) static const unsigned char buf[64] = {};
    const void* pointers[6] = {buf, buf, buf, buf, buf, buf};
    for (long long wa : {8LL, 512LL, 1536LL, 8192LL})
        for (long long wb : {8LL, 512LL, 4096LL})
            for (addrmsnorm_dtype x : {ADDRMSNORM_FLOAT16, ADDRMSNORM_BFLOAT16})
                for (bool hf : {false, true}) {
                    int cfg = -1, pack = 0;
                    const long long wider = wa > wb ? wa : wb, narrower = wa > wb ? wb : wa;
                    const int v = pair_call_variant(pointers, 6, wa | wb, wider, narrower, 2112 * 8, x, x, 0.0f, hf,
                                                    &cfg, &pack);
                    ASSERT_GE(v, 0) << "pair " << wa << " + " << wb << " x " << x << " hf " << hf;
                    EXPECT_EQ(kVariants[v].kind, KernelKind::PairForward);
                    EXPECT_EQ(kVariants[v].config, cfg);
                    EXPECT_GE(kConfigs[cfg].block_h, wider);
                    EXPECT_GE(kConfigs[cfg].block_h / pack, narrower);
                    for (int a = 0; a < kNumArchs; ++a) EXPECT_GT(kImages[v * kNumArchs + a].size, 0u);
                }
}

TEST(Validate, PairRulesNameTheirField) {
    alignas(16) static unsigned char buf[8 * 2112 * 2] = {};
    auto call = [&]() {  // MLA's latents as column slices of one [4, 2112] bf16 buffer, in place
        addrmsnorm_norm_args a = addrmsnorm_norm_args_init();
        a.x = a.out = buf;
        a.b = a.b_out = buf + 1536 * 2;
        a.rows = 4; a.hidden = 1536; a.b_hidden = 512;
        a.stride_x = a.stride_out = a.stride_b = a.stride_b_out = 2112;
        a.weight = buf + 8 * 2112;
        a.b_weight = buf + 8 * 2112 + 4096;
        a.x_dtype = a.residual_dtype = a.weight_dtype = ADDRMSNORM_BFLOAT16;
        a.eps = 1e-6;
        return a;
    };
    addrmsnorm_norm_args a = call();
    EXPECT_EQ(addrmsnorm_norm_check(&a), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    struct Case {
        void (*edit)(addrmsnorm_norm_args&);
        const char* starts;
        addrmsnorm_status status = ADDRMSNORM_ERROR_INVALID_ARGUMENT;
    };
    const Case cases[] = {
        {[](addrmsnorm_norm_args& c) { c.b_weight = nullptr; }, "b_weight is NULL but weight is given"},
        {[](addrmsnorm_norm_args& c) { c.hidden = 1544; }, "out overlaps b"},
        {[](addrmsnorm_norm_args& c) { c.b_hidden = 12; }, "b_hidden is 12"},
        {[](addrmsnorm_norm_args& c) { c.hidden = 8200; }, "hidden is 8200"},
        {[](addrmsnorm_norm_args& c) { c.x_dtype = ADDRMSNORM_FLOAT32; c.weight_dtype = ADDRMSNORM_FLOAT32; },
         "x_dtype is float32", ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE},
        {[](addrmsnorm_norm_args& c) { c.b_out = nullptr; }, "b_out is NULL"},
        {[](addrmsnorm_norm_args& c) { c.stride_b = 2100; }, "stride_b is 2100"},
        {[](addrmsnorm_norm_args& c) { c.b = nullptr; c.b_out = nullptr; }, "b_weight is given but b is NULL"},
        {[](addrmsnorm_norm_args& c) { c.numerics = ADDRMSNORM_NUMERICS_HF; c.weight_offset = 1.0; },
         "ADDRMSNORM_NUMERICS_HF with b"},
    };
    for (const Case& k : cases) {
        addrmsnorm_norm_args c = call();
        k.edit(c);
        EXPECT_EQ(addrmsnorm_norm_check(&c), k.status) << k.starts;
        EXPECT_EQ(std::string(addrmsnorm_last_error()).rfind(k.starts, 0), 0u) << addrmsnorm_last_error();
    }
}

TEST(Dispatch, EverySandwichQuantizedCallHasAKernel) {
    using namespace addrmsnorm::detail;
    // The sandwich norm's quantized outputs (configs.SANDWICH_QUANT), on its rows, as forward.cpp's forward_kernel
    // asks once the call is validated: every arch with fp8 has them.
    struct M { int mode; addrmsnorm_quant_dtype q; };
    const M modes[5] = {{ADDRMSNORM_QUANT_STATIC, ADDRMSNORM_QUANT_FLOAT8_E4M3},
                        {ADDRMSNORM_QUANT_PER_TOKEN, ADDRMSNORM_QUANT_FLOAT8_E4M3},
                        {ADDRMSNORM_QUANT_PER_GROUP, ADDRMSNORM_QUANT_FLOAT8_E4M3},
                        {ADDRMSNORM_QUANT_NVFP4, ADDRMSNORM_QUANT_FLOAT4_E2M1},
                        {ADDRMSNORM_QUANT_MXFP8, ADDRMSNORM_QUANT_FLOAT8_E4M3}};
    for (long long H : {256LL, 4096LL, 5376LL, 8192LL, 16384LL})
        for (addrmsnorm_dtype x : {ADDRMSNORM_FLOAT16, ADDRMSNORM_BFLOAT16})
            for (const M& m : modes) {
                const int cfg = select_sandwich_table_config(H, 2, 2, 0, false);
                const int v = quant_variant_index(cfg, x, m.q, m.mode, false, true);
                ASSERT_GE(v, 0) << "sandwich quantized H=" << H << " mode " << m.mode;
                EXPECT_EQ(kVariants[v].kind, KernelKind::SandwichQuantForward);
                EXPECT_EQ(kVariants[v].config, cfg);
            }
}

TEST(Dispatch, EveryGatedQuantizedCallHasAKernel) {
    using namespace addrmsnorm::detail;
    // The gated norm's quantized outputs (configs.GATED_QUANT): fp8 static and per token on its 16-bit rows, as
    // forward.cpp's forward_kernel asks once the call is validated.
    for (long long g : {8LL, 128LL, 1024LL, 4096LL, 8192LL})
        for (addrmsnorm_dtype x : {ADDRMSNORM_FLOAT16, ADDRMSNORM_BFLOAT16})
            for (int mode : {ADDRMSNORM_QUANT_STATIC, ADDRMSNORM_QUANT_PER_TOKEN}) {
                const int cfg = select_gated_table_config(g, 2, 2, 0, false);
                const int v = quant_variant_index(cfg, x, ADDRMSNORM_QUANT_FLOAT8_E4M3, mode, true, false, true);
                ASSERT_GE(v, 0) << "gated quantized group " << g << " mode " << mode;
                EXPECT_EQ(kVariants[v].kind, KernelKind::GatedQuantForward);
                EXPECT_EQ(kVariants[v].config, cfg);
            }
}

TEST(Validate, GatedNormRulesNameTheirField) {
    alignas(16) static unsigned char buf[4096] = {};
    auto call = [&]() {
        addrmsnorm_norm_args a = addrmsnorm_norm_args_init();
        a.x = buf; a.out = buf + 1024; a.z = buf + 2048; a.weight = buf + 3072;
        a.rows = 2; a.hidden = 128; a.stride_x = a.stride_out = a.stride_z = 128;
        a.x_dtype = a.residual_dtype = a.weight_dtype = ADDRMSNORM_BFLOAT16;
        a.eps = 1e-6;
        return a;
    };
    addrmsnorm_norm_args a = call();
    EXPECT_EQ(addrmsnorm_norm_check(&a), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    struct Case {
        void (*edit)(addrmsnorm_norm_args&);
        const char* starts;
        addrmsnorm_status status = ADDRMSNORM_ERROR_INVALID_ARGUMENT;
    };
    const Case cases[] = {
        {[](addrmsnorm_norm_args& c) { c.group_size = 48; }, "group_size is 48; it must divide"},
        {[](addrmsnorm_norm_args& c) { c.group_size = 4; c.hidden = 128; }, "group_size is 4"},
        {[](addrmsnorm_norm_args& c) { c.weight_dtype = ADDRMSNORM_FLOAT32; }, "weight has dtype float32",
         ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE},
        {[](addrmsnorm_norm_args& c) { c.stride_z = 132; }, "stride_z is 132"},
        {[](addrmsnorm_norm_args& c) { c.z = static_cast<const unsigned char*>(c.z) + 2; }, "z does not start"},
        {[](addrmsnorm_norm_args& c) { c.out = const_cast<void*>(c.z); }, "out overlaps z"},
        {[](addrmsnorm_norm_args& c) { c.gate = 7; }, "gate 7 is not"},
        {[](addrmsnorm_norm_args& c) { c.numerics = ADDRMSNORM_NUMERICS_HF; c.weight_offset = 1.0; },
         "ADDRMSNORM_NUMERICS_HF with z"},
        {[](addrmsnorm_norm_args& c) { c.z = nullptr; c.group_size = 64; }, "group_size is 64 but z is NULL"},
        {[](addrmsnorm_norm_args& c) { c.z = nullptr; c.gate_first = 1; }, "gate_first is 1 but z is NULL"},
    };
    for (const Case& k : cases) {
        addrmsnorm_norm_args c = call();
        k.edit(c);
        EXPECT_EQ(addrmsnorm_norm_check(&c), k.status) << k.starts;
        EXPECT_EQ(std::string(addrmsnorm_last_error()).rfind(k.starts, 0), 0u) << addrmsnorm_last_error();
    }
}

TEST(Dispatch, EveryPlainNormCallHasAKernelForEveryArch) {
    using namespace addrmsnorm::detail;
    // The sandwich norm: 16-bit x, residual and weights of its dtype, vector-aligned rows (as forward.cpp's
    // forward_kernel asks once the call is validated).
    for (long long H : {8LL, 64LL, 1024LL, 4096LL, 5376LL, 8192LL, 16384LL, 262144LL})
        for (addrmsnorm_dtype x : {ADDRMSNORM_FLOAT16, ADDRMSNORM_BFLOAT16})
            for (bool hf : {false, true})
                for (float weight_offset : {0.0f, 1.0f}) {
                    const int align_class = forward_align_class(true, H, 2, 2, true);
                    const int numerics = numerics_mode(hf, weight_offset, 2);
                    const int cfg = select_sandwich_table_config(H, 2, 2, 0, false);
                    const int v = sandwich_variant_index(cfg, x, x, align_class, numerics);
                    ASSERT_GE(v, 0) << "sandwich H=" << H << " x " << x << " numerics " << numerics;
                    EXPECT_EQ(kVariants[v].kind, KernelKind::SandwichForward);
                    EXPECT_EQ(kVariants[v].config, cfg);
                    EXPECT_EQ(kVariants[v].x_dtype, x);
                    EXPECT_EQ(kVariants[v].numerics, numerics);
                    for (int a = 0; a < kNumArchs; ++a) EXPECT_GT(kImages[v * kNumArchs + a].size, 0u);
                }
    for (long long H : {1LL, 64LL, 111LL, 128LL, 4096LL, 11111LL, 16384LL, 16385LL, 32768LL, 262144LL})
        for (int x = 0; x < 3; ++x)
            for (int w = 0; w < 3; ++w)
                for (int align_class = 0; align_class < kNumAlignClasses; ++align_class)
                    for (bool hf : {false, true})
                        for (float weight_offset : {0.0f, 1.0f}) {
                            if (H % 2 == 1 && align_class > 0) continue;
                            if (hf && w != x) continue;
                            const int xs = x == ADDRMSNORM_FLOAT32 ? 4 : 2;
                            const int numerics = numerics_mode(hf, weight_offset, xs);
                            const bool ends_only = hf || weight_slot(x, w) == 2;
                            if (forward_align_class(true, 1LL << align_class, xs, xs, ends_only) != align_class) continue;
                            const bool vt = is_vector_typed(align_class, xs, xs, w == x, numerics);
                            const int cfg = select_plain_config(H, xs, vt);
                            const int v = plain_variant_index(cfg, x, w, align_class, numerics);
                            ASSERT_GE(v, 0) << "H=" << H << " x " << x << " weight " << w << " class " << align_class;
                            EXPECT_EQ(kVariants[v].kind, KernelKind::PlainForward);
                            EXPECT_EQ(kVariants[v].config, cfg);
                            EXPECT_EQ(kVariants[v].x_dtype, x);
                            EXPECT_EQ(kVariants[v].align_class, align_class);
                            EXPECT_EQ(kVariants[v].numerics, numerics);
                            for (int a = 0; a < kNumArchs; ++a) EXPECT_GT(kImages[v * kNumArchs + a].size, 0u);
                        }
    for (long long H : {16LL, 128LL, 4096LL, 16384LL, 32768LL, 65536LL})
        for (addrmsnorm_dtype x : {ADDRMSNORM_FLOAT16, ADDRMSNORM_BFLOAT16})
            for (int q = 0; q < kNumQuantDtypes; ++q)
                for (int mode = 1; mode <= kNumQuantModes; ++mode) {
                    if (!quant_pair(q, mode)) continue;
                    const int cfg = select_forward_config(H, 2, 2, mode, false, true);
                    const int v = quant_variant_index(cfg, x, q, mode, true);
                    ASSERT_GE(v, 0) << "H=" << H;
                    EXPECT_EQ(kVariants[v].kind, KernelKind::PlainQuantForward);
                    EXPECT_EQ(kVariants[v].quant, mode);
                }
}

TEST(Dispatch, EveryQkNormCallHasAKernelForEveryArch) {
    using namespace addrmsnorm::detail;
    for (long long D : {16LL, 64LL, 80LL, 96LL, 128LL, 256LL, static_cast<long long>(kQkMaxHeadDim)})
        for (int x : {ADDRMSNORM_FLOAT16, ADDRMSNORM_BFLOAT16})
            for (int w : {x, static_cast<int>(ADDRMSNORM_FLOAT32)})
                for (int align_class : {0, kNumAlignClasses - 1})
                    for (bool hf : {false, true})
                        for (float offset : {0.0f, 1.0f})
                            for (bool v_heads : {false, true}) {  // with Gemma 4's v heads too
                                if (hf && w != x) continue;
                                const int numerics = numerics_mode(hf, offset, 2);
                                const bool vt = is_vector_typed(align_class, 2, 2, w == x, numerics);
                                const int cfg = select_plain_config(D, 2, vt);
                                ASSERT_FALSE(kConfigs[cfg].looped) << "D=" << D;
                                const int v = qk_variant_index(cfg, x, w, align_class, numerics, v_heads);
                                if (v_heads && align_class == 0) {  // the vector alone: forward.cpp's qk_then_v
                                    EXPECT_LT(v, 0) << "D=" << D;
                                    continue;
                                }
                                ASSERT_GE(v, 0) << "D=" << D << " x " << x << " weight " << w << " class "
                                                << align_class << " v heads " << v_heads;
                                EXPECT_EQ(kVariants[v].kind, v_heads ? KernelKind::QkvForward : KernelKind::QkForward);
                                for (int a = 0; a < kNumArchs; ++a) EXPECT_GT(kImages[v * kNumArchs + a].size, 0u);
                            }
}

TEST(Dispatch, EveryPlainAndQkCallFindsItsKernelAtAnyAlignment) {
    // The launch's own choice (plain_call_variant) over pointer offsets and strides of every alignment:
    // a QK norm over head_dim 100 with rows of 402 elements (ALIGN 2, not built for it) runs ALIGN 1.
    using namespace addrmsnorm::detail;
    alignas(16) static unsigned char buf[64];
    for (long long H : {16LL, 64LL, 100LL, 128LL, 250LL, 512LL})
        for (long long strides : {0LL, 2LL, 4LL, 8LL, 402LL, 6144LL, 6146LL, 6148LL})
            for (int offset : {0, 2, 4, 8})
                for (addrmsnorm_dtype x : {ADDRMSNORM_FLOAT16, ADDRMSNORM_BFLOAT16})
                    for (addrmsnorm_dtype w : {x, ADDRMSNORM_FLOAT32})
                        for (bool hf : {false, true})
                            for (int qk : {0, 1, 2}) {  // 2: the QK norm with v heads
                                if (hf && w != x) continue;
                                int config = -1;
                                const int v = plain_call_variant(buf + offset, buf, buf, buf + offset, H, strides, x,
                                                                 w, 0.0f, hf, false, qk != 0, &config, -1, true,
                                                                 qk == 2);
                                if (qk == 2) {  // v heads at the vector alone (else forward.cpp's qk_then_v)
                                    const int without = plain_call_variant(buf + offset, buf, buf, buf + offset, H,
                                                                           strides, x, w, 0.0f, hf, false, true,
                                                                           &config);
                                    ASSERT_GE(without, 0);
                                    EXPECT_EQ(v >= 0, kVariants[without].align_class > 0)
                                        << "H=" << H << " strides " << strides << " offset " << offset;
                                    if (v < 0) continue;
                                }
                                ASSERT_GE(v, 0) << "H=" << H << " strides " << strides << " offset " << offset
                                                << " qk " << qk;
                                EXPECT_EQ(kVariants[v].kind, qk == 2   ? KernelKind::QkvForward
                                                             : qk == 1 ? KernelKind::QkForward
                                                                       : KernelKind::PlainForward);
                            }
}

namespace {
void expect_message_has(const std::string& needle) {
    EXPECT_NE(std::string(addrmsnorm_last_error()).find(needle), std::string::npos)
        << "message \"" << addrmsnorm_last_error() << "\" does not mention \"" << needle << "\"";
}

// A valid plain-norm call: x [4, 3, 64] bf16 as a [4, 3*64 + 64] buffer's first 3 heads (a QKV's q part).
struct NormCallArgs {
    alignas(16) unsigned char buf[1 << 14];
    const void* x = buf;
    const void* weight = buf + 8192;
    const void* out = buf;
    const float* rstd = nullptr;
    int64_t rows = 4, heads = 3, hidden = 64, sx = 256, sxh = 64, so = 256, soh = 64;
    addrmsnorm_dtype xd = ADDRMSNORM_BFLOAT16, wd = ADDRMSNORM_BFLOAT16;
    float eps = 1e-6f, offset = 0.0f;
    uint32_t flags = 0;
    addrmsnorm_status check() const {
        return addrmsnorm_rmsnorm_check(x, weight, out, rstd, rows, heads, hidden, sx, sxh, so, soh, xd, wd, eps, offset,
                                        flags);
    }
};
}  // namespace

TEST(PlainNormValidation, InPlaceOnAFusedQkvViewPasses) {
    NormCallArgs c;
    EXPECT_EQ(c.check(), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
}

TEST(PlainNormValidation, Refusals) {
    {
        NormCallArgs c;
        c.heads = -1;
        EXPECT_EQ(c.check(), ADDRMSNORM_ERROR_INVALID_ARGUMENT);
        expect_message_has("groups must be >= 0");
    }
    {
        NormCallArgs c;  // out a different view of the same rows: overlaps x
        c.so = 128;
        EXPECT_EQ(c.check(), ADDRMSNORM_ERROR_INVALID_ARGUMENT);
        expect_message_has("out: strides (128, 64) with H=64 make rows overlap");
    }
    {
        NormCallArgs c;  // out one head further: overlaps x, not exactly
        c.out = c.buf + 128;
        EXPECT_EQ(c.check(), ADDRMSNORM_ERROR_INVALID_ARGUMENT);
        expect_message_has("out overlaps x; out may be x exactly");
    }
    {
        NormCallArgs c;  // in place with heads overlapping each other
        c.sxh = c.soh = 32;
        EXPECT_EQ(c.check(), ADDRMSNORM_ERROR_INVALID_ARGUMENT);
        expect_message_has("x: strides (256, 32) with H=64 make rows overlap");
    }
    {
        NormCallArgs c;
        c.weight = c.buf + 64;
        EXPECT_EQ(c.check(), ADDRMSNORM_ERROR_INVALID_ARGUMENT);
        expect_message_has("out overlaps weight");
    }
    {
        NormCallArgs c;
        c.flags = ADDRMSNORM_FLAG_HF_NUMERICS;
        c.wd = ADDRMSNORM_FLOAT32;
        EXPECT_EQ(c.check(), ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE);
        expect_message_has("ADDRMSNORM_NUMERICS_HF needs weight_dtype");
    }
    {
        NormCallArgs c;
        c.rows = 1 << 30;
        c.heads = 4;
        EXPECT_EQ(c.check(), ADDRMSNORM_ERROR_INVALID_ARGUMENT);
        expect_message_has("rows * heads must be < 2^31");
    }
}

TEST(PlainNormValidation, QkAndQuantAndBackward) {
    alignas(16) static unsigned char buf[1 << 16];
    // qkv [8, (4 + 2 + 2) * 64] bf16; the weights after it.
    EXPECT_EQ(addrmsnorm_qk_rmsnorm_check(buf, buf + 9000, buf + 9200, 8, 4, 2, 64, 512, ADDRMSNORM_BFLOAT16,
                                          ADDRMSNORM_BFLOAT16, 1e-6f, 0.0f, 0),
              ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    EXPECT_EQ(addrmsnorm_qk_rmsnorm_check(buf, buf + 9000, buf + 9200, 8, 4, 2, 64, 300, ADDRMSNORM_BFLOAT16,
                                          ADDRMSNORM_BFLOAT16, 1e-6f, 0.0f, 0),
              ADDRMSNORM_ERROR_INVALID_ARGUMENT);
    expect_message_has("stride_qkv=300 is less than");
    EXPECT_EQ(addrmsnorm_qk_rmsnorm_check(buf, buf + 64, buf + 9200, 8, 4, 2, 64, 512, ADDRMSNORM_BFLOAT16,
                                          ADDRMSNORM_BFLOAT16, 1e-6f, 0.0f, 0),
              ADDRMSNORM_ERROR_INVALID_ARGUMENT);
    expect_message_has("q_weight overlaps qkv");
    addrmsnorm_quant q{};
    q.mode = ADDRMSNORM_QUANT_PER_TOKEN;
    q.dtype = ADDRMSNORM_QUANT_FLOAT8_E4M3;
    q.scales = reinterpret_cast<float*>(buf + 40000);
    q.scales_stride_row = 1;
    EXPECT_EQ(addrmsnorm_rmsnorm_quant_check(buf, buf + 8192, buf + 16384, nullptr, 8, 256, 256, 256, 0,
                                             ADDRMSNORM_BFLOAT16, 1e-6f, 0.0f, &q, 0),
              ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    EXPECT_EQ(addrmsnorm_rmsnorm_quant_check(buf, buf + 8192, buf + 256, nullptr, 8, 256, 256, 256, 0,
                                             ADDRMSNORM_BFLOAT16, 1e-6f, 0.0f, &q, 0),
              ADDRMSNORM_ERROR_INVALID_ARGUMENT);
    expect_message_has("out overlaps x");
    // The backward names its arguments as the plain norm's: x, not h.
    EXPECT_EQ(addrmsnorm_rmsnorm_backward_check(buf, nullptr, reinterpret_cast<float*>(buf + 40000), buf + 8192,
                                                buf + 16384, nullptr, buf + 50000, 4096, 8, 256, 256, 256, 256,
                                                ADDRMSNORM_BFLOAT16, ADDRMSNORM_BFLOAT16, 0.0f, 0),
              ADDRMSNORM_ERROR_INVALID_ARGUMENT);
    expect_message_has("x is NULL");
    EXPECT_EQ(addrmsnorm_rmsnorm_backward_check(buf, buf + 4096, reinterpret_cast<float*>(buf + 40000), buf + 8192,
                                                buf + 16384, nullptr, buf + 50000, 4096, 8, 256, 256, 256, 256,
                                                ADDRMSNORM_BFLOAT16, ADDRMSNORM_BFLOAT16, 0.0f, 0),
              ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
}

// ----- the one call's struct ------------------------------------------------------------------------

namespace {

// A valid plain call on host addresses (the check reads no memory).
addrmsnorm_norm_args plain_args() {
    alignas(16) static unsigned char buf[1 << 12];
    addrmsnorm_norm_args a = addrmsnorm_norm_args_init();
    a.x = buf;
    a.out = buf + 1024;
    a.weight = buf + 2048;
    a.rows = 4;
    a.hidden = 64;
    a.stride_x = a.stride_out = 64;
    a.x_dtype = a.residual_dtype = a.weight_dtype = ADDRMSNORM_BFLOAT16;
    a.eps = 1e-6;
    return a;
}

void expect_refused(const addrmsnorm_norm_args& a, addrmsnorm_status want, const std::string& needle) {
    EXPECT_EQ(addrmsnorm_norm_check(&a), want) << addrmsnorm_last_error();
    EXPECT_NE(std::string(addrmsnorm_last_error()).find(needle), std::string::npos)
        << "message \"" << addrmsnorm_last_error() << "\" does not mention \"" << needle << "\"";
}

}  // namespace

TEST(NormArgs, StructSizeGuardsOlderAndNewerCallers) {
    addrmsnorm_norm_args a = plain_args();
    EXPECT_EQ(addrmsnorm_norm_check(&a), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    EXPECT_EQ(addrmsnorm_norm_check(nullptr), ADDRMSNORM_ERROR_INVALID_ARGUMENT);
    // Callers built before the sandwich norm's two fields, and before x_scale: the fields read as 0.
    a.struct_size = offsetof(addrmsnorm_norm_args, post_weight);
    EXPECT_EQ(addrmsnorm_norm_check(&a), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    a.struct_size = offsetof(addrmsnorm_norm_args, x_scale);
    EXPECT_EQ(addrmsnorm_norm_check(&a), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    a.struct_size = offsetof(addrmsnorm_norm_args, x_scale) - 8;
    expect_refused(a, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "not the size of a addrmsnorm_norm_args");
    a.struct_size = 0;
    expect_refused(a, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "start from addrmsnorm_norm_args_init()");
    // A newer caller's struct: accepted while the fields this library does not know are zero.
    struct Newer {
        addrmsnorm_norm_args known;
        int64_t future_field;
    } n{plain_args(), 0};
    n.known.struct_size = sizeof(Newer);
    EXPECT_EQ(addrmsnorm_norm_check(&n.known), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    n.future_field = 1;
    expect_refused(n.known, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "built against a newer addrmsnorm.h");
    addrmsnorm_norm_backward_args b = addrmsnorm_norm_backward_args_init();
    b.struct_size = 8;
    EXPECT_EQ(addrmsnorm_norm_backward_check(&b), ADDRMSNORM_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(addrmsnorm_last_error()).find("addrmsnorm_norm_backward_args"), std::string::npos);
}

TEST(NormArgs, ScalarsAreCheckedAsTheKernelsTakeThem) {
    addrmsnorm_norm_args a = plain_args();
    a.eps = 1e-50;  // > 0 as a double, 0 in fp32
    expect_refused(a, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rounds to 0 in float32");
    a.eps = 1e-6;
    a.weight_offset = 1e39;
    expect_refused(a, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "weight_offset=1e+39 overflows float32");
    a.weight_offset = 0.0 / 0.0;
    expect_refused(a, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "weight_offset must be finite");
}

TEST(NormArgs, FieldsThatDoNotFitTheKindAreRefused) {
    alignas(16) static unsigned char other[1024];
    addrmsnorm_norm_args a = plain_args();
    a.numerics = static_cast<addrmsnorm_numerics>(3);
    expect_refused(a, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "numerics 3 is not an addrmsnorm_numerics");
    a = plain_args();
    a.flags = 0x1;  // 0.1's HF flag: numerics now
    expect_refused(a, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "flags has unknown bits 0x1");
    a = plain_args();
    a.residual_out = other;
    expect_refused(a, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "residual_out is given but residual is NULL");
    a = plain_args();
    a.residual = other;
    a.residual_dtype = a.x_dtype;
    a.stride_residual = a.stride_x;
    expect_refused(a, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "residual_out is NULL but residual is given");
    a = plain_args();
    a.y = other;
    expect_refused(a, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "y is the quantized calls' second output");
    a = plain_args();
    a.weight2_from_group = 2;
    expect_refused(a, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "weight2 is NULL");
    a = plain_args();
    a.residual = other;
    a.residual_out = other + 512;
    a.stride_residual = a.stride_residual_out = 64;
    a.groups = 2;
    expect_refused(a, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "a residual needs [rows, hidden] views");
    a.groups = 1;
    a.numerics = ADDRMSNORM_NUMERICS_HF_ROUND_ONCE;
    expect_refused(a, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "ADDRMSNORM_NUMERICS_HF_ROUND_ONCE is the plain and QK");
    a.numerics = ADDRMSNORM_NUMERICS_HF;
    EXPECT_EQ(addrmsnorm_norm_check(&a), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    // The QK norm: in place, contiguous heads, no rstd.
    a = plain_args();
    a.groups = 4;
    a.hidden = 16;
    a.stride_x = a.stride_out = 64;
    a.stride_x_group = a.stride_out_group = 16;
    a.weight2 = other;
    a.weight2_from_group = 3;
    expect_refused(a, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "the QK norm (weight2) runs in place");
    a.out = const_cast<void*>(a.x);
    EXPECT_EQ(addrmsnorm_norm_check(&a), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    a.stride_x_group = a.stride_out_group = 17;
    expect_refused(a, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "the QK norm's heads are contiguous");
    a.stride_x_group = a.stride_out_group = 16;
    a.weight2_from_group = 4;
    expect_refused(a, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "num_kv_heads must be >= 1");
}

// The rotation's backward (addrmsnorm_norm_backward_args.rope): the plain norm's backward of a part's heads,
// rstd NULL, cos and sin fp32 by column; refused otherwise, by name. Validation touches no memory.
TEST(BackwardValidation, TheRotationsBackwardAndItsRefusals) {
    const int64_t tokens = 4, heads = 2, D = 64;
    auto args = [&](addrmsnorm_rope* r) {
        addrmsnorm_norm_backward_args b = addrmsnorm_norm_backward_args_init();
        b.rows = tokens * heads;
        b.hidden = D;
        b.dy = reinterpret_cast<const void*>(base(0));
        b.h = reinterpret_cast<const void*>(base(1));
        b.dx = reinterpret_cast<void*>(base(4));
        b.weight = reinterpret_cast<const void*>(base(3));
        b.dweight = reinterpret_cast<void*>(base(5));
        b.workspace = reinterpret_cast<void*>(base(6));
        b.workspace_bytes = 1 << 20;
        b.stride_dy = b.stride_h = b.stride_dx = D;
        b.x_dtype = b.residual_dtype = b.weight_dtype = ADDRMSNORM_BFLOAT16;
        *r = addrmsnorm_rope{};
        r->angle_dtype = ADDRMSNORM_FLOAT32;
        r->cos = reinterpret_cast<const void*>(base(7));
        r->sin = reinterpret_cast<const void*>(base(7) + 4096);
        r->stride_cos = r->stride_sin = D;
        b.rope = r;
        b.rope_groups = heads;
        b.eps = 1e-6;
        return b;
    };
    auto refused = [](const addrmsnorm_norm_backward_args& b, addrmsnorm_status want, const char* words) {
        EXPECT_EQ(addrmsnorm_norm_backward_check(&b), want) << words;
        EXPECT_NE(std::string(addrmsnorm_last_error()).find(words), std::string::npos) << addrmsnorm_last_error();
    };
    addrmsnorm_rope r;
    addrmsnorm_norm_backward_args b = args(&r);
    EXPECT_EQ(addrmsnorm_norm_backward_check(&b), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
    b = args(&r);
    b.rstd = reinterpret_cast<const float*>(base(2));
    refused(b, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rstd must be NULL with rope");
    b = args(&r);
    r.angle_dtype = ADDRMSNORM_BFLOAT16;
    refused(b, ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "the backward's angles are float32");
    b = args(&r);
    b.rope_groups = 3;
    refused(b, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rope_groups");
    b = args(&r);
    b.dresidual = b.dx;
    b.dx = nullptr;
    refused(b, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "dx must be given and dresidual NULL with rope");
    b = args(&r);
    b.dresidual_out = b.dy;
    refused(b, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "dresidual_out must be NULL with rope");
    b = args(&r);
    b.residual_dtype = ADDRMSNORM_FLOAT32;
    refused(b, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "residual_dtype must be x_dtype with rope");
    b = args(&r);
    b.eps = 0.0;
    refused(b, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "eps");
    b = args(&r);
    r.positions = reinterpret_cast<const void*>(base(8));
    refused(b, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "not positions into a cos_sin_cache");
    b = args(&r);
    r.cos = reinterpret_cast<const void*>(base(4));  // dx's rows
    refused(b, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "cos overlaps");
    // A caller built before the rotation's fields: its struct ends at rope, and the call is the plain backward.
    b = args(&r);
    b.struct_size = offsetof(addrmsnorm_norm_backward_args, rope);
    refused(b, ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rstd is NULL");
    b.rstd = reinterpret_cast<const float*>(base(2));
    EXPECT_EQ(addrmsnorm_norm_backward_check(&b), ADDRMSNORM_SUCCESS) << addrmsnorm_last_error();
}
