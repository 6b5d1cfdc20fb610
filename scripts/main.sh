#!/usr/bin/env bash
# The main job: set up, then run the correctness demo (on the GPU, or under the Triton interpreter
# on the CPU where there is none).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${PYTHON:-python3}" -m addrmsnorm "$@"
