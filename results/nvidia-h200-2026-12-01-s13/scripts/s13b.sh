#!/bin/bash
# Session 13, call B: the looped quantized forward with the per-token amax from pass 1 (monotone in |h_stored * w|,
# no third pass), at 65536 and 131072: the table's loops and chunk 8192 / 16384 with 16 and 32 warps.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
T0=$SECONDS
timeout 500 python3 devtools/tune.py quant --h 65536,131072 --extra l8192w32,l8192w32k,l16384w32,l16384w32k,l8192w16 --caps "" > $OUT/quant.md 2>&1; echo "quant rc=$? $((SECONDS-T0))s"
python3 - <<'PY'
import collections, os
rows = collections.defaultdict(list)
for line in open(os.environ["OUT"] + "/quant.md"):
    p = [c.strip() for c in line.split("|")]
    if len(p) > 7 and p[1][:1].isdigit():
        rows[(p[1], p[2], p[3].replace(" cap table", ""))].append(float(p[7].rstrip("%")))
for k, v in rows.items(): print(" | ".join(k), "|", " ".join(f"{x:.1f}" for x in v))
PY
grep -i -E "error|assert" $OUT/quant.md | head
