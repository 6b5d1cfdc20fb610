"""Rows of the report for prefill chunks: the fused op and the plain norm at the row counts serving engines prefill
in (256 to 4096 tokens a chunk), at H 2048, 4096 and 8192, bf16, beside the peers a user would pick instead.

Byte model (bytes per call; xs the activations' bytes): the fused op's (bench/byte_model.py: read x and the
residual, write y and the residual, the weight once) and the plain norm's (read x, write y, the weight once).

Implementations. Ours: the torch operator into new outputs (functional) and in place with PDL; a cell takes the
better of the two. The peers: torch.compile of the same math, Liger-Kernel, and FlashInfer with PDL (its
norm.cuh kernels where the package does not install); each cell's ratio is ours over the fastest of them
(time ratio: above 1.00 we are faster).

Every implementation is first checked against the one reference (the report's check for the fused op,
reference.rmsnorm_ref for the plain norm) and marked where it differs.

Timing: CUDA-graph replay over rotating buffer sets (cold L2 by size; allocating implementations keep their
outputs alive, so every call writes fresh addresses; timing.py).
"""

from __future__ import annotations

import torch

from .byte_model import forward_bytes
from .plain import EPS, _live, _measured, _y_note
from .timing import sets_for_cold_l2

PREFILL_N = (256, 512, 1024, 2048, 4096)
PREFILL_H = (2048, 4096, 8192)
FUSED, PLAIN = "fused", "plain"
OURS_FUNCTIONAL = "addrmsnorm (into new outputs)"
OURS_PDL = "addrmsnorm (in place, PDL)"
OURS = (OURS_FUNCTIONAL, OURS_PDL)
COMPILED = "torch.compile (same math)"
LIGER = "Liger-Kernel"
FLASHINFER_PDL = "FlashInfer (PDL)"
PEERS = (COMPILED, LIGER, FLASHINFER_PDL)


def fused_impls() -> dict:
    """name -> make() -> call(x, residual, w): the fused op, y and the new residual written (in place or new)."""
    from .impls import contract_torch

    op, op_ = torch.ops.addrmsnorm.norm.default, torch.ops.addrmsnorm.norm_.default

    def compiled():
        f = torch.compile(contract_torch, dynamic=False, fullgraph=True)
        return lambda x, r, w: f(x, r, w, EPS)

    def liger():
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
        return lambda x, r, w: LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama")

    def flashinfer():
        from flashinfer.norm import fused_add_rmsnorm
        return lambda x, r, w: fused_add_rmsnorm(x, r, w, EPS, enable_pdl=True)

    return {OURS_FUNCTIONAL: lambda: (lambda x, r, w: op(x, r, w, EPS)),
            OURS_PDL: lambda: (lambda x, r, w: op_(x, r, w, EPS, pdl=True)),
            COMPILED: compiled, LIGER: liger, FLASHINFER_PDL: flashinfer}


def plain_impls() -> dict:
    """name -> make() -> call(x, w): the plain norm, y written (in place or new)."""
    from .plain import _compiled_norm, plain_impls as report_plain

    op, op_ = torch.ops.addrmsnorm.norm.default, torch.ops.addrmsnorm.norm_.default

    def flashinfer():
        from flashinfer.norm import rmsnorm
        return lambda x, w: rmsnorm(x, w, EPS, enable_pdl=True)

    return {OURS_FUNCTIONAL: lambda: (lambda x, w: op(x, None, w, EPS)[0]),
            OURS_PDL: lambda: (lambda x, w: op_(x, None, w, EPS, pdl=True)),
            COMPILED: _compiled_norm, LIGER: report_plain()["Liger"], FLASHINFER_PDL: flashinfer}


def _fused_note(call, x, r, w) -> str:
    from addrmsnorm.reference import TOLERANCES, fused_add_rmsnorm_ref

    ref = fused_add_rmsnorm_ref(x, r, w, EPS)
    x, r = x.clone(), r.clone()
    out = call(x, r, w)
    y, h = (out[0], out[1]) if out is not None else (x, r)
    tol = TOLERANCES[x.dtype]
    err = ((y.double() - ref.y).abs() / (tol.atol + tol.rtol * ref.y.abs())).max().item()
    if err > 1.0:
        return f"y off the reference by {err:.1f}x the tolerance"
    return "" if torch.equal(h, ref.residual_out) else "residual_out differs from the contract's"


