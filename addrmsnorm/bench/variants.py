"""Rows of the report for the norm variants: the sandwich norm of Gemma 2/3 (post-norm, add, pre-norm),
beside our own two-kernel path (the plain norm, then the fused op) and torch.compile of the same math; and
the gated norm of Qwen3-Next and Mamba2 (rmsnorm(x) * w * silu(z) over groups of a row), beside fla-core's
FusedRMSNormGated (where it imports) and torch.compile of the same math.

Byte model (bytes the one kernel must move at the least, per call; xs the activation's bytes):

    sandwich norm    read x and residual, write h and y    4 * xs per element, plus both weights once
    gated norm       read x and z, write y                 3 * xs per element, plus the weight once
    latent pair      read a and b, write both              2 * xs per element of both, plus both weights

fla-core's FusedRMSNormGated normalizes whole rows: for groups narrower than the row it is called on the
(rows * groups, group) view with a weight of the group's width (the same bytes; a weight shared by the
groups, so its output is not compared with ours there).

The two-kernel path moves 6 * xs per element (it writes and reads back the post-norm's output) and is
measured by the same byte model, so its GB/s is the one kernel's work over its time.

Shapes: Gemma 3 27B's hidden 5376 and a 4096 row, bulk (16384 rows) and a prefill chunk (2048 rows), bf16,
Gemma's 1 + w on both weights; and a decode chain at 1 × 5376 (CHAIN dependent in-place calls in one CUDA
graph, µs per call; PDL where the implementation has it; torch.compile's form returns new tensors). The gated norm:
65536 × 4096 in groups of 4096 and 1024, 16384 × 2048 in Qwen3-Next's value heads of 128, and 4096 × 8192 in one
group (GATED_SHAPES). The latent pair: DeepSeek-V3's 1536 + 512 of a 2112-wide row, bulk and a decode chain.

Every implementation is first checked against the one reference (reference.sandwich_rmsnorm_ref), y and
h, and marked where it differs.

Timing: CUDA-graph replay over rotating buffer sets (cold L2 by size; every call writes fresh outputs;
timing.py).
"""

from __future__ import annotations

import torch

import addrmsnorm
from addrmsnorm.reference import TOLERANCES, sandwich_rmsnorm_ref

from .plain import CHAIN, OURS, _chained, _gbs_line, _live, _measured, _us_line, section_tables
from .timing import sets_for_cold_l2

EPS = 1e-6
OFFSET = 1.0  # Gemma's 1 + w
SANDWICH_SHAPES = ((16384, 4096), (16384, 5376), (2048, 5376))
SANDWICH_DECODE_H = 5376
TWO_KERNELS = "addrmsnorm, two kernels (plain, then fused)"


def sandwich_impls(pdl: bool = False) -> dict:
    """name -> make() -> fn(x, residual, post_weight, weight) -> (y, h), new tensors."""
    def ours():
        return lambda x, r, pw, w: addrmsnorm.sandwich_rmsnorm(x, r, pw, w, EPS, weight_offset=OFFSET, pdl=pdl)

    def two_kernels():
        def f(x, r, pw, w):
            p = addrmsnorm.rmsnorm(x, pw, EPS, weight_offset=OFFSET, pdl=pdl)
            return addrmsnorm.fused_add_rmsnorm(p, r, w, EPS, weight_offset=OFFSET, pdl=pdl)
        return f

    def compiled():
        def f(x, r, pw, w):
            xf = x.float()
            p = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * (pw.float() + OFFSET)
            h = p + r.float()
            y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * (w.float() + OFFSET)
            return y.to(x.dtype), h.to(r.dtype)
        return torch.compile(f, dynamic=False, fullgraph=True)

    suffix = " (PDL)" if pdl else ""
    out = {OURS + suffix: ours, TWO_KERNELS + suffix: two_kernels}
    if not pdl:
        out["torch.compile (same math)"] = compiled
    return out


