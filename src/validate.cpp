#include "validate.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <charconv>
#include <cstring>
#include <string>
#include <string_view>
#include <cstdint>

#include "errors.h"
#include "kernel_table.h"

// A rule's refusal: ADDRMSNORM_ERROR_INVALID_ARGUMENT with the message, where cond holds.
#define ADDRMSNORM_REFUSE_IF(cond, ...) \
    do {                                 \
        if (cond) return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, __VA_ARGS__); \
    } while (0)

namespace addrmsnorm {
namespace detail {

namespace {
// The gated norm's rules, defined with the plain norm's below; the quantized call takes them too.
addrmsnorm_status check_gate_rules(const Call& c);
addrmsnorm_status check_quant_gate_memory(const Call& c);
}  // namespace

int dtype_size(addrmsnorm_dtype d) {
    switch (d) {
        case ADDRMSNORM_FLOAT16:
        case ADDRMSNORM_BFLOAT16: return 2;
        case ADDRMSNORM_FLOAT32: return 4;
    }
    return 0;
}

namespace {

const char* dtype_name(addrmsnorm_dtype d) {
    switch (d) {
        case ADDRMSNORM_FLOAT16: return "float16";
        case ADDRMSNORM_BFLOAT16: return "bfloat16";
        case ADDRMSNORM_FLOAT32: return "float32";
    }
    return "invalid";
}

// The words of a list: "a", "a or b", "a, b or c" (sep " or "), or joined by sep alone past two.
template <typename T, typename Word>
std::string joined(const T* items, int n, const char* last_sep, Word word) {
    std::string out;
    for (int i = 0; i < n; ++i) out += std::string(i == 0 ? "" : i == n - 1 ? last_sep : ", ") + word(items[i]);
    return out;
}

std::string word_list(const char* const* words, int n, const char* last_sep) {
    return joined(words, n, last_sep, [](const char* w) { return std::string(w); });
}

// A variant's dtypes (kSandwichDtypes, ...: bits of addrmsnorm_dtype) in words: "float16 or bfloat16".
std::string dtype_list(unsigned dtypes) {
    const char* words[3];
    int n = 0;
    for (int d = ADDRMSNORM_FLOAT16; d <= ADDRMSNORM_FLOAT32; ++d)
        if (takes_dtype(dtypes, d)) words[n++] = dtype_name(static_cast<addrmsnorm_dtype>(d));
    return word_list(words, n, " or ");
}

const char* quant_mode_name(int mode) {
    static const char* const names[] = {"static", "token", "group", "nvfp4", "mxfp8", "mxfp4"};
    return mode >= 1 && mode <= 6 ? names[mode - 1] : "invalid";
}

// The quantized modes built for a variant (kSandwichQuant, kGatedQuant) in words, the last joined by last_sep.
std::string quant_mode_list(unsigned built, const char* last_sep) {
    const char* words[6];
    int n = 0;
    for (int mode = 1; mode <= 6; ++mode)
        if (quant_built(built, mode, -1)) words[n++] = quant_mode_name(mode);
    return word_list(words, n, last_sep);
}

// A [rows, hidden] row-strided view, in bytes.
struct Rows {
    const char* name;
    uintptr_t ptr;
    int64_t stride;  // bytes between rows
    int64_t len;     // bytes of one row
    int64_t rows;
    int elem;
    int64_t stride_elems;
};

// Whether any byte of a is a byte of b: exact for equal row strides, conservative otherwise.
bool overlaps(Rows a, Rows b) {
    if (a.rows == 0 || b.rows == 0) return false;
    const __int128 pa = a.ptr, pb = b.ptr;
    if (pa + (__int128)(a.rows - 1) * a.stride + a.len <= pb) return false;
    if (pb + (__int128)(b.rows - 1) * b.stride + b.len <= pa) return false;
    int64_t sa = a.stride, sb = b.stride;
    if (a.rows == 1) sa = b.rows > 1 ? sb : 0;  // a single row takes the other view's stride
    if (b.rows == 1) sb = sa;
    if (sa != sb) return true;
    const __int128 d = pb - pa, s = sa;
    if (s == 0) return -b.len < d && d < a.len;
    auto floor_div = [](__int128 n, __int128 m) { __int128 q = n / m; return (n % m != 0 && ((n < 0) != (m < 0))) ? q - 1 : q; };
    // rows j of b and i of a meet iff -b.len < d + k*s < a.len for k = j - i in [-(a.rows-1), b.rows-1]
    __int128 k_lo = floor_div(-b.len - d, s) + 1;
    __int128 k_hi = -floor_div(d - a.len, s) - 1;
    if (k_lo < -(a.rows - 1)) k_lo = -(a.rows - 1);
    if (k_hi > b.rows - 1) k_hi = b.rows - 1;
    return k_lo <= k_hi;
}

bool exact_alias(const Rows& a, const Rows& b) {
    return a.ptr == b.ptr && a.elem == b.elem && (a.rows <= 1 || a.stride_elems == b.stride_elems);
}

// An output against an input: apart, or (where may_alias) the same view exactly. ADDRMSNORM_SUCCESS,
// or the error that names both.
addrmsnorm_status check_output_input(const Rows& o, const Rows& in, bool may_alias) {
    if (!overlaps(o, in) || (may_alias && exact_alias(o, in))) return ADDRMSNORM_SUCCESS;
    if (may_alias)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                    "%s partly overlaps %s; it may alias %s only exactly (same pointer, shape, dtype and strides)",
                    o.name, in.name, in.name);
    return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s overlaps %s; %s must not share memory with %s", o.name,
                in.name, o.name, in.name);
}

// An output's name in messages: the input it is exactly, where it is written in place (an in-place
// caller passed x and residual, not out and residual_out): residual_out's own input first.
const char* written_name(const Rows& o, const Rows& x, const Rows& res) {
    if (o.rows <= 0) return o.name;
    const bool residual_first = std::string_view(o.name) == "residual_out";
    const Rows& first = residual_first ? res : x;
    const Rows& second = residual_first ? x : res;
    if (exact_alias(o, first)) return first.name;
    if (exact_alias(o, second)) return second.name;
    return o.name;
}

// " (x is written in place)", " (x and residual are written in place)" or "": what a message adds for an in-place call.
std::string in_place_note(const char* a, const char* b, const Rows& oa, const Rows* ob) {
    const bool ia = a != oa.name, ib = ob != nullptr && b != ob->name;
    if (ia && ib) return std::string(" (") + a + " and " + b + " are written in place)";
    if (ia || ib) return std::string(" (") + (ia ? a : b) + " is written in place)";
    return "";
}

// An output whose rows share memory would have two programs writing one element.
addrmsnorm_status check_no_self_overlap(const Rows& o, const Rows& x, const Rows& res, int64_t hidden) {
    if (o.rows <= 1 || o.stride_elems >= hidden) return ADDRMSNORM_SUCCESS;
    const char* name = written_name(o, x, res);
    return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                "%s: row stride %lld < H=%lld, so its rows overlap; an output must not overlap itself%s", name,
                (long long)o.stride_elems, (long long)hidden, in_place_note(name, nullptr, o, nullptr).c_str());
}

addrmsnorm_status check_outputs_apart(const Rows& a, const Rows& b, const Rows& x, const Rows& res) {
    if (!overlaps(a, b)) return ADDRMSNORM_SUCCESS;
    const char *na = written_name(a, x, res), *nb = written_name(b, x, res);
    if (std::string_view(na) == nb) na = a.name, nb = b.name;  // both in place on one input: name the outputs
    return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s and %s overlap in memory; outputs must not share memory%s", na,
                nb, in_place_note(na, nb, a, &b).c_str());
}

}  // namespace

