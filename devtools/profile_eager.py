"""Where the CPU time of one eager JIT call goes: cProfile over 1,000 calls at N=1, H=4096, bf16.

    PYTHONPATH=. python devtools/profile_eager.py
"""

import cProfile
import pstats
import time

import torch

import addrmsnorm

x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
r = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
for _ in range(100):
    addrmsnorm.fused_add_rmsnorm_(x, r, w)
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(1000):
    addrmsnorm.fused_add_rmsnorm_(x, r, w)
torch.cuda.synchronize()
print(f"eager JIT call: {(time.perf_counter() - t0) * 1e3:.1f} µs per call (1,000 calls, one sync)")
prof = cProfile.Profile()
prof.enable()
for _ in range(1000):
    addrmsnorm.fused_add_rmsnorm_(x, r, w)
prof.disable()
torch.cuda.synchronize()
pstats.Stats(prof).sort_stats("tottime").print_stats(12)
