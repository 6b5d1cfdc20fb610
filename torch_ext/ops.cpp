// The C++ backend of the torch.ops.addrmsnorm operators (their schemas are in addrmsnorm/ops.py).
//
// Each operator checks its tensors here, with the messages of addrmsnorm/validation.py, and calls
// the C ABI of the AOT-compiled runtime (include/addrmsnorm/addrmsnorm.h) on torch's current stream
// for the tensors' device. The C ABI then makes the pointer-level checks (overlap, alignment, eps)
// before it launches. Nothing here needs CUDA headers or nvcc: the stream comes from c10's generic
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

#include <charconv>
#include <cmath>
#include <sstream>
#include <string>
#include <tuple>

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
    TORCH_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == H, "weight has shape ", shape_str(weight.sizes()),
                      ", expected (", H, ",)");
    TORCH_CHECK_VALUE(H <= 1 || weight.stride(0) == 1, "weight must be contiguous, got stride ", weight.stride(0));
    check_device("residual", residual, x);
    check_device("weight", weight, x);
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

void launch(const Checked& c, const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
            const at::Tensor& out, const RowView& o, const at::Tensor& residual_out, const RowView& ro,
            float* rstd, double eps, double weight_offset, bool hf, bool pdl) {
    TORCH_CHECK_VALUE(x.is_cuda(), "x is on ", x.device(), "; this is the CUDA backend");
    const int64_t H = x.size(-1);
    const c10::Device device = x.device();
    const c10::DeviceGuard guard(device);  // the C ABI launches in the current context
    const auto stream = reinterpret_cast<addrmsnorm_stream>(
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device).native_handle());
    auto call = [&] {
        return addrmsnorm_fused_add_rmsnorm(
            x.data_ptr(), residual.data_ptr(), weight.data_ptr(), out.data_ptr(), residual_out.data_ptr(), rstd,
            c.x.rows, H, c.x.stride, c.residual.stride, o.stride, ro.stride, c.xd, c.rd, c.wd,
            static_cast<float>(eps), static_cast<float>(weight_offset),
            (hf ? ADDRMSNORM_FLAG_HF_NUMERICS : 0u) | (pdl ? ADDRMSNORM_FLAG_PDL : 0u), stream);
    };
    with_context(device, call);
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
    const auto stream = reinterpret_cast<addrmsnorm_stream>(
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device).native_handle());
    uint64_t bytes = 0;
    with_context(device, [&] { return addrmsnorm_fused_add_rmsnorm_backward_workspace_size(vdy.rows, H, xd, rd, &bytes); });
    at::Tensor workspace = at::empty({static_cast<int64_t>((bytes + 3) / 4)}, dy.options().dtype(c10::kFloat));
    with_context(device, [&] {
        return addrmsnorm_fused_add_rmsnorm_backward(
            dy.data_ptr(), dro_ptr, h.data_ptr(), rstd.data_ptr<float>(), weight.data_ptr(), dres.data_ptr(),
            separate ? dx.data_ptr() : nullptr, weight_grad ? dweight.data_ptr() : nullptr, workspace.data_ptr(), bytes,
            vdy.rows, H, vdy.stride, vdro.stride, vh.stride, H, H, xd, rd, wd, static_cast<float>(weight_offset), 0u,
            stream);
    });
    return {dres, dx, dweight};
}

}  // namespace

TORCH_LIBRARY_IMPL(addrmsnorm, CUDA, m) {
    m.impl("fused_add_rmsnorm", &fused_add_rmsnorm);
    m.impl("fused_add_rmsnorm_", &fused_add_rmsnorm_);
    m.impl("fused_add_rmsnorm_into", &fused_add_rmsnorm_into);
    m.impl("fused_add_rmsnorm_backward", &fused_add_rmsnorm_backward);
}
