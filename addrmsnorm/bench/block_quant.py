"""Block-scaled rows of the report: fused add + RMSNorm + NVFP4, MXFP8 or MXFP4 (the inputs of Blackwell's
block-scaled GEMMs), on the H200 as a stand-in, against the same-run roofline and torch.compile of the same
formulas (docs/guide.md, "Block-scaled formats").

Byte model (bytes the kernel must move at the least, per call; bf16 x and residual):

    read   x + residual                    2 * 2 bytes per element
    write  residual_out (h)                2 bytes per element
           q                               0.5 byte per element (fp4) or 1 (fp8)
           the scales                      1 byte per block of 16 (NVFP4) or 32 (MX); swizzled: the padded tiles
    plus   the weight (once) and NVFP4's global scale (4 bytes)

So 6.56 bytes per element for NVFP4, 7.03 for MXFP8 and 6.53 for MXFP4.

Timing: CUDA-graph replay over rotating buffer sets (fresh inputs and outputs every call, cold L2; timing.py).
The decode chain: 1 x 4096, CHAIN dependent in-place calls with PDL (each call's h the next one's residual) in
one graph, beside our static fp8 step with PDL.
"""

from __future__ import annotations

import torch

import addrmsnorm
from addrmsnorm import validation

from .cells import mode_rows
from .timing import sets_for_cold_l2, time_graph

EPS = 1e-6
BULK_SHAPES = [(16384, 4096), (16384, 8192)]
DECODE_SHAPE = (1, 4096)
CHAIN = 64
GLOBAL_SCALE = 0.5
MODES = {  # name: (quant dtype, group size, swizzled scales)
    "NVFP4": (torch.float4_e2m1fn_x2, 16, False),
    "NVFP4, swizzled scales": (torch.float4_e2m1fn_x2, 16, True),
    "MXFP8": (torch.float8_e4m3fn, 32, False),
    "MXFP4": (torch.float4_e2m1fn_x2, 32, False),
}


def block_bytes(N: int, H: int, mode: str, xs: int = 2) -> int:
    qd, gs, swizzled = MODES[mode]
    q = N * H // 2 if qd == torch.float4_e2m1fn_x2 else N * H
    scales = validation.swizzled_scales_numel(N, H, gs) if swizzled else N * H // gs
    return 3 * N * H * xs + q + scales + H * xs + (4 if gs == 16 else 0)


def _ours(mode):
    qd, gs, swizzled = MODES[mode]

    def make(x, r, w, g):
        q = torch.empty(validation.q_shape(x.shape, qd), dtype=qd, device=x.device)
        h = torch.empty_like(r)
        s = validation.alloc_scales(x.shape, gs, validation.quant_mode(g if gs == 16 else None, gs, qd), False,
                                    x.device, swizzled)
        return lambda: addrmsnorm.fused_add_rmsnorm_quant(x, r, w, EPS, quant_dtype=qd, group_size=gs,
                                                          scale=g if gs == 16 else None, out=q, residual_out=h,
                                                          scales_out=s, swizzled_scales=swizzled)[0]
    return make


def _e2m1_codes(v):
    """e2m1 codes, the arithmetic of kernels._e2m1 in torch ops inductor compiles."""
    a = v.abs().clamp(max=6.0)
    e = (((a.view(torch.int32) >> 23) & 0xFF) - 127).clamp(min=0)
    n = torch.round(a * ((128 - e) << 23).view(torch.float32))
    return (n.to(torch.int32) + 2 * e) | ((v < 0).to(torch.int32) << 3)


class _Compiled:
    """torch.compile of the same formulas: the contract's fp32 y, the block scales and q (fp4 packed), the
    scales linear (the swizzled mode's layout is not reproduced: its row measures the same work)."""

    def __init__(self, mode):
        qd, gs, _ = MODES[mode]
        qmax = 448.0 if qd == torch.float8_e4m3fn else 6.0

        def f(x, r, w, g):
            h = x.float() + r.float()
            y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * w.float()
            yb = y.unflatten(-1, (-1, gs))
            a = yb.abs().amax(-1)
            if gs == 16:
                s8 = ((a / 6.0) * g).clamp(max=448.0).to(torch.float8_e4m3fn)
                sf = s8.float()
                m = torch.where(sf == 0, 0.0, g / torch.where(sf == 0, 1.0, sf))
                sbytes = s8.view(torch.uint8)
            else:
                bits = (a / qmax).view(torch.int32)
                biased = torch.where(bits >= 0x800000, (bits >> 23) + ((bits & 0x7FFFFF) != 0).to(torch.int32),
                                     (bits > 0x400000).to(torch.int32))
                m = ((254 - biased) << 23).view(torch.float32)
                sbytes = biased.to(torch.uint8)
            v = (yb * m.unsqueeze(-1)).flatten(-2)
            if qd == torch.float8_e4m3fn:
                q = v.clamp(-448.0, 448.0).to(qd)
            else:
                c = _e2m1_codes(v).unflatten(-1, (-1, 2))
                q = (c[..., 0] | (c[..., 1] << 4)).to(torch.uint8)
            return q, h.to(r.dtype), sbytes
        from .impls import raise_recompile_limits

        raise_recompile_limits()
        self.fn = torch.compile(f, dynamic=False, fullgraph=True)
        self.gs = gs

    def __call__(self, x, r, w, g):
        return lambda: self.fn(x, r, w, g.reshape(()))[0]


