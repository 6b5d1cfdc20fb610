#!/usr/bin/env python3
"""The team's goals, checked against a report: each goal from an issue, marked met or missed from the
report's own rows (results.json, written by ``python -m addrmsnorm.bench``). The report itself shows
results only; this is a maintainer's view of them.

    python devtools/report_targets.py results/<run>/results.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from addrmsnorm.bench.quant import BULK_ELEMENTS, PLAIN_MODE, PLAIN_OP, cpu_ratio  # noqa: E402

# ----- issue 7's targets, each a ratio within one run ----------------------------------------------

P1_MIN_ELEMENTS = 1 << 24   # bulk: N * H >= 16M
P1_MIN_PCT = 98.0           # of the same-run roofline
P2_MAX_RATIO = 0.8          # decode chain, per call, against the one-row baseline
P3_MAX_C_RATIO = 1.2        # C ABI from C++ against a bare cuLaunchKernel
P3_MAX_OP_US = 6.0          # the torch operator, eager, from Python
# Issue 13: the Python entry points against the in-place operator, at 1 x 4096 bf16, eager.
CPU_MAX_MODULE_RATIO = 2.0         # FusedAddRMSNorm forward with grad mode on (its weight requires grad)
CPU_MAX_FUNCTIONAL_RATIO = 1.5     # addrmsnorm.fused_add_rmsnorm
CPU_MAX_PYTHON_API_RATIO = 1.3     # addrmsnorm.fused_add_rmsnorm_
MID_SHAPES = ((512, 4096), (2048, 4096))
P5_SHAPE = (1 << 20, 128)


def _mark(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "**missed**")


def _best(rows, names):
    got = [r for r in rows if r["impl"] in names and r.get("gbs")]
    return max(got, key=lambda r: r["gbs"]) if got else None


def targets_section(header: dict, rows: list[dict]) -> str:
    """The issue-7 targets, each marked met or missed, from this report's own rows."""
    ours, ours_pdl = header.get("ours", []), header.get("ours_pdl", [])
    peers, base = header.get("peers", []), header.get("baseline")
    if not ours:
        return ""
    bw = [r for r in rows if r["section"] == "bandwidth"]
    by_shape: dict = {}
    for r in bw:
        by_shape.setdefault((r["N"], r["H"], r["x_dtype"], r["residual_dtype"]), []).append(r)
    out = []

    # P1: at every H and dtype, the bulk shape: >= 98% of the roofline and >= the best peer.
    dtypes = [("bf16", "bf16"), ("fp16", "fp16"), ("bf16", "fp32"), ("fp32", "fp32")]
    hs = sorted({k[1] for k in by_shape if k[0] * k[1] >= P1_MIN_ELEMENTS})
    lines = ["| H | " + " | ".join(f"{x} / {r}" for x, r in dtypes) + " |", "|---|" + "---|" * len(dtypes)]
    met = total = 0
    for h in hs:
        cells = []
        for xd, rd in dtypes:
            keys = [k for k in by_shape if k[1] == h and k[2] == xd and k[3] == rd and k[0] * k[1] >= P1_MIN_ELEMENTS]
            if not keys:
                cells.append("")
                continue
            k = max(keys)  # the most rows
            mine, best_peer = _best(by_shape[k], ours), _best(by_shape[k], peers)
            if mine is None:
                cells.append("n/a")
                continue
            ok = mine["pct_roofline"] >= P1_MIN_PCT and (best_peer is None or mine["gbs"] >= best_peer["gbs"])
            met, total = met + ok, total + 1
            peer = f"; best peer {best_peer['pct_roofline']:.0f}%" if best_peer else ""
            cells.append(f"{mine['pct_roofline']:.1f}%{peer} ({'met' if ok else 'missed'})")
        lines.append(f"| {h} | " + " | ".join(cells) + " |")
    out += [f"**P1, bulk** (N·H ≥ 16M, the most rows measured at each H; ours: the best of {', '.join(ours)}): "
            f"≥ {P1_MIN_PCT:.0f}% of the roofline and at least the best peer's GB/s. Met at {met} of {total}.",
            "", *lines, ""]

    # Every other target: one line each.
    t = ["| target | shape | measured | |", "|---|---|---|---|"]
    dec = {(r["N"], r["H"], r["impl"]): r.get("us_median") for r in rows if r["section"] == "decode_chain"}
    for n, h in sorted({(r["N"], r["H"]) for r in rows if r["section"] == "decode_chain"}, key=lambda k: (k[1], k[0])):
        mine = [dec.get((n, h, name)) for name in ours + ours_pdl]
        mine = min((v for v in mine if v), default=None)
        b = dec.get((n, h, base))
        fi = dec.get((n, h, "FlashInfer (PDL)"))
        if mine is None or b is None:
            continue
        ok = mine <= P2_MAX_RATIO * b and (fi is None or mine < fi)
        t.append(f"| P2 decode chain: ≤ {P2_MAX_RATIO}× the one-row kernel" + (", < FlashInfer (PDL)" if fi else "")
                 + f" | {n} × {h} | {mine:.2f} µs against {b:.2f} µs: {mine / b:.2f}×"
                 + (f"; FlashInfer (PDL) {fi:.2f} µs" if fi else "") + f" | {_mark(ok)} |")
    cpu = {r["impl"]: r.get("us_median") for r in rows if r["section"] == "cpu_overhead"}
    c_abi, bare = cpu.get("addrmsnorm C ABI from C++"), cpu.get("bare cuLaunchKernel (C++)")
    if c_abi and bare:
        t.append(f"| P3 C ABI ≤ {P3_MAX_C_RATIO}× a bare cuLaunchKernel | 1 × 4096 | {c_abi:.2f} µs against "
                 f"{bare:.2f} µs: {c_abi / bare:.2f}× | {_mark(c_abi <= P3_MAX_C_RATIO * bare)} |")
    op = cpu.get(ours[0])  # the first: the in-place operator
    if op:
        t.append(f"| P3 torch op ≤ {P3_MAX_OP_US:.0f} µs per eager call | 1 × 4096 | {op:.2f} µs | "
                 f"{_mark(op <= P3_MAX_OP_US)} |")
    from addrmsnorm.bench.impls import MODULE_GRAD_MODE, PYTHON_API, PYTHON_API_FUNCTIONAL

    for name, limit in ((MODULE_GRAD_MODE, CPU_MAX_MODULE_RATIO), (PYTHON_API_FUNCTIONAL, CPU_MAX_FUNCTIONAL_RATIO),
                        (PYTHON_API, CPU_MAX_PYTHON_API_RATIO)):
        v = cpu.get(name)
        if op and v:
            t.append(f"| CPU cost: {name} ≤ {limit}× the in-place operator | 1 × 4096 | {v:.2f} µs against "
                     f"{op:.2f} µs: {v / op:.2f}× | {_mark(v <= limit * op)} |")
    for k, sel in by_shape.items():
        if (k[0], k[1]) == P5_SHAPE and k[2:] == ("bf16", "bf16"):
            mine = _best(sel, ours)
            tc = _best(sel, ["torch.compile (reference)"])
            if mine:
                ok = mine["pct_roofline"] >= P1_MIN_PCT and (tc is None or mine["gbs"] >= tc["gbs"])
                t.append(f"| P5 small H: ≥ {P1_MIN_PCT:.0f}% and ≥ torch.compile | {k[0]} × {k[1]} | "
                         f"{mine['pct_roofline']:.1f}%" + (f"; torch.compile {tc['pct_roofline']:.1f}%" if tc else "")
                         + f" | {_mark(ok)} |")
    for n, h in MID_SHAPES:
        sel = by_shape.get((n, h, "bf16", "bf16"))
        if not sel:
            continue
        mine = min((r["us_median"] for r in sel if r["impl"] in ours + ours_pdl and r.get("us_median")), default=None)
        theirs = [r for r in sel if r["impl"] in peers and r.get("us_median")]
        if mine is None:
            continue
        fastest = min(theirs, key=lambda r: r["us_median"]) if theirs else None
        ok = fastest is None or mine < fastest["us_median"]
        t.append(f"| mid-size: faster than every peer | {n} × {h} | {mine:.2f} µs"
                 + (f"; fastest peer {fastest['impl']} {fastest['us_median']:.2f} µs" if fastest else "")
                 + f" | {_mark(ok)} |")
    out += ["Other targets (ours: the better of the torch op with and without PDL, where the target is a "
            "latency):", "", *t, ""]
    return "\n".join(out)


