"""Where the kernels run in this pytest process.

The Triton interpreter is chosen when the process starts (TRITON_INTERPRET=1 must be set before
triton decorates the kernels), so one process runs either the CPU interpreter suite or the GPU
suite. ``scripts/test.sh`` runs both.
"""

import os

import pytest
import torch

from addrmsnorm.launcher import INTERPRETED

if INTERPRETED:
    DEVICE = "cpu"
elif torch.cuda.is_available():
    DEVICE = "cuda"
else:
    DEVICE = None

ON_GPU = DEVICE == "cuda"
NO_KERNEL_REASON = ("no CUDA device, and TRITON_INTERPRET=1 is not set: kernels cannot run in this "
                    "process (scripts/test.sh runs the interpreter suite separately)")
GPU_ONLY_REASON = ("GPU only: large shapes, and bit-exact bf16 (the interpreter truncates fp32->bf16 "
                   "stores instead of rounding to nearest even)")

needs_kernels = pytest.mark.skipif(DEVICE is None, reason=NO_KERNEL_REASON)
gpu_only = pytest.mark.skipif(not ON_GPU, reason=GPU_ONLY_REASON)


# The GPU suite's large cases: tests marked `large`, and every case parametrized with N and H of at least
# LARGE_ELEMENTS elements (its fp64 reference alone is then a quarter of a GiB or more, and several GiB at the
# largest). With LARGE_GROUPS_ENV=n, scripts/gpu_suite.sh's pytest-xdist run (--dist loadgroup) puts them in n
# groups, each run one case at a time on one worker, n being what the card has memory for at 16 GiB a case:
# pytest-xdist's workers then never together hold more than the card, and the other workers run the rest.
LARGE_ELEMENTS = 1 << 25
LARGE_GROUPS_ENV = "ADDRMSNORM_LARGE_GROUPS"


def pytest_configure(config):
    config.addinivalue_line("markers", "large: a case of several GiB on the GPU (scripts/gpu_suite.sh "
                                       "serializes them)")


def pytest_collection_modifyitems(config, items):
    groups = int(os.environ.get(LARGE_GROUPS_ENV, "0") or 0)
    large = 0
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        n, h = params.get("N"), params.get("H")
        if isinstance(n, int) and isinstance(h, int) and n * h >= LARGE_ELEMENTS:
            item.add_marker(pytest.mark.large)
        if groups > 0 and item.get_closest_marker("large") is not None:
            item.add_marker(pytest.mark.xdist_group(f"large-{large % groups}"))
            large += 1