def _note(y, h, x, r, pw, w) -> str:
    ref = sandwich_rmsnorm_ref(x, r, pw, w, EPS, OFFSET, OFFSET)
    tol = TOLERANCES[x.dtype]
    for name, got, want in (("y", y, ref.y), ("h", h, ref.h)):
        err = ((got.double() - want.double()).abs() / (tol.atol + tol.rtol * want.double().abs())).max().item()
        if err > 1.0:
            return f"{name} off the reference by {err:.1f}x the tolerance"
    return ""


def _weights(H, gen, xd):
    return [(0.1 * torch.randn(H, device="cuda", generator=gen)).to(xd) for _ in range(2)]


def run_sandwich(roofline: float, log=print, shapes=SANDWICH_SHAPES) -> list[dict]:
    xd = torch.bfloat16
    impls, _ = _live(sandwich_impls(), log)
    rows = []
    for N, H in shapes:
        nbytes = 4 * xd.itemsize * N * H + 2 * xd.itemsize * H
        n_sets = sets_for_cold_l2(nbytes)
        gen = torch.Generator(device="cuda").manual_seed(N + H)
        pw, w = _weights(H, gen, xd)
        for name, fn in impls.items():
            def setup(fn=fn, n_sets=n_sets):
                sets = [tuple(torch.randn(N, H, device="cuda", generator=gen).to(xd) for _ in range(2))
                        for _ in range(n_sets)]
                x0, r0 = sets[0]
                return [lambda s=s: fn(s[0], s[1], pw, w) for s in sets], _note(*fn(x0, r0, pw, w), x0, r0, pw, w)
            _measured(rows, dict(section="sandwich", impl=name, N=N, H=H, x_dtype="bf16", residual_dtype="bf16"),
                      nbytes, roofline, n_sets, setup)
        log(_gbs_line(f"sandwich {N}x{H}", [r for r in rows if (r["N"], r["H"]) == (N, H)]))
    H = SANDWICH_DECODE_H  # a decode chain: each call's outputs are the next call's inputs
    gen = torch.Generator(device="cuda").manual_seed(H)
    pw, w = _weights(H, gen, xd)
    for name, fn in {**impls, **_live(sandwich_impls(pdl=True), log)[0]}.items():
        def setup(fn=fn):
            state = [torch.randn(1, H, device="cuda", generator=gen).to(xd) for _ in range(2)]

            def chain(_):
                x, r = state
                for _ in range(CHAIN):
                    x, r = fn(x, r, pw, w)
            return chain, None
        _chained(rows, dict(section="sandwich_latency", impl=name, N=1, H=H, x_dtype="bf16", residual_dtype="bf16"),
                 setup)
    log(_us_line(f"sandwich chain 1x{H}", [r for r in rows if r["section"] == "sandwich_latency"]))
    return rows


# (N, H, group): Mamba2-like groups of 4096 and 1024, Qwen3-Next's value heads of 128, one group of 8192
GATED_SHAPES = ((65536, 4096, 4096), (65536, 4096, 1024), (16384, 2048, 128), (4096, 8192, 8192))
FLA = "fla-core FusedRMSNormGated"


def gated_impls() -> dict:
    """name -> make() -> fn(x, z, w, group) -> y, a new tensor."""
    def ours():
        return lambda x, z, w, g: addrmsnorm.gated_rmsnorm(x, z, w, EPS, group_size=g)

    def fla():
        from fla.modules import FusedRMSNormGated  # noqa: F401 - a peer that does not import is reported
        from fla.modules.norm.fused_norm_gate import rms_norm_gated

        def f(x, z, w, g):
            H = x.shape[-1]
            if g == H:
                return rms_norm_gated(x, z, w, None, activation="silu", eps=EPS)
            return rms_norm_gated(x.view(-1, g), z.view(-1, g), w[:g], None, activation="silu", eps=EPS).view(x.shape)
        return f

    def compiled():
        def f(x, z, w, g):
            xf = x.float().unflatten(-1, (-1, g))
            n = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).flatten(-2)
            zf = z.float()
            return (n * w.float() * zf * torch.sigmoid(zf)).to(x.dtype)
        return torch.compile(f, dynamic=False, fullgraph=True)

    return {OURS: ours, FLA: fla, "torch.compile (same math)": compiled}