# Issue 15's targets, each a ratio in one run with fresh outputs for everyone.
I15_BULK_MIN_ELEMENTS = 1 << 26
I15_MID_SHAPES = ((512, 4096), (2048, 4096))
I15_COMPILE_HS = (4100, 11111)
I15_FP32_SHAPE, I15_FP32_MIN_RATIO = (8192, 16384), 0.99
I15_WIDE_H = 32768
I15_DECODE_MAX_RATIO = 0.8
I15_BACKWARD_MIN_PCT = 85.0
I15_STEP_OVER_COMPILE, I15_STEP_OVER_LIGER = 1.3, 1.5


def targets_issue15(header: dict, rows: list[dict]) -> str:
    """Issue 15's targets, each marked met or missed, from this report's own rows. Ours in place: the
    operators that write into their inputs; ours into given outputs: the functional ones (fresh
    outputs on every call, as the peers that allocate)."""
    ours = header.get("ours", []) + header.get("ours_pdl", [])
    peers = header.get("peers", [])
    if not ours:
        return ""
    in_place = [n for n in ours if "functional" not in n]
    fresh = [n for n in ours if "functional" in n]
    by_shape: dict = {}
    for r in rows:
        if r["section"] == "bandwidth":
            by_shape.setdefault((r["N"], r["H"], r["x_dtype"], r["residual_dtype"]), []).append(r)
    t = ["| target | shape | measured | |", "|---|---|---|---|"]

    def line(target, shape, mine, theirs, min_ratio):
        if mine is None or theirs is None:
            return
        ratio = mine["gbs"] / theirs["gbs"]
        t.append(f"| {target} | {shape} | {ratio:.3f}×: {mine['gbs']:.0f} against {theirs['impl']}'s "
                 f"{theirs['gbs']:.0f} GB/s | {_mark(ratio >= min_ratio)} |")

    order = {"bf16": 0, "fp16": 1, "fp32": 2}
    for k in sorted(by_shape, key=lambda k: (order.get(k[2], 3), k[1], k[0])):
        n, h, xd, rd = k
        sel = by_shape[k]
        if xd == rd and xd in ("bf16", "fp16") and n * h >= I15_BULK_MIN_ELEMENTS:
            for label, names in (("in place", in_place), ("into given outputs", fresh)):
                line(f"bulk {xd}, {label}: ≥ 1.00× the fastest peer", f"{n} × {h}", _best(sel, names),
                     _best(sel, peers), 1.0)
        if (n, h) in I15_MID_SHAPES and (xd, rd) == ("bf16", "bf16"):
            line("mid-size: ≥ 1.00× the fastest peer", f"{n} × {h}", _best(sel, ours), _best(sel, peers), 1.0)
        if h in I15_COMPILE_HS and (xd, rd) == ("bf16", "bf16") and n * h >= I15_BULK_MIN_ELEMENTS:
            line("≥ 1.00× torch.compile", f"{n} × {h}", _best(sel, ours), _best(sel, ["torch.compile (reference)"]),
                 1.0)
        if (n, h) == I15_FP32_SHAPE and (xd, rd) == ("fp32", "fp32"):
            line(f"fp32: ≥ {I15_FP32_MIN_RATIO}× Liger", f"{n} × {h}", _best(sel, ours), _best(sel, ["Liger-Kernel"]),
                 I15_FP32_MIN_RATIO)
        if h >= I15_WIDE_H and (xd, rd) == ("bf16", "bf16"):
            line("wide rows: ≥ 1.00× Quack", f"{n} × {h}", _best(sel, ours), _best(sel, ["Quack"]), 1.0)
    dec = {(r["N"], r["H"], r["impl"]): r.get("us_median") for r in rows if r["section"] == "decode_chain"}
    for n, h in sorted({(r["N"], r["H"]) for r in rows if r["section"] == "decode_chain"}, key=lambda k: (k[1], k[0])):
        mine = min((v for v in (dec.get((n, h, name)) for name in ours) if v), default=None)
        fi = dec.get((n, h, "FlashInfer (PDL)"))
        if mine and fi:
            t.append(f"| decode chain: ≤ {I15_DECODE_MAX_RATIO}× FlashInfer (PDL) | {n} × {h} | {mine:.2f} µs "
                     f"against {fi:.2f} µs: {mine / fi:.2f}× | {_mark(mine <= I15_DECODE_MAX_RATIO * fi)} |")
    bwd = {(r["N"], r["H"], r["mode"], r["impl"]): r for r in rows if r["section"] == "backward" and r.get("gbs")}
    eager = " (timed eagerly: its CUDA graph capture failed, so the figure includes CPU time)"
    for n, h in sorted({(k[0], k[1]) for k in bwd}):
        mine = bwd.get((n, h, "bwd", "addrmsnorm"))
        if mine:
            note = eager if mine.get("note", "").startswith("eager") else ""
            if n * h < I15_BULK_MIN_ELEMENTS:
                note += f" (not bulk: N·H < 2^{I15_BULK_MIN_ELEMENTS.bit_length() - 1})"
            t.append(f"| bulk backward: ≥ {I15_BACKWARD_MIN_PCT:.0f}% of the roofline | {n} × {h} | "
                     f"{mine['pct_roofline']:.1f}%{note} | "
                     f"{'n/a' if note else _mark(mine['pct_roofline'] >= I15_BACKWARD_MIN_PCT)} |")
        step = bwd.get((n, h, "fwd+bwd", "addrmsnorm"))
        for peer, need in (("torch.compile (reference)", I15_STEP_OVER_COMPILE), ("Liger-Kernel", I15_STEP_OVER_LIGER)):
            theirs = bwd.get((n, h, "fwd+bwd", peer))
            if step and theirs:
                sp = theirs["us_median"] / step["us_median"]
                note = eager if any(r.get("note", "").startswith("eager") for r in (step, theirs)) else ""
                # A step's bytes (forward + backward, the byte model) at this run's roofline: no
                # implementation can be faster, so a target below it is out of anyone's reach.
                floor_us = step["us_median"] * step["pct_roofline"] / 100
                reach = (f"; out of reach: {theirs['us_median'] / need:.1f} µs is below the {floor_us:.1f} µs a step "
                         "takes at the roofline" if theirs["us_median"] / need < floor_us else "")
                t.append(f"| training step: ≥ {need}× {peer} | {n} × {h} | {step['us_median']:.1f} µs against "
                         f"{theirs['us_median']:.1f} µs: {sp:.3f}×{note}{reach} | "
                         f"{'n/a' if note else _mark(sp >= need)} |")
    if len(t) == 2:
        return ""
    return "\n".join(["Issue 15 (ratios in this run; every implementation writes fresh outputs; ours in place: "
                      + ", ".join(in_place) + "; into given outputs: " + ", ".join(fresh) + "):", "", *t, ""])


