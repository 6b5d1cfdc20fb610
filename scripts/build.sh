#!/usr/bin/env bash
# Builds addrmsnorm and installs it editable: `pip install -e .` through scikit-build-core, which
# runs CMake (the AOT step compiles every kernel for the archs, then the C++ runtime and, against
# this environment's torch, the torch extension) and installs libaddrmsnorm.so and
# libaddrmsnorm_torch.so into the package. The build directory is build/, kept between runs: a
# rebuild compiles only what changed, and ctest runs there.
#   ADDRMSNORM_CUDA_ARCHS   the archs, e.g. "90" or "80;90;100" (else this machine's GPUs, else 80;90;100)
#   ADDRMSNORM_BUILD_TESTS  ON to build the C++ tests (default OFF)
#   ADDRMSNORM_BUILD_BENCH  ON to build addrmsnorm-bench, the report's C ABI cost from C++ (default OFF)
#   ADDRMSNORM_CMAKE_ARGS   more CMake arguments, e.g. -DADDRMSNORM_GTEST_SOURCE_DIR=...
# The AOT step's progress (kernels compiled out of the total) is shown; the whole log is in
# build/install.log.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh
defines=(-Cbuild-dir=build "-Ccmake.define.ADDRMSNORM_BUILD_TESTS=${ADDRMSNORM_BUILD_TESTS:-OFF}"
         "-Ccmake.define.ADDRMSNORM_BUILD_BENCH=${ADDRMSNORM_BUILD_BENCH:-OFF}")
if [ -n "${ADDRMSNORM_CUDA_ARCHS:-}" ]; then
  defines+=("-Ccmake.define.ADDRMSNORM_CUDA_ARCHS=$ADDRMSNORM_CUDA_ARCHS")
fi
mkdir -p build
echo "== building and installing addrmsnorm (pip install -e ., archs ${ADDRMSNORM_CUDA_ARCHS:-auto}); a first build compiles every kernel: minutes"
set +e
CMAKE_ARGS="${ADDRMSNORM_CMAKE_ARGS:-}" "$PY" -m pip install --no-build-isolation --no-deps -v -e . "${defines[@]}" \
  2>&1 | tee build/install.log | grep --line-buffered -E "addrmsnorm:|addrmsnorm AOT|compiled,|rror|FAILED|Successfully installed"
status=${PIPESTATUS[0]}
set -e
if [ "$status" != 0 ]; then
  echo "the build failed; the end of build/install.log:" >&2
  tail -40 build/install.log >&2
  exit "$status"
fi
