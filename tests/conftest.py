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
# largest). scripts/gpu_suite.sh runs the others on as many pytest-xdist workers as the card has memory for, then
# these on fewer, at 16 GiB a case, so that the workers never together ask for more than the card holds.
LARGE_ELEMENTS = 1 << 25


def pytest_configure(config):
    config.addinivalue_line("markers", "large: a case of several GiB on the GPU (scripts/gpu_suite.sh runs them "
                                       "apart, on fewer workers)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        n, h = params.get("N"), params.get("H")
        if isinstance(n, int) and isinstance(h, int) and n * h >= LARGE_ELEMENTS:
            item.add_marker(pytest.mark.large)


@pytest.fixture(autouse=True)
def _release_cached_gpu_memory():
    """Under pytest-xdist on a GPU, each test gives the memory torch's allocator cached back: a worker that ran
    a large test would otherwise keep its GiBs while the card's other workers run out (seen: 15 workers on an
    80 GB H100 holding 5-11 GiB each, 2026-12-06)."""
    yield
    if ON_GPU and os.environ.get("PYTEST_XDIST_WORKER"):
        torch.cuda.empty_cache()