# ----- issue 14's targets: the quantized outputs ------------------------------------------------------

CPU_MAX_RATIO = 1.2          # the quantized torch op's eager CPU cost <= 1.2x the plain in-place op's
DECODE_MAX_FI_PDL = 0.8      # the static fp8 decode chain <= 0.8x FlashInfer's with PDL
BULK_MIN_PCT = 97.0          # issue 14: bulk >= 97% of the same-run roofline and >= the best peer
def quant_targets(rows: list[dict]) -> str:
    """Issue 14's targets, each marked met or missed, from this run's own rows."""
    bulk = [r for r in rows if r["section"] == "quant" and r["mode"] != PLAIN_MODE and r["N"] * r["H"] >= BULK_ELEMENTS]
    t = ["| target | mode | shape | ours | best peer | |", "|---|---|---|---|---|---|"]
    met = total = 0
    for mode, N, H in dict.fromkeys((r["mode"], r["N"], r["H"]) for r in bulk):
        sel = [r for r in bulk if (r["mode"], r["N"], r["H"]) == (mode, N, H) and r.get("gbs")]
        mine = next((r for r in sel if r["impl"] == "addrmsnorm"), None)
        peers = [r for r in sel if r["impl"] != "addrmsnorm"]  # a ✗ (other roundings) still counts as a peer
        best = max(peers, key=lambda r: r["gbs"], default=None)
        if mine is None:
            continue
        ok = mine["pct_roofline"] >= BULK_MIN_PCT and (best is None or mine["gbs"] >= best["gbs"])
        met, total = met + ok, total + 1
        t.append(f"| bulk ≥ {BULK_MIN_PCT:.0f}% and ≥ the best peer | {mode} | {N} × {H} | "
                 f"{mine['gbs']:.0f} GB/s, {mine['pct_roofline']:.1f}% | "
                 + (f"{best['impl']} {best['gbs']:.0f} GB/s ({mine['gbs'] / best['gbs']:.3f}×)" if best else "none")
                 + f" | {_mark(ok)} |")
    dec = {(r["N"], r["H"], r["impl"]): r.get("us_median") for r in rows if r["section"] == "quant_decode"}
    for N, H in dict.fromkeys((k[0], k[1]) for k in dec):
        mine = min((v for k, v in dec.items() if k[:2] == (N, H) and k[2].startswith("addrmsnorm") and v),
                   default=None)
        fi = dec.get((N, H, "FlashInfer (PDL)"))
        if mine is None or fi is None:
            continue
        ok = mine <= DECODE_MAX_FI_PDL * fi
        met, total = met + ok, total + 1
        t.append(f"| decode chain ≤ {DECODE_MAX_FI_PDL}× FlashInfer (PDL) | static fp8 | {N} × {H} | {mine:.2f} µs | "
                 f"FlashInfer (PDL) {fi:.2f} µs ({mine / fi:.2f}×) | {_mark(ok)} |")
    cpu = {r["impl"]: r for r in rows if r["section"] == "quant_cpu" and r.get("us_median")}
    for name, row in cpu.items():
        # the operators that write into given outputs against the plain in-place operator; the one that
        # allocates its outputs against the plain one that allocates
        against = PLAIN_FUNCTIONAL_OP if "allocating" in name else PLAIN_OP
        plain = cpu.get(against)
        if plain is None or not name.startswith("quant op"):
            continue
        ratio = cpu_ratio(row, plain)
        how = ", the median of per-round ratios" if row.get("us_rounds") and plain.get("us_rounds") else ""
        ok = ratio <= CPU_MAX_RATIO
        met, total = met + ok, total + 1
        t.append(f"| eager CPU cost ≤ {CPU_MAX_RATIO}× the plain op | {name} | 1 × 4096 | {row['us_median']:.2f} µs | "
                 f"{against} {plain['us_median']:.2f} µs ({ratio:.2f}×{how}) | {_mark(ok)} |")
    if total == 0:
        return ""
    return "\n".join([f"Targets (issue 14): met at {met} of {total}.", "", *t])