addrmsnorm_status validate_forward(const Call& c) {
    const int xs = dtype_size(c.x_dtype), rs = dtype_size(c.residual_dtype), ws = dtype_size(c.weight_dtype);
    if (xs == 0) return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "x_dtype %d is not an addrmsnorm_dtype", (int)c.x_dtype);
    if (rs == 0)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "residual_dtype %d is not an addrmsnorm_dtype",
                    (int)c.residual_dtype);
    if (ws == 0)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "weight_dtype %d is not an addrmsnorm_dtype",
                    (int)c.weight_dtype);
    if (c.residual_dtype != c.x_dtype && c.residual_dtype != ADDRMSNORM_FLOAT32)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE,
                    "residual_dtype is %s; it must be x_dtype (%s) or float32", dtype_name(c.residual_dtype),
                    dtype_name(c.x_dtype));
    if ((c.flags & kFlagHf) && c.residual_dtype != c.x_dtype)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE,
                    "ADDRMSNORM_NUMERICS_HF needs residual_dtype equal to x_dtype (%s), got %s",
                    dtype_name(c.x_dtype), dtype_name(c.residual_dtype));
    if ((c.flags & kFlagHf) && c.weight_dtype != c.x_dtype)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE,
                    "ADDRMSNORM_NUMERICS_HF needs weight_dtype equal to x_dtype (%s), got %s",
                    dtype_name(c.x_dtype), dtype_name(c.weight_dtype));
    if (c.hidden <= 0)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "hidden (H) must be > 0, got %lld", (long long)c.hidden);
    if (c.hidden > INT32_MAX)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "hidden (H) must be < 2^31, got %lld", (long long)c.hidden);
    const bool sandwich = c.post_weight != nullptr;
    if (sandwich) {  // the sandwich norm's dtypes
        if (!takes_dtype(kSandwichDtypes, c.x_dtype))
            return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "x_dtype is %s; the sandwich norm (post_weight) takes %s",
                        dtype_name(c.x_dtype), dtype_list(kSandwichDtypes).c_str());
        if (c.residual_dtype != c.x_dtype)
            return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE,
                        "residual_dtype is %s; the sandwich norm (post_weight) needs x_dtype (%s)",
                        dtype_name(c.residual_dtype), dtype_name(c.x_dtype));
        if (c.weight_dtype != c.x_dtype)  // weight_dtype is post_weight's (and weight's, if given)
            return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE,
                        "post_weight's weight_dtype is %s; the sandwich norm's weights are x_dtype (%s)",
                        dtype_name(c.weight_dtype), dtype_name(c.x_dtype));
        if (c.hidden % kVariantAlign != 0)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                        "hidden (H) is %lld; the sandwich norm (post_weight) needs H a multiple of %d",
                        (long long)c.hidden, kVariantAlign);
        if ((c.flags & kFlagHf) && c.post_weight_offset != c.weight_offset)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                        "ADDRMSNORM_NUMERICS_HF with post_weight needs post_weight_offset equal to weight_offset "
                        "(%g and %g): both of a model's norms take one HF form",
                        (double)c.post_weight_offset, (double)c.weight_offset);
    }
    if (c.rows < 0) return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rows must be >= 0, got %lld", (long long)c.rows);
    if (c.rows > INT32_MAX)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rows must be < 2^31, got %lld", (long long)c.rows);
    if (c.rows == 0) return ADDRMSNORM_SUCCESS;  // a no-op: pointers and strides are not used

    struct Named { const char* name; const void* p; int64_t stride; int elem; };
    const Named views[6] = {{"x", c.x, c.stride_x, xs},
                            {"residual", c.residual, c.stride_residual, rs},
                            {"out", c.out, c.stride_out, xs},
                            {"residual_out", c.residual_out, c.stride_residual_out, rs},
                            {"weight", c.weight, 0, ws},
                            {"post_weight", c.post_weight, 0, ws}};
    const bool weightless = (c.flags & kFlagNoWeight) != 0;
    for (const Named& v : views) {
        if (v.p == nullptr && ((&v == &views[4] && weightless) || &v == &views[5])) continue;  // absent weights
        if (v.p == nullptr) return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s is NULL", v.name);
        if (reinterpret_cast<uintptr_t>(v.p) % v.elem != 0)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s is not aligned to its %d-byte elements", v.name,
                        v.elem);
    }
    if (c.rstd != nullptr && reinterpret_cast<uintptr_t>(c.rstd) % 4 != 0)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rstd is not aligned to 4 bytes");
    if (sandwich) {  // the sandwich norm: 16-byte accesses only
        const int order[6] = {0, 1, 4, 5, 2, 3};  // the Python check's: the inputs, then the outputs
        for (int i : order) {
            const Named& v = views[i];
            if (v.p == nullptr) continue;
            if (i < 4 && c.rows > 1 && v.stride % kVariantAlign != 0)
                return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                            "stride_%s is %lld; the sandwich norm (post_weight) needs row strides of multiples of %d "
                            "elements", v.name, (long long)v.stride, kVariantAlign);
            if (reinterpret_cast<uintptr_t>(v.p) % kAlignmentBytes != 0)
                return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                            "%s does not start on a %d-byte boundary; the sandwich norm (post_weight) needs 16-byte "
                            "aligned tensors", v.name, kAlignmentBytes);
        }
    }
    Rows r[6];
    for (int i = 0; i < 6; ++i) {
        const Named& v = views[i];
        const bool is_weight = i >= 4;
        int64_t stride = is_weight ? c.hidden : v.stride;
        const int64_t rows = is_weight ? (v.p == nullptr ? 0 : 1) : c.rows;  // no weight: an empty span
        if (!is_weight && c.rows > 1 && stride < 0)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "stride_%s must be >= 0, got %lld", v.name,
                        (long long)stride);
        if (rows <= 1) stride = c.hidden;
        if (stride > INT64_MAX / 4)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "stride_%s is too large: %lld", v.name, (long long)stride);
        r[i] = Rows{v.name, reinterpret_cast<uintptr_t>(v.p), stride * v.elem, c.hidden * v.elem, rows, v.elem, stride};
    }
    const Rows &x = r[0], &res = r[1], &out = r[2], &rout = r[3], &w = r[4], &pw = r[5];
    for (int i = 2; i < 4; ++i)
        if (const addrmsnorm_status st = check_no_self_overlap(r[i], x, res, c.hidden); st != ADDRMSNORM_SUCCESS)
            return st;
    if (const addrmsnorm_status st = check_outputs_apart(out, rout, x, res); st != ADDRMSNORM_SUCCESS) return st;
    // out may be x or residual exactly; residual_out may be residual or x exactly.
    const Rows* outputs[2] = {&out, &rout};
    for (const Rows* o : outputs) {
        const Rows* inputs[4] = {&x, &res, &w, &pw};
        for (const Rows* in : inputs)
            if (const addrmsnorm_status st = check_output_input(*o, *in, in == &x || in == &res);
                st != ADDRMSNORM_SUCCESS)
                return st;
    }
    if (c.rstd != nullptr) {
        Rows rs_rows{"rstd", reinterpret_cast<uintptr_t>(c.rstd), 4, 4, c.rows, 4, 1};
        // rstd is one row of `rows` floats (the sandwich norm's: 2 * rows) for this check.
        rs_rows.len = 4 * c.rows * (sandwich ? 2 : 1);
        rs_rows.rows = 1;
        const Rows* all[6] = {&x, &res, &w, &pw, &out, &rout};
        for (const Rows* t : all)
            if (overlaps(rs_rows, *t))
                return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rstd overlaps %s; it must not share memory with it",
                            t->name);
    }
    return ADDRMSNORM_SUCCESS;
}

addrmsnorm_status check_backward_shape(addrmsnorm_dtype x_dtype, addrmsnorm_dtype residual_dtype,
                                       addrmsnorm_dtype weight_dtype, int64_t rows, int64_t hidden) {
    if (dtype_size(x_dtype) == 0 || dtype_size(residual_dtype) == 0 || dtype_size(weight_dtype) == 0)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "x_dtype, residual_dtype and weight_dtype must be addrmsnorm_dtype values");
    if (residual_dtype != x_dtype && residual_dtype != ADDRMSNORM_FLOAT32)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "residual_dtype is %s; it must be x_dtype (%s) or float32",
                    dtype_name(residual_dtype), dtype_name(x_dtype));
    if (hidden <= 0 || hidden > INT32_MAX)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "hidden (H) must be in [1, 2^31), got %lld", (long long)hidden);
    if (rows < 0 || rows > INT32_MAX)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rows must be in [0, 2^31), got %lld", (long long)rows);
    return ADDRMSNORM_SUCCESS;
}

addrmsnorm_status validate_backward(const BackwardCall& c) {
    if (addrmsnorm_status st = check_backward_shape(c.x_dtype, c.residual_dtype, c.weight_dtype, c.rows, c.hidden);
        st != ADDRMSNORM_SUCCESS)
        return st;
    const int xs = dtype_size(c.x_dtype), rs = dtype_size(c.residual_dtype), ws = dtype_size(c.weight_dtype);
    const bool separate = c.x_dtype != c.residual_dtype;
    if (!separate && c.dx != nullptr)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                    "dx must be NULL when x_dtype == residual_dtype: dresidual is then the gradient of x too");
    if (c.dweight != nullptr && reinterpret_cast<uintptr_t>(c.dweight) % ws != 0)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "dweight is not aligned to its %d-byte elements", ws);
    if (c.rows == 0) return ADDRMSNORM_SUCCESS;  // only dweight (zeroed) is touched

    struct Named { const char* name; const void* p; int64_t stride; int elem; bool output; bool required; };
    const Named views[] = {{"dy", c.dy, c.stride_dy, xs, false, true},
                           {"dresidual_out", c.dresidual_out, c.stride_dresidual_out, rs, false, false},
                           {c.plain ? "x" : "h", c.h, c.stride_h, rs, false, true},
                           {c.plain ? "dx" : "dresidual", c.dresidual, c.stride_dresidual, rs, true, true},
                           {"dx", c.dx, c.stride_dx, xs, true, separate}};
    Rows r[9];
    int n = 0;
    for (const Named& v : views) {
        if (v.p == nullptr) {
            if (v.required) return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s is NULL", v.name);
            continue;
        }
        if (reinterpret_cast<uintptr_t>(v.p) % v.elem != 0)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s is not aligned to its %d-byte elements", v.name, v.elem);
        int64_t stride = v.stride;
        if (c.rows > 1 && stride < 0)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "stride_%s must be >= 0, got %lld", v.name, (long long)stride);
        if (c.rows > 1 && v.output && stride < c.hidden)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                        "%s: row stride %lld < H=%lld, so its rows overlap; an output must not overlap itself",
                        v.name, (long long)stride, (long long)c.hidden);
        if (c.rows <= 1) stride = c.hidden;
        if (stride > INT64_MAX / 4)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "stride_%s is too large: %lld", v.name, (long long)stride);
        r[n++] = Rows{v.name, reinterpret_cast<uintptr_t>(v.p), stride * v.elem, c.hidden * v.elem, c.rows, v.elem, stride};
    }
    const bool has_rstd = c.rope == nullptr;  // the rotation's backward computes rstd (NULL, checked)
    if (has_rstd && c.rstd == nullptr) return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rstd is NULL");
    if (reinterpret_cast<uintptr_t>(c.rstd) % 4 != 0)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rstd is not aligned to 4 bytes");
    const bool weightless = c.weight == nullptr;
    if (!weightless && reinterpret_cast<uintptr_t>(c.weight) % ws != 0)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "weight is not aligned to its %d-byte elements", ws);
    if (c.workspace == nullptr) return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "workspace is NULL");
    if (reinterpret_cast<uintptr_t>(c.workspace) % 4 != 0)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "workspace is not aligned to 4 bytes");
    if (has_rstd) r[n++] = Rows{"rstd", reinterpret_cast<uintptr_t>(c.rstd), 4 * c.rows, 4 * c.rows, 1, 4, c.rows};
    r[n++] = Rows{"weight", reinterpret_cast<uintptr_t>(c.weight), c.hidden * ws, c.hidden * ws, weightless ? 0 : 1, ws,
                  c.hidden};
    const int64_t ws_len = static_cast<int64_t>(c.workspace_bytes);
    r[n++] = Rows{"workspace", reinterpret_cast<uintptr_t>(c.workspace), ws_len, ws_len, 1, 1, ws_len};
    if (c.dweight != nullptr)
        r[n++] = Rows{"dweight", reinterpret_cast<uintptr_t>(c.dweight), c.hidden * ws, c.hidden * ws, 1, ws, c.hidden};
    // Outputs (dresidual, dx, workspace, dweight) must not share a byte with anything else.
    auto is_output = [](const Rows& x) {
        const std::string_view nm = x.name;
        return nm == "dresidual" || nm == "dx" || nm == "workspace" || nm == "dweight";
    };
    for (int i = 0; i < n; ++i) {
        if (!is_output(r[i])) continue;
        for (int j = 0; j < n; ++j) {
            if (j == i || (is_output(r[j]) && j < i)) continue;
            if (overlaps(r[i], r[j]))
                return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s overlaps %s; %s must not share memory with anything",
                            r[i].name, r[j].name, r[i].name);
        }
    }
    return ADDRMSNORM_SUCCESS;
}

}  // namespace detail
}  // namespace addrmsnorm

