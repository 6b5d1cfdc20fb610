"""``python -m addrmsnorm``: what this installation is, and a quick self-check.

It prints the version, the backend serving CUDA tensors and why, the archs the C++ runtime was built
for, whether this GPU has a cubin among them, and the result of a short check of the kernels against
the float64 reference (on the GPU; without one, on the CPU under the Triton interpreter, in a fresh
process since the interpreter is chosen at import). The benchmark report is ``python -m
addrmsnorm.bench``.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import time

import torch

# Small enough to take about a second, wide enough to take both paths of the dispatch rule.
_GPU_CASES = [(7, 4096), (3, 20000)]
_CPU_CASES = [(3, 96), (2, 17000)]
_DTYPES = [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16), (torch.bfloat16, torch.float32),
           (torch.float32, torch.float32)]


def built_archs() -> tuple[str | None, str]:
    """The archs the C++ runtime embeds cubins for ("sm_80, sm_90"), and which library said so."""
    from . import c_library, ops

    for path in (c_library.library_path(), ops.extension_path() if ops.backend() == "cpp" else None):
        if path is None:
            continue
        try:
            lib = ctypes.CDLL(str(path))
            lib.addrmsnorm_built_archs.restype = ctypes.c_char_p
            return lib.addrmsnorm_built_archs().decode(), str(path)
        except (OSError, AttributeError):
            continue
    return None, "the C++ runtime is not built"


def self_check(device: str) -> tuple[bool, str]:
    """y within tolerance of the reference and residual_out bit-exact, for a few shapes and dtypes.
    Under the interpreter bf16 stores truncate (reference.py), so bf16 is held to tolerance only on a GPU."""
    from .functional import fused_add_rmsnorm
    from .reference import TOLERANCES, fused_add_rmsnorm_ref

    gen = torch.Generator().manual_seed(0)
    worst, n = 0.0, 0
    for N, H in (_GPU_CASES if device == "cuda" else _CPU_CASES):
        for xd, rd in _DTYPES:
            if device == "cpu" and torch.bfloat16 in (xd, rd):
                continue
            x = torch.randn(N, H, generator=gen).to(xd).to(device)
            r = (4 * torch.randn(N, H, generator=gen)).to(rd).to(device)
            w = (1 + 0.1 * torch.randn(H, generator=gen)).to(xd).to(device)
            y, h = fused_add_rmsnorm(x, r, w, 1e-6)
            ref = fused_add_rmsnorm_ref(x, r, w, 1e-6)
            tol = TOLERANCES[xd]
            err = ((y.double() - ref.y).abs() / (tol.atol + tol.rtol * ref.y.abs())).max().item()
            if not torch.equal(h, ref.residual_out):
                return False, f"{N} x {H} {xd} / {rd}: residual_out differs from x + residual"
            worst, n = max(worst, err), n + 1
    if worst > 1.0:
        return False, f"worst error {worst:.2f}x the tolerance"
    return True, f"{n} cases, worst error {worst:.2f}x the tolerance, residual_out bit-exact"


def parse_args(argv=None) -> argparse.Namespace:
    """``python -m addrmsnorm [--help]``: no options but help; anything else is refused."""
    parser = argparse.ArgumentParser(
        prog="python -m addrmsnorm",
        description="What this addrmsnorm installation is: the version, the backend serving CUDA tensors and why, "
                    "whether the torch extension is built for this torch, the archs the C++ runtime was built for, "
                    "whether this GPU has a cubin, and a short self-check of the kernels against the float64 "
                    "reference (on the GPU; without one, on the CPU under the Triton interpreter).",
        epilog="The benchmark report is python -m addrmsnorm.bench; the correctness demo is addrmsnorm-demo.")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    parse_args(argv)
    from . import __version__, ops
    from .launcher import INTERPRETED

    if os.environ.get("ADDRMSNORM_INFO_SELF_CHECK") == "cpu":  # the interpreter child of the line below
        try:
            import numpy  # noqa: F401
        except ImportError:
            print("FAILED: Triton's CPU interpreter needs numpy, which is not installed (pip install numpy)")
            return 1
        ok, what = self_check("cpu")
        print(("ok: " if ok else "FAILED: ") + what)
        return 0 if ok else 1
    print(f"addrmsnorm {__version__} (torch {torch.__version__})")
    print(f"backend: {ops.backend()} ({ops.backend_reason()})")
    print(f"torch extension: {ops.extension_status()}")
    archs, source = built_archs()
    print(f"C++ runtime: cubins for {archs} ({source})" if archs else f"C++ runtime: {source}")
    t0 = time.perf_counter()
    if torch.cuda.is_available() and not INTERPRETED:
        major, minor = torch.cuda.get_device_capability()
        arch = f"sm_{major}{minor}"
        has = archs is not None and arch in [a.strip() for a in archs.split(",")]
        print(f"GPU: {torch.cuda.get_device_name()} ({arch}): "
              + ("the C++ runtime has a cubin for it" if has else
                 "no cubin for it in the C++ runtime" if archs else "the C++ runtime is not built"))
        ok, what = self_check("cuda")
        print(f"self-check on the GPU: {'ok' if ok else 'FAILED'}: {what} ({time.perf_counter() - t0:.1f} s)")
        return 0 if ok else 1
    print("GPU: none (torch.cuda.is_available() is False); the self-check runs on the CPU under the Triton "
          "interpreter")
    env = {**os.environ, "TRITON_INTERPRET": "1", "ADDRMSNORM_INFO_SELF_CHECK": "cpu"}
    p = subprocess.run([sys.executable, "-m", "addrmsnorm"], env=env, capture_output=True, text=True)
    verdicts = [ln for ln in p.stdout.splitlines() if ln.startswith(("ok: ", "FAILED: "))]
    if verdicts:
        line = verdicts[-1]
    else:  # the child died before its verdict: its exception's last line, whole
        last = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        line = f"FAILED: {last}"
    print(f"self-check on the CPU: {line} ({time.perf_counter() - t0:.1f} s)")
    return p.returncode
