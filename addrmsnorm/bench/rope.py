"""Rows of the report for the QK norm with the rotation (RoPE): qk_rmsnorm_rope_ in place on a fused QKV
buffer, beside the two-step paths it replaces (our QK norm, then the rotation compiled by torch.compile;
torch.compile of the norm and the rotation together) and our QK norm alone (the pass without the rotation).

Byte model (bytes the one pass must move at the least, per call; xs the activations' bytes):

    forward      read and write q's and k's heads             2 * xs per element of q and k, in place
                 (v untouched); the angles and weights are not counted (a cache row is 1/80 of a
                 token's q and k at 32 + 8 heads of 128)
    backward     read x and dy, write dx                      3 * xs per element of q and k
    with v       read and write q's, k's and v's heads        2 * xs per element of q, k and v, in place

Shapes: bf16, NeoX rotation over the whole head, angles by positions (random, as a batch of sequences) into
an fp32 cos_sin_cache of 131072 positions, or as HF's cos and sin (bf16, a row a token). Bulk: T = 8192 and
65536 tokens of 32 q + 8 kv heads of 128 (Qwen3-8B, Llama-3-8B), 16384 of 16 + 8 heads of 256 (Gemma 3-like)
and 32768 of 64 + 4 heads of 128 (a wide model's grouped query attention): issue 66's shapes;
decode: T = 1 and 64 at 32 + 8 × 128, a chain of CHAIN dependent in-place calls in one CUDA graph (µs per
call; PDL where the implementation has it). Backward at T = 8192: the functional form's first-order backward
(the backward operator with the rotation, one pass for q's heads and one for k's, the cache's rows gathered
first), beside the same gradient in torch operations (its create_graph form), eager and compiled. With v (Gemma
4's v_norm): T = 16384 of 16 + 8 + 8 heads of 256, q, k and v normalized in one launch (num_v_heads), beside our
two launches (the rotation's call, then rmsnorm_ of v's heads with no weight) and torch.compile of all three.

Every implementation is first checked against the one reference (reference.qk_rmsnorm_rope_ref) and marked
where it differs; v must come back untouched.

Timing: CUDA-graph replay over rotating buffer sets (cold L2 by size; timing.py).
"""

from __future__ import annotations

import torch

import addrmsnorm
from addrmsnorm import autograd
from addrmsnorm.reference import TOLERANCES, qk_rmsnorm_rope_ref, rmsnorm_ref

from .plain import CHAIN, OURS, _bandwidth, _fail, _live, _measured
from .timing import sets_for_cold_l2, time_graph

EPS = 1e-6
MAX_POSITION = 131072  # the cache's rows (random positions in it)
BULK = ((8192, 32, 8, 128), (65536, 32, 8, 128), (16384, 16, 8, 256), (32768, 64, 4, 128))
DECODE = ((1, 32, 8, 128), (64, 32, 8, 128))
BACKWARD = ((8192, 32, 8, 128), (8192, 16, 8, 256))
V_NORM = ((16384, 16, 8, 8, 256),)  # (T, q, kv and v heads, head_dim)
OURS_CACHE = OURS + ", cache"
OURS_COS_SIN = OURS + ", cos/sin"
QK_ALONE = "QK norm alone (ours, no rotation)"
TWO_STEP = "our QK norm, then torch.compile's rotation"
COMPILED = "torch.compile (norm and rotation)"
V_ONE = OURS + ", q, k and v in one launch"
V_TWO = OURS + ", the rotation's call, then rmsnorm_ of v"
V_COMPILED = "torch.compile (the norms and the rotation)"


def _views(qkv, nq, nk, D):
    T = qkv.shape[0]
    return qkv[:, :nq * D].view(T, nq, D), qkv[:, nq * D:(nq + nk) * D].view(T, nk, D)


def _rotate(v, c, s):
    """v (T, heads, D) rotated by NeoX pairs in fp32, c and s (T, D) fp32."""
    a, b = v.chunk(2, dim=-1)
    return v * c[:, None, :] + torch.cat([-b, a], dim=-1) * s[:, None, :]


def _angles(positions, cache):
    """A token's NeoX angles by column, fp32 (the functional form's own gather of the cache's rows)."""
    return autograd.rope_angles(positions, cache, None, None, cache.shape[1], 0)


