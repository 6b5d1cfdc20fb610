"""The benchmark report: addrmsnorm against every peer, in GB/s, as a share of a roofline measured
in the same run. How it measures: docs/report.md.

    python -m addrmsnorm.bench                 # the standard grid
    python -m addrmsnorm.bench --quick         # a subset
    python -m addrmsnorm.bench --hidden 128,4100   # the standard grid's rows at these H only
    python -m addrmsnorm.bench --shapes 16384x4096,1x8192 --dtypes bf16,bf16/fp32
    python -m addrmsnorm.bench --render DIR1,DIR2 --out DIR    # merge runs into one report

Writes results.csv, results.json, report.md and gbs_vs_h.png to results/<gpu>-<date>/ (or --out),
and prints the markdown. With no GPU it says so and runs the correctness demo on the CPU under the
Triton interpreter instead.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import os
import re
import shlex
import subprocess
import sys
import traceback
from pathlib import Path

import torch

from .grid import (BULK_ELEMENTS, CHAIN, DECODE_SHAPES, DTYPE_NAMES, EXTRA_DTYPE_SHAPES, MAX_ELEMENTS,  # noqa: F401
                   QUICK_H, QUICK_N, STANDARD_H, STANDARD_N)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_dtypes(spec: str):
    out = []
    for item in spec.split(","):
        x, _, r = item.partition("/")
        out.append((DTYPE_NAMES[x], DTYPE_NAMES[r or x]))
    return out


def bulk_rows(h: int) -> int:
    """Rows of the bulk shape at H: N * H >= 16M (at least 16384 rows), within MAX_ELEMENTS."""
    return min(max(16384, -(-BULK_ELEMENTS // h)), max(1, MAX_ELEMENTS // h))


OTHER_DTYPES = ((torch.float16, torch.float16), (torch.bfloat16, torch.float32), (torch.float32, torch.float32))


def grid(args) -> list[tuple[int, int, torch.dtype, torch.dtype]]:
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
        return [(n, h, xd, rd) for n, h in shapes for xd, rd in parse_dtypes(args.dtypes or "bf16")]
    ns, hs = (QUICK_N, QUICK_H) if args.quick else (STANDARD_N, STANDARD_H)
    if args.hidden:
        hs = [int(h) for h in args.hidden.split(",")]
    out = []
    bf16 = (torch.bfloat16, torch.bfloat16)
    if getattr(args, "bulk", False):  # the targets' shapes only: P1 bulk at every H and dtype, P5, mid-size
        out = [(bulk_rows(h), h, xd, rd) for h in hs for xd, rd in (bf16, *OTHER_DTYPES)]
        if 128 in hs:
            out.append((1 << 20, 128, *bf16))
        if 4096 in hs:
            out += [(512, 4096, *bf16), (2048, 4096, *bf16)]
        return out
    for h in hs:
        for n in ns:
            shape = (min(n, max(1, MAX_ELEMENTS // h)), h, *bf16)
            if shape not in out:
                out.append(shape)
        if (bulk_rows(h), h, *bf16) not in out:
            out.append((bulk_rows(h), h, *bf16))  # the bulk shape, e.g. 131072 x 128 (QK-norm size)
    if args.quick:
        out.append((1 << 20, 128, *bf16))  # per-head QK-norm size, as the P5 target states it
        for n, h in EXTRA_DTYPE_SHAPES:
            out += [(n, h, xd, rd) for xd, rd in OTHER_DTYPES]
    else:
        if 128 in hs:
            out.append((1 << 20, 128, *bf16))
        out += [(bulk_rows(h), h, xd, rd) for h in hs for xd, rd in OTHER_DTYPES]
    if getattr(args, "no_bulk", False):  # the rest of the grid, after a --bulk run
        targets = set(grid(argparse.Namespace(shapes=None, dtypes=None, quick=args.quick, hidden=args.hidden,
                                              bulk=True, no_bulk=False)))
        out = [s for s in out if s not in targets]
    # Bulk shapes (the P1 target's) first, so that a run stopped early has measured them.
    return sorted(out, key=lambda s: s[0] * s[1] < BULK_ELEMENTS)


def _short(d: torch.dtype) -> str:
    return {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}[d]


def _inputs(N, H, xd, rd, gen):
    x = torch.randn(N, H, device="cuda", dtype=torch.float32, generator=gen).to(xd)
    r = (4 * torch.randn(N, H, device="cuda", dtype=torch.float32, generator=gen)).to(rd)
    return x, r


def check_impl(impl, N, H, xd, rd, w, eps):
    """Run once on fresh inputs; the worst y error over its tolerance, and residual exactness."""
    from addrmsnorm.reference import TOLERANCES, fused_add_rmsnorm_ref

    gen = torch.Generator(device="cuda").manual_seed(N * 131 + H)
    x, r = _inputs(N, H, xd, rd, gen)
    ref = fused_add_rmsnorm_ref(x, r, w, eps)
    y, ro = impl.fn(x, r, w, eps)
    torch.cuda.synchronize()
    tol = TOLERANCES[xd]
    err = ((y.double() - ref.y).abs() / (tol.atol + tol.rtol * ref.y.abs())).max().item()
    exact = ro.dtype == ref.residual_out.dtype and torch.equal(ro, ref.residual_out)
    return err, exact


def bench_bandwidth(impl, N, H, xd, rd, roofline, eps=1e-6):
    from addrmsnorm.bench.byte_model import forward_bytes
    from addrmsnorm.bench.timing import sets_for_cold_l2, time_graph

    w = (1 + 0.1 * torch.randn(H, device="cuda")).to(xd)
    err, exact = check_impl(impl, N, H, xd, rd, w, eps)
    nbytes = forward_bytes(N, H, xd.itemsize, rd.itemsize, xd.itemsize)
    n_sets = sets_for_cold_l2(nbytes)
    gen = torch.Generator(device="cuda").manual_seed(7)
    sets = [_inputs(N, H, xd, rd, gen) for _ in range(n_sets)]
    # Every call's outputs stay alive until the timing ends, so that an allocating implementation
    # writes fresh addresses at every call of the graph rather than reusing the block it just freed
    # (issue 15: reuse inflated one by 10-15% at 512 x 4096). In-place ones write into their set.
    kept = []
    t = time_graph(lambda i: kept.append(impl.fn(sets[i][0], sets[i][1], w, eps)), n_sets)
    gbs = nbytes / t.median_us / 1e3
    del sets, kept
    return dict(us_median=t.median_us, us_min=t.min_us, us_max=t.max_us, gbs=gbs,
                pct_roofline=100 * gbs / roofline, err_over_tol=err, residual_exact=exact,
                note=f"{n_sets} buffer sets")


def bench_decode(impl, N, H, xd=torch.bfloat16, eps=1e-6):
    from addrmsnorm.bench.timing import time_graph

    gen = torch.Generator(device="cuda").manual_seed(11)
    x, r = _inputs(N, H, xd, xd, gen)
    w = (1 + 0.1 * torch.randn(H, device="cuda")).to(xd)
    state = {"x": x, "r": r}

    def chain(_):
        for _ in range(CHAIN):  # each call's outputs feed the next
            state["x"], state["r"] = impl.fn(state["x"], state["r"], w, eps)

    t = time_graph(chain, 1)
    return dict(us_median=t.median_us / CHAIN, us_min=t.min_us / CHAIN, us_max=t.max_us / CHAIN)


def bench_cpu(impl, N=1, H=4096, xd=torch.bfloat16, eps=1e-6):
    from addrmsnorm.bench.timing import time_eager_cpu

    gen = torch.Generator(device="cuda").manual_seed(3)
    x, r = _inputs(N, H, xd, xd, gen)
    w = torch.ones(H, device="cuda", dtype=xd)
    us = time_eager_cpu(lambda: impl.fn(x, r, w, eps))
    return dict(us_median=us, us_min=us, us_max=us)


def cpp_overhead():
    """The C ABI called from C++ and a bare cuLaunchKernel, from addrmsnorm-bench --overhead."""
    from addrmsnorm.locate import REPO

    exe = Path(os.environ.get("ADDRMSNORM_BENCH", REPO / "build" / "devtools" / "cpp" / "addrmsnorm-bench"))
    if not exe.exists():
        return None, f"addrmsnorm-bench not built ({exe})"
    try:
        out = subprocess.run([str(exe), "--overhead"], capture_output=True, text=True, timeout=300).stdout
    except Exception as e:  # noqa: BLE001
        return None, f"addrmsnorm-bench failed: {e}"
    m = re.search(r"overhead_us api=([\d.]+) bare=([\d.]+)", out)
    if not m:
        return None, "addrmsnorm-bench printed no overhead line"
    return (float(m.group(1)), float(m.group(2))), ""


def header_info(roof, command):
    import triton

    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
    except Exception:  # noqa: BLE001
        smi = "unknown"
    return {"gpu": torch.cuda.get_device_name(), "driver": smi, "torch": torch.__version__,
            "triton": triton.__version__, "date": dt.date.today().isoformat(), "command": command,
            "roofline_gbs": roof.gbs, "roofline_methods": roof.methods,
            "timing": "CUDA-graph replay, median (min, max in the CSV) of 15 replays; cold L2 by "
                      "rotating through enough buffer sets that a replay moves > 4x the L2; at least "
                      "8 calls per graph"}


def run(args) -> int:
    from addrmsnorm.bench import writers
    from addrmsnorm.bench.impls import all_impls
    from addrmsnorm.bench.timing import measure_roofline

    command = "python -m addrmsnorm.bench " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if args.block_quant_only:  # no other section
        args.plain_only = args.no_plain = args.no_quant = args.no_variants = args.no_rope = True
        args.no_prefill = True
    if args.variants_only:
        args.plain_only = args.no_plain = args.no_quant = args.no_rope = True
        args.no_prefill = True
    if args.rope_only:
        args.plain_only = args.no_plain = args.no_quant = args.no_variants = args.no_prefill = True
    if args.prefill_only:
        args.plain_only = args.no_plain = args.no_quant = args.no_variants = args.no_rope = True
    impls = all_impls()
    if args.impls:
        wanted = [s.strip().lower() for s in args.impls.split(",")]
        impls = [i for i in impls if any(w in i.name.lower() for w in wanted)]
    unavailable = {i.name: i.reason for i in impls if not i.available}
    live = []
    for i in impls:
        if not i.available:
            continue
        try:
            if i.setup:
                i.setup()
            live.append(i)
        except Exception as e:  # noqa: BLE001 - a peer that fails to set up is reported, not fatal
            unavailable[i.name] = f"setup failed: {e}"
    names = [i.name for i in live]
    _log(f"implementations: {', '.join(names)}")
    for n, why in unavailable.items():
        _log(f"  not measured: {n}: {why}")

    _log("measuring the copy roofline ...")
    roof = measure_roofline()
    _log(f"roofline {roof.gbs:.0f} GB/s ({', '.join(f'{k} {v:.0f}' for k, v in roof.methods.items())})")
    header = header_info(roof, command)
    rows = []
    shapes = grid(args)
    kernels = [i for i in live if not i.overhead_only]
    total = len(shapes) * len([i for i in kernels if not i.latency_only])
    done = 0
    slug = re.sub(r"[^a-z0-9]+", "-", header["gpu"].lower()).strip("-")
    out = Path(args.out) if args.out else Path("results") / f"{slug}-{header['date']}"
    out.mkdir(parents=True, exist_ok=True)
    header.update(implementations=names, unavailable=unavailable, **_roles(live))
    # The latency sections first: they are short, and a run stopped in the long bandwidth grid keeps them.
    if not args.no_decode and not args.plain_only:
        for N, H in DECODE_SHAPES:
            for impl in kernels:
                base = dict(section="decode_chain", impl=impl.name, N=N, H=H, x_dtype="bf16", residual_dtype="bf16")
                try:
                    rows.append(dict(base, **bench_decode(impl, N, H)))
                except Exception as e:  # noqa: BLE001
                    rows.append(dict(base, note=f"failed: {type(e).__name__}"))
            _log(f"decode chain {N}x{H} done")
    if not args.no_backward and not args.plain_only:
        from addrmsnorm.bench import backward

        rows += backward.run(roof.gbs, log=_log)
        _log("training rows done")
    if args.block_quant_only:  # the block-scaled formats' rows alone
        shapes = []
    # The sections of their own, each in its module; with its --X-only, the only one (no bandwidth grid).
    for name, skip, only, what in (("plain", args.no_plain, args.plain_only, "plain-norm rows"),
                                   ("variants", args.no_variants, args.variants_only, "variant rows"),
                                   ("rope", args.no_rope, args.rope_only, "rotation rows"),
                                   ("prefill", args.no_prefill, args.prefill_only, "prefill-chunk rows")):
        if skip:
            continue
        rows += importlib.import_module(f"addrmsnorm.bench.{name}").run(roof.gbs, log=_log)
        _log(f"{what} done")
        if only:
            shapes = []
    if not args.no_quant and not args.plain_only:
        from addrmsnorm.bench import quant

        rows += quant.run(roof.gbs, log=_log)
        _log("quantized-output rows done")
    if args.block_quant_only or not args.no_quant and not args.plain_only:
        from addrmsnorm.bench import block_quant

        rows += block_quant.run(roof.gbs, log=_log)
        _log("block-scaled rows done")
    if not args.no_overhead and not args.plain_only:
        for impl in live:
            base = dict(section="cpu_overhead", impl=impl.name, N=1, H=4096, x_dtype="bf16", residual_dtype="bf16")
            try:
                rows.append(dict(base, **bench_cpu(impl)))
            except Exception as e:  # noqa: BLE001
                rows.append(dict(base, note=f"failed: {type(e).__name__}"))
        (cpp, why) = cpp_overhead()
        for name, val in (("addrmsnorm C ABI from C++", cpp[0] if cpp else None),
                          ("bare cuLaunchKernel (C++)", cpp[1] if cpp else None)):
            rows.append(dict(section="cpu_overhead", impl=name, N=1, H=4096, x_dtype="bf16", residual_dtype="bf16",
                             us_median=val, us_min=val, us_max=val, note="" if cpp else why))
        _log("CPU overhead done")

    for si, (N, H, xd, rd) in enumerate(shapes):
        if si % 8 == 7:  # keep what was measured if the run is stopped: --render can still report it
            writers.write_json(dict(header, partial=True), rows, out / "results.json")
        for impl in kernels:
            if impl.latency_only:
                continue
            done += 1
            base = dict(section="bandwidth", impl=impl.name, N=N, H=H, x_dtype=_short(xd), residual_dtype=_short(rd))
            if not impl.supports(xd, rd):
                rows.append(dict(base, note="n/a: needs residual in x's dtype"))
                continue
            try:
                res = bench_bandwidth(impl, N, H, xd, rd, roof.gbs)
                rows.append(dict(base, **res))
                _log(f"[{done}/{total}] {N}x{H} {_short(xd)}/{_short(rd)} {impl.name}: "
                     f"{res['us_median']:.2f} µs, {res['gbs']:.0f} GB/s ({res['pct_roofline']:.0f}%)")
            except Exception as e:  # noqa: BLE001 - a failing peer is reported, not fatal
                msg = str(e).splitlines()[0][:80] if str(e) else type(e).__name__
                rows.append(dict(base, note=f"failed: {type(e).__name__}: {msg}"))
                _log(f"[{done}/{total}] {N}x{H} {impl.name}: FAILED {type(e).__name__}: {msg}")
            torch.cuda.empty_cache()
    compiled = next((i.fn for i in live if i.name == "torch.compile (reference)"), None)
    header["compile_fallbacks"] = [f"{k[0]} {k[1]}/{k[2]}" for k in getattr(compiled, "fallbacks", [])]
    writers.write_csv(rows, out / "results.csv")
    writers.write_json(header, rows, out / "results.json")
    return render(out, header, rows, args.update_docs)


def _roles(live) -> dict:
    """Which implementations the targets compare: ours (the torch op, with and without PDL), the
    one-row baseline, and the peers (everything else not ours)."""
    from addrmsnorm.bench.impls import BASELINE

    ours = [i.name for i in live if i.ours and not i.overhead_only]
    return {"ours": [n for n in ours if "PDL" not in n], "ours_pdl": [n for n in ours if "PDL" in n],
            "baseline": BASELINE, "peers": [i.name for i in live if not i.ours and i.name != BASELINE]}


REPORT_DOC = Path("docs/report.md")  # the last full report, kept in the repository (--update-docs)


def render(out: Path, header: dict, rows: list[dict], update_docs: bool, rendered_by: str = "") -> int:
    """report.md and the plot from the rows; optionally the results section of docs/report.md."""
    from addrmsnorm.bench import writers

    names = header["implementations"]
    has_plot = writers.plot(rows, names, header["roofline_gbs"], out / "gbs_vs_h.png",
                            f"addrmsnorm vs peers, bf16, {header['gpu']}, {header['date']}")
    md = writers.markdown_report(header, rows, names, header.get("unavailable", {}),
                                 "gbs_vs_h.png" if has_plot else None)
    (out / "report.md").write_text(md + "\n")
    print(md)
    _log(f"wrote {out}/results.csv, results.json, report.md" + (", gbs_vs_h.png" if has_plot else
                                                                 " (no plot: matplotlib is not installed)"))
    if update_docs:
        # The plot's path relative to the document that shows it.
        plot = os.path.relpath(out.resolve() / "gbs_vs_h.png", REPORT_DOC.resolve().parent)
        section = md.replace("](gbs_vs_h.png)", f"]({Path(plot).as_posix()})")
        section += f"\nRaw files: `{out.as_posix()}/` (results.csv, results.json, report.md).\n"
        if rendered_by:
            section += f"This section was rendered from those files by `{rendered_by}`.\n"
        writers.update_report_doc(REPORT_DOC, section)
        _log(f"updated {REPORT_DOC}")
    return 0


def render_saved(folders: str, update_docs: bool, out: str | None = None) -> int:
    """Re-render finished runs from their results.json (no GPU needed). Several folders (comma-separated)
    are merged into one report in ``out``: each row keeps the percent of its own run's roofline."""
    import json

    dirs = [Path(f) for f in folders.split(",") if f]
    runs = [json.loads((d / "results.json").read_text()) for d in dirs]
    header, rows = dict(runs[0]["header"]), [r for run in runs for r in run["rows"]]
    if len(runs) > 1:
        header["merged_runs"] = [{"folder": d.as_posix(), "command": run["header"]["command"],
                                  "roofline_gbs": run["header"]["roofline_gbs"],
                                  "partial": run["header"].get("partial", False)} for d, run in zip(dirs, runs)]
        for key in ("implementations", "peers", "compile_fallbacks"):
            merged = []
            for run in runs:
                merged += [n for n in run["header"].get(key, []) if n not in merged]
            header[key] = merged
    dest = Path(out) if out else dirs[0]
    dest.mkdir(parents=True, exist_ok=True)
    if len(runs) > 1:
        from addrmsnorm.bench import writers

        writers.write_csv(rows, dest / "results.csv")
        writers.write_json(header, rows, dest / "results.json")
    return render(dest, header, rows, update_docs,
                  rendered_by=f"python -m addrmsnorm.bench --render {folders}" + (f" --out {out}" if out else "")
                  + (" --update-docs" if update_docs else ""))


