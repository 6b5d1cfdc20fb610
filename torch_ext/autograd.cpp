// The Autograd-key kernels of the torch.ops.addrmsnorm operators on the cpp backend: the C++ twin of
// addrmsnorm/autograd.py, which the Triton backend registers instead. Same guards, same messages,
// same gradients bit for bit (the tests hold them to it); in C++ so that a training step, and a
// module whose weight requires grad, pay no Python per call.
//
// * fused_add_rmsnorm (functional): with grad mode on and an input that requires grad, the forward
//   always computes rstd and saves (h, rstd, weight), never x or residual; the caller still gets a
//   0-element rstd unless it asked for one. The backward calls fused_add_rmsnorm_backward.
// * fused_add_rmsnorm_backward: first order only. With grad mode on (create_graph=True) and an input
//   that requires grad, its outputs hang off an Error node that raises no_double_backward_message if a
//   backward reaches it: a second-order gradient is refused, never a silent zero.
// * fused_add_rmsnorm_ and fused_add_rmsnorm_into (mutating): no backward. With grad mode on they
//   refuse any argument that requires grad, naming it; in every mode they bump the version counters
//   of what they wrote, as ADInplaceOrView does for torch's in-place ops.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <string_view>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace {

using at::Tensor;

using ForwardFn = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, double, double,
                                                     bool, bool, bool);
using BackwardFn = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const std::optional<Tensor>&, const Tensor&,
                                                      const Tensor&, const Tensor&, double, bool);
using InPlaceFn = void(const Tensor&, const Tensor&, const Tensor&, double, double, bool, bool);
using IntoFn = void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                    const std::optional<Tensor>&, double, double, bool, bool);

using QuantFn = std::tuple<Tensor, Tensor, std::optional<Tensor>, std::optional<Tensor>>(
    const Tensor&, const Tensor&, const Tensor&, double, c10::ScalarType, const std::optional<Tensor>&, int64_t,
    const std::optional<Tensor>&, bool, bool, double, bool, bool, bool);
using QuantIntoFn = void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const std::optional<Tensor>&, const std::optional<Tensor>&, double,
                         const std::optional<Tensor>&, int64_t, const std::optional<Tensor>&, bool, double, bool,
                         bool);

// The operators' names: each is the key of its own handle below.
constexpr char kForward[] = "addrmsnorm::fused_add_rmsnorm";
constexpr char kBackward[] = "addrmsnorm::fused_add_rmsnorm_backward";
constexpr char kInPlace[] = "addrmsnorm::fused_add_rmsnorm_";
constexpr char kInto[] = "addrmsnorm::fused_add_rmsnorm_into";
constexpr char kQuant[] = "addrmsnorm::fused_add_rmsnorm_quant";
constexpr char kQuantInto[] = "addrmsnorm::fused_add_rmsnorm_quant_into";

// The handle of operator Name, found once. Keyed by the operator, not by its C++ signature: two
// operators of one signature (the plain norm's and the fused one's may be) each get their own.
template <typename Fn, const char* Name>
const c10::TypedOperatorHandle<Fn>& op() {
    static const auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(Name, "").typed<Fn>();
    return handle;
}

const c10::TypedOperatorHandle<ForwardFn>& forward_op() { return op<ForwardFn, kForward>(); }
const c10::TypedOperatorHandle<BackwardFn>& backward_op() { return op<BackwardFn, kBackward>(); }

// addrmsnorm/autograd.py no_backward_message, word for word.
std::string no_backward_message(const char* name, const char* arg) {
    if (std::string_view(name).find("quant") != std::string_view::npos)
        return std::string("addrmsnorm::") + name + " has no backward, but " + arg +
               " requires grad; quantized outputs are for inference: call it under torch.no_grad() or "
               "torch.inference_mode()";
    return std::string("addrmsnorm::") + name + " has no backward, but " + arg +
           " requires grad; call it under torch.no_grad(), or for training call "
           "addrmsnorm.fused_add_rmsnorm(x, residual, weight) without out= or residual_out=";
}

