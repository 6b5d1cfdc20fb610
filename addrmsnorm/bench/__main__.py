"""``python -m addrmsnorm.bench``: the benchmark report (see cli.py)."""

import sys

from addrmsnorm.bench.cli import main

sys.exit(main())
