// The Autograd-key kernels of every torch.ops.addrmsnorm operator on the cpp backend: the C++ twin of
// addrmsnorm/autograd.py, which the Triton backend registers instead. Same guards, same messages,
// same gradients bit for bit (the tests hold them to it); in C++ so that a training step, and a
// module whose weight requires grad, pay no Python per call.
//
// * norm (functional): with grad mode on and an input that requires grad, the forward always
//   computes rstd and saves (h, rstd, weight) -- h is residual_out, or x without a residual -- and
//   the caller still gets a 0-element rstd unless it asked for one. The backward calls norm_backward
//   (without a residual on x's rows of one stride: a view of two strides is copied there).
// * norm_backward: first order only. With grad mode on (create_graph=True) and an input that
//   requires grad, its outputs hang off an Error node that raises no_double_backward_message if a
//   backward reaches it: a second-order gradient is refused, never a silent zero.
// * the mutating and the quantized operators: no backward. With grad mode on they refuse any
//   argument that requires grad, naming it; the mutating ones bump the version counters of what they
//   wrote, as ADInplaceOrView does for torch's in-place ops.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/sigmoid.h>
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

using OptTensor = std::optional<Tensor>;
using NormFn = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const OptTensor&, const OptTensor&, double, double,
                                                  bool, int64_t, bool, double, const OptTensor&, double,
                                                  const OptTensor&, int64_t, bool);
using BackwardFn = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const OptTensor&, const Tensor&, const OptTensor&,
                                                      const OptTensor&, double, bool, const OptTensor&,
                                                      const OptTensor&, int64_t, int64_t, int64_t, double);
using InPlaceFn = void(const Tensor&, const OptTensor&, const OptTensor&, double, double, int64_t, bool, double,
                       const OptTensor&, double, const OptTensor&, int64_t, bool, const OptTensor&, const OptTensor&);
using IntoFn = void(const Tensor&, const OptTensor&, const OptTensor&, const Tensor&, const OptTensor&,
                    const OptTensor&, double, double, int64_t, bool, double, const OptTensor&, double,
                    const OptTensor&, int64_t, bool, const OptTensor&, const OptTensor&, const OptTensor&);
using QuantFn = std::tuple<Tensor, Tensor, OptTensor, OptTensor>(const Tensor&, const OptTensor&, const OptTensor&,
                                                                 double, c10::ScalarType, const OptTensor&, int64_t,
                                                                 const OptTensor&, bool, bool, double, bool, bool, bool,
                                                                 double, const OptTensor&, double, const OptTensor&,
                                                                 int64_t, bool);
using QuantIntoFn = void(const Tensor&, const OptTensor&, const OptTensor&, const Tensor&, const OptTensor&,
                         const OptTensor&, const OptTensor&, double, const OptTensor&, int64_t, const OptTensor&, bool,
                         double, bool, bool, double, const OptTensor&, double, const OptTensor&, int64_t, bool);
using QkFn = void(const Tensor&, const OptTensor&, const OptTensor&, double, int64_t, int64_t, int64_t, double, int64_t,
                  bool, const OptTensor&, const OptTensor&, const OptTensor&, const OptTensor&, int64_t, int64_t, int64_t);

// The operators' names: each is the key of its own handle below.
constexpr char kNorm[] = "addrmsnorm::norm";
constexpr char kBackward[] = "addrmsnorm::norm_backward";
constexpr char kInPlace[] = "addrmsnorm::norm_";
constexpr char kInto[] = "addrmsnorm::norm_into";
constexpr char kQuant[] = "addrmsnorm::norm_quant";
constexpr char kQuantInto[] = "addrmsnorm::norm_quant_into";
constexpr char kQk[] = "addrmsnorm::qk_rmsnorm_";

// The handle of operator Name, found once. Keyed by the operator, not by its C++ signature.
template <typename Fn, const char* Name>
const c10::TypedOperatorHandle<Fn>& op() {
    static const auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(Name, "").typed<Fn>();
    return handle;
}