# ----- issue 33's targets: the plain norm --------------------------------------------------------------

PLAIN_MIN_PCT = 97.0          # plain norm, bulk: >= 97% of the roofline and >= 1.00x the fastest peer
QK_MIN_RATIO = 1.8            # QK norm at T >= 8192: >= 1.8x the fastest peer (GB/s)
QK_LATENCY_MAX_RATIO = 0.8    # QK norm at T = 1 and 64, with PDL: <= 0.8x the fastest peer (µs)


def plain_targets(rows: list[dict]) -> str:
    """Issue 33's targets, each marked met or missed, from this run's own rows."""
    t = ["| target | shape | ours | fastest peer | |", "|---|---|---|---|---|"]
    met = total = 0

    def ours_and_peer(sel, key, high):
        mine = [r for r in sel if r["impl"].startswith("addrmsnorm") and r.get(key)]
        peers = [r for r in sel if not r["impl"].startswith("addrmsnorm") and r.get(key)]
        pick = max if high else min
        return (pick(mine, key=lambda r: r[key]) if mine else None,
                pick(peers, key=lambda r: r[key]) if peers else None)

    for section, label in (("plain", "plain norm, bulk"), ("plain_quant", "static fp8, bulk")):
        sel = [r for r in rows if r["section"] == section]
        for key in dict.fromkeys((r["N"], r["H"], r["x_dtype"]) for r in sel):
            group = [r for r in sel if (r["N"], r["H"], r["x_dtype"]) == key]
            mine, best = ours_and_peer(group, "gbs", True)
            if mine is None:
                continue
            need_pct = PLAIN_MIN_PCT if section == "plain" else 0.0
            ok = mine["pct_roofline"] >= need_pct and (best is None or mine["gbs"] >= best["gbs"])
            met, total = met + ok, total + 1
            goal = f"≥ {PLAIN_MIN_PCT:.0f}% and ≥ 1.00× the fastest peer" if section == "plain" else "≥ 1.00× every peer"
            t.append(f"| {label} {goal} | {key[0]} × {key[1]} {key[2]} | {mine['gbs']:.0f} GB/s, "
                     f"{mine['pct_roofline']:.1f}% | " + (f"{best['impl']} {best['gbs']:.0f} GB/s "
                                                         f"({mine['gbs'] / best['gbs']:.2f}×)" if best else "none")
                     + f" | {_mark(ok)} |")
    sel = [r for r in rows if r["section"] == "qk_norm"]
    for T in dict.fromkeys(r["N"] for r in sel):
        mine, best = ours_and_peer([r for r in sel if r["N"] == T], "gbs", True)
        if mine is None or best is None:
            continue
        ok = mine["gbs"] >= QK_MIN_RATIO * best["gbs"]
        met, total = met + ok, total + 1
        t.append(f"| QK norm ≥ {QK_MIN_RATIO}× the fastest peer | T = {T} | {mine['gbs']:.0f} GB/s, "
                 f"{mine['pct_roofline']:.1f}% | {best['impl']} {best['gbs']:.0f} GB/s ({mine['gbs'] / best['gbs']:.2f}×) "
                 f"| {_mark(ok)} |")
    sel = [r for r in rows if r["section"] == "qk_latency"]
    for T in dict.fromkeys(r["N"] for r in sel):
        group = [r for r in sel if r["N"] == T]
        mine = next((r for r in group if r["impl"] == "addrmsnorm (PDL)" and r.get("us_median")), None)
        _, best = ours_and_peer(group, "us_median", False)
        if mine is None or best is None:
            continue
        ok = mine["us_median"] <= QK_LATENCY_MAX_RATIO * best["us_median"]
        met, total = met + ok, total + 1
        t.append(f"| QK norm decode chain with PDL ≤ {QK_LATENCY_MAX_RATIO}× the fastest peer | T = {T} | "
                 f"{mine['us_median']:.2f} µs | {best['impl']} {best['us_median']:.2f} µs "
                 f"({mine['us_median'] / best['us_median']:.2f}×) | {_mark(ok)} |")
    if total == 0:
        return ""
    return "\n".join([f"Targets (issue 33): met at {met} of {total}.", "", *t])


