# The eager cost of the two operator schemas alone, on this CPU: no-op C++ kernels with the schemas of
# fused_add_rmsnorm_ and fused_add_rmsnorm_quant_into, called from Python as bench/quant.py calls them.
# (Session 13, on the development machine: no GPU.)
import time, statistics, torch
from torch.utils.cpp_extension import load_inline
lib = torch.library.Library("schemaexp", "DEF")
lib.define("plain_(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps, float weight_offset=0., bool hf=False, bool pdl=False) -> ()")
lib.define("quant_into(Tensor x, Tensor residual, Tensor weight, Tensor(a!) out, Tensor(b!) residual_out, Tensor(c!)? scales_out, Tensor(d!)? y, float eps, Tensor? scale=None, int group_size=0, Tensor? scale_ub=None, bool ue8m0_scales=False, float weight_offset=0., bool pdl=False) -> ()")
src = r'''
#include <torch/library.h>
void plain_(const at::Tensor& x, const at::Tensor& r, const at::Tensor& w, double eps, double wo, bool hf, bool pdl) {}
void quant_into(const at::Tensor& x, const at::Tensor& r, const at::Tensor& w, const at::Tensor& out, const at::Tensor& ro,
  const std::optional<at::Tensor>& s, const std::optional<at::Tensor>& y, double eps, const std::optional<at::Tensor>& scale,
  int64_t gs, const std::optional<at::Tensor>& ub, bool ue8m0, double wo, bool pdl) {}
TORCH_LIBRARY_IMPL(schemaexp, CPU, m) { m.impl("plain_", &plain_); m.impl("quant_into", &quant_into); }
TORCH_LIBRARY_IMPL(schemaexp, Autograd, m) { m.impl("plain_", torch::CppFunction::makeFallthrough()); m.impl("quant_into", torch::CppFunction::makeFallthrough()); }
'''
load_inline("schemaexp_impl", cpp_sources=[src], is_python_module=False, verbose=False)
x = torch.randn(1, 4096); r = torch.randn(1, 4096); w = torch.ones(4096); q = torch.empty(1, 4096, dtype=torch.int8)
scale = torch.tensor([0.01]); s = torch.empty(1)
ops = torch.ops.schemaexp
calls = {"plain_": lambda: ops.plain_.default(x, r, w, 1e-6),
         "quant_into static": lambda: ops.quant_into.default(x, r, w, q, r, None, None, 1e-6, scale),
         "quant_into per token": lambda: ops.quant_into.default(x, r, w, q, r, s, None, 1e-6)}
res = {k: [] for k in calls}
for rnd in range(7):
    for k, f in calls.items():
        for _ in range(200): f()
        t = time.perf_counter()
        for _ in range(5000): f()
        res[k].append((time.perf_counter() - t) / 5000 * 1e6)
for k, v in res.items(): print(f"{k}: {statistics.median(v):.2f} us")
