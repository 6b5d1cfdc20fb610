"""Quick forward bandwidth check on a GPU, with a copy roofline measured in the same run.

Not the benchmark report (that is a separate tool): this prints µs, GB/s and percent of the
same-run roofline for a few shapes, and with --sweep compares candidate configs against the
table's choice, to tune ``addrmsnorm/configs.py``.

Timing: a CUDA graph of calls rotating over enough distinct buffer sets that each replay moves
more than 4x the L2 (cold L2 by rotation); median of 15 replays; time per call = replay / calls.

    python bench/forward_quick.py [--sweep] [--shapes 16384x4096,16384x3000]
"""

from __future__ import annotations

import argparse
import statistics

import torch
import triton
import triton.language as tl

from addrmsnorm.configs import ForwardConfig, select_forward_config
from addrmsnorm.launcher import launch_forward
from addrmsnorm.reference import TOLERANCES, assert_close, fused_add_rmsnorm_ref


@triton.jit
def _copy2(a_ptr, b_ptr, c_ptr, d_ptr, n, BLOCK: tl.constexpr):
    # The fused kernel's memory pattern: two streams read, two written.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=m), mask=m)
    tl.store(d_ptr + offs, tl.load(b_ptr + offs, mask=m), mask=m)


def forward_bytes(N, H, x_size, r_size, w_size):
    """Byte model (BENCHMARKING.md): x, residual read; out, residual_out written; weight once."""
    return N * H * (2 * x_size + 2 * r_size) + H * w_size


def time_graph(make_call, sets, min_bytes_per_replay, bytes_per_call):
    calls = max(1, min(len(sets), -(-min_bytes_per_replay // bytes_per_call)))
    for s in sets[:calls]:
        make_call(s)  # warm-up and compile
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(g, stream=stream):
            for s in sets[:calls]:
                make_call(s)
    torch.cuda.synchronize()
    times = []
    for _ in range(15):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times), min(times), max(times)


def roofline(total_bytes=1 << 30):
    """Max of a 2-read-2-write Triton copy and a device-to-device copy_, in GB/s."""
    n = total_bytes // 8  # bf16 elements per stream for 4 streams
    a, b = torch.randn(n, device="cuda").bfloat16(), torch.randn(n, device="cuda").bfloat16()
    c, d = torch.empty_like(a), torch.empty_like(b)
    BLOCK = 4096
    t_copy2, _, _ = time_graph(lambda _: _copy2[(triton.cdiv(n, BLOCK),)](a, b, c, d, n, BLOCK=BLOCK),
                               [0] * 4, 0, 1)
    src = torch.empty(total_bytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t_memcpy, _, _ = time_graph(lambda _: dst.copy_(src), [0] * 4, 0, 1)
    gbs = {"copy 2r2w (triton)": total_bytes / t_copy2 / 1e3, "copy_ D2D": total_bytes / t_memcpy / 1e3}
    return max(gbs.values()), gbs


def bench_shape(N, H, xd, rd, config=None, eps=1e-6):
    bytes_per_call = forward_bytes(N, H, xd.itemsize, rd.itemsize, xd.itemsize)
    n_sets = max(1, min(64, -(-(4 * 60 * 2 ** 20) // bytes_per_call)))
    sets = []
    for i in range(n_sets):
        x = torch.randn(N, H, device="cuda").to(xd)
        r = torch.randn(N, H, device="cuda").to(rd)
        sets.append((x, r, torch.empty_like(x), torch.empty_like(r)))
    w = torch.randn(H, device="cuda").to(xd)

    def call(s):
        x, r, o, ro = s
        launch_forward(x, r, w, o, ro, None, n_rows=N, H=H, stride_x=H, stride_residual=H,
                       stride_out=H, stride_residual_out=H, eps=eps, weight_offset=0.0, config=config)

    call(sets[0])
    ref = fused_add_rmsnorm_ref(sets[0][0], sets[0][1], w, eps)
    assert torch.equal(sets[0][3], ref.residual_out)
    assert_close(sets[0][2], ref.y, TOLERANCES[xd], f"{N}x{H}")
    med, lo, hi = time_graph(call, sets, 4 * 60 * 2 ** 20, bytes_per_call)
    return med, lo, hi, bytes_per_call / med / 1e3


def _candidates(H):
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
    roof, parts = roofline()
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    print("roofline: " + ", ".join(f"{k} {v:.0f} GB/s" for k, v in parts.items()) + f" -> {roof:.0f} GB/s")
    print(f"| shape | dtypes | config | µs (median) | min | max | GB/s | % roofline |")
    print(f"|---|---|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        N, H = (int(v) for v in shape.split("x"))
        for xd, rd in ((torch.bfloat16, torch.bfloat16),):
            chosen = select_forward_config(H, xd.itemsize, rd.itemsize)
            configs = [chosen] + ([c for c in _candidates(H) if c != chosen] if args.sweep else [])
            for cfg in configs:
                med, lo, hi, gbs = bench_shape(N, H, xd, rd, config=cfg)
                tag = ("table: " if cfg == chosen else "") + \
                    f"{'looped' if cfg.looped else 'single'} b{cfg.block_h} r{cfg.rows_per_program} w{cfg.num_warps}"
                print(f"| {N}x{H} | bf16 | {tag} | {med:.2f} | {lo:.2f} | {hi:.2f} | {gbs:.0f} | {100 * gbs / roof:.1f}% |",
                      flush=True)


if __name__ == "__main__":
    main()
