#!/usr/bin/env bash
# Every test: set up, run the CPU suite under the Triton interpreter, then the GPU suite, which
# skips with a stated reason where there is no GPU. Set ADDRMSNORM_NO_SETUP=1 to skip the install
# (for machines with no network that already have torch, triton and pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ "${ADDRMSNORM_NO_SETUP:-0}" != 1 ]; then
  bash scripts/setup.sh
fi
echo "== CPU: kernels under the Triton interpreter (TRITON_INTERPRET=1) =="
TRITON_INTERPRET=1 "$PY" -m pytest -q tests "$@"
if "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "== GPU: compiled kernels =="
  "$PY" -m pytest -q -rs tests "$@"
else
  echo "== GPU suite skipped: no CUDA device here (torch.cuda.is_available() is False) =="
fi
