"""GPU timing by CUDA-graph replay with a cold L2, and the copy roofline of the same run.

Cold L2 by rotation: a graph holds one call per buffer set, with enough sets that one replay moves
more than 4x the L2, so no set is still cached when its turn comes again; and at least MIN_CALLS
calls (going round the sets again), so that the cost of launching the graph is spread over several
calls rather than charged to one. µs per call is the replay time over the number of calls; median,
min and max over the replays.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

REPLAYS = 15
MIN_CALLS = 8  # per graph: one replay of a single 70 µs call also timed the graph's launch (a few µs)


@dataclass(frozen=True)
class Timing:
    median_us: float
    min_us: float
    max_us: float


def l2_bytes() -> int:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 50 * 2**20))


def sets_for_cold_l2(bytes_per_call: int, max_sets: int = 64) -> int:
    """Buffer sets to rotate through so that one pass over them moves > 4x the L2."""
    return max(1, min(max_sets, -(-4 * l2_bytes() // max(bytes_per_call, 1))))


def time_graph(call, n_calls: int, replays: int = REPLAYS, min_calls: int = MIN_CALLS) -> Timing:
    """Capture call(0) ... call(n_calls - 1), repeated round to at least ``min_calls`` calls, in one
    CUDA graph; time its replays with events; per call."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(n_calls):  # warm-up: compilation, autotuning, lazy loading, outside the graph
            call(i)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    total = max(n_calls, min_calls)
    caller = torch.cuda.current_stream()
    try:
        with torch.cuda.graph(graph, stream=stream):
            for i in range(total):
                call(i % n_calls)
    except BaseException:
        # torch.cuda.graph leaves its capture stream current when the capture fails: give the
        # caller its own stream back, or every later call of the process runs on the dead one
        torch.cuda.set_stream(caller)
        raise
    torch.cuda.synchronize()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / total)
    del graph
    return Timing(statistics.median(times), min(times), max(times))


def time_eager_cpu_rounds(calls: dict, n: int = 1000, rounds: int = 7) -> dict:
    """Wall µs per call of each of ``calls`` (name -> callable), round by round: each round times n
    eager calls of every callable in turn, with one synchronize after each. A host that speeds up or
    slows down during the run then weighs on every callable of a round alike, and a ratio between two
    callables can be taken per round. Returns name -> the list of per-round figures."""
    for call in calls.values():
        for _ in range(50):
            call()
    torch.cuda.synchronize()
    out = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            t0 = time.perf_counter()
            for _ in range(n):
                call()
            torch.cuda.synchronize()
            out[name].append((time.perf_counter() - t0) * 1e6 / n)
    return out


def time_eager_cpu(call, n: int = 1000) -> float:
    """Wall µs per call of n eager calls with one synchronize at the end (best of 3 rounds)."""
    return min(time_eager_cpu_rounds({"call": call}, n, rounds=3)["call"])


@triton.jit
def _copy_2r2w(a_ptr, b_ptr, c_ptr, d_ptr, n, BLOCK: tl.constexpr):
    # The fused kernel's memory pattern: two streams read, two written, no arithmetic.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=m), mask=m)
    tl.store(d_ptr + offs, tl.load(b_ptr + offs, mask=m), mask=m)


@dataclass(frozen=True)
class Roofline:
    gbs: float                 # the larger of the methods below
    methods: dict              # method -> best GB/s over the sizes tried


# The Triton copy's configurations, swept: the best one differs by GPU and size (issue 15 measured
# block 1024 with 4 warps best on the H200).
COPY_BLOCKS = (1024, 2048, 4096, 8192, 16384)
COPY_WARPS = (4, 8, 16)


def measure_roofline(sizes=(256 * 2**20, 1024 * 2**20)) -> Roofline:
    """Two-read-two-write Triton copy (every block and warps of COPY_BLOCKS x COPY_WARPS) and
    device-to-device copy_, at two sizes; bytes counted are bytes read plus bytes written. The
    roofline is the best of all of them; methods names the Triton copy's best configuration."""
    methods = {"copy 2r2w (Triton)": 0.0, "copy_ D2D (cudaMemcpyAsync)": 0.0}
    best_cfg = ""
    for total in sizes:
        n = total // 8  # bf16 elements per stream, four streams
        a = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        c, d = torch.empty_like(a), torch.empty_like(b)
        for block in COPY_BLOCKS:
            for warps in COPY_WARPS:
                if block // (32 * warps) < 1:
                    continue
                grid = (triton.cdiv(n, block),)
                t = time_graph(lambda _: _copy_2r2w[grid](a, b, c, d, n, BLOCK=block, num_warps=warps), 2)
                gbs = total / t.median_us / 1e3
                if gbs > methods["copy 2r2w (Triton)"]:
                    methods["copy 2r2w (Triton)"], best_cfg = gbs, f"B{block}/w{warps}"
        del a, b, c, d
        src = torch.empty(total // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        t = time_graph(lambda _: dst.copy_(src), 2)
        methods["copy_ D2D (cudaMemcpyAsync)"] = max(methods["copy_ D2D (cudaMemcpyAsync)"],
                                                     total / t.median_us / 1e3)
        del src, dst
    torch.cuda.empty_cache()
    methods[f"copy 2r2w (Triton, best {best_cfg})"] = methods.pop("copy 2r2w (Triton)")
    return Roofline(gbs=max(methods.values()), methods=methods)
