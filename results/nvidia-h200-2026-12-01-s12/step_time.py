# Session 12: the training step (forward + autograd.grad, as bench/backward.py times it), addrmsnorm only, in a CUDA
# graph; and a digest of the gradients' bits. Run through run_copy.py with ADDRMSNORM_BACKEND=triton.
import hashlib, sys, torch
import addrmsnorm
from addrmsnorm.bench.timing import time_graph
EPS = 1e-6
side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for N, H in ((16384, 4096), (16384, 1024), (4096, 14336)):
        gen = torch.Generator().manual_seed(N + H)
        x = torch.randn(N, H, generator=gen).to(torch.bfloat16).cuda().requires_grad_()
        r = (4 * torch.randn(N, H, generator=gen)).to(torch.bfloat16).cuda().requires_grad_()
        w = (1 + 0.1 * torch.randn(H, generator=gen)).to(torch.bfloat16).cuda().requires_grad_()
        dy = torch.randn(N, H, generator=gen).to(torch.bfloat16).cuda()
        dro = torch.randn(N, H, generator=gen).to(torch.bfloat16).cuda()
        def step():
            yy, hh = addrmsnorm.fused_add_rmsnorm(x, r, w, EPS)
            return torch.autograd.grad([yy, hh], [x, r, w], [dy, dro])
        g = step()
        dig = hashlib.sha1(b"".join(t.view(torch.int16).cpu().numpy().tobytes() for t in g)).hexdigest()[:10]
        ts = [time_graph(lambda _: step(), 1, replays=5, min_calls=20).median_us for _ in range(3)]
        print(f"{N}x{H} step us {' '.join(f'{t:.2f}' for t in ts)} grads {dig}", flush=True)
