// The C++ backend of the torch.ops.addrmsnorm operators (their schemas are in addrmsnorm/ops.py).
//
// Seven operators (norm, norm_, norm_into, norm_backward, norm_quant, norm_quant_into, qk_rmsnorm_),
// each with an optional residual: without one, the plain norm. Each checks its tensors here, with
// the messages of addrmsnorm/validation.py, fills one addrmsnorm_norm_args (or the backward's) and
// calls addrmsnorm_norm on torch's current stream for the tensors' device. The C ABI then makes the
// pointer-level checks (overlap, alignment, eps) before it launches. Nothing here needs CUDA headers or nvcc: the stream comes from c10's generic
// device-guard interface, and the library is linked in statically.
//
// The Autograd-key kernels of the same operators are in autograd.cpp.
//
// Errors reach Python as ValueError (bad values, shapes, layouts, devices) or TypeError (dtypes),
// as the Python API raises them; driver failures as RuntimeError.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "addrmsnorm/addrmsnorm.h"

namespace {

// Python's spelling of a dtype, so that messages match the JIT backend's.
const char* torch_name(c10::ScalarType t) {
    switch (t) {
        case c10::kHalf: return "torch.float16";
        case c10::kBFloat16: return "torch.bfloat16";
        case c10::kFloat: return "torch.float32";
        case c10::kDouble: return "torch.float64";
        case c10::kByte: return "torch.uint8";
        case c10::kChar: return "torch.int8";
        case c10::kShort: return "torch.int16";
        case c10::kInt: return "torch.int32";
        case c10::kLong: return "torch.int64";
        case c10::kBool: return "torch.bool";
        case c10::ScalarType::Float8_e4m3fn: return "torch.float8_e4m3fn";
        case c10::ScalarType::Float8_e5m2: return "torch.float8_e5m2";
        case c10::ScalarType::Float8_e8m0fnu: return "torch.float8_e8m0fnu";
        case c10::ScalarType::Float4_e2m1fn_x2: return "torch.float4_e2m1fn_x2";
        default: return c10::toString(t);
    }
}

// Python's spelling of a shape: (5, 96), (96,), ().
std::string shape_str(c10::IntArrayRef s) {
    std::ostringstream o;
    o << "(";
    for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
    if (s.size() == 1) o << ",";
    o << ")";
    return o.str();
}

addrmsnorm_dtype to_dtype(const char* name, const at::Tensor& t) {
    switch (t.scalar_type()) {
        case c10::kHalf: return ADDRMSNORM_FLOAT16;
        case c10::kBFloat16: return ADDRMSNORM_BFLOAT16;
        case c10::kFloat: return ADDRMSNORM_FLOAT32;
        default:
            TORCH_CHECK_TYPE(false, name, " has dtype ", torch_name(t.scalar_type()),
                             "; supported dtypes are float16, bfloat16 or float32");
    }
}

struct RowView {
    int64_t rows;
    int64_t stride;  // elements between rows; H when there is at most one row
};

// The tensor as rows of H with one stride, as t.view(-1, H) would see it, without making the view.
RowView as_rows(const char* name, const at::Tensor& t, c10::IntArrayRef shape) {
    TORCH_CHECK_VALUE(t.sizes() == shape, name, " has shape ", shape_str(t.sizes()), ", expected ",
                      shape_str(shape));
    const int64_t d = t.dim(), H = shape[d - 1];
    TORCH_CHECK_VALUE(H <= 1 || t.stride(d - 1) == 1, name,
                      ": the last dimension must be contiguous (stride 1), got stride ", t.stride(d - 1));
    int64_t rows = 1, stride = -1, expected = 0;
    for (int64_t i = d - 2; i >= 0; --i) {
        const int64_t n = t.size(i);
        rows *= n;
        if (n == 1) continue;
        if (stride < 0) {
            stride = t.stride(i);
        } else if (t.stride(i) != expected && t.numel() != 0) {
            TORCH_CHECK_VALUE(false, name, ": the leading dimensions of a tensor with strides ", shape_str(t.strides()),
                              " cannot be flattened into rows of one stride; pass a contiguous tensor or a "
                              "row-strided view");
        }
        expected = t.stride(i) * n;
    }
    if (rows <= 1 || stride < 0) stride = H;
    return {rows, stride};
}

void check_device(const char* name, const at::Tensor& t, const at::Tensor& x) {
    TORCH_CHECK_VALUE(t.device() == x.device(), name, " is on ", t.device(), " but x is on ", x.device(),
                      "; all tensors must be on one device");
}

// weight's shape and layout against H, then residual's and weight's devices (the order of
// validation.check_forward_meta, which the plain and the quantized operators share).
void check_weight_and_devices(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight, int64_t H) {
    TORCH_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == H, "weight has shape ", shape_str(weight.sizes()),
                      ", expected (", H, ",)");
    TORCH_CHECK_VALUE(H <= 1 || weight.stride(0) == 1, "weight must be contiguous, got stride ", weight.stride(0));
    check_device("residual", residual, x);
    check_device("weight", weight, x);
}

struct Checked {
    addrmsnorm_dtype xd, rd, wd;
    RowView x, residual;
};

// The checks of validation.check_forward that need no pointer arithmetic, in its order (the parity
// test compares the first failing check's words). out and residual_out are null for the functional
// form; the C ABI then checks overlap and aliasing.
Checked check_inputs(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight, bool hf,
                     const at::Tensor* out = nullptr, const at::Tensor* residual_out = nullptr) {
    Checked c;
    c.xd = to_dtype("x", x);
    c.rd = to_dtype("residual", residual);
    c.wd = to_dtype("weight", weight);
    if (out != nullptr) {
        to_dtype("out", *out);
        to_dtype("residual_out", *residual_out);
    }
    TORCH_CHECK_VALUE(x.dim() > 0, "x must have at least one dimension (..., H)");
    const int64_t H = x.size(-1);
    // The dtype pairing before H, in the C ABI's order.
    TORCH_CHECK_TYPE(c.rd == c.xd || c.rd == ADDRMSNORM_FLOAT32, "residual has dtype ",
                     torch_name(residual.scalar_type()), "; it must be x's dtype (", torch_name(x.scalar_type()),
                     ") or float32");
    TORCH_CHECK_TYPE(!hf || c.rd == c.xd, "numerics='hf' needs residual of x's dtype (", torch_name(x.scalar_type()),
                     "), got ", torch_name(residual.scalar_type()),
                     ": HF models carry the residual stream in the model dtype");
    TORCH_CHECK_TYPE(!hf || weight.scalar_type() == x.scalar_type(), "numerics='hf' needs weight of x's dtype (",
                     torch_name(x.scalar_type()), "), got ", torch_name(weight.scalar_type()),
                     ": HF's RMSNorm keeps its weight in the model dtype");
    TORCH_CHECK_VALUE(H > 0, "x has H = 0 (an empty last dimension); H must be > 0");
    if (out != nullptr) {
        TORCH_CHECK_TYPE(out->scalar_type() == x.scalar_type(), "out has dtype ", torch_name(out->scalar_type()),
                         "; it must be x's dtype (", torch_name(x.scalar_type()), ")");
        TORCH_CHECK_TYPE(residual_out->scalar_type() == residual.scalar_type(), "residual_out has dtype ",
                         torch_name(residual_out->scalar_type()), "; it must be residual's dtype (",
                         torch_name(residual.scalar_type()), ")");
    }
    check_weight_and_devices(x, residual, weight, H);
    if (out != nullptr) {
        check_device("out", *out, x);
        check_device("residual_out", *residual_out, x);
    }
    c.x = as_rows("x", x, x.sizes());
    c.residual = as_rows("residual", residual, x.sizes());
    return c;
}