// addrmsnorm/autograd.py no_double_backward_message, word for word.
constexpr char kNoDoubleBackward[] =
    "addrmsnorm::fused_add_rmsnorm_backward has no backward: the gradients of fused_add_rmsnorm, rmsnorm, "
    "FusedAddRMSNorm and RMSNorm are first order only, so a gradient of a gradient "
    "(torch.autograd.grad(..., create_graph=True), then a backward through its result) cannot be taken; for "
    "higher-order gradients use the reference, addrmsnorm.fused_add_rmsnorm_ref or addrmsnorm.rmsnorm_ref, which "
    "autograd differentiates to any order";

void refuse_grad(const char* name, std::initializer_list<std::pair<const char*, const Tensor*>> args) {
    if (!c10::GradMode::is_enabled()) return;
    for (const auto& [arg, t] : args)
        TORCH_CHECK(!(t->defined() && t->requires_grad()), no_backward_message(name, arg));
}

void bump(const Tensor& t) { t.unsafeGetTensorImpl()->bump_version(); }

// ----- the functional operator ---------------------------------------------------------------------
// A graph node written directly, as torch's generated autograd code does, rather than through
// torch::autograd::Function: that machinery (per-call context map, output wrapping) cost about 6 us
// per call on the H200 box's host, against about 0.5 us for a torch op's own autograd.

namespace ag = torch::autograd;

// The node pointer type: std::shared_ptr<Node> in older torch, c10::intrusive_ptr<Node> in newer.
using NodePtr = decltype(std::declval<ag::Edge&>().function);

template <typename T, typename... Args>
auto make_node(Args&&... args) {
    if constexpr (std::is_same_v<NodePtr, std::shared_ptr<ag::Node>>) {
        return std::shared_ptr<T>(new T(std::forward<Args>(args)...));
    } else {
        return c10::make_intrusive<T>(std::forward<Args>(args)...);
    }
}

// The gradient of (y, residual_out) with respect to (x, residual, weight).
struct FusedAddRMSNormBackward final : public ag::Node {
    ag::SavedVariable h, rstd, weight;  // h is this node's output: saved without a reference cycle
    double weight_offset = 0.0;
    c10::ScalarType x_dtype = c10::kFloat;

    std::string name() const override { return "FusedAddRMSNormBackward"; }

    void release_variables() override {
        h.reset_data();
        rstd.reset_data();
        weight.reset_data();
    }

    ag::variable_list apply(ag::variable_list&& grads) override {
        const bool need_x = should_compute_output(0), need_res = should_compute_output(1),
                   need_w = should_compute_output(2);
        if (!need_x && !need_res && !need_w) return {Tensor(), Tensor(), Tensor()};
        const Tensor h_ = h.unpack(getptr()), rstd_ = rstd.unpack(), weight_ = weight.unpack();
        Tensor dy = grads[0];
        if (!dy.defined())
            dy = at::zeros(h_.sizes(), h_.options().dtype(x_dtype));  // y unused: its gradient is 0
        else if (!dy.is_contiguous())
            dy = dy.contiguous();  // e.g. the expanded gradient of a sum()
        std::optional<Tensor> dresidual_out;  // absent when residual_out is unused: nothing to add
        if (grads[1].defined()) dresidual_out = grads[1].is_contiguous() ? grads[1] : grads[1].contiguous();
        auto [dres, dx, dweight] = backward_op().call(dy, dresidual_out, h_, rstd_, weight_, weight_offset, need_w);
        if (x_dtype == h_.scalar_type()) dx = dres;  // one tensor, handed back for both x and residual
        return {need_x ? dx : Tensor(), need_res ? dres : Tensor(), need_w ? dweight : Tensor()};
    }
};