BLOCK_MIN_PCT = 97.0         # issue 35: every block-scaled mode at bulk, of the same-run roofline
BLOCK_MIN_COMPILE_RATIO = 1.0  # and against torch.compile of the same formulas
BLOCK_DECODE_MAX_RATIO = 1.1   # the decode chain at 1 x 4096 against our static fp8 step with PDL


def block_targets(rows: list[dict]) -> str:
    """Issue 35's targets, each marked met or missed, from this run's own rows."""
    t = ["| target | mode | shape | ours | against | |", "|---|---|---|---|---|---|"]
    met = total = 0
    sel = [r for r in rows if r["section"] == "block_quant" and r.get("gbs")]
    for key in dict.fromkeys((r["mode"], r["N"], r["H"]) for r in sel):
        group = [r for r in sel if (r["mode"], r["N"], r["H"]) == key]
        mine = next((r for r in group if r["impl"] == "addrmsnorm"), None)
        comp = next((r for r in group if r["impl"].startswith("torch.compile")), None)
        if mine is None:
            continue
        ok = mine["pct_roofline"] >= BLOCK_MIN_PCT
        met, total = met + ok, total + 1
        t.append(f"| ≥ {BLOCK_MIN_PCT:.0f}% of the roofline | {key[0]} | {key[1]} × {key[2]} | {mine['gbs']:.0f} GB/s, "
                 f"{mine['pct_roofline']:.1f}% | | {_mark(ok)} |")
        if comp is not None:
            ok = mine["gbs"] >= BLOCK_MIN_COMPILE_RATIO * comp["gbs"]
            met, total = met + ok, total + 1
            t.append(f"| ≥ {BLOCK_MIN_COMPILE_RATIO:.2f}× torch.compile | {key[0]} | {key[1]} × {key[2]} | "
                     f"{mine['gbs']:.0f} GB/s | {comp['gbs']:.0f} GB/s ({mine['gbs'] / comp['gbs']:.2f}×) | {_mark(ok)} |")
    dec = [r for r in rows if r["section"] == "block_quant_decode" and r.get("us_median")]
    base = next((r for r in dec if r["mode"].startswith("static fp8")), None)
    for r in dec:
        if base is None or r is base:
            continue
        ok = r["us_median"] <= BLOCK_DECODE_MAX_RATIO * base["us_median"]
        met, total = met + ok, total + 1
        t.append(f"| decode chain ≤ {BLOCK_DECODE_MAX_RATIO}× static fp8 (PDL) | {r['mode']} | {r['N']} × {r['H']} | "
                 f"{r['us_median']:.2f} µs | {base['us_median']:.2f} µs ({r['us_median'] / base['us_median']:.2f}×) | "
                 f"{_mark(ok)} |")
    if total == 0:
        return ""
    return "\n".join([f"Targets (issue 35): met at {met} of {total}.", "", *t])


GATED_MIN_PCT = 95.0          # issue 44: the gated norm at 65536 x 4096, groups of 4096 and 1024
GATED_MIN_PEER_RATIO = 1.00   # against fla-core's FusedRMSNormGated and torch.compile, each
GATED_TARGET_SHAPES = ((65536, 4096, 4096), (65536, 4096, 1024))


