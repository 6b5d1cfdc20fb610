"""Plain-norm rows of the report: the plain RMSNorm (no residual), per-head q and k norms on a fused QKV
buffer, and the plain norm's static fp8 output, beside the peers and torch.compile of the same math.

Byte model (bytes the kernel must move at the least, per call; xs the activation's bytes):

    plain norm       read x, write y                    2 * xs per element, plus the weight once
    QK norm          read and write q's and k's heads   2 * xs per element of q and k, in place
                     (v, the rest of each QKV row, is not touched); plus both weights
    plain quant      read x, write q (fp8)              xs + 1 per element, plus the weight and scale

Shapes. Plain norm: the bulk shape (N * H >= 2**26, at least 16384 rows) at every H of the standard
grid, bf16 and fp16. QK norm: a Qwen3/Llama-8B-shaped QKV buffer, 32 q heads and 8 kv heads of 128
(a row of 48 * 128 elements), T = 8192 and 65536 tokens for bandwidth; T = 1 and 64 as a decode chain of
CHAIN dependent calls in one CUDA graph (µs per call, PDL where the implementation has it). The peers
normalize q's and k's heads in place on their views (FlashInfer's per-head 3-D rmsnorm, one call each);
ours does both in one launch (qk_rmsnorm_). Plain quant: static fp8 at the bulk shapes of H 4096 and 8192.
Decode: the plain norm at one row of H 2048, 4096 and 8192 (bf16), a chain of CHAIN dependent calls in one CUDA
graph, each reading the row the call before wrote, ours and FlashInfer's, with and without PDL (µs per call).

Every implementation is first checked against the one reference (reference.rmsnorm_ref; for fp8,
quant(the reference's fp32 y)) and marked where it differs.

Timing: CUDA-graph replay over rotating buffer sets (cold L2 by size; allocating implementations keep
their outputs alive, so every call writes fresh addresses; timing.py).
"""

from __future__ import annotations

import torch

import addrmsnorm
from addrmsnorm.reference import TOLERANCES, quantize_ref, rmsnorm_ref

from .cells import cell as _cell
from .grid import MAX_ELEMENTS, STANDARD_H
from .timing import sets_for_cold_l2, time_graph

EPS = 1e-6
BULK_ELEMENTS = 1 << 26
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
QK_HEADS = (32, 8, 128)  # q heads, kv heads, head_dim
QK_BANDWIDTH_T = (8192, 65536)
QK_LATENCY_T = (1, 64)
QUANT_H = (4096, 8192)
CHAIN = 64
OURS = "addrmsnorm"
OURS_PDL = "addrmsnorm (PDL)"


