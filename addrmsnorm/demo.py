"""Correctness demo: the max error of each output against the one reference, for a few shapes.

    python -m addrmsnorm.demo

On a GPU the kernels run compiled; with no GPU the demo re-runs itself under the Triton
interpreter (TRITON_INTERPRET=1, which must be set before triton compiles anything, hence a fresh
process) on the CPU, on smaller shapes.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from .configs import contiguous_forward_config
from .functional import fused_add_rmsnorm
from .launcher import INTERPRETED
from .reference import RSTD_TOLERANCE, TOLERANCES, fused_add_rmsnorm_ref

_GPU_CASES = [(1, 4096), (8, 8192), (989, 3000), (4096, 4100), (2048, 11111), (64, 65536), (16, 262144)]
_CPU_CASES = [(1, 128), (19, 111), (8, 3000), (3, 20000)]
_DTYPES = [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16),
           (torch.bfloat16, torch.float32), (torch.float32, torch.float32)]


def _name(dt):
    return str(dt).replace("torch.", "")


def _pair(xd, rd) -> str:
    return f"{_name(xd)} / {_name(rd)}"


def run(device: str) -> bool:
    cases = _CPU_CASES if device == "cpu" else _GPU_CASES
    gen = torch.Generator().manual_seed(0)
    dw = max(len(_pair(xd, rd)) for xd, rd in _DTYPES)  # "bfloat16 / bfloat16" is the widest
    print(f"{'N x H':>14}  {'x / residual':<{dw}} {'path':<26} {'max |dy| / tol':>14}  "
          f"{'residual_out':<12} {'rstd rel err':>12}")
    ok = True
    for N, H in cases:
        for xd, rd in _DTYPES:
            x = torch.randn(N, H, generator=gen).to(xd).to(device)
            r = (4 * torch.randn(N, H, generator=gen)).to(rd).to(device)
            w = (1 + 0.1 * torch.randn(H, generator=gen)).to(xd).to(device)
            y, ro, rstd = fused_add_rmsnorm(x, r, w, 1e-6, return_rstd=True)
            ref = fused_add_rmsnorm_ref(x, r, w, 1e-6)
            tol = TOLERANCES[xd]
            worst = ((y.double() - ref.y).abs() / (tol.atol + tol.rtol * ref.y.abs())).max().item()
            exact = torch.equal(ro, ref.residual_out)
            rstd_err = ((rstd.double() - ref.rstd).abs() / ref.rstd.abs()).max().item()
            cfg = contiguous_forward_config(H, x.element_size(), r.element_size())
            path = (f"{'re-read' if cfg.reread else 'looped'}, chunk {cfg.block_h}" if cfg.looped
                    else f"single, {cfg.rows_per_program} row(s) x {cfg.block_h}")
            # Under the interpreter bf16 stores truncate (see reference.py), so only report there.
            passed = device == "cpu" and xd == torch.bfloat16 or (worst <= 1.0 and exact)
            passed = passed and rstd_err <= RSTD_TOLERANCE.rtol
            ok &= passed
            print(f"{N:>6} x {H:<6}  {_pair(xd, rd):<{dw}} {path:<26} {worst:>14.3f}  "
                  f"{'bit-exact' if exact else 'differs':<12} {rstd_err:>12.2e}"
                  f"{'' if passed else '   <-- FAIL'}")
    return ok


def parse_args(argv=None) -> argparse.Namespace:
    """``addrmsnorm-demo [--help]``: no options but help; anything else is refused."""
    parser = argparse.ArgumentParser(
        prog="addrmsnorm-demo",
        description="The correctness demo: the max error of y, residual_out and rstd against the float64 reference "
                    "for a few shapes and dtypes, with the kernel path each shape takes. On a GPU the kernels run "
                    "compiled; without one they run on the CPU under the Triton interpreter, on smaller shapes.",
        epilog="The benchmark report is python -m addrmsnorm.bench; what the installation is, python -m addrmsnorm.")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    parse_args(argv)
    if not INTERPRETED and not torch.cuda.is_available():
        print("No CUDA GPU here: running the correctness demo on the CPU under the Triton "
              "interpreter instead.", flush=True)
        os.environ["TRITON_INTERPRET"] = "1"
        os.execv(sys.executable, [sys.executable, "-m", "addrmsnorm.demo"])
    if INTERPRETED:
        device = "cpu"
        print("Triton interpreter on the CPU (TRITON_INTERPRET=1). Under the interpreter bf16 "
              "stores truncate instead of rounding, so bf16 rows can show an error ratio above 1 "
              "and a residual_out that differs by one ulp; on a GPU they are within tolerance and "
              "bit-exact.")
    else:
        device = "cuda"
        print(f"GPU: {torch.cuda.get_device_name()}")
    print("max |dy| / tol: the worst error of y against the float64 reference, as a fraction of "
          "the tolerance in addrmsnorm/tolerances.py (<= 1 passes).\n")
    ok = run(device)
    print("\nall within tolerance" if ok else "\nSOME CASES FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
