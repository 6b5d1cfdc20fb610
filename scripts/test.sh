#!/usr/bin/env bash
# Every test:
#   1. set up (scripts/setup.sh; skip with ADDRMSNORM_NO_SETUP=1 on a machine with no network
#      that already has torch, triton, pytest and GoogleTest);
#   2. build the C++ runtime (the AOT step compiles every kernel for ADDRMSNORM_CUDA_ARCHS,
#      default 80;90;100), so that the Python suites can also check it through ctypes;
#   3. the Python suite with the kernels on the CPU under the Triton interpreter;
#   4. ctest: host tests everywhere, GPU cases skip, saying why, without a GPU;
#   5. the Python suite on the GPU, where there is one.
# Arguments go to both pytest runs (e.g. -n 8 with pytest-xdist).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh
BUILD_DIR=${ADDRMSNORM_BUILD_DIR:-build}
if [ "${ADDRMSNORM_NO_SETUP:-0}" != 1 ]; then
  ADDRMSNORM_SETUP_GTEST=1 bash scripts/setup.sh
fi

echo "== C++ runtime: build =="
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DPython3_EXECUTABLE="$PY" \
  -DADDRMSNORM_CUDA_ARCHS="${ADDRMSNORM_CUDA_ARCHS:-80;90;100}" -DADDRMSNORM_BUILD_TESTS=ON \
  ${ADDRMSNORM_CMAKE_ARGS:-}
cmake --build "$BUILD_DIR"
export ADDRMSNORM_LIB="$BUILD_DIR/libaddrmsnorm.so"
# The torch extension (the "cpp" backend of torch.ops.addrmsnorm), where torch could build it.
if [ -f "$BUILD_DIR/libaddrmsnorm_torch.so" ]; then
  export ADDRMSNORM_TORCH_EXT="$BUILD_DIR/libaddrmsnorm_torch.so"
fi

echo "== Python, CPU: kernels under the Triton interpreter (TRITON_INTERPRET=1) =="
TRITON_INTERPRET=1 "$PY" -m pytest -q tests "$@"

echo "== C++ runtime: ctest =="
ctest --test-dir "$BUILD_DIR" --output-on-failure

if "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "== Python, GPU: compiled kernels, and the C++ library through ctypes =="
  "$PY" -m pytest -q -rs tests "$@"
else
  echo "== Python GPU suite skipped: no CUDA device here (torch.cuda.is_available() is False) =="
fi
