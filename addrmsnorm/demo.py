"""Correctness demo: the max error of each output against the one reference, for a few shapes; with
``--variants`` or ``--rope``, of the variants or of the QK norm with the rotation.

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


def _worst(got: torch.Tensor, want: torch.Tensor, dtype) -> float:
    tol = TOLERANCES[dtype]
    return ((got.double() - want.double()).abs() / (tol.atol + tol.rtol * want.double().abs())).max().item()


def run_variants(device: str) -> bool:
    """The variants of the call against their references: the weightless norm, the scaled residual (Granite),
    the sandwich norm (Gemma 2/3), the gated norm (Qwen3-Next) and the latent pair (DeepSeek-V3), fp16."""
    from . import functional as F
    from . import reference as R
    gen = torch.Generator().manual_seed(1)
    N, H, dt = (4, 256, torch.float16) if device == "cpu" else (64, 4096, torch.float16)

    def t(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=gen)).to(dt).to(device)
    x, r, z, w, pw = t(N, H), t(N, H, scale=4.0), t(N, H), 1 + t(H, scale=0.1), 1 + t(H, scale=0.1)
    buf = t(N, 2112)
    wa, wb = 1 + t(1536 if device != "cpu" else 192, scale=0.1), 1 + t(512 if device != "cpu" else 64, scale=0.1)
    a_cols = wa.shape[0]
    b_cols = wb.shape[0]
    cases = [
        ("weightless norm", F.fused_add_rmsnorm(x, r, None)[0], R.fused_add_rmsnorm_ref(x, r, None).y),
        ("scaled residual (x_scale 0.22)", F.fused_add_rmsnorm(x, r, w, x_scale=0.22)[0],
         R.fused_add_rmsnorm_ref(x, r, w, x_scale=0.22).y),
        ("sandwich norm (1 + w)", F.sandwich_rmsnorm(x, r, pw - 1, w - 1, weight_offset=1.0)[0],
         R.sandwich_rmsnorm_ref(x, r, pw - 1, w - 1, weight_offset=1.0, post_weight_offset=1.0).y),
        ("gated norm, groups of 128", F.gated_rmsnorm(x, z, w, group_size=128),
         R.gated_rmsnorm_ref(x, z, w, group_size=128)),
        ("latent pair, part a", F.rmsnorm_pair(buf[:, :a_cols], wa, buf[:, a_cols:a_cols + b_cols], wb)[0],
         R.rmsnorm_ref(buf[:, :a_cols], wa).y),
        ("latent pair, part b", F.rmsnorm_pair(buf[:, :a_cols], wa, buf[:, a_cols:a_cols + b_cols], wb)[1],
         R.rmsnorm_ref(buf[:, a_cols:a_cols + b_cols], wb).y),
    ]
    return _report(cases, dt, f"{N} rows of {H}")


def run_rope(device: str) -> bool:
    """The QK norm with the rotation, in place on a fused QKV buffer, against the float64 reference: NeoX with
    positions into a cache, GPT-J with half the columns rotated, HF's cos and sin; fp16."""
    from . import functional as F
    from . import reference as R
    gen = torch.Generator().manual_seed(2)
    T, nq, nk, D = (6, 4, 2, 128) if device == "cpu" else (512, 32, 8, 128)
    dt = torch.float16
    cases = []
    for style, rd, source in (("neox", D, "cache"), ("gptj", D // 2, "cache"), ("neox", D, "cos_sin")):
        qkv = (2 * torch.randn(T, (nq + 2 * nk) * D, generator=gen)).to(dt).to(device)
        wq, wk = ((1 + 0.2 * torch.randn(D, generator=gen)).to(dt).to(device) for _ in range(2))
        inv = 1.0 / 10000 ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd)
        f = torch.arange(4096, dtype=torch.float64)[:, None] * inv[None, :]
        cache = torch.cat([f.cos(), f.sin()], -1).float().to(device)
        pos = torch.randint(0, 4096, (T,), generator=gen).to(device)
        angles = dict(positions=pos, cos_sin_cache=cache)
        if source == "cos_sin":
            c, s = cache[pos][:, :rd // 2], cache[pos][:, rd // 2:]
            angles = dict(cos=torch.cat([c, c], -1), sin=torch.cat([s, s], -1))
        got = F.qk_rmsnorm_rope_(qkv.clone(), wq, wk, num_q_heads=nq, num_kv_heads=nk, head_dim=D, rotary_dim=rd,
                                 style=style, **angles)
        want_q, want_k = R.qk_rmsnorm_rope_ref(qkv, wq, wk, 1e-6, nq, nk, D, rotary_dim=rd, style=style, **angles)
        cases.append((f"{style}, rotary_dim {rd}, {source}, q", got[:, :nq * D].view(T, nq, D), want_q))
        cases.append((f"{style}, rotary_dim {rd}, {source}, k", got[:, nq * D:(nq + nk) * D].view(T, nk, D), want_k))
    return _report(cases, dt, f"{T} tokens, {nq} + {nk} heads of {D}")


def _report(cases, dt, shape: str) -> bool:
    print(f"{shape}, {_name(dt)}:")
    ok = True
    for what, got, want in cases:
        worst = _worst(got, want, dt)
        ok &= worst <= 1.0
        print(f"  {what:<36} max |dy| / tol {worst:8.3f}{'' if worst <= 1.0 else '   <-- FAIL'}")
    return ok


SECTIONS = {"fused": run, "variants": run_variants, "rope": run_rope}


def parse_args(argv=None) -> argparse.Namespace:
    """``addrmsnorm-demo [--variants] [--rope] [--help]``."""
    parser = argparse.ArgumentParser(
        prog="addrmsnorm-demo",
        description="The correctness demo: the max error of y, residual_out and rstd against the float64 reference "
                    "for a few shapes and dtypes, with the kernel path each shape takes (the fused op), or of the "
                    "variants and of the QK norm with the rotation. On a GPU the kernels run compiled; without one "
                    "they run on the CPU under the Triton interpreter, on smaller shapes.",
        epilog="The benchmark report is python -m addrmsnorm.bench; what the installation is, python -m addrmsnorm.")
    parser.add_argument("--variants", action="store_true", help="the variants (weightless, scaled residual, "
                                                                "sandwich, gated, latent pair) instead of the fused op")
    parser.add_argument("--rope", action="store_true", help="the QK norm with the rotation instead of the fused op")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    sections = [name for name in ("variants", "rope") if getattr(args, name)] or ["fused"]
    if not INTERPRETED and not torch.cuda.is_available():
        print("No CUDA GPU here: running the correctness demo on the CPU under the Triton "
              "interpreter instead.", flush=True)
        os.environ["TRITON_INTERPRET"] = "1"
        os.execv(sys.executable, [sys.executable, "-m", "addrmsnorm.demo",
                                  *(f"--{name}" for name in sections if name != "fused")])
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
    ok = all([SECTIONS[name](device) for name in sections])
    print("\nall within tolerance" if ok else "\nSOME CASES FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