namespace addrmsnorm {
namespace detail {

// The quantized forward's rules, in validation.check_quant's order and words (q is the Python API's
// `out`). Alignment: kQuantAlign elements of every row stride and H, 16-byte pointers. The rules' constants are
// configs.py's (kQuant*, kBlockQuantSize: kernel_table.h).
addrmsnorm_status validate_quant(const Call& c) {
    const addrmsnorm_quant& qd = c.quant_desc;
    // The plain norm's quantized outputs (residual NULL): x in residual's place, no residual_out.
    const bool plain = c.residual == nullptr;
    const void* residual = plain ? c.x : c.residual;
    const int64_t stride_residual = plain ? c.stride_x : c.stride_residual;
    if (qd.dtype != ADDRMSNORM_QUANT_INT8 && qd.dtype != ADDRMSNORM_QUANT_FLOAT8_E4M3 &&
        qd.dtype != ADDRMSNORM_QUANT_FLOAT4_E2M1)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE,
                    "quant->dtype %d is not an addrmsnorm_quant_dtype (ADDRMSNORM_QUANT_INT8, "
                    "ADDRMSNORM_QUANT_FLOAT8_E4M3 or ADDRMSNORM_QUANT_FLOAT4_E2M1)", (int)qd.dtype);
    if (qd.mode < ADDRMSNORM_QUANT_STATIC || qd.mode > ADDRMSNORM_QUANT_MXFP4)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "quant->mode %d is not an addrmsnorm_quant_mode", (int)qd.mode);
    const bool block = qd.mode >= ADDRMSNORM_QUANT_NVFP4, nvfp4 = qd.mode == ADDRMSNORM_QUANT_NVFP4;
    const bool fp4 = qd.dtype == ADDRMSNORM_QUANT_FLOAT4_E2M1;
    const int block_size = kBlockQuantSize[qd.mode - 1];
    const char* block_name = nvfp4 ? "NVFP4" : qd.mode == ADDRMSNORM_QUANT_MXFP8 ? "MXFP8" : "MXFP4";
    if (!takes_dtype(kQuantActivationDtypes, c.x_dtype))
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "x_dtype is %s; quantized outputs take x of %s",
                    dtype_name(c.x_dtype), dtype_list(kQuantActivationDtypes).c_str());
    if (block) {  // validation.check_quant_meta's block-format rules, in its order and words
        const addrmsnorm_quant_dtype want = qd.mode == ADDRMSNORM_QUANT_MXFP8 ? ADDRMSNORM_QUANT_FLOAT8_E4M3
                                                                               : ADDRMSNORM_QUANT_FLOAT4_E2M1;
        if (qd.dtype != want)
            return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "%s writes q as %s; quant->dtype is %d", block_name,
                        want == ADDRMSNORM_QUANT_FLOAT8_E4M3 ? "ADDRMSNORM_QUANT_FLOAT8_E4M3" : "ADDRMSNORM_QUANT_FLOAT4_E2M1",
                        (int)qd.dtype);
        if (qd.group_size != block_size)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "group_size must be %d for %s (its block), got %d",
                        block_size, block_name, (int)qd.group_size);
    } else if (fp4) {
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE,
                    "ADDRMSNORM_QUANT_FLOAT4_E2M1 needs a block-scaled mode (ADDRMSNORM_QUANT_NVFP4 or _MXFP4)");
    }
    const bool is_static = qd.mode == ADDRMSNORM_QUANT_STATIC, per_group = qd.mode == ADDRMSNORM_QUANT_PER_GROUP;
    const int* const group_sizes_end = kQuantGroupSizes + kNumQuantGroupSizes;
    if (per_group && std::find(kQuantGroupSizes, group_sizes_end, qd.group_size) == group_sizes_end)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "group_size must be %s, got %d",
                    joined(kQuantGroupSizes, kNumQuantGroupSizes, " or ", [](int g) { return std::to_string(g); })
                        .c_str(),
                    (int)qd.group_size);
    if (!per_group && !block && qd.group_size != 0)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                    "group_size must be 0 outside ADDRMSNORM_QUANT_PER_GROUP, got %d", (int)qd.group_size);
    if (c.hidden <= 0)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "hidden (H) must be > 0, got %lld", (long long)c.hidden);
    if (c.hidden > INT32_MAX)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "hidden (H) must be < 2^31, got %lld", (long long)c.hidden);
    if ((per_group || block) && c.hidden % qd.group_size != 0)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "H=%lld is not a multiple of group_size=%d",
                    (long long)c.hidden, (int)qd.group_size);
    if (c.hidden % kQuantAlign != 0)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                    "H=%lld is not a multiple of %d: quantized outputs need rows of %d-element multiples, as fp8 "
                    "and int8 GEMMs do", (long long)c.hidden, kQuantAlign, kQuantAlign);
    if (qd.flags & ~(ADDRMSNORM_QUANT_UE8M0 | ADDRMSNORM_QUANT_SWIZZLED))
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                    "quant->flags has unknown bits 0x%x (defined: ADDRMSNORM_QUANT_UE8M0, ADDRMSNORM_QUANT_SWIZZLED)",
                    qd.flags & ~(ADDRMSNORM_QUANT_UE8M0 | ADDRMSNORM_QUANT_SWIZZLED));
    const bool swizzled = (qd.flags & ADDRMSNORM_QUANT_SWIZZLED) != 0;
    if (swizzled && !block)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                    "swizzled_scales lays out the scales of a block-scaled format (NVFP4, MXFP8, MXFP4)");
    if (block && (qd.flags & ADDRMSNORM_QUANT_UE8M0))
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "ue8m0_scales does not apply to %s: its scales are %s",
                    block_name, nvfp4 ? "e4m3" : "e8m0 already");
    if (block && qd.scale_ub != nullptr)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "scale_ub does not apply to %s", block_name);
    if (block && !nvfp4 && qd.scale != nullptr)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s takes no scale (NVFP4 alone has a global scale)", block_name);
    if (nvfp4 && qd.scale == nullptr)  // with or without rows, as validation.check_quant_meta
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "scale is NULL; NVFP4 reads its global scale there");
    if (!is_static && !nvfp4 && qd.scale != nullptr)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "scale is given but the mode is dynamic; pass NULL");
    if (is_static && qd.scale_ub != nullptr)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "scale_ub bounds a dynamic scale; a static scale takes none");
    if (is_static && (qd.flags & ADDRMSNORM_QUANT_UE8M0))
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "ue8m0_scales rounds dynamic scales; a static scale is used as given");
    if (c.post_weight != nullptr) {  // the sandwich norm's built outputs (configs.SANDWICH_QUANT)
        ADDRMSNORM_REFUSE_IF(!quant_built(kSandwichQuant, qd.mode, -1),
                             "post_weight (the sandwich norm) takes the quantized outputs %s (fp8 for static, token and "
                             "group), not %s", quant_mode_list(kSandwichQuant, ", ").c_str(), quant_mode_name(qd.mode));
        ADDRMSNORM_REFUSE_IF(!quant_built(kSandwichQuant, qd.mode, qd.dtype),
                             "post_weight (the sandwich norm) quantizes to float8_e4m3fn in the static, per-token and "
                             "per-group modes, not int8");
    }
    // The gated norm's quantized outputs: the gate's rules, then the built modes.
    if (c.z != nullptr) {
        if (addrmsnorm_status st = check_gate_rules(c); st != ADDRMSNORM_SUCCESS) return st;
        ADDRMSNORM_REFUSE_IF(!quant_built(kGatedQuant, qd.mode, qd.dtype),
                             "z (the gated norm) takes the quantized outputs %s (float8_e4m3fn), not mode %d",
                             quant_mode_list(kGatedQuant, " and ").c_str(), (int)qd.mode);
        ADDRMSNORM_REFUSE_IF(qd.mode == ADDRMSNORM_QUANT_PER_TOKEN && c.group_size != 0 &&
                                 c.group_size != c.hidden,
                             "group_size is %lld: the gated norm's per-token scales need its group to be the row "
                             "(hidden = %lld)", (long long)c.group_size, (long long)c.hidden);
    }
    if (is_static && qd.scales != nullptr)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "scales_out receives dynamic scales; a static call has none to write");
    const void* f32s[3] = {qd.scale, qd.scale_ub, block ? nullptr : qd.scales};
    const char* f32_names[3] = {"scale", "scale_ub", "scales_out"};
    for (int i = 0; i < 3; ++i)
        if (f32s[i] != nullptr && reinterpret_cast<uintptr_t>(f32s[i]) % 4 != 0)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s is not aligned to 4 bytes", f32_names[i]);
    if (c.rows < 0) return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rows must be >= 0, got %lld", (long long)c.rows);
    if (c.rows > INT32_MAX)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rows must be < 2^31, got %lld", (long long)c.rows);
    if (c.rows == 0) return ADDRMSNORM_SUCCESS;  // a no-op: no pointer is used
    if (is_static && qd.scale == nullptr)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "scale is NULL; ADDRMSNORM_QUANT_STATIC reads its scale there");

    if (!is_static && qd.scales == nullptr)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                    "scales_out is required for dynamic quantization (no scale given): the kernel writes the scales there");

    const int xs = dtype_size(c.x_dtype);
    struct Named { const char* name; const void* p; int64_t stride; int elem; };
    const Named views[6] = {{"x", c.x, c.stride_x, xs},       {"residual", residual, stride_residual, xs},
                            {"weight", c.weight, 0, xs},      {"out", c.out, c.stride_out, fp4 ? 0 : 1},
                            {"residual_out", c.residual_out, c.stride_residual_out, xs},
                            {"y", c.y, c.stride_y, xs}};
    Rows r[6];
    for (int i = 0; i < 6; ++i) {
        const Named& v = views[i];
        const bool is_weight = i == 2;
        if (v.p == nullptr) {
            if (i == 5 || (i == 4 && plain) || (is_weight && (c.flags & kFlagNoWeight))) {
                r[i] = Rows{v.name, 0, 0, 0, 0, v.elem, 0};  // no y (or the plain norm's residual_out): empty
                continue;
            }
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s is NULL", v.name);
        }
        // fp4 q (elem 0): rows of hidden / 2 bytes, its stride in bytes
        const int64_t width = v.elem == 0 ? c.hidden / 2 : c.hidden;
        const int elem = v.elem == 0 ? 1 : v.elem;
        int64_t stride = is_weight ? c.hidden : v.stride;
        const int64_t rows = is_weight ? 1 : c.rows;
        if (!is_weight && c.rows > 1 && stride < 0)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "stride_%s must be >= 0, got %lld", v.name, (long long)stride);
        if (rows <= 1) stride = width;
        if (stride > INT64_MAX / 4)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "stride_%s is too large: %lld", v.name, (long long)stride);
        r[i] = Rows{v.name, reinterpret_cast<uintptr_t>(v.p), stride * elem, width * elem, rows, elem, stride};
    }
    for (int i = 3; i < 6; ++i)
        if (const addrmsnorm_status st = check_no_self_overlap(r[i], r[0], r[1], r[i].len / r[i].elem);
            st != ADDRMSNORM_SUCCESS)
            return st;
    // The sandwich norm's first weight: [hidden] of x_dtype, an input.
    if (c.post_weight != nullptr && reinterpret_cast<uintptr_t>(c.post_weight) % xs != 0)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "post_weight is not aligned to its %d-byte elements", xs);
    const Rows pw{"post_weight", reinterpret_cast<uintptr_t>(c.post_weight), c.hidden * xs, c.hidden * xs,
                  c.post_weight != nullptr ? 1 : 0, xs, c.hidden};
    // scale and scale_ub: one fp32 each, inputs.
    Rows sc{"scale", reinterpret_cast<uintptr_t>(qd.scale), 4, 4, qd.scale ? 1 : 0, 4, 1};
    Rows ub{"scale_ub", reinterpret_cast<uintptr_t>(qd.scale_ub), 4, 4, qd.scale_ub ? 1 : 0, 4, 1};
    const Rows *x = &r[0], *res = &r[1], *w = &r[2], *qo = &r[3], *rout = &r[4], *yo = &r[5];
    const Rows* outputs[3] = {qo, rout, yo};
    for (int i = 0; i < 3; ++i)
        for (int j = i + 1; j < 3; ++j)
            if (const addrmsnorm_status st = check_outputs_apart(*outputs[i], *outputs[j], *x, *res);
                st != ADDRMSNORM_SUCCESS)
                return st;
    // residual_out may be residual or x exactly; y may be x exactly; q aliases nothing.
    for (const Rows* o : outputs) {
        const Rows* inputs[6] = {x, res, w, &pw, &sc, &ub};
        for (const Rows* in : inputs) {
            const bool may_alias = (o == rout && (in == res || in == x)) || (o == yo && in == x);
            if (const addrmsnorm_status st = check_output_input(*o, *in, may_alias); st != ADDRMSNORM_SUCCESS) return st;
        }
    }
    // Alignment after the overlap checks, outputs first: validation.check_quant's order.
    const Rows* aligned[7] = {qo, rout, yo, x, res, w, &pw};
    for (const Rows* v : aligned) {
        if (v->rows == 0 || v->ptr == 0) continue;  // no y
        // fp4 q: 16 elements are 8 bytes, the unit of its stride
        const int64_t align = (v == qo && fp4) ? kQuantAlign / 2 : kQuantAlign;
        if (v->ptr % 16 != 0 || (v->rows > 1 && v->stride_elems % align != 0))
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                        "%s must start on a 16-byte boundary and have a row stride that is a multiple of %d elements "
                        "(quantized outputs take aligned rows)", v->name, kQuantAlign);
    }
    if (block && swizzled) {  // one contiguous buffer of the padded tiles
        const int64_t span = swizzled_rows(c.rows) * swizzled_blocks(c.hidden / qd.group_size);
        Rows so{"scales_out", reinterpret_cast<uintptr_t>(qd.scales), span, span, 1, 1, span};
        const Rows* all[9] = {x, res, w, &pw, qo, rout, yo, &sc, &ub};
        for (const Rows* t : all)
            if (overlaps(so, *t))
                return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "scales_out overlaps %s; it must not share memory with it",
                            t->name);
        if (so.ptr % 16 != 0)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "scales_out must start on a 16-byte boundary (the swizzled "
                        "layout's padding is written in 4-byte words)");
    } else if (!is_static) {
        const int scale_bytes = block ? 1 : 4;
        const int64_t groups = (per_group || block) ? c.hidden / qd.group_size : 1;
        const int64_t rs = c.rows > 1 ? qd.scales_stride_row : 0, gs = groups > 1 ? qd.scales_stride_group : 0;
        if (rs < 0 || gs < 0 || (c.rows > 1 && rs == 0) || (groups > 1 && gs == 0) ||
            (c.rows > 1 && groups > 1 && !(rs >= groups * gs || gs >= c.rows * rs))) {
            if (per_group || block)  // the words of validation._scales_geometry, which prints the tensor's strides
                return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "scales_out: strides (%lld, %lld) make two scales share an address",
                            (long long)qd.scales_stride_row, (long long)qd.scales_stride_group);
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "scales_out: strides (%lld,) make two scales share an address",
                        (long long)qd.scales_stride_row);
        }
        // The scales' byte extent, as one row, against everything else.
        const int64_t span = scale_bytes * ((c.rows - 1) * rs + (groups - 1) * gs + 1);
        Rows so{"scales_out", reinterpret_cast<uintptr_t>(qd.scales), span, span, 1, scale_bytes, span / scale_bytes};
        const Rows* all[9] = {x, res, w, &pw, qo, rout, yo, &sc, &ub};
        for (const Rows* t : all)
            if (overlaps(so, *t))
                return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "scales_out overlaps %s; it must not share memory with it",
                            t->name);
    }
    if (c.z != nullptr) return check_quant_gate_memory(c);
    return ADDRMSNORM_SUCCESS;
}

