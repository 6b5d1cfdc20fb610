"""The rotation's backward at T = 8192 (32 + 8 heads of 128, 16 + 8 of 256, bf16, the cache's angles at random
positions), its parts timed apart: the functional form's whole first-order backward (the angles' gather, then
q's pass and k's pass, each the backward operator with the rotation and its dweight reduction), the gather
(`autograd.rope_angles`), and each pass with the angles given; each against the bytes of its own heads (read x
and dy, write dx), on the bench's `time_graph` (CUDA-graph replay over buffer sets for a cold L2) and copy
roofline (`measure_roofline`). A diagnostic of our own path: no peer has these parts.

    python devtools/rope_backward_parts.py LABEL            the parts (LABEL names the tree in each line)
    python devtools/rope_backward_parts.py LABEL --ncu      one q's-pass call per shape, nothing timed (under ncu)
    python devtools/rope_backward_parts.py LABEL --sweep    the passes under candidate configs
                                                            (configs.select_rope_backward_config patched), two rounds

Under the JIT (ADDRMSNORM_BACKEND=triton) the sweep's configs are compiled as asked; the cpp backend runs the
table's kernels whatever the sweep asks."""

import inspect
import sys

import torch

from addrmsnorm import autograd, configs, functional
from addrmsnorm.bench.timing import measure_roofline, sets_for_cold_l2, time_graph

EPS = 1e-6
SHAPES = ((8192, 32, 8, 128), (8192, 16, 8, 256))
# (rows per program, warps, programs per SM, pipeline stages) by head_dim
SWEEP = {128: [(8, 2, 8, 2), (8, 2, 8, 3), (8, 2, 12, 2), (8, 2, 16, 2), (16, 2, 8, 2), (16, 4, 4, 2), (16, 4, 6, 2),
               (32, 4, 4, 2), (16, 2, 6, 3), (8, 1, 16, 2)],
         256: [(4, 2, 8, 2), (4, 2, 8, 3), (4, 2, 12, 2), (8, 2, 8, 2), (8, 4, 4, 2), (8, 4, 6, 2), (16, 4, 4, 2),
               (4, 1, 16, 2), (8, 2, 6, 3)]}
# a tree whose rope_angles takes `inside` (positions known to be the cache's rows) is timed with it
INSIDE = {"inside": True} if "inside" in inspect.signature(autograd.rope_angles).parameters else {}


def _sets(T, nq, nk, D, n_sets, g):
    wq, wk = ((1 + 0.1 * torch.randn(D, device="cuda", generator=g)).bfloat16() for _ in range(2))
    cache = torch.randn(131072, D, device="cuda", generator=g)
    sets = []
    for _ in range(n_sets):
        q = torch.randn(T, nq, D, device="cuda", generator=g).bfloat16()
        k = torch.randn(T, nk, D, device="cuda", generator=g).bfloat16()
        p = torch.randint(0, 131072, (T,), device="cuda", generator=g, dtype=torch.int64)
        c, s = autograd.rope_angles(p, cache, None, None, D, 0)
        sets.append((q, k, torch.randn_like(q), torch.randn_like(k), p, c, s))
    return wq, wk, cache, sets


def _part(D):
    return lambda x, w, dy, c, s: functional._rope_part_backward(x, w, dy, c, s, EPS, 0.0, D, 0, True)