[[noreturn]] void raise(addrmsnorm_status st) {
    const std::string msg = addrmsnorm_last_error();
    if (st == ADDRMSNORM_ERROR_INVALID_ARGUMENT) TORCH_CHECK_VALUE(false, msg);
    if (st == ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE) TORCH_CHECK_TYPE(false, msg);
    TORCH_CHECK(false, "addrmsnorm: ", addrmsnorm_status_string(st), ": ", msg);
}

// torch's current stream on the tensors' device, as the C ABI takes it.
addrmsnorm_stream current_stream(const c10::Device& device) {
    return reinterpret_cast<addrmsnorm_stream>(
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device).native_handle());
}

// Runs `call` (a C ABI call) and raises on failure. On a thread where the CUDA runtime has not yet
// made a context current, it adopts the device's primary context (the one torch uses) and tries once more.
template <typename F>
void with_context(const c10::Device& device, F call) {
    addrmsnorm_status st = call();
    if (st == ADDRMSNORM_ERROR_NO_CONTEXT) {
        const addrmsnorm_status adopted = addrmsnorm_use_primary_context(device.index());
        if (adopted != ADDRMSNORM_SUCCESS) raise(adopted);
        st = call();
    }
    if (st != ADDRMSNORM_SUCCESS) raise(st);
}

// One addrmsnorm_norm call on torch's current stream of `device`.
void launch_norm_args(const c10::Device& device, const addrmsnorm_norm_args& a) {
    const c10::DeviceGuard guard(device);  // the C ABI launches in the current context
    const auto stream = current_stream(device);
    with_context(device, [&] { return addrmsnorm_norm(&a, stream); });
}

void launch(const Checked& c, const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
            const at::Tensor& out, const RowView& o, const at::Tensor& residual_out, const RowView& ro,
            float* rstd, double eps, double weight_offset, bool hf, bool pdl) {
    TORCH_CHECK_VALUE(x.is_cuda(), "x is on ", x.device(), "; this is the CUDA backend");
    addrmsnorm_norm_args a = addrmsnorm_norm_args_init();
    a.x = x.data_ptr();
    a.residual = residual.data_ptr();
    a.weight = weight.data_ptr();
    a.out = out.data_ptr();
    a.residual_out = residual_out.data_ptr();
    a.rstd = rstd;
    a.rows = c.x.rows;
    a.hidden = x.size(-1);
    a.stride_x = c.x.stride;
    a.stride_residual = c.residual.stride;
    a.stride_out = o.stride;
    a.stride_residual_out = ro.stride;
    a.x_dtype = c.xd;
    a.residual_dtype = c.rd;
    a.weight_dtype = c.wd;
    a.eps = eps;
    a.weight_offset = weight_offset;
    a.numerics = hf ? ADDRMSNORM_NUMERICS_HF : ADDRMSNORM_NUMERICS_CONTRACT;
    a.flags = pdl ? ADDRMSNORM_FLAG_PDL : 0u;
    launch_norm_args(x.device(), a);
}

// Python's repr of a float (1e-06, 0.5, 1e+39, inf), so that messages match validation.py's word
// for word: the shortest digits that round-trip, fixed notation for decimal exponents in [-4, 16).
std::string py_repr(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    const std::string sci(buf, res.ptr);  // [-]d[.ddd]e(+|-)XX
    const size_t e = sci.find('e');
    std::string mant = sci.substr(0, e);
    const int exp10 = std::stoi(sci.substr(e + 1));
    std::string sign;
    if (!mant.empty() && mant[0] == '-') {
        sign = "-";
        mant.erase(0, 1);
    }
    std::string digits;
    for (char c : mant)
        if (c != '.') digits += c;
    const int n = static_cast<int>(digits.size()), point = exp10 + 1;  // value = 0.digits * 10^point
    if (exp10 < -4 || exp10 >= 16) {
        std::string out = sign + digits.substr(0, 1);
        if (n > 1) out += "." + digits.substr(1);
        const int a = exp10 < 0 ? -exp10 : exp10;
        return out + "e" + (exp10 < 0 ? "-" : "+") + (a < 10 ? "0" : "") + std::to_string(a);
    }
    if (point <= 0) return sign + "0." + std::string(-point, '0') + digits;
    if (point >= n) return sign + digits + std::string(point - n, '0') + ".0";
    return sign + digits.substr(0, point) + "." + digits.substr(point);
}

// The C ABI takes eps and weight_offset as fp32: reject values that would not survive the cast, in
// the words of validation.check_scalar.
void check_scalar(const char* name, double v, bool positive) {
    TORCH_CHECK_VALUE(std::isfinite(v), name, " must be finite, got ", py_repr(v));
    TORCH_CHECK_VALUE(!positive || v > 0.0, name, " must be > 0, got ", py_repr(v));
    const float f = static_cast<float>(v);  // round to nearest; past the fp32 range, inf
    TORCH_CHECK_VALUE(!std::isinf(f), name, "=", py_repr(v), " overflows float32");
    TORCH_CHECK_VALUE(!positive || f != 0.0f, name, "=", py_repr(v), " rounds to 0 in float32; it must be > 0 there");
}

void check_scalars(double eps, double weight_offset) {
    check_scalar("eps", eps, true);
    check_scalar("weight_offset", weight_offset, false);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_add_rmsnorm(const at::Tensor& x, const at::Tensor& residual,
                                                                 const at::Tensor& weight, double eps,
                                                                 double weight_offset, bool return_rstd, bool hf,
                                                                 bool pdl) {
    check_scalars(eps, weight_offset);
    const Checked c = check_inputs(x, residual, weight, hf);
    at::Tensor out = at::empty(x.sizes(), x.options().memory_format(c10::MemoryFormat::Contiguous));
    at::Tensor residual_out = at::empty(x.sizes(), residual.options().memory_format(c10::MemoryFormat::Contiguous));
    at::Tensor rstd = return_rstd ? at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(c10::kFloat))
                                  : at::empty({0}, x.options().dtype(c10::kFloat));
    const int64_t H = x.size(-1);
    if (c.x.rows > 0) {
        const RowView dense{c.x.rows, H};
        launch(c, x, residual, weight, out, dense, residual_out, dense,
               return_rstd ? rstd.data_ptr<float>() : nullptr, eps, weight_offset, hf, pdl);
    }
    return {out, residual_out, rstd};
}

void fused_add_rmsnorm_into(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                            const at::Tensor& out, const at::Tensor& residual_out, const std::optional<at::Tensor>& rstd,
                            double eps, double weight_offset, bool hf, bool pdl) {
    check_scalars(eps, weight_offset);
    const Checked c = check_inputs(x, residual, weight, hf, &out, &residual_out);
    if (rstd.has_value()) check_device("rstd", *rstd, x);
    const RowView o = as_rows("out", out, x.sizes());
    const RowView ro = as_rows("residual_out", residual_out, x.sizes());
    float* rstd_ptr = nullptr;
    if (rstd.has_value()) {
        const at::Tensor& r = *rstd;
        TORCH_CHECK_VALUE(r.scalar_type() == c10::kFloat && r.sizes() == x.sizes().slice(0, x.dim() - 1) &&
                              r.is_contiguous(),
                          "rstd must be a contiguous float32 tensor of shape ",
                          shape_str(x.sizes().slice(0, x.dim() - 1)), ", got ", torch_name(r.scalar_type()), " ",
                          shape_str(r.sizes()));
        if (r.numel() > 0) rstd_ptr = r.data_ptr<float>();
    }
    if (c.x.rows > 0) launch(c, x, residual, weight, out, o, residual_out, ro, rstd_ptr, eps, weight_offset, hf, pdl);
}

void fused_add_rmsnorm_(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight, double eps,
                        double weight_offset, bool hf, bool pdl) {
    check_scalars(eps, weight_offset);
    const Checked c = check_inputs(x, residual, weight, hf);
    if (c.x.rows > 0)
        launch(c, x, residual, weight, x, c.x, residual, c.residual, nullptr, eps, weight_offset, hf, pdl);
}

