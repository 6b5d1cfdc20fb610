#!/bin/bash
# Session 12, call E (main as it lands, 855e511): build, ctest, the full GPU suite on both backends.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 ADDRMSNORM_CUDA_ARCHS=90
T0=$SECONDS
ADDRMSNORM_CMAKE_ARGS="-DADDRMSNORM_GTEST_SOURCE_DIR=$PWD/.deps/googletest" ADDRMSNORM_BUILD_TESTS=ON bash scripts/build.sh > $OUT/build.log 2>&1; echo "build rc=$? $((SECONDS-T0))s"; grep -E "MiB|refuse" $OUT/build.log | tail -2
timeout 40 ctest --test-dir build --output-on-failure > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|FAILED|Failed" $OUT/ctest.log | head -5
T0=$SECONDS
ADDRMSNORM_EXPECT_INSTALLED=1 timeout 190 python3 -m pytest -q -rs tests -n 16 -p no:cacheprovider > $OUT/gpu-pytest-cpp.log 2>&1; echo "pytest cpp rc=$? $((SECONDS-T0))s"
grep -E "passed|failed|FAILED|Error" $OUT/gpu-pytest-cpp.log | tail -6
T0=$SECONDS
ADDRMSNORM_BACKEND=triton ADDRMSNORM_EXPECT_INSTALLED=1 timeout 160 python3 -m pytest -q -rs tests -n 16 -p no:cacheprovider > $OUT/gpu-pytest-triton.log 2>&1; echo "pytest triton rc=$? $((SECONDS-T0))s"
grep -E "passed|failed|FAILED|Error" $OUT/gpu-pytest-triton.log | tail -6
