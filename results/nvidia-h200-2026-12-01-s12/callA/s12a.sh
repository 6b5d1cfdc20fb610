#!/bin/bash
# Session 12, call A (branch s11-vector-typed-32768 merged with main; carries .peers/qa for call B): build, ctest,
# the full GPU suite on both backends; the dweight experiment (BLOCK_P 512, PDL) on the training step; issue 14's
# CPU-cost targets.
REPO=$PWD
mkdir -p /tmp/q && cp .peers/qa/* /tmp/q/
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 ADDRMSNORM_CUDA_ARCHS=90
git log --oneline -1
T0=$SECONDS
ADDRMSNORM_CMAKE_ARGS="-DADDRMSNORM_GTEST_SOURCE_DIR=$REPO/.deps/googletest" ADDRMSNORM_BUILD_TESTS=ON ADDRMSNORM_BUILD_BENCH=ON bash scripts/build.sh > $OUT/build.log 2>&1; echo "build rc=$? $((SECONDS-T0))s"; grep -E "MiB|refuse" $OUT/build.log | tail -2
ctest --test-dir build --output-on-failure > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|FAILED|Failed" $OUT/ctest.log | head -5
T0=$SECONDS
ADDRMSNORM_EXPECT_INSTALLED=1 timeout 200 python3 -m pytest -q -rs tests -n 16 -p no:cacheprovider > $OUT/gpu-pytest-cpp.log 2>&1; echo "pytest cpp rc=$? $((SECONDS-T0))s"
grep -E "passed|failed|FAILED|Error" $OUT/gpu-pytest-cpp.log | tail -6
T0=$SECONDS
ADDRMSNORM_BACKEND=triton ADDRMSNORM_EXPECT_INSTALLED=1 timeout 170 python3 -m pytest -q -rs tests -n 16 -p no:cacheprovider > $OUT/gpu-pytest-triton.log 2>&1; echo "pytest triton rc=$? $((SECONDS-T0))s"
grep -E "passed|failed|FAILED|Error" $OUT/gpu-pytest-triton.log | tail -6
T0=$SECONDS
for v in base p512 pdl p512pdl; do python3 .devrun/exp_dweight.py /tmp/dw_$v $v > /dev/null; done
for v in base p512 pdl p512pdl base pdl; do
  echo "== $v"; ADDRMSNORM_BACKEND=triton TRITON_CACHE_DIR=/tmp/tc_$v timeout 40 python3 .devrun/run_copy.py /tmp/dw_$v .devrun/step_time.py 2>&1 | grep -v "addrmsnorm from"
done
echo "dweight exp $((SECONDS-T0))s"
timeout 60 python3 -c "
from addrmsnorm.bench import quant
rows = quant.cpu_cost()
for r in rows: print(r['impl'], r.get('note') or '', ' '.join(f'{u:.2f}' for u in r.get('us_rounds', [])))
print(quant.targets(rows))
" > $OUT/cpu-cost.txt 2>&1; echo "cpu cost rc=$?"; cat $OUT/cpu-cost.txt
