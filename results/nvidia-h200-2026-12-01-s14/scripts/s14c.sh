#!/bin/bash
# Session 14, call C (main with the branch s13-groups-4d merged: per-group scales in the tile's layout): build, ctest, the full GPU
# suite on both backends, then the table's quantized loops at 65536 and 131072.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 ADDRMSNORM_CUDA_ARCHS=90
git log --oneline -1
T0=$SECONDS
ADDRMSNORM_CMAKE_ARGS="-DADDRMSNORM_GTEST_SOURCE_DIR=$PWD/.deps/googletest" ADDRMSNORM_BUILD_TESTS=ON ADDRMSNORM_BUILD_BENCH=ON bash scripts/build.sh > $OUT/build.log 2>&1; echo "build rc=$? $((SECONDS-T0))s"; grep -E "MiB|refuse|rror" $OUT/build.log | tail -4
timeout 60 ctest --test-dir build --output-on-failure > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|FAILED|Failed" $OUT/ctest.log | head -8
T0=$SECONDS
ADDRMSNORM_EXPECT_INSTALLED=1 timeout 200 python3 -m pytest -q -rs tests -n 16 -p no:cacheprovider > $OUT/gpu-pytest-cpp.log 2>&1; echo "pytest cpp rc=$? $((SECONDS-T0))s"
grep -E "passed|failed|FAILED|Error" $OUT/gpu-pytest-cpp.log | tail -8
T0=$SECONDS
ADDRMSNORM_BACKEND=triton ADDRMSNORM_EXPECT_INSTALLED=1 timeout 170 python3 -m pytest -q -rs tests -n 16 -p no:cacheprovider > $OUT/gpu-pytest-triton.log 2>&1; echo "pytest triton rc=$? $((SECONDS-T0))s"
grep -E "passed|failed|FAILED|Error" $OUT/gpu-pytest-triton.log | tail -8
T0=$SECONDS
PYTHONPATH=$PWD:/tmp/site timeout 100 python3 devtools/tune.py quant --h 65536,131072 --caps "" > $OUT/quant.md 2>&1; echo "quant rc=$? $((SECONDS-T0))s"
grep -E "^\| [0-9]" $OUT/quant.md | awk -F'|' '{print $2 "|" $3 "|" $4 "|" $8}'