const c10::TypedOperatorHandle<NormFn>& norm_op() { return op<NormFn, kNorm>(); }
const c10::TypedOperatorHandle<BackwardFn>& backward_op() { return op<BackwardFn, kBackward>(); }
const OptTensor kNoRope;  // the backward without the rotation: no cos, no sin

// addrmsnorm/autograd.py TRAINING_FORMS and training_form: the functional form of each mutating call's variant.
enum class Form { kFused, kPlain, kSandwich, kGated, kPair, kQk, kRope };
const char* training_form_words(Form f) {
    switch (f) {
        case Form::kFused: return "call addrmsnorm.fused_add_rmsnorm(x, residual, weight) without out= or residual_out=";
        case Form::kPlain: return "call addrmsnorm.rmsnorm(x, weight) without out=";
        case Form::kSandwich:
            return "call addrmsnorm.sandwich_rmsnorm(x, residual, post_weight, weight) without out= or residual_out=";
        case Form::kGated: return "call addrmsnorm.gated_rmsnorm(x, z, weight) without out=";
        case Form::kPair: return "call addrmsnorm.rmsnorm_pair(a, a_weight, b, b_weight) without out=";
        case Form::kQk: return "normalize the q and k views with addrmsnorm.rmsnorm(x, weight)";
        case Form::kRope: return "call addrmsnorm.qk_rmsnorm_rope(q, k, q_weight, k_weight, ...)";
    }
    return "";
}
Form training_form(const OptTensor& residual, const OptTensor& post_weight, const OptTensor& z, const OptTensor& b) {
    if (z.has_value()) return Form::kGated;
    if (b.has_value()) return Form::kPair;
    if (post_weight.has_value()) return Form::kSandwich;
    return residual.has_value() ? Form::kFused : Form::kPlain;
}

// addrmsnorm/autograd.py no_backward_message, word for word.
std::string no_backward_message(const char* name, const char* arg, Form form = Form::kFused) {
    const std::string head = std::string("addrmsnorm::") + name + " has no backward, but " + arg + " requires grad; ";
    const std::string_view n(name);
    if (n.find("quant") != std::string_view::npos)
        return head + "quantized outputs are for inference: call it under torch.no_grad() or torch.inference_mode()";
    return head + "call it under torch.no_grad(), or for training " + training_form_words(form);
}

// addrmsnorm/autograd.py no_double_backward_message, word for word.
constexpr char kNoDoubleBackward[] =
    "addrmsnorm::norm_backward has no backward: the gradients of fused_add_rmsnorm, rmsnorm, "
    "FusedAddRMSNorm and RMSNorm are first order only, so a gradient of a gradient "
    "(torch.autograd.grad(..., create_graph=True), then a backward through its result) cannot be taken; for "
    "higher-order gradients use the reference, addrmsnorm.fused_add_rmsnorm_ref or addrmsnorm.rmsnorm_ref, which "
    "autograd differentiates to any order";

void refuse_grad(const char* name, std::initializer_list<std::pair<const char*, const Tensor*>> args,
                 Form form = Form::kFused) {
    if (!c10::GradMode::is_enabled()) return;
    for (const auto& [arg, t] : args)
        TORCH_CHECK(!(t->defined() && t->requires_grad()), no_backward_message(name, arg, form));
}