namespace {

// A [rows, heads, hidden] view of two leading strides (heads == 1: one stride), in elements.
struct Grouped {
    const char* name;
    uintptr_t ptr;
    int64_t rows, heads, stride, head_stride;
    int elem;
    // The byte span [start, end) of every element the view reaches (validation.GroupedRows).
    uintptr_t end(int64_t hidden) const {
        if (rows * heads == 0) return ptr;
        const int64_t last = (rows > 1 ? (rows - 1) * stride : 0) + (heads > 1 ? (heads - 1) * head_stride : 0);
        return ptr + static_cast<uintptr_t>((last + hidden) * elem);
    }
    bool same_view(const Grouped& o) const {
        if (ptr != o.ptr || elem != o.elem) return false;
        return (rows <= 1 || stride == o.stride) && (heads <= 1 || head_stride == o.head_stride);
    }
};

bool spans_meet(uintptr_t a0, uintptr_t a1, uintptr_t b0, uintptr_t b1) { return a0 < b1 && b0 < a1; }

// Two rows of an output sharing memory.
addrmsnorm_status check_grouped_self_overlap(const Grouped& o, int64_t hidden) {
    if (o.rows * o.heads <= 1) return ADDRMSNORM_SUCCESS;
    if (o.heads == 1) {
        if (o.stride < hidden)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                        "%s: row stride %lld < H=%lld, so its rows overlap; an output must not overlap itself", o.name,
                        (long long)o.stride, (long long)hidden);
        return ADDRMSNORM_SUCCESS;
    }
    if (o.head_stride < hidden || (o.rows > 1 && o.stride < (o.heads - 1) * o.head_stride + hidden))
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                    "%s: strides (%lld, %lld) with H=%lld make rows overlap; an output must not overlap itself", o.name,
                    (long long)o.stride, (long long)o.head_stride, (long long)hidden);
    return ADDRMSNORM_SUCCESS;
}

addrmsnorm_status check_norm_dtypes(uint32_t flags, addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype,
                                    const char* x_name) {
    if (dtype_size(x_dtype) == 0)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "%s %d is not an addrmsnorm_dtype", x_name, (int)x_dtype);
    if (dtype_size(weight_dtype) == 0)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "weight_dtype %d is not an addrmsnorm_dtype", (int)weight_dtype);
    if ((flags & kFlagHf) && weight_dtype != x_dtype)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE,
                    "ADDRMSNORM_NUMERICS_HF needs weight_dtype equal to %s (%s), got %s", x_name,
                    dtype_name(x_dtype), dtype_name(weight_dtype));
    return ADDRMSNORM_SUCCESS;
}

addrmsnorm_status check_pointer(const char* name, const void* p, int elem) {
    if (p == nullptr) return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s is NULL", name);
    if (reinterpret_cast<uintptr_t>(p) % elem != 0)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s is not aligned to its %d-byte elements", name, elem);
    return ADDRMSNORM_SUCCESS;
}

// The views of a variant built for 16-byte accesses alone, in order: each row
// stride (stride_name NULL: a weight, its start alone) a multiple of kVariantAlign and each start on a
// 16-byte boundary. NULL pointers (absent weights) are skipped.
struct VectorView {
    const char* name;
    const char* stride_name;
    const void* p;
    int64_t stride;
};

addrmsnorm_status check_vector_views(const VectorView* views, int n, const char* variant, int64_t rows) {
    for (int i = 0; i < n; ++i) {
        const VectorView& v = views[i];
        if (v.p == nullptr) continue;
        ADDRMSNORM_REFUSE_IF(v.stride_name != nullptr && rows > 1 && v.stride % kVariantAlign != 0,
                             "%s is %lld; %s needs row strides of multiples of %d elements", v.stride_name,
                             (long long)v.stride, variant, kVariantAlign);
        ADDRMSNORM_REFUSE_IF(reinterpret_cast<uintptr_t>(v.p) % kAlignmentBytes != 0,
                             "%s does not start on a %d-byte boundary; %s needs 16-byte aligned tensors", v.name,
                             kAlignmentBytes, variant);
    }
    return ADDRMSNORM_SUCCESS;
}

// The rules the single pass's no-rstd variants share: no rstd, numerics 0 or 1,
// and HF's numerics with the weight as it is. input: the variant's own input (z, b); hf_form: why HF's keeps it.
addrmsnorm_status check_variant_numerics(const Call& c, const char* input, const char* variant, const char* hf_form) {
    ADDRMSNORM_REFUSE_IF(c.rstd != nullptr, "rstd must be NULL with %s: %s writes no rstd", input, variant);
    ADDRMSNORM_REFUSE_IF(c.flags & kFlagRoundOnce,
                         "numerics 2 (hf_round_once) is not %s's: its numerics are 0 (contract) or 1 (hf)", variant);
    ADDRMSNORM_REFUSE_IF((c.flags & kFlagHf) && c.weight_offset != 0.0f,
                         "ADDRMSNORM_NUMERICS_HF with %s needs weight_offset 0: %s", input, hf_form);
    return ADDRMSNORM_SUCCESS;
}

// The gated norm's rules that need no memory, in order.
addrmsnorm_status check_gate_rules(const Call& c) {
    ADDRMSNORM_REFUSE_IF(c.groups > 1, "x: the gated norm takes rows of one stride (groups must be 0 or 1 with z; its "
                         "groups are group_size)");
    if (c.weight_dtype != c.x_dtype)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "weight has dtype %s; the gated norm's weight is x's dtype (%s)",
                    dtype_name(c.weight_dtype), dtype_name(c.x_dtype));
    const int64_t g = c.group_size == 0 ? c.hidden : c.group_size;
    ADDRMSNORM_REFUSE_IF(g < 0 || c.hidden % g != 0, "group_size is %lld; it must divide hidden (H) = %lld",
                         (long long)c.group_size, (long long)c.hidden);
    ADDRMSNORM_REFUSE_IF(g > kGatedMaxGroup, "group_size is %lld; the gated norm's groups are at most %d elements",
                         (long long)g, kGatedMaxGroup);
    ADDRMSNORM_REFUSE_IF(g % kVariantAlign != 0,
                         "group_size is %lld; the gated norm (z) needs groups of a multiple of %d elements",
                         (long long)g, kVariantAlign);
    if (addrmsnorm_status st = check_variant_numerics(c, "z", "the gated norm",
                                                      "HF's gated norms (Qwen3-Next, Mamba2) keep the weight as it is");
        st != ADDRMSNORM_SUCCESS)
        return st;
    ADDRMSNORM_REFUSE_IF(c.gate != ADDRMSNORM_GATE_SILU, "gate %d is not an addrmsnorm_gate (ADDRMSNORM_GATE_SILU)",
                         (int)c.gate);
    ADDRMSNORM_REFUSE_IF(c.gate_first != 0 && c.gate_first != 1, "gate_first must be 0 or 1, got %d",
                         (int)c.gate_first);
    return ADDRMSNORM_SUCCESS;
}

// The gated norm's memory: 16-byte rows and tensors; out apart from z.
addrmsnorm_status check_gate_memory(const Call& c, const Grouped& out, uintptr_t out_end) {
    if (addrmsnorm_status st = check_pointer("z", c.z, dtype_size(c.x_dtype)); st != ADDRMSNORM_SUCCESS) return st;
    ADDRMSNORM_REFUSE_IF(c.rows > 1 && (c.stride_z < 0 || c.stride_z > INT64_MAX / 8),
                         "stride_z must be >= 0, got %lld", (long long)c.stride_z);
    const VectorView views[4] = {{"x", "stride_x", c.x, c.stride_x}, {"z", "stride_z", c.z, c.stride_z},
                                 {"out", "stride_out", c.out, c.stride_out},
                                 {"weight", nullptr, (c.flags & kFlagNoWeight) ? nullptr : c.weight, 0}};
    if (addrmsnorm_status st = check_vector_views(views, 4, "the gated norm (z)", c.rows); st != ADDRMSNORM_SUCCESS)
        return st;
    const Grouped z{"z", reinterpret_cast<uintptr_t>(c.z), c.rows, 1, c.stride_z, 0, dtype_size(c.x_dtype)};
    ADDRMSNORM_REFUSE_IF(spans_meet(out.ptr, out_end, z.ptr, z.end(c.hidden)),
                         "out overlaps z; out may be x exactly (in place), or apart from z");
    return ADDRMSNORM_SUCCESS;
}

