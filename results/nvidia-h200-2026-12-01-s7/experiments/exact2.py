"""Experiment 2: (a) decode-chain latency of the unrolled re-read against the table's single pass;
(b) a [NCH, BLOCK] tile form of it, with HOLD (pass 2 reuses the loaded tile) and RELOAD (pass 2 loads
it again): the same arithmetic, so the same bits; (c) bulk of the tile form."""
import torch, triton, triton.language as tl
from addrmsnorm.bench.byte_model import forward_bytes
from addrmsnorm.bench.timing import measure_roofline, sets_for_cold_l2, time_graph
from addrmsnorm.configs import select_forward_config, ForwardConfig
from addrmsnorm.launcher import launch_forward
from addrmsnorm.reference import fused_add_rmsnorm_ref
import importlib.util, sys
sys.path.insert(0, ".devrun")
from exact import rr_static


@triton.jit(do_not_specialize=["H", "stride"])
def rr_tile(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, H, stride, eps,
            BLOCK: tl.constexpr, NCH: tl.constexpr, ALIGN: tl.constexpr, HOLD: tl.constexpr):
    H = (H // ALIGN) * ALIGN
    stride = (stride // ALIGN) * ALIGN
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, NCH)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    m = cols < H
    x = tl.load(x_ptr + row * stride + cols, mask=m, other=0.0, eviction_policy="evict_last")
    r = tl.load(r_ptr + row * stride + cols, mask=m, other=0.0, eviction_policy="evict_last")
    h = x.to(tl.float32) + r.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(tl.sum(h * h, axis=0), axis=0) / H + eps)
    if not HOLD:
        x = tl.load(x_ptr + row * stride + cols, mask=m, other=0.0, eviction_policy="evict_first")
        r = tl.load(r_ptr + row * stride + cols, mask=m, other=0.0, eviction_policy="evict_first")
        h = x.to(tl.float32) + r.to(tl.float32)
    tl.store(h_ptr + row * stride + cols, h.to(h_ptr.dtype.element_ty), mask=m)
    w = tl.load(w_ptr + cols, mask=m, other=0.0, eviction_policy="evict_last").to(tl.float32)
    tl.store(y_ptr + row * stride + cols, (h * rstd * w).to(y_ptr.dtype.element_ty), mask=m)