// ----- backward ----------------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_add_rmsnorm_backward(
    const at::Tensor& dy, const std::optional<at::Tensor>& dresidual_out, const at::Tensor& h,
    const at::Tensor& rstd, const at::Tensor& weight, double weight_offset, bool weight_grad) {
    check_scalar("weight_offset", weight_offset, false);
    const addrmsnorm_dtype xd = to_dtype("dy", dy), rd = to_dtype("h", h), wd = to_dtype("weight", weight);
    // The dtype pairing before the shape, in the C ABI's order.
    TORCH_CHECK_TYPE(rd == xd || rd == ADDRMSNORM_FLOAT32, "h has dtype ", torch_name(h.scalar_type()),
                     "; it must be dy's dtype (", torch_name(dy.scalar_type()), ") or float32");
    if (dresidual_out.has_value()) {
        to_dtype("dresidual_out", *dresidual_out);
        TORCH_CHECK_TYPE(dresidual_out->scalar_type() == h.scalar_type(), "dresidual_out has dtype ",
                         torch_name(dresidual_out->scalar_type()), "; it must be h's dtype (",
                         torch_name(h.scalar_type()), ")");
    }
    TORCH_CHECK_VALUE(dy.dim() > 0 && dy.size(-1) > 0, "dy has shape ", shape_str(dy.sizes()),
                      "; it must be (..., H) with H > 0");
    const int64_t H = dy.size(-1);
    TORCH_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == H && (H <= 1 || weight.stride(0) == 1),
                      "weight must be a contiguous (", H, ",) tensor, got shape ", shape_str(weight.sizes()));
    const auto lead = dy.sizes().slice(0, dy.dim() - 1);
    TORCH_CHECK_VALUE(rstd.scalar_type() == c10::kFloat && rstd.sizes() == lead && rstd.is_contiguous(),
                      "rstd must be a contiguous float32 tensor of shape ", shape_str(lead), ", got ",
                      torch_name(rstd.scalar_type()), " ", shape_str(rstd.sizes()));
    check_device("h", h, dy);
    check_device("rstd", rstd, dy);
    check_device("weight", weight, dy);
    const RowView vdy = as_rows("dy", dy, dy.sizes()), vh = as_rows("h", h, dy.sizes());
    RowView vdro{vdy.rows, H};
    const void* dro_ptr = nullptr;
    if (dresidual_out.has_value()) {
        const at::Tensor& g = *dresidual_out;
        check_device("dresidual_out", g, dy);
        vdro = as_rows("dresidual_out", g, dy.sizes());
        dro_ptr = g.data_ptr();
    }
    TORCH_CHECK_VALUE(dy.is_cuda(), "dy is on ", dy.device(), "; this is the CUDA backend");
    const bool separate = xd != rd;
    at::Tensor dres = at::empty(dy.sizes(), h.options().memory_format(c10::MemoryFormat::Contiguous));
    at::Tensor dx = at::empty(separate ? dy.sizes() : c10::IntArrayRef{0},
                              dy.options().memory_format(c10::MemoryFormat::Contiguous));
    at::Tensor dweight = at::empty(weight_grad ? weight.sizes() : c10::IntArrayRef{0}, weight.options());
    const c10::Device device = dy.device();
    const c10::DeviceGuard guard(device);
    const auto stream = current_stream(device);
    addrmsnorm_norm_backward_args a = addrmsnorm_norm_backward_args_init();
    a.rows = vdy.rows;
    a.hidden = H;
    a.x_dtype = xd;
    a.residual_dtype = rd;
    a.weight_dtype = wd;
    uint64_t bytes = 0;
    with_context(device, [&] { return addrmsnorm_norm_backward_workspace_size(&a, &bytes); });
    at::Tensor workspace = at::empty({static_cast<int64_t>((bytes + 3) / 4)}, dy.options().dtype(c10::kFloat));
    a.dy = dy.data_ptr();
    a.stride_dy = vdy.stride;
    a.dresidual_out = dro_ptr;
    a.stride_dresidual_out = vdro.stride;
    a.h = h.data_ptr();
    a.stride_h = vh.stride;
    a.rstd = rstd.data_ptr<float>();
    a.weight = weight.data_ptr();
    a.dresidual = dres.data_ptr();
    a.stride_dresidual = H;
    a.dx = separate ? dx.data_ptr() : nullptr;
    a.stride_dx = H;
    a.dweight = weight_grad ? dweight.data_ptr() : nullptr;
    a.workspace = workspace.data_ptr();
    a.workspace_bytes = bytes;
    a.weight_offset = weight_offset;
    with_context(device, [&] { return addrmsnorm_norm_backward(&a, stream); });
    return {dres, dx, dweight};
}

// ----- quantized outputs ---------------------------------------------------------------------------
// validation.check_quant_meta's rules in its order and words; the C ABI then checks alignment and
// overlap. Scales are laid out as validation.alloc_scales lays them out.

constexpr int64_t kTmaRowMultiple = 4;  // validation.TMA_ROW_MULTIPLE

// The quantized dtype: quant_dtype's, or (into given outputs, where the caller passes no quant_dtype) out's.
addrmsnorm_quant_dtype to_quant_dtype(c10::ScalarType t, bool from_out = false) {
    if (t == c10::kChar) return ADDRMSNORM_QUANT_INT8;
    if (t == c10::ScalarType::Float8_e4m3fn) return ADDRMSNORM_QUANT_FLOAT8_E4M3;
    if (t == c10::ScalarType::Float4_e2m1fn_x2) return ADDRMSNORM_QUANT_FLOAT4_E2M1;
    if (from_out)
        TORCH_CHECK_TYPE(false, "out has dtype ", torch_name(t),
                         "; the quantized output must be torch.float8_e4m3fn, torch.int8 or torch.float4_e2m1fn_x2");
    TORCH_CHECK_TYPE(false, "quant_dtype must be torch.float8_e4m3fn, torch.int8 or torch.float4_e2m1fn_x2, got ",
                     torch_name(t));
}

// The QUANT mode (configs.quant_kernel_mode): 1 static, 2 per token, 3 per group, 4 NVFP4, 5 MXFP8, 6 MXFP4.
int quant_mode(c10::ScalarType q, bool has_scale, int64_t group_size) {
    if (q == c10::ScalarType::Float4_e2m1fn_x2) return group_size == 16 ? 4 : 6;
    if (q == c10::ScalarType::Float8_e4m3fn && group_size == 32) return 5;
    return has_scale ? 1 : group_size ? 3 : 2;
}
constexpr const char* kModeNames[7] = {"", "STATIC", "TOKEN", "GROUP", "NVFP4", "MXFP8", "MXFP4"};

// A block-scaled mode's scales: e4m3 (NVFP4) or e8m0 bytes.
c10::ScalarType block_scale_dtype(int mode) {
    return mode == 4 ? c10::ScalarType::Float8_e4m3fn : c10::ScalarType::Float8_e8m0fnu;
}

// validation.swizzled_scales_numel: rows rounded up to 128, blocks to 4.
int64_t swizzled_scales_numel(int64_t rows, int64_t H, int64_t group_size) {
    return (rows + 127) / 128 * 128 * ((H / group_size + 3) / 4 * 4);
}

int64_t leading_rows(c10::IntArrayRef shape) {
    int64_t n = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) n *= shape[i];
    return n;
}

// q's shape: x's, or (..., H / 2) for fp4 (validation.q_shape).
std::vector<int64_t> q_shape(c10::IntArrayRef shape, c10::ScalarType q) {
    std::vector<int64_t> s(shape.begin(), shape.end());
    if (q == c10::ScalarType::Float4_e2m1fn_x2) s.back() /= 2;
    return s;
}