// The pair's rules that need no memory, in order.
addrmsnorm_status check_pair_rules(const Call& c) {
    ADDRMSNORM_REFUSE_IF(c.z != nullptr, "b is the pair's second part: the pair takes no gate (z)");
    ADDRMSNORM_REFUSE_IF(c.groups > 1, "x: the pair takes rows of one stride (groups must be 0 or 1 with b)");
    if (!takes_dtype(kPairDtypes, c.x_dtype))
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "x_dtype is %s; the pair (b) takes %s", dtype_name(c.x_dtype),
                    dtype_list(kPairDtypes).c_str());
    if (c.weight_dtype != c.x_dtype)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "weight has dtype %s; the pair's weights are x's dtype (%s)",
                    dtype_name(c.weight_dtype), dtype_name(c.x_dtype));
    ADDRMSNORM_REFUSE_IF(c.b_out == nullptr, "b_out is NULL but b is given: the pair writes b's norm there");
    ADDRMSNORM_REFUSE_IF(c.b_hidden <= 0, "b_hidden is %lld; the pair's parts are > 0 wide", (long long)c.b_hidden);
    const bool weightless = (c.flags & kFlagNoWeight) != 0;
    ADDRMSNORM_REFUSE_IF(weightless != (c.b_weight == nullptr),
                         "b_weight is NULL but weight is given, or the other way: the pair's parts are both weighted "
                         "or both weightless");
    const int64_t widths[2] = {c.hidden, c.b_hidden};
    const char* names[2] = {"hidden", "b_hidden"};
    for (int i = 0; i < 2; ++i) {
        ADDRMSNORM_REFUSE_IF(widths[i] > kPairMaxWidth, "%s is %lld; the pair's parts are at most %d wide", names[i],
                             (long long)widths[i], kPairMaxWidth);
        ADDRMSNORM_REFUSE_IF(widths[i] % kVariantAlign != 0,
                             "%s is %lld; the pair (b) needs widths of multiples of %d", names[i],
                             (long long)widths[i], kVariantAlign);
    }
    return check_variant_numerics(c, "b", "the pair", "the latent norms (DeepSeek-V3's) are LlamaRMSNorm's form");
}

// Two views of rows of one stride, the same stride, whose columns never
// meet (column slices of one buffer).
bool rows_interleave_apart(const Grouped& u, int64_t hu, const Grouped& v, int64_t hv) {
    if (u.heads != 1 || v.heads != 1 || u.elem != v.elem || u.stride != v.stride) return false;
    const int64_t S = u.stride;
    const int64_t diff = static_cast<int64_t>(v.ptr) - static_cast<int64_t>(u.ptr);
    if (S <= 0 || diff % u.elem != 0 || hu > S || hv > S) return false;
    const int64_t d = (((diff / u.elem) % S) + S) % S;
    return d >= hu && d + hv <= S;
}

// The pair's memory: 16-byte rows and tensors; out may be x and b_out b exactly, and no output
// meets another tensor (column slices of one buffer, interleaved, do not meet).
addrmsnorm_status check_pair_memory(const Call& c, const Grouped& x, const Grouped& out) {
    const int xs = dtype_size(c.x_dtype);
    if (addrmsnorm_status st = check_pointer("b", c.b, xs); st != ADDRMSNORM_SUCCESS) return st;
    if (addrmsnorm_status st = check_pointer("b_out", c.b_out, xs); st != ADDRMSNORM_SUCCESS) return st;
    for (const auto& [name, v] : {std::pair<const char*, int64_t>{"stride_b", c.stride_b}, {"stride_b_out", c.stride_b_out}})
        ADDRMSNORM_REFUSE_IF(c.rows > 1 && (v < 0 || v > INT64_MAX / 8), "%s must be >= 0, got %lld", name, (long long)v);
    const Grouped b{"b", reinterpret_cast<uintptr_t>(c.b), c.rows, 1, c.stride_b, 0, xs};
    Grouped bo{"b_out", reinterpret_cast<uintptr_t>(c.b_out), c.rows, 1, c.stride_b_out, 0, xs};
    const bool weightless = (c.flags & kFlagNoWeight) != 0;
    const void* weights[2] = {weightless ? nullptr : c.weight, c.b_weight};
    const char* wnames[2] = {"weight", "b_weight"};
    const VectorView views[6] = {{"x", "stride_x", c.x, c.stride_x}, {"b", "stride_b", c.b, c.stride_b},
                                 {"out", "stride_out", c.out, c.stride_out},
                                 {"b_out", "stride_b_out", c.b_out, c.stride_b_out},
                                 {"weight", nullptr, weights[0], 0}, {"b_weight", nullptr, weights[1], 0}};
    if (addrmsnorm_status st = check_vector_views(views, 6, "the pair (b)", c.rows); st != ADDRMSNORM_SUCCESS)
        return st;
    const bool b_in_place = bo.same_view(b);
    if (b_in_place) bo.name = "b";
    auto meet = [](const Grouped& u, int64_t hu, const Grouped& v, int64_t hv) {
        return u.rows > 0 && v.rows > 0 && spans_meet(u.ptr, u.end(hu), v.ptr, v.end(hv)) &&
               !rows_interleave_apart(u, hu, v, hv);
    };
    if (!b_in_place) {
        if (addrmsnorm_status st = check_grouped_self_overlap(bo, c.b_hidden); st != ADDRMSNORM_SUCCESS) return st;
        ADDRMSNORM_REFUSE_IF(meet(bo, c.b_hidden, b, c.b_hidden),
                             "b_out overlaps b; b_out may be b exactly (in place), or apart from it");
    }
    struct M { const char* o_name; const Grouped* o; int64_t ho; const char* in_name; const Grouped* t; int64_t ht; };
    const M pairs[3] = {{"out", &out, c.hidden, "b", &b, c.b_hidden}, {"b_out", &bo, c.b_hidden, "x", &x, c.hidden},
                        {"b_out", &bo, c.b_hidden, "out", &out, c.hidden}};
    for (const M& m : pairs)
        ADDRMSNORM_REFUSE_IF(meet(*m.o, m.ho, *m.t, m.ht),
                             "%s overlaps %s; the pair's outputs must not share memory with the other part", m.o_name,
                             m.in_name);
    const int ws = dtype_size(c.weight_dtype);
    const int64_t wwidths[2] = {c.hidden, c.b_hidden};
    for (int i = 0; i < 2; ++i) {
        if (weights[i] == nullptr) continue;
        const uintptr_t w0 = reinterpret_cast<uintptr_t>(weights[i]), w1 = w0 + static_cast<uintptr_t>(wwidths[i] * ws);
        ADDRMSNORM_REFUSE_IF(spans_meet(bo.ptr, bo.end(c.b_hidden), w0, w1),
                             "b_out overlaps %s; b_out must not share memory with %s", wnames[i], wnames[i]);
    }
    if (c.b_weight != nullptr) {
        const uintptr_t w0 = reinterpret_cast<uintptr_t>(c.b_weight), w1 = w0 + static_cast<uintptr_t>(c.b_hidden * ws);
        ADDRMSNORM_REFUSE_IF(spans_meet(out.ptr, out.end(c.hidden), w0, w1),
                             "out overlaps b_weight; out must not share memory with b_weight");
    }
    return ADDRMSNORM_SUCCESS;
}

// The gated norm's memory for a quantized call: q in out's place, its bytes (fp4 q is packed) a row.
addrmsnorm_status check_quant_gate_memory(const Call& c) {
    const Grouped q{"out", reinterpret_cast<uintptr_t>(c.out), c.rows, 1, c.stride_out, 0, 1};
    return check_gate_memory(c, q, q.end(c.hidden));
}

}  // namespace

// The checks of validation.check_rmsnorm, in its order where the two meet.
addrmsnorm_status validate_rmsnorm(const Call& c) {
    if (addrmsnorm_status st = check_norm_dtypes(c.flags, c.x_dtype, c.weight_dtype, "x_dtype");
        st != ADDRMSNORM_SUCCESS)
        return st;
    if (c.hidden <= 0)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "hidden (H) must be > 0, got %lld", (long long)c.hidden);
    if (c.hidden > INT32_MAX)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "hidden (H) must be < 2^31, got %lld", (long long)c.hidden);
    if (c.rows < 0) return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rows must be >= 0, got %lld", (long long)c.rows);
    if (c.groups < 1) return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "heads must be >= 1, got %lld", (long long)c.groups);
    if (c.rows > INT32_MAX / c.groups)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rows * heads must be < 2^31, got %lld * %lld",
                    (long long)c.rows, (long long)c.groups);
    const bool gated = c.z != nullptr;
    if (gated)
        if (addrmsnorm_status st = check_gate_rules(c); st != ADDRMSNORM_SUCCESS) return st;
    const bool pair = c.b != nullptr;
    if (pair)
        if (addrmsnorm_status st = check_pair_rules(c); st != ADDRMSNORM_SUCCESS) return st;
    if (c.rows == 0) return ADDRMSNORM_SUCCESS;  // a no-op: pointers and strides are not used
    const int xs = dtype_size(c.x_dtype), ws = dtype_size(c.weight_dtype);
    if (addrmsnorm_status st = check_pointer("x", c.x, xs); st != ADDRMSNORM_SUCCESS) return st;
    const bool weightless = (c.flags & kFlagNoWeight) != 0;
    if (!weightless)
        if (addrmsnorm_status st = check_pointer("weight", c.weight, ws); st != ADDRMSNORM_SUCCESS) return st;
    if (addrmsnorm_status st = check_pointer("out", c.out, xs); st != ADDRMSNORM_SUCCESS) return st;
    if (c.rstd != nullptr && reinterpret_cast<uintptr_t>(c.rstd) % 4 != 0)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rstd is not aligned to 4 bytes");
    struct S { const char* name; int64_t v; bool used; };
    const S strides[4] = {{"stride_x", c.stride_x, c.rows > 1}, {"stride_x_head", c.stride_x_group, c.groups > 1},
                          {"stride_out", c.stride_out, c.rows > 1}, {"stride_out_head", c.stride_out_group, c.groups > 1}};
    for (const S& s : strides) {
        if (s.used && s.v < 0)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s must be >= 0, got %lld", s.name, (long long)s.v);
        if (s.used && s.v > INT64_MAX / 8)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s is too large: %lld", s.name, (long long)s.v);
    }
    const Grouped x{"x", reinterpret_cast<uintptr_t>(c.x), c.rows, c.groups, c.stride_x, c.stride_x_group, xs};
    Grouped out{"out", reinterpret_cast<uintptr_t>(c.out), c.rows, c.groups, c.stride_out, c.stride_out_group, xs};
    const bool in_place = out.same_view(x);
    if (in_place) out.name = "x";  // written in place: the caller passed x
    if (addrmsnorm_status st = check_grouped_self_overlap(out, c.hidden); st != ADDRMSNORM_SUCCESS) return st;
    const uintptr_t x1 = x.end(c.hidden), o1 = out.end(c.hidden);
    if (!in_place && spans_meet(out.ptr, o1, x.ptr, x1))
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "out overlaps x; out may be x exactly (in place), or apart from it");
    const uintptr_t w0 = reinterpret_cast<uintptr_t>(c.weight),
                    w1 = w0 + (weightless ? 0 : static_cast<uintptr_t>(c.hidden * ws));  // no weight: an empty span
    if (spans_meet(out.ptr, o1, w0, w1))
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "out overlaps weight; out must not share memory with weight");
    if (c.rstd != nullptr) {
        const uintptr_t r0 = reinterpret_cast<uintptr_t>(c.rstd), r1 = r0 + 4 * static_cast<uintptr_t>(c.rows * c.groups);
        if (spans_meet(r0, r1, x.ptr, x1))
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rstd overlaps x; it must not share memory with it");
        if (spans_meet(r0, r1, out.ptr, o1))
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rstd overlaps out; it must not share memory with it");
        if (spans_meet(r0, r1, w0, w1))
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "rstd overlaps weight; it must not share memory with it");
    }
    if (gated)
        if (addrmsnorm_status st = check_gate_memory(c, out, o1); st != ADDRMSNORM_SUCCESS) return st;
    if (pair) return check_pair_memory(c, x, out);
    return ADDRMSNORM_SUCCESS;
}

