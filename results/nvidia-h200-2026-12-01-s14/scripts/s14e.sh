#!/bin/bash
# Session 14, call E (branch s14-asm-scales): per-group scales stored in their own layout (inline PTX, no layout
# conversion and its two barriers) against main's kernel (.devrun/base14), per group 128 fp8 at 5120, 7168, 32768,
# 65536 and 131072, alternating base / new twice; then, on the branch, the build, ctest and the whole GPU suite on
# both backends.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
T0=$SECONDS
for i in 1 2; do
  TRITON_CACHE_DIR=/tmp/tc_base timeout 60 python3 .devrun/run_copy.py $PWD/.devrun/base14 devtools/tune.py quant --h 5120,7168,32768,65536,131072 --modes group --caps "" > $OUT/base$i.md 2>&1; echo "base$i rc=$? $((SECONDS-T0))s"
  TRITON_CACHE_DIR=/tmp/tc_new timeout 60 python3 devtools/tune.py quant --h 5120,7168,32768,65536,131072 --modes group --caps "" > $OUT/new$i.md 2>&1; echo "new$i rc=$? $((SECONDS-T0))s"
done
python3 - <<'PY'
import collections, os, statistics
out = os.environ["OUT"]
res = collections.defaultdict(list)
for f in sorted(os.listdir(out)):
    if not f.endswith(".md"): continue
    for line in open(os.path.join(out, f)):
        p = [c.strip() for c in line.split("|")]
        if len(p) > 7 and p[1][:1].isdigit():
            res[(p[1], f.rstrip("12.md"))].append(float(p[7].rstrip("%")))
for k in sorted(res): print(k[0], k[1], " ".join(f"{x:.1f}" for x in res[k]), "| median", statistics.median(res[k]))
PY
export PYTHONPATH=/tmp/site ADDRMSNORM_CUDA_ARCHS=90
T0=$SECONDS
ADDRMSNORM_CMAKE_ARGS="-DADDRMSNORM_GTEST_SOURCE_DIR=$PWD/.deps/googletest" ADDRMSNORM_BUILD_TESTS=ON ADDRMSNORM_BUILD_BENCH=ON bash scripts/build.sh > $OUT/build.log 2>&1; echo "build rc=$? $((SECONDS-T0))s"; grep -E "MiB|refuse|rror" $OUT/build.log | tail -4
timeout 60 ctest --test-dir build --output-on-failure > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|FAILED|Failed" $OUT/ctest.log | head -8
T0=$SECONDS
ADDRMSNORM_EXPECT_INSTALLED=1 timeout 200 python3 -m pytest -q -rs tests -n 16 -p no:cacheprovider > $OUT/gpu-pytest-cpp.log 2>&1; echo "pytest cpp rc=$? $((SECONDS-T0))s"
grep -E "passed|failed|FAILED|Error" $OUT/gpu-pytest-cpp.log | tail -8
T0=$SECONDS
ADDRMSNORM_BACKEND=triton ADDRMSNORM_EXPECT_INSTALLED=1 timeout 150 python3 -m pytest -q -rs tests -n 16 -p no:cacheprovider > $OUT/gpu-pytest-triton.log 2>&1; echo "pytest triton rc=$? $((SECONDS-T0))s"
grep -E "passed|failed|FAILED|Error" $OUT/gpu-pytest-triton.log | tail -8