void check_scale_tensor(const char* name, const at::Tensor& t, const at::Tensor& x) {
    TORCH_CHECK_TYPE(t.scalar_type() == c10::kFloat && t.numel() == 1, name,
                     " must be a 1-element float32 tensor, got ", torch_name(t.scalar_type()), " of shape ",
                     shape_str(t.sizes()));
    TORCH_CHECK_VALUE(t.device() == x.device(), name, " is on ", t.device(), " but x is on ", x.device(),
                      "; it must be on x's device");
}

std::vector<int64_t> scales_shape(c10::IntArrayRef shape, int64_t group_size) {
    std::vector<int64_t> s(shape.begin(), shape.end() - 1);
    if (group_size) s.push_back(shape.back() / group_size);
    return s;
}

// The checks that need no memory. Returns the mode: 1 static, 2 per token, 3 per group.
int check_quant_meta(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                     c10::ScalarType quant_dtype, const std::optional<at::Tensor>& scale, int64_t group_size,
                     const std::optional<at::Tensor>& scale_ub, const at::Tensor* out, const at::Tensor* residual_out,
                     const std::optional<at::Tensor>* scales_out, const std::optional<at::Tensor>* y, bool ue8m0,
                     bool column_major, bool swizzled = false) {
    to_quant_dtype(quant_dtype, out != nullptr);
    to_dtype("x", x);
    TORCH_CHECK_TYPE(x.scalar_type() == c10::kHalf || x.scalar_type() == c10::kBFloat16, "x has dtype ",
                     torch_name(x.scalar_type()), "; quantized outputs take x of float16 or bfloat16");
    TORCH_CHECK_TYPE(residual.scalar_type() == x.scalar_type(), "residual has dtype ",
                     torch_name(residual.scalar_type()), "; quantized outputs need residual of x's dtype (",
                     torch_name(x.scalar_type()), ")");
    TORCH_CHECK_TYPE(weight.scalar_type() == x.scalar_type(), "weight has dtype ", torch_name(weight.scalar_type()),
                     "; quantized outputs need weight of x's dtype (", torch_name(x.scalar_type()),
                     "), as a checkpoint has it");
    // validation.check_forward_meta(x, residual, weight, None, residual_out)
    to_dtype("residual", residual);
    to_dtype("weight", weight);
    if (residual_out != nullptr) to_dtype("residual_out", *residual_out);
    TORCH_CHECK_VALUE(x.dim() > 0, "x must have at least one dimension (..., H)");
    const int64_t H = x.size(-1);
    TORCH_CHECK_VALUE(H > 0, "x has H = 0 (an empty last dimension); H must be > 0");
    if (residual_out != nullptr)
        TORCH_CHECK_TYPE(residual_out->scalar_type() == residual.scalar_type(), "residual_out has dtype ",
                         torch_name(residual_out->scalar_type()), "; it must be residual's dtype (",
                         torch_name(residual.scalar_type()), ")");
    check_weight_and_devices(x, residual, weight, H);
    if (residual_out != nullptr) check_device("residual_out", *residual_out, x);
    TORCH_CHECK_VALUE(quant_dtype != c10::ScalarType::Float4_e2m1fn_x2 || group_size == 16 || group_size == 32,
                      "float4_e2m1fn_x2 outputs are block-scaled: group_size must be 16 (NVFP4) or 32 (MXFP4), got ",
                      group_size);
    const int mode = quant_mode(quant_dtype, scale.has_value(), group_size);
    const bool block = mode >= 4;
    const char* name = kModeNames[mode];
    TORCH_CHECK_VALUE(!(block && mode != 4 && scale.has_value()), name, " takes no scale (NVFP4 alone has a global scale)");
    TORCH_CHECK_VALUE(!(mode == 4 && !scale.has_value()), "NVFP4 needs scale, its global scale (a 1-element float32 tensor)");
    TORCH_CHECK_VALUE(!(scale.has_value() && group_size && !block), "scale (static) and group_size (per group) exclude each other; pass one");
    TORCH_CHECK_VALUE(!group_size || block || group_size == 64 || group_size == 128,
                      "group_size must be 64 or 128 (or 32 for MXFP8), got ", group_size);
    TORCH_CHECK_VALUE(!group_size || H % group_size == 0, "H=", H, " is not a multiple of group_size=", group_size);
    TORCH_CHECK_VALUE(H % 16 == 0, "H=", H,
                      " is not a multiple of 16: quantized outputs need rows of 16-element multiples, as fp8 and int8 "
                      "GEMMs do");
    if (scale.has_value()) check_scale_tensor("scale", *scale, x);
    if (scale_ub.has_value()) {
        TORCH_CHECK_VALUE(mode != 1, "scale_ub bounds a dynamic scale; a static scale takes none");
        TORCH_CHECK_VALUE(!block, "scale_ub does not apply to ", name);
        check_scale_tensor("scale_ub", *scale_ub, x);
    }
    TORCH_CHECK_VALUE(!(ue8m0 && mode == 1), "ue8m0_scales rounds dynamic scales; a static scale is used as given");
    TORCH_CHECK_VALUE(!(ue8m0 && block), "ue8m0_scales does not apply to ", name, ": its scales are ",
                      mode == 4 ? "e4m3" : "e8m0 already");
    TORCH_CHECK_VALUE(!(column_major && mode != 3), "column_major_scales lays out per-group scales; pass group_size");
    TORCH_CHECK_VALUE(!(swizzled && !block),
                      "swizzled_scales lays out the scales of a block-scaled format (NVFP4, MXFP8, MXFP4)");
    if (out != nullptr) {
        TORCH_CHECK_TYPE(out->scalar_type() == quant_dtype, "out has dtype ", torch_name(out->scalar_type()),
                         "; it must be quant_dtype (", torch_name(quant_dtype), ")");
        TORCH_CHECK_VALUE(out->device() == x.device(), "out is on ", out->device(), " but x is on ", x.device(),
                          "; all tensors must be on one device");
    }
    if (y != nullptr && y->has_value()) {
        const at::Tensor& t = **y;
        to_dtype("y", t);
        TORCH_CHECK_TYPE(t.scalar_type() == x.scalar_type(), "y has dtype ", torch_name(t.scalar_type()),
                         "; it must be x's dtype (", torch_name(x.scalar_type()), ")");
        TORCH_CHECK_VALUE(t.device() == x.device(), "y is on ", t.device(), " but x is on ", x.device(),
                          "; all tensors must be on one device");
    }
    if (scales_out != nullptr && scales_out->has_value()) {
        const at::Tensor& t = **scales_out;
        TORCH_CHECK_VALUE(mode != 1, "scales_out receives dynamic scales; a static call has none to write");
        std::vector<int64_t> want = scales_shape(x.sizes(), group_size);
        if (block && swizzled) want = {swizzled_scales_numel(leading_rows(x.sizes()), H, group_size)};
        const c10::ScalarType want_dtype = block ? block_scale_dtype(mode) : c10::kFloat;
        TORCH_CHECK_VALUE(t.scalar_type() == want_dtype && t.sizes() == c10::IntArrayRef(want),
                          "scales_out must be ", torch_name(want_dtype) + 6, " of shape ", shape_str(want), ", got ",
                          torch_name(t.scalar_type()), " ", shape_str(t.sizes()));
        TORCH_CHECK_VALUE(!(block && swizzled && want[0] > 1 && t.stride(0) != 1),
                          "scales_out: the swizzled layout is one contiguous buffer (stride 1)");
        TORCH_CHECK_VALUE(t.device() == x.device(), "scales_out is on ", t.device(), " but x is on ", x.device(),
                          "; all tensors must be on one device");
    }
    return mode;
}