def run_gated(roofline: float, log=print, shapes=GATED_SHAPES) -> list[dict]:
    from addrmsnorm.reference import gated_rmsnorm_ref

    xd = torch.bfloat16
    impls, _ = _live(gated_impls(), log)
    rows = []
    tol = TOLERANCES[xd]
    for N, H, g in shapes:
        nbytes = 3 * xd.itemsize * N * H + xd.itemsize * H
        n_sets = sets_for_cold_l2(nbytes)
        gen = torch.Generator(device="cuda").manual_seed(N + H + g)
        w = (1.0 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(xd)
        for name, fn in impls.items():
            def setup(name=name, fn=fn, n_sets=n_sets):
                sets = [tuple(torch.randn(N, H, device="cuda", generator=gen).to(xd) for _ in range(2))
                        for _ in range(n_sets)]
                x0, z0 = sets[0]
                note = ""
                if not (name == FLA and g != H):
                    want = gated_rmsnorm_ref(x0[:256], z0[:256], w, EPS, g)
                    got = fn(x0, z0, w, g)[:256].double()
                    err = ((got - want).abs() / (tol.atol + tol.rtol * want.abs())).max().item()
                    note = f"y off the reference by {err:.1f}x the tolerance" if err > 1.0 else ""
                return [lambda s=s: fn(s[0], s[1], w, g) for s in sets], note
            _measured(rows, dict(section="gated", impl=name, N=N, H=H, group=g, x_dtype="bf16", residual_dtype="bf16"),
                      nbytes, roofline, n_sets, setup)
        log(_gbs_line(f"gated {N}x{H} groups of {g}", [r for r in rows if (r["N"], r["H"], r["group"]) == (N, H, g)]))
    return rows


PAIR_WIDTHS = (1536, 512, 2112)  # DeepSeek-V3's q and kv latents in the 2112-wide fused_qkv_a_proj output
PAIR_BULK_ROWS = (16384, 2048)
PAIR_DECODE_ROWS = (1, 64)
PAIR_TWO = "addrmsnorm, two plain launches"


def pair_impls(pdl: bool = False) -> dict:
    """name -> make() -> fn(a, wa, b, wb) -> (ya, yb), new tensors."""
    suffix = " (PDL)" if pdl else ""

    def ours():
        return lambda a, wa, b, wb: addrmsnorm.rmsnorm_pair(a, wa, b, wb, EPS, pdl=pdl)

    def two():
        return lambda a, wa, b, wb: (addrmsnorm.rmsnorm(a, wa, EPS, pdl=pdl), addrmsnorm.rmsnorm(b, wb, EPS, pdl=pdl))

    out = {OURS + suffix: ours, PAIR_TWO + suffix: two}
    if not pdl:
        def compiled():
            def norm(x, w):
                xf = x.float()
                return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype)
            return torch.compile(lambda a, wa, b, wb: (norm(a, wa), norm(b, wb)), dynamic=False, fullgraph=True)
        out["torch.compile (same math)"] = compiled
    return out


