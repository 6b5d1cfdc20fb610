#!/bin/bash
# Session 11, call H (branch s11-vector-typed-32768; a partial check, not the full suite): build, ctest, the
# forward tests of the new row on the cpp backend, and the row's lower end (16400, 20480) against the looped row.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 ADDRMSNORM_CUDA_ARCHS=90
T0=$SECONDS
ADDRMSNORM_CMAKE_ARGS="-DADDRMSNORM_GTEST_SOURCE_DIR=$PWD/.deps/googletest" ADDRMSNORM_BUILD_TESTS=ON bash scripts/build.sh > $OUT/build.log 2>&1; echo "build rc=$? $((SECONDS-T0))s"; grep -E "MiB|refuse" $OUT/build.log | tail -2
timeout 30 ctest --test-dir build --output-on-failure > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|FAILED|Failed" $OUT/ctest.log | head -5
T0=$SECONDS
ADDRMSNORM_EXPECT_INSTALLED=1 timeout 50 python3 -m pytest -q -rs tests/test_forward.py tests/test_c_runtime.py -k "vector_typed or launcher_asks or batch_invariance or looped_path or 20000" -n 8 -p no:cacheprovider > $OUT/pytest.log 2>&1; echo "pytest rc=$? $((SECONDS-T0))s"; grep -E "passed|failed|FAILED" $OUT/pytest.log | tail -4
timeout 40 python3 devtools/tune.py bulk --h 16400,20480 --rows 2048 --only-extra --extra l16384w32k > $OUT/tune.md 2>&1; echo "tune rc=$?"; grep -E "^\| [0-9]" $OUT/tune.md | cut -d'|' -f2,4,5,9