// (row stride, group stride) of scales seen as [rows, groups] (validation._scales_geometry): the
// leading dimensions must flatten to rows of one stride; the C ABI checks that no two scales share
// an address.
std::pair<int64_t, int64_t> scales_geometry(const at::Tensor& t, int64_t groups) {
    const int64_t nd = groups > 1 ? t.dim() - 1 : t.dim();  // the row dimensions
    int64_t rows = 1, stride = -1, expected = 0;
    for (int64_t i = nd - 1; i >= 0; --i) {
        const int64_t n = t.size(i);
        rows *= n;
        if (n == 1) continue;
        if (stride < 0) {
            stride = t.stride(i);
        } else {
            TORCH_CHECK_VALUE(t.stride(i) == expected || t.numel() == 0, "scales_out: the leading dimensions of a tensor "
                              "with strides ", shape_str(t.strides()), " cannot be flattened into rows of one stride");
        }
        expected = t.stride(i) * n;
    }
    const int64_t gs = groups > 1 ? t.stride(-1) : 0;
    return {rows > 1 ? stride : 0, gs};
}

// The scales of a dynamic or block-scaled call (mode 2-6), laid out as validation.alloc_scales lays them out.
at::Tensor alloc_scales(const at::Tensor& x, int mode, int64_t group_size, bool column_major, bool swizzled = false) {
    const std::vector<int64_t> want = scales_shape(x.sizes(), group_size);
    if (mode >= 4) {
        const auto options = x.options().dtype(block_scale_dtype(mode));
        if (swizzled) return at::empty({swizzled_scales_numel(leading_rows(x.sizes()), x.size(-1), group_size)}, options);
        return at::empty(want, options);
    }
    if (mode == 3 && column_major) {
        int64_t n = 1;
        for (int64_t i = 0; i + 1 < x.dim(); ++i) n *= x.size(i);
        const int64_t groups = x.size(-1) / group_size;
        const int64_t n_pad = (n + kTmaRowMultiple - 1) / kTmaRowMultiple * kTmaRowMultiple;
        return at::empty({groups, n_pad}, x.options().dtype(c10::kFloat)).t().slice(0, 0, n).view(want);
    }
    return at::empty(want, x.options().dtype(c10::kFloat));
}

// The C ABI's descriptor of a quantized call (the fused and the plain norm's).
addrmsnorm_quant quant_descriptor(const at::Tensor& q, const std::optional<at::Tensor>& scale, const at::Tensor* scales,
                                  const std::optional<at::Tensor>& scale_ub, int mode, int64_t group_size, bool ue8m0,
                                  int64_t H, bool swizzled = false) {
    addrmsnorm_quant qd{};
    qd.mode = static_cast<addrmsnorm_quant_mode>(mode);  // the C ABI's values are the QUANT modes
    qd.dtype = to_quant_dtype(q.scalar_type());
    qd.group_size = mode >= 3 ? static_cast<int32_t>(group_size) : 0;
    qd.flags = (ue8m0 ? ADDRMSNORM_QUANT_UE8M0 : 0u) | (swizzled ? ADDRMSNORM_QUANT_SWIZZLED : 0u);
    qd.scale = scale.has_value() ? scale->data_ptr<float>() : nullptr;
    qd.scale_ub = scale_ub.has_value() ? scale_ub->data_ptr<float>() : nullptr;
    if (scales != nullptr) {
        qd.scales = scales->data_ptr();
        if (!swizzled)
            std::tie(qd.scales_stride_row, qd.scales_stride_group) =
                scales_geometry(*scales, mode >= 3 ? H / group_size : 1);
    }
    return qd;
}

// One quantized addrmsnorm_norm call: residual and residual_out null for the plain norm's.
void launch_quant_args(const at::Tensor& x, const at::Tensor* residual, const at::Tensor& weight, const at::Tensor& q,
                       const at::Tensor* residual_out, const at::Tensor* y, const RowView& vx, const RowView& vr,
                       const RowView& vq, const RowView& vro, const RowView& vy, const addrmsnorm_quant& qd, double eps,
                       double weight_offset, bool pdl) {
    addrmsnorm_norm_args a = addrmsnorm_norm_args_init();
    a.x = x.data_ptr();
    a.weight = weight.data_ptr();
    a.out = q.data_ptr();
    a.y = y != nullptr ? y->data_ptr() : nullptr;
    a.rows = vx.rows;
    a.hidden = x.size(-1);
    a.stride_x = vx.stride;
    a.stride_out = vq.stride;
    a.stride_y = vy.stride;
    if (residual != nullptr) {
        a.residual = residual->data_ptr();
        a.residual_out = residual_out->data_ptr();
        a.stride_residual = vr.stride;
        a.stride_residual_out = vro.stride;
    }
    a.x_dtype = a.residual_dtype = a.weight_dtype = to_dtype("x", x);
    a.eps = eps;
    a.weight_offset = weight_offset;
    a.quant = &qd;
    a.flags = pdl ? ADDRMSNORM_FLAG_PDL : 0u;
    launch_norm_args(x.device(), a);
}

void launch_quant(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight, const at::Tensor& q,
                  const at::Tensor& residual_out, const at::Tensor* y, const std::optional<at::Tensor>& scale,
                  const at::Tensor* scales, const std::optional<at::Tensor>& scale_ub, int mode, int64_t group_size,
                  bool ue8m0, double eps, double weight_offset, bool pdl, bool swizzled) {
    TORCH_CHECK_VALUE(x.is_cuda(), "x is on ", x.device(), "; this is the CUDA backend");
    const RowView vx = as_rows("x", x, x.sizes()), vr = as_rows("residual", residual, x.sizes());
    const RowView vq = as_rows("out", q, q_shape(x.sizes(), q.scalar_type()));
    const RowView vro = as_rows("residual_out", residual_out, x.sizes());
    const RowView vy = y != nullptr ? as_rows("y", *y, x.sizes()) : RowView{vx.rows, x.size(-1)};
    if (vx.rows == 0) return;
    const int64_t H = x.size(-1);
    const addrmsnorm_quant qd = quant_descriptor(q, scale, scales, scale_ub, mode, group_size, ue8m0, H, swizzled);
    launch_quant_args(x, &residual, weight, q, &residual_out, y, vx, vr, vq, vro, vy, qd, eps, weight_offset, pdl);
}

// Outputs a call does not ask for are None (std::nullopt): scales when static, y without return_y.
std::tuple<at::Tensor, at::Tensor, std::optional<at::Tensor>, std::optional<at::Tensor>> fused_add_rmsnorm_quant(
    const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight, double eps, c10::ScalarType quant_dtype,
    const std::optional<at::Tensor>& scale, int64_t group_size, const std::optional<at::Tensor>& scale_ub,
    bool column_major_scales, bool ue8m0_scales, double weight_offset, bool return_y, bool pdl, bool swizzled_scales) {
    check_scalars(eps, weight_offset);
    const int mode = check_quant_meta(x, residual, weight, quant_dtype, scale, group_size, scale_ub, nullptr, nullptr,
                                      nullptr, nullptr, ue8m0_scales, column_major_scales, swizzled_scales);
    as_rows("x", x, x.sizes());
    as_rows("residual", residual, x.sizes());
    const auto contiguous = c10::MemoryFormat::Contiguous;
    at::Tensor q = at::empty(q_shape(x.sizes(), quant_dtype), x.options().dtype(quant_dtype).memory_format(contiguous));
    at::Tensor residual_out = at::empty(x.sizes(), residual.options().memory_format(contiguous));
    std::optional<at::Tensor> y, scales;
    if (return_y) y = at::empty(x.sizes(), x.options().memory_format(contiguous));
    if (mode != 1) scales = alloc_scales(x, mode, group_size, column_major_scales, swizzled_scales);
    launch_quant(x, residual, weight, q, residual_out, y ? &*y : nullptr, scale, scales ? &*scales : nullptr,
                 scale_ub, mode, group_size, ue8m0_scales, eps, weight_offset, pdl, swizzled_scales);
    return {q, residual_out, scales, y};
}