// The checks of validation.check_qk_rmsnorm: qkv's q and k heads are written in place.
namespace {
// The QK norm's weights' dtype as validate_rope takes it: the heads' dtype when weightless (nothing is read).
addrmsnorm_dtype rope_weight_dtype(const Call& c) { return c.weightless() ? c.x_dtype : c.weight_dtype; }
}  // namespace

addrmsnorm_status validate_qk(const Call& c) {
    // A token's q heads, then its k heads (then, from v_from_group on, its v heads), head_dim (hidden) wide, in
    // place on qkv (x).
    const int64_t num_q_heads = c.weight2_from_group,
                  num_kv_heads = (c.v_from_group != 0 ? c.v_from_group : c.groups) - c.weight2_from_group,
                  num_v_heads = c.v_from_group != 0 ? c.groups - c.v_from_group : 0;
    if (addrmsnorm_status st = check_norm_dtypes(c.flags, c.x_dtype, c.weight_dtype, "x_dtype");
        st != ADDRMSNORM_SUCCESS)
        return st;
    if (c.x_dtype != ADDRMSNORM_FLOAT16 && c.x_dtype != ADDRMSNORM_BFLOAT16)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "qkv has dtype %s; the QK norm takes float16 or bfloat16",
                    dtype_name(c.x_dtype));
    if (c.weight_dtype != c.x_dtype && c.weight_dtype != ADDRMSNORM_FLOAT32)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "q_weight has dtype %s; it must be qkv's dtype (%s) or float32",
                    dtype_name(c.weight_dtype), dtype_name(c.x_dtype));
    if (c.hidden <= 0 || c.hidden > kQkMaxHeadDim)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                    "head_dim must be in [1, %d], got %lld; for wider rows normalize the q and k views with "
                    "addrmsnorm_rmsnorm", kQkMaxHeadDim, (long long)c.hidden);
    if (num_q_heads < 1 || num_kv_heads < 1)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "num_q_heads and num_kv_heads must be >= 1, got %lld and %lld",
                    (long long)num_q_heads, (long long)num_kv_heads);
    // addrmsnorm_norm_args_qkv sets v_from_group for any num_v_heads but 0: a negative count leaves fewer groups.
    if (c.v_from_group != 0 && num_v_heads < 0)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "num_v_heads must be >= 0, got %lld", (long long)num_v_heads);
    ADDRMSNORM_REFUSE_IF(c.v_from_group != 0 && num_v_heads < 1,
                         "v_from_group is %lld of %lld groups: the v heads start after the k heads and before the last "
                         "group", (long long)c.v_from_group, (long long)c.groups);
    if (c.rows < 0) return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "tokens must be >= 0, got %lld", (long long)c.rows);
    const int64_t heads = num_q_heads + num_kv_heads + num_v_heads;
    if (num_q_heads > INT32_MAX / c.hidden || num_kv_heads > INT32_MAX / c.hidden || num_v_heads > INT32_MAX / c.hidden ||
        heads > INT32_MAX / c.hidden || (c.rows > 0 && c.rows > INT32_MAX / heads))
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                    "tokens * heads and (num_q_heads + num_kv_heads) * head_dim must be < 2^31");
    if (c.rope != nullptr && c.rows == 0) {
        int64_t rd = 0;
        return validate_rope(*c.rope, c.x_dtype, rope_weight_dtype(c), 0, c.hidden, (c.flags & kFlagHf) != 0, 0, 0,
                             &rd);
    }
    if (c.rows == 0) return ADDRMSNORM_SUCCESS;
    const int xs = dtype_size(c.x_dtype), ws = dtype_size(c.weight_dtype);
    if (addrmsnorm_status st = check_pointer("qkv", c.x, xs); st != ADDRMSNORM_SUCCESS) return st;
    const bool weightless = (c.flags & kFlagNoWeight) != 0;
    if (!weightless) {
        if (addrmsnorm_status st = check_pointer("q_weight", c.weight, ws); st != ADDRMSNORM_SUCCESS) return st;
        if (addrmsnorm_status st = check_pointer("k_weight", c.weight2, ws); st != ADDRMSNORM_SUCCESS) return st;
    }
    const int64_t width = heads * c.hidden;
    if (c.rows > 1 && (c.stride_x < width || c.stride_x > INT64_MAX / 8)) {
        const std::string v = num_v_heads != 0 ? " + " + std::to_string(num_v_heads) : "";
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                    "stride_qkv=%lld is less than the %s heads' width, (%lld + %lld%s) * %lld = %lld: rows would "
                    "overlap", (long long)c.stride_x, num_v_heads != 0 ? "q, k and v" : "q and k",
                    (long long)num_q_heads, (long long)num_kv_heads, v.c_str(), (long long)c.hidden, (long long)width);
    }
    const uintptr_t q0 = reinterpret_cast<uintptr_t>(c.x);
    const uintptr_t q1 = q0 + static_cast<uintptr_t>(((c.rows - 1) * (c.rows > 1 ? c.stride_x : 0) + width) * xs);
    const void* weights[2] = {c.weight, c.weight2};
    const char* names[2] = {"q_weight", "k_weight"};
    for (int i = 0; i < (weightless ? 0 : 2); ++i) {
        const uintptr_t w0 = reinterpret_cast<uintptr_t>(weights[i]), w1 = w0 + static_cast<uintptr_t>(c.hidden * ws);
        if (spans_meet(q0, q1, w0, w1))
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s overlaps qkv; qkv is written in place and must not "
                        "share memory with %s", names[i], names[i]);
    }
    if (c.rope != nullptr) {
        int64_t rd = 0;
        return validate_rope(*c.rope, c.x_dtype, rope_weight_dtype(c), c.rows, c.hidden, (c.flags & kFlagHf) != 0,
                             q0, q1, &rd);
    }
    return ADDRMSNORM_SUCCESS;
}

addrmsnorm_status validate_rope(const addrmsnorm_rope& r, addrmsnorm_dtype x_dtype, addrmsnorm_dtype weight_dtype,
                                int64_t tokens, int64_t hidden, bool hf, uintptr_t w0, uintptr_t w1,
                                int64_t* rotary_dim) {
    const bool cached = r.positions != nullptr || r.cos_sin_cache != nullptr;
    const bool given = r.cos != nullptr || r.sin != nullptr;
    ADDRMSNORM_REFUSE_IF(!cached && !given,
                         "rope is given but no angles: the rotation takes positions and cos_sin_cache, or cos and sin");
    ADDRMSNORM_REFUSE_IF(cached && given, "the rotation takes positions and cos_sin_cache, or cos and sin, not both");
    ADDRMSNORM_REFUSE_IF(cached && (r.positions == nullptr || r.cos_sin_cache == nullptr),
                         "%s is NULL: positions and cos_sin_cache come together (positions index the cache's rows)",
                         r.positions == nullptr ? "positions" : "cos_sin_cache");
    ADDRMSNORM_REFUSE_IF(given && (r.cos == nullptr || r.sin == nullptr),
                         "%s is NULL but %s is given: the rotation takes both", r.sin == nullptr ? "sin" : "cos",
                         r.sin == nullptr ? "cos" : "sin");
    ADDRMSNORM_REFUSE_IF(r.style != ADDRMSNORM_ROPE_NEOX && r.style != ADDRMSNORM_ROPE_GPTJ,
                         "rope_style must be 0 (neox) or 1 (gptj), got %d", (int)r.style);
    const int64_t rd = r.rotary_dim == 0 ? hidden : r.rotary_dim;
    ADDRMSNORM_REFUSE_IF(rd < 0 || rd % 2 != 0 || rd > hidden,
                         "rotary_dim must be even and in [2, head_dim = %lld] (0: head_dim), got %d", (long long)hidden,
                         (int)r.rotary_dim);
    if (!takes_dtype(kRopeDtypes, x_dtype))
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "the rotation takes %s heads, got %s",
                    dtype_list(kRopeDtypes).c_str(), dtype_name(x_dtype));
    ADDRMSNORM_REFUSE_IF(hidden > kQkMaxHeadDim, "head_dim must be at most %d with the rotation, got %lld",
                         kQkMaxHeadDim, (long long)hidden);
    if (r.angle_dtype != ADDRMSNORM_FLOAT32 && r.angle_dtype != x_dtype)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE,
                    "%s has dtype %s; the angles are float32 or the heads' dtype (%s)", cached ? "cos_sin_cache" : "cos",
                    dtype_size(r.angle_dtype) ? dtype_name(r.angle_dtype) : "invalid", dtype_name(x_dtype));
    ADDRMSNORM_REFUSE_IF(hf && (cached || r.angle_dtype != x_dtype),
                         "numerics='hf' rotates as HF's apply_rotary_pos_emb does: with cos and sin of the heads' "
                         "dtype (%s), not a cos_sin_cache or float32 angles", dtype_name(x_dtype));
    if (cached && weight_dtype != x_dtype && !kRopeFp32WeightsWithPositions)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE,
                    "q_weight has dtype %s; with positions and a cos_sin_cache the weights are the heads' dtype (%s) "
                    "(float32 weights take cos and sin)", dtype_name(weight_dtype), dtype_name(x_dtype));
    *rotary_dim = rd;
    if (tokens == 0) return ADDRMSNORM_SUCCESS;
    const int as = dtype_size(r.angle_dtype);
    struct Span { const char* name; uintptr_t p0, p1; };
    Span spans[2];
    if (cached) {
        if (r.positions_dtype != ADDRMSNORM_INT32 && r.positions_dtype != ADDRMSNORM_INT64)
            return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "positions_dtype %d is not an addrmsnorm_index_dtype",
                        (int)r.positions_dtype);
        const int ps = r.positions_dtype == ADDRMSNORM_INT32 ? 4 : 8;
        if (addrmsnorm_status st = check_pointer("positions", r.positions, ps); st != ADDRMSNORM_SUCCESS) return st;
        if (addrmsnorm_status st = check_pointer("cos_sin_cache", r.cos_sin_cache, as); st != ADDRMSNORM_SUCCESS)
            return st;
        ADDRMSNORM_REFUSE_IF(r.max_position < 1 || r.max_position > INT32_MAX,
                             "max_position must be in [1, 2^31), got %lld", (long long)r.max_position);
        ADDRMSNORM_REFUSE_IF(r.max_position > 1 && (r.stride_cache < 0 || r.stride_cache > INT64_MAX / 8),
                             "stride_cache must be >= 0, got %lld", (long long)r.stride_cache);
        const uintptr_t p0 = reinterpret_cast<uintptr_t>(r.positions), c0 = reinterpret_cast<uintptr_t>(r.cos_sin_cache);
        const int64_t cache_stride = r.max_position > 1 ? r.stride_cache : 0;
        spans[0] = {"positions", p0, p0 + static_cast<uintptr_t>(tokens * ps)};
        spans[1] = {"cos_sin_cache", c0, c0 + static_cast<uintptr_t>(((r.max_position - 1) * cache_stride + rd) * as)};
    } else {
        if (addrmsnorm_status st = check_pointer("cos", r.cos, as); st != ADDRMSNORM_SUCCESS) return st;
        if (addrmsnorm_status st = check_pointer("sin", r.sin, as); st != ADDRMSNORM_SUCCESS) return st;
        ADDRMSNORM_REFUSE_IF(tokens > 1 && (r.stride_cos < 0 || r.stride_cos > INT64_MAX / 8),
                             "cos: negative row stride %lld", (long long)r.stride_cos);
        ADDRMSNORM_REFUSE_IF(tokens > 1 && (r.stride_sin < 0 || r.stride_sin > INT64_MAX / 8),
                             "sin: negative row stride %lld", (long long)r.stride_sin);
        const uintptr_t c0 = reinterpret_cast<uintptr_t>(r.cos), s0 = reinterpret_cast<uintptr_t>(r.sin);
        const int64_t sc = tokens > 1 ? r.stride_cos : 0, ss = tokens > 1 ? r.stride_sin : 0;
        spans[0] = {"cos", c0, c0 + static_cast<uintptr_t>(((tokens - 1) * sc + rd) * as)};
        spans[1] = {"sin", s0, s0 + static_cast<uintptr_t>(((tokens - 1) * ss + rd) * as)};
    }
    for (const Span& sp : spans)
        ADDRMSNORM_REFUSE_IF(spans_meet(sp.p0, sp.p1, w0, w1),
                             "%s overlaps the heads the call writes; it must not share memory with them", sp.name);
    return ADDRMSNORM_SUCCESS;
}

}  // namespace detail
}  // namespace addrmsnorm

