#!/bin/bash
# Session 14, call A (branch s14-group-pass1): per-group maxima of |h * w| from the looped path's pass 1, against main's
# kernel (.devrun/base14), per group 128 fp8 at 65536 and 131072, alternating base / new twice; then tests/test_quant.py
# on the GPU (Triton backend) on the branch.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
T0=$SECONDS
for i in 1 2; do
  TRITON_CACHE_DIR=/tmp/tc_base timeout 70 python3 .devrun/run_copy.py $PWD/.devrun/base14 devtools/tune.py quant --h 65536,131072 --modes group --caps "" --extra l16384w32k > $OUT/base$i.md 2>&1; echo "base$i rc=$? $((SECONDS-T0))s"
  TRITON_CACHE_DIR=/tmp/tc_new timeout 90 python3 devtools/tune.py quant --h 65536,131072 --modes group --caps 32 --extra l16384w32k,l8192w16k > $OUT/new$i.md 2>&1; echo "new$i rc=$? $((SECONDS-T0))s"
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
            res[(p[1], f.rstrip("12.md"), p[3].split(" (")[0])].append(float(p[7].rstrip("%")))
for k in sorted(res): print(k[0], k[1], k[2], " ".join(f"{x:.1f}" for x in res[k]), "| median", statistics.median(res[k]))
PY
grep -h "q off" $OUT/new1.md | head -3 | cut -c1-160
T0=$SECONDS
ADDRMSNORM_BACKEND=triton timeout 120 python3 -m pytest -q tests/test_quant.py -n 16 -p no:cacheprovider > $OUT/test-quant.log 2>&1; echo "test_quant triton rc=$? $((SECONDS-T0))s"; tail -3 $OUT/test-quant.log
