#!/usr/bin/env bash
# The main job: set up, then the benchmark report (python -m addrmsnorm.bench; arguments pass
# through, e.g. --quick). On a GPU machine with cmake, the C++ runtime is built first for this
# GPU's architecture so that the report includes it. Without a GPU the report says so and runs the
# correctness demo on the CPU under the Triton interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh
if [ "${ADDRMSNORM_NO_SETUP:-0}" != 1 ]; then
  bash scripts/setup.sh
fi
arch=$("$PY" -c "import torch; c = torch.cuda.get_device_capability() if torch.cuda.is_available() else None; print(f'{c[0]}{c[1]}' if c else '')")
if [ -n "$arch" ] && command -v cmake >/dev/null; then
  generator=()
  if command -v ninja >/dev/null; then generator=(-G Ninja); fi
  echo "== building the C++ runtime for sm_$arch in build/ (a first build compiles every kernel: minutes; progress below)"
  cmake -S . -B build "${generator[@]}" -DPython3_EXECUTABLE="$PY" \
    -DADDRMSNORM_CUDA_ARCHS="$arch" -DADDRMSNORM_BUILD_TESTS=OFF >/dev/null
  # The AOT step's own progress (kernels compiled out of total) and any error; not every compile line.
  set +e
  cmake --build build 2>&1 | grep --line-buffered -E "addrmsnorm AOT|compiled,|error:|FAILED"
  built=${PIPESTATUS[0]}
  set -e
  [ "$built" = 0 ] || { echo "the C++ runtime did not build (above)" >&2; exit 1; }
fi
exec "$PY" -m addrmsnorm.bench "$@"
