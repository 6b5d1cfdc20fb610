#!/bin/bash
# Session 14, call B (main): the quantized forward at 16384 x 5120, per group 128 fp8 and per-token int8: the table's single
# pass (block 8192, 3/8 of its lanes masked) against looped chunks that divide the row (1024 and 512 wide, 5 or 10 per pass,
# several programs per SM), twice.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
T0=$SECONDS
for i in 1 2; do
  timeout 100 python3 devtools/tune.py quant --h 5120 --modes group,int8 --caps "" --extra l1024w4,l1024w8,l1024w4k,l512w4,l2048w8 > $OUT/r$i.md 2>&1; echo "r$i rc=$? $((SECONDS-T0))s"
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
            res[(p[1], p[2], p[3].split(" (")[0])].append(float(p[7].rstrip("%")))
for k in sorted(res): print(k[0], k[1], k[2], " ".join(f"{x:.1f}" for x in res[k]), "| median", statistics.median(res[k]))
PY
