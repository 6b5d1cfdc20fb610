"""Quantized-output rows of the report: fused add + RMSNorm + fp8/int8 quantization, in GB/s against the
same-run roofline, beside torch.compile of the same math and the peers' fused kernels where importable.

Byte model (bytes the kernel must move at the least, per call; bf16 x and residual here):

    read   x + residual                       2 * 2 bytes per element
    write  residual_out (h) + q               2 + 1 bytes per element
    plus   the weight (once), the static scale (4 bytes), and the dynamic scales written:
           4 bytes per row (per token) or per row and group (per group).

So 7 bytes per element, against the plain forward's 8. return_y adds 2 (the "with y" mode). The
plain forward's own row at each shape (into given outputs, its 8-byte model) shows what the shape's
size alone costs against the roofline.

Timing: CUDA-graph replay over rotating buffer sets, inputs and outputs alike (every call writes
fresh addresses, and the L2 is cold by size; timing.py). The decode chain is static fp8 at 1 x 4096
and 1 x 8192, CHAIN dependent calls (each call's h is the next call's residual) in one graph.
"""

from __future__ import annotations

import statistics

import torch

import addrmsnorm
from addrmsnorm.reference import QUANT_QMAX, fused_add_rmsnorm_ref, quantize_ref

from .cells import mode_rows
from .grid import MAX_ELEMENTS, STANDARD_H
from .timing import sets_for_cold_l2, time_eager_cpu_rounds, time_graph