const Tensor& or_none(const OptTensor& t) {
    static const Tensor none;
    return t.has_value() ? *t : none;
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

// The gradient of (y, residual_out) with respect to (x, residual, weight, post_weight); without a residual
// (plain), of y with respect to (x, -, weight, -), h being x. The sandwich norm (post_weight): the fused
// backward gives dh (residual's gradient), then the plain norm's backward of x with dh as its dy gives x's
// and post_weight's, as autograd.py's _sandwich_backward.
struct NormBackward final : public ag::Node {
    ag::SavedVariable h, rstd, weight;  // the fused norm's h is this node's output: saved without a cycle
    ag::SavedVariable x, post_weight;   // the sandwich norm's first norm
    bool has_weight = true;             // false: the weightless norm (no weight, no weight gradient)
    bool sandwich = false;
    double weight_offset = 0.0, post_weight_offset = 0.0;
    double x_scale = 1.0;               // h = residual + x_scale * x: dx = x_scale * dh
    c10::ScalarType x_dtype = c10::kFloat;
    bool plain = false;

    std::string name() const override {
        return plain ? "RMSNormBackward" : sandwich ? "SandwichRMSNormBackward" : "FusedAddRMSNormBackward";
    }

    void release_variables() override {
        h.reset_data();
        rstd.reset_data();
        weight.reset_data();
        x.reset_data();
        post_weight.reset_data();
    }

    ag::variable_list apply(ag::variable_list&& grads) override {
        const bool need_x = should_compute_output(0), need_res = should_compute_output(1),
                   need_w = should_compute_output(2), need_pw = sandwich && should_compute_output(3);
        if (!need_x && !need_res && !need_w && !need_pw) return {Tensor(), Tensor(), Tensor(), Tensor()};
        const Tensor h_ = plain ? h.unpack() : h.unpack(getptr()), rstd_ = rstd.unpack();
        const OptTensor weight_ = has_weight ? OptTensor(weight.unpack()) : std::nullopt;
        Tensor dy = grads[0];
        if (plain) {
            if (!dy.defined()) return {Tensor(), Tensor(), Tensor()};
            // The backward takes rows of one stride: a view of two strides (a head's rows) is copied here.
            const int64_t H = h_.size(-1);
            auto [dres, dx, dweight] = backward_op().call(dy.reshape({-1, H}).contiguous(), std::nullopt,
                                                          h_.reshape({-1, H}), rstd_.reshape({-1}), weight_,
                                                          weight_offset, need_w && has_weight, kNoRope, kNoRope, 0,
                                                          0, 0, 0.0);
            return {need_x ? dres.view(h_.sizes()) : Tensor(), Tensor(), need_w ? dweight : Tensor(), Tensor()};
        }
        if (!dy.defined())
            dy = at::zeros(h_.sizes(), h_.options().dtype(x_dtype));  // y unused: its gradient is 0
        else if (!dy.is_contiguous())
            dy = dy.contiguous();  // e.g. the expanded gradient of a sum()
        OptTensor dresidual_out;  // absent when residual_out is unused: nothing to add
        if (grads[1].defined()) dresidual_out = grads[1].is_contiguous() ? grads[1] : grads[1].contiguous();
        if (sandwich) {
            auto [dres, unused, dweight] =
                backward_op().call(dy, dresidual_out, h_, rstd_[0], weight_, weight_offset, need_w && has_weight, kNoRope,
                                   kNoRope, 0, 0, 0, 0.0);
            Tensor dx, dpost;
            if (need_x || need_pw) {
                const Tensor x_ = x.unpack();
                const int64_t H = x_.size(-1);
                auto [dxr, unused2, dpw] = backward_op().call(dres.reshape({-1, H}), std::nullopt, x_.reshape({-1, H}),
                                                              rstd_[1].reshape({-1}), OptTensor(post_weight.unpack()),
                                                              post_weight_offset, need_pw, kNoRope, kNoRope, 0, 0, 0,
                                                              0.0);
                dx = dxr.view(x_.sizes());
                dpost = dpw;
            }
            return {need_x ? dx : Tensor(), need_res ? dres : Tensor(), need_w ? dweight : Tensor(),
                    need_pw ? dpost : Tensor()};
        }
        auto [dres, dx, dweight] =
            backward_op().call(dy, dresidual_out, h_, rstd_, weight_, weight_offset, need_w && has_weight, kNoRope,
                               kNoRope, 0, 0, 0, 0.0);
        if (x_scale != 1.0)  // the scaled residual: dx = x_scale * dh, from dresidual (dh in the residual's dtype)
            dx = need_x ? at::mul(dres, x_scale).to(x_dtype) : Tensor();
        else if (x_dtype == h_.scalar_type())
            dx = dres;  // one tensor, handed back for both x and residual
        return {need_x ? dx : Tensor(), need_res ? dres : Tensor(), need_w ? dweight : Tensor(), Tensor()};
    }
};

// The gated norm's gradient with respect to (x, -, weight, z): addrmsnorm/autograd.py's gated_backward, the
// same fp32 formulas in ATen operations.
struct GatedBackward final : public ag::Node {
    ag::SavedVariable x, z, weight;
    bool has_weight = true;
    double eps = 0.0, weight_offset = 0.0;
    int64_t group_size = 0;
    bool norm_before_gate = true;

    std::string name() const override { return "GatedRMSNormBackward"; }

    void release_variables() override {
        x.reset_data();
        z.reset_data();
        weight.reset_data();
    }

    ag::variable_list apply(ag::variable_list&& grads) override {
        const bool need_x = should_compute_output(0), need_w = has_weight && should_compute_output(2),
                   need_z = should_compute_output(3);
        const Tensor& dy = grads[0];
        if (!dy.defined() || !(need_x || need_w || need_z)) return {Tensor(), Tensor(), Tensor(), Tensor()};
        const Tensor x_ = x.unpack(), z_ = z.unpack();
        const int64_t H = x_.size(-1);
        std::vector<int64_t> shape(x_.sizes().begin(), x_.sizes().end() - 1);
        shape.push_back(H / group_size);
        shape.push_back(group_size);
        const Tensor xf = x_.to(c10::kFloat), zf = z_.to(c10::kFloat), dyf = dy.to(c10::kFloat);
        const Tensor sig = at::sigmoid(zf), s = zf * sig, ds = sig * (1.0 + zf * (1.0 - sig));
        const Tensor w = (has_weight ? weight.unpack().to(c10::kFloat) : at::ones({H}, xf.options())) + weight_offset;
        const Tensor v = norm_before_gate ? xf : xf * s;
        const Tensor vg = v.view(shape);
        const Tensor rstd = at::rsqrt(vg.pow(2).mean(-1, true) + eps);
        const Tensor n = (vg * rstd).view(x_.sizes());
        const Tensor dn = norm_before_gate ? dyf * w * s : dyf * w;
        const Tensor dng = dn.view(shape), ng = n.view(shape);
        const Tensor dv = (rstd * (dng - ng * (dng * ng).mean(-1, true))).view(x_.sizes());
        Tensor dx, dz, dw;
        if (norm_before_gate) {
            dx = dv;
            dz = dyf * n * w * ds;
            dw = dyf * n * s;
        } else {
            dx = dv * s;
            dz = dv * xf * ds;
            dw = dyf * n;
        }
        return {need_x ? dx.to(x_.scalar_type()) : Tensor(), Tensor(),
                need_w ? dw.reshape({-1, H}).sum(0).to(weight.unpack().scalar_type()) : Tensor(),
                need_z ? dz.to(z_.scalar_type()) : Tensor()};
    }
};

// The backward operator: its gradients are computed as usual; where they would take part in a graph,
// they get an Error node, as torch.autograd.function.once_differentiable does.
std::tuple<Tensor, Tensor, Tensor> norm_backward_autograd(
    c10::DispatchKeySet ks, const Tensor& dy, const OptTensor& dresidual_out, const Tensor& h,
    const OptTensor& rstd, const OptTensor& weight, double weight_offset, bool weight_grad, const OptTensor& cos,
    const OptTensor& sin, int64_t rope_groups, int64_t rotary_dim, int64_t rope_style, double eps) {
    Tensor dres, dx, dweight;
    {
        at::AutoDispatchBelowADInplaceOrView below;
        std::tie(dres, dx, dweight) = backward_op().redispatch(ks & c10::after_autograd_keyset, dy, dresidual_out,
                                                               h, rstd, weight, weight_offset, weight_grad, cos, sin,
                                                               rope_groups, rotary_dim, rope_style, eps);
    }
    const bool graph = c10::GradMode::is_enabled() &&
                       (dy.requires_grad() || (dresidual_out.has_value() && dresidual_out->requires_grad()) ||
                        h.requires_grad() || or_none(rstd).requires_grad() || or_none(weight).requires_grad() ||
                        or_none(cos).requires_grad() || or_none(sin).requires_grad());
    if (graph) {
        // The Error node's edges lead to the inputs, so that every way of differentiating through these gradients
        // (.backward(), torch.autograd.grad with or without allow_unused) reaches it and raises; a node of no
        // edges would leave autograd.grad(..., allow_unused=True) a silent None.
        const NodePtr fn(make_node<ag::Error>(std::string(kNoDoubleBackward)));
        fn->set_next_edges(ag::collect_next_edges(dy, or_none(dresidual_out), h, or_none(rstd), or_none(weight),
                                                  or_none(cos), or_none(sin)));
        for (Tensor* t : {&dres, &dx, &dweight})
            if (t->defined()) ag::set_history(*t, fn);
    }
    return {dres, dx, dweight};
}

std::tuple<Tensor, Tensor, Tensor> norm_autograd(c10::DispatchKeySet ks, const Tensor& x, const OptTensor& residual,
                                                 const OptTensor& weight, double eps, double weight_offset,
                                                 bool return_rstd, int64_t numerics, bool pdl, double x_scale,
                                                 const OptTensor& post_weight, double post_weight_offset,
                                                 const OptTensor& z, int64_t group_size, bool norm_before_gate) {
    const bool plain = !residual.has_value();
    const bool grad = c10::GradMode::is_enabled() &&
                      (x.requires_grad() || or_none(weight).requires_grad() || (!plain && residual->requires_grad()) ||
                       or_none(post_weight).requires_grad() || or_none(z).requires_grad());
    if (!grad) {
        at::AutoDispatchBelowADInplaceOrView below;
        return norm_op().redispatch(ks & c10::after_autograd_keyset, x, residual, weight, eps, weight_offset,
                                    return_rstd, numerics, pdl, x_scale, post_weight, post_weight_offset, z,
                                    group_size, norm_before_gate);
    }
    if (z) {  // the gated norm (no residual: the operator refuses one, below autograd)
        Tensor y, h, rstd;
        {
            at::AutoDispatchBelowADInplaceOrView below;
            std::tie(y, h, rstd) = norm_op().redispatch(ks & c10::after_autograd_keyset, x, residual, weight, eps,
                                                        weight_offset, return_rstd, numerics, pdl, x_scale,
                                                        post_weight, post_weight_offset, z, group_size,
                                                        norm_before_gate);
        }
        auto node = make_node<GatedBackward>();
        node->set_next_edges(ag::collect_next_edges(x, or_none(residual), or_none(weight), *z));
        ag::set_history(y, NodePtr(node));
        node->x = ag::SavedVariable(x, false);
        node->z = ag::SavedVariable(*z, false);
        node->has_weight = weight.has_value();
        if (weight) node->weight = ag::SavedVariable(*weight, false);
        node->eps = eps;
        node->weight_offset = weight_offset;
        node->group_size = group_size == 0 ? x.size(-1) : group_size;
        node->norm_before_gate = norm_before_gate;
        return {y, h, rstd};
    }
    auto node = make_node<NormBackward>();
    node->set_next_edges(ag::collect_next_edges(x, or_none(residual), or_none(weight), or_none(post_weight)));
    Tensor y, h, rstd;
    {
        at::AutoDispatchBelowADInplaceOrView below;
        // rstd always: the backward needs the forward's own, not one recomputed from rounded h.
        std::tie(y, h, rstd) = norm_op().redispatch(ks & c10::after_autograd_keyset, x, residual, weight, eps,
                                                    weight_offset, true, numerics, pdl, x_scale, post_weight,
                                                    post_weight_offset, OptTensor(), 0, true);
    }
    const NodePtr fn(node);
    ag::set_history(y, fn);                // output 0
    if (!plain) ag::set_history(h, fn);    // output 1; rstd is not differentiable
    node->h = plain ? ag::SavedVariable(x, false) : ag::SavedVariable(h, /*is_output=*/true);
    node->rstd = ag::SavedVariable(rstd, false);
    node->has_weight = weight.has_value();
    if (weight) node->weight = ag::SavedVariable(*weight, false);
    node->weight_offset = weight_offset;
    node->sandwich = post_weight.has_value() && !plain;
    if (node->sandwich) {
        node->x = ag::SavedVariable(x, false);
        node->post_weight = ag::SavedVariable(*post_weight, false);
        node->post_weight_offset = post_weight_offset;
    }
    node->x_scale = x_scale;
    node->x_dtype = x.scalar_type();
    node->plain = plain;
    return {y, h, return_rstd ? rstd : at::empty({0}, rstd.options())};
}

// ----- the mutating operators ----------------------------------------------------------------------

void norm__autograd(c10::DispatchKeySet ks, const Tensor& x, const OptTensor& residual, const OptTensor& weight,
                    double eps, double weight_offset, int64_t numerics, bool pdl, double x_scale,
                    const OptTensor& post_weight, double post_weight_offset, const OptTensor& z, int64_t group_size,
                    bool norm_before_gate, const OptTensor& b, const OptTensor& b_weight) {
    const bool plain = !residual.has_value();
    refuse_grad("norm_", {{"x", &x}, {"residual", &or_none(residual)}, {"weight", &or_none(weight)},
                          {"post_weight", &or_none(post_weight)}, {"z", &or_none(z)}, {"b", &or_none(b)},
                          {"b_weight", &or_none(b_weight)}}, training_form(residual, post_weight, z, b));
    {
        at::AutoDispatchBelowADInplaceOrView below;
        op<InPlaceFn, kInPlace>().redispatch(ks & c10::after_ADInplaceOrView_keyset, x, residual, weight, eps,
                                             weight_offset, numerics, pdl, x_scale, post_weight, post_weight_offset,
                                             z, group_size, norm_before_gate, b, b_weight);
    }
    bump(x);
    if (!plain) bump(*residual);
    if (b) bump(*b);
}

void norm_into_autograd(c10::DispatchKeySet ks, const Tensor& x, const OptTensor& residual, const OptTensor& weight,
                        const Tensor& out, const OptTensor& residual_out, const OptTensor& rstd, double eps,
                        double weight_offset, int64_t numerics, bool pdl, double x_scale,
                        const OptTensor& post_weight, double post_weight_offset, const OptTensor& z,
                        int64_t group_size, bool norm_before_gate, const OptTensor& b, const OptTensor& b_weight,
                        const OptTensor& b_out) {
    refuse_grad("norm_into", {{"x", &x}, {"residual", &or_none(residual)}, {"weight", &or_none(weight)}, {"out", &out},
                              {"residual_out", &or_none(residual_out)}, {"rstd", &or_none(rstd)},
                              {"post_weight", &or_none(post_weight)}, {"z", &or_none(z)}, {"b", &or_none(b)},
                              {"b_weight", &or_none(b_weight)}, {"b_out", &or_none(b_out)}},
                training_form(residual, post_weight, z, b));
    {
        at::AutoDispatchBelowADInplaceOrView below;
        op<IntoFn, kInto>().redispatch(ks & c10::after_ADInplaceOrView_keyset, x, residual, weight, out, residual_out,
                                       rstd, eps, weight_offset, numerics, pdl, x_scale, post_weight,
                                       post_weight_offset, z, group_size, norm_before_gate, b, b_weight, b_out);
    }
    for (const Tensor* t : {&out, &or_none(residual_out), &or_none(rstd), &or_none(b_out)})
        if (t->defined()) bump(*t);
}

void qk_rmsnorm__autograd(c10::DispatchKeySet ks, const Tensor& qkv, const OptTensor& q_weight,
                          const OptTensor& k_weight, double eps, int64_t num_q_heads, int64_t num_kv_heads,
                          int64_t head_dim, double weight_offset, int64_t numerics, bool pdl,
                          const OptTensor& positions, const OptTensor& cos_sin_cache, const OptTensor& cos,
                          const OptTensor& sin, int64_t rotary_dim, int64_t rope_style, int64_t num_v_heads) {
    const bool rotated = positions.has_value() || cos_sin_cache.has_value() || cos.has_value() || sin.has_value();
    refuse_grad("qk_rmsnorm_", {{"qkv", &qkv}, {"q_weight", &or_none(q_weight)}, {"k_weight", &or_none(k_weight)}},
                rotated ? Form::kRope : Form::kQk);
    {
        at::AutoDispatchBelowADInplaceOrView below;
        op<QkFn, kQk>().redispatch(ks & c10::after_ADInplaceOrView_keyset, qkv, q_weight, k_weight, eps, num_q_heads,
                                   num_kv_heads, head_dim, weight_offset, numerics, pdl, positions, cos_sin_cache, cos,
                                   sin, rotary_dim, rope_style, num_v_heads);
    }
    bump(qkv);
}

// ----- quantized outputs: inference only -------------------------------------------------------------

std::tuple<Tensor, Tensor, OptTensor, OptTensor> norm_quant_autograd(
    c10::DispatchKeySet ks, const Tensor& x, const OptTensor& residual, const OptTensor& weight, double eps,
    c10::ScalarType quant_dtype, const OptTensor& scale, int64_t group_size, const OptTensor& scale_ub,
    bool column_major_scales, bool ue8m0_scales, double weight_offset, bool return_y, bool pdl, bool swizzled_scales,
    double x_scale, const OptTensor& post_weight, double post_weight_offset, const OptTensor& z,
    int64_t gate_group_size, bool norm_before_gate) {
    refuse_grad("norm_quant", {{"x", &x}, {"residual", &or_none(residual)}, {"weight", &or_none(weight)},
                               {"post_weight", &or_none(post_weight)}, {"z", &or_none(z)}});
    at::AutoDispatchBelowADInplaceOrView below;
    return op<QuantFn, kQuant>().redispatch(ks & c10::after_autograd_keyset, x, residual, weight, eps, quant_dtype,
                                            scale, group_size, scale_ub, column_major_scales, ue8m0_scales,
                                            weight_offset, return_y, pdl, swizzled_scales, x_scale, post_weight,
                                            post_weight_offset, z, gate_group_size, norm_before_gate);
}

void norm_quant_into_autograd(c10::DispatchKeySet ks, const Tensor& x, const OptTensor& residual,
                              const OptTensor& weight, const Tensor& out, const OptTensor& residual_out,
                              const OptTensor& scales_out, const OptTensor& y, double eps, const OptTensor& scale,
                              int64_t group_size, const OptTensor& scale_ub, bool ue8m0_scales, double weight_offset,
                              bool pdl, bool swizzled_scales, double x_scale, const OptTensor& post_weight,
                              double post_weight_offset, const OptTensor& z, int64_t gate_group_size,
                              bool norm_before_gate) {
    refuse_grad("norm_quant_into", {{"x", &x}, {"residual", &or_none(residual)}, {"weight", &or_none(weight)}, {"out", &out},
                                    {"residual_out", &or_none(residual_out)}, {"scales_out", &or_none(scales_out)},
                                    {"y", &or_none(y)}, {"post_weight", &or_none(post_weight)}, {"z", &or_none(z)}});
    {
        at::AutoDispatchBelowADInplaceOrView below;
        op<QuantIntoFn, kQuantInto>().redispatch(ks & c10::after_ADInplaceOrView_keyset, x, residual, weight, out,
                                                 residual_out, scales_out, y, eps, scale, group_size, scale_ub,
                                                 ue8m0_scales, weight_offset, pdl, swizzled_scales, x_scale,
                                                 post_weight, post_weight_offset, z, gate_group_size, norm_before_gate);
    }
    for (const Tensor* t : {&out, &or_none(residual_out), &or_none(scales_out), &or_none(y)})
        if (t->defined()) bump(*t);
}

}  // namespace

TORCH_LIBRARY_IMPL(addrmsnorm, Autograd, m) {
    m.impl("norm", &norm_autograd);
    m.impl("norm_", &norm__autograd);
    m.impl("norm_into", &norm_into_autograd);
    m.impl("norm_backward", &norm_backward_autograd);
    m.impl("norm_quant", &norm_quant_autograd);
    m.impl("norm_quant_into", &norm_quant_into_autograd);
    m.impl("qk_rmsnorm_", &qk_rmsnorm__autograd);
}