void fused_add_rmsnorm_quant_into(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                                  const at::Tensor& out, const at::Tensor& residual_out,
                                  const std::optional<at::Tensor>& scales_out, const std::optional<at::Tensor>& y,
                                  double eps, const std::optional<at::Tensor>& scale, int64_t group_size,
                                  const std::optional<at::Tensor>& scale_ub, bool ue8m0_scales, double weight_offset,
                                  bool pdl, bool swizzled_scales) {
    check_scalars(eps, weight_offset);
    TORCH_CHECK_VALUE(scales_out.has_value() ||
                          (scale.has_value() && out.scalar_type() != c10::ScalarType::Float4_e2m1fn_x2),
                      "scales_out is required for dynamic quantization (no scale given): the kernel writes the scales "
                      "there");
    const int mode = check_quant_meta(x, residual, weight, out.scalar_type(), scale, group_size, scale_ub, &out,
                                      &residual_out, &scales_out, &y, ue8m0_scales, false, swizzled_scales);
    launch_quant(x, residual, weight, out, residual_out, y.has_value() ? &*y : nullptr, scale,
                 scales_out.has_value() ? &*scales_out : nullptr, scale_ub, mode, group_size, ue8m0_scales, eps,
                 weight_offset, pdl, swizzled_scales);
}

// ----- the plain norm --------------------------------------------------------------------------------
// validation.check_rmsnorm's rules in its order and words; the C ABI checks overlap (validate_rmsnorm).

// A tensor of shape (..., H) as [groups, heads, H] rows of two leading strides (validation.as_grouped_rows):
// one row stride where its leading dimensions flatten to one (heads 1), else groups of shape[-2] rows.
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
    TORCH_CHECK_VALUE(t.sizes() == shape, name, " has shape ", shape_str(t.sizes()), ", expected ", shape_str(shape));
    const int64_t d = t.dim(), H = shape[d - 1];
    TORCH_CHECK_VALUE(H <= 1 || t.stride(d - 1) == 1, name,
                      ": the last dimension must be contiguous (stride 1), got stride ", t.stride(d - 1));
    // Whether dims [0, end) flatten to one stride: (ok, rows, stride), stride -1 if no dim has size > 1.
    auto flatten = [&](int64_t end) {
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
        return std::make_tuple(ok || t.numel() == 0, rows, stride);
    };
    auto [one, rows, stride] = flatten(d - 1);
    if (one) {
        stride = rows > 1 ? stride : std::max<int64_t>(H, 1);
        TORCH_CHECK_VALUE(stride >= 0, name, ": negative row stride ", stride);
        return {rows, 1, stride, 0};
    }
    // d >= 3 here: a 2-D tensor always flattens.
    auto [outer_ok, groups, outer] = flatten(d - 2);
    TORCH_CHECK_VALUE(outer_ok, name, ": a tensor with strides ", shape_str(t.strides()),
                      " cannot be addressed as rows of two leading strides (the dimensions before the last two must "
                      "flatten to one stride); pass a contiguous tensor or a view");
    const int64_t heads = t.size(d - 2), inner = t.stride(d - 2);
    if (groups <= 1) outer = heads * inner;  // one group: its stride is never used
    TORCH_CHECK_VALUE(outer >= 0 && inner >= 0, name, ": negative strides ", shape_str(t.strides()));
    return {groups * heads, heads, outer, inner};
}

// The plain-norm operators' numerics (configs.PLAIN_NUMERICS' index: 0 contract, 1 hf, 2 hf_round_once) as
// the C ABI's addrmsnorm_numerics (the same values); validation.plain_numerics' words.
addrmsnorm_numerics checked_numerics(int64_t numerics) {
    TORCH_CHECK_VALUE(numerics >= 0 && numerics <= 2, "numerics must be 0 (contract), 1 (hf) or 2 (hf_round_once), got ",
                      numerics);
    return static_cast<addrmsnorm_numerics>(numerics);
}

addrmsnorm_dtype check_norm_meta(const at::Tensor& x, const at::Tensor& weight, bool hf, const at::Tensor* out,
                                 const at::Tensor* rstd) {
    const addrmsnorm_dtype xd = to_dtype("x", x);
    to_dtype("weight", weight);
    if (out != nullptr) to_dtype("out", *out);
    TORCH_CHECK_VALUE(x.dim() > 0, "x must have at least one dimension (..., H)");
    const int64_t H = x.size(-1);
    TORCH_CHECK_TYPE(!hf || weight.scalar_type() == x.scalar_type(), "numerics='hf' needs weight of x's dtype (",
                     torch_name(x.scalar_type()), "), got ", torch_name(weight.scalar_type()),
                     ": HF's RMSNorm keeps its weight in the model dtype");
    TORCH_CHECK_VALUE(H > 0, "x has H = 0 (an empty last dimension); H must be > 0");
    if (out != nullptr)
        TORCH_CHECK_TYPE(out->scalar_type() == x.scalar_type(), "out has dtype ", torch_name(out->scalar_type()),
                         "; it must be x's dtype (", torch_name(x.scalar_type()), ")");
    TORCH_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == H, "weight has shape ", shape_str(weight.sizes()),
                      ", expected (", H, ",)");
    TORCH_CHECK_VALUE(H <= 1 || weight.stride(0) == 1, "weight must be contiguous, got stride ", weight.stride(0));
    check_device("weight", weight, x);
    if (out != nullptr) check_device("out", *out, x);
    if (rstd != nullptr) check_device("rstd", *rstd, x);
    return xd;
}

void launch_norm(const at::Tensor& x, const Grouped& gx, const at::Tensor& weight, const at::Tensor& out,
                 const Grouped& go, float* rstd, double eps, double weight_offset, addrmsnorm_numerics numerics,
                 bool pdl) {
    TORCH_CHECK_VALUE(x.is_cuda(), "x is on ", x.device(), "; this is the CUDA backend");
    if (gx.rows == 0) return;
    addrmsnorm_norm_args a = addrmsnorm_norm_args_init();
    a.x = x.data_ptr();
    a.weight = weight.data_ptr();
    a.out = out.data_ptr();
    a.rstd = rstd;
    a.rows = gx.rows / gx.heads;
    a.groups = gx.heads;
    a.hidden = x.size(-1);
    a.stride_x = gx.stride;
    a.stride_x_group = gx.head_stride;
    a.stride_out = go.stride;
    a.stride_out_group = go.head_stride;
    a.x_dtype = a.residual_dtype = to_dtype("x", x);
    a.weight_dtype = to_dtype("weight", weight);
    a.eps = eps;
    a.weight_offset = weight_offset;
    a.numerics = numerics;
    a.flags = pdl ? ADDRMSNORM_FLAG_PDL : 0u;
    launch_norm_args(x.device(), a);
}

float* checked_rstd(const std::optional<at::Tensor>& rstd, const at::Tensor& x) {
    if (!rstd.has_value()) return nullptr;
    const at::Tensor& r = *rstd;
    const auto lead = x.sizes().slice(0, x.dim() - 1);
    TORCH_CHECK_VALUE(r.scalar_type() == c10::kFloat && r.sizes() == lead && r.is_contiguous(),
                      "rstd must be a contiguous float32 tensor of shape ", shape_str(lead), ", got ",
                      torch_name(r.scalar_type()), " ", shape_str(r.sizes()));
    return r.numel() > 0 ? r.data_ptr<float>() : nullptr;
}

std::tuple<at::Tensor, at::Tensor> rmsnorm(const at::Tensor& x, const at::Tensor& weight, double eps,
                                           double weight_offset, bool return_rstd, int64_t numerics, bool pdl) {
    check_scalars(eps, weight_offset);
    const addrmsnorm_numerics n = checked_numerics(numerics);
    check_norm_meta(x, weight, n != ADDRMSNORM_NUMERICS_CONTRACT, nullptr, nullptr);
    const Grouped gx = as_grouped("x", x, x.sizes());
    at::Tensor out = at::empty(x.sizes(), x.options().memory_format(c10::MemoryFormat::Contiguous));
    at::Tensor rstd = at::empty(return_rstd ? x.sizes().slice(0, x.dim() - 1) : c10::IntArrayRef{0},
                                x.options().dtype(c10::kFloat));
    const int64_t H = x.size(-1);
    const Grouped go = Grouped{gx.rows, 1, H, 0}.as_group_of(gx.heads);
    launch_norm(x, gx, weight, out, go, return_rstd && rstd.numel() ? rstd.data_ptr<float>() : nullptr, eps,
                weight_offset, n, pdl);
    return {out, rstd};
}