def bulk_shapes():
    return [(min(max(16384, BULK_ELEMENTS // h), MAX_ELEMENTS // h), h) for h in STANDARD_H]


# ----- implementations: make(x, w) -> a call returning y ---------------------------------------------

def _compiled_norm():
    def f(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype)
    return torch.compile(f, dynamic=False, fullgraph=True)


def plain_impls() -> dict:
    out = {OURS: lambda: (lambda x, w: torch.ops.addrmsnorm.norm.default(x, None, w, EPS)[0])}
    out["torch.compile (same math)"] = _compiled_norm
    out["F.rms_norm (eager)"] = lambda: (lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS))

    def flashinfer():
        from flashinfer.norm import rmsnorm
        return lambda x, w: rmsnorm(x, w, EPS)

    def liger():
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        return lambda x, w: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)

    def quack():
        from quack.rmsnorm import rmsnorm_fwd
        return lambda x, w: rmsnorm_fwd(x, w, eps=EPS)[0]

    out["FlashInfer (norm.cuh)"] = flashinfer
    out["Liger"] = liger
    out["Quack"] = quack
    return out


def _live(makers: dict, log) -> tuple[dict, dict]:
    live, missing = {}, {}
    for name, make in makers.items():
        try:
            live[name] = make()
        except Exception as e:  # noqa: BLE001 - a peer that does not import is reported, not fatal
            missing[name] = f"{type(e).__name__}: {str(e)[:80]}"
    for name, why in missing.items():
        log(f"plain rows: not measured: {name}: {why}")
    return live, missing


def _y_note(y, x, w) -> str:
    ref = rmsnorm_ref(x, w, EPS)
    tol = TOLERANCES[x.dtype]
    err = ((y.double() - ref.y).abs() / (tol.atol + tol.rtol * ref.y.abs())).max().item()
    return "" if err <= 1.0 else f"y off the reference by {err:.1f}x the tolerance"


def _bandwidth(rows, base, nbytes, roofline, calls, n_sets, note=""):
    kept = []
    t = time_graph(lambda i: kept.append(calls[i]()), n_sets)
    gbs = nbytes / t.median_us / 1e3
    rows.append(dict(base, us_median=t.median_us, us_min=t.min_us, us_max=t.max_us, gbs=gbs,
                     pct_roofline=100 * gbs / roofline, note=note))


def _fail(rows, base, e):
    rows.append(dict(base, note=f"failed: {type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"))


def _measured(rows, base, nbytes, roofline, n_sets, setup):
    """One row: setup() gives the calls on their buffer sets and the correctness note; a failure is reported in
    the row, not raised. The buffers are freed before the next row."""
    try:
        calls, note = setup()
        _bandwidth(rows, base, nbytes, roofline, calls, n_sets, note)
    except Exception as e:  # noqa: BLE001 - a failing implementation is reported, not fatal
        _fail(rows, base, e)
    calls = None
    torch.cuda.empty_cache()


def _chained(rows, base, setup):
    """One decode-chain row: setup() gives chain(_), CHAIN dependent calls to capture in one graph, and a correctness
    note (None: the row carries none); µs per call. A failure is reported in the row, not raised."""
    try:
        chain, note = setup()
        t = time_graph(chain, 1)
        row = dict(base, us_median=t.median_us / CHAIN, us_min=t.min_us / CHAIN, us_max=t.max_us / CHAIN)
        rows.append(row if note is None else dict(row, note=note))
    except Exception as e:  # noqa: BLE001 - a failing implementation is reported, not fatal
        _fail(rows, base, e)


def _gbs_line(title: str, rows: list[dict]) -> str:
    """One log line of bandwidth rows: each implementation's GB/s, or why it has none."""
    return f"{title}: " + "; ".join(f"{r['impl']} {r['gbs']:.0f} GB/s" if r.get("gbs") else f"{r['impl']} {r.get('note')}"
                                    for r in rows)


def _us_line(title: str, rows: list[dict]) -> str:
    """One log line of decode-chain rows: each implementation's µs per call, or why it has none."""
    return f"{title}: " + "; ".join(f"{r['impl']} {r['us_median']:.2f} us" if r.get("us_median")
                                    else f"{r['impl']} {r.get('note')}" for r in rows)


def run_plain(roofline: float, log=print, shapes=None, dtypes=("bf16", "fp16")) -> list[dict]:
    impls, _ = _live(plain_impls(), log)
    rows = []
    for dname in dtypes:
        xd = DTYPES[dname]
        for N, H in (shapes or bulk_shapes()):
            nbytes = 2 * xd.itemsize * N * H + xd.itemsize * H
            n_sets = sets_for_cold_l2(nbytes)
            gen = torch.Generator(device="cuda").manual_seed(N + H)
            w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(xd)
            for name, fn in impls.items():
                def setup(fn=fn, n_sets=n_sets):
                    sets = [torch.randn(N, H, device="cuda", generator=gen).to(xd) for _ in range(n_sets)]
                    return [lambda x=x: fn(x, w) for x in sets], _y_note(fn(sets[0], w), sets[0], w)
                _measured(rows, dict(section="plain", impl=name, N=N, H=H, x_dtype=dname, residual_dtype="-"),
                          nbytes, roofline, n_sets, setup)
            log(_gbs_line(f"plain {N}x{H} {dname}", [r for r in rows if (r["N"], r["H"], r["x_dtype"]) == (N, H, dname)]))
    return rows


# ----- QK norm ---------------------------------------------------------------------------------------

def _qkv(T, gen, xd=torch.bfloat16):
    nq, nk, D = QK_HEADS
    return torch.randn(T, (nq + 2 * nk) * D, device="cuda", generator=gen).to(xd)


def _views(qkv):
    nq, nk, D = QK_HEADS
    T = qkv.shape[0]
    return qkv[:, :nq * D].view(T, nq, D), qkv[:, nq * D:(nq + nk) * D].view(T, nk, D)


def qk_impls(pdl: bool = False) -> dict:
    """name -> make() -> step(qkv, wq, wk): q's and k's heads of qkv normalized in place."""
    nq, nk, D = QK_HEADS

    def ours():
        return lambda qkv, wq, wk: addrmsnorm.qk_rmsnorm_(qkv, wq, wk, EPS, num_q_heads=nq, num_kv_heads=nk,
                                                          head_dim=D, pdl=pdl)

    def compiled():
        def f(qkv, wq, wk):
            q, k = _views(qkv)
            for v, w in ((q, wq), (k, wk)):
                vf = v.float()
                v.copy_((vf * torch.rsqrt(vf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(v.dtype))
        return torch.compile(f, dynamic=False, fullgraph=True)

    def flashinfer():
        from flashinfer.norm import rmsnorm

        def step(qkv, wq, wk):
            q, k = _views(qkv)
            rmsnorm(q, wq, EPS, out=q, enable_pdl=pdl)
            rmsnorm(k, wk, EPS, out=k, enable_pdl=pdl)
        return step

    out = {OURS_PDL if pdl else OURS: ours, "FlashInfer (norm.cuh)" + (" (PDL)" if pdl else ""): flashinfer}
    if not pdl:
        out["torch.compile (same math)"] = compiled
    return out


def run_qk(roofline: float, log=print) -> list[dict]:
    nq, nk, D = QK_HEADS
    rows = []
    impls, _ = _live(qk_impls(), log)
    for T in QK_BANDWIDTH_T:
        nbytes = 2 * 2 * T * (nq + nk) * D + 2 * 2 * D
        n_sets = sets_for_cold_l2(nbytes)
        gen = torch.Generator(device="cuda").manual_seed(T)
        wq, wk = ((1 + 0.1 * torch.randn(D, device="cuda", generator=gen)).to(torch.bfloat16) for _ in range(2))
        for name, step in impls.items():
            base = dict(section="qk_norm", impl=name, N=T, H=D, x_dtype="bf16", residual_dtype="-")
            try:
                sets = [_qkv(T, gen) for _ in range(n_sets)]
                check = sets[0].clone()
                step(check, wq, wk)
                q0, k0 = _views(sets[0])
                q1, k1 = _views(check)
                note = _y_note(q1, q0, wq) or _y_note(k1, k0, wk)
                if not torch.equal(check[:, (nq + nk) * D:], sets[0][:, (nq + nk) * D:]):
                    note = "v was written"
                _bandwidth(rows, base, nbytes, roofline, [lambda s=s: step(s, wq, wk) for s in sets], n_sets, note)
            except Exception as e:  # noqa: BLE001
                _fail(rows, base, e)
            finally:
                sets = None
        log(f"qk norm T={T}: " + "; ".join(f"{r['impl']} {r['us_median']:.1f} us ({r['pct_roofline']:.0f}%)"
                                          if r.get("gbs") else f"{r['impl']} {r.get('note')}"
                                          for r in rows if r["N"] == T))
    for T in QK_LATENCY_T:  # a decode chain: CHAIN dependent calls on one buffer, in one graph
        gen = torch.Generator(device="cuda").manual_seed(T)
        wq, wk = ((1 + 0.1 * torch.randn(D, device="cuda", generator=gen)).to(torch.bfloat16) for _ in range(2))
        chain_impls = {**impls, **_live(qk_impls(pdl=True), log)[0]}
        for name, step in chain_impls.items():
            base = dict(section="qk_latency", impl=name, N=T, H=D, x_dtype="bf16", residual_dtype="-")
            try:
                qkv = _qkv(T, gen)

                def chain(_):
                    for _ in range(CHAIN):
                        step(qkv, wq, wk)
                t = time_graph(chain, 1)
                rows.append(dict(base, us_median=t.median_us / CHAIN, us_min=t.min_us / CHAIN,
                                 us_max=t.max_us / CHAIN))
            except Exception as e:  # noqa: BLE001
                _fail(rows, base, e)
        log(f"qk norm chain T={T}: " + "; ".join(f"{r['impl']} {r['us_median']:.2f} us" if r.get("us_median")
                                                 else f"{r['impl']} {r.get('note')}"
                                                 for r in rows if r["section"] == "qk_latency" and r["N"] == T))
    return rows


# ----- the plain norm's static fp8 ------------------------------------------------------------------------

def quant_impls() -> dict:
    """name -> make() -> fn(x, w, scale) -> q."""
    def ours():
        return lambda x, w, s: addrmsnorm.rmsnorm_quant(x, w, EPS, quant_dtype=torch.float8_e4m3fn, scale=s)[0]

    def compiled():
        def f(x, w, s):
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()
            return (y * (1.0 / s)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return torch.compile(f, dynamic=False, fullgraph=True)

    def flashinfer():
        from flashinfer.norm import rmsnorm_quant

        def fn(x, w, s):
            q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
            rmsnorm_quant(q, x, w, s, EPS)
            return q
        return fn

    return {OURS: ours, "torch.compile (same math)": compiled, "FlashInfer (norm.cuh)": flashinfer}


def run_quant(roofline: float, log=print) -> list[dict]:
    impls, _ = _live(quant_impls(), log)
    rows = []
    for H in QUANT_H:
        N = max(16384, BULK_ELEMENTS // H)
        nbytes = 3 * N * H + 2 * H + 4
        n_sets = sets_for_cold_l2(nbytes)
        gen = torch.Generator(device="cuda").manual_seed(H)
        w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(torch.bfloat16)
        scale = torch.tensor([0.01], device="cuda")
        for name, fn in impls.items():
            base = dict(section="plain_quant", mode="static fp8", impl=name, N=N, H=H, x_dtype="bf16",
                        residual_dtype="-")
            try:
                sets = [(3 * torch.randn(N, H, device="cuda", generator=gen)).to(torch.bfloat16)
                        for _ in range(n_sets)]
                q = fn(sets[0], w, scale)
                q_ref, _ = quantize_ref(rmsnorm_ref(sets[0], w, EPS).y.float(), torch.float8_e4m3fn, scale=scale)
                differ = (q.float() != q_ref.float()).float().mean().item()
                note = "" if differ < 1e-3 else f"q differs from quant(the reference's y) in {100 * differ:.2f}%"
                _bandwidth(rows, base, nbytes, roofline, [lambda x=x: fn(x, w, scale) for x in sets], n_sets, note)
            except Exception as e:  # noqa: BLE001
                _fail(rows, base, e)
            finally:
                sets = None
        log(f"plain quant {N}x{H}: " + "; ".join(f"{r['impl']} {r['gbs']:.0f} GB/s" if r.get("gbs")
                                                 else f"{r['impl']} {r.get('note')}"
                                                 for r in rows if r["H"] == H))
    return rows


# ----- the plain norm's decode chain -----------------------------------------------------------------------

DECODE_H = (2048, 4096, 8192)  # one row a call, as a decoder's norms at batch 1


def decode_impls(pdl: bool) -> dict:
    """name -> make() -> fn(x, w, out): the plain norm of x written to out."""
    suffix = " (PDL)" if pdl else ""

    def ours():
        return lambda x, w, out: addrmsnorm.rmsnorm(x, w, EPS, out=out, pdl=pdl)

    def flashinfer():
        from flashinfer.norm import rmsnorm
        return lambda x, w, out: rmsnorm(x, w, EPS, out=out, enable_pdl=pdl)

    return {OURS + suffix: ours, "FlashInfer (norm.cuh)" + suffix: flashinfer}


def run_decode(log=print, hs=DECODE_H) -> list[dict]:
    """The plain norm's decode chain at 1 x H, bf16: CHAIN dependent calls in one graph, each reading the row the
    call before wrote (two buffers in turn); µs per call, with and without PDL."""
    rows = []
    for H in hs:
        gen = torch.Generator(device="cuda").manual_seed(H)
        w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(torch.bfloat16)
        for pdl in (False, True):
            for name, fn in _live(decode_impls(pdl), log)[0].items():
                def setup(fn=fn):
                    bufs = [torch.randn(1, H, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(2)]

                    def chain(_):
                        for i in range(CHAIN):
                            fn(bufs[i % 2], w, bufs[1 - i % 2])
                    return chain, _y_note(fn(bufs[0], w, bufs[1]), bufs[0], w)
                _chained(rows, dict(section="plain_latency", impl=name, N=1, H=H, x_dtype="bf16", residual_dtype="-"),
                         setup)
        log(_us_line(f"plain chain 1x{H}", [r for r in rows if r["H"] == H]))
    return rows


def run(roofline: float, log=print, shapes=None) -> list[dict]:
    rows = run_plain(roofline, log, shapes)
    rows += run_decode(log)
    rows += run_qk(roofline, log)
    rows += run_quant(roofline, log)
    return rows


# ----- tables ------------------------------------------------------------------------------------------

def _names(sel):
    names = []
    for r in sel:
        if r["impl"] not in names:
            names.append(r["impl"])
    return sorted(names, key=lambda n: (not n.startswith(OURS), n))


def _ratio(by_impl: dict, key: str, better_high: bool) -> str:
    ours = [r[key] for n, r in by_impl.items() if n.startswith(OURS) and r.get(key)]
    peers = [r[key] for n, r in by_impl.items() if not n.startswith(OURS) and r.get(key) and not r.get("note")]
    if not ours or not peers:
        return ""
    if better_high:
        return f"{max(ours) / max(peers):.2f}×"
    return f"{min(ours) / min(peers):.2f}×"


def _grid(sel, key_fn, label, value="gbs", better_high=True, fmt=None) -> str:
    names = _names(sel)
    keys = []
    for r in sel:
        if key_fn(r) not in keys:
            keys.append(key_fn(r))
    by = {(key_fn(r), r["impl"]): r for r in sel}
    ratio = "ours / fastest peer" + ("" if better_high else " (time)")
    out = [f"| {label} | " + " | ".join(names) + f" | {ratio} |", "|---|" + "---|" * (len(names) + 1)]
    for k in keys:
        cells = []
        for n in names:
            r = by.get((k, n))
            if fmt is None:
                cells.append(_cell(r))
            else:
                cells.append("n/a" if r is None else (fmt(r) if r.get(value) is not None else r.get("note") or "failed"))
        out.append(f"| {k} | " + " | ".join(cells) + f" | {_ratio({n: by[(k, n)] for n in names if (k, n) in by}, value, better_high)} |")
    return "\n".join(out)


def chain_grid(sel, key_fn, label) -> str:
    """A decode chain's table: µs per call by implementation, and ours over the fastest peer's time."""
    return _grid(sel, key_fn, label, "us_median", False, lambda r: f"{r['us_median']:.2f}")


def section_tables(rows: list[dict], specs) -> str:
    """The report's tables of some sections, in the order of specs: (section, title, key_fn, label, chain), a
    bandwidth grid (GB/s · % of roofline · µs), or with chain a decode chain's (µs per call); a section without
    rows is left out."""
    parts = []
    for section, title, key_fn, label, chain in specs:
        sel = [r for r in rows if r["section"] == section]
        if sel:
            parts += [title, "", (chain_grid if chain else _grid)(sel, key_fn, label), ""]
    return "\n".join(parts)


def table(rows: list[dict]) -> str:
    return section_tables(rows, (
        ("plain", "Plain RMSNorm, bulk (GB/s · % of roofline · µs):",
         lambda r: f"{r['N']} × {r['H']} {r['x_dtype']}", "N × H, dtype", False),
        ("plain_latency", f"Plain RMSNorm, decode chain of {CHAIN} dependent calls at one row, bf16 (µs per call):",
         lambda r: f"1 × {r['H']}", "N × H", True),
        ("qk_norm", f"QK norm, {QK_HEADS[0]} q + {QK_HEADS[1]} kv heads × {QK_HEADS[2]} of a fused QKV buffer, in "
         "place (GB/s · % of roofline · µs):", lambda r: f"T = {r['N']}", "tokens", False),
        ("qk_latency", f"QK norm, decode chain of {CHAIN} dependent calls (µs per call):",
         lambda r: f"T = {r['N']}", "tokens", True),
        ("plain_quant", "Plain norm, static fp8 output (GB/s · % of roofline · µs):",
         lambda r: f"{r['N']} × {r['H']}", "N × H", False)))