def run_pair(roofline: float, log=print) -> list[dict]:
    from addrmsnorm.reference import rmsnorm_ref

    xd = torch.bfloat16
    Ha, Hb, width = PAIR_WIDTHS
    gen = torch.Generator(device="cuda").manual_seed(Ha)
    wa, wb = ((1.0 + 0.1 * torch.randn(h, device="cuda", generator=gen)).to(xd) for h in (Ha, Hb))
    tol = TOLERANCES[xd]
    rows = []
    impls, _ = _live(pair_impls(), log)
    for N in PAIR_BULK_ROWS:
        nbytes = 2 * xd.itemsize * N * (Ha + Hb) + xd.itemsize * (Ha + Hb)
        n_sets = sets_for_cold_l2(nbytes)
        for name, fn in impls.items():
            def setup(fn=fn, n_sets=n_sets):
                bufs = [torch.randn(N, width, device="cuda", generator=gen).to(xd) for _ in range(n_sets)]
                a0, b0 = bufs[0][:, :Ha], bufs[0][:, Ha:Ha + Hb]
                note = ""
                for got, x, w in zip(fn(a0, wa, b0, wb), (a0, b0), (wa, wb)):
                    want = rmsnorm_ref(x[:256], w, EPS).y.double()
                    err = ((got[:256].double() - want).abs() / (tol.atol + tol.rtol * want.abs())).max().item()
                    note = note or (f"y off the reference by {err:.1f}x the tolerance" if err > 1.0 else "")
                return [lambda u=u: fn(u[:, :Ha], wa, u[:, Ha:Ha + Hb], wb) for u in bufs], note
            _measured(rows, dict(section="pair", impl=name, N=N, H=f"{Ha} + {Hb}", x_dtype="bf16",
                                 residual_dtype="bf16"), nbytes, roofline, n_sets, setup)
        log(_gbs_line(f"pair {N} x ({Ha} + {Hb})", [r for r in rows if r["section"] == "pair" and r["N"] == N]))
    # Decode: CHAIN dependent in-place steps in one graph, one buffer's latents (as a decoder's layers).
    for N in PAIR_DECODE_ROWS:
        for pdl in (False, True):
            for name, fn in _live(pair_impls(pdl), log)[0].items():
                def setup(fn=fn):
                    buf = torch.randn(N, width, device="cuda", generator=gen).to(xd)

                    def chain(_):
                        a, b = buf[:, :Ha], buf[:, Ha:Ha + Hb]
                        for _ in range(CHAIN):
                            a, b = fn(a, wa, b, wb)
                    return chain, None
                _chained(rows, dict(section="pair_latency", impl=name, N=N, H=f"{Ha} + {Hb}", x_dtype="bf16",
                                    residual_dtype="bf16"), setup)
        log(_us_line(f"pair chain {N} x ({Ha} + {Hb})",
                     [r for r in rows if r["section"] == "pair_latency" and r["N"] == N]))
    return rows


def run(roofline: float, log=print) -> list[dict]:
    return run_sandwich(roofline, log) + run_gated(roofline, log) + run_pair(roofline, log)


def table(rows: list[dict]) -> str:
    return section_tables(rows, (
        ("sandwich", "Sandwich norm, bf16, Gemma's 1 + w (GB/s by the one kernel's byte model · % of roofline · µs):",
         lambda r: f"{r['N']} × {r['H']}", "N × H", False),
        ("gated", "Gated norm, bf16, rmsnorm(x) * w * silu(z) (GB/s by the one kernel's byte model · % of roofline · "
         "µs):", lambda r: f"{r['N']} × {r['H']}, groups of {r['group']}", "N × H, group", False),
        ("pair", "Latent pair, bf16, one buffer of 2112 columns (GB/s by the one launch's byte model · % of roofline "
         "· µs):", lambda r: f"{r['N']} × ({r['H']})", "N × (a + b)", False),
        ("pair_latency", f"Latent pair, decode chain of {CHAIN} dependent calls (µs per call):",
         lambda r: f"{r['N']} × ({r['H']})", "N × (a + b)", True),
        ("sandwich_latency", f"Sandwich norm, decode chain of {CHAIN} dependent calls at 1 × {SANDWICH_DECODE_H} (µs "
         "per call):", lambda r: f"{r['N']} × {r['H']}", "N × H", True)))