// The backward operator: its gradients are computed as usual; where they would take part in a graph,
// they get an Error node, as torch.autograd.function.once_differentiable does.
std::tuple<Tensor, Tensor, Tensor> fused_add_rmsnorm_backward_autograd(
    c10::DispatchKeySet ks, const Tensor& dy, const std::optional<Tensor>& dresidual_out, const Tensor& h,
    const Tensor& rstd, const Tensor& weight, double weight_offset, bool weight_grad) {
    Tensor dres, dx, dweight;
    {
        at::AutoDispatchBelowADInplaceOrView below;
        std::tie(dres, dx, dweight) = backward_op().redispatch(ks & c10::after_autograd_keyset, dy, dresidual_out,
                                                               h, rstd, weight, weight_offset, weight_grad);
    }
    const bool graph = c10::GradMode::is_enabled() &&
                       (dy.requires_grad() || (dresidual_out.has_value() && dresidual_out->requires_grad()) ||
                        h.requires_grad() || rstd.requires_grad() || weight.requires_grad());
    if (graph) {
        const NodePtr fn(make_node<ag::Error>(std::string(kNoDoubleBackward)));
        for (Tensor* t : {&dres, &dx, &dweight})
            if (t->defined()) ag::set_history(*t, fn);
    }
    return {dres, dx, dweight};
}

std::tuple<Tensor, Tensor, Tensor> fused_add_rmsnorm_autograd(c10::DispatchKeySet ks, const Tensor& x,
                                                              const Tensor& residual, const Tensor& weight, double eps,
                                                              double weight_offset, bool return_rstd, bool hf,
                                                              bool pdl) {
    const bool grad =
        c10::GradMode::is_enabled() && (x.requires_grad() || residual.requires_grad() || weight.requires_grad());
    if (!grad) {
        at::AutoDispatchBelowADInplaceOrView below;
        return forward_op().redispatch(ks & c10::after_autograd_keyset, x, residual, weight, eps, weight_offset,
                                       return_rstd, hf, pdl);
    }
    auto node = make_node<FusedAddRMSNormBackward>();
    node->set_next_edges(ag::collect_next_edges(x, residual, weight));
    Tensor y, h, rstd;
    {
        at::AutoDispatchBelowADInplaceOrView below;
        // rstd always: the backward needs the forward's own, not one recomputed from rounded h.
        std::tie(y, h, rstd) = forward_op().redispatch(ks & c10::after_autograd_keyset, x, residual, weight, eps,
                                                       weight_offset, true, hf, pdl);
    }
    const NodePtr fn(node);
    ag::set_history(y, fn);  // output 0
    ag::set_history(h, fn);  // output 1; rstd is not differentiable
    node->h = ag::SavedVariable(h, /*is_output=*/true);
    node->rstd = ag::SavedVariable(rstd, false);
    node->weight = ag::SavedVariable(weight, false);
    node->weight_offset = weight_offset;
    node->x_dtype = x.scalar_type();
    return {y, h, return_rstd ? rstd : at::empty({0}, rstd.options())};
}

// ----- the mutating operators ----------------------------------------------------------------------

void fused_add_rmsnorm__autograd(c10::DispatchKeySet ks, const Tensor& x, const Tensor& residual,
                                 const Tensor& weight, double eps, double weight_offset, bool hf, bool pdl) {
    refuse_grad("fused_add_rmsnorm_", {{"x", &x}, {"residual", &residual}, {"weight", &weight}});
    {
        at::AutoDispatchBelowADInplaceOrView below;
        op<InPlaceFn, kInPlace>()
            .redispatch(ks & c10::after_ADInplaceOrView_keyset, x, residual, weight, eps, weight_offset, hf, pdl);
    }
    bump(x);
    bump(residual);
}