def gated_targets(rows: list[dict]) -> str:
    """Issue 44's gated-norm targets, each marked met or missed, from this run's own rows."""
    t = ["| target | shape | ours | against | |", "|---|---|---|---|---|"]
    met = total = 0
    sel = [r for r in rows if r["section"] == "gated" and r.get("gbs")]
    for key in GATED_TARGET_SHAPES:
        group = [r for r in sel if (r["N"], r["H"], r["group"]) == key]
        mine = next((r for r in group if r["impl"] == "addrmsnorm"), None)
        if mine is None:
            continue
        shape = f"{key[0]} × {key[1]}, groups of {key[2]}"
        ok = mine["pct_roofline"] >= GATED_MIN_PCT
        met, total = met + ok, total + 1
        t.append(f"| ≥ {GATED_MIN_PCT:.0f}% of the roofline | {shape} | {mine['gbs']:.0f} GB/s, "
                 f"{mine['pct_roofline']:.1f}% | | {_mark(ok)} |")
        for peer in (r for r in group if r is not mine):
            ok = mine["gbs"] >= GATED_MIN_PEER_RATIO * peer["gbs"]
            met, total = met + ok, total + 1
            t.append(f"| ≥ {GATED_MIN_PEER_RATIO:.2f}× {peer['impl']} | {shape} | {mine['gbs']:.0f} GB/s | "
                     f"{peer['gbs']:.0f} GB/s ({mine['gbs'] / peer['gbs']:.2f}×) | {_mark(ok)} |")
    if total == 0:
        return ""
    return "\n".join([f"Targets (issue 44, the gated norm): met at {met} of {total}.", "", *t])


PAIR_MAX_DECODE_RATIO = 0.6   # issue 44: the latent pair's decode step against two plain launches, both with PDL
PAIR_MIN_PCT = 90.0           # and its bulk rows, of the roofline


def pair_targets(rows: list[dict]) -> str:
    """Issue 44's latent-pair targets, each marked met or missed, from this run's own rows."""
    t = ["| target | shape | ours | against | |", "|---|---|---|---|---|"]
    met = total = 0
    for r in rows:
        if r["section"] == "pair" and r["impl"] == "addrmsnorm" and r.get("gbs"):
            ok = r["pct_roofline"] >= PAIR_MIN_PCT
            met, total = met + ok, total + 1
            t.append(f"| ≥ {PAIR_MIN_PCT:.0f}% of the roofline | {r['N']} × ({r['H']}) | {r['gbs']:.0f} GB/s, "
                     f"{r['pct_roofline']:.1f}% | | {_mark(ok)} |")
    dec = [r for r in rows if r["section"] == "pair_latency" and r.get("us_median")]
    for mine in (r for r in dec if r["impl"] == "addrmsnorm (PDL)"):
        two = next((r for r in dec if r["N"] == mine["N"] and r["impl"].endswith("two plain launches (PDL)")), None)
        if two is None:
            continue
        ok = mine["us_median"] <= PAIR_MAX_DECODE_RATIO * two["us_median"]
        met, total = met + ok, total + 1
        t.append(f"| decode ≤ {PAIR_MAX_DECODE_RATIO}× two plain launches (PDL) | {mine['N']} × ({mine['H']}) | "
                 f"{mine['us_median']:.2f} µs | {two['us_median']:.2f} µs ({mine['us_median'] / two['us_median']:.2f}×) "
                 f"| {_mark(ok)} |")
    if total == 0:
        return ""
    return "\n".join([f"Targets (issue 44, the latent pair): met at {met} of {total}.", "", *t])


ROPE_MIN_PCT = 90.0            # issues 45 and 66: the QK norm with the rotation, bulk, of the roofline
ROPE_MIN_SPEEDUP = 1.6         # issue 45: against our QK norm then a compiled rotation (time ratio)
ROPE_MIN_SPEEDUP_COMPILED = 2.0  # issue 66: against torch.compile of the norm and the rotation
ROPE_MIN_OF_QK = 0.95          # issue 66: bulk, our speed against the QK norm alone's
ROPE_MAX_DECODE_RATIO = 0.6    # issue 45: decode chain, against our QK norm plus a separate rotation
ROPE_MAX_DECODE_OVER_QK = 1.15  # issues 45 and 66: and against the QK norm alone
ROPE_MIN_BACKWARD_PCT = 85.0   # the backward, of the roofline by its byte model
ROPE_V_MAX_OVER_TWO = 1.0      # issue 67: q, k and v in one launch, against our two launches (time ratio)


