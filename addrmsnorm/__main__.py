"""``python -m addrmsnorm``: the version, the backend and why, the built archs, whether this GPU has a
cubin, and a short self-check (``info.py``). The benchmark report is ``python -m addrmsnorm.bench``."""

import sys

from addrmsnorm.info import main

if __name__ == "__main__":
    sys.exit(main())
