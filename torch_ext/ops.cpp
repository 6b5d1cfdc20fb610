// The C++ backend of the torch.ops.addrmsnorm operators (their schemas are in addrmsnorm/ops.py).
//
// Seven operators (norm, norm_, norm_into, norm_backward, norm_quant, norm_quant_into, qk_rmsnorm_),
// each with an optional residual: without one, the plain norm. Each maps its tensors onto one
// addrmsnorm_norm_args (or the backward's) and calls the C ABI on torch's current stream for the
// tensors' device. The C runtime's validator (src/validate.cpp) is the only one that runs on this
// path: what this file checks is only what the struct cannot carry, so that the mapping is defined:
//
//   1. each tensor's dtype is one the C ABI names (addrmsnorm_dtype, addrmsnorm_quant_dtype);
//   2. the outputs that have no dtype field of their own have their input's dtype;
//   3. every tensor has the shape the struct's rows and hidden describe, weights are (hidden,) and
//      contiguous, rstd and the scales have their one layout;
//   4. every tensor is on x's device, a CUDA device;
//   5. each view's last dimension is contiguous and its leading ones flatten to the struct's strides.
//
// Every rule on values (eps, numerics, dtype pairings, H, alignment, overlap, the quantized modes) is
// the C runtime's, in its words. addrmsnorm/validation.py checks the same two layers in the same order
// for the JIT backend; tests/test_validation_parity.py holds the two to the same verdict, exception
// and argument named.
//
// Errors reach Python as ValueError (INVALID_ARGUMENT: values, shapes, layouts, devices) or TypeError
// (UNSUPPORTED_DTYPE: dtypes); driver failures as RuntimeError. Nothing is written before every check
// has passed. Nothing here needs CUDA headers or nvcc: the stream comes from c10's generic
// device-guard interface, and the library is linked in statically.
//
// The Autograd-key kernels of the same operators are in autograd.cpp.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <algorithm>
#include <c10/util/accumulate.h>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "addrmsnorm/addrmsnorm.h"

namespace {

using OptTensor = std::optional<at::Tensor>;
constexpr auto kContiguous = c10::MemoryFormat::Contiguous;

// ----- calling the C ABI -----------------------------------------------------------------------------

// The C runtime's verdict raised as Python's exception of its kind (no check of the extension's own).
[[noreturn]] void raise(addrmsnorm_status st) {
    const std::string msg = addrmsnorm_last_error_python();
    if (st == ADDRMSNORM_ERROR_INVALID_ARGUMENT) C10_THROW_ERROR(ValueError, msg);
    if (st == ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE) C10_THROW_ERROR(TypeError, msg);
    C10_THROW_ERROR(Error, "addrmsnorm: " + std::string(addrmsnorm_status_string(st)) + ": " + msg);
}

// Runs `call` (a C ABI call) on `device` and raises on failure. On a thread where the CUDA runtime
// has not yet made a context current, it adopts the device's primary context (the one torch uses)
// and tries once more.
template <typename F>
void on_device(const c10::Device& device, F call) {
    const c10::DeviceGuard guard(device);  // the C ABI launches in the current context
    addrmsnorm_status st = call();
    if (st == ADDRMSNORM_ERROR_NO_CONTEXT) {
        const addrmsnorm_status adopted = addrmsnorm_use_primary_context(device.index());
        if (adopted != ADDRMSNORM_SUCCESS) raise(adopted);
        st = call();
    }
    if (st != ADDRMSNORM_SUCCESS) raise(st);
}

// torch's current stream on the tensors' device, as the C ABI takes it.
addrmsnorm_stream current_stream(const c10::Device& device) {
    return reinterpret_cast<addrmsnorm_stream>(
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device).native_handle());
}

// The C path's checks on CPU tensors, for its refusal tests on machines without a GPU (scripts/test.sh; CI):
// with ADDRMSNORM_C_CHECKS_ON_CPU=1 (and ADDRMSNORM_BACKEND=cpp, which routes CPU tensors here: ops.py), the
// operators map CPU tensors as they map CUDA ones and ask the C runtime's check entry points, which touch no
// driver. Nothing runs on the CPU: a call the checks accept raises NotImplementedError.
bool c_checks_on_cpu(const c10::Device& device) {
    static const bool on = [] {
        const char* v = std::getenv("ADDRMSNORM_C_CHECKS_ON_CPU");
        return v != nullptr && std::string(v) == "1";
    }();
    return on && device.is_cpu();
}

// The check's verdict on CPU tensors: its refusal, or NotImplementedError for an accepted call.
[[noreturn]] void checked_on_cpu(addrmsnorm_status st) {
    if (st != ADDRMSNORM_SUCCESS) raise(st);
    C10_THROW_ERROR(NotImplementedError, "ADDRMSNORM_C_CHECKS_ON_CPU: the C runtime's checks accept this call; "
                                         "nothing runs on CPU tensors");
}

void launch(const c10::Device& device, const addrmsnorm_norm_args& a) {
    if (c_checks_on_cpu(device)) checked_on_cpu(addrmsnorm_norm_check(&a));
    on_device(device, [&] { return addrmsnorm_norm(&a, current_stream(device)); });
}

// An int argument as a C enum field: out-of-range values stay out of range, for the C ABI to refuse.
int32_t as_field(int64_t v) {
    return v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max() ? -1
                                                                                            : static_cast<int32_t>(v);
}

// A given tensor's data: an empty one may have none, and NULL means "not given" to the C ABI, so an
// empty tensor passes an aligned address that is never read (with no rows or no hidden the C ABI
// touches no pointer).
void* data(const at::Tensor& t) {
    alignas(16) static char empty[16];
    void* p = t.data_ptr();
    return p != nullptr ? p : empty;
}
void* data(const at::Tensor* t) { return t != nullptr ? data(*t) : nullptr; }

// ----- the mapping: what the struct cannot carry -----------------------------------------------------
// In the words of validation.py's mapping layer, which checks the same in the same order: a Python
// user reads Python's names of dtypes (c10's table of them) and shapes.

std::string dtype_str(c10::ScalarType t) { return "torch." + std::string(c10::getDtypeNames(t).first); }

// Python's spelling of a shape or strides: (5, 96), (96,), ().
std::string shape_str(c10::IntArrayRef s) {
    std::string o = "(";
    for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
    return o + (s.size() == 1 ? ",)" : ")");
}

