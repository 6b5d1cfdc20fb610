#!/bin/bash
# Session 13, call F (branch s13-groups-4d): per-group scales in the tile's layout against main's kernel
# (.devrun/base, a copy of main's package), per group 128 fp8 at 4096, 5120, 65536 and 131072, alternating
# base / new twice; then tests/test_quant.py on the GPU (Triton backend) on the branch.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
T0=$SECONDS
for i in 1 2; do
  TRITON_CACHE_DIR=/tmp/tc_base timeout 80 python3 .devrun/run_copy.py $PWD/.devrun/base devtools/tune.py quant --h 4096,5120,65536,131072 --modes group --caps "" > $OUT/base$i.md 2>&1; echo "base$i rc=$? $((SECONDS-T0))s"
  TRITON_CACHE_DIR=/tmp/tc_new timeout 80 python3 devtools/tune.py quant --h 4096,5120,65536,131072 --modes group --caps "" > $OUT/new$i.md 2>&1; echo "new$i rc=$? $((SECONDS-T0))s"
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
grep -h "q off" $OUT/new1.md | head -2 | cut -c1-160
T0=$SECONDS
ADDRMSNORM_BACKEND=triton timeout 100 python3 -m pytest -q tests/test_quant.py -n 16 -p no:cacheprovider > $OUT/test-quant.log 2>&1; echo "test_quant triton rc=$? $((SECONDS-T0))s"; tail -1 $OUT/test-quant.log
