"""Quantized-output rows of the report: fused add + RMSNorm + fp8/int8 quantization, in GB/s against the
same-run roofline, beside torch.compile of the same math and the peers' fused kernels where importable.

Byte model (bytes the kernel must move at the least, per call; bf16 x and residual here):

    read   x + residual                       2 * 2 bytes per element
    write  residual_out (h) + q               2 + 1 bytes per element
    plus   the weight (once), the static scale (4 bytes), and the dynamic scales written:
           4 bytes per row (per token) or per row and group (per group).

So 7 bytes per element, against the plain forward's 8. return_y (not timed here) adds 2.

Timing: CUDA-graph replay over rotating buffer sets, inputs and outputs alike (every call writes
fresh addresses, and the L2 is cold by size; timing.py). The decode chain is static fp8 at 1 x 4096,
CHAIN dependent calls (each call's h is the next call's residual) in one graph.
"""

from __future__ import annotations

import torch

import addrmsnorm
from addrmsnorm.reference import QUANT_QMAX, fused_add_rmsnorm_ref, quantize_ref

from .timing import sets_for_cold_l2, time_graph

SHAPES = [(16384, 2048), (16384, 4096), (16384, 8192), (8192, 14336), (2048, 4096)]
DECODE_SHAPES = [(1, 4096), (1, 8192)]
CHAIN = 64
EPS = 1e-6
MODES = {  # name: (quant dtype, Python API keywords); scale is filled in per call
    "static fp8": (torch.float8_e4m3fn, {"scale": True}),
    "per-token fp8": (torch.float8_e4m3fn, {}),
    "per-token int8": (torch.int8, {}),
    "per-group 128 fp8, column-major UE8M0": (torch.float8_e4m3fn,
                                              {"group_size": 128, "column_major_scales": True, "ue8m0_scales": True}),
}


