// The Autograd-key kernels of the torch.ops.addrmsnorm operators on the cpp backend: the C++ twin of
// addrmsnorm/autograd.py, which the Triton backend registers instead. Same guards, same messages,
// same gradients bit for bit (the tests hold them to it); in C++ so that a training step, and a
// module whose weight requires grad, pay no Python per call.
//
// * fused_add_rmsnorm (functional): with grad mode on and an input that requires grad, the forward
//   always computes rstd and saves (h, rstd, weight), never x or residual; the caller still gets a
//   0-element rstd unless it asked for one. The backward calls fused_add_rmsnorm_backward.
// * fused_add_rmsnorm_ and fused_add_rmsnorm_into (mutating): no backward. With grad mode on they
//   refuse any argument that requires grad, naming it; in every mode they bump the version counters
//   of what they wrote, as ADInplaceOrView does for torch's in-place ops.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>

namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using ForwardFn = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, double, double,
                                                     bool, bool, bool);
using BackwardFn = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const std::optional<Tensor>&, const Tensor&,
                                                      const Tensor&, const Tensor&, double, bool);
using InPlaceFn = void(const Tensor&, const Tensor&, const Tensor&, double, double, bool, bool);
using IntoFn = void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                    const std::optional<Tensor>&, double, double, bool, bool);

template <typename Fn>
const c10::TypedOperatorHandle<Fn>& op(const char* name) {
    // One handle per signature: each operator here has its own.
    static const auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Fn>();
    return handle;
}

const c10::TypedOperatorHandle<ForwardFn>& forward_op() { return op<ForwardFn>("addrmsnorm::fused_add_rmsnorm"); }
const c10::TypedOperatorHandle<BackwardFn>& backward_op() {
    return op<BackwardFn>("addrmsnorm::fused_add_rmsnorm_backward");
}

// addrmsnorm/autograd.py no_backward_message, word for word.
std::string no_backward_message(const char* name, const char* arg) {
    return std::string("addrmsnorm::") + name + " has no backward, but " + arg +
           " requires grad; call it under torch.no_grad(), or for training call "
           "addrmsnorm.fused_add_rmsnorm(x, residual, weight) without out= or residual_out=";
}

void refuse_grad(const char* name, std::initializer_list<std::pair<const char*, const Tensor*>> args) {
    if (!c10::GradMode::is_enabled()) return;
    for (const auto& [arg, t] : args)
        TORCH_CHECK(!(t->defined() && t->requires_grad()), no_backward_message(name, arg));
}

void bump(const Tensor& t) { t.unsafeGetTensorImpl()->bump_version(); }

// ----- the functional operator ---------------------------------------------------------------------

struct FusedAddRMSNormFunction : public torch::autograd::Function<FusedAddRMSNormFunction> {
    static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& residual, const Tensor& weight,
                                 double eps, double weight_offset, bool return_rstd, bool hf, bool pdl) {
        at::AutoDispatchBelowADInplaceOrView below;
        // rstd always: the backward needs the forward's own, not one recomputed from rounded h.
        auto [y, h, rstd] = forward_op().call(x, residual, weight, eps, weight_offset, true, hf, pdl);
        ctx->set_materialize_grads(false);  // an unused output costs no zero-filled gradient
        ctx->save_for_backward({h, rstd, weight});
        ctx->saved_data["weight_offset"] = weight_offset;
        ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
        Tensor rstd_out = return_rstd ? rstd : at::empty({0}, rstd.options());
        ctx->mark_non_differentiable({rstd_out});
        return {y, h, rstd_out};
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const variable_list saved = ctx->get_saved_variables();
        const Tensor &h = saved[0], &rstd = saved[1], &weight = saved[2];
        const auto x_dtype = static_cast<c10::ScalarType>(ctx->saved_data["x_dtype"].toInt());
        Tensor dy = grads[0];
        if (!dy.defined())
            dy = at::zeros(h.sizes(), h.options().dtype(x_dtype));
        else if (!dy.is_contiguous())
            dy = dy.contiguous();  // e.g. the expanded gradient of a sum()
        std::optional<Tensor> dresidual_out;
        if (grads[1].defined()) dresidual_out = grads[1].is_contiguous() ? grads[1] : grads[1].contiguous();
        const bool need_x = ctx->needs_input_grad(0), need_res = ctx->needs_input_grad(1),
                   need_w = ctx->needs_input_grad(2);
        auto [dres, dx, dweight] = backward_op().call(dy, dresidual_out, h, rstd, weight,
                                                      ctx->saved_data["weight_offset"].toDouble(), need_w);
        if (x_dtype == h.scalar_type()) dx = dres;  // one tensor, handed back for both x and residual
        return {need_x ? dx : Tensor(), need_res ? dres : Tensor(), need_w ? dweight : Tensor(),
                Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
    }
};

std::tuple<Tensor, Tensor, Tensor> fused_add_rmsnorm_autograd(c10::DispatchKeySet ks, const Tensor& x,
                                                              const Tensor& residual, const Tensor& weight, double eps,
                                                              double weight_offset, bool return_rstd, bool hf,
                                                              bool pdl) {
    if (c10::GradMode::is_enabled() && (x.requires_grad() || residual.requires_grad() || weight.requires_grad())) {
        variable_list out =
            FusedAddRMSNormFunction::apply(x, residual, weight, eps, weight_offset, return_rstd, hf, pdl);
        return {out[0], out[1], out[2]};
    }
    at::AutoDispatchBelowADInplaceOrView below;
    return forward_op().redispatch(ks & c10::after_autograd_keyset, x, residual, weight, eps, weight_offset,
                                   return_rstd, hf, pdl);
}

// ----- the mutating operators ----------------------------------------------------------------------

void fused_add_rmsnorm__autograd(c10::DispatchKeySet ks, const Tensor& x, const Tensor& residual,
                                 const Tensor& weight, double eps, double weight_offset, bool hf, bool pdl) {
    refuse_grad("fused_add_rmsnorm_", {{"x", &x}, {"residual", &residual}, {"weight", &weight}});
    {
        at::AutoDispatchBelowADInplaceOrView below;
        op<InPlaceFn>("addrmsnorm::fused_add_rmsnorm_")
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
        op<IntoFn>("addrmsnorm::fused_add_rmsnorm_into")
            .redispatch(ks & c10::after_ADInplaceOrView_keyset, x, residual, weight, out, residual_out, rstd, eps,
                        weight_offset, hf, pdl);
    }
    bump(out);
    bump(residual_out);
    if (rstd.has_value() && rstd->defined()) bump(*rstd);
}

}  // namespace

TORCH_LIBRARY_IMPL(addrmsnorm, Autograd, m) {
    m.impl("fused_add_rmsnorm", &fused_add_rmsnorm_autograd);
    m.impl("fused_add_rmsnorm_", &fused_add_rmsnorm__autograd);
    m.impl("fused_add_rmsnorm_into", &fused_add_rmsnorm_into_autograd);
}