def rope_targets(rows: list[dict]) -> str:
    """Issues 45's and 66's targets for the QK norm with the rotation, each marked met or missed, from this run's rows:
    the best of ours (cache or cos/sin, with or without PDL) against each reference's best."""
    from addrmsnorm.bench import rope

    t = ["| target | shape | ours | against | |", "|---|---|---|---|---|"]
    met = total = 0

    def best(sel, names):
        got = [r for r in sel if r.get("us_median") and not r.get("note")
               and any(r["impl"] in (n, n + " (PDL)") for n in names)]
        return min(got, key=lambda r: r["us_median"]) if got else None

    def line(target, shape, mine, other, max_ratio):
        nonlocal met, total
        ratio = mine["us_median"] / other["us_median"]
        ok = ratio <= max_ratio
        met, total = met + ok, total + 1
        t.append(f"| {target} | {shape} | {mine['us_median']:.2f} µs | {other['impl']} {other['us_median']:.2f} µs "
                 f"({ratio:.2f}× the time) | {_mark(ok)} |")

    ours = [rope.OURS_CACHE, rope.OURS_COS_SIN]
    for section in ("rope", "rope_latency", "rope_backward"):
        sel = [r for r in rows if r["section"] == section]
        for shape in dict.fromkeys(r["H"] for r in sel):
            group = [r for r in sel if r["H"] == shape]
            if section == "rope_backward":
                mine = max((r for r in group if r["impl"].startswith(rope.OURS) and r.get("gbs")),
                           key=lambda r: r["gbs"], default=None)  # the better angle source, as the forward's
                if mine:
                    ok = mine["pct_roofline"] >= ROPE_MIN_BACKWARD_PCT
                    met, total = met + ok, total + 1
                    t.append(f"| backward ≥ {ROPE_MIN_BACKWARD_PCT:.0f}% of the roofline | {shape} | "
                             f"{mine['impl']} {mine['gbs']:.0f} GB/s, {mine['pct_roofline']:.1f}% | | {_mark(ok)} |")
                continue
            mine = best(group, ours)
            if mine is None:
                continue
            alone = best(group, [rope.QK_ALONE])
            two = best(group, [rope.TWO_STEP])
            if section == "rope":
                ok = mine["pct_roofline"] >= ROPE_MIN_PCT
                met, total = met + ok, total + 1
                t.append(f"| ≥ {ROPE_MIN_PCT:.0f}% of the roofline | {shape} | {mine['gbs']:.0f} GB/s, "
                         f"{mine['pct_roofline']:.1f}% | | {_mark(ok)} |")
                if two:
                    line(f"≥ {ROPE_MIN_SPEEDUP}× faster", shape, mine, two, 1 / ROPE_MIN_SPEEDUP)
                compiled = best(group, [rope.COMPILED])
                if compiled:
                    line(f"≥ {ROPE_MIN_SPEEDUP_COMPILED}× faster", shape, mine, compiled, 1 / ROPE_MIN_SPEEDUP_COMPILED)
                if alone:
                    line(f"≥ {ROPE_MIN_OF_QK}× the QK norm alone's speed", shape, mine, alone, 1 / ROPE_MIN_OF_QK)
            else:
                if two:
                    line(f"decode ≤ {ROPE_MAX_DECODE_RATIO}× QK norm + separate rotation", shape, mine, two,
                         ROPE_MAX_DECODE_RATIO)
                if alone:
                    line(f"decode ≤ {ROPE_MAX_DECODE_OVER_QK}× the QK norm alone", shape, mine, alone,
                         ROPE_MAX_DECODE_OVER_QK)
    for shape in dict.fromkeys(r["H"] for r in rows if r["section"] == "rope_v"):
        group = [r for r in rows if r["section"] == "rope_v" and r["H"] == shape]
        mine, two = best(group, [rope.V_ONE]), best(group, [rope.V_TWO])
        if mine:
            ok = mine["pct_roofline"] >= ROPE_MIN_PCT
            met, total = met + ok, total + 1
            t.append(f"| with v: ≥ {ROPE_MIN_PCT:.0f}% of the roofline | {shape} | {mine['gbs']:.0f} GB/s, "
                     f"{mine['pct_roofline']:.1f}% | | {_mark(ok)} |")
        if mine and two:
            line(f"with v: ≤ {ROPE_V_MAX_OVER_TWO}× our two launches", shape, mine, two, ROPE_V_MAX_OVER_TWO)
    if total == 0:
        return ""
    return "\n".join([f"Targets (issues 45, 66 and 67, the QK norm with the rotation): met at {met} of {total}.", "",
                      *t])


PREFILL_MIN_OF_PEER = 1.00  # issue 68: every prefill chunk, fused and plain, against the fastest peer (time ratio)


def prefill_targets(rows: list[dict]) -> str:
    """Issue 68's prefill-chunk targets, one line a cell and kind: the better of ours against the fastest of the
    peers (bench/prefill.py), each marked met or missed."""
    from addrmsnorm.bench import prefill

    cells = sorted({(r.get("mode"), r["H"], r["N"]) for r in rows if r["section"] == "prefill"})
    t = ["| kind | shape | ours | the fastest peer | |", "|---|---|---|---|---|"]
    met = total = 0
    for kind, H, N in cells:
        mine, peer = prefill.best_pair(rows, kind, N, H)
        if not (mine and peer):
            continue
        r = peer["us_median"] / mine["us_median"]
        ok = r >= PREFILL_MIN_OF_PEER
        met, total = met + ok, total + 1
        t.append(f"| {kind} | {N} × {H} | {mine['impl']} {mine['us_median']:.2f} µs | {peer['impl']} "
                 f"{peer['us_median']:.2f} µs ({r:.2f}×) | {_mark(ok)} |")
    if total == 0:
        return ""
    return "\n".join([f"Targets (issue 68, prefill chunks ≥ {PREFILL_MIN_OF_PEER:.2f}× the fastest peer): met at "
                      f"{met} of {total}.", "", *t])


VARIANT_GATED_MIN_PCT = 90.0      # issue 68: every gated row, of the roofline, and at least 1.00x each peer
VARIANT_PAIR_MIN_OF_TWO = 1.00    # issue 68: the latent pair in bulk against our two plain launches (GB/s)
VARIANT_SANDWICH_SHAPES = ((16384, 4096), (16384, 5376))
VARIANT_SANDWICH_MIN_PCT = 95.0   # and at least 1.00x torch.compile of the same math
PLAIN_DECODE_MAX_FI = 0.8         # issue 68: the plain norm's decode chain (PDL) against FlashInfer's with PDL


