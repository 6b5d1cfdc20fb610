"""CPU cost of one eager call through every entry point, in one run (N=1, H=4096, bf16, in place).

    python devtools/eager_overhead.py

The same numbers are in the report's "CPU cost per eager call" table; this prints them alone,
with the C ABI called from C++ and a bare cuLaunchKernel (addrmsnorm-bench --overhead) beside them.
"""

import torch

import addrmsnorm
from addrmsnorm.bench.cli import cpp_overhead
from addrmsnorm.bench.impls import all_impls
from addrmsnorm.bench.timing import time_eager_cpu


def main():
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    print(f"backend: {addrmsnorm.backend()} ({addrmsnorm.backend_reason()})")
    print("| entry point | µs per eager call |\n|---|---|")
    for impl in all_impls():
        if not impl.available:
            continue
        if impl.setup:
            impl.setup()
        us = time_eager_cpu(lambda: impl.fn(x, r, w, 1e-6), n=2000)
        print(f"| {impl.name} | {us:.2f} |")
    for name, op in (("torch.ops.addrmsnorm.norm_.default", torch.ops.addrmsnorm.norm_.default),
                     ("torch.ops.addrmsnorm.norm (functional)", torch.ops.addrmsnorm.norm)):
        us = time_eager_cpu(lambda: op(x, r, w, 1e-6), n=2000)
        print(f"| {name} | {us:.2f} |")
    with torch.inference_mode():
        us = time_eager_cpu(lambda: torch.ops.addrmsnorm.norm_(x, r, w, 1e-6), n=2000)
    print(f"| torch op, in place, under inference_mode | {us:.2f} |")
    cpp, why = cpp_overhead()
    if cpp:
        print(f"| addrmsnorm C ABI from C++ | {cpp[0]:.2f} |\n| bare cuLaunchKernel (C++) | {cpp[1]:.2f} |")
    else:
        print(f"(C++ numbers unavailable: {why})")


if __name__ == "__main__":
    main()