void rmsnorm_into(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& out,
                  const std::optional<at::Tensor>& rstd, double eps, double weight_offset, int64_t numerics,
                  bool pdl) {
    check_scalars(eps, weight_offset);
    const addrmsnorm_numerics n = checked_numerics(numerics);
    check_norm_meta(x, weight, n != ADDRMSNORM_NUMERICS_CONTRACT, &out, rstd.has_value() ? &*rstd : nullptr);
    Grouped gx = as_grouped("x", x, x.sizes());
    Grouped go = out.is_same(x) ? gx : as_grouped("out", out, x.sizes());
    const int64_t g = std::max(gx.heads, go.heads);
    gx = gx.as_group_of(g);
    go = go.as_group_of(g);
    float* r = checked_rstd(rstd, x);
    launch_norm(x, gx, weight, out, go, r, eps, weight_offset, n, pdl);
}

void rmsnorm_(const at::Tensor& x, const at::Tensor& weight, double eps, double weight_offset, int64_t numerics,
              bool pdl) {
    rmsnorm_into(x, weight, x, std::nullopt, eps, weight_offset, numerics, pdl);
}

void qk_rmsnorm_(const at::Tensor& qkv, const at::Tensor& q_weight, const at::Tensor& k_weight, double eps,
                 int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, double weight_offset, int64_t numerics,
                 bool pdl) {
    check_scalars(eps, weight_offset);
    const addrmsnorm_numerics numerics_value = checked_numerics(numerics);
    const bool hf = numerics_value != ADDRMSNORM_NUMERICS_CONTRACT;
    // validation.check_qk_rmsnorm_meta, in its order and words.
    const addrmsnorm_dtype xd = to_dtype("qkv", qkv), wd = to_dtype("q_weight", q_weight);
    to_dtype("k_weight", k_weight);
    TORCH_CHECK_TYPE(xd == ADDRMSNORM_FLOAT16 || xd == ADDRMSNORM_BFLOAT16, "qkv has dtype ",
                     torch_name(qkv.scalar_type()), "; the QK norm takes float16 or bfloat16");
    TORCH_CHECK_TYPE(wd == xd || wd == ADDRMSNORM_FLOAT32, "q_weight has dtype ", torch_name(q_weight.scalar_type()),
                     "; it must be qkv's dtype (", torch_name(qkv.scalar_type()), ") or float32");
    TORCH_CHECK_TYPE(k_weight.scalar_type() == q_weight.scalar_type(), "k_weight has dtype ",
                     torch_name(k_weight.scalar_type()), "; it must be q_weight's (", torch_name(q_weight.scalar_type()),
                     ")");
    TORCH_CHECK_TYPE(!hf || q_weight.scalar_type() == qkv.scalar_type(), "numerics='hf' needs weight of x's dtype (",
                     torch_name(qkv.scalar_type()), "), got ", torch_name(q_weight.scalar_type()),
                     ": HF's RMSNorm keeps its weight in the model dtype");
    TORCH_CHECK_VALUE(num_q_heads >= 1 && num_kv_heads >= 1, "num_q_heads and num_kv_heads must be >= 1, got ",
                      num_q_heads, " and ", num_kv_heads);
    TORCH_CHECK_VALUE(head_dim >= 1 && head_dim <= 512, "head_dim must be in [1, 512], got ", head_dim,
                      "; for wider rows normalize the q and k views with rmsnorm_");
    TORCH_CHECK_VALUE(qkv.dim() == 2, "qkv has shape ", shape_str(qkv.sizes()), "; it must be 2-D, (tokens, width)");
    const int64_t width = (num_q_heads + num_kv_heads) * head_dim;
    TORCH_CHECK_VALUE(qkv.size(1) >= width, "qkv has width ", qkv.size(1), ", less than the q and k heads' (",
                      num_q_heads, " + ", num_kv_heads, ") * ", head_dim, " = ", width);
    TORCH_CHECK_VALUE(qkv.size(1) <= 1 || qkv.stride(1) == 1,
                      "qkv: the last dimension must be contiguous (stride 1), got stride ", qkv.stride(1));
    for (const auto& [name, w] : {std::pair<const char*, const at::Tensor*>{"q_weight", &q_weight},
                                  std::pair<const char*, const at::Tensor*>{"k_weight", &k_weight}}) {
        TORCH_CHECK_VALUE(w->dim() == 1 && w->size(0) == head_dim, name, " has shape ", shape_str(w->sizes()),
                          ", expected (", head_dim, ",)");
        TORCH_CHECK_VALUE(head_dim <= 1 || w->stride(0) == 1, name, " must be contiguous, got stride ", w->stride(0));
    }
    check_device("q_weight", q_weight, qkv);
    check_device("k_weight", k_weight, qkv);
    TORCH_CHECK_VALUE(qkv.is_cuda(), "x is on ", qkv.device(), "; this is the CUDA backend");
    const int64_t tokens = qkv.size(0);
    const int64_t stride = tokens > 1 ? qkv.stride(0) : qkv.size(1);
    TORCH_CHECK_VALUE(tokens <= 1 || stride >= width, "qkv: row stride ", stride, " < the q and k heads' width ", width,
                      ", so its rows overlap");
    if (tokens == 0) return;
    // q's heads, then k's, as the groups of one call; k's weight from num_q_heads on.
    addrmsnorm_norm_args a = addrmsnorm_norm_args_init();
    a.x = a.out = qkv.data_ptr();
    a.weight = q_weight.data_ptr();
    a.weight2 = k_weight.data_ptr();
    a.weight2_from_group = num_q_heads;
    a.rows = tokens;
    a.groups = num_q_heads + num_kv_heads;
    a.hidden = head_dim;
    a.stride_x = a.stride_out = stride;
    a.stride_x_group = a.stride_out_group = head_dim;
    a.x_dtype = a.residual_dtype = xd;
    a.weight_dtype = wd;
    a.eps = eps;
    a.weight_offset = weight_offset;
    a.numerics = numerics_value;
    a.flags = pdl ? ADDRMSNORM_FLAG_PDL : 0u;
    launch_norm_args(qkv.device(), a);
}

void launch_plain_quant(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& q, const at::Tensor* y,
                        const std::optional<at::Tensor>& scale, const at::Tensor* scales,
                        const std::optional<at::Tensor>& scale_ub, int mode, int64_t group_size, bool ue8m0,
                        double eps, double weight_offset, bool pdl, bool swizzled) {
    TORCH_CHECK_VALUE(x.is_cuda(), "x is on ", x.device(), "; this is the CUDA backend");
    const RowView vx = as_rows("x", x, x.sizes());
    const RowView vq = as_rows("out", q, q_shape(x.sizes(), q.scalar_type()));
    const RowView vy = y != nullptr ? as_rows("y", *y, x.sizes()) : RowView{vx.rows, x.size(-1)};
    if (vx.rows == 0) return;
    const int64_t H = x.size(-1);
    const addrmsnorm_quant qd = quant_descriptor(q, scale, scales, scale_ub, mode, group_size, ue8m0, H, swizzled);
    launch_quant_args(x, nullptr, weight, q, nullptr, y, vx, vx, vq, vx, vy, qd, eps, weight_offset, pdl);
}

