#!/usr/bin/env bash
# The main job: set up, build, then the benchmark report (python -m addrmsnorm.bench; arguments
# pass through, e.g. --quick). On a GPU machine the C++ runtime and the torch extension are built
# for this GPU's architecture (scripts/build.sh, showing the kernels compiled out of the total), so
# that the report covers every entry point. Without a GPU the report says so and runs the
# correctness demo on the CPU under the Triton interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh
if [ "${ADDRMSNORM_NO_SETUP:-0}" != 1 ]; then
  bash scripts/setup.sh
fi
arch=$("$PY" -c "import torch; c = torch.cuda.get_device_capability() if torch.cuda.is_available() else None; print(f'{c[0]}{c[1]}' if c else '')")
if [ -n "$arch" ] && command -v cmake >/dev/null; then
  ADDRMSNORM_CUDA_ARCHS="$arch" ADDRMSNORM_BUILD_BENCH=ON bash scripts/build.sh
fi
# Without a GPU nothing is built: the demo runs the kernels from the source tree, under the interpreter.
exec "$PY" -m addrmsnorm.bench "$@"
