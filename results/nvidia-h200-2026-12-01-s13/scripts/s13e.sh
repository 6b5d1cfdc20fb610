#!/bin/bash
# Session 13, call E: the quantized single pass at 5120 and 16384 against other warps (tune.py quant, every mode);
# the GPU test_quant.py (the amended per-token amax test). If per group at 5120 gains a point or more with 16
# warps, the row .devrun/perg5120.patch adds is applied and the whole suite runs on it (build, ctest, both backends).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 ADDRMSNORM_CUDA_ARCHS=90
T0=$SECONDS
timeout 150 python3 devtools/tune.py quant --h 5120,16384 --extra s8192r1w16e,s8192r1w4e,s16384r1w32e --caps "" > $OUT/quant.md 2>&1; echo "quant rc=$? $((SECONDS-T0))s"
python3 - <<'PY' > $OUT/quant-summary.txt
import collections, os, statistics
rows = collections.defaultdict(list)
for line in open(os.environ["OUT"] + "/quant.md"):
    p = [c.strip() for c in line.split("|")]
    if len(p) > 7 and p[1][:1].isdigit():
        rows[(p[1], p[2], p[3].replace(" cap table", "").split(" (q off")[0])].append(float(p[7].rstrip("%")))
for k, v in rows.items(): print(" | ".join(k), "|", " ".join(f"{x:.1f}" for x in v), "| median", statistics.median(v))
g = {k[2]: statistics.median(v) for k, v in rows.items() if k[0].endswith("x5120") and k[1] == "per-group 128 fp8"}
table = [v for k, v in g.items() if k.startswith("**table**")][0]
w16 = [v for k, v in g.items() if "b8192 r1 w16" in k and "table" not in k][0]
print("ADOPT" if w16 >= table + 1.0 else "KEEP", table, w16)
PY
cat $OUT/quant-summary.txt
if ! grep -q ADOPT $OUT/quant-summary.txt; then
  T0=$SECONDS
  ADDRMSNORM_BACKEND=triton timeout 100 python3 -m pytest -q tests/test_quant.py -n 16 -p no:cacheprovider > $OUT/test-quant.log 2>&1; echo "test_quant triton rc=$? $((SECONDS-T0))s"; tail -1 $OUT/test-quant.log
else
  git apply .devrun/perg5120.patch && echo "patch applied" || exit 5
  export PYTHONPATH=/tmp/site
  T0=$SECONDS
  ADDRMSNORM_CMAKE_ARGS="-DADDRMSNORM_GTEST_SOURCE_DIR=$PWD/.deps/googletest" ADDRMSNORM_BUILD_TESTS=ON bash scripts/build.sh > $OUT/build.log 2>&1; echo "build rc=$? $((SECONDS-T0))s"; grep -E "MiB|refuse|rror" $OUT/build.log | tail -3
  timeout 60 ctest --test-dir build --output-on-failure > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|FAILED|Failed" $OUT/ctest.log | head -8
  T0=$SECONDS
  ADDRMSNORM_EXPECT_INSTALLED=1 timeout 190 python3 -m pytest -q -rs tests -n 16 -p no:cacheprovider > $OUT/gpu-pytest-cpp.log 2>&1; echo "pytest cpp rc=$? $((SECONDS-T0))s"
  grep -E "passed|failed|FAILED|Error" $OUT/gpu-pytest-cpp.log | tail -6
  T0=$SECONDS
  ADDRMSNORM_BACKEND=triton ADDRMSNORM_EXPECT_INSTALLED=1 timeout 130 python3 -m pytest -q -rs tests -n 16 -p no:cacheprovider > $OUT/gpu-pytest-triton.log 2>&1; echo "pytest triton rc=$? $((SECONDS-T0))s"
  grep -E "passed|failed|FAILED|Error" $OUT/gpu-pytest-triton.log | tail -6
fi
