"""The report's table cells, shared by the writers and the sections (backward.py, quant.py)."""

from __future__ import annotations


def cell(r: dict | None) -> str:
    """One measurement: GB/s · % of the same-run roofline · µs, or why there is none."""
    if r is None:
        return "n/a"
    if r.get("note", "").startswith("failed") or r.get("gbs") is None:
        return r.get("note", "failed") or "failed"
    return f"{r['gbs']:.0f} · {r['pct_roofline']:.0f}% · {r['us_median']:.1f}µs"