// ----- the one call's struct: read it, check the fields that pick the kind, then the kind's rules ---

namespace addrmsnorm {
namespace detail {
namespace {

// The caller's struct, of struct_size bytes: at least this library's (every field it knows), and
// where larger (a caller built against a newer header), zero in every byte this library does not know.
template <typename T>
addrmsnorm_status read_struct(const T* in, T* out, const char* type, uint64_t min_size = sizeof(T)) {
    if (in == nullptr) return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "args is NULL");
    constexpr uint64_t kMaxSize = 4096;
    const uint64_t size = in->struct_size;
    if (size < min_size || size > kMaxSize)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                    "args->struct_size is %llu, not the size of a %s (%zu bytes in this library): start from "
                    "%s_init()", (unsigned long long)size, type, sizeof(T), type);
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(in);
    for (uint64_t i = sizeof(T); i < size; ++i)
        if (bytes[i] != 0)
            return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT,
                        "args sets a field past the %zu bytes of this library's %s: the caller was built against a "
                        "newer addrmsnorm.h", sizeof(T), type);
    std::memset(out, 0, sizeof(T));  // the fields an older caller's struct ends before are zero
    std::memcpy(out, in, size < sizeof(T) ? size : sizeof(T));
    return ADDRMSNORM_SUCCESS;
}

// The shortest digits that give v back (1e-06, 1e+39).
std::string shortest(double v) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
}

// eps and weight_offset reach the kernels as fp32: finite there, and eps > 0 there.
addrmsnorm_status check_scalar(const char* name, double v, bool positive) {
    const std::string s = shortest(v);
    if (!std::isfinite(v)) return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s must be finite, got %s", name, s.c_str());
    if (positive && !(v > 0.0))
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s must be > 0, got %s", name, s.c_str());
    const float f = static_cast<float>(v);
    if (std::isinf(f)) return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s=%s overflows float32", name, s.c_str());
    if (positive && f == 0.0f)
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "%s=%s rounds to 0 in float32; it must be > 0 there", name,
                    s.c_str());
    return ADDRMSNORM_SUCCESS;
}

}  // namespace

addrmsnorm_status validate_norm(const addrmsnorm_norm_args* args, Call* c) {
    // x_scale, post_weight and post_weight_offset came after the first struct: a 0.1 caller's struct ends before them.
    addrmsnorm_norm_args& a = *c;  // the caller's fields, read into the call
    if (addrmsnorm_status st = read_struct(args, &a, "addrmsnorm_norm_args", offsetof(addrmsnorm_norm_args, x_scale));
        st != ADDRMSNORM_SUCCESS)
        return st;
    if (addrmsnorm_status st = check_scalar("eps", a.eps, true); st != ADDRMSNORM_SUCCESS) return st;
    if (addrmsnorm_status st = check_scalar("weight_offset", a.weight_offset, false); st != ADDRMSNORM_SUCCESS)
        return st;
    constexpr uint32_t kPublicFlags = ADDRMSNORM_FLAG_PDL | ADDRMSNORM_FLAG_X_SCALE;
    ADDRMSNORM_REFUSE_IF(a.flags & ~kPublicFlags,
                         "flags has unknown bits 0x%x (defined: ADDRMSNORM_FLAG_PDL, ADDRMSNORM_FLAG_X_SCALE)",
                         a.flags & ~kPublicFlags);
    const bool scaled = (a.flags & ADDRMSNORM_FLAG_X_SCALE) != 0;
    if (scaled) {
        if (addrmsnorm_status st = check_scalar("x_scale", a.x_scale, false); st != ADDRMSNORM_SUCCESS) return st;
        ADDRMSNORM_REFUSE_IF(a.x_scale == 0.0, "x_scale is 0 with ADDRMSNORM_FLAG_X_SCALE: the add would ignore x");
        ADDRMSNORM_REFUSE_IF(a.residual == nullptr,
                             "x_scale scales x in the residual add (ADDRMSNORM_FLAG_X_SCALE); the plain norm (residual "
                             "NULL) has none");
    } else {
        ADDRMSNORM_REFUSE_IF(a.x_scale != 0.0, "x_scale is %s but ADDRMSNORM_FLAG_X_SCALE is not set",
                             shortest(a.x_scale).c_str());
    }
    // The sandwich norm's scalars.
    const bool sandwich = a.post_weight != nullptr;
    if (addrmsnorm_status st = check_scalar("post_weight_offset", a.post_weight_offset, false); st != ADDRMSNORM_SUCCESS)
        return st;
    ADDRMSNORM_REFUSE_IF(!sandwich && a.post_weight_offset != 0.0,
                         "post_weight_offset is %s but post_weight is NULL: it offsets the sandwich norm's first weight",
                         shortest(a.post_weight_offset).c_str());
    ADDRMSNORM_REFUSE_IF(sandwich && a.residual == nullptr,
                         "post_weight is the sandwich norm's first weight (h = residual + rmsnorm(x; post_weight)); it "
                         "needs a residual");
    ADDRMSNORM_REFUSE_IF(sandwich && scaled && a.x_scale != 1.0,
                         "x_scale is %s with post_weight: the sandwich norm adds rmsnorm(x) unscaled",
                         shortest(a.x_scale).c_str());
    // The gated norm: the fields without z; z with a residual.
    const bool gated = a.z != nullptr;
    ADDRMSNORM_REFUSE_IF(!gated && a.group_size != 0, "group_size is %lld but z is NULL: it is the gated norm's group",
                         (long long)a.group_size);
    ADDRMSNORM_REFUSE_IF(!gated && a.gate_first != 0, "gate_first is %d but z is NULL: it orders the gated norm's gate",
                         (int)a.gate_first);
    ADDRMSNORM_REFUSE_IF(!gated && (a.stride_z != 0 || a.gate != 0),
                         "z is NULL but stride_z or gate is set: they describe the gated norm's gate");
    ADDRMSNORM_REFUSE_IF(gated && a.residual != nullptr,
                         "z is the gated norm's gate, which normalizes x alone: it takes no residual");
    // The pair: b with a residual, and the fields without b.
    const bool pair = a.b != nullptr;
    ADDRMSNORM_REFUSE_IF(!pair && a.b_weight != nullptr, "b_weight is given but b is NULL: it is the pair's second weight");
    ADDRMSNORM_REFUSE_IF(!pair && a.b_out != nullptr, "b_out is given but b is NULL: it is the pair's second output");
    ADDRMSNORM_REFUSE_IF(!pair && (a.b_hidden != 0 || a.stride_b != 0 || a.stride_b_out != 0),
                         "b is NULL but b_hidden, stride_b or stride_b_out is set: they describe the pair's second part");
    ADDRMSNORM_REFUSE_IF(pair && a.residual != nullptr,
                         "b is the pair's second part, which normalizes x alone: it takes no residual");
    // The weightless norm: weight NULL. Its kernels read x's dtype in the weight's place (nothing is read).
    const bool weightless = a.weight == nullptr;
    if (weightless) {
        ADDRMSNORM_REFUSE_IF(a.weight2 != nullptr,
                             "weight is NULL but weight2 is given: the QK norm takes both weights, or neither (weightless)");
        ADDRMSNORM_REFUSE_IF(a.weight_offset != 0.0,
                             "weight_offset is %s but weight is NULL: the weightless norm has no weight to offset",
                             shortest(a.weight_offset).c_str());
        if (!sandwich) a.weight_dtype = a.x_dtype;  // the weightless sandwich's weight_dtype is post_weight's
    }
    ADDRMSNORM_REFUSE_IF(a.reserved != 0, "reserved must be 0, got %u", a.reserved);
    ADDRMSNORM_REFUSE_IF(a.numerics < ADDRMSNORM_NUMERICS_CONTRACT || a.numerics > ADDRMSNORM_NUMERICS_HF_ROUND_ONCE,
                         "numerics %d is not an addrmsnorm_numerics (ADDRMSNORM_NUMERICS_CONTRACT, _HF or "
                         "_HF_ROUND_ONCE)", (int)a.numerics);
    ADDRMSNORM_REFUSE_IF(a.groups < 0, "groups must be >= 0, got %lld", (long long)a.groups);
    const uint32_t flags = (a.flags & ADDRMSNORM_FLAG_PDL) |
                           (a.numerics != ADDRMSNORM_NUMERICS_CONTRACT ? kFlagHf : 0u) |
                           (a.numerics == ADDRMSNORM_NUMERICS_HF_ROUND_ONCE ? kFlagRoundOnce : 0u) |
                           (weightless ? kFlagNoWeight : 0u);
    const int64_t groups = a.groups > 1 ? a.groups : 1;
    ADDRMSNORM_REFUSE_IF(a.y != nullptr && a.quant == nullptr,
                         "y is the quantized calls' second output; with quant NULL it must be NULL");
    ADDRMSNORM_REFUSE_IF(a.residual == nullptr && a.residual_out != nullptr,
                         "residual_out is given but residual is NULL: the plain norm writes no residual");
    ADDRMSNORM_REFUSE_IF(a.residual != nullptr && a.residual_out == nullptr,
                         "residual_out is NULL but residual is given: the fused norm writes h there");
    ADDRMSNORM_REFUSE_IF(!weightless && a.weight2 == nullptr && a.weight2_from_group != 0,
                         "weight2_from_group is %lld but weight2 is NULL", (long long)a.weight2_from_group);
    // The QK norm: weight2 given, or (weightless) its split alone.
    const bool qk = a.weight2 != nullptr || (weightless && a.weight2_from_group != 0);
    ADDRMSNORM_REFUSE_IF(a.rope != nullptr && !qk,
                         "rope rotates the QK norm's heads: it needs weight2 (or, weightless, weight2_from_group)");
    ADDRMSNORM_REFUSE_IF(a.v_from_group != 0 && !qk,
                         "v_from_group is %lld: it starts the QK norm's v heads, and needs weight2 (or, weightless, "
                         "weight2_from_group)", (long long)a.v_from_group);
    // The call as the kernels take it (Call's fields); the rules of its kind follow.
    a.flags = flags;
    a.eps = static_cast<float>(a.eps);
    a.weight_offset = static_cast<float>(a.weight_offset);
    a.post_weight_offset = static_cast<float>(a.post_weight_offset);
    a.x_scale = scaled ? static_cast<float>(a.x_scale) : 1.0f;
    a.groups = groups;
    if (a.quant != nullptr) {
        c->kind = Call::kQuant;
        ADDRMSNORM_REFUSE_IF(qk, "weight2 (the QK norm) has no quantized outputs; quant must be NULL");
        ADDRMSNORM_REFUSE_IF(pair, "b (the pair) has no quantized outputs yet; quant must be NULL");
        ADDRMSNORM_REFUSE_IF(groups > 1, "quantized outputs take [rows, hidden] views: groups must be 0 or 1, got %lld",
                             (long long)groups);
        ADDRMSNORM_REFUSE_IF(a.numerics != ADDRMSNORM_NUMERICS_CONTRACT,
                             "quantized outputs take the contract's numerics (ADDRMSNORM_NUMERICS_CONTRACT), got %d",
                             (int)a.numerics);
        ADDRMSNORM_REFUSE_IF(a.rstd != nullptr, "rstd must be NULL with quant: the quantized calls write no rstd");
        if (a.residual != nullptr && a.residual_dtype != a.x_dtype)
            return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "residual_dtype is %s; quantized outputs need x_dtype (%s)",
                        dtype_name(a.residual_dtype), dtype_name(a.x_dtype));
        if (a.weight_dtype != a.x_dtype)  // the weightless sandwich's weight_dtype is post_weight's
            return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "%s is %s; quantized outputs need x_dtype (%s)",
                        weightless && sandwich ? "post_weight's weight_dtype" : "weight_dtype",
                        dtype_name(a.weight_dtype), dtype_name(a.x_dtype));
        c->quant_desc = *a.quant;
        a.quant = &c->quant_desc;
        return validate_quant(*c);
    }
    if (qk) {
        c->kind = Call::kQk;
        ADDRMSNORM_REFUSE_IF(gated, "z is the gated norm's gate; the QK norm (weight2) takes none");
        ADDRMSNORM_REFUSE_IF(pair, "b is the pair's second part; the QK norm (weight2) takes none");
        ADDRMSNORM_REFUSE_IF(a.residual != nullptr, "weight2 is the QK norm's k weight; the QK norm takes no residual");
        ADDRMSNORM_REFUSE_IF(a.rstd != nullptr, "rstd must be NULL with weight2: the QK norm writes no rstd");
        ADDRMSNORM_REFUSE_IF(a.rows > 0 && (a.out != a.x || a.stride_out != a.stride_x ||
                                            (groups > 1 && a.stride_out_group != a.stride_x_group)),
                             "out must be x with x's strides: the QK norm (weight2) runs in place on qkv");
        ADDRMSNORM_REFUSE_IF(groups > 1 && a.stride_x_group != a.hidden,
                             "stride_x_group is %lld: the QK norm's heads are contiguous in qkv (hidden = head_dim = "
                             "%lld)", (long long)a.stride_x_group, (long long)a.hidden);
        return validate_qk(*c);
    }
    if (a.residual != nullptr) {
        c->kind = Call::kFused;
        ADDRMSNORM_REFUSE_IF(groups > 1, "a residual needs [rows, hidden] views: groups must be 0 or 1, got %lld",
                             (long long)groups);
        ADDRMSNORM_REFUSE_IF(a.numerics == ADDRMSNORM_NUMERICS_HF_ROUND_ONCE,
                             "ADDRMSNORM_NUMERICS_HF_ROUND_ONCE is the plain and QK norms' (residual NULL); with a "
                             "residual, ADDRMSNORM_NUMERICS_HF");
        return validate_forward(*c);
    }
    c->kind = Call::kPlain;
    return validate_rmsnorm(*c);
}