// 1. A dtype the C ABI names.
addrmsnorm_dtype dtype_of(const char* name, const at::Tensor& t) {
    switch (t.scalar_type()) {
        case c10::kHalf: return ADDRMSNORM_FLOAT16;
        case c10::kBFloat16: return ADDRMSNORM_BFLOAT16;
        case c10::kFloat: return ADDRMSNORM_FLOAT32;
        default:
            TORCH_CHECK_TYPE(false, name, " has dtype ", dtype_str(t.scalar_type()),
                             "; supported dtypes are float16, bfloat16 or float32");
    }
}

// The quantized dtype: quant_dtype's, or (into given outputs, where the caller passes none) out's.
addrmsnorm_quant_dtype quant_dtype_of(c10::ScalarType t, bool of_out) {
    if (t == c10::kChar) return ADDRMSNORM_QUANT_INT8;
    if (t == c10::ScalarType::Float8_e4m3fn) return ADDRMSNORM_QUANT_FLOAT8_E4M3;
    if (t == c10::ScalarType::Float4_e2m1fn_x2) return ADDRMSNORM_QUANT_FLOAT4_E2M1;
    constexpr const char* kDtypes = "torch.float8_e4m3fn, torch.int8 or torch.float4_e2m1fn_x2";
    TORCH_CHECK_TYPE(false, of_out ? "out has dtype " + dtype_str(t) + "; the quantized output must be " + kDtypes
                                   : "quant_dtype must be " + std::string(kDtypes) + ", got " + dtype_str(t));
}

// 2. An output whose dtype the struct takes from its input.
void dtype_is(const char* name, const at::Tensor& t, const char* input, const at::Tensor& ref) {
    TORCH_CHECK_TYPE(t.scalar_type() == ref.scalar_type(), name, " has dtype ", dtype_str(t.scalar_type()),
                     "; it must be ", input, "'s dtype (", dtype_str(ref.scalar_type()), ")");
}

// 3. A vector of n elements, contiguous: a weight (n = H), or the rotation's positions (n = tokens).
void vector_of(const char* name, const at::Tensor& w, int64_t n) {
    TORCH_CHECK_VALUE(w.dim() == 1 && w.size(0) == n, name, " has shape ", shape_str(w.sizes()), ", expected (", n,
                      ",)");
    TORCH_CHECK_VALUE(n <= 1 || w.stride(0) == 1, name, " must be contiguous, got stride ", w.stride(0));
}

// 3. The tensor whose last dimension is the struct's hidden (x, dy): at least one dimension. Returns hidden.
int64_t hidden_of(const char* name, const at::Tensor& t) {
    TORCH_CHECK_VALUE(t.dim() > 0, name, " must have at least one dimension (..., H)");
    return t.size(-1);
}

// 3 and 5. A view's shape, and its last dimension contiguous (a dimension of one element has any stride).
void shape_is(const char* name, const at::Tensor& t, c10::IntArrayRef shape) {
    TORCH_CHECK_VALUE(t.sizes() == shape, name, " has shape ", shape_str(t.sizes()), ", expected ", shape_str(shape));
}
void last_contiguous(const char* name, const at::Tensor& t) {
    const int64_t d = t.dim();
    TORCH_CHECK_VALUE(d == 0 || t.size(d - 1) <= 1 || t.stride(d - 1) == 1, name,
                      ": the last dimension must be contiguous (stride 1), got stride ", t.stride(d - 1));
}

// 3. rstd: contiguous float32 of x's leading shape.
float* rstd_of(const at::Tensor* rstd, c10::IntArrayRef lead) {
    if (rstd == nullptr) return nullptr;
    const at::Tensor& r = *rstd;
    TORCH_CHECK_VALUE(r.scalar_type() == c10::kFloat && r.sizes() == lead && r.is_contiguous(),
                      "rstd must be a contiguous float32 tensor of shape ", shape_str(lead), ", got ",
                      dtype_str(r.scalar_type()), " ", shape_str(r.sizes()));
    return static_cast<float*>(data(r));
}

// 1 and 3. The struct's dtypes of x, residual and weight (the weightless norm's weight_dtype is x's).
void map_dtypes(addrmsnorm_norm_args& a, const at::Tensor& x, const at::Tensor* residual, const OptTensor& weight) {
    a.x_dtype = dtype_of("x", x);
    a.residual_dtype = residual != nullptr ? dtype_of("residual", *residual) : a.x_dtype;
    a.weight_dtype = weight ? dtype_of("weight", *weight) : a.x_dtype;
}

// 1 and 3. The sandwich norm's first weight (NULL: none): (H,), of weight's dtype; the struct has one weight_dtype,
// post_weight's when weightless.
void map_post_weight(addrmsnorm_norm_args& a, const at::Tensor* pw, const OptTensor& weight, int64_t H) {
    if (pw == nullptr) return;
    dtype_of("post_weight", *pw);
    vector_of("post_weight", *pw, H);
    if (weight) dtype_is("post_weight", *pw, "weight", *weight);
    else a.weight_dtype = dtype_of("post_weight", *pw);
}

// 4. One device, a CUDA one: each tensor on the first's (x, dy or qkv).
void same_device(const char* name, const at::Tensor* t, const at::Tensor& x, const char* first = "x") {
    if (t == nullptr) return;
    TORCH_CHECK_VALUE(t->device() == x.device(), name, " is on ", t->device(), " but ", first, " is on ", x.device(),
                      "; all tensors must be on one device");
}

void cuda_device(const char* name, const at::Tensor& x) {
    TORCH_CHECK_VALUE(x.is_cuda() || c_checks_on_cpu(x.device()), name, " is on ", x.device(),
                      "; this is the CUDA backend");
}

// Whether dims [0, end) of t flatten to one stride: (ok, rows, stride; -1 if no dim has size > 1).
std::tuple<bool, int64_t, int64_t> flatten(const at::Tensor& t, int64_t end) {
    int64_t rows = 1, stride = -1, expected = 0;
    bool ok = true;
    for (int64_t i = end - 1; i >= 0; --i) {
        const int64_t n = t.size(i);
        rows *= n;
        if (n == 1) continue;
        if (stride < 0) stride = t.stride(i);
        else if (t.stride(i) != expected) ok = false;
        expected = t.stride(i) * n;
    }
    return {ok || t.numel() == 0, rows, stride};
}