def _summary(title: str, rows: list[dict]) -> str:
    """One log line: each implementation's time (and share of the roofline), or why it has none."""
    def one(r):
        if r.get("gbs"):
            return f"{r['impl']} {r['us_median']:.1f} us ({r['pct_roofline']:.0f}%)"
        return f"{r['impl']} {r['us_median']:.2f} us" if r.get("us_median") else f"{r['impl']} {r.get('note')}"
    return f"{title}: " + "; ".join(one(r) for r in rows)


def impls(nq, nk, D, pdl: bool = False) -> dict:
    """name -> make() -> step(qkv, wq, wk, positions, cache, cos, sin): q's and k's heads normalized and rotated
    in place (QK_ALONE: normalized only), or returned as (q, k) (the torch.compile paths)."""
    suffix = " (PDL)" if pdl else ""
    heads = dict(num_q_heads=nq, num_kv_heads=nk, head_dim=D)

    def ours_cache():
        return lambda qkv, wq, wk, p, cache, c, s: addrmsnorm.qk_rmsnorm_rope_(
            qkv, wq, wk, EPS, **heads, positions=p, cos_sin_cache=cache, pdl=pdl, check_positions=False)

    def ours_cos_sin():
        return lambda qkv, wq, wk, p, cache, c, s: addrmsnorm.qk_rmsnorm_rope_(qkv, wq, wk, EPS, **heads, cos=c, sin=s,
                                                                                pdl=pdl)

    def alone():
        return lambda qkv, wq, wk, p, cache, c, s: addrmsnorm.qk_rmsnorm_(qkv, wq, wk, EPS, **heads, pdl=pdl)

    # The torch.compile paths return q and k as new tensors, as HF's apply_rotary_pos_emb does: the same bytes (q and
    # k read, and written once), without the copy back into qkv that an in-place form compiles to.
    def two_step():
        def rotate(qkv, p, cache):
            c, s = _angles(p, cache)
            return tuple(_rotate(v.float(), c, s).to(v.dtype) for v in _views(qkv, nq, nk, D))
        rotate = torch.compile(rotate, dynamic=False, fullgraph=True)

        def step(qkv, wq, wk, p, cache, c, s):
            addrmsnorm.qk_rmsnorm_(qkv, wq, wk, EPS, **heads, pdl=pdl)
            return rotate(qkv, p, cache)
        return step

    def compiled():
        f = torch.compile(lambda qkv, wq, wk, p, cache: _torch_qk(qkv, wq, wk, p, cache, nq, nk, D),
                          dynamic=False, fullgraph=True)
        return lambda qkv, wq, wk, p, cache, c, s: f(qkv, wq, wk, p, cache)

    out = {OURS_CACHE + suffix: ours_cache, OURS_COS_SIN + suffix: ours_cos_sin, QK_ALONE + suffix: alone,
           TWO_STEP + suffix: two_step}
    if not pdl:
        out[COMPILED] = compiled
    return out


def _torch_norm(v, w=None):
    """The norm in torch operations (the torch.compile paths), in fp32; returned in v's dtype when not weighted
    (else left in fp32 for the rotation)."""
    vf = v.float()
    n = vf * torch.rsqrt(vf.pow(2).mean(-1, keepdim=True) + EPS)
    return n.to(v.dtype) if w is None else n * w.float()


def _torch_qk(qkv, wq, wk, p, cache, nq, nk, D):
    """q's and k's heads normalized and rotated in torch operations, as new tensors (HF's apply_rotary_pos_emb)."""
    c, s = _angles(p, cache)
    return tuple(_rotate(_torch_norm(v, w), c, s).to(v.dtype) for v, w in zip(_views(qkv, nq, nk, D), (wq, wk)))


def _inputs(T, nq, nk, D, gen, xd=torch.bfloat16):
    qkv = torch.randn(T, (nq + 2 * nk) * D, device="cuda", generator=gen).to(xd)
    positions = torch.randperm(MAX_POSITION, device="cuda", generator=gen)[:T] if T <= MAX_POSITION else \
        torch.randint(0, MAX_POSITION, (T,), device="cuda", generator=gen)
    return qkv, positions


