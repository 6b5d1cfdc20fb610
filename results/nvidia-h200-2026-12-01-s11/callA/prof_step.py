# One training step (forward + autograd.grad, as bench/backward.py times it) under torch.profiler:
# the CUDA kernels and their times, for addrmsnorm and torch.compile.
import sys, torch
import addrmsnorm
from addrmsnorm.bench.impls import CompiledReference
from torch.profiler import profile, ProfilerActivity
EPS = 1e-6
comp = CompiledReference()
impls = {"addrmsnorm": lambda x, r, w: addrmsnorm.fused_add_rmsnorm(x, r, w, EPS),
         "torch.compile": lambda x, r, w: comp(x, r, w, EPS)}
for N, H in ((16384, 4096), (4096, 14336), (16384, 1024)):
    x = torch.randn(N, H, device="cuda").to(torch.bfloat16).requires_grad_()
    r = torch.randn(N, H, device="cuda").to(torch.bfloat16).requires_grad_()
    w = (1 + 0.1 * torch.randn(H, device="cuda")).to(torch.bfloat16).requires_grad_()
    dy = torch.randn(N, H, device="cuda").to(torch.bfloat16); dro = torch.randn_like(dy)
    for name, f in impls.items():
        def step():
            y, h = f(x, r, w)[:2]
            torch.autograd.grad([y, h], [x, r, w], [dy, dro])
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        print(f"== {name} {N}x{H}, 5 steps")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=70))