// 3 and 5. A tensor of `shape` (..., H) as rows with one stride, as t.view(-1, H) would see it.
struct RowView {
    int64_t rows;
    int64_t stride;  // elements between rows; H when there is at most one row
};

RowView as_rows(const char* name, const at::Tensor& t, c10::IntArrayRef shape) {
    shape_is(name, t, shape);
    last_contiguous(name, t);
    const int64_t d = t.dim(), H = shape[d - 1];
    auto [ok, rows, stride] = flatten(t, d - 1);
    TORCH_CHECK_VALUE(ok, name, ": the leading dimensions of a tensor with strides ", shape_str(t.strides()),
                      " cannot be flattened into rows of one stride; pass a contiguous tensor or a row-strided view");
    return {rows, rows > 1 && stride >= 0 ? stride : H};
}

// A tensor of shape (..., H) as [groups, heads, H] rows of two leading strides: one row stride where
// its leading dimensions flatten to one (heads 1), else groups of shape[-2] rows.
struct Grouped {
    int64_t rows;         // all rows: groups * heads
    int64_t heads;        // rows per group
    int64_t stride;       // elements between groups (between rows when heads == 1)
    int64_t head_stride;  // elements between the rows of a group
    // The same rows in groups of `g` (a view of one row stride takes any).
    Grouped as_group_of(int64_t g) const {
        if (heads == g || rows <= 1) return {rows, g, stride, heads == g ? head_stride : stride};
        return {rows, g, stride * g, stride};
    }
};

Grouped as_grouped(const char* name, const at::Tensor& t, c10::IntArrayRef shape) {
    shape_is(name, t, shape);
    last_contiguous(name, t);
    const int64_t d = t.dim(), H = shape[d - 1];
    auto [one, rows, stride] = flatten(t, d - 1);
    if (one) return {rows, 1, rows > 1 && stride >= 0 ? stride : std::max<int64_t>(H, 1), 0};
    // d >= 3 here: a 2-D tensor always flattens.
    auto [outer_ok, groups, outer] = flatten(t, d - 2);
    TORCH_CHECK_VALUE(outer_ok, name, ": a tensor with strides ", shape_str(t.strides()),
                      " cannot be addressed as rows of two leading strides (the dimensions before the last two must "
                      "flatten to one stride); pass a contiguous tensor or a view");
    const int64_t heads = t.size(d - 2), inner = t.stride(d - 2);
    if (groups <= 1) outer = heads * inner;  // one group: its stride is never used
    return {groups * heads, heads, outer, inner};
}

// The gated norm's gate: what the struct cannot carry (z's dtype, shape, device and rows), mapped here; its group
// and order are values, the C runtime's rules.
void gate_of(const at::Tensor& x, const OptTensor& z, int64_t group_size, bool norm_before_gate,
             addrmsnorm_norm_args* a) {
    if (z) {
        dtype_of("z", *z);
        dtype_is("z", *z, "x", x);
        same_device("z", &*z, x);
        a->z = data(*z);
        a->stride_z = as_rows("z", *z, x.sizes()).stride;
    }
    a->group_size = group_size;
    a->gate_first = norm_before_gate ? 0 : 1;
}

// ----- the norm: fused (residual given) or plain -----------------------------------------------------

