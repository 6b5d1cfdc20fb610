"""Training rows of the report: backward alone, and forward + backward, in GB/s against the
same-run roofline, beside torch eager, torch.compile and Liger-Kernel.

Byte model of the backward (bytes the kernel must move at the least, per call):

    read   dy (x's dtype) + h (residual's) + dresidual_out (residual's)     per element
    write  dresidual (residual's), and dx (x's) when the dtypes differ     per element
    plus   rstd (4 bytes per row) and the weight (once); dweight is H elements.

The dweight partials (programs x H fp32, written once and read once) are not counted: they are the
price of a deterministic reduction, and show up as a lower share of the roofline. Forward + backward
adds the forward's model (read x and residual, write y and residual_out).

Timing: 20 calls captured in one CUDA graph after 3 warm-up calls, the graph replayed 5 times and
the median replay divided by 20, so that no row measures the CPU (eager autograd and a JIT launch
cost more CPU time than a 16384 x 1024 step takes on the GPU). An implementation whose step cannot
be captured is timed eagerly, with CUDA events around 20 calls, and its row says so. Every tensor
is larger than the L2 (at 16384 x 1024 the five of a step are 160 MB together), so the caches stay
cold by size.
"""

from __future__ import annotations

import torch

import addrmsnorm
from addrmsnorm.reference import GRAD_TOLERANCES_BY_DTYPE, fused_add_rmsnorm_grads_ref

from .cells import cell as _cell
from .impls import CompiledReference, contract_torch
from .timing import time_graph

SHAPES = [(16384, 4096), (4096, 14336), (16384, 1024)]
EPS = 1e-6


def backward_bytes(N: int, H: int, xs: int, rs: int, ws: int) -> int:
    separate = xs != rs
    return N * H * (xs + 2 * rs + rs + (xs if separate else 0)) + 4 * N + 2 * H * ws


def forward_bytes(N: int, H: int, xs: int, rs: int, ws: int) -> int:
    return N * H * 2 * (xs + rs) + H * ws


def _impls():
    out = {"addrmsnorm": lambda x, r, w: addrmsnorm.fused_add_rmsnorm(x, r, w, EPS),
           "PyTorch eager (contract)": lambda x, r, w: contract_torch(x, r, w, EPS)}
    compiled = CompiledReference()
    out["torch.compile (reference)"] = lambda x, r, w: compiled(x, r, w, EPS)
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

        out["Liger-Kernel"] = lambda x, r, w: LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama")
    except Exception:  # noqa: BLE001 - not installed
        pass
    return out


def _time_eager(fn, iters: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / iters


def _time(fn, iters: int = 20, replays: int = 5) -> tuple[float, str]:
    """(µs per call, how it was timed): timing.time_graph over iters calls, else eager, and the row
    says so."""
    try:
        t = time_graph(lambda _: fn(), 1, replays=replays, min_calls=iters)
        return t.median_us, "CUDA graph"
    except Exception as e:  # noqa: BLE001 - a step that cannot be captured is timed eagerly
        torch.cuda.synchronize()
        return _time_eager(fn, iters), f"eager (not capturable: {type(e).__name__}: {str(e)[:120]})"


def run(roofline_gbs: float, log=print, shapes=SHAPES) -> list[dict]:
    # Everything on a side stream. The backward timed alone runs, as autograd runs it, on the stream
    # of the forward that built its graph, and a capture can take in a side stream's work (through
    # the events autograd records) but never the legacy default stream's: with the forward there,
    # every capture of the run's first shape failed on the H200 (cudaErrorStreamCaptureInvalidated),
    # and torch.cuda.graph left its dead capture stream current, on which the later shapes ran.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        rows = _run(roofline_gbs, log, shapes)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    return rows


def _run(roofline_gbs: float, log, shapes) -> list[dict]:
    rows = []
    for N, H in shapes:
        gen = torch.Generator().manual_seed(N + H)
        x = torch.randn(N, H, generator=gen).to(torch.bfloat16).cuda().requires_grad_()
        r = (4 * torch.randn(N, H, generator=gen)).to(torch.bfloat16).cuda().requires_grad_()
        w = (1 + 0.1 * torch.randn(H, generator=gen)).to(torch.bfloat16).cuda().requires_grad_()
        dy = torch.randn(N, H, generator=gen).to(torch.bfloat16).cuda()
        dro = torch.randn(N, H, generator=gen).to(torch.bfloat16).cuda()
        ref = fused_add_rmsnorm_grads_ref(x, r, w, EPS, 0.0, dy, dro)
        tol = GRAD_TOLERANCES_BY_DTYPE[torch.bfloat16].rtol
        b_bwd = backward_bytes(N, H, 2, 2, 2)
        b_fwd = forward_bytes(N, H, 2, 2, 2)
        for name, f in _impls().items():
            base = dict(section="backward", impl=name, N=N, H=H, x_dtype="bf16", residual_dtype="bf16")
            try:
                y, h = f(x, r, w)
                grads = torch.autograd.grad([y, h], [x, r, w], [dy, dro], retain_graph=True)
                err = max(((g.double() - e).abs().max() / e.abs().max()).item() for g, e in zip(grads, ref))
                us_bwd, how_bwd = _time(lambda: torch.autograd.grad([y, h], [x, r, w], [dy, dro], retain_graph=True))

                def step():
                    yy, hh = f(x, r, w)
                    torch.autograd.grad([yy, hh], [x, r, w], [dy, dro])
                us_both, how_both = _time(step)
            except Exception as e:  # noqa: BLE001 - a failing peer is reported, not fatal
                rows.append(dict(base, mode="bwd", note=f"failed: {type(e).__name__}: {str(e)[:80]}"))
                continue
            for mode, us, nbytes, how in (("bwd", us_bwd, b_bwd, how_bwd), ("fwd+bwd", us_both, b_bwd + b_fwd, how_both)):
                gbs = nbytes / us / 1e3
                rows.append(dict(base, mode=mode, us_median=us, gbs=gbs, pct_roofline=100 * gbs / roofline_gbs,
                                 err_over_tol=err / tol, note="" if how == "CUDA graph" else how))
            log(f"backward {N}x{H} {name}: bwd {us_bwd:.1f} us ({how_bwd}), fwd+bwd {us_both:.1f} us ({how_both})")
    return rows


def table(rows: list[dict]) -> str:
    """One line per (shape, pass); GB/s · % of roofline · µs per implementation (✗: gradients out
    of tolerance)."""
    sel = [r for r in rows if r["section"] == "backward"]
    if not sel:
        return ""
    names = list(dict.fromkeys(r["impl"] for r in sel))
    keys = list(dict.fromkeys((r["N"], r["H"], r.get("mode", "bwd")) for r in sel))
    by = {(r["N"], r["H"], r.get("mode", "bwd"), r["impl"]): r for r in sel}
    out = ["| N × H (bf16) | pass | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for k in keys:
        cells = []
        for n in names:
            r = by.get((*k, n))
            cells.append(_cell(r) + (" ✗" if r and (r.get("err_over_tol") or 0) > 1 else ""))
        out.append(f"| {k[0]} × {k[1]} | {k[2]} | " + " | ".join(cells) + " |")
    return "\n".join(out)