addrmsnorm_status read_norm_backward(const addrmsnorm_norm_backward_args* args, addrmsnorm_norm_backward_args* out) {
    // A caller built before the rotation's fields ends its struct at rope: those are then zero (no rotation).
    if (addrmsnorm_status st = read_struct(args, out, "addrmsnorm_norm_backward_args",
                                           offsetof(addrmsnorm_norm_backward_args, rope));
        st != ADDRMSNORM_SUCCESS)
        return st;
    ADDRMSNORM_REFUSE_IF(out->flags != 0, "flags must be 0 (no backward flags are defined), got %u", out->flags);
    return check_scalar("weight_offset", out->weight_offset, false);
}

namespace {

// The rotation's backward (rope given): the plain norm's backward of a part's heads, its angles by column.
addrmsnorm_status check_backward_rope(const addrmsnorm_norm_backward_args& a, int64_t* rotary_dim) {
    const addrmsnorm_rope& r = *a.rope;
    // rope is the backward of the plain norm of rotated heads: each refusal names the field it is about.
    ADDRMSNORM_REFUSE_IF(a.dresidual_out != nullptr,
                         "dresidual_out must be NULL with rope: the backward of the plain norm of rotated heads");
    ADDRMSNORM_REFUSE_IF(a.dresidual != nullptr || a.dx == nullptr,
                         "dx must be given and dresidual NULL with rope: the backward of the plain norm of rotated "
                         "heads writes dx");
    ADDRMSNORM_REFUSE_IF(a.residual_dtype != a.x_dtype,
                         "residual_dtype must be x_dtype with rope (h is the heads' x), got %s and %s",
                         dtype_size(a.residual_dtype) ? dtype_name(a.residual_dtype) : "invalid",
                         dtype_size(a.x_dtype) ? dtype_name(a.x_dtype) : "invalid");
    ADDRMSNORM_REFUSE_IF(r.positions != nullptr || r.cos_sin_cache != nullptr,
                         "the backward rotates by cos and sin by column, not positions into a cos_sin_cache (gather "
                         "the cache's rows first)");
    if (r.angle_dtype != ADDRMSNORM_FLOAT32)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "cos has dtype %s; the backward's angles are float32",
                    dtype_size(r.angle_dtype) ? dtype_name(r.angle_dtype) : "invalid");
    ADDRMSNORM_REFUSE_IF(a.rope_groups < 1 || a.rows % a.rope_groups != 0,
                         "rope_groups (a token's heads) must be > 0 and divide rows (%lld), got %lld", (long long)a.rows,
                         (long long)a.rope_groups);
    if (addrmsnorm_status st = check_scalar("eps", a.eps, true); st != ADDRMSNORM_SUCCESS) return st;
    ADDRMSNORM_REFUSE_IF(a.rstd != nullptr, "rstd must be NULL with rope: each row's is computed from h and eps");
    const uintptr_t d0 = reinterpret_cast<uintptr_t>(a.dx);
    const int64_t stride = a.rows > 1 ? a.stride_dx : 0;
    const uintptr_t d1 = a.rows ? d0 + static_cast<uintptr_t>(((a.rows - 1) * stride + a.hidden) * dtype_size(a.x_dtype))
                                : d0;
    return validate_rope(r, a.x_dtype, a.x_dtype, a.rows / a.rope_groups, a.hidden, false, d0, d1, rotary_dim);
}

}  // namespace

addrmsnorm_status validate_norm_backward(const addrmsnorm_norm_backward_args* args, BackwardCall* c) {
    addrmsnorm_norm_backward_args a;
    if (addrmsnorm_status st = read_norm_backward(args, &a); st != ADDRMSNORM_SUCCESS) return st;
    if (a.weight == nullptr) {  // the weightless norm's backward: g = dy, no weight gradient
        ADDRMSNORM_REFUSE_IF(a.dweight != nullptr,
                             "dweight is given but weight is NULL: the weightless norm has no weight gradient");
        ADDRMSNORM_REFUSE_IF(a.weight_offset != 0.0,
                             "weight_offset is %s but weight is NULL: the weightless norm has no weight to offset",
                             shortest(a.weight_offset).c_str());
        a.weight_dtype = a.residual_dtype;  // read in the weight's place by no load
    }
    int64_t rotary_dim = 0;
    if (a.rope != nullptr)
        if (addrmsnorm_status st = check_backward_rope(a, &rotary_dim); st != ADDRMSNORM_SUCCESS) return st;
    // The plain norm's: no dresidual, the gradient of x in dx (h is x).
    const bool plain = a.dresidual == nullptr && a.dx != nullptr && a.x_dtype == a.residual_dtype;
    ADDRMSNORM_REFUSE_IF(plain && a.dresidual_out != nullptr,
                         "dresidual_out is given but dresidual is NULL: the plain norm's backward (dx alone) has no "
                         "residual gradient");
    *c = BackwardCall{.dy = a.dy, .dresidual_out = a.dresidual_out, .h = a.h, .rstd = a.rstd, .weight = a.weight,
                      .dresidual = plain ? a.dx : a.dresidual, .dx = plain ? nullptr : a.dx, .dweight = a.dweight,
                      .workspace = a.workspace, .workspace_bytes = a.workspace_bytes, .rows = a.rows,
                      .hidden = a.hidden, .stride_dy = a.stride_dy, .stride_dresidual_out = a.stride_dresidual_out,
                      .stride_h = a.stride_h, .stride_dresidual = plain ? a.stride_dx : a.stride_dresidual,
                      .stride_dx = plain ? 0 : a.stride_dx, .x_dtype = a.x_dtype, .residual_dtype = a.residual_dtype,
                      .weight_dtype = a.weight_dtype, .weight_offset = static_cast<float>(a.weight_offset),
                      .flags = 0u, .plain = plain, .rope = a.rope, .rope_groups = a.rope_groups,
                      .eps = static_cast<float>(a.eps), .rotary_dim = rotary_dim};
    return validate_backward(*c);
}

}  // namespace detail
}  // namespace addrmsnorm