// One norm call into given outputs (the functional forms allocate them first). The plain norm has no
// residual. residual and residual_out go to the C ABI as given: it refuses one without the other.
void norm_call(const at::Tensor& x, const at::Tensor* residual, const OptTensor& weight,
                                             const at::Tensor* out, const at::Tensor* residual_out,
                                             const at::Tensor* rstd, double eps, double weight_offset,
                                             int64_t numerics, bool pdl, double x_scale,
                                             const OptTensor& post_weight, double post_weight_offset,
                                             const OptTensor& z, int64_t group_size, bool norm_before_gate,
                                             const at::Tensor* b = nullptr, const OptTensor& b_weight = std::nullopt,
                                             const at::Tensor* b_out = nullptr) {
    addrmsnorm_norm_args a = addrmsnorm_norm_args_init();
    // The sandwich norm's first weight, mapped where there is a residual (without one the C ABI refuses it).
    const at::Tensor* pw = post_weight && residual != nullptr ? &*post_weight : nullptr;
    map_dtypes(a, x, residual, weight);
    if (out != nullptr) dtype_of("out", *out);
    if (residual_out != nullptr) dtype_of("residual_out", *residual_out);
    const int64_t H = hidden_of("x", x);
    if (out != nullptr) dtype_is("out", *out, "x", x);
    if (residual_out != nullptr && residual != nullptr) dtype_is("residual_out", *residual_out, "residual", *residual);
    if (weight) vector_of("weight", *weight, H);
    map_post_weight(a, pw, weight, H);
    same_device("residual", residual, x);
    if (weight) same_device("weight", &*weight, x);
    same_device("post_weight", pw, x);
    gate_of(x, z, group_size, norm_before_gate, &a);
    // The pair's second part: what the struct cannot carry (b's dtype, shape, device and rows), mapped here.
    if (b != nullptr) {
        dtype_of("b", *b);
        dtype_is("b", *b, "x", x);
        if (b_weight) {
            dtype_of("b_weight", *b_weight);
            if (weight) dtype_is("b_weight", *b_weight, "weight", *weight);
            else a.weight_dtype = dtype_of("b_weight", *b_weight);
        }
        if (b_out != nullptr) dtype_is("b_out", *b_out, "x", x);
        same_device("b", b, x);
        if (b_weight) same_device("b_weight", &*b_weight, x);
        same_device("b_out", b_out, x);
        TORCH_CHECK_VALUE(b->dim() == x.dim() && b->sizes().slice(0, x.dim() - 1) ==
                                                                       x.sizes().slice(0, x.dim() - 1),
                          "b has shape ", shape_str(b->sizes()), "; it must have x's rows, ",
                          shape_str(x.sizes().slice(0, std::max<int64_t>(x.dim(), 1) - 1)), " + (width,)");
        const int64_t Hb = b->size(-1);
        if (b_weight) vector_of("b_weight", *b_weight, Hb);
        a.b = data(*b);
        a.stride_b = as_rows("b", *b, b->sizes()).stride;
        a.b_weight = b_weight ? data(*b_weight) : nullptr;
        if (b_out != nullptr) {
            a.b_out = data(*b_out);
            a.stride_b_out = as_rows("b_out", *b_out, b->sizes()).stride;
        }
        a.b_hidden = Hb;
    } else {  // b's tensors without b: passed on, for the C ABI to refuse by name (nothing of them is read)
        if (b_weight) a.b_weight = data(*b_weight);
        if (b_out != nullptr) a.b_out = data(*b_out);
    }
    same_device("out", out, x);
    same_device("residual_out", residual_out, x);
    same_device("rstd", rstd, x);
    cuda_device("x", x);
    const auto lead = x.sizes().slice(0, x.dim() - 1);
    if (residual != nullptr || residual_out != nullptr) {
        const RowView vx = as_rows("x", x, x.sizes());
        a.rows = vx.rows;
        a.stride_x = vx.stride;
        // With a gate or a pair the C ABI refuses any residual first ("takes no residual"): the rows of residual
        // and residual_out are not mapped, so that those of another shape get that message, as from validation.py.
        const bool residual_rows = !z && b == nullptr;
        if (residual != nullptr && residual_rows) a.stride_residual = as_rows("residual", *residual, x.sizes()).stride;
        a.stride_out = as_rows("out", *out, x.sizes()).stride;
        if (residual_out != nullptr && residual_rows)
            a.stride_residual_out = as_rows("residual_out", *residual_out, x.sizes()).stride;
    } else {
        Grouped gx = as_grouped("x", x, x.sizes());
        Grouped go = out->is_same(x) ? gx : as_grouped("out", *out, x.sizes());
        const int64_t g = std::max(gx.heads, go.heads);
        gx = gx.as_group_of(g);
        go = go.as_group_of(g);
        a.rows = gx.rows / g;
        a.groups = g;
        a.stride_x = gx.stride;
        a.stride_x_group = gx.head_stride;
        a.stride_out = go.stride;
        a.stride_out_group = go.head_stride;
    }
    std::vector<int64_t> rstd_shape(lead.begin(), lead.end());
    if (pw != nullptr) rstd_shape.insert(rstd_shape.begin(), 2);  // the sandwich's: h's, then x's
    a.rstd = rstd_of(rstd, rstd_shape);
    a.hidden = H;
    a.x = data(x);
    a.residual = data(residual);
    a.weight = weight ? data(*weight) : nullptr;
    a.out = data(out);
    a.residual_out = data(residual_out);
    a.eps = eps;
    a.weight_offset = weight_offset;
    a.numerics = static_cast<addrmsnorm_numerics>(as_field(numerics));
    a.flags = pdl ? ADDRMSNORM_FLAG_PDL : 0u;
    addrmsnorm_norm_args_set_x_scale(&a, x_scale);
    a.post_weight = post_weight ? data(*post_weight) : nullptr;
    a.post_weight_offset = post_weight_offset;
    launch(x.device(), a);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> norm(const at::Tensor& x, const OptTensor& residual,
                                                    const OptTensor& weight, double eps, double weight_offset,
                                                    bool return_rstd, int64_t numerics, bool pdl, double x_scale,
                                                    const OptTensor& post_weight, double post_weight_offset,
                                                    const OptTensor& z, int64_t group_size, bool norm_before_gate) {
    // The outputs first (contiguous; freed again if the call is refused), then the one mapping.
    const at::Tensor* res = residual ? &*residual : nullptr;
    at::Tensor residual_out = res != nullptr ? at::empty(x.sizes(), res->options().memory_format(kContiguous))
                                             : at::empty({0}, x.options());
    at::Tensor out = at::empty(x.sizes(), x.options().memory_format(kContiguous));
    std::vector<int64_t> rstd_shape{0};
    if (return_rstd) {
        const auto lead = x.sizes().slice(0, std::max<int64_t>(x.dim(), 1) - 1);
        rstd_shape.assign(lead.begin(), lead.end());
        if (post_weight && res != nullptr) rstd_shape.insert(rstd_shape.begin(), 2);  // the sandwich's two
    }
    at::Tensor rstd = at::empty(rstd_shape, x.options().dtype(c10::kFloat));
    norm_call(x, res, weight, &out, res != nullptr ? &residual_out : nullptr, return_rstd ? &rstd : nullptr, eps,
              weight_offset, numerics, pdl, x_scale, post_weight, post_weight_offset, z, group_size, norm_before_gate);
    return {out, residual_out, rstd};
}

void norm_(const at::Tensor& x, const OptTensor& residual, const OptTensor& weight, double eps,
           double weight_offset, int64_t numerics, bool pdl, double x_scale, const OptTensor& post_weight,
           double post_weight_offset, const OptTensor& z, int64_t group_size, bool norm_before_gate,
           const OptTensor& b, const OptTensor& b_weight) {
    const at::Tensor* res = residual ? &*residual : nullptr;
    norm_call(x, res, weight, &x, res, nullptr, eps, weight_offset, numerics, pdl, x_scale, post_weight,
              post_weight_offset, z, group_size, norm_before_gate, b ? &*b : nullptr, b_weight, b ? &*b : nullptr);
}

void norm_into(const at::Tensor& x, const OptTensor& residual, const OptTensor& weight, const at::Tensor& out,
               const OptTensor& residual_out, const OptTensor& rstd, double eps, double weight_offset,
               int64_t numerics, bool pdl, double x_scale, const OptTensor& post_weight, double post_weight_offset,
               const OptTensor& z, int64_t group_size, bool norm_before_gate, const OptTensor& b,
               const OptTensor& b_weight, const OptTensor& b_out) {
    norm_call(x, residual ? &*residual : nullptr, weight, &out, residual_out ? &*residual_out : nullptr,
              rstd ? &*rstd : nullptr, eps, weight_offset, numerics, pdl, x_scale, post_weight, post_weight_offset,
              z, group_size, norm_before_gate, b ? &*b : nullptr, b_weight, b_out ? &*b_out : nullptr);
}

// ----- the backward ----------------------------------------------------------------------------------

bool rope_of(const at::Tensor& qkv, int64_t tokens, int64_t head_dim, const OptTensor& positions,
             const OptTensor& cache, const OptTensor& cos, const OptTensor& sin, int64_t rotary_dim, int64_t style,
             addrmsnorm_rope* r);

std::tuple<at::Tensor, at::Tensor, at::Tensor> norm_backward(const at::Tensor& dy, const OptTensor& dresidual_out,
                                                             const at::Tensor& h, const OptTensor& rstd_opt,
                                                             const OptTensor& weight, double weight_offset,
                                                             bool weight_grad, const OptTensor& cos,
                                                             const OptTensor& sin, int64_t rope_groups,
                                                             int64_t rotary_dim, int64_t rope_style, double eps) {
    addrmsnorm_norm_backward_args a = addrmsnorm_norm_backward_args_init();
    const at::Tensor* rstd = rstd_opt ? &*rstd_opt : nullptr;
    const at::Tensor* dro = dresidual_out ? &*dresidual_out : nullptr;
    a.x_dtype = dtype_of("dy", dy);
    a.residual_dtype = dtype_of("h", h);
    a.weight_dtype = weight ? dtype_of("weight", *weight) : a.residual_dtype;
    if (dro != nullptr) dtype_of("dresidual_out", *dro);
    const int64_t H = hidden_of("dy", dy);
    if (dro != nullptr) dtype_is("dresidual_out", *dro, "h", h);
    if (weight) vector_of("weight", *weight, H);
    same_device("h", &h, dy, "dy");
    same_device("rstd", rstd, dy, "dy");
    if (weight) same_device("weight", &*weight, dy, "dy");
    same_device("dresidual_out", dro, dy, "dy");
    cuda_device("dy", dy);
    const RowView vdy = as_rows("dy", dy, dy.sizes());
    a.stride_h = as_rows("h", h, dy.sizes()).stride;
    if (dro != nullptr) a.stride_dresidual_out = as_rows("dresidual_out", *dro, dy.sizes()).stride;
    a.rstd = rstd_of(rstd, dy.sizes().slice(0, dy.dim() - 1));
    a.rows = vdy.rows;
    a.hidden = H;
    a.stride_dy = vdy.stride;
    a.weight_offset = weight_offset;
    // The rotation's backward: cos and sin by column, (tokens, rotary_dim); tokens = rows / rope_groups where
    // that divides (the C runtime refuses rope_groups otherwise, and the angles' rows are not checked here).
    addrmsnorm_rope rope;
    const int64_t angle_rows = cos && cos->dim() == 2 ? cos->size(0) : sin && sin->dim() == 2 ? sin->size(0) : 0;
    const int64_t tokens = rope_groups > 0 && a.rows % rope_groups == 0 ? a.rows / rope_groups : angle_rows;
    const bool roped = rope_of(dy, tokens, H, c10::nullopt, c10::nullopt, cos, sin, rotary_dim, rope_style, &rope);
    a.rope = roped ? &rope : nullptr;
    a.rope_groups = rope_groups;
    a.eps = eps;
    uint64_t bytes = 256;  // ADDRMSNORM_C_CHECKS_ON_CPU: no device to size it for, and nothing runs
    if (!c_checks_on_cpu(dy.device()))
        on_device(dy.device(), [&] { return addrmsnorm_norm_backward_workspace_size(&a, &bytes); });
    const bool separate = a.x_dtype != a.residual_dtype;
    at::Tensor dres = at::empty(dy.sizes(), h.options().memory_format(kContiguous));
    at::Tensor dx = at::empty(separate ? dy.sizes() : c10::IntArrayRef{0}, dy.options().memory_format(kContiguous));
    weight_grad = weight_grad && weight;  // the weightless norm has no weight gradient
    at::Tensor dweight = weight ? at::empty(weight_grad ? weight->sizes() : c10::IntArrayRef{0}, weight->options())
                                : at::empty({0}, h.options());
    at::Tensor workspace = at::empty({static_cast<int64_t>((bytes + 3) / 4)}, dy.options().dtype(c10::kFloat));
    a.dy = data(dy);
    a.dresidual_out = data(dro);
    a.h = data(h);
    a.weight = weight ? data(*weight) : nullptr;
    a.dresidual = roped ? nullptr : data(dres);  // the rotation's: the plain norm's backward, dx alone
    a.stride_dresidual = H;
    a.dx = roped ? data(dres) : separate ? data(dx) : nullptr;
    a.stride_dx = H;
    a.dweight = weight_grad ? data(dweight) : nullptr;
    a.workspace = data(workspace);
    a.workspace_bytes = bytes;
    if (c_checks_on_cpu(dy.device())) checked_on_cpu(addrmsnorm_norm_backward_check(&a));
    on_device(dy.device(), [&] { return addrmsnorm_norm_backward(&a, current_stream(dy.device())); });
    return {dres, dx, dweight};
}

// ----- quantized outputs -----------------------------------------------------------------------------

constexpr int64_t kTmaRowMultiple = 4;  // column-major scales: the column stride, rows rounded up to 4

// The C ABI's mode for the operator's arguments (configs.quant_kernel_mode): fp4 is NVFP4 (block 16) or
// MXFP4, fp8 with block 32 MXFP8; otherwise static with a scale, per group with a group size, else per
// token. The C ABI checks the mode against the dtype, the group size and the scale.
addrmsnorm_quant_mode mode_of(addrmsnorm_quant_dtype q, bool has_scale, int64_t group_size) {
    if (q == ADDRMSNORM_QUANT_FLOAT4_E2M1) return group_size == 16 ? ADDRMSNORM_QUANT_NVFP4 : ADDRMSNORM_QUANT_MXFP4;
    if (q == ADDRMSNORM_QUANT_FLOAT8_E4M3 && group_size == 32) return ADDRMSNORM_QUANT_MXFP8;
    return has_scale ? ADDRMSNORM_QUANT_STATIC : group_size ? ADDRMSNORM_QUANT_PER_GROUP : ADDRMSNORM_QUANT_PER_TOKEN;
}

bool is_block(addrmsnorm_quant_mode m) { return m >= ADDRMSNORM_QUANT_NVFP4; }

// The scales' shape where the arguments define one: [rows] per token; [rows, H / group_size] per group
// and block-scaled (a group size that divides H); the swizzled layout as one padded run of bytes.
std::optional<std::vector<int64_t>> scales_shape(c10::IntArrayRef shape, addrmsnorm_quant_mode mode,
                                                 int64_t group_size, bool swizzled) {
    const int64_t H = shape.back();
    std::vector<int64_t> s(shape.begin(), shape.end() - 1);
    if (mode == ADDRMSNORM_QUANT_PER_TOKEN) return s;
    if (group_size <= 0 || H % group_size != 0) return std::nullopt;  // the C ABI refuses the group size
    if (is_block(mode) && swizzled) {
        int64_t rows = 1;
        for (int64_t n : s) rows *= n;
        return std::vector<int64_t>{(rows + 127) / 128 * 128 * ((H / group_size + 3) / 4 * 4)};
    }
    s.push_back(H / group_size);
    return s;
}

c10::ScalarType scales_dtype(addrmsnorm_quant_mode mode) {
    if (mode == ADDRMSNORM_QUANT_NVFP4) return c10::ScalarType::Float8_e4m3fn;
    if (is_block(mode)) return c10::ScalarType::Float8_e8m0fnu;
    return c10::kFloat;
}

std::vector<int64_t> q_shape(c10::IntArrayRef shape, addrmsnorm_quant_dtype q) {
    std::vector<int64_t> s(shape.begin(), shape.end());
    if (q == ADDRMSNORM_QUANT_FLOAT4_E2M1) s.back() /= 2;
    return s;
}

void scale_tensor(const char* name, const at::Tensor* t) {
    if (t == nullptr) return;
    TORCH_CHECK_TYPE(t->scalar_type() == c10::kFloat && t->numel() == 1, name,
                     " must be a 1-element float32 tensor, got ", dtype_str(t->scalar_type()), " of shape ",
                     shape_str(t->sizes()));
}

// scales_out seen as [rows, groups]: (row stride, group stride), its leading dimensions flattened to
// rows of one stride. The C ABI checks that no two scales share an address.
std::pair<int64_t, int64_t> scales_strides(const at::Tensor& t, int64_t groups) {
    const int64_t nd = groups > 1 ? t.dim() - 1 : t.dim();
    auto [ok, rows, stride] = flatten(t, nd);
    TORCH_CHECK_VALUE(ok, "scales_out: the leading dimensions of a tensor with strides ", shape_str(t.strides()),
                      " cannot be flattened into rows of one stride");
    return {rows > 1 ? stride : 0, groups > 1 ? t.stride(-1) : 0};
}

// One quantized call. out null: the functional form, which allocates q, residual_out, the scales (as
// column_major_scales says) and y (return_y) once the inputs are mapped.
struct QuantOutputs {
    at::Tensor q, residual_out;
    OptTensor scales, y;
};

QuantOutputs quant_call(const at::Tensor& x, const at::Tensor* residual, const OptTensor& weight,
                        std::optional<c10::ScalarType> quant_dtype, const at::Tensor* out,
                        const at::Tensor* residual_out, const at::Tensor* scales_out, const at::Tensor* y,
                        const at::Tensor* scale, int64_t group_size, const at::Tensor* scale_ub, bool ue8m0,
                        bool swizzled, double eps, double weight_offset, bool pdl, double x_scale,
                        const OptTensor& post_weight, double post_weight_offset, const OptTensor& z,
                        int64_t gate_group_size, bool norm_before_gate, bool column_major = false,
                        bool return_y = false) {
    const bool functional = out == nullptr;
    addrmsnorm_quant qd{};
    qd.dtype = quant_dtype_of(functional ? *quant_dtype : out->scalar_type(), !functional);
    addrmsnorm_norm_args a = addrmsnorm_norm_args_init();
    map_dtypes(a, x, residual, weight);
    if (residual_out != nullptr) dtype_of("residual_out", *residual_out);
    if (y != nullptr) dtype_of("y", *y);
    const int64_t H = hidden_of("x", x);
    if (residual_out != nullptr && residual != nullptr) dtype_is("residual_out", *residual_out, "residual", *residual);
    if (y != nullptr) dtype_is("y", *y, "x", x);
    if (weight) vector_of("weight", *weight, H);
    map_post_weight(a, post_weight ? &*post_weight : nullptr, weight, H);
    same_device("residual", residual, x);
    if (weight) same_device("weight", &*weight, x);
    if (post_weight) same_device("post_weight", &*post_weight, x);
    gate_of(x, z, gate_group_size, norm_before_gate, &a);
    same_device("out", out, x);
    same_device("residual_out", residual_out, x);
    same_device("y", y, x);
    same_device("scales_out", scales_out, x);
    same_device("scale", scale, x);
    same_device("scale_ub", scale_ub, x);
    cuda_device("x", x);
    scale_tensor("scale", scale);
    scale_tensor("scale_ub", scale_ub);
    qd.mode = mode_of(qd.dtype, scale != nullptr, group_size);
    qd.group_size = as_field(group_size);
    qd.flags = (ue8m0 ? ADDRMSNORM_QUANT_UE8M0 : 0u) | (swizzled ? ADDRMSNORM_QUANT_SWIZZLED : 0u);
    const auto want = scales_shape(x.sizes(), qd.mode, group_size, swizzled);
    QuantOutputs o;
    if (functional) {
        TORCH_CHECK_VALUE(!column_major || qd.mode == ADDRMSNORM_QUANT_PER_GROUP,
                          "column_major_scales lays out per-group scales; pass group_size");
        o.q = at::empty(q_shape(x.sizes(), qd.dtype), x.options().dtype(*quant_dtype).memory_format(kContiguous));
        out = &o.q;
        if (residual != nullptr) {
            o.residual_out = at::empty(x.sizes(), residual->options().memory_format(kContiguous));
            residual_out = &o.residual_out;
        } else {
            o.residual_out = at::empty({0}, x.options());
        }
        if (return_y) y = &o.y.emplace(at::empty(x.sizes(), x.options().memory_format(kContiguous)));
        if (qd.mode != ADDRMSNORM_QUANT_STATIC && want) {
            const auto options = x.options().dtype(scales_dtype(qd.mode));
            if (qd.mode == ADDRMSNORM_QUANT_PER_GROUP && column_major) {
                // [groups, rows rounded up to 4], transposed: the TMA-aligned layout DeepGEMM reads.
                const int64_t groups = want->back();
                const int64_t n = c10::multiply_integers(x.sizes().begin(), x.sizes().end() - 1);
                const int64_t n_pad = (n + kTmaRowMultiple - 1) / kTmaRowMultiple * kTmaRowMultiple;
                o.scales = at::empty({groups, n_pad}, options).t().slice(0, 0, n).view(*want);
            } else {
                o.scales = at::empty(*want, options);
            }
            scales_out = &*o.scales;
        }
    } else if (scales_out != nullptr && qd.mode != ADDRMSNORM_QUANT_STATIC) {
        // A static call's scales_out goes to the C ABI, which refuses it.
        // Its shape where the group size defines one (else the C ABI refuses the group size).
        const c10::ScalarType sd = scales_dtype(qd.mode);
        TORCH_CHECK_VALUE(scales_out->scalar_type() == sd, "scales_out has dtype ", dtype_str(scales_out->scalar_type()),
                          "; it must be ", c10::getDtypeNames(sd).first);
        if (want) shape_is("scales_out", *scales_out, *want);
        TORCH_CHECK_VALUE(!(is_block(qd.mode) && swizzled && scales_out->numel() > 1 && scales_out->stride(0) != 1),
                          "scales_out: the swizzled layout is one contiguous buffer (stride 1)");
    }
    const RowView vx = as_rows("x", x, x.sizes());
    if (residual != nullptr) a.stride_residual = as_rows("residual", *residual, x.sizes()).stride;
    a.stride_out = as_rows("out", *out, q_shape(x.sizes(), qd.dtype)).stride;
    if (residual_out != nullptr) a.stride_residual_out = as_rows("residual_out", *residual_out, x.sizes()).stride;
    if (y != nullptr) a.stride_y = as_rows("y", *y, x.sizes()).stride;
    if (scales_out != nullptr) {
        const bool grouped = qd.mode == ADDRMSNORM_QUANT_PER_GROUP || is_block(qd.mode);
        if (!(is_block(qd.mode) && swizzled) && qd.mode != ADDRMSNORM_QUANT_STATIC)
            std::tie(qd.scales_stride_row, qd.scales_stride_group) =
                scales_strides(*scales_out, grouped && want ? H / group_size : 1);
        qd.scales = data(*scales_out);
    }
    qd.scale = static_cast<const float*>(data(scale));
    qd.scale_ub = static_cast<const float*>(data(scale_ub));
    a.rows = vx.rows;
    a.hidden = H;
    a.stride_x = vx.stride;
    a.x = data(x);
    a.residual = data(residual);
    a.weight = weight ? data(*weight) : nullptr;
    a.out = data(out);
    a.residual_out = data(residual_out);
    a.y = data(y);
    a.eps = eps;
    a.weight_offset = weight_offset;
    a.quant = &qd;
    a.flags = pdl ? ADDRMSNORM_FLAG_PDL : 0u;
    addrmsnorm_norm_args_set_x_scale(&a, x_scale);
    a.post_weight = post_weight ? data(*post_weight) : nullptr;
    a.post_weight_offset = post_weight_offset;
    launch(x.device(), a);
    return o;
}

std::tuple<at::Tensor, at::Tensor, OptTensor, OptTensor> norm_quant(
    const at::Tensor& x, const OptTensor& residual, const OptTensor& weight, double eps, c10::ScalarType quant_dtype,
    const OptTensor& scale, int64_t group_size, const OptTensor& scale_ub, bool column_major_scales,
    bool ue8m0_scales, double weight_offset, bool return_y, bool pdl, bool swizzled_scales, double x_scale,
    const OptTensor& post_weight, double post_weight_offset, const OptTensor& z, int64_t gate_group_size,
    bool norm_before_gate) {
    QuantOutputs o = quant_call(x, residual ? &*residual : nullptr, weight, quant_dtype, nullptr, nullptr, nullptr,
                                nullptr, scale ? &*scale : nullptr, group_size, scale_ub ? &*scale_ub : nullptr,
                                ue8m0_scales, swizzled_scales, eps, weight_offset, pdl, x_scale, post_weight,
                                post_weight_offset, z, gate_group_size, norm_before_gate, column_major_scales, return_y);
    return {o.q, o.residual_out, o.scales, o.y};
}

void norm_quant_into(const at::Tensor& x, const OptTensor& residual, const OptTensor& weight, const at::Tensor& out,
                     const OptTensor& residual_out, const OptTensor& scales_out, const OptTensor& y, double eps,
                     const OptTensor& scale, int64_t group_size, const OptTensor& scale_ub, bool ue8m0_scales,
                     double weight_offset, bool pdl, bool swizzled_scales, double x_scale, const OptTensor& post_weight,
                     double post_weight_offset, const OptTensor& z, int64_t gate_group_size, bool norm_before_gate) {
    quant_call(x, residual ? &*residual : nullptr, weight, std::nullopt, &out, residual_out ? &*residual_out : nullptr,
               scales_out ? &*scales_out : nullptr, y ? &*y : nullptr, scale ? &*scale : nullptr, group_size,
               scale_ub ? &*scale_ub : nullptr, ue8m0_scales, swizzled_scales, eps, weight_offset, pdl, x_scale,
               post_weight, post_weight_offset, z, gate_group_size, norm_before_gate);
}

// ----- the QK norm: q's heads, then k's, as the groups of one call; k's weight from num_q_heads on -----

// The rotation's tensors (validation.map_rope's mapping, in its order): positions int32 or int64 of (tokens,),
// contiguous; cos_sin_cache (max_position, rotary_dim), cos and sin (tokens, rotary_dim), each of a dtype the
// C ABI names, its last dimension contiguous; all on qkv's device. rotary_dim 0 is head_dim here; its value
// rules are the C runtime's. Returns false where no rotation is given (rotary_dim and rope_style then 0).
bool rope_of(const at::Tensor& qkv, int64_t tokens, int64_t head_dim, const OptTensor& positions,
             const OptTensor& cache, const OptTensor& cos, const OptTensor& sin, int64_t rotary_dim, int64_t style,
             addrmsnorm_rope* r) {
    if (!positions && !cache && !cos && !sin) {
        TORCH_CHECK_VALUE(rotary_dim == 0 && style == 0, "rotary_dim or rope_style is set but no angles are given: "
                          "the rotation takes positions and cos_sin_cache, or cos and sin");
        return false;
    }
    *r = addrmsnorm_rope{};
    const int64_t rd = rotary_dim == 0 ? head_dim : rotary_dim;
    if (positions) {
        const at::Tensor& p = *positions;
        TORCH_CHECK_TYPE(p.scalar_type() == c10::kInt || p.scalar_type() == c10::kLong, "positions has dtype ",
                         dtype_str(p.scalar_type()), "; it must be int32 or int64");
        vector_of("positions", p, tokens);  // one a token
        r->positions = data(p);
        r->positions_dtype = p.scalar_type() == c10::kInt ? ADDRMSNORM_INT32 : ADDRMSNORM_INT64;
    }
    struct Angle { const char* name; const OptTensor& t; int64_t rows; };  // rows -1: a position's (the cache)
    const Angle angles[3] = {{"cos_sin_cache", cache, -1}, {"cos", cos, tokens}, {"sin", sin, tokens}};
    int64_t strides[3] = {0, 0, 0};
    for (int i = 0; i < 3; ++i) {
        if (!angles[i].t) continue;
        const at::Tensor& t = *angles[i].t;
        const addrmsnorm_dtype d = dtype_of(angles[i].name, t);
        if (i == 2 && cos) dtype_is("sin", t, "cos", *cos);  // the struct has one angle dtype
        if (i == 0 || i == 1 || !cos) r->angle_dtype = d;
        const bool cache_rows = angles[i].rows < 0;
        TORCH_CHECK_VALUE(t.dim() == 2 && (cache_rows || t.size(0) == angles[i].rows) && t.size(1) == rd,
                          angles[i].name, " has shape ", shape_str(t.sizes()), "; it must be (",
                          cache_rows ? std::string("max_position") : std::to_string(angles[i].rows), ", ", rd,
                          "), a row of rotary_dim angles ", cache_rows ? "a position" : "a token");
        last_contiguous(angles[i].name, t);
        strides[i] = t.size(0) > 1 ? t.stride(0) : rd;
    }
    same_device("positions", positions ? &*positions : nullptr, qkv, "qkv");
    for (const Angle& a : angles) same_device(a.name, a.t ? &*a.t : nullptr, qkv, "qkv");
    if (cache) {
        r->cos_sin_cache = data(*cache);
        r->max_position = cache->size(0);
        r->stride_cache = strides[0];
    }
    if (cos) r->cos = data(*cos), r->stride_cos = strides[1];
    if (sin) r->sin = data(*sin), r->stride_sin = strides[2];
    r->style = as_field(style);
    r->rotary_dim = as_field(rotary_dim);
    return true;
}

void qk_rmsnorm_(const at::Tensor& qkv, const OptTensor& q_weight, const OptTensor& k_weight, double eps,
                 int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, double weight_offset, int64_t numerics,
                 bool pdl, const OptTensor& positions, const OptTensor& cos_sin_cache, const OptTensor& cos,
                 const OptTensor& sin, int64_t rotary_dim, int64_t rope_style, int64_t num_v_heads) {
    const addrmsnorm_dtype x_dtype = dtype_of("qkv", qkv);
    // Both weights, or neither: the C runtime could not tell one weight alone from another variant at
    // num_q_heads 0 (addrmsnorm_norm_args_qk's weight2_from_group), so the mapping states it.
    TORCH_CHECK_VALUE(q_weight.has_value() == k_weight.has_value(), q_weight ? "k_weight" : "q_weight",
                      " is None but ", q_weight ? "q_weight" : "k_weight",
                      " is given: the QK norm takes both weights, or neither (weightless)");
    const at::Tensor* qw = q_weight ? &*q_weight : nullptr;
    const at::Tensor* kw = k_weight ? &*k_weight : nullptr;
    const addrmsnorm_dtype weight_dtype = qw ? dtype_of("q_weight", *qw) : x_dtype;
    if (kw) {
        dtype_of("k_weight", *kw);
        dtype_is("k_weight", *kw, "q_weight", *qw);
    }
    TORCH_CHECK_VALUE(qkv.dim() == 2, "qkv has shape ", shape_str(qkv.sizes()), "; it must be 2-D, (tokens, width)");
    if (head_dim >= 1) {  // else the C runtime's head_dim rule names the argument the caller got wrong
        if (qw) vector_of("q_weight", *qw, head_dim);
        if (kw) vector_of("k_weight", *kw, head_dim);
    }
    same_device("q_weight", qw, qkv, "qkv");
    same_device("k_weight", kw, qkv, "qkv");
    cuda_device("qkv", qkv);
    // The columns past the q and k heads (and v's, num_v_heads) are never touched; the C ABI checks the
    // head counts (num_v_heads >= 0 too) and head_dim, then that the rows of that width are apart.
    const int64_t width = (num_q_heads + num_kv_heads + num_v_heads) * head_dim;
    TORCH_CHECK_VALUE(num_q_heads < 1 || num_kv_heads < 1 || num_v_heads < 0 || head_dim < 1 || qkv.size(1) >= width,
                      "qkv has width ", qkv.size(1), ", less than the ", num_v_heads ? "q, k and v heads' (" : "q and k heads' (",
                      num_q_heads, " + ", num_kv_heads, num_v_heads ? " + " + std::to_string(num_v_heads) : "",
                      ") * ", head_dim, " = ", width);
    last_contiguous("qkv", qkv);
    const int64_t tokens = qkv.size(0);
    addrmsnorm_rope rope;
    const bool roped = rope_of(qkv, tokens, head_dim, positions, cos_sin_cache, cos, sin, rotary_dim, rope_style, &rope);
    addrmsnorm_norm_args a = addrmsnorm_norm_args_qkv(data(qkv), qw ? data(*qw) : nullptr, kw ? data(*kw) : nullptr,
                                                      tokens, num_q_heads, num_kv_heads, num_v_heads, head_dim,
                                                      tokens > 1 ? qkv.stride(0) : qkv.size(1));
    a.x_dtype = a.residual_dtype = x_dtype;
    a.weight_dtype = weight_dtype;
    a.eps = eps;
    a.weight_offset = weight_offset;
    a.numerics = static_cast<addrmsnorm_numerics>(as_field(numerics));
    a.flags = pdl ? ADDRMSNORM_FLAG_PDL : 0u;
    a.rope = roped ? &rope : nullptr;
    launch(qkv.device(), a);
}

}  // namespace

TORCH_LIBRARY_IMPL(addrmsnorm, CUDA, m) {
    m.impl("norm", &norm);
    m.impl("norm_", &norm_);
    m.impl("norm_into", &norm_into);
    m.impl("norm_backward", &norm_backward);
    m.impl("norm_quant", &norm_quant);
    m.impl("norm_quant_into", &norm_quant_into);
    m.impl("qk_rmsnorm_", &qk_rmsnorm_);
}