void fused_add_rmsnorm_into_autograd(c10::DispatchKeySet ks, const Tensor& x, const Tensor& residual,
                                     const Tensor& weight, const Tensor& out, const Tensor& residual_out,
                                     const std::optional<Tensor>& rstd, double eps, double weight_offset, bool hf,
                                     bool pdl) {
    const Tensor none;
    refuse_grad("fused_add_rmsnorm_into", {{"x", &x}, {"residual", &residual}, {"weight", &weight}, {"out", &out},
                                           {"residual_out", &residual_out},
                                           {"rstd", rstd.has_value() ? &*rstd : &none}});
    {
        at::AutoDispatchBelowADInplaceOrView below;
        op<IntoFn, kInto>()
            .redispatch(ks & c10::after_ADInplaceOrView_keyset, x, residual, weight, out, residual_out, rstd, eps,
                        weight_offset, hf, pdl);
    }
    bump(out);
    bump(residual_out);
    if (rstd.has_value() && rstd->defined()) bump(*rstd);
}

// ----- quantized outputs: inference only -------------------------------------------------------------

std::tuple<Tensor, Tensor, std::optional<Tensor>, std::optional<Tensor>> fused_add_rmsnorm_quant_autograd(
    c10::DispatchKeySet ks, const Tensor& x, const Tensor& residual, const Tensor& weight, double eps,
    c10::ScalarType quant_dtype, const std::optional<Tensor>& scale, int64_t group_size,
    const std::optional<Tensor>& scale_ub, bool column_major_scales, bool ue8m0_scales, double weight_offset,
    bool return_y, bool pdl, bool swizzled_scales) {
    refuse_grad("fused_add_rmsnorm_quant", {{"x", &x}, {"residual", &residual}, {"weight", &weight}});
    at::AutoDispatchBelowADInplaceOrView below;
    return op<QuantFn, kQuant>()
        .redispatch(ks & c10::after_autograd_keyset, x, residual, weight, eps, quant_dtype, scale, group_size, scale_ub,
                    column_major_scales, ue8m0_scales, weight_offset, return_y, pdl, swizzled_scales);
}

void fused_add_rmsnorm_quant_into_autograd(c10::DispatchKeySet ks, const Tensor& x, const Tensor& residual,
                                           const Tensor& weight, const Tensor& out, const Tensor& residual_out,
                                           const std::optional<Tensor>& scales_out, const std::optional<Tensor>& y,
                                           double eps, const std::optional<Tensor>& scale, int64_t group_size,
                                           const std::optional<Tensor>& scale_ub, bool ue8m0_scales,
                                           double weight_offset, bool pdl, bool swizzled_scales) {
    const Tensor none;
    refuse_grad("fused_add_rmsnorm_quant_into",
                {{"x", &x}, {"residual", &residual}, {"weight", &weight}, {"out", &out}, {"residual_out", &residual_out},
                 {"scales_out", scales_out.has_value() ? &*scales_out : &none}, {"y", y.has_value() ? &*y : &none}});
    {
        at::AutoDispatchBelowADInplaceOrView below;
        op<QuantIntoFn, kQuantInto>()
            .redispatch(ks & c10::after_ADInplaceOrView_keyset, x, residual, weight, out, residual_out, scales_out, y,
                        eps, scale, group_size, scale_ub, ue8m0_scales, weight_offset, pdl, swizzled_scales);
    }
    bump(out);
    bump(residual_out);
    if (scales_out.has_value() && scales_out->defined()) bump(*scales_out);
    if (y.has_value() && y->defined()) bump(*y);
}

}  // namespace

TORCH_LIBRARY_IMPL(addrmsnorm, Autograd, m) {
    m.impl("fused_add_rmsnorm_quant", &fused_add_rmsnorm_quant_autograd);
    m.impl("fused_add_rmsnorm_quant_into", &fused_add_rmsnorm_quant_into_autograd);
    m.impl("fused_add_rmsnorm", &fused_add_rmsnorm_autograd);
    m.impl("fused_add_rmsnorm_backward", &fused_add_rmsnorm_backward_autograd);
    m.impl("fused_add_rmsnorm_", &fused_add_rmsnorm__autograd);
    m.impl("fused_add_rmsnorm_into", &fused_add_rmsnorm_into_autograd);
}
