#!/usr/bin/env bash
# The main job: set up, then the benchmark report (python -m addrmsnorm.bench; arguments pass
# through, e.g. --quick). On a GPU machine with cmake, the C++ runtime is built first for this
# GPU's architecture so that the report includes it. Without a GPU the report says so and runs the
# correctness demo on the CPU under the Triton interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ "${ADDRMSNORM_NO_SETUP:-0}" != 1 ]; then
  bash scripts/setup.sh
fi
arch=$("$PY" -c "import torch; c = torch.cuda.get_device_capability() if torch.cuda.is_available() else None; print(f'{c[0]}{c[1]}' if c else '')")
if [ -n "$arch" ] && command -v cmake >/dev/null; then
  generator=()
  if command -v ninja >/dev/null; then generator=(-G Ninja); fi
  echo "== building the C++ runtime for sm_$arch (build/) =="
  cmake -S . -B build "${generator[@]}" -DPython3_EXECUTABLE="$(command -v "$PY")" \
    -DADDRMSNORM_CUDA_ARCHS="$arch" -DADDRMSNORM_BUILD_TESTS=OFF >/dev/null
  cmake --build build >/dev/null
fi
exec "$PY" -m addrmsnorm.bench "$@"
