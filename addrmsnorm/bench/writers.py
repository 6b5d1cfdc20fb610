"""Writers for the report: CSV, JSON, markdown and the PNG plot. Pure functions of the rows, so
they are tested on the CPU."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from .backward import __doc__ as backward_doc, table as backward_table
from .cells import cell as _cell
from .block_quant import __doc__ as block_quant_doc, table as block_quant_table
from .plain import __doc__ as plain_doc, table as plain_table
from .prefill import __doc__ as prefill_doc, table as prefill_table
from .rope import __doc__ as rope_doc, table as rope_table
from .variants import __doc__ as variants_doc, table as variants_table
from .quant import __doc__ as quant_doc, table as quant_table

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
    if any(r["section"] == "bandwidth" for r in rows):  # (--plain-only runs have none)
        lines += ["#### Bandwidth, cold L2", "", bandwidth_table(rows, impl_names, header.get("ours"), header.get("peers")),
                  ""]
        if plot_name:
            lines += [f"![GB/s against H]({plot_name})", ""]
    dec = latency_table(rows, "decode_chain", impl_names, "µs per call, 64 dependent calls in one graph")
    if dec:
        lines += ["#### Decode chain", "", dec, ""]
    cpu = latency_table(rows, "cpu_overhead", impl_names + ["addrmsnorm C ABI from C++", "bare cuLaunchKernel (C++)"],
                        "wall µs per eager call")
    if cpu:
        lines += ["#### CPU cost per eager call (1,000 calls, one synchronize)", "", cpu, ""]
    bwd = backward_table(rows)
    if bwd:
        model = backward_doc.split("Byte model of the backward")[1].split("Timing:")[0].strip()
        lines += ["#### Training: backward, and forward + backward (GB/s · % of roofline · µs per call)", "",
                  "Byte model of the backward " + model, "", bwd, ""]
    qt = quant_table(rows)
    if qt:
        model = quant_doc.split("Byte model")[1].split("Timing:")[0].strip()
        lines += ["#### Quantized outputs (GB/s · % of roofline · µs per call; ✗: q differs from quant(the contract's y) in more than 0.1% of elements)", "",
                  "Byte model " + model, "", qt, ""]
    bt = block_quant_table(rows)
    if bt:
        model = block_quant_doc.split("Byte model")[1].split("Timing:")[0].strip()
        lines += ["#### Block-scaled outputs: NVFP4, MXFP8, MXFP4 (GB/s · % of roofline · µs per call; ✗: q differs "
                  "from ours in more than 0.1% of bytes)", "", "Byte model " + model, "", bt, ""]
    pt = plain_table(rows)
    if pt:
        model = plain_doc.split("Byte model")[1].split("Shapes.")[0].strip()
        lines += ["#### The plain norm: RMSNorm without a residual, QK norm, static fp8", "",
                  "Byte model " + model, "", pt]
    vt = variants_table(rows)
    if vt:
        model = variants_doc.split("Byte model")[1].split("Shapes:")[0].strip()
        lines += ["#### The norm variants: the sandwich norm, the gated norm, the latent pair", "", "Byte model " + model,
                  "", vt]
    ft = prefill_table(rows)
    if ft:
        model = prefill_doc.split("Byte model")[1].split("Implementations.")[0].strip()
        lines += ["#### Prefill chunks: the fused op and the plain norm at 256 to 4096 rows", "", "Byte model " + model,
                  "", ft]
    rt = rope_table(rows)
    if rt:
        model = rope_doc.split("Byte model")[1].split("Shapes:")[0].strip()
        lines += ["#### The QK norm with the rotation (RoPE)", "", "Byte model " + model, "", rt]
    if any(r["section"] == "bandwidth" for r in rows):
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
