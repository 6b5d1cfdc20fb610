"""Tuning measurements for ``addrmsnorm/configs.py`` on a GPU: the data the table's rows come from.

    PYTHONPATH=. python devtools/tune.py bulk   [--h 4096,4100] [--dtypes bf16,bf16/fp32]
    PYTHONPATH=. python devtools/tune.py decode [--plain] [--extra s4096r1w16f]
    PYTHONPATH=. python devtools/tune.py caps   [--h 128,2048,8192] [--caps 0,32,40] [--compile] [--extra s8192r1w16]
    PYTHONPATH=. python devtools/tune.py quant  [--h 32768,65536] [--extra s32768r1w32] [--caps 0] [--modes group] [--plain]
    PYTHONPATH=. python devtools/tune.py bwd    [--h 1024,4096,14336] [--extra s4096r1w32,l1024w4]
    PYTHONPATH=. python devtools/tune.py weight [--h 4096,4100] [--dtypes bf16,bf16/fp32]
    PYTHONPATH=. python devtools/tune.py plain  [--h 128,4096] [--dtypes bf16]     # the plain norm (no residual)
    PYTHONPATH=. ADDRMSNORM_BACKEND=triton python devtools/tune.py variants [--which gated,pair,sandwich] [--extra s8192r1w16ec64]
    PYTHONPATH=. python devtools/tune.py once 16384x4096 [--dtype bf16]   # a few plain launches, for ncu
    PYTHONPATH=. python devtools/tune.py once copy16384x4096               # the same bytes, copied

bulk: for each H, N = 2**25 // H rows (N*H >= 16M, as the P1 target asks), the table's config and
candidates around it (warps, rows per program, looped vs single pass, the weight loaded first or
after the reduction, x and residual loaded evict-last or not), timed as the report times (CUDA-graph replay, cold L2 by buffer rotation, median of 15), in
place as vLLM calls it, against the copy roofline measured in the same run.

weight: each weight dtype at each bulk shape and in the decode chain (fp16 and bf16 weights share
one kernel that converts their int16 bits by a runtime dtype argument; fp32 has its own).

caps: the table's config at each H under each register cap (maxnreg; 0: none), in place and into
given outputs (every call's outputs kept alive), at N * H = 2**26, interleaved in rounds so that drift
between them shows; with --compile, torch.compile of the contract beside them. A cap that spills is
refused by the AOT build, so check a winner with ``tools/aot_build.py --capped`` before it goes
into configs.MAX_REGISTERS.

quant: the quantized forward (static fp8, per-token fp8 and int8, per group of 128 fp8, and the block
formats NVFP4, MXFP8, MXFP4; with --plain the plain norm's, no residual) at N * H = 2**26, bf16, into
given outputs: the table's config, then --extra configs, each under the table's cap
and each of --caps (0: none), interleaved in rounds; q checked against the table config's (residual_out
bit-exact, q equal in all but 0.1% of elements: another config may sum the squares in another order).

bwd: the backward kernel (with dresidual_out and dweight, bf16) through the Triton JIT backend, under
the table's backward config and each --extra config (the config rule patched for the sweep; the
persistent grid follows each config's programs per SM), at N * H = 2**26, interleaved in rounds;
gradients checked against the float64 reference. Bytes by bench/backward.py's model. The table's
configs hold about 117 registers (sm_90, local cuobjdump): 16 warps per SM, where the grid aims
for 32.

plain: the plain norm (RESIDUAL off) at N * H = 2**26 into fresh outputs, for each H a sweep of single
passes (rows per program and warps at 16 to 64 elements per thread) and, from 8192 up, loops; and the
QK norm (a QKV buffer's q and k heads, 32 + 8 of 128, T = 8192, in place) over rows per program and
warps. It moves half the fused forward's bytes per row, so it wants more rows (bytes) per program.

variants: the gated norm (issue 68's rows: 65536 x 4096 in groups of 4096 and 1024, 16384 x 2048 in groups of
128, 4096 x 8192 in one group), the latent pair (1536 + 512 of a 2112-wide buffer, 16384 and 2048 rows, in place)
and the sandwich norm (Gemma's 1 + w, 16384 x 4096 and x 5376), each through its public call on the Triton JIT
backend with its config rule patched to each candidate: single passes at 8 to 64 elements a thread (rows per
program and warps), with and without evict-last, and --extra (each case takes the single passes of its own width's
tile and every loop; a c<cap> suffix times that config under a register cap, set in configs.MAX_REGISTERS for the
sweep as a table row's would be); bf16, cold L2, graph replay. Each candidate's
output is checked against the table config's (allclose: another config may sum in another order).

decode: 64 dependent in-place calls in one CUDA graph, per call, for N in (1, 8, 64) and H in (4096,
8192): the plain one-row Triton kernel (``addrmsnorm.bench.baseline``), then ours with and without
PDL, and with other warp counts. With --plain, the plain norm's chain (H 2048, 4096, 8192; N 1 and 8): the table's
config, its weight-first form and --extra configs, with and without PDL, beside FlashInfer's rmsnorm with PDL.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import replace

import torch
import triton

from addrmsnorm.bench.baseline import one_row_
from addrmsnorm.bench.byte_model import forward_bytes
from addrmsnorm.bench.timing import measure_roofline, sets_for_cold_l2, time_graph
from addrmsnorm import configs
from addrmsnorm.configs import KernelConfig, select_forward_config
from addrmsnorm.launcher import launch_forward
from addrmsnorm.reference import TOLERANCES, assert_close, fused_add_rmsnorm_ref, quantize_ref

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
BULK_H = [128, 512, 1024, 2048, 2880, 3000, 4096, 4100, 5120, 8192, 11111, 14336, 16384, 32768, 65536, 131072]


def _launch(x, r, w, cfg, pdl=False, out=None, cap=None):
    """In place (out None) or into out = (y, residual_out); cap: the register cap (None: the table's)."""
    H = x.shape[-1]
    o, ro = out if out is not None else (x, r)
    launch_forward(x, r, w, o, ro, None, n_rows=x.numel() // H, H=H, stride_x=H, stride_residual=H,
                   stride_out=H, stride_residual_out=H, eps=1e-6, weight_offset=0.0, pdl=pdl, config=cfg,
                   max_registers=cap)


def _tag(cfg: KernelConfig) -> str:
    return (f"{'looped' if cfg.looped else 'single'} b{cfg.block_h} r{cfg.rows_per_program} w{cfg.num_warps}"
            + (" weight-first" if cfg.weight_first else "") + (" evict-last" if cfg.evict_last else "")
            + (" re-read" if cfg.reread else "") + (" h kept" if cfg.keep_h else "")
            + (f" stages {cfg.stages}" if cfg.stages != 1 else ""))


def candidates(H: int, chosen: KernelConfig) -> list[KernelConfig]:
    """The table's config and its neighbours: warps halved and doubled, rows per program halved and
    doubled, the weight loaded first or not, evict-last or not; for wide rows, looped chunks and warps."""
    b = triton.next_power_of_2(H)
    out = [chosen]
    if not chosen.looped:
        out.append(replace(chosen, weight_first=not chosen.weight_first))
        out.append(replace(chosen, evict_last=not chosen.evict_last))
        for w in (chosen.num_warps // 2, chosen.num_warps * 2):
            if 1 <= w <= 32 and chosen.rows_per_program * b // (32 * w) >= 2:
                out.append(KernelConfig(b, chosen.rows_per_program, w, False, evict_last=chosen.evict_last))
        for rows in (chosen.rows_per_program // 2, chosen.rows_per_program * 2):
            if rows >= 1 and rows * b <= 16384:
                out.append(KernelConfig(b, rows, chosen.num_warps, False, evict_last=chosen.evict_last))
    if 8192 <= H:
        for chunk, w in ((4096, 8), (8192, 8), (8192, 16), (16384, 16), (16384, 32), (32768, 32)):
            c = KernelConfig(chunk, 1, w, True, keep_h=chosen.keep_h)
            if chunk < H and c not in out:
                out.append(c)
    if chosen.looped and b <= 32768:
        out.append(KernelConfig(b, 1, 32, False))
    return out


def bench_bulk(H, xd, rd, roof, out, rows=None, extra=(), out_of_place=False, compile_ref=False, only_extra=False):
    N = rows or max(1, (1 << 25) // H)
    nbytes = forward_bytes(N, H, xd.itemsize, rd.itemsize, xd.itemsize)
    gen = torch.Generator(device="cuda").manual_seed(H)
    sets = [(torch.randn(N, H, device="cuda", generator=gen).to(xd), torch.randn(N, H, device="cuda", generator=gen).to(rd))
            for _ in range(sets_for_cold_l2(nbytes))]
    outs = [(torch.empty_like(x), torch.empty_like(r)) for x, r in sets] if out_of_place else [None] * len(sets)
    w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(xd)
    chosen = configs.contiguous_forward_config(H, xd.itemsize, rd.itemsize)
    results = []
    base = [chosen] if only_extra else candidates(H, chosen)
    for cfg in base + [c for c in extra if c not in base]:
        x, r = sets[0][0][:64].clone(), sets[0][1][:64].clone()
        ref = fused_add_rmsnorm_ref(x, r, w, 1e-6)
        try:
            _launch(x, r, w, cfg)
        except Exception as e:  # noqa: BLE001 - e.g. out of registers or shared memory: skip it
            print(f"| {N}x{H} | {_name(xd, rd)} | {_tag(cfg)} | failed: {type(e).__name__} | | | | |", file=out,
                  flush=True)
            continue
        assert torch.equal(r, ref.residual_out)
        assert_close(x, ref.y, TOLERANCES[xd], f"{N}x{H} {cfg}")
        t = time_graph(lambda i: _launch(sets[i][0], sets[i][1], w, cfg, out=outs[i]), len(sets))
        gbs = nbytes / t.median_us / 1e3
        results.append((gbs, cfg))
        print(f"| {N}x{H} | {_name(xd, rd)} | {'**table** ' if cfg == chosen else ''}{_tag(cfg)} | {t.median_us:.2f} | "
              f"{t.min_us:.2f} | {t.max_us:.2f} | {gbs:.0f} | {100 * gbs / roof:.1f}% |", file=out, flush=True)
    if compile_ref:  # torch.compile of the contract, timed the same way (it returns new tensors)
        from addrmsnorm.bench.impls import contract_torch

        fn = torch.compile(contract_torch, dynamic=False)
        t = time_graph(lambda i: fn(sets[i][0], sets[i][1], w, 1e-6), len(sets))
        gbs = nbytes / t.median_us / 1e3
        print(f"| {N}x{H} | {_name(xd, rd)} | torch.compile (reference) | {t.median_us:.2f} | {t.min_us:.2f} | "
              f"{t.max_us:.2f} | {gbs:.0f} | {100 * gbs / roof:.1f}% |", file=out, flush=True)
    del sets, outs
    torch.cuda.empty_cache()
    return results


def _plain_candidates(H: int) -> list[KernelConfig]:
    b = triton.next_power_of_2(H)
    out = [configs.contiguous_forward_config(H, 2, 2)]  # the fused table's choice first
    if H <= configs.SINGLE_PASS_MAX_H:
        for rows in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            for w in (1, 2, 4, 8, 16):
                per_thread = b * rows // (32 * w)
                if 16 <= per_thread <= 64 and rows * b <= 32768:
                    for evict in (True, False):  # evict-last pays at bulk and costs at prefill chunks (issue 68)
                        c = KernelConfig(b, rows, w, False, evict_last=evict)
                        if c not in out:
                            out.append(c)
    if H >= 8192:
        for chunk, w in ((2048, 2), (4096, 4), (4096, 8), (8192, 4), (8192, 8), (8192, 16), (16384, 8), (16384, 16),
                         (8192, 32), (16384, 32)):
            for keep in (False, True):
                c = KernelConfig(chunk, 1, w, True, keep_h=keep)
                if chunk < H and c not in out:
                    out.append(c)
    return out


def plain(hs, dtypes, roof, out, rows=None, qk=True):
    """The plain norm's sweep (see the module docstring), then the QK norm's; rows: N (default
    2**26 // H, the bulk regime; a prefill chunk is a few hundred to a few thousand)."""
    print("| shape | dtype | config | µs (median) | GB/s | % roofline |\n|---|---|---|---|---|---|", file=out, flush=True)
    for dname in dtypes:
        xd = DT[dname]
        for H in hs:
            N = rows or max(1, (1 << 26) // H)
            nbytes = 2 * xd.itemsize * N * H
            gen = torch.Generator(device="cuda").manual_seed(H)
            n_sets = sets_for_cold_l2(nbytes)
            xs = [torch.randn(N, H, device="cuda", generator=gen).to(xd) for _ in range(n_sets)]
            ys = [torch.empty_like(x) for x in xs]
            w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(xd)
            best = (0.0, "")
            for cfg in _plain_candidates(H):
                def call(i, cfg=cfg):
                    launch_forward(xs[i], None, w, ys[i], None, None, n_rows=N, H=H, stride_x=H, stride_residual=0,
                                   stride_out=H, stride_residual_out=0, eps=1e-6, weight_offset=0.0, config=cfg)
                try:
                    t = time_graph(call, n_sets)
                except Exception as e:  # noqa: BLE001 - out of registers or shared memory
                    print(f"| {N}x{H} | {dname} | {_tag(cfg)} | failed: {type(e).__name__} | | |", file=out, flush=True)
                    continue
                gbs = nbytes / t.median_us / 1e3
                best = max(best, (gbs, _tag(cfg)))
                print(f"| {N}x{H} | {dname} | {_tag(cfg)} | {t.median_us:.2f} | {gbs:.0f} | {100 * gbs / roof:.1f}% |",
                      file=out, flush=True)
            print(f"| {N}x{H} | {dname} | **best**: {best[1]} | | {best[0]:.0f} | {100 * best[0] / roof:.1f}% |",
                  file=out, flush=True)
            del xs, ys
            torch.cuda.empty_cache()
    if not qk:
        return
    T, nq, nk, D = 8192, 32, 8, 128
    qkvs = [torch.randn(T, (nq + 2 * nk) * D, device="cuda").to(torch.bfloat16) for _ in range(4)]
    wq, wk = torch.ones(D, device="cuda", dtype=torch.bfloat16), torch.ones(D, device="cuda", dtype=torch.bfloat16)
    nbytes = 2 * 2 * T * (nq + nk) * D
    for rows in (8, 16, 32, 64, 128):
        for w in (1, 2, 4, 8):
            if not 16 <= D * rows // (32 * w) <= 64:
                continue
            cfg = KernelConfig(D, rows, w, False, evict_last=True)

            def call(i, cfg=cfg):
                q = qkvs[i]
                launch_forward(q, None, wq, q, None, None, n_rows=T * (nq + nk), H=D, stride_x=q.stride(0),
                               stride_residual=0, stride_out=q.stride(0), stride_residual_out=0, eps=1e-6,
                               weight_offset=0.0, group_rows=nq + nk, stride_x_group=D, stride_out_group=D,
                               weight2=wk, group_split=nq, config=cfg)
            t = time_graph(call, len(qkvs))
            gbs = nbytes / t.median_us / 1e3
            print(f"| qk T={T} | bf16 | {_tag(cfg)} | {t.median_us:.2f} | {gbs:.0f} | {100 * gbs / roof:.1f}% |",
                  file=out, flush=True)


def _fits(cfg: KernelConfig, H: int) -> bool:
    """Whether an --extra config is one to try at H: a looped chunk narrower than H, or a single pass
    whose block is H's next power of two."""
    return cfg.block_h < H if cfg.looped else cfg.block_h == triton.next_power_of_2(H)


def caps(hs, dtypes, cap_values, roof, out, compile_ref=False, rounds=3, extra=()):
    """The table's config and each --extra config that fits H, under each cap, in place and into
    given outputs, interleaved in rounds."""
    print("| shape | dtypes | variant | round | µs (median) | GB/s | % roofline |\n|---|---|---|---|---|---|---|",
          file=out, flush=True)
    for xd, rd in dtypes:
        for H in hs:
            N = max(16384, (1 << 26) // H)
            nbytes = forward_bytes(N, H, xd.itemsize, rd.itemsize, xd.itemsize)
            gen = torch.Generator(device="cuda").manual_seed(H)
            n_sets = sets_for_cold_l2(nbytes)
            sets = [(torch.randn(N, H, device="cuda", generator=gen).to(xd),
                     torch.randn(N, H, device="cuda", generator=gen).to(rd)) for _ in range(n_sets)]
            outs = [(torch.empty_like(x), torch.empty_like(r)) for x, r in sets]
            w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(xd)
            chosen = configs.contiguous_forward_config(H, xd.itemsize, rd.itemsize)
            variants = []
            for cfg, cap in [(c, cap) for c in [chosen] + [c for c in extra if c != chosen and _fits(c, H)]
                             for cap in cap_values]:
                x, r = sets[0][0][:64].clone(), sets[0][1][:64].clone()
                ref = fused_add_rmsnorm_ref(x, r, w, 1e-6)
                try:
                    _launch(x, r, w, cfg, cap=cap)
                except Exception as e:  # noqa: BLE001 - e.g. out of registers or shared memory: skip it
                    print(f"| {N}x{H} | {_name(xd, rd)} | {_tag(cfg)} cap {cap or 'none'} | failed: "
                          f"{type(e).__name__} | | | |", file=out, flush=True)
                    continue
                assert torch.equal(r, ref.residual_out)
                assert_close(x, ref.y, TOLERANCES[xd], f"{N}x{H} {_tag(cfg)} cap {cap}")
                tag = f"{'**table** ' if cfg == chosen else ''}{_tag(cfg)} cap {cap or 'none'}"
                variants.append((tag + " in place",
                                 lambda i, cfg=cfg, cap=cap: _launch(sets[i][0], sets[i][1], w, cfg, cap=cap)))
                variants.append((tag + " into outputs", lambda i, cfg=cfg, cap=cap: _launch(
                    sets[i][0], sets[i][1], w, cfg, out=outs[i], cap=cap)))
            if compile_ref:
                from addrmsnorm.bench.impls import CompiledReference

                fn, kept = CompiledReference(), []
                variants.append(("torch.compile (reference), outputs kept alive",
                                 lambda i: kept.append(fn(sets[i][0], sets[i][1], w, 1e-6))))
            for rnd in range(rounds):
                for name, call in variants:
                    t = time_graph(call, n_sets)
                    if compile_ref:
                        kept.clear()
                    gbs = nbytes / t.median_us / 1e3
                    print(f"| {N}x{H} | {_name(xd, rd)} | {name} | {rnd} | {t.median_us:.2f} | {gbs:.0f} | "
                          f"{100 * gbs / roof:.1f}% |", file=out, flush=True)
            del sets, outs
            torch.cuda.empty_cache()


QUANT_MODES = {"static fp8": (torch.float8_e4m3fn, True, 0), "per-token fp8": (torch.float8_e4m3fn, False, 0),
               "per-token int8": (torch.int8, False, 0), "per-group 128 fp8": (torch.float8_e4m3fn, False, 128),
               "nvfp4": (torch.float4_e2m1fn_x2, True, 16), "mxfp8": (torch.float8_e4m3fn, False, 32),
               "mxfp4": (torch.float4_e2m1fn_x2, False, 32)}
BLOCK_MODES = ("nvfp4", "mxfp8", "mxfp4")  # scales one byte per block; checked against the table config's q


def _launch_quant(x, r, w, q, h, scales, scale, group_size, cfg, cap):
    from addrmsnorm.launcher import launch_quant_forward

    N, H = x.shape
    groups = H // group_size if group_size else 1
    launch_quant_forward(x, r, w, q, h, None, scale, scales, None, n_rows=N, H=H, stride_x=H, stride_residual=H,
                         stride_q=q.shape[1], stride_residual_out=H, stride_y=H, stride_s_row=groups,
                         stride_s_group=1 if group_size else 0, group_size=group_size, ue8m0=False, eps=1e-6,
                         weight_offset=0.0, config=cfg, max_registers=cap)


def quant(hs, extra, cap_values, roof, out, rounds=3, modes=(), plain=False):
    """The quantized forward's configs and caps, into given outputs, interleaved in rounds; modes: words
    that select QUANT_MODES by name (none: every mode); plain: the plain norm's epilogues (no residual)."""
    print("| shape | mode | variant | round | µs (median) | GB/s | % roofline |\n|---|---|---|---|---|---|---|",
          file=out, flush=True)
    for H in hs:
        N = max(16384, (1 << 26) // H) if H <= 16384 else max(1, (1 << 28) // H)
        nbytes_base = N * H * (2 if plain else 6) + 2 * H  # x (and residual, residual_out), the weight
        gen = torch.Generator(device="cuda").manual_seed(H)
        n_sets = sets_for_cold_l2(nbytes_base + N * H)
        sets = [(torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16),
                 None if plain else (4 * torch.randn(N, H, device="cuda", generator=gen)).to(torch.bfloat16))
                for _ in range(n_sets)]
        w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(torch.bfloat16)
        scale = torch.tensor([0.01], device="cuda")
        for mode, (qd, static, gs) in QUANT_MODES.items():
            if modes and not any(m in mode for m in modes):
                continue
            block = mode in BLOCK_MODES
            q_name = {torch.int8: "int8", torch.float8_e4m3fn: "fp8e4m3", torch.float4_e2m1fn_x2: "fp4e2m1"}[qd]
            chosen = select_forward_config(H, 2, 2, quant=configs.quant_kernel_mode(static, gs, q_name), plain=plain)
            groups = H // gs if gs else 1
            q_cols = H // 2 if qd == torch.float4_e2m1fn_x2 else H
            nbytes = nbytes_base + N * q_cols + (N * groups if block else 4 if static else 4 * N * groups)
            outs = [(torch.empty(N, q_cols, dtype=qd, device="cuda"), None if plain else torch.empty_like(x),
                     torch.empty(N, groups, dtype=torch.uint8 if block else torch.float32, device="cuda")
                     if block or not static else None) for x, _ in sets]
            ref = fused_add_rmsnorm_ref(sets[0][0], torch.zeros_like(sets[0][0]) if plain else sets[0][1], w, 1e-6)
            q_ref = None if block else quantize_ref(ref.y.float(), qd, scale=scale if static else None,
                                                    group_size=gs or None)[0]  # block: the table config's q
            variants = []
            for cfg in [chosen] + [c for c in extra if c != chosen]:
                for cap in [None] + [c for c in cap_values]:
                    q, h, s = outs[0]
                    _launch_quant(*sets[0], w, q, h, s, scale if static else None, gs, cfg, cap)
                    torch.cuda.synchronize()
                    if not plain:
                        assert torch.equal(h, ref.residual_out), f"{mode} {_tag(cfg)} cap {cap}: residual_out differs"
                    if q_ref is None:
                        q_ref = q.clone()
                    # against quant(the contract's y), or the block formats' table config: the looped path
                    # quantizes y from the rounded h, and another config may sum the squares in another order
                    differ = (q.view(torch.uint8) != q_ref.view(torch.uint8)).float().mean().item()
                    tag = (f"{'**table** ' if cfg == chosen else ''}{_tag(cfg)} cap "
                           f"{'table' if cap is None else cap or 'none'} (q off the "
                           f"{'table config' if block else 'contract'}'s: {100 * differ:.3f}%)")
                    variants.append((tag, lambda i, cfg=cfg, cap=cap: _launch_quant(
                        *sets[i], w, *outs[i][:2], outs[i][2], scale if static else None, gs, cfg, cap)))
            for rnd in range(rounds):
                for name, call in variants:
                    t = time_graph(call, n_sets)
                    gbs = nbytes / t.median_us / 1e3
                    print(f"| {N}x{H} | {'plain ' if plain else ''}{mode} | {name} | {rnd} | {t.median_us:.2f} | "
                          f"{gbs:.0f} | {100 * gbs / roof:.1f}% |", file=out, flush=True)
            del outs
        del sets
        torch.cuda.empty_cache()


def parse_bwd(spec: str):
    """A backward candidate: s<block>r<rows>w<warps> or l<chunk>w<warps>, then optionally t<pipeline
    stages of the row loop>, p<programs
    per SM> (the persistent grid's; default the config's programs_per_sm), c<register cap> and
    @<H> (tried at that H only; default: wherever it fits, as _fits says)."""
    m = re.fullmatch(r"([sl])(\d+)(?:r(\d+))?w(\d+)(?:t(\d+))?(?:p(\d+))?(?:c(\d+))?(?:@(\d+))?", spec)
    if not m:
        raise SystemExit(f"bad backward candidate {spec!r}")
    kind, block, rows, warps, stages, pps, cap, at = m.groups()
    cfg = KernelConfig(int(block), int(rows or 1), int(warps), kind == "l", stages=int(stages or 1))
    return cfg, int(pps) if pps else None, int(cap) if cap else None, int(at) if at else None


def bwd(hs, extra, roof, out, rounds=3):
    """Backward candidates (parse_bwd), interleaved in rounds, through the JIT backend with the config
    rule, the programs per SM and the register cap patched."""
    from addrmsnorm import configs, jit_backend
    from addrmsnorm.bench.backward import backward_bytes
    from addrmsnorm.reference import GRAD_TOLERANCES_BY_DTYPE, assert_grad_close, fused_add_rmsnorm_grads_ref

    print("| shape | config | round | µs (median) | GB/s | % roofline |\n|---|---|---|---|---|---|", file=out, flush=True)
    saved = (configs.select_backward_config, configs.max_registers)
    table_rule, table_caps = saved

    def patch(cfg, pps, cap):
        # The programs per SM ride on the config (configs.backward_programs reads them there); the cap
        # rule still sees the table's config.
        patched = replace(cfg, programs_per_sm=pps) if pps else cfg
        configs.select_backward_config = lambda *_: patched
        configs.max_registers = lambda kind, c, arch: (cap if kind == "backward" and cap else
                                                       table_caps(kind, cfg if c == patched else c, arch))

    try:
        for H in hs:
            N = max(1, (1 << 26) // H)
            nbytes = backward_bytes(N, H, 2, 2, 2)
            gen = torch.Generator(device="cuda").manual_seed(H)
            n_sets = sets_for_cold_l2(nbytes)
            w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(torch.bfloat16)
            sets = []
            for _ in range(n_sets):
                h = torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)
                rstd = torch.rsqrt(h.float().pow(2).mean(-1) + 1e-6)
                sets.append((torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16),
                             torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16), h, rstd))
            chosen = table_rule(H, 2, 2)
            variants = []
            for cfg, pps, cap in [(chosen, None, None)] + [c[:3] for c in extra if (c[3] == H if c[3] else _fits(c[0], H))]:
                patch(cfg, pps, cap)
                dy, dro, h, rstd = sets[0]
                try:
                    dres, _, dw = jit_backend.norm_backward(dy[:64], dro[:64], h[:64], rstd[:64], w)
                except Exception as e:  # noqa: BLE001 - e.g. out of shared memory: skip it
                    print(f"| {N}x{H} | {_tag(cfg)} p{pps} c{cap} | failed: {type(e).__name__} | | | |", file=out)
                    continue
                # the reference from x = h and residual = 0 (the same h; its rstd from eps as the sets')
                ref = fused_add_rmsnorm_grads_ref(h[:64], torch.zeros_like(h[:64]), w, 1e-6, 0.0, dy[:64], dro[:64])
                tol = GRAD_TOLERANCES_BY_DTYPE[torch.bfloat16]
                assert_grad_close(dres, ref[1], tol, f"{H} {_tag(cfg)} dresidual")
                assert_grad_close(dw, ref[2], tol, f"{H} {_tag(cfg)} dweight")

                def call(i, cfg=cfg, pps=pps, cap=cap):
                    patch(cfg, pps, cap)
                    return jit_backend.norm_backward(*sets[i], w)
                name = (f"{'**table** ' if cfg == chosen and pps is None and cap is None else ''}{_tag(cfg)}"
                        f" programs/SM {pps or cfg.programs_per_sm} cap {cap or 'none'}")
                variants.append((name, call))
            for rnd in range(rounds):
                for name, call in variants:
                    kept = []
                    t = time_graph(lambda i, call=call: kept.append(call(i)), n_sets)
                    gbs = nbytes / t.median_us / 1e3
                    print(f"| {N}x{H} | {name} | {rnd} | {t.median_us:.2f} | {gbs:.0f} | {100 * gbs / roof:.1f}% |",
                          file=out, flush=True)
            del sets
            torch.cuda.empty_cache()
    finally:
        configs.select_backward_config, configs.max_registers = saved


def _name(xd, rd):
    n = {v: k for k, v in DT.items()}
    return n[xd] if xd == rd else f"{n[xd]}/{n[rd]}"


def decode(out, chain=64, extra=()):
    print("| N x H | kernel | µs per call (median) | min | max |\n|---|---|---|---|---|", file=out)
    for H in (4096, 8192):
        for N in (1, 8, 64):
            gen = torch.Generator(device="cuda").manual_seed(N + H)
            x = torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)
            r = torch.randn(N, H, device="cuda", generator=gen).to(torch.bfloat16)
            w = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).to(torch.bfloat16)
            chosen = configs.contiguous_forward_config(H, 2, 2)
            kernels = [("one-row Triton baseline", lambda: one_row_(x, r, w, 1e-6))]
            for pdl in (False, True):  # the table's own config, whatever its flags
                kernels.append((f"addrmsnorm table: {_tag(chosen)}" + (" PDL" if pdl else ""),
                                lambda pdl=pdl: _launch(x, r, w, chosen, pdl)))
            for warps, wf in [(w_, False) for w_ in sorted({chosen.num_warps, 4, 8, 16})] + [(8, True), (16, True)]:
                cfg = KernelConfig(chosen.block_h, chosen.rows_per_program, warps, chosen.looped, weight_first=wf)
                tag = f"addrmsnorm w{warps}" + (" weight-first" if wf else "") + (" (table)" if cfg == chosen else "")
                for pdl in (False, True):
                    kernels.append((tag + (" PDL" if pdl else ""),
                                    lambda cfg=cfg, pdl=pdl: _launch(x, r, w, cfg, pdl)))
            for cfg in extra:
                for pdl in (False, True):
                    kernels.append((f"addrmsnorm {_tag(cfg)}" + (" PDL" if pdl else ""),
                                    lambda cfg=cfg, pdl=pdl: _launch(x, r, w, cfg, pdl)))
            for name, fn in kernels:
                def body(_):
                    for _ in range(chain):
                        fn()
                t = time_graph(body, 1)
                print(f"| {N}x{H} | {name} | {t.median_us / chain:.3f} | {t.min_us / chain:.3f} | "
                      f"{t.max_us / chain:.3f} |", file=out, flush=True)


def plain_decode(out, hs=(2048, 4096, 8192), chain=64, extra=(), device="cuda"):
    """The plain norm's decode chain (issue 68: at most 0.8x FlashInfer's with PDL): 64 dependent in-place calls
    in one CUDA graph, per call, at N = 1 and 8: the table's config, its weight-first form and --extra configs of
    H's width, each with and without PDL, and FlashInfer's rmsnorm with PDL where it is installed."""
    try:
        from flashinfer.norm import rmsnorm as fi_rmsnorm
    except Exception:  # noqa: BLE001 - not installed: our rows alone
        fi_rmsnorm = None
    print("| N x H | kernel | µs per call (median) | min | max |\n|---|---|---|---|---|", file=out)
    for H in hs:
        for N in (1, 8):
            gen = torch.Generator(device=device).manual_seed(N + H)
            x = torch.randn(N, H, device=device, generator=gen).to(torch.bfloat16)
            w = (1 + 0.1 * torch.randn(H, device=device, generator=gen)).to(torch.bfloat16)
            chosen = configs.select_plain_config(H, 2)
            cfgs = [chosen] + [c for c in (replace(chosen, weight_first=not chosen.weight_first), *extra)
                               if _fits(c, H) and c != chosen]

            def ours(cfg, pdl):
                return lambda: launch_forward(x, None, w, x, None, None, n_rows=N, H=H, stride_x=H, stride_residual=0,
                                              stride_out=H, stride_residual_out=0, eps=1e-6, weight_offset=0.0,
                                              pdl=pdl, config=cfg)
            kernels = [(f"addrmsnorm {_tag(cfg)}" + (" (table)" if cfg == chosen else "") + (" PDL" if pdl else ""),
                        ours(cfg, pdl)) for cfg in cfgs for pdl in (False, True)]
            if fi_rmsnorm is not None and x.is_cuda:
                kernels.append(("FlashInfer rmsnorm PDL", lambda: fi_rmsnorm(x, w, 1e-6, out=x, enable_pdl=True)))
            for name, fn in kernels:
                def body(_, fn=fn):
                    for _ in range(chain):
                        fn()
                t = time_graph(body, 1)
                print(f"| {N}x{H} | {name} | {t.median_us / chain:.3f} | {t.min_us / chain:.3f} | "
                      f"{t.max_us / chain:.3f} |", file=out, flush=True)


def weight_variants(hs, dtypes, roof, out, chain=64):
    """Bulk GB/s and decode latency of the weight variants, interleaved in one run."""
    print("| shape | x / residual | weight | µs (median) | min | max | GB/s | % of roofline |\n"
          "|---|---|---|---|---|---|---|---|", file=out, flush=True)
    variants = lambda xd: [xd, *(d for d in DT.values() if d != xd)]  # noqa: E731  x's dtype first
    for H in hs:
        for xd, rd in dtypes:
            N = max(1, (1 << 25) // H)
            nbytes = forward_bytes(N, H, xd.itemsize, rd.itemsize, xd.itemsize)
            gen = torch.Generator(device="cuda").manual_seed(H)
            sets = [(torch.randn(N, H, device="cuda", generator=gen).to(xd),
                     torch.randn(N, H, device="cuda", generator=gen).to(rd))
                    for _ in range(sets_for_cold_l2(nbytes))]
            w32 = 1 + 0.1 * torch.randn(H, device="cuda", generator=gen)
            for wd in variants(xd):
                cfg = configs.contiguous_forward_config(H, xd.itemsize, rd.itemsize, wd == xd)
                w = w32.to(wd)
                x, r = sets[0][0][:64].clone(), sets[0][1][:64].clone()
                ref = fused_add_rmsnorm_ref(x, r, w, 1e-6)
                _launch(x, r, w, cfg)
                assert torch.equal(r, ref.residual_out)
                assert_close(x, ref.y, TOLERANCES[xd], f"{N}x{H} weight {wd}")
                t = time_graph(lambda i: _launch(sets[i][0], sets[i][1], w, cfg), len(sets))
                gbs = nbytes / t.median_us / 1e3
                print(f"| {N}x{H} | {_name(xd, rd)} | {_name(wd, wd)} | {t.median_us:.2f} | {t.min_us:.2f} | "
                      f"{t.max_us:.2f} | {gbs:.0f} | {100 * gbs / roof:.1f}% |", file=out, flush=True)
            del sets
            torch.cuda.empty_cache()
    for H in (4096, 8192):  # decode: 64 dependent in-place calls with PDL, per call
        for N in (1, 8):
            x = torch.randn(N, H, device="cuda").to(torch.bfloat16)
            r = torch.randn(N, H, device="cuda").to(torch.bfloat16)
            cfg = configs.contiguous_forward_config(H, 2, 2)
            for wd in variants(torch.bfloat16):
                w = torch.ones(H, device="cuda", dtype=wd)

                def body(_, w=w):
                    for _ in range(chain):
                        _launch(x, r, w, cfg, pdl=True)
                t = time_graph(body, 1)
                print(f"| decode {N}x{H} PDL | bf16 | {_name(wd, wd)} | {t.median_us / chain:.3f} | "
                      f"{t.min_us / chain:.3f} | {t.max_us / chain:.3f} | | |", file=out, flush=True)


def once(shape, dtype):
    if shape.startswith("copy"):  # the roofline's Triton copy, same bytes as the shape's bf16 call
        from addrmsnorm.bench.timing import _copy_2r2w

        N, H = (int(v) for v in shape[4:].split("x"))
        a, b = torch.randn(N * H, device="cuda").to(torch.bfloat16), torch.randn(N * H, device="cuda").to(torch.bfloat16)
        c, d = torch.empty_like(a), torch.empty_like(b)
        for _ in range(4):
            _copy_2r2w[(triton.cdiv(N * H, 4096),)](a, b, c, d, N * H, BLOCK=4096, num_warps=4)
        torch.cuda.synchronize()
        print(f"{shape}: copy 2r2w, BLOCK 4096, 4 warps")
        return
    N, H = (int(v) for v in shape.split("x"))
    xd, _, rd = dtype.partition("/")
    x = torch.randn(N, H, device="cuda").to(DT[xd])
    r = torch.randn(N, H, device="cuda").to(DT[rd or xd])
    w = torch.ones(H, device="cuda", dtype=DT[xd])
    cfg = configs.contiguous_forward_config(H, x.element_size(), r.element_size())
    for _ in range(4):
        _launch(x, r, w, cfg)
    torch.cuda.synchronize()
    print(f"{shape} {dtype}: {_tag(cfg)}")


def _variant_candidates(width: int, chosen: KernelConfig, extra=()) -> list[KernelConfig]:
    """The table's config first, then single passes at 8 to 64 elements a thread, with and without evict-last."""
    b = triton.next_power_of_2(width)
    out = [chosen]
    for rows in (1, 2, 4, 8, 16, 32):
        for w in (1, 2, 4, 8, 16, 32):
            if 8 <= b * rows // (32 * w) <= 64 and rows * b <= 32768:
                for evict in (True, False):
                    c = KernelConfig(b, rows, w, False, evict_last=evict)
                    if c not in out:
                        out.append(c)
    return out + [c for c in extra if c not in out]


# variants' shapes (a smoke test shrinks them)
VARIANT_SHAPES = {"gated": ((65536, 4096, 4096), (65536, 4096, 1024), (16384, 2048, 128), (4096, 8192, 8192)),
                  "pair": (16384, 2048), "sandwich": ((16384, 4096), (16384, 5376))}


def variants(roof: float, out, which: list[str], extra=(), device: str = "cuda", capped=(), only_extra=False) -> None:
    """See the module docstring: the gated norm, the pair and the sandwich norm under each candidate config, then
    each of ``capped``'s (config, register cap) pairs, the cap set in configs.MAX_REGISTERS as a table row's
    would be (these kernels' kind is the forward's)."""
    import addrmsnorm
    from addrmsnorm.bench.variants import EPS, OFFSET, PAIR_WIDTHS

    if device == "cuda" and addrmsnorm.backend() != "triton":
        raise SystemExit("tune.py variants patches the JIT launcher's config rules: run it with ADDRMSNORM_BACKEND=triton")
    xd, dev = torch.bfloat16, device
    cases = []  # (name, select rule's name, width the rule takes, nbytes, make(gen) -> (call, check))
    if "gated" in which:
        for N, H, g in VARIANT_SHAPES["gated"]:
            def make(gen, N=N, H=H, g=g):
                x, z = (torch.randn(N, H, device=dev, generator=gen).to(xd) for _ in range(2))
                w = (1 + 0.1 * torch.randn(H, device=dev, generator=gen)).to(xd)
                call = lambda: addrmsnorm.gated_rmsnorm(x, z, w, EPS, group_size=g)  # noqa: E731
                return call, call
            cases.append((f"gated {N}x{H} g{g}", "select_gated_config", g, 3 * 2 * N * H, make))
    if "pair" in which:
        Ha, Hb, buf_width = PAIR_WIDTHS
        for N in VARIANT_SHAPES["pair"]:
            def make(gen, N=N):  # in place: the check normalizes a copy of the first input
                u = torch.randn(N, buf_width, device=dev, generator=gen).to(xd)
                u0 = u.clone()
                wa, wb = ((1 + 0.1 * torch.randn(h, device=dev, generator=gen)).to(xd) for h in (Ha, Hb))

                def on(v):
                    addrmsnorm.rmsnorm_pair_(v[:, :Ha], wa, v[:, Ha:Ha + Hb], wb, EPS)
                    return v
                return (lambda: on(u)), (lambda: on(u0.clone()))
            cases.append((f"pair {N}x({Ha}+{Hb})", "select_pair_config", max(Ha, Hb), 2 * 2 * N * (Ha + Hb), make))
    if "sandwich" in which:
        for N, H in VARIANT_SHAPES["sandwich"]:
            def make(gen, N=N, H=H):
                x, r = (torch.randn(N, H, device=dev, generator=gen).to(xd) for _ in range(2))
                pw, w = ((0.1 * torch.randn(H, device=dev, generator=gen)).to(xd) for _ in range(2))
                call = lambda: addrmsnorm.sandwich_rmsnorm(x, r, pw, w, EPS, weight_offset=OFFSET)[0]  # noqa: E731
                return call, call
            cases.append((f"sandwich {N}x{H}", "select_sandwich_config", H, forward_bytes(N, H, 2, 2, 2), make))
    major, minor = torch.cuda.get_device_capability() if dev == "cuda" else (9, 0)
    arch = 10 * major + minor
    had_arch, had_kind = arch in configs.MAX_REGISTERS, "forward" in configs.MAX_REGISTERS.get(arch, {})
    plan = configs.MAX_REGISTERS.setdefault(arch, {}).setdefault("forward", {})
    print("| case | config | µs (median) | GB/s | % roofline |\n|---|---|---|---|---|", file=out, flush=True)
    try:
        _variant_cases(cases, plan, roof, out, extra, capped, only_extra, dev)
    finally:  # the plan as it was: no entry left behind for an arch or a kind the table does not cap
        if not had_kind and not plan:
            configs.MAX_REGISTERS[arch].pop("forward", None)
        if not had_arch and not configs.MAX_REGISTERS[arch]:
            configs.MAX_REGISTERS.pop(arch, None)


def _variant_cases(cases, plan, roof, out, extra, capped, only_extra, dev) -> None:
    """variants' loop: each case under each candidate (and each capped candidate, its cap in plan)."""
    for name, rule, width, nbytes, make in cases:
        saved = getattr(configs, rule)
        chosen = saved(width, 2)
        gen = torch.Generator(device=dev).manual_seed(width)
        n_sets = sets_for_cold_l2(nbytes)
        made = [make(gen) for _ in range(n_sets)]
        calls, check = [m[0] for m in made], made[0][1]
        want = None
        best = (0.0, "")
        fits = lambda c: c.looped or c.block_h == triton.next_power_of_2(width)  # noqa: E731 - a case's own tiles
        cands = ([chosen] + [c for c in extra if c != chosen and fits(c)] if only_extra
                 else _variant_candidates(width, chosen, [c for c in extra if fits(c)]))
        for cfg, cap in [(c, None) for c in cands] + [(c, cap) for c, cap in capped if fits(c)]:
            setattr(configs, rule, lambda *_, cfg=cfg: cfg)
            key = (cfg.block_h, cfg.rows_per_program, cfg.num_warps)
            planned = plan.get(key)
            if cap:
                plan[key] = cap
            tag = _tag(cfg) + (f" cap {cap}" if cap else "")
            try:
                got = check()
                if want is None:
                    want = got.float().clone()
                elif not torch.allclose(got.float(), want, rtol=2e-2, atol=2e-2):
                    print(f"| {name} | {tag} | off the table config's output | | |", file=out, flush=True)
                    continue
                t = time_graph(lambda i: calls[i](), n_sets)
            except Exception as e:  # noqa: BLE001 - out of registers or shared memory, or a rule that refuses it
                print(f"| {name} | {tag} | failed: {type(e).__name__}: {str(e)[:120]} | | |", file=out, flush=True)
                continue
            finally:
                setattr(configs, rule, saved)
                if planned is None:
                    plan.pop(key, None)
                else:
                    plan[key] = planned
            gbs = nbytes / t.median_us / 1e3
            best = max(best, (gbs, tag))
            mark = "**table** " if cfg == chosen and not cap else ""
            print(f"| {name} | {mark}{tag} | {t.median_us:.2f} | {gbs:.0f} | {100 * gbs / roof:.1f}% |",
                  file=out, flush=True)
        print(f"| {name} | **best**: {best[1]} | | {best[0]:.0f} | {100 * best[0] / roof:.1f}% |", file=out, flush=True)
        made = calls = check = None
        if dev == "cuda":
            torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["bulk", "decode", "weight", "once", "caps", "quant", "bwd", "plain",
                                       "variants"])
    ap.add_argument("--which", default="gated,pair,sandwich", help="variants: which of gated, pair, sandwich")
    ap.add_argument("--caps", default="0,32,40", help="caps: register caps to time (0: none)")
    ap.add_argument("--modes", default="", help="quant: only the modes whose names contain one of these "
                    "comma-separated words (e.g. group,int8); default every mode")
    ap.add_argument("shape", nargs="?")
    ap.add_argument("--h", default=",".join(map(str, BULK_H)))
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--rows", type=int, help="bulk: N (default 2**25 // H); plain: N (default 2**26 // H)")
    ap.add_argument("--no-qk", action="store_true", help="plain: skip the QK norm's sweep")
    ap.add_argument("--plain", action="store_true", help="quant: the plain norm's epilogues (no residual); decode: "
                    "the plain norm's chain beside FlashInfer's")
    ap.add_argument("--out-of-place", action="store_true", help="bulk: write y and h to other tensors")
    ap.add_argument("--compile", action="store_true", help="bulk: also time torch.compile of the contract")
    ap.add_argument("--only-extra", action="store_true", help="bulk, variants: the table's config and --extra only")
    ap.add_argument("--extra", default="", help="bulk: more configs, e.g. s4096r1w16fe,l2048w4 (s: single BLOCK r "
                                                "rows w warps [f: weight first][e: evict-last][c<cap>: variants, "
                                                "a register cap]; l: looped chunk w warps [x: re-read][k: h kept])")
    args = ap.parse_args()
    out = sys.stdout
    if args.what == "once":
        return once(args.shape, args.dtype)
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", file=out)
    extra, capped = [], []
    for e in filter(None, args.extra.split(",") if args.what != "bwd" else []):
        # s<block>r<rows>w<warps>[f: weight first][e: x and residual loaded evict-last][c<cap>: variants, under a
        # register cap]; l<chunk>w<warps>[x: pass 2 re-reads x and residual][k: h kept in L2 between the passes]
        m = re.fullmatch(r"s(\d+)r(\d+)w(\d+)([fe]*)(?:c(\d+))?|l(\d+)w(\d+)([xk]*)", e)
        if not m:
            raise SystemExit(f"bad candidate {e!r}")
        b, r, w, flags, cap, chunk, lw, lflags = m.groups()
        if cap and args.what != "variants":
            raise SystemExit(f"{e!r}: a candidate's own cap is for variants; {args.what} takes --caps")
        cfg = (KernelConfig(int(b), int(r), int(w), False, weight_first="f" in flags, evict_last="e" in flags)
               if b else KernelConfig(int(chunk), 1, int(lw), True, reread="x" in lflags, keep_h="k" in lflags))
        if cap:
            capped.append((cfg, int(cap)))
        else:
            extra.append(cfg)
    if args.what == "decode":
        if args.plain:
            return plain_decode(out, extra=extra)
        return decode(out, extra=extra)
    roof = measure_roofline()
    print("roofline: " + ", ".join(f"{k} {v:.0f} GB/s" for k, v in roof.methods.items()) + f" -> {roof.gbs:.0f} GB/s",
          file=out)
    dts = [(DT[x], DT[r or x]) for x, _, r in (d.partition("/") for d in args.dtypes.split(","))]
    if args.what == "variants":
        return variants(roof.gbs, out, args.which.split(","), extra, capped=capped, only_extra=args.only_extra)
    if args.what == "plain":
        return plain([int(h) for h in args.h.split(",")], args.dtypes.split(","), roof.gbs, out, args.rows,
                     qk=not args.no_qk)
    if args.what == "weight":
        return weight_variants([int(h) for h in args.h.split(",")], dts, roof.gbs, out)
    if args.what == "bwd":
        return bwd([int(h) for h in args.h.split(",")], [parse_bwd(e) for e in filter(None, args.extra.split(","))],
                   roof.gbs, out)
    if args.what == "quant":
        return quant([int(h) for h in args.h.split(",")], extra, [int(c) for c in args.caps.split(",") if c],
                     roof.gbs, out, modes=[m for m in args.modes.split(",") if m], plain=args.plain)
    if args.what == "caps":
        return caps([int(h) for h in args.h.split(",")], dts, [int(c) for c in args.caps.split(",")], roof.gbs, out,
                    args.compile, extra=extra)
    print("| shape | dtypes | config | µs (median) | min | max | GB/s | % roofline |\n|---|---|---|---|---|---|---|---|",
          file=out, flush=True)
    for dt in args.dtypes.split(","):
        xd, _, rd = dt.partition("/")
        for H in (int(h) for h in args.h.split(",")):
            bench_bulk(H, DT[xd], DT[rd or xd], roof.gbs, out, args.rows, extra, args.out_of_place, args.compile,
                       args.only_extra)


if __name__ == "__main__":
    main()