std::tuple<at::Tensor, std::optional<at::Tensor>, std::optional<at::Tensor>> rmsnorm_quant(
    const at::Tensor& x, const at::Tensor& weight, double eps, c10::ScalarType quant_dtype,
    const std::optional<at::Tensor>& scale, int64_t group_size, const std::optional<at::Tensor>& scale_ub,
    bool column_major_scales, bool ue8m0_scales, double weight_offset, bool return_y, bool pdl, bool swizzled_scales) {
    check_scalars(eps, weight_offset);
    // The fused checks with residual = x (every rule on residual holds as it does on x).
    const int mode = check_quant_meta(x, x, weight, quant_dtype, scale, group_size, scale_ub, nullptr, nullptr,
                                      nullptr, nullptr, ue8m0_scales, column_major_scales, swizzled_scales);
    as_rows("x", x, x.sizes());
    const auto contiguous = c10::MemoryFormat::Contiguous;
    at::Tensor q = at::empty(q_shape(x.sizes(), quant_dtype), x.options().dtype(quant_dtype).memory_format(contiguous));
    std::optional<at::Tensor> y, scales;
    if (return_y) y = at::empty(x.sizes(), x.options().memory_format(contiguous));
    if (mode != 1) scales = alloc_scales(x, mode, group_size, column_major_scales, swizzled_scales);
    launch_plain_quant(x, weight, q, y ? &*y : nullptr, scale, scales ? &*scales : nullptr, scale_ub, mode, group_size,
                       ue8m0_scales, eps, weight_offset, pdl, swizzled_scales);
    return {q, scales, y};
}

void rmsnorm_quant_into(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& out,
                        const std::optional<at::Tensor>& scales_out, const std::optional<at::Tensor>& y, double eps,
                        const std::optional<at::Tensor>& scale, int64_t group_size,
                        const std::optional<at::Tensor>& scale_ub, bool ue8m0_scales, double weight_offset, bool pdl,
                        bool swizzled_scales) {
    check_scalars(eps, weight_offset);
    TORCH_CHECK_VALUE(scales_out.has_value() ||
                          (scale.has_value() && out.scalar_type() != c10::ScalarType::Float4_e2m1fn_x2),
                      "scales_out is required for dynamic quantization (no scale given): the kernel writes the scales "
                      "there");
    const int mode = check_quant_meta(x, x, weight, out.scalar_type(), scale, group_size, scale_ub, &out, nullptr,
                                      &scales_out, &y, ue8m0_scales, false, swizzled_scales);
    launch_plain_quant(x, weight, out, y.has_value() ? &*y : nullptr, scale,
                       scales_out.has_value() ? &*scales_out : nullptr, scale_ub, mode, group_size, ue8m0_scales, eps,
                       weight_offset, pdl, swizzled_scales);
}

// ----- the operators: one per form, the residual optional (none: the plain norm) ---------------------
// jit_backend.norm & co., the same shells with the same words.

bool fused_hf(int64_t numerics) {
    const addrmsnorm_numerics n = checked_numerics(numerics);
    TORCH_CHECK_VALUE(n != ADDRMSNORM_NUMERICS_HF_ROUND_ONCE,
                      "numerics 2 (hf_round_once) is the plain and QK norms' (residual None); with a residual, "
                      "numerics is 0 (contract) or 1 (hf)");
    return n == ADDRMSNORM_NUMERICS_HF;
}

void no_residual_out(const std::optional<at::Tensor>& residual_out) {
    TORCH_CHECK_VALUE(!residual_out.has_value(),
                      "residual_out is given but residual is None: the plain norm writes no residual");
}

const at::Tensor& residual_out_of(const std::optional<at::Tensor>& residual_out) {
    TORCH_CHECK_VALUE(residual_out.has_value(),
                      "residual_out is None but residual is given: the fused norm writes h there");
    return *residual_out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> norm(const at::Tensor& x, const std::optional<at::Tensor>& residual,
                                                    const at::Tensor& weight, double eps, double weight_offset,
                                                    bool return_rstd, int64_t numerics, bool pdl) {
    if (!residual.has_value()) {
        auto [y, rstd] = rmsnorm(x, weight, eps, weight_offset, return_rstd, numerics, pdl);
        return {y, at::empty({0}, x.options()), rstd};
    }
    return fused_add_rmsnorm(x, *residual, weight, eps, weight_offset, return_rstd, fused_hf(numerics), pdl);
}

void norm_(const at::Tensor& x, const std::optional<at::Tensor>& residual, const at::Tensor& weight, double eps,
           double weight_offset, int64_t numerics, bool pdl) {
    if (!residual.has_value()) return rmsnorm_(x, weight, eps, weight_offset, numerics, pdl);
    fused_add_rmsnorm_(x, *residual, weight, eps, weight_offset, fused_hf(numerics), pdl);
}

void norm_into(const at::Tensor& x, const std::optional<at::Tensor>& residual, const at::Tensor& weight,
               const at::Tensor& out, const std::optional<at::Tensor>& residual_out,
               const std::optional<at::Tensor>& rstd, double eps, double weight_offset, int64_t numerics, bool pdl) {
    if (!residual.has_value()) {
        no_residual_out(residual_out);
        return rmsnorm_into(x, weight, out, rstd, eps, weight_offset, numerics, pdl);
    }
    const at::Tensor& ro = residual_out_of(residual_out);
    fused_add_rmsnorm_into(x, *residual, weight, out, ro, rstd, eps, weight_offset, fused_hf(numerics), pdl);
}

std::tuple<at::Tensor, at::Tensor, std::optional<at::Tensor>, std::optional<at::Tensor>> norm_quant(
    const at::Tensor& x, const std::optional<at::Tensor>& residual, const at::Tensor& weight, double eps,
    c10::ScalarType quant_dtype, const std::optional<at::Tensor>& scale, int64_t group_size,
    const std::optional<at::Tensor>& scale_ub, bool column_major_scales, bool ue8m0_scales, double weight_offset,
    bool return_y, bool pdl, bool swizzled_scales) {
    if (!residual.has_value()) {
        auto [q, scales, y] = rmsnorm_quant(x, weight, eps, quant_dtype, scale, group_size, scale_ub,
                                            column_major_scales, ue8m0_scales, weight_offset, return_y, pdl,
                                            swizzled_scales);
        return {q, at::empty({0}, x.options()), scales, y};
    }
    return fused_add_rmsnorm_quant(x, *residual, weight, eps, quant_dtype, scale, group_size, scale_ub,
                                   column_major_scales, ue8m0_scales, weight_offset, return_y, pdl, swizzled_scales);
}

void norm_quant_into(const at::Tensor& x, const std::optional<at::Tensor>& residual, const at::Tensor& weight,
                     const at::Tensor& out, const std::optional<at::Tensor>& residual_out,
                     const std::optional<at::Tensor>& scales_out, const std::optional<at::Tensor>& y, double eps,
                     const std::optional<at::Tensor>& scale, int64_t group_size,
                     const std::optional<at::Tensor>& scale_ub, bool ue8m0_scales, double weight_offset, bool pdl,
                     bool swizzled_scales) {
    if (!residual.has_value()) {
        no_residual_out(residual_out);
        return rmsnorm_quant_into(x, weight, out, scales_out, y, eps, scale, group_size, scale_ub, ue8m0_scales,
                                  weight_offset, pdl, swizzled_scales);
    }
    const at::Tensor& ro = residual_out_of(residual_out);
    fused_add_rmsnorm_quant_into(x, *residual, weight, out, ro, scales_out, y, eps, scale, group_size, scale_ub,
                                 ue8m0_scales, weight_offset, pdl, swizzled_scales);
}

}  // namespace

TORCH_LIBRARY_IMPL(addrmsnorm, CUDA, m) {
    m.impl("norm", &norm);
    m.impl("norm_", &norm_);
    m.impl("norm_into", &norm_into);
    m.impl("norm_backward", &fused_add_rmsnorm_backward);
    m.impl("norm_quant", &norm_quant);
    m.impl("norm_quant_into", &norm_quant_into);
    m.impl("qk_rmsnorm_", &qk_rmsnorm_);
}
