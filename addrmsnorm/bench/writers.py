"""Writers for the report: CSV, JSON, markdown and the PNG plot. Pure functions of the rows, so
they are tested on the CPU."""

from __future__ import annotations

import csv
import json
from pathlib import Path

FIELDS = ["section", "impl", "N", "H", "x_dtype", "residual_dtype", "mode", "us_median", "us_min", "us_max",
          "gbs", "pct_roofline", "err_over_tol", "residual_exact", "note"]


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in FIELDS})


def write_json(header: dict, rows: list[dict], path: Path) -> None:
    path.write_text(json.dumps({"header": header, "rows": rows}, indent=1, default=str))


def _cell(r: dict | None) -> str:
    if r is None:
        return "n/a"
    if r.get("note", "").startswith("failed") or r.get("gbs") is None:
        return r.get("note", "failed") or "failed"
    return f"{r['gbs']:.0f} · {r['pct_roofline']:.0f}% · {r['us_median']:.1f}µs"


def _overhead_only(rows: list[dict], name: str) -> bool:
    """An implementation measured for its CPU cost per call only (it shares another row's kernel)."""
    mine = [r for r in rows if r["impl"] == name]
    return bool(mine) and all(r["section"] == "cpu_overhead" for r in mine)


def ratio_to_fastest_peer(row_cells: dict, ours: list[str], peers: list[str]) -> str:
    """The best of ours over the fastest peer, in GB/s, for one row ('' when either is missing)."""
    def best(names):
        vals = [row_cells[n]["gbs"] for n in names if row_cells.get(n) and row_cells[n].get("gbs")]
        return max(vals) if vals else None
    o, p = best(ours), best(peers)
    return "" if o is None or p is None else f"{o / p:.2f}×"


