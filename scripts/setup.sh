#!/usr/bin/env bash
# Installs what addrmsnorm needs, then the package itself (editable), with its test extras.
# torch and triton are installed only where they are missing, so a machine's own CUDA build of
# torch is kept; on a fresh CPU-only machine the pinned releases are taken.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install -q "torch==2.13.0"
fi
if ! "$PY" -c "import triton" 2>/dev/null; then
  "$PY" -m pip install -q "triton==3.6.0"
fi
"$PY" -m pip install -q -e ".[test]"
