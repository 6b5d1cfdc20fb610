"""Config sweeps for tuning ``addrmsnorm/configs.py``, on a GPU.

For each shape, times the table's choice and (with --sweep) candidate configs through the JIT
launcher, with the report's timing and same-run roofline (``addrmsnorm.bench.timing``): CUDA-graph
replay, cold L2 by buffer rotation, median of 15 replays.

    PYTHONPATH=. python bench/forward_quick.py [--sweep] [--shapes 16384x4096,16384x3000]
"""

from __future__ import annotations

import argparse

import torch
import triton

from addrmsnorm.bench.byte_model import forward_bytes
from addrmsnorm.bench.timing import measure_roofline, sets_for_cold_l2, time_graph
from addrmsnorm.configs import ForwardConfig, select_forward_config
from addrmsnorm.launcher import launch_forward
from addrmsnorm.reference import TOLERANCES, assert_close, fused_add_rmsnorm_ref


def bench_config(N, H, xd, rd, config, eps=1e-6):
    nbytes = forward_bytes(N, H, xd.itemsize, rd.itemsize, xd.itemsize)
    sets = []
    for _ in range(sets_for_cold_l2(nbytes)):
        x = torch.randn(N, H, device="cuda").to(xd)
        r = torch.randn(N, H, device="cuda").to(rd)
        sets.append((x, r, torch.empty_like(x), torch.empty_like(r)))
    w = torch.randn(H, device="cuda").to(xd)

    def call(i):
        x, r, o, ro = sets[i]
        launch_forward(x, r, w, o, ro, None, n_rows=N, H=H, stride_x=H, stride_residual=H,
                       stride_out=H, stride_residual_out=H, eps=eps, weight_offset=0.0, config=config)

    call(0)
    ref = fused_add_rmsnorm_ref(sets[0][0], sets[0][1], w, eps)
    assert torch.equal(sets[0][3], ref.residual_out)
    assert_close(sets[0][2], ref.y, TOLERANCES[xd], f"{N}x{H} {config}")
    t = time_graph(call, len(sets))
    return t, nbytes / t.median_us / 1e3


def candidates(H):
    b = triton.next_power_of_2(H)
    single = [] if H > 32768 else [
        ForwardConfig(b, rows, w, False) for rows in (1, 2, 4, 8, 16, 32) for w in (2, 4, 8, 16, 32)
        if rows * b <= 8192 and 4 <= rows * b // (32 * w) <= 64]
    looped = [ForwardConfig(c, 1, w, True) for c in (2048, 4096, 8192) for w in (4, 8, 16)
              if c < H and c // (32 * w) >= 4]
    return single + looped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="16384x4096,16384x3000,4096x14336")
    ap.add_argument("--sweep", action="store_true")
    args = ap.parse_args()
    roof = measure_roofline()
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    print("roofline: " + ", ".join(f"{k} {v:.0f} GB/s" for k, v in roof.methods.items()) + f" -> {roof.gbs:.0f} GB/s")
    print("| shape | dtypes | config | µs (median) | min | max | GB/s | % roofline |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        N, H = (int(v) for v in shape.split("x"))
        xd = rd = torch.bfloat16
        chosen = select_forward_config(H, xd.itemsize, rd.itemsize)
        configs = [chosen] + ([c for c in candidates(H) if c != chosen] if args.sweep else [])
        for cfg in configs:
            t, gbs = bench_config(N, H, xd, rd, cfg)
            tag = ("table: " if cfg == chosen else "") + \
                f"{'looped' if cfg.looped else 'single'} b{cfg.block_h} r{cfg.rows_per_program} w{cfg.num_warps}"
            print(f"| {N}x{H} | bf16 | {tag} | {t.median_us:.2f} | {t.min_us:.2f} | {t.max_us:.2f} | {gbs:.0f} | "
                  f"{100 * gbs / roof.gbs:.1f}% |", flush=True)


if __name__ == "__main__":
    main()