def main():
    print("| what | shape | kernel | µs | GB/s | % |\n|---|---|---|---|---|---|")
    # (a) decode chain, 64 dependent in-place calls, no PDL anywhere
    for H, cands in ((4096, [("static", 4096, 1, 16), ("static", 2048, 2, 16), ("static", 2048, 2, 8), ("tile", 4096, 1, 16), ("tile", 2048, 2, 8)]),
                     (8192, [("static", 4096, 2, 16), ("static", 2048, 4, 16), ("tile", 4096, 2, 16), ("tile", 8192, 1, 16)])):
        for N in (1, 8, 64):
            gen = torch.Generator(device="cuda").manual_seed(N + H)
            x = torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)
            r = torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)
            w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(torch.bfloat16)
            cfg = select_forward_config(H, 2, 2)
            ks = {"table": lambda: launch_forward(x, r, w, x, r, None, n_rows=N, H=H, stride_x=H, stride_residual=H,
                                                  stride_out=H, stride_residual_out=H, eps=1e-6, weight_offset=0.0,
                                                  pdl=False, config=cfg)}
            for kind, b, n, wp in cands:
                if kind == "static":
                    ks[f"rr-static b{b} x{n} w{wp}"] = lambda b=b, n=n, wp=wp: rr_static[(N,)](x, r, w, x, r, H, H, 1e-6, BLOCK=b, NCH=n, ALIGN=8, HINTS=True, num_warps=wp)
                else:
                    for hold in (False, True):
                        ks[f"rr-tile b{b} x{n} w{wp} {'hold' if hold else 'reload'}"] = lambda b=b, n=n, wp=wp, hold=hold: rr_tile[(N,)](x, r, w, x, r, H, H, 1e-6, BLOCK=b, NCH=n, ALIGN=8, HOLD=hold, num_warps=wp)
            for name, fn in ks.items():
                def body(_, fn=fn):
                    for _ in range(64):
                        fn()
                t = time_graph(body, 1)
                print(f"| decode | {N}x{H} | {name} | {t.median_us / 64:.3f} | | |", flush=True)
    # (b) bits: hold against reload, and a row alone against the batch
    for H, b, n, wp in ((4096, 4096, 1, 16), (4096, 2048, 2, 8), (8192, 4096, 2, 16), (7168, 4096, 2, 16), (5120, 4096, 2, 16), (8192, 8192, 1, 16)):
        N = 333
        gen = torch.Generator(device="cuda").manual_seed(H)
        x = torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)
        r = (4 * torch.randn(N, H, device="cuda", generator=gen)).to(torch.bfloat16)
        w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(torch.bfloat16)
        outs = {}
        for hold in (False, True):
            y, h = torch.empty_like(x), torch.empty_like(r)
            rr_tile[(N,)](x, r, w, y, h, H, H, 1e-6, BLOCK=b, NCH=n, ALIGN=8, HOLD=hold, num_warps=wp)
            y1, h1 = torch.empty_like(x[:1]), torch.empty_like(r[:1])
            rr_tile[(1,)](x[7:8], r[7:8], w, y1, h1, H, H, 1e-6, BLOCK=b, NCH=n, ALIGN=8, HOLD=hold, num_warps=wp)
            outs[hold] = (y, h, y1, h1)
        torch.cuda.synchronize()
        ref = fused_add_rmsnorm_ref(x, r, w, 1e-6)
        same = torch.equal(outs[False][0], outs[True][0]) and torch.equal(outs[False][1], outs[True][1])
        alone = all(torch.equal(outs[k][2], outs[k][0][7:8]) for k in (False, True))
        err = (outs[False][0].float() - ref.y.float()).abs().max().item()
        print(f"| bits | {N}x{H} | tile b{b} x{n} w{wp} | hold==reload {same} | row alone==batch {alone} | max err {err:.3g} |", flush=True)
    # (c) bulk, into fresh outputs
    roof = measure_roofline()
    for N, H, cands in ((16384, 4096, [("tile", 4096, 1, 16), ("tile", 2048, 2, 8), ("static", 2048, 2, 16)]),
                        (16384, 8192, [("tile", 4096, 2, 16), ("tile", 8192, 1, 16), ("static", 4096, 2, 16)]),
                        (16384, 7168, [("tile", 4096, 2, 16), ("static", 4096, 2, 16)])):
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
        for kind, b, n, wp in cands:
            if kind == "static":
                ks[f"rr-static b{b} x{n} w{wp}"] = lambda i, b=b, n=n, wp=wp: rr_static[(N,)](sets[i][0], sets[i][1], w, outs[i][0], outs[i][1], H, H, 1e-6, BLOCK=b, NCH=n, ALIGN=8, HINTS=True, num_warps=wp)
            else:
                for hold in (False, True):
                    ks[f"rr-tile b{b} x{n} w{wp} {'hold' if hold else 'reload'}"] = lambda i, b=b, n=n, wp=wp, hold=hold: rr_tile[(N,)](sets[i][0], sets[i][1], w, outs[i][0], outs[i][1], H, H, 1e-6, BLOCK=b, NCH=n, ALIGN=8, HOLD=hold, num_warps=wp)
        for rnd in range(2):
            for name, fn in ks.items():
                t = time_graph(fn, n_sets)
                gbs = nbytes / t.median_us / 1e3
                print(f"| bulk r{rnd} | {N}x{H} | {name} | {t.median_us:.2f} | {gbs:.0f} | {100 * gbs / roof.gbs:.1f}% |", flush=True)
        del sets, outs
        torch.cuda.empty_cache()


main()