def bandwidth_table(rows: list[dict], impl_names: list[str], ours: list[str] | None = None,
                    peers: list[str] | None = None) -> str:
    """One line per (shape, dtypes); one column per available implementation; with ``ours`` and
    ``peers`` given, a last column: ours over the fastest peer in that row."""
    bw = [r for r in rows if r["section"] == "bandwidth"]
    keys = []
    for r in bw:
        k = (r["N"], r["H"], r["x_dtype"], r["residual_dtype"])
        if k not in keys:
            keys.append(k)
    order = {"bf16": 0, "fp16": 1, "fp32": 2}
    keys.sort(key=lambda k: (k[1], order.get(k[2], 3), order.get(k[3], 3), k[0]))  # by H, dtypes, then N
    by = {(r["N"], r["H"], r["x_dtype"], r["residual_dtype"], r["impl"]): r for r in bw}
    impl_names = [n for n in impl_names if not _overhead_only(rows, n)]
    ratio = bool(ours and peers)
    out = ["| N × H | x / residual | " + " | ".join(impl_names) + (" | ours / fastest peer" if ratio else "") + " |",
           "|---|---|" + "---|" * (len(impl_names) + ratio)]
    for k in keys:
        cells = [_cell(by.get((*k, name))) for name in impl_names]
        if ratio:
            cells.append(ratio_to_fastest_peer({n: by.get((*k, n)) for n in impl_names}, ours, peers))
        out.append(f"| {k[0]} × {k[1]} | {k[2]} / {k[3]} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def latency_table(rows: list[dict], section: str, impl_names: list[str], unit_note: str) -> str:
    sel = [r for r in rows if r["section"] == section]
    if not sel:
        return ""
    keys = []
    for r in sel:
        k = (r["N"], r["H"])
        if k not in keys:
            keys.append(k)
    by = {(r["N"], r["H"], r["impl"]): r for r in sel}
    names = [n for n in impl_names if any(r["impl"] == n for r in sel)]
    out = [f"| N × H ({unit_note}) | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for k in keys:
        cells = []
        for n in names:
            r = by.get((*k, n))
            if r is None:
                cells.append("n/a")
            elif r.get("us_median") is None:
                cells.append(r.get("note") or "failed")
            else:
                cells.append(f"{r['us_median']:.2f}")
        out.append(f"| {k[0]} × {k[1]} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def checks_table(rows: list[dict], impl_names: list[str]) -> str:
    """Per implementation: the worst y error over all shapes as a fraction of the tolerance, and
    whether residual_out was bit-exact everywhere."""
    out = ["| implementation | worst y error / tolerance | residual_out bit-exact |", "|---|---|---|"]
    for n in impl_names:
        sel = [r for r in rows if r["impl"] == n and r["section"] == "bandwidth" and r.get("err_over_tol") is not None]
        if not sel:
            continue
        worst = max(r["err_over_tol"] for r in sel)
        exact = all(r.get("residual_exact") for r in sel)
        out.append(f"| {n} | {worst:.2f} | {'yes' if exact else 'no'} |")
    return "\n".join(out)


def markdown_report(header: dict, rows: list[dict], impl_names: list[str], unavailable: dict,
                    plot_name: str | None) -> str:
    lines = [f"### addrmsnorm benchmark: {header['gpu']}", "",
             f"- Date: {header['date']}; driver {header['driver']}; torch {header['torch']}; "
             f"triton {header['triton']}",
             f"- Command: `{header['command']}`",
             f"- Roofline, measured in this run: **{header['roofline_gbs']:.0f} GB/s** (the best of "
             + ", ".join(f"{k} {v:.0f}" for k, v in header["roofline_methods"].items()) + ")",
             *([f"- Merged from {len(header['merged_runs'])} runs; each row's % is of its own run's roofline: "
                + "; ".join(f"`{m['command']}` ({m['roofline_gbs']:.0f} GB/s"
                            + (", stopped early" if m["partial"] else "") + ")" for m in header["merged_runs"])]
               if header.get("merged_runs") else []),
             f"- Timing: {header['timing']}",
             "- Cells: GB/s by the fused byte model · % of the roofline · µs per call (median). "
             "In-place implementations (vLLM convention) for addrmsnorm, FlashInfer and vLLM; "
             "the others return new tensors.",
             *(["- addrmsnorm (C++ runtime) is the AOT library called from Python through ctypes: graph "
                "replay hides the ctypes cost, the eager CPU column does not."]
               if "addrmsnorm (C++ runtime)" in impl_names else []),
             "- The C ABI's own cost, called from C++, is the 'addrmsnorm C ABI from C++' column "
             "(addrmsnorm-bench --overhead), beside a bare cuLaunchKernel.",
             ""]
    if unavailable:
        lines.append("Not measured: " + "; ".join(f"{k}: {v}" for k, v in unavailable.items()) + ".")
        lines.append("")
    if header.get("compile_fallbacks"):
        lines.append("torch.compile fell back to eager for: " + ", ".join(header["compile_fallbacks"]))
        lines.append("")
    targets = targets_section(header, rows)
    if targets:
        lines += ["#### Targets", "", targets]
    targets15 = targets_issue15(header, rows)
    if targets15:
        lines += ["#### Targets (issue 15)", "", targets15]
    lines += ["#### Bandwidth, cold L2", "", bandwidth_table(rows, impl_names, header.get("ours"), header.get("peers")), ""]
    if plot_name:
        lines += [f"![GB/s against H]({plot_name})", ""]
    dec = latency_table(rows, "decode_chain", impl_names, "µs per call, 64 dependent calls in one graph")
    if dec:
        lines += ["#### Decode chain", "", dec, ""]
    cpu = latency_table(rows, "cpu_overhead", impl_names + ["addrmsnorm C ABI from C++", "bare cuLaunchKernel (C++)"],
                        "wall µs per eager call")
    if cpu:
        lines += ["#### CPU cost per eager call (1,000 calls, one synchronize)", "", cpu, ""]
    from .backward import __doc__ as backward_doc, table as backward_table

    bwd = backward_table(rows)
    if bwd:
        model = backward_doc.split("Byte model of the backward")[1].split("Timing:")[0].strip()
        lines += ["#### Training: backward, and forward + backward (GB/s · % of roofline · µs per call)", "",
                  "Byte model of the backward " + model, "", bwd, ""]
    from .quant import __doc__ as quant_doc, table as quant_table

    qt = quant_table(rows)
    if qt:
        model = quant_doc.split("Byte model")[1].split("Timing:")[0].strip()
        lines += ["#### Quantized outputs (GB/s · % of roofline · µs per call; ✗: q differs from quant(the contract's y) in more than 0.1% of elements)", "",
                  "Byte model " + model, "", qt, ""]
    lines += ["#### Checks against the float64 reference (before timing)", "", checks_table(rows, impl_names), ""]
    return "\n".join(lines)


def plot(rows: list[dict], impl_names: list[str], roofline_gbs: float, path: Path, title: str) -> bool:
    """GB/s against H, bf16, the largest N measured at each H; the roofline across. False if
    matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    bw = [r for r in rows if r["section"] == "bandwidth" and r["x_dtype"] == "bf16"
          and r["residual_dtype"] == "bf16" and r.get("gbs")]
    fig, ax = plt.subplots(figsize=(10, 5.5))
    for name in impl_names:
        best_n = {}
        for r in bw:
            if r["impl"] == name and r["N"] * r["H"] >= best_n.get(r["H"], (0, None))[0]:
                best_n[r["H"]] = (r["N"] * r["H"], r)
        if not best_n:
            continue
        # H that are multiples of 16 as a line; the others (3000, 4100, 11111: rows that cannot
        # all start 16-byte aligned) as crosses of the same colour, so the line stays readable.
        aligned = sorted(h for h in best_n if h % 16 == 0)
        odd = sorted(h for h in best_n if h % 16)
        line, = ax.plot(aligned, [best_n[h][1]["gbs"] for h in aligned], marker="o", label=name)
        if odd:
            ax.scatter(odd, [best_n[h][1]["gbs"] for h in odd], marker="x", s=60, color=line.get_color())
    ax.axhline(roofline_gbs, color="black", linestyle="--", label=f"roofline {roofline_gbs:.0f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("H (hidden size); x: H not a multiple of 16")
    ax.set_ylabel("GB/s (fused byte model)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


REPORT_BEGIN = "<!-- results:begin (written by python -m addrmsnorm.bench --update-docs) -->"
REPORT_END = "<!-- results:end -->"


def update_report_doc(doc: Path, section: str) -> None:
    """Replace the results section of doc (between REPORT_BEGIN and REPORT_END), or append one."""
    text = doc.read_text() if doc.exists() else "# The benchmark report\n"
    if REPORT_BEGIN in text and REPORT_END in text:
        pre = text[:text.index(REPORT_BEGIN)]
        post = text[text.index(REPORT_END) + len(REPORT_END):]
    else:
        pre, post = text.rstrip() + "\n\n", "\n"
    doc.write_text(pre + REPORT_BEGIN + "\n" + section.strip() + "\n" + REPORT_END + post)


# ----- the performance targets (issue 7), each a ratio within one run ------------------------------

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
    from .impls import MODULE_GRAD_MODE, PYTHON_API, PYTHON_API_FUNCTIONAL

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