def _standard_shapes():
    """The bulk shape at every H of the report's standard grid that the quantized kernels take (a
    multiple of 16), then the mid-size shapes. Bulk: N * H >= 2**26 (at least 16384 rows), the
    definition of issue 15, so that a call moves as many bytes as the roofline's copies (256 MiB and
    more): at N * H = 2**24 the plain forward itself reached only 93% of the roofline at H <= 1024."""
    return [(min(max(16384, BULK_ELEMENTS // h), MAX_ELEMENTS // h), h) for h in STANDARD_H if h % 16 == 0] + MID_SHAPES


MID_SHAPES = [(2048, 4096), (512, 4096)]
PLAIN_MODE = "no quantization (the plain forward, 8 bytes per element)"
BULK_ELEMENTS = 1 << 26
DECODE_SHAPES = [(1, 4096), (1, 8192)]
CHAIN = 64
EPS = 1e-6
MODES = {  # name: (quant dtype, Python API keywords); scale is filled in per call
    "static fp8": (torch.float8_e4m3fn, {"scale": True}),
    "per-token fp8": (torch.float8_e4m3fn, {}),
    "per-token int8": (torch.int8, {}),
    "per-group 128 fp8, column-major UE8M0": (torch.float8_e4m3fn,
                                              {"group_size": 128, "column_major_scales": True, "ue8m0_scales": True}),
    # FlashInfer's fused_add_rmsnorm_fp8_block_quant always writes y (bf16) too: this mode does the same work.
    "per-group 128 fp8, column-major, with y": (torch.float8_e4m3fn,
                                                {"group_size": 128, "column_major_scales": True, "return_y": True}),
}


def quant_bytes(N: int, H: int, mode: str, xs: int = 2) -> int:
    kw = MODES[mode][1]
    scales = 4 if "scale" in kw else 4 * N * (H // kw["group_size"] if "group_size" in kw else 1)
    y = N * H * xs if kw.get("return_y") else 0
    return N * H * (3 * xs + 1) + y + H * xs + scales


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


def _ours_pdl_step(x, r, w, scale):
    """One static fp8 decode step with programmatic dependent launch (in place: r <- h)."""
    q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    return lambda: addrmsnorm.fused_add_rmsnorm_quant_(x, r, w, EPS, out=q, scale=scale, pdl=True)


class _Compiled:
    """torch.compile of the same math (the contract's fp32 y, then the mode's quantization; the scales
    row-major, where ours are column-major in the column-major modes)."""

    def __init__(self, mode):
        self.qd, self.kw = MODES[mode]
        qmax = QUANT_QMAX[self.qd]
        gs = self.kw.get("group_size")
        qd = self.qd
        ret_y = self.kw.get("return_y", False)
        ue8m0 = self.kw.get("ue8m0_scales", False)

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
                if ue8m0:
                    s = torch.exp2(torch.ceil(torch.log2(s)))
                v = (g * (1.0 / s)).flatten(-2) if gs is not None else g * (1.0 / s)
            if qd == torch.int8:
                q = v.round().clamp(-128, 127).to(torch.int8)
            else:
                q = v.clamp(-qmax, qmax).to(qd)
            return (q, h.to(r.dtype), s, y.to(x.dtype)) if ret_y else (q, h.to(r.dtype), s)
        from .impls import raise_recompile_limits

        raise_recompile_limits()
        # Static shapes, one graph per shape, as the plain rows' torch.compile: after a second shape,
        # automatic dynamic shapes ran the same math at 40-55% of the roofline on the H200.
        self.fn = torch.compile(f, dynamic=False, fullgraph=True)

    def __call__(self, x, r, w, scale):
        return lambda: self.fn(x, r, w, scale if "scale" in self.kw else None)


def _flashinfer(mode, pdl=False):
    """FlashInfer's fused_add_rmsnorm_quant (static fp8) and fused_add_rmsnorm_fp8_block_quant (1 x 128 groups,
    column-major scales, y written too); in place: residual <- h. Each call returns q for the check."""
    from flashinfer.norm import fused_add_rmsnorm_fp8_block_quant, fused_add_rmsnorm_quant

    if mode == "static fp8":
        def make(x, r, w, scale):
            q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
            return lambda: (fused_add_rmsnorm_quant(q, x, r, w, scale, EPS, enable_pdl=pdl), q)[1]
        return make
    if mode == "per-group 128 fp8, column-major, with y":
        def make(x, r, w, scale):
            n, h = x.shape
            q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
            y = torch.empty_like(x)
            s = torch.empty(h // 128, (n + 3) // 4 * 4, dtype=torch.float32, device=x.device)
            return lambda: (fused_add_rmsnorm_fp8_block_quant(q, s, y, x, r, w, EPS, enable_pdl=pdl), q)[1]
        return make
    return None


def _vllm(mode):
    """vLLM's fused_add_rms_norm_static_fp8_quant (static fp8, in place)."""
    if mode != "static fp8":
        return None
    import vllm._custom_ops  # noqa: F401 - registers torch.ops._C
    op = torch.ops._C.fused_add_rms_norm_static_fp8_quant

    def make(x, r, w, scale):
        q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
        return lambda: (op(q, x, r, w, scale, EPS), q)[1]
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
    """'' if the implementation's q equals quant(y) of the contract's y (fp32 add, fp32 y) in all but
    0.1% of elements (elements where y sits on a rounding boundary), else a note saying how many
    differ. Every implementation is held to the same y: ours on the looped path (H above the
    single-pass limit) quantizes y from h rounded to the residual dtype, and is marked where that
    shows."""
    qd, kw = MODES[mode]
    x0, r0 = x.clone(), r.clone()
    call = make(x0, r0, w, scale)
    out = call()
    y32 = fused_add_rmsnorm_ref(x, r, w, EPS).y.float()
    q_ref, _ = quantize_ref(y32, qd, scale=scale if "scale" in kw else None, group_size=kw.get("group_size"),
                            ue8m0=kw.get("ue8m0_scales", False))
    q = out[0] if isinstance(out, tuple) else out
    differ = (q.float() != q_ref.float()).float().mean().item()
    return "" if differ < 1e-3 else f"q differs from quant(the contract's y) in {100 * differ:.2f}% of elements"


def run(roofline_gbs: float, log=print, shapes=None) -> list[dict]:
    shapes = _standard_shapes() if shapes is None else shapes
    rows = []
    for N, H in shapes:  # ours without quantization at the same shapes: what a shape's size alone costs
        base = dict(section="quant", mode=PLAIN_MODE, impl="addrmsnorm", N=N, H=H, x_dtype="bf16",
                    residual_dtype="bf16")
        try:
            nbytes = 8 * N * H + 2 * H
            n_sets = sets_for_cold_l2(nbytes)
            gen = torch.Generator(device="cuda").manual_seed(N + H)
            w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(torch.bfloat16)
            sets = [(torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16),
                     torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)) for _ in range(n_sets)]
            outs = [(torch.empty_like(x), torch.empty_like(r)) for x, r in sets]
            into = torch.ops.addrmsnorm.norm_into.default
            t = time_graph(lambda i: into(*sets[i], w, *outs[i], None, EPS), n_sets)
            gbs = nbytes / t.median_us / 1e3
            rows.append(dict(base, us_median=t.median_us, us_min=t.min_us, us_max=t.max_us, gbs=gbs,
                             pct_roofline=100 * gbs / roofline_gbs, note=""))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(base, note=f"failed: {type(e).__name__}: {str(e)[:80]}"))
        finally:
            sets = outs = None
        log(f"quant rows: plain forward {N}x{H}: " + (f"{rows[-1]['gbs']:.0f} GB/s ({rows[-1]['pct_roofline']:.1f}%)"
                                                      if rows[-1].get("gbs") else rows[-1]["note"]))
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
                    kept = []  # an allocating implementation's outputs stay alive: fresh addresses every call
                    t = time_graph(lambda i: kept.append(calls[i]()), n_sets)
                    gbs = nbytes / t.median_us / 1e3
                    rows.append(dict(base, us_median=t.median_us, us_min=t.min_us, us_max=t.max_us, gbs=gbs,
                                     pct_roofline=100 * gbs / roofline_gbs, note=note))
                except Exception as e:  # noqa: BLE001 - a failing peer is reported, not fatal
                    rows.append(dict(base, note=f"failed: {type(e).__name__}: {str(e)[:80]}"))
                finally:
                    sets = calls = kept = None
            log(f"quant {mode} {N}x{H}: " + "; ".join(
                f"{r['impl']} {r['gbs']:.0f} GB/s ({r['pct_roofline']:.1f}%){' ' + r['note'] if r['note'] else ''}"
                if r.get("gbs") else f"{r['impl']} {r.get('note')}"
                for r in rows if (r["section"], r["mode"], r["N"], r["H"]) == ("quant", mode, N, H)))
    for N, H in DECODE_SHAPES:  # the decode chain, static fp8
        gen = torch.Generator(device="cuda").manual_seed(N + H)
        w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(torch.bfloat16)
        scale = torch.tensor([0.01], device="cuda")
        chain_impls = dict(_impls("static fp8"))
        chain_impls["addrmsnorm (PDL)"] = _ours_pdl_step
        try:
            chain_impls["FlashInfer (PDL)"] = _flashinfer("static fp8", pdl=True)
        except Exception:  # noqa: BLE001 - not installed
            pass
        for name, make in chain_impls.items():
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
                else:  # ours with PDL and the peers work in place on r
                    step = make(x, r, w, scale)

                def chain(_):
                    for _ in range(CHAIN):
                        step()
                t = time_graph(chain, 1)
                rows.append(dict(base, us_median=t.median_us / CHAIN, us_min=t.min_us / CHAIN,
                                 us_max=t.max_us / CHAIN))
            except Exception as e:  # noqa: BLE001
                rows.append(dict(base, note=f"failed: {type(e).__name__}: {str(e)[:80]}"))
        log(f"quant decode chain {N}x{H}: " + "; ".join(
            f"{r['impl']} {r['us_median']:.2f} us" if r.get("us_median") else f"{r['impl']} {r.get('note')}"
            for r in rows if (r["section"], r["N"], r["H"]) == ("quant_decode", N, H)))
    rows += cpu_cost()
    log("quant CPU cost done")
    return rows


PLAIN_OP = "plain in-place op (norm_)"
PLAIN_FUNCTIONAL_OP = "plain allocating op (norm)"


def cpu_cost(N: int = 1, H: int = 4096) -> list[dict]:
    """Wall µs per eager call at 1 x 4096 bf16: the quantized torch operators beside the plain in-place
    operator, and the Python API over them."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)
    r = torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)
    w = torch.ones(H, device="cuda", dtype=torch.bfloat16)
    q = torch.empty(N, H, dtype=torch.float8_e4m3fn, device="cuda")
    s = torch.empty(N, dtype=torch.float32, device="cuda")
    scale = torch.tensor([0.01], device="cuda")
    ops = torch.ops.addrmsnorm
    fp8 = torch.float8_e4m3fn
    calls = {
        PLAIN_OP: lambda: ops.norm_.default(x, r, w, EPS),
        PLAIN_FUNCTIONAL_OP: lambda: ops.norm.default(x, r, w, EPS),
        "quant op into outputs, static fp8 (norm_quant_into)":
            lambda: ops.norm_quant_into.default(x, r, w, q, r, None, None, EPS, scale),
        "quant op into outputs, per-token fp8":
            lambda: ops.norm_quant_into.default(x, r, w, q, r, s, None, EPS),
        "quant op allocating, static fp8 (norm_quant)":
            lambda: ops.norm_quant.default(x, r, w, EPS, fp8, scale),
        "Python API addrmsnorm.fused_add_rmsnorm_ (plain, in place)":
            lambda: addrmsnorm.fused_add_rmsnorm_(x, r, w, EPS),
        "Python API addrmsnorm.fused_add_rmsnorm_quant_, static fp8":
            lambda: addrmsnorm.fused_add_rmsnorm_quant_(x, r, w, EPS, out=q, scale=scale),
    }
    base = dict(section="quant_cpu", mode="", N=N, H=H, x_dtype="bf16", residual_dtype="bf16")
    rows = []
    working = {}
    for name, call in calls.items():
        try:
            call()
            working[name] = call
        except Exception as e:  # noqa: BLE001
            rows.append(dict(base, impl=name, note=f"failed: {type(e).__name__}: {str(e)[:80]}"))
    # Interleaved rounds, so that each target is a ratio taken within a round (cpu_ratio).
    for name, us in time_eager_cpu_rounds(working).items():
        rows.append(dict(base, impl=name, us_median=statistics.median(us), us_min=min(us), us_max=max(us),
                         us_rounds=us))
    return rows


def cpu_ratio(row: dict, plain: dict) -> float:
    """The median over rounds of row's µs per call over plain's in the same round (time_eager_cpu_rounds),
    or the ratio of their medians where the rows carry no rounds."""
    a, b = row.get("us_rounds"), plain.get("us_rounds")
    if a and b and len(a) == len(b):
        return statistics.median(x / y for x, y in zip(a, b))
    return row["us_median"] / plain["us_median"]


def table(rows: list[dict]) -> str:
    """One line per (mode, shape): GB/s · % of roofline · µs per implementation; then the decode chain."""
    sel = [r for r in rows if r["section"] == "quant"]
    if not sel:
        return ""
    out = mode_rows(sel)
    dec = [r for r in rows if r["section"] == "quant_decode"]
    if dec:
        dnames = list(dict.fromkeys(r["impl"] for r in dec))
        out += ["", "| static fp8 decode chain, µs per call | " + " | ".join(dnames) + " |",
                "|---|" + "---|" * len(dnames)]
        for N, H in dict.fromkeys((r["N"], r["H"]) for r in dec):
            cells = []
            for n in dnames:
                r = next((r for r in dec if r["N"] == N and r["H"] == H and r["impl"] == n), None)
                cells.append("n/a" if r is None else r.get("note") or f"{r['us_median']:.2f}")
            out.append(f"| {N} × {H} | " + " | ".join(cells) + " |")
    cpu = [r for r in rows if r["section"] == "quant_cpu"]
    if cpu:
        out += ["", "| eager CPU cost at 1 × 4096 bf16 (1,000 calls, one synchronize; 7 rounds, the "
                "implementations interleaved) | µs per call, median of rounds | min | max |", "|---|---|---|---|"]
        out += [f"| {r['impl']} | " + (r.get("note") or f"{r['us_median']:.2f} | {r['us_min']:.2f} | {r['us_max']:.2f}")
                + " |" for r in cpu]
    return "\n".join(out)
