#!/usr/bin/env bash
# Every test:
#   1. set up (scripts/setup.sh; skip with ADDRMSNORM_NO_SETUP=1 on a machine with no network
#      that already has torch, triton, scikit-build-core, pytest and GoogleTest);
#   2. build and install addrmsnorm editable with the C++ tests (scripts/build.sh), for
#      ADDRMSNORM_CUDA_ARCHS: by default this machine's GPU arch, or sm_90 alone where there is no
#      GPU (tests/test_aot.py checks the other default archs' kernel lists and compiles a sample of
#      each, without compiling them all), so that the Python suites also check the C++ runtime;
#   3. the Python suite with the kernels on the CPU under the Triton interpreter, then its refusal tests
#      through the C++ extension and the C runtime's checks (the C path's messages, without a GPU);
#   4. ctest: host tests everywhere, GPU cases skip without a GPU (ctest lists them; their reason,
#      from GoogleTest's log, is printed after it);
#   5. the Python suite on the GPU, where there is one.
# Arguments go to both pytest runs (e.g. -n 8 with pytest-xdist).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh
if [ "${ADDRMSNORM_NO_SETUP:-0}" != 1 ]; then
  ADDRMSNORM_SETUP_GTEST=1 bash scripts/setup.sh
fi
if [ -z "${ADDRMSNORM_CUDA_ARCHS:-}" ]; then
  ADDRMSNORM_CUDA_ARCHS=$("$PY" -c "import torch; c = torch.cuda.get_device_capability() if torch.cuda.is_available() else (9, 0); print(f'{c[0]}{c[1]}')")
fi
export ADDRMSNORM_CUDA_ARCHS

echo "== build: the C++ runtime, the torch extension and the C++ tests =="
ADDRMSNORM_BUILD_TESTS=ON ADDRMSNORM_BUILD_BENCH=ON bash scripts/build.sh

echo "== Python, CPU: kernels under the Triton interpreter (TRITON_INTERPRET=1) =="
export ADDRMSNORM_EXPECT_INSTALLED=1  # tests/test_packaging.py
TRITON_INTERPRET=1 "$PY" -m pytest -q -rs tests "$@"

echo "== Python, CPU: the C path's refusals (the cpp backend's operators on CPU tensors, ADDRMSNORM_C_CHECKS_ON_CPU) =="
# The refusal tests once more, through the torch extension and the C runtime's checks (no driver): their
# messages are the C path's, as a GPU user of the cpp backend reads them. Tests of valid calls are left out:
# nothing runs on CPU tensors there.
TRITON_INTERPRET=1 ADDRMSNORM_BACKEND=cpp ADDRMSNORM_C_CHECKS_ON_CPU=1 "$PY" -m pytest -q -rs tests \
  -k "(refuse or refusal or refused) and not same_bits and not grad" "$@"

echo "== C++ runtime: ctest =="
ctest --test-dir build --output-on-failure
# ctest names the skipped tests but not why: GoogleTest's GTEST_SKIP message is in ctest's log.
skips=$(grep -h "test skipped: " build/Testing/Temporary/LastTest.log 2>/dev/null | sort | uniq -c || true)
if [ -n "$skips" ]; then
  echo "== ctest: why the skipped tests skipped (count, GoogleTest's message):"
  echo "$skips"
fi

if "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "== Python, GPU: compiled kernels, and the C++ library through ctypes =="
  "$PY" -m pytest -q -rs tests "$@"
else
  echo "== Python GPU suite skipped: no CUDA device here (torch.cuda.is_available() is False) =="
fi