def parts(label: str, roof: float, ncu: bool) -> None:
    for T, nq, nk, D in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(7)
        n_sets = 1 if ncu else sets_for_cold_l2(3 * 2 * T * (nq + nk) * D)
        wq, wk, cache, sets = _sets(T, nq, nk, D, n_sets, g)
        part = _part(D)
        q, k, dq, dk, p, c, s = sets[0]
        if ncu:
            torch.cuda.synchronize()
            part(q, wq, dq, c, s)
            torch.cuda.synchronize()
            continue
        dx, dw = part(q, wq, dq, c, s)
        rx, rw = autograd.qk_rope_backward(q, wq, dq, EPS, 0.0, c, s, D, 0)  # the torch operations' gradient
        err_x = (dx.float() - rx.float()).abs().max().item()
        err_w = ((dw.float() - rw.float()).abs() / rw.float().abs().clamp_min(1)).max().item()

        def whole(st):
            cs = autograd.rope_angles(st[4], cache, None, None, D, 0, **INSIDE)
            return part(st[0], wq, st[2], *cs), part(st[1], wk, st[3], *cs)

        calls = {"whole (gather, q's pass, k's pass)": (3 * 2 * T * (nq + nk) * D, whole),
                 "gather": (0, lambda st: autograd.rope_angles(st[4], cache, None, None, D, 0, **INSIDE)),
                 "q's pass, angles given": (3 * 2 * T * nq * D, lambda st: part(st[0], wq, st[2], st[5], st[6])),
                 "k's pass, angles given": (3 * 2 * T * nk * D, lambda st: part(st[1], wk, st[3], st[5], st[6]))}
        for name, (nbytes, fn) in calls.items():
            kept = []
            t = time_graph(lambda i, fn=fn: kept.append(fn(sets[i])), n_sets)
            pct = f"{100 * nbytes / t.median_us / 1e3 / roof:5.1f}%" if nbytes else "     "
            print(f"{label} | {nq}+{nk} x {D} T {T} | {name:36s} | {t.median_us:7.1f} us | {pct} | "
                  f"min {t.min_us:.1f} max {t.max_us:.1f}", flush=True)
        print(f"{label} | {nq}+{nk} x {D} | q's dx max |err| {err_x:.3g}, dweight max rel err {err_w:.3g}")
        sets = None
        torch.cuda.empty_cache()


def sweep(label: str, roof: float) -> None:
    table = configs.select_rope_backward_config
    try:
        for T, nq, nk, D in SHAPES:
            g = torch.Generator(device="cuda").manual_seed(7)
            wq, wk, _, sets = _sets(T, nq, nk, D, sets_for_cold_l2(3 * 2 * T * (nq + nk) * D), g)
            part, ref = _part(D), {}
            for rnd in range(2):
                for cand in [None] + SWEEP[D]:
                    cfg = table(D) if cand is None else configs._bwd(D, cand[0], cand[1], cand[3], cand[2])
                    configs.select_rope_backward_config = lambda H, cfg=cfg: cfg
                    tag = "table" if cand is None else f"r{cand[0]} w{cand[1]} p{cand[2]} t{cand[3]}"
                    try:
                        res = []
                        for name, xi, dyi, w, heads in (("q", 0, 2, wq, nq), ("k", 1, 3, wk, nk)):
                            out = part(sets[0][xi], w, sets[0][dyi], sets[0][5], sets[0][6])
                            if cand is None and rnd == 0:
                                ref[name] = out
                            else:  # another row shape may sum a row in another order: dx to a rounding
                                assert torch.allclose(out[0].float(), ref[name][0].float(), rtol=2e-2, atol=2e-2)
                                assert (out[1].float() - ref[name][1].float()).abs().max() <= \
                                    0.02 * ref[name][1].float().abs().max()
                            kept = []
                            t = time_graph(lambda i, xi=xi, dyi=dyi, w=w: kept.append(
                                part(sets[i][xi], w, sets[i][dyi], sets[i][5], sets[i][6])), len(sets))
                            res.append(f"{name} {t.median_us:6.1f} us "
                                       f"{100 * 3 * 2 * T * heads * D / t.median_us / 1e3 / roof:5.1f}%")
                        print(f"{label} sweep | {nq}+{nk} x {D} | round {rnd} | {tag:16s} | " + " | ".join(res),
                              flush=True)
                    except Exception as e:  # noqa: BLE001 - a config that fails is reported, not fatal
                        print(f"{label} sweep | {nq}+{nk} x {D} | round {rnd} | {tag:16s} | failed: "
                              f"{type(e).__name__}: {str(e)[:100]}")
            sets = None
            torch.cuda.empty_cache()
    finally:
        configs.select_rope_backward_config = table


def main() -> None:
    label, ncu = sys.argv[1], "--ncu" in sys.argv
    roof = 3000.0 if ncu else measure_roofline().gbs
    print(f"== {label}: gather {INSIDE or 'as the functional form'}, roofline {roof:.0f} GB/s, "
          f"{torch.cuda.get_device_name()}")
    if "--sweep" in sys.argv:
        sweep(label, roof)
    else:
        parts(label, roof, ncu)


if __name__ == "__main__":
    main()
