"""CPU cost of one eager call, 1 x 4096 bf16, for the torch operators and the Python API, in place and
functional, fused and plain: the table a change to the plumbing must not make worse.

    python devtools/cpu_cost.py            # the addrmsnorm Python imports (its backend as selected)

It names the operators of this tree, or of a tree from before the one operator family
(fused_add_rmsnorm_, rmsnorm_, ...), so that two builds can be measured in one run and compared.
Needs a GPU.
"""

import torch

import addrmsnorm
import statistics

from addrmsnorm.bench.timing import time_eager_cpu_rounds

N_CALLS = 2000


def _op(new, old):
    ns = torch.ops.addrmsnorm
    return getattr(ns, new).default if hasattr(ns, new) else getattr(ns, old).default


def main():
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    family = hasattr(torch.ops.addrmsnorm, "norm")
    in_place, functional = _op("norm_", "fused_add_rmsnorm_"), _op("norm", "fused_add_rmsnorm")
    plain_in_place, plain = _op("norm_", "rmsnorm_"), _op("norm", "rmsnorm")
    calls = {
        "torch op, fused, in place": lambda: in_place(x, r, w, 1e-6),
        "torch op, fused, functional": lambda: functional(x, r, w, 1e-6),
        "torch op, plain, in place": (lambda: plain_in_place(x, None, w, 1e-6)) if family else
                                     (lambda: plain_in_place(x, w, 1e-6)),
        "torch op, plain, functional": (lambda: plain(x, None, w, 1e-6)) if family else (lambda: plain(x, w, 1e-6)),
        "addrmsnorm.fused_add_rmsnorm_": lambda: addrmsnorm.fused_add_rmsnorm_(x, r, w, 1e-6),
        "addrmsnorm.fused_add_rmsnorm": lambda: addrmsnorm.fused_add_rmsnorm(x, r, w, 1e-6),
        "addrmsnorm.rmsnorm_": lambda: addrmsnorm.rmsnorm_(x, w, 1e-6),
        "addrmsnorm.rmsnorm": lambda: addrmsnorm.rmsnorm(x, w, 1e-6),
    }
    print(f"backend: {addrmsnorm.backend()}")
    rounds = time_eager_cpu_rounds(calls, n=N_CALLS, rounds=7)  # interleaved: drift weighs on all alike
    for name, us in rounds.items():
        print(f"| {name} | {statistics.median(us):.2f} | {min(us):.2f} |")


if __name__ == "__main__":
    main()
