"""The report's table cells, shared by the writers and the sections (backward.py, quant.py, block_quant.py)."""

from __future__ import annotations


def cell(r: dict | None) -> str:
    """One measurement: GB/s · % of the same-run roofline · µs, or why there is none."""
    if r is None:
        return "n/a"
    if r.get("note", "").startswith("failed") or r.get("gbs") is None:
        return r.get("note", "failed") or "failed"
    return f"{r['gbs']:.0f} · {r['pct_roofline']:.0f}% · {r['us_median']:.1f}µs"


def mode_rows(sel: list[dict]) -> list[str]:
    """A table of one line per (mode, N, H) and one column per implementation, each cell marked ✗ where
    its row carries a note that is not a failure (an output that differs from the check's)."""
    names = list(dict.fromkeys(r["impl"] for r in sel))
    by = {(r["mode"], r["N"], r["H"], r["impl"]): r for r in sel}
    out = ["| mode | N × H (bf16) | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for k in dict.fromkeys((r["mode"], r["N"], r["H"]) for r in sel):
        cells = []
        for n in names:
            r = by.get((*k, n))
            cells.append(cell(r) + (" ✗" if r and r.get("note") and not r["note"].startswith("failed") else ""))
        out.append(f"| {k[0]} | {k[1]} × {k[2]} | " + " | ".join(cells) + " |")
    return out
