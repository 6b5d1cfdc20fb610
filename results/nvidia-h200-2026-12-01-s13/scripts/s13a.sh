#!/bin/bash
# Session 13, call A: the quantized forward above 32768 re-reading x and residual (y from the fp32 h) against
# the table's loops (h reloaded from residual_out), at 65536 and 131072; the plain forward's loop as a check.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
git log --oneline -1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
T0=$SECONDS
timeout 420 python3 devtools/tune.py quant --h 65536,131072 --extra l16384w32x,l8192w16x,l8192w32x,l4096w8x,l4096w16x,l16384w32,l16384w32k > $OUT/quant.md 2>&1; echo "quant rc=$? $((SECONDS-T0))s"
python3 - <<'PY'
import re, collections, os
rows = collections.defaultdict(list)
for line in open(os.environ["OUT"] + "/quant.md"):
    p = [c.strip() for c in line.split("|")]
    if len(p) > 7 and p[1][:1].isdigit():
        rows[(p[1], p[2], p[3])].append(float(p[7].rstrip("%")))
for k, v in rows.items(): print(" | ".join(k), "|", " ".join(f"{x:.1f}" for x in v))
PY
tail -3 $OUT/quant.md
T0=$SECONDS
timeout 120 python3 devtools/tune.py bulk --h 65536,131072 --only-extra > $OUT/bulk.md 2>&1; echo "bulk rc=$? $((SECONDS-T0))s"; grep -E "^\|" $OUT/bulk.md | head -20