def quant_bytes(N: int, H: int, mode: str, xs: int = 2) -> int:
    kw = MODES[mode][1]
    scales = 4 if "scale" in kw else 4 * N * (H // kw["group_size"] if "group_size" in kw else 1)
    return N * H * (3 * xs + 1) + H * xs + scales


def _ours(mode):
    qd, kw = MODES[mode]

    def make(x, r, w, scale):
        q = torch.empty(x.shape, dtype=qd, device=x.device)
        h = torch.empty_like(r)
        args = dict(kw)
        if "scale" in args:
            args["scale"] = scale
        return lambda: addrmsnorm.fused_add_rmsnorm_quant(x, r, w, EPS, quant_dtype=qd, out=q, residual_out=h, **args)
    return make


class _Compiled:
    """torch.compile of the same math (the contract's fp32 y, then the mode's quantization)."""

    def __init__(self, mode):
        self.qd, self.kw = MODES[mode]
        qmax = QUANT_QMAX[self.qd]
        gs = self.kw.get("group_size")
        qd = self.qd

        def f(x, r, w, scale):
            h = x.float() + r.float()
            y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * w.float()
            if scale is not None:
                v = y * (1.0 / scale)
                s = scale
            else:
                g = y if gs is None else y.unflatten(-1, (-1, gs))
                amax = g.abs().amax(-1, keepdim=True)
                s = amax.clamp_min(1e-10) / qmax
                v = (g * (1.0 / s)).flatten(-2) if gs is not None else g * (1.0 / s)
            if qd == torch.int8:
                q = v.round().clamp(-128, 127).to(torch.int8)
            else:
                q = v.clamp(-qmax, qmax).to(qd)
            return q, h.to(r.dtype), s
        self.fn = torch.compile(f, fullgraph=True)

    def __call__(self, x, r, w, scale):
        return lambda: self.fn(x, r, w, scale if "scale" in self.kw else None)


def _flashinfer(mode):
    """FlashInfer's fused_add_rmsnorm_quant (static fp8, in place: residual <- h, out <- q)."""
    if mode != "static fp8":
        return None
    from flashinfer.norm import fused_add_rmsnorm_quant  # noqa: F401 - import error: not available

    def make(x, r, w, scale):
        q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
        return lambda: fused_add_rmsnorm_quant(q, x, r, w, scale, EPS)
    return make


def _vllm(mode):
    """vLLM's fused_add_rms_norm_static_fp8_quant (static fp8, in place)."""
    if mode != "static fp8":
        return None
    import vllm._custom_ops  # noqa: F401 - registers torch.ops._C
    op = torch.ops._C.fused_add_rms_norm_static_fp8_quant

    def make(x, r, w, scale):
        q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
        return lambda: op(q, x, r, w, scale, EPS)
    return make


def _impls(mode):
    out = {"addrmsnorm": _ours(mode)}
    try:
        out["torch.compile (same math)"] = _Compiled(mode)
    except Exception:  # noqa: BLE001 - no compiler here
        pass
    for name, peer in (("FlashInfer", _flashinfer), ("vLLM", _vllm)):
        try:
            make = peer(mode)
        except Exception:  # noqa: BLE001 - not installed
            make = None
        if make is not None:
            out[name] = make
    return out


def _check(make, x, r, w, scale, mode) -> str:
    """'' if the implementation's q matches the reference's within one quantization step where y
    sits near a rounding boundary, else a note."""
    qd, kw = MODES[mode]
    x0, r0 = x.clone(), r.clone()
    call = make(x0, r0, w, scale)
    out = call()
    ref = fused_add_rmsnorm_ref(x, r, w, EPS)
    q_ref, _ = quantize_ref(ref.y.float(), qd, scale=scale if "scale" in kw else None, group_size=kw.get("group_size"),
                            ue8m0=kw.get("ue8m0_scales", False))
    q = out[0] if isinstance(out, tuple) else None
    if q is None:  # the in-place peers: q is the buffer they were handed
        return ""
    differ = (q.float() != q_ref.float()).float().mean().item()
    return "" if differ < 1e-3 else f"q differs from the reference in {100 * differ:.2f}% of elements"


def run(roofline_gbs: float, log=print, shapes=SHAPES) -> list[dict]:
    rows = []
    for mode in MODES:
        impls = _impls(mode)
        for N, H in shapes:
            nbytes = quant_bytes(N, H, mode)
            n_sets = sets_for_cold_l2(nbytes)
            gen = torch.Generator(device="cuda").manual_seed(N + H)
            w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(torch.bfloat16)
            scale = torch.tensor([0.01], device="cuda")
            for name, make in impls.items():
                base = dict(section="quant", mode=mode, impl=name, N=N, H=H, x_dtype="bf16", residual_dtype="bf16")
                try:
                    sets = [(torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16),
                             (4 * torch.randn(N, H, device="cuda", generator=gen)).to(torch.bfloat16))
                            for _ in range(n_sets)]
                    note = _check(make, sets[0][0], sets[0][1], w, scale, mode)
                    calls = [make(x, r, w, scale) for x, r in sets]  # fresh outputs per set
                    t = time_graph(lambda i: calls[i](), n_sets)
                    gbs = nbytes / t.median_us / 1e3
                    rows.append(dict(base, us_median=t.median_us, us_min=t.min_us, us_max=t.max_us, gbs=gbs,
                                     pct_roofline=100 * gbs / roofline_gbs, note=note))
                except Exception as e:  # noqa: BLE001 - a failing peer is reported, not fatal
                    rows.append(dict(base, note=f"failed: {type(e).__name__}: {str(e)[:80]}"))
                finally:
                    sets = calls = None
            log(f"quant {mode} {N}x{H} done")
    for N, H in DECODE_SHAPES:  # the decode chain, static fp8
        gen = torch.Generator(device="cuda").manual_seed(N + H)
        w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(torch.bfloat16)
        scale = torch.tensor([0.01], device="cuda")
        for name, make in _impls("static fp8").items():
            base = dict(section="quant_decode", mode="static fp8", impl=name, N=N, H=H, x_dtype="bf16",
                        residual_dtype="bf16")
            try:
                x = torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)
                r = torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)
                q = torch.empty(N, H, dtype=torch.float8_e4m3fn, device="cuda")
                if name == "addrmsnorm":  # in place, vLLM's convention: r <- h feeds the next call
                    def step():
                        addrmsnorm.fused_add_rmsnorm_quant_(x, r, w, EPS, out=q, scale=scale)
                elif isinstance(make, _Compiled):  # functional: its h is the next call's residual
                    state = {"r": r}

                    def step():
                        state["r"] = make.fn(x, state["r"], w, scale)[1]
                else:  # the peers work in place on r
                    step = make(x, r, w, scale)

                def chain(_):
                    for _ in range(CHAIN):
                        step()
                t = time_graph(chain, 1)
                rows.append(dict(base, us_median=t.median_us / CHAIN, us_min=t.min_us / CHAIN,
                                 us_max=t.max_us / CHAIN))
            except Exception as e:  # noqa: BLE001
                rows.append(dict(base, note=f"failed: {type(e).__name__}: {str(e)[:80]}"))
        log(f"quant decode chain {N}x{H} done")
    return rows


def table(rows: list[dict]) -> str:
    """One line per (mode, shape): GB/s · % of roofline · µs per implementation; then the decode chain."""
    from .writers import _cell

    sel = [r for r in rows if r["section"] == "quant"]
    if not sel:
        return ""
    names = list(dict.fromkeys(r["impl"] for r in sel))
    keys = list(dict.fromkeys((r["mode"], r["N"], r["H"]) for r in sel))
    by = {(r["mode"], r["N"], r["H"], r["impl"]): r for r in sel}
    out = ["| mode | N × H (bf16) | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for k in keys:
        cells = []
        for n in names:
            r = by.get((*k, n))
            cells.append(_cell(r) + (" ✗" if r and r.get("note") and not r["note"].startswith("failed") else ""))
        out.append(f"| {k[0]} | {k[1]} × {k[2]} | " + " | ".join(cells) + " |")
    dec = [r for r in rows if r["section"] == "quant_decode"]
    if dec:
        out += ["", "| static fp8 decode chain, µs per call | " + " | ".join(names) + " |",
                "|---|" + "---|" * len(names)]
        for N, H in dict.fromkeys((r["N"], r["H"]) for r in dec):
            cells = []
            for n in names:
                r = next((r for r in dec if r["N"] == N and r["H"] == H and r["impl"] == n), None)
                cells.append("n/a" if r is None else r.get("note") or f"{r['us_median']:.2f}")
            out.append(f"| {N} × {H} | " + " | ".join(cells) + " |")
    return "\n".join(out)
