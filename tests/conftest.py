"""Where the kernels run in this pytest process.

The Triton interpreter is chosen when the process starts (TRITON_INTERPRET=1 must be set before
triton decorates the kernels), so one process runs either the CPU interpreter suite or the GPU
suite. ``scripts/test.sh`` runs both.
"""

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