def run(roofline: float, log=print, ns=PREFILL_N, hs=PREFILL_H) -> list[dict]:
    rows = []
    fused, _ = _live(fused_impls(), log)
    plain, _ = _live(plain_impls(), log)
    xd = torch.bfloat16
    for H in hs:
        for N in ns:
            gen = torch.Generator(device="cuda").manual_seed(N + H)
            w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(xd)
            for kind, impls, nbytes in ((FUSED, fused, forward_bytes(N, H, 2, 2, 2)),
                                        (PLAIN, plain, 2 * 2 * N * H + 2 * H)):
                n_sets = sets_for_cold_l2(nbytes)
                for name, fn in impls.items():
                    base = dict(section="prefill", impl=name, N=N, H=H, x_dtype="bf16", mode=kind,
                                residual_dtype="bf16" if kind == FUSED else "-")

                    def setup(kind=kind, fn=fn, n_sets=n_sets):
                        if kind == FUSED:
                            sets = [(torch.randn(N, H, device="cuda", generator=gen).to(xd),
                                     (4 * torch.randn(N, H, device="cuda", generator=gen)).to(xd))
                                    for _ in range(n_sets)]
                            return [lambda s=s: fn(s[0], s[1], w) for s in sets], _fused_note(fn, *sets[0], w)
                        sets = [torch.randn(N, H, device="cuda", generator=gen).to(xd) for _ in range(n_sets)]
                        y = sets[0].clone()
                        out = fn(y, w)
                        return [lambda x=x: fn(x, w) for x in sets], _y_note(y if out is None else out, sets[0], w)
                    _measured(rows, base, nbytes, roofline, n_sets, setup)
            log(f"prefill {N}x{H}: " + "; ".join(f"{kind} {r:.2f}" for kind, r in
                                                  ((k, ratio(rows, k, N, H)) for k in (FUSED, PLAIN)) if r))
    return rows


def _best(sel: list[dict], names) -> dict | None:
    got = [r for r in sel if r["impl"] in names and r.get("us_median") and not r.get("note")]
    return min(got, key=lambda r: r["us_median"]) if got else None


def best_pair(rows: list[dict], kind: str, N: int, H: int) -> tuple[dict | None, dict | None]:
    """(the better of ours, the fastest peer) at one cell, from rows that are correct."""
    sel = [r for r in rows if r["section"] == "prefill" and r.get("mode") == kind and (r["N"], r["H"]) == (N, H)]
    return _best(sel, OURS), _best(sel, PEERS)


def ratio(rows: list[dict], kind: str, N: int, H: int) -> float | None:
    """The fastest peer's time over ours: 1.00 level, above 1 ours faster."""
    mine, peer = best_pair(rows, kind, N, H)
    return peer["us_median"] / mine["us_median"] if mine and peer else None


def table(rows: list[dict]) -> str:
    sel = [r for r in rows if r["section"] == "prefill"]
    if not sel:
        return ""
    ns = sorted({r["N"] for r in sel})
    hs = sorted({r["H"] for r in sel})

    def cell(N, H):
        vals = [ratio(rows, k, N, H) for k in (FUSED, PLAIN)]
        return " / ".join("n/a" if v is None else f"{v:.2f}" for v in vals)

    out = ["Prefill chunks, bf16: ours (the better of into new outputs and in place with PDL) against the fastest of "
           f"{', '.join(PEERS)}, fused / plain (time ratios: above 1.00 ours is faster):", "",
           "| N | " + " | ".join(f"H {h}" for h in hs) + " |", "|---|" + "---|" * len(hs)]
    out += [f"| {N} | " + " | ".join(cell(N, H) for H in hs) + " |" for N in ns]
    out += ["", "The cells (GB/s · % of roofline · µs; ✗: off the reference):", "",
            "| kind | shape | " + " | ".join(OURS + PEERS) + " |", "|---|---|" + "---|" * (len(OURS) + len(PEERS))]
    by = {(r.get("mode"), r["N"], r["H"], r["impl"]): r for r in sel}
    for kind in (FUSED, PLAIN):
        for H in hs:
            for N in ns:
                cells = []
                for name in OURS + PEERS:
                    r = by.get((kind, N, H, name))
                    if r is None:
                        cells.append("n/a")
                    elif not r.get("us_median"):
                        cells.append(r.get("note") or "n/a")
                    else:
                        note = f" ✗ {r['note']}" if r.get("note") else ""
                        cells.append(f"{r['gbs']:.0f} · {r['pct_roofline']:.0f}% · {r['us_median']:.2f} µs{note}")
                out.append(f"| {kind} | {N} × {H} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
