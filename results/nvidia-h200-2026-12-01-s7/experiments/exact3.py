"""Experiment 3: which of rr_tile HOLD's differences from the table's single pass make it fast:
warps, evict_last on x and residual, the weight first, residual_out stored before the reduction."""
import torch, triton, triton.language as tl
from addrmsnorm.bench.byte_model import forward_bytes
from addrmsnorm.bench.timing import measure_roofline, sets_for_cold_l2, time_graph
from addrmsnorm.configs import select_forward_config
from addrmsnorm.launcher import launch_forward


@triton.jit(do_not_specialize=["H", "stride"])
def sp(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, H, stride, eps,
       BLOCK: tl.constexpr, NCH: tl.constexpr, ALIGN: tl.constexpr, HINT: tl.constexpr, WF: tl.constexpr,
       EARLY: tl.constexpr):
    H = (H // ALIGN) * ALIGN
    stride = (stride // ALIGN) * ALIGN
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, NCH)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    m = cols < H
    if WF:
        w_raw = tl.load(w_ptr + cols, mask=m, other=0.0)
    if HINT:
        x = tl.load(x_ptr + row * stride + cols, mask=m, other=0.0, eviction_policy="evict_last")
        r = tl.load(r_ptr + row * stride + cols, mask=m, other=0.0, eviction_policy="evict_last")
    else:
        x = tl.load(x_ptr + row * stride + cols, mask=m, other=0.0)
        r = tl.load(r_ptr + row * stride + cols, mask=m, other=0.0)
    h = x.to(tl.float32) + r.to(tl.float32)
    if EARLY:
        tl.store(h_ptr + row * stride + cols, h.to(h_ptr.dtype.element_ty), mask=m)
    rstd = 1.0 / tl.sqrt(tl.sum(tl.sum(h * h, axis=0), axis=0) / H + eps)
    if not EARLY:
        tl.store(h_ptr + row * stride + cols, h.to(h_ptr.dtype.element_ty), mask=m)
    if not WF:
        w_raw = tl.load(w_ptr + cols, mask=m, other=0.0, eviction_policy="evict_last")
    w = w_raw.to(tl.float32)
    tl.store(y_ptr + row * stride + cols, (h * rstd * w).to(y_ptr.dtype.element_ty), mask=m)


def variants(H):
    out = []
    shapes = ((H, 1, 8), (H, 1, 16)) if H == 4096 else ((H, 1, 16), (H // 2, 2, 16))
    for block, nch, warps in shapes:
        for hint in (0, 1):
            for wf in (0, 1):
                out.append((block, nch, warps, hint, wf, 1))
    out.append((H, 1, 16, 1, 0, 0))
    out.append((H, 1, 16, 1, 1, 0))
    return out


def main():
    print("| what | shape | kernel | µs | GB/s | % |\n|---|---|---|---|---|---|")
    roof = measure_roofline()
    for H in (4096, 8192):
        for N in (1, 64):
            gen = torch.Generator(device="cuda").manual_seed(N + H)
            x = torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)
            r = torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)
            w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(torch.bfloat16)
            cfg = select_forward_config(H, 2, 2)
            ks = {"table": lambda: launch_forward(x, r, w, x, r, None, n_rows=N, H=H, stride_x=H, stride_residual=H,
                                                  stride_out=H, stride_residual_out=H, eps=1e-6, weight_offset=0.0,
                                                  pdl=False, config=cfg)}
            for v in variants(H):
                b, n, wp, hint, wf, early = v
                ks[f"b{b}x{n} w{wp} hint{hint} wf{wf} early{early}"] = lambda b=b, n=n, wp=wp, hint=hint, wf=wf, early=early: sp[(N,)](
                    x, r, w, x, r, H, H, 1e-6, BLOCK=b, NCH=n, ALIGN=8, HINT=hint, WF=wf, EARLY=early, num_warps=wp)
            for name, fn in ks.items():
                def body(_, fn=fn):
                    for _ in range(64):
                        fn()
                t = time_graph(body, 1)
                print(f"| decode | {N}x{H} | {name} | {t.median_us / 64:.3f} | | |", flush=True)
        N = 16384
        nbytes = forward_bytes(N, H, 2, 2, 2)
        gen = torch.Generator(device="cuda").manual_seed(H)
        n_sets = sets_for_cold_l2(nbytes)
        sets = [(torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16),
                 torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)) for _ in range(n_sets)]
        outs = [(torch.empty_like(x), torch.empty_like(r)) for x, r in sets]
        w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(torch.bfloat16)
        cfg = select_forward_config(H, 2, 2)
        ks = {"table": lambda i: launch_forward(sets[i][0], sets[i][1], w, outs[i][0], outs[i][1], None, n_rows=N, H=H,
                                             stride_x=H, stride_residual=H, stride_out=H, stride_residual_out=H,
                                             eps=1e-6, weight_offset=0.0, pdl=False, config=cfg)}
        for v in variants(H):
            b, n, wp, hint, wf, early = v
            ks[f"b{b}x{n} w{wp} hint{hint} wf{wf} early{early}"] = lambda i, b=b, n=n, wp=wp, hint=hint, wf=wf, early=early: sp[(N,)](
                sets[i][0], sets[i][1], w, outs[i][0], outs[i][1], H, H, 1e-6, BLOCK=b, NCH=n, ALIGN=8, HINT=hint, WF=wf,
                EARLY=early, num_warps=wp)
        for rnd in range(2):
            for name, fn in ks.items():
                t = time_graph(fn, n_sets)
                gbs = nbytes / t.median_us / 1e3
                print(f"| bulk r{rnd} | {N}x{H} | {name} | {t.median_us:.2f} | {gbs:.0f} | {100 * gbs / roof.gbs:.1f}% |", flush=True)
        del sets, outs
        torch.cuda.empty_cache()


main()