def no_gpu(args) -> int:
    """Without a GPU: the correctness demo of what the report's sections would have timed."""
    sections = (["--variants"] if args.variants_only else []) + (["--rope"] if args.rope_only else [])
    print("No CUDA GPU here: the benchmark report needs one (it times kernels on the GPU). Running "
          f"the correctness demo{' of those rows' if sections else ''} on the CPU under the Triton interpreter "
          "instead.", flush=True)
    # Chosen here, so the demo starts under the interpreter and does not announce it a second time.
    return subprocess.call([sys.executable, "-m", "addrmsnorm.demo", *sections],
                           env={**os.environ, "TRITON_INTERPRET": "1"})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m addrmsnorm.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a subset of the standard grid")
    ap.add_argument("--shapes", help="comma-separated NxH, e.g. 16384x4096,1x8192")
    ap.add_argument("--hidden", help="the standard (or quick) grid at these H only, e.g. 128,4100")
    ap.add_argument("--bulk", action="store_true",
                    help="only the targets' shapes: N*H >= 16M at every H in four dtype pairs, 1M x 128, "
                         "512 x 4096 and 2048 x 4096")
    ap.add_argument("--no-bulk", action="store_true", help="the grid without the shapes --bulk measures")
    ap.add_argument("--dtypes", help="with --shapes: comma-separated x[/residual], e.g. bf16,bf16/fp32")
    ap.add_argument("--impls", help="only implementations whose name contains one of these (comma-separated)")
    ap.add_argument("--out", help="output folder (default results/<gpu>-<date>)")
    ap.add_argument("--no-decode", action="store_true", help="skip the decode-chain latency")
    ap.add_argument("--no-backward", action="store_true", help="skip the training (backward) rows")
    ap.add_argument("--no-quant", action="store_true", help="skip the quantized-output (fp8/int8) rows")
    ap.add_argument("--no-overhead", action="store_true", help="skip the CPU cost per eager call")
    ap.add_argument("--no-plain", action="store_true", help="skip the plain-norm rows (RMSNorm, QK norm, fp8)")
    ap.add_argument("--plain-only", action="store_true", help="only the plain-norm rows")
    ap.add_argument("--block-quant-only", action="store_true",
                    help="only the block-scaled rows (NVFP4, MXFP8, MXFP4; --no-quant skips them)")
    ap.add_argument("--no-variants", action="store_true", help="skip the norm variants' rows (the sandwich, gated and "
                                                                  "weightless norms, the scaled residual, the latent pair)")
    ap.add_argument("--variants-only", action="store_true", help="only the norm variants' rows")
    ap.add_argument("--no-rope", action="store_true", help="skip the rows of the QK norm with the rotation (RoPE)")
    ap.add_argument("--rope-only", action="store_true", help="only the rows of the QK norm with the rotation")
    ap.add_argument("--no-prefill", action="store_true", help="skip the prefill-chunk rows (N 256 to 4096 at H 2048, "
                                                                 "4096 and 8192, fused and plain, against the peers)")
    ap.add_argument("--prefill-only", action="store_true", help="only the prefill-chunk rows")
    ap.add_argument("--update-docs", action="store_true",
                    help="write the report into the results section of docs/report.md")
    ap.add_argument("--render", metavar="DIR[,DIR...]",
                    help="re-render report.md, the plot (and with --update-docs the results section of docs/report.md) from "
                         "DIR/results.json of earlier runs; several are merged into --out")
    args = ap.parse_args(argv)
    if args.render:
        return render_saved(args.render, args.update_docs, args.out)
    if not torch.cuda.is_available():
        return no_gpu(args)
    try:
        return run(args)
    except KeyboardInterrupt:
        return 130
    except Exception:  # noqa: BLE001 - say what broke rather than crash without a word
        traceback.print_exc()
        print("the benchmark stopped on an unexpected error (above)", file=sys.stderr)
        return 1
