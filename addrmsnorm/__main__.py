"""``python -m addrmsnorm``: the correctness demo (the benchmark report will take its place).

With no CUDA GPU, re-run under the Triton interpreter, which must be chosen before triton
compiles the kernels, hence a fresh process.
"""

import os
import sys

import torch

from addrmsnorm.launcher import INTERPRETED

if __name__ == "__main__":
    if not INTERPRETED and not torch.cuda.is_available():
        print("No CUDA GPU here: running the correctness demo on the CPU under the Triton "
              "interpreter instead.", flush=True)
        os.environ["TRITON_INTERPRET"] = "1"
        os.execv(sys.executable, [sys.executable, "-m", "addrmsnorm", *sys.argv[1:]])
    from addrmsnorm.demo import main

    sys.exit(main())
