# Eager CPU cost per call at 1 x 4096 bf16, the implementations interleaved round by round (min and median over rounds).
import time, statistics, torch, addrmsnorm
ops = torch.ops.addrmsnorm
gen = torch.Generator(device="cuda").manual_seed(7)
N, H, EPS = 1, 4096, 1e-6
x = torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)
r = torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)
w = torch.ones(H, device="cuda", dtype=torch.bfloat16)
q = torch.empty(N, H, dtype=torch.float8_e4m3fn, device="cuda")
s = torch.empty(N, dtype=torch.float32, device="cuda")
scale = torch.tensor([0.01], device="cuda")
fp8 = torch.float8_e4m3fn
calls = {
    "plain in-place op": lambda: ops.fused_add_rmsnorm_.default(x, r, w, EPS),
    "plain into op (out=x, residual_out=r)": lambda: ops.fused_add_rmsnorm_into.default(x, r, w, x, r, None, EPS),
    "plain functional op": lambda: ops.fused_add_rmsnorm.default(x, r, w, EPS),
    "quant into op, static fp8": lambda: ops.fused_add_rmsnorm_quant_into.default(x, r, w, q, r, None, None, EPS, scale),
    "quant into op, per-token fp8": lambda: ops.fused_add_rmsnorm_quant_into.default(x, r, w, q, r, s, None, EPS),
    "quant allocating op, static fp8": lambda: ops.fused_add_rmsnorm_quant.default(x, r, w, EPS, fp8, scale),
    "quant allocating op, per-token fp8": lambda: ops.fused_add_rmsnorm_quant.default(x, r, w, EPS, fp8),
    "Python API fused_add_rmsnorm_quant_, static": lambda: addrmsnorm.fused_add_rmsnorm_quant_(x, r, w, EPS, out=q, scale=scale),
    "aten add_ (reference)": lambda: torch.ops.aten.add_.Tensor(q.view(torch.uint8), 0),
}
res = {k: [] for k in calls}
for c in calls.values():
    for _ in range(100):
        c()
torch.cuda.synchronize()
n = 300
for rnd in range(25):
    for k, c in calls.items():
        t0 = time.perf_counter()
        for _ in range(n):
            c()
        torch.cuda.synchronize()
        res[k].append((time.perf_counter() - t0) * 1e6 / n)
base = min(res["plain in-place op"])
for k, v in res.items():
    print(f"{k:48s} min {min(v):6.2f} median {statistics.median(v):6.2f} us  min/plain-min {min(v) / base:5.2f}")
from torch.profiler import profile, ProfilerActivity
for k in ("plain in-place op", "quant into op, static fp8", "quant allocating op, static fp8"):
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(200):
            calls[k]()
        torch.cuda.synchronize()
    print("==", k)
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))
