# One launch each at 16384 x 11111 bf16 (odd H, the re-read path): addrmsnorm in place, into given outputs, and
# torch.compile's kernel, for ncu (an experiment; not committed).
import torch, addrmsnorm
from addrmsnorm.bench.impls import CompiledReference
N, H = 16384, 11111
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(N, H, device="cuda", generator=g).to(torch.bfloat16)
r = torch.randn(N, H, device="cuda", generator=g).to(torch.bfloat16)
w = (1 + 0.1 * torch.randn(H, device="cuda", generator=g)).to(torch.bfloat16)
out, ro = torch.empty_like(x), torch.empty_like(r)
comp = CompiledReference()
comp(x, r, w, 1e-6)
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("measure")
addrmsnorm.fused_add_rmsnorm_(x, r, w, 1e-6)            # in place
addrmsnorm.fused_add_rmsnorm(x, r, w, 1e-6, out=out, residual_out=ro)  # into given outputs
comp(x, r, w, 1e-6)
torch.cuda.synchronize()
print("done", addrmsnorm.backend())