def _check(make, x, r, w, g, mode) -> str:
    """'' if q's bytes equal ours in all but 0.1% (elements on a rounding boundary of y), else a note."""
    want = _ours(mode)(x, r, w, g)().view(torch.uint8)
    got = make(x, r, w, g)().view(torch.uint8)
    differ = (got != want).float().mean().item()
    return "" if differ < 1e-3 else f"q differs from ours in {100 * differ:.2f}% of bytes"


def run(roofline_gbs: float, log=print) -> list[dict]:
    rows = []
    for mode in MODES:
        impls = {"addrmsnorm": _ours(mode)}
        try:
            impls["torch.compile (same formulas)"] = _Compiled(mode)
        except Exception:  # noqa: BLE001 - no compiler here
            pass
        for N, H in BULK_SHAPES:
            nbytes = block_bytes(N, H, mode)
            n_sets = sets_for_cold_l2(nbytes)
            gen = torch.Generator(device="cuda").manual_seed(N + H)
            w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(torch.bfloat16)
            g = torch.tensor([GLOBAL_SCALE], device="cuda")
            for name, make in impls.items():
                base = dict(section="block_quant", mode=mode, impl=name, N=N, H=H, x_dtype="bf16",
                            residual_dtype="bf16")
                try:
                    sets = [(torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16),
                             (4 * torch.randn(N, H, device="cuda", generator=gen)).to(torch.bfloat16))
                            for _ in range(n_sets)]
                    note = "" if name == "addrmsnorm" else _check(make, sets[0][0], sets[0][1], w, g, mode)
                    calls = [make(x, r, w, g) for x, r in sets]
                    kept = []  # an allocating implementation's outputs stay alive: fresh addresses every call
                    t = time_graph(lambda i: kept.append(calls[i]()), n_sets)
                    gbs = nbytes / t.median_us / 1e3
                    rows.append(dict(base, us_median=t.median_us, us_min=t.min_us, us_max=t.max_us, gbs=gbs,
                                     pct_roofline=100 * gbs / roofline_gbs, note=note))
                except Exception as e:  # noqa: BLE001 - reported, not fatal
                    rows.append(dict(base, note=f"failed: {type(e).__name__}: {str(e)[:80]}"))
                finally:
                    sets = calls = kept = None
            log(f"block quant {mode} {N}x{H}: " + "; ".join(
                f"{r['impl']} {r['gbs']:.0f} GB/s ({r['pct_roofline']:.1f}%){' ' + r['note'] if r['note'] else ''}"
                if r.get("gbs") else f"{r['impl']} {r.get('note')}"
                for r in rows if (r["section"], r["mode"], r["N"], r["H"]) == ("block_quant", mode, N, H)))
    rows += _decode_chain()
    log("block quant decode chain: " + "; ".join(
        f"{r['mode']} {r['us_median']:.2f} us" if r.get("us_median") else f"{r['mode']} {r.get('note')}"
        for r in rows if r["section"] == "block_quant_decode"))
    return rows


def _decode_chain() -> list[dict]:
    N, H = DECODE_SHAPE
    gen = torch.Generator(device="cuda").manual_seed(5)
    w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(torch.bfloat16)
    g = torch.tensor([GLOBAL_SCALE], device="cuda")
    x = torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)
    rows = []
    steps = {"static fp8 (the baseline)": None, **{m: MODES[m] for m in MODES}}
    for mode, spec in steps.items():
        base = dict(section="block_quant_decode", mode=mode, impl="addrmsnorm (PDL)", N=N, H=H, x_dtype="bf16",
                    residual_dtype="bf16")
        try:
            r = torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)
            if spec is None:
                q = torch.empty(N, H, dtype=torch.float8_e4m3fn, device="cuda")

                def step():
                    addrmsnorm.fused_add_rmsnorm_quant_(x, r, w, EPS, out=q, scale=g, pdl=True)
            else:
                qd, gs, swizzled = spec
                q = torch.empty(validation.q_shape((N, H), qd), dtype=qd, device="cuda")
                s = validation.alloc_scales((N, H), gs, validation.quant_mode(g if gs == 16 else None, gs, qd),
                                            False, "cuda", swizzled)

                def step(q=q, s=s, gs=gs, swizzled=swizzled, r=r):
                    addrmsnorm.fused_add_rmsnorm_quant_(x, r, w, EPS, out=q, group_size=gs,
                                                        scale=g if gs == 16 else None, scales_out=s,
                                                        swizzled_scales=swizzled, pdl=True)

            def chain(_):
                for _ in range(CHAIN):
                    step()
            t = time_graph(chain, 1)
            rows.append(dict(base, us_median=t.median_us / CHAIN, us_min=t.min_us / CHAIN, us_max=t.max_us / CHAIN))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(base, note=f"failed: {type(e).__name__}: {str(e)[:80]}"))
    return rows


def table(rows: list[dict]) -> str:
    """Bulk rows (GB/s · % of roofline · µs per implementation), then the decode chain."""
    sel = [r for r in rows if r["section"] == "block_quant"]
    if not sel:
        return ""
    out = mode_rows(sel)
    dec = [r for r in rows if r["section"] == "block_quant_decode"]
    if dec:
        out += ["", f"Decode chain, {DECODE_SHAPE[0]} × {DECODE_SHAPE[1]} bf16, in place with PDL, µs per call "
                    f"({CHAIN} dependent calls in one graph):", "", "| mode | µs per call |", "|---|---|"]
        out += [f"| {r['mode']} | " + (f"{r['us_median']:.2f}" if r.get("us_median") else r.get("note", "")) + " |"
                for r in dec]
    return "\n".join(out)