def variant_targets(rows: list[dict]) -> str:
    """Issue 68's targets for the variants and the plain norm's decode chain, each marked met or missed, from this
    run's own rows (bench/variants.py, bench/plain.py), the implementations by the names those modules give them."""
    from addrmsnorm.bench import plain, variants

    compiled = "torch.compile (same math)"
    t = ["| target | shape | ours | against | |", "|---|---|---|---|---|"]
    met = total = 0

    def mark(ok, goal, shape, ours, against=""):
        nonlocal met, total
        met, total = met + ok, total + 1
        t.append(f"| {goal} | {shape} | {ours} |{' ' + against if against else ''} | {_mark(ok)} |")

    def against_peer(goal, shape, mine, peer, min_ratio, key="gbs"):
        if peer is not None and peer.get(key):
            r = mine[key] / peer[key]
            unit = "GB/s" if key == "gbs" else "µs"
            fmt = (lambda v: f"{v:.0f} {unit}") if key == "gbs" else (lambda v: f"{v:.2f} {unit}")
            ok = r >= min_ratio if key == "gbs" else r <= min_ratio
            mark(ok, goal, shape, fmt(mine[key]), f"{peer['impl']} {fmt(peer[key])} ({r:.2f}×)")

    gated = [r for r in rows if r["section"] == "gated" and r.get("gbs")]
    for key in dict.fromkeys((r["N"], r["H"], r["group"]) for r in gated):
        group = {r["impl"]: r for r in gated if (r["N"], r["H"], r["group"]) == key}
        mine = group.get(plain.OURS)
        if mine is None:
            continue
        shape = f"gated {key[0]} × {key[1]}, groups of {key[2]}"
        mark(mine["pct_roofline"] >= VARIANT_GATED_MIN_PCT, f"≥ {VARIANT_GATED_MIN_PCT:.0f}% of the roofline", shape,
             f"{mine['gbs']:.0f} GB/s, {mine['pct_roofline']:.1f}%")
        for name in (variants.FLA, compiled):
            against_peer(f"≥ 1.00× {name}", shape, mine, group.get(name), 1.00)
    pair = [r for r in rows if r["section"] == "pair" and r.get("gbs")]
    for N in dict.fromkeys(r["N"] for r in pair):
        group = {r["impl"]: r for r in pair if r["N"] == N}
        mine = group.get(plain.OURS)
        if mine is not None:
            against_peer(f"≥ {VARIANT_PAIR_MIN_OF_TWO:.2f}× our two plain launches", f"pair {N} × ({mine['H']})",
                         mine, group.get(variants.PAIR_TWO), VARIANT_PAIR_MIN_OF_TWO)
    sandwich = [r for r in rows if r["section"] == "sandwich" and r.get("gbs")]
    for key in VARIANT_SANDWICH_SHAPES:
        group = {r["impl"]: r for r in sandwich if (r["N"], r["H"]) == key}
        mine = group.get(plain.OURS)
        if mine is None:
            continue
        shape = f"sandwich {key[0]} × {key[1]}"
        mark(mine["pct_roofline"] >= VARIANT_SANDWICH_MIN_PCT, f"≥ {VARIANT_SANDWICH_MIN_PCT:.0f}% of the roofline",
             shape, f"{mine['gbs']:.0f} GB/s, {mine['pct_roofline']:.1f}%")
        against_peer("≥ 1.00× torch.compile", shape, mine, group.get(compiled), 1.00)
    chain = [r for r in rows if r["section"] == "plain_latency" and r.get("us_median")]
    for H in dict.fromkeys(r["H"] for r in chain):
        group = {r["impl"]: r for r in chain if r["H"] == H}
        ours, fi = (name for name in plain.decode_impls(pdl=True))
        if group.get(ours) is not None:
            against_peer(f"decode chain ≤ {PLAIN_DECODE_MAX_FI}× FlashInfer (PDL)", f"plain 1 × {H}", group[ours],
                         group.get(fi), PLAIN_DECODE_MAX_FI, key="us_median")
    if total == 0:
        return ""
    return "\n".join([f"Targets (issue 68, the variants and the plain decode chain): met at {met} of {total}.", "",
                      *t])


def report(header: dict, rows: list[dict]) -> str:
    """Every section of targets that the rows allow, as markdown."""
    out = []
    for title, text in (("Targets (issue 7)", targets_section(header, rows)),
                        ("Targets (issue 15)", targets_issue15(header, rows)),
                        ("Targets (issue 14)", quant_targets(rows)),
                        ("Targets (issue 33)", plain_targets(rows)),
                        ("Targets (issue 35)", block_targets(rows)),
                        ("Targets (issue 44)", gated_targets(rows)),
                        ("Targets (issue 44)", pair_targets(rows)),
                        ("Targets (issues 45 and 66)", rope_targets(rows)),
                        ("Targets (issue 68)", prefill_targets(rows)),
                        ("Targets (issue 68, variants)", variant_targets(rows))):
        if text:
            out += [f"#### {title}", "", text, ""]
    return "\n".join(out)


def main(argv=None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    data = json.loads(Path(args[0]).read_text())
    print(report(data["header"], data["rows"]) or "no rows these targets concern")
    return 0


if __name__ == "__main__":
    sys.exit(main())