def _cache(D, gen):
    inv = 1.0 / (1e6 ** (torch.arange(0, D, 2, device="cuda", dtype=torch.float32) / D))
    t = torch.arange(MAX_POSITION, device="cuda", dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cat([t.cos(), t.sin()], dim=-1)


def _note(name, step, qkv, wq, wk, p, cache, c, s, nq, nk, D) -> str:
    """The step's q and k against the reference of the angles it was given (HF's bf16 cos and sin, or the cache);
    QK_ALONE's against the norm alone (no rotation: cos 1, sin 0); TWO_STEP's with a tolerance for the norm's
    rounding before its rotation too (half an ulp of each of a pair, times its angle's factor): held to one
    rounding, as the one-pass paths are, it was hundreds of tolerances off)."""
    got = qkv.clone()
    returned = step(got, wq, wk, p, cache, c, s)
    torch.cuda.synchronize()
    returned = returned if name.startswith((TWO_STEP, COMPILED)) else None  # the paths that return q and k
    if name.startswith(QK_ALONE):
        want = qk_rmsnorm_rope_ref(qkv, wq, wk, EPS, nq, nk, D, cos=torch.ones_like(c), sin=torch.zeros_like(s))
    elif name.startswith(TWO_STEP):  # the rotation of the contract's norm (see below for its first rounding)
        c32, s32 = _angles(p, cache)
        norms = qk_rmsnorm_rope_ref(qkv, wq, wk, EPS, nq, nk, D, cos=torch.ones_like(c), sin=torch.zeros_like(s))
        want = tuple(_rotate(n, c32.double(), s32.double()) for n in norms)
    elif name.startswith(OURS_COS_SIN):
        want = qk_rmsnorm_rope_ref(qkv, wq, wk, EPS, nq, nk, D, cos=c, sin=s)
    else:
        want = qk_rmsnorm_rope_ref(qkv, wq, wk, EPS, nq, nk, D, positions=p, cos_sin_cache=cache)
    tol = TOLERANCES[qkv.dtype]
    for part, g, w in zip(("q", "k"), returned or _views(got, nq, nk, D), want):
        bound = tol.atol + tol.rtol * w.double().abs()
        if name.startswith(TWO_STEP):  # the norm rounded before the rotation: up to half an ulp of each of a pair
            n = norms[0 if part == "q" else 1].abs()
            a, b = n.chunk(2, dim=-1)
            bound = bound + tol.rtol * (n * c32.double().abs()[:, None, :] + torch.cat([b, a], dim=-1)
                                        * s32.double().abs()[:, None, :])
        err = ((g.double() - w.double()).abs() / bound).max().item()
        if err > 1.0:
            return f"{part} off the reference by {err:.1f}x the tolerance"
    if returned is None and not torch.equal(got[:, (nq + nk) * D:], qkv[:, (nq + nk) * D:]):
        return "v was written"
    return ""


def _weights(D, gen):
    return [(1 + 0.1 * torch.randn(D, device="cuda", generator=gen)).to(torch.bfloat16) for _ in range(2)]


def _shape(T, nq, nk, D):
    return f"T = {T}, {nq} + {nk} × {D}"


def run_forward(roofline: float, log=print, shapes=BULK) -> list[dict]:
    rows = []
    for T, nq, nk, D in shapes:
        nbytes = 2 * 2 * T * (nq + nk) * D
        n_sets = sets_for_cold_l2(nbytes)
        gen = torch.Generator(device="cuda").manual_seed(T + D)
        wq, wk = _weights(D, gen)
        cache = _cache(D, gen)
        for name, step in _live(impls(nq, nk, D), log)[0].items():
            base = dict(section="rope", impl=name, N=T, H=_shape(T, nq, nk, D), x_dtype="bf16", residual_dtype="-")
            try:
                sets = [_inputs(T, nq, nk, D, gen) for _ in range(n_sets)]
                angles = [tuple(a.to(torch.bfloat16) for a in _angles(p, cache)) for _, p in sets]
                note = _note(name, step, sets[0][0], wq, wk, sets[0][1], cache, *angles[0], nq, nk, D)
                calls = [lambda s=s, a=a: step(s[0], wq, wk, s[1], cache, a[0], a[1]) for s, a in zip(sets, angles)]
                _bandwidth(rows, base, nbytes, roofline, calls, n_sets, note)
            except Exception as e:  # noqa: BLE001 - a failing implementation is reported, not fatal
                _fail(rows, base, e)
            finally:
                sets = angles = None
            torch.cuda.empty_cache()
        log(_summary(f"rope {_shape(T, nq, nk, D)}", [r for r in rows if r["H"] == _shape(T, nq, nk, D)]))
    return rows


def run_decode(log=print, shapes=DECODE) -> list[dict]:
    rows = []
    for T, nq, nk, D in shapes:
        gen = torch.Generator(device="cuda").manual_seed(T + D)
        wq, wk = _weights(D, gen)
        cache = _cache(D, gen)
        makers = {**impls(nq, nk, D), **impls(nq, nk, D, pdl=True)}
        for name, step in _live(makers, log)[0].items():
            base = dict(section="rope_latency", impl=name, N=T, H=_shape(T, nq, nk, D), x_dtype="bf16",
                        residual_dtype="-")
            try:
                qkv, p = _inputs(T, nq, nk, D, gen)
                c, s = (a.to(torch.bfloat16) for a in _angles(p, cache))

                def chain(_):
                    for _ in range(CHAIN):
                        step(qkv, wq, wk, p, cache, c, s)
                t = time_graph(chain, 1)
                rows.append(dict(base, us_median=t.median_us / CHAIN, us_min=t.min_us / CHAIN,
                                 us_max=t.max_us / CHAIN))
            except Exception as e:  # noqa: BLE001
                _fail(rows, base, e)
        log(_summary(f"rope chain {_shape(T, nq, nk, D)}", [r for r in rows if r["H"] == _shape(T, nq, nk, D)]))
    return rows


def run_backward(roofline: float, log=print, shapes=BACKWARD) -> list[dict]:
    from addrmsnorm import functional

    rows = []
    for T, nq, nk, D in shapes:
        nbytes = 3 * 2 * T * (nq + nk) * D
        n_sets = sets_for_cold_l2(nbytes)
        gen = torch.Generator(device="cuda").manual_seed(T + D + 1)
        wq, wk = _weights(D, gen)
        cache = _cache(D, gen)

        def torch_ops(q, k, dq, dk, p, c16=None, s16=None):
            c, s = autograd.rope_angles(p, cache, None, None, D, 0, inside=True)
            return (autograd.qk_rope_backward(q, wq, dq, EPS, 0.0, c, s, D, 0),
                    autograd.qk_rope_backward(k, wk, dk, EPS, 0.0, c, s, D, 0))

        # The positions are rows of the cache (the functional form's backward knows it once they are checked)
        def ours(q, k, dq, dk, p, c16, s16):  # the functional form's first-order backward, a cache's angles
            c, s = autograd.rope_angles(p, cache, None, None, D, 0, inside=True)
            return tuple(functional._rope_part_backward(x, w, dy, c, s, EPS, 0.0, D, 0, True)
                         for x, w, dy in ((q, wq, dq), (k, wk, dk)))

        def ours_cos_sin(q, k, dq, dk, p, c16, s16):  # the same with HF's bf16 cos and sin, as hf.patch trains
            c, s = autograd.rope_angles(None, None, c16, s16, D, 0)
            return tuple(functional._rope_part_backward(x, w, dy, c, s, EPS, 0.0, D, 0, True)
                         for x, w, dy in ((q, wq, dq), (k, wk, dk)))

        variants = {OURS_CACHE + " (backward operator, one pass a part)": ours,
                    OURS_COS_SIN + " (backward operator, one pass a part)": ours_cos_sin,
                    "torch operations (the create_graph backward)": torch_ops,
                    "torch.compile (the torch operations)": torch.compile(torch_ops, dynamic=False, fullgraph=True)}
        for name, fn in variants.items():
            base = dict(section="rope_backward", impl=name, N=T, H=_shape(T, nq, nk, D), x_dtype="bf16",
                        residual_dtype="-")
            try:
                sets = []
                for _ in range(n_sets):
                    qkv, p = _inputs(T, nq, nk, D, gen)
                    q, k = (t.contiguous() for t in _views(qkv, nq, nk, D))
                    c16, s16 = (a.to(torch.bfloat16) for a in _angles(p, cache))
                    sets.append((q, k, torch.randn_like(q), torch.randn_like(k), p, c16, s16))
                _bandwidth(rows, base, nbytes, roofline, [lambda s=s: fn(*s) for s in sets], n_sets)
            except Exception as e:  # noqa: BLE001
                _fail(rows, base, e)
            finally:
                sets = None
            torch.cuda.empty_cache()
        log(_summary(f"rope backward {_shape(T, nq, nk, D)}", [r for r in rows if r["H"] == _shape(T, nq, nk, D)]))
    return rows


def v_impls(nq, nk, nv, D) -> dict:
    """name -> make() -> step(qkv, wq, wk, positions, cache): q's and k's heads normalized and rotated and v's
    normalized with no weight, in place, or returned as (q, k, v) (V_COMPILED)."""
    heads = dict(num_q_heads=nq, num_kv_heads=nk, head_dim=D)
    v0, v1 = (nq + nk) * D, (nq + nk + nv) * D

    def one():
        return lambda qkv, wq, wk, p, cache: addrmsnorm.qk_rmsnorm_rope_(
            qkv, wq, wk, EPS, **heads, positions=p, cos_sin_cache=cache, check_positions=False, num_v_heads=nv)

    def two():
        def step(qkv, wq, wk, p, cache):
            addrmsnorm.qk_rmsnorm_rope_(qkv, wq, wk, EPS, **heads, positions=p, cos_sin_cache=cache,
                                        check_positions=False)
            addrmsnorm.rmsnorm_(qkv[:, v0:v1].unflatten(1, (nv, D)), None, EPS)
        return step

    def compiled():
        def f(qkv, wq, wk, p, cache):
            return (*_torch_qk(qkv, wq, wk, p, cache, nq, nk, D), _torch_norm(qkv[:, v0:v1].unflatten(1, (nv, D))))
        return torch.compile(f, dynamic=False, fullgraph=True)

    return {V_ONE: one, V_TWO: two, V_COMPILED: compiled}


def _v_note(step, qkv, wq, wk, p, cache, nq, nk, nv, D) -> str:
    """q's and k's heads against the reference, v's against the weightless norm's (float64), each within the
    library's tolerance; the columns after v untouched."""
    got = qkv.clone()
    returned = step(got, wq, wk, p, cache)
    torch.cuda.synchronize()
    returned = returned if isinstance(returned, tuple) else None  # the compiled path's (q, k, v); ours return qkv
    v0, v1 = (nq + nk) * D, (nq + nk + nv) * D
    want = (*qk_rmsnorm_rope_ref(qkv, wq, wk, EPS, nq, nk, D, positions=p, cos_sin_cache=cache),
            rmsnorm_ref(qkv[:, v0:v1].unflatten(1, (nv, D)), None, EPS).y)
    parts = returned if returned is not None else (*_views(got, nq, nk, D), got[:, v0:v1].unflatten(1, (nv, D)))
    tol = TOLERANCES[qkv.dtype]
    for part, g, w in zip("qkv", parts, want):
        w = w.double()
        err = ((g.double() - w).abs() / (tol.atol + tol.rtol * w.abs())).max().item()
        if err > 1.0:
            return f"{part} off the reference by {err:.1f}x the tolerance"
    if returned is None and not torch.equal(got[:, v1:], qkv[:, v1:]):
        return "the columns after v were written"
    return ""


def run_v_norm(roofline: float, log=print, shapes=V_NORM) -> list[dict]:
    rows = []
    for T, nq, nk, nv, D in shapes:
        shape = f"T = {T}, {nq} + {nk} + {nv} × {D}"
        nbytes = 2 * 2 * T * (nq + nk + nv) * D
        n_sets = sets_for_cold_l2(nbytes)
        gen = torch.Generator(device="cuda").manual_seed(T + D + 2)
        wq, wk = _weights(D, gen)
        cache = _cache(D, gen)
        for name, step in _live(v_impls(nq, nk, nv, D), log)[0].items():
            base = dict(section="rope_v", impl=name, N=T, H=shape, x_dtype="bf16", residual_dtype="-")

            def setup(step=step):
                sets = [_inputs(T, nq, nk, D, gen) for _ in range(n_sets)]  # q, k, then v's nk heads
                return ([lambda s=s: step(s[0], wq, wk, s[1], cache) for s in sets],
                        _v_note(step, sets[0][0], wq, wk, sets[0][1], cache, nq, nk, nv, D))
            _measured(rows, base, nbytes, roofline, n_sets, setup)
        log(_summary(f"rope with v {shape}", [r for r in rows if r["H"] == shape]))
    return rows


def run(roofline: float, log=print) -> list[dict]:
    return run_forward(roofline, log) + run_decode(log) + run_backward(roofline, log) + run_v_norm(roofline, log)


# ----- tables ------------------------------------------------------------------------------------------

def _best(by: dict, names) -> float | None:
    vals = [by[n]["us_median"] for n in names if n in by and by[n].get("us_median") and not by[n].get("note")]
    return min(vals) if vals else None


def _table(sel, value_fmt, targets) -> str:
    names = []
    for r in sel:
        if r["impl"] not in names:
            names.append(r["impl"])
    keys = list(dict.fromkeys(r["H"] for r in sel))
    by = {(r["H"], r["impl"]): r for r in sel}
    head = [t[0] for t in targets]
    out = ["| shape | " + " | ".join(names + head) + " |", "|---|" + "---|" * (len(names) + len(head))]
    for k in keys:
        row = {n: by[(k, n)] for n in names if (k, n) in by}
        cells = ["n/a" if n not in row else (value_fmt(row[n]) if row[n].get("us_median") else row[n].get("note"))
                 for n in names]
        for _, num, den in targets:
            a, b = _best(row, num), _best(row, den)
            cells.append(f"{b / a:.2f}×" if a and b else "")
        out.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def _gbs(r) -> str:
    note = f" ✗ {r['note']}" if r.get("note") else ""
    return f"{r['gbs']:.0f} · {r['pct_roofline']:.0f}% · {r['us_median']:.1f} µs{note}"


def table(rows: list[dict]) -> str:
    ours = [OURS_CACHE, OURS_COS_SIN, OURS_CACHE + " (PDL)", OURS_COS_SIN + " (PDL)"]
    parts = []
    sel = [r for r in rows if r["section"] == "rope"]
    if sel:
        parts += ["QK norm with the rotation, in place on a fused QKV buffer, bf16 (GB/s · % of roofline · µs; "
                  "speed-ups are time ratios, the best of ours against each):", "",
                  _table(sel, _gbs, [("vs two-step", ours, [TWO_STEP]), ("vs torch.compile", ours, [COMPILED]),
                                     ("QK norm alone / ours", ours, [QK_ALONE])]), ""]
    sel = [r for r in rows if r["section"] == "rope_latency"]
    if sel:
        parts += [f"QK norm with the rotation, decode chain of {CHAIN} dependent calls (µs per call; ratios: the best "
                  "of ours over the other's best, with or without PDL):", "",
                  _table(sel, lambda r: f"{r['us_median']:.2f}",
                         [("ours / two-step", [TWO_STEP, TWO_STEP + " (PDL)"], ours),
                          ("ours / QK norm alone", [QK_ALONE, QK_ALONE + " (PDL)"], ours)]), ""]
    sel = [r for r in rows if r["section"] == "rope_backward"]
    if sel:
        parts += ["QK norm with the rotation, backward (GB/s by the backward's byte model · % of roofline · µs):", "",
                  _table(sel, _gbs, []), ""]
    sel = [r for r in rows if r["section"] == "rope_v"]
    if sel:
        parts += ["QK norm with the rotation and Gemma 4's v_norm, in place, bf16 (GB/s · % of roofline · µs; "
                  "time ratios of the one launch against each):", "",
                  _table(sel, _gbs, [("vs our two launches", [V_ONE], [V_TWO]),
                                     ("vs torch.compile", [V_ONE], [V_COMPILED])]), ""]
    return "\n".join(parts)
