"""``python -m addrmsnorm``: the main job. On a GPU, the benchmark report (arguments as for
``python -m addrmsnorm.bench``); without one, a plain message and the correctness demo under the
Triton interpreter."""

import sys

from addrmsnorm.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
