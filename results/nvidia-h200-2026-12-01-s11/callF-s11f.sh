#!/bin/bash
# Session 11, call F: the single pass at 16384 < H <= 32768 for the plain 16-bit forward (the table loops there),
# with and without evict-last, 16 and 32 warps, in place and into given outputs (JIT, main).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 ADDRMSNORM_BACKEND=triton
for spec in 32768:2048:bf16 32768:2048:fp16 24576:2730:bf16; do
  IFS=: read H N D <<< "$spec"
  for mode in "" "--out-of-place"; do
    timeout 80 python3 devtools/tune.py bulk --h $H --rows $N --dtypes $D --only-extra --extra s32768r1w16e,s32768r1w16,s32768r1w32e $mode > /tmp/o.md 2>&1
    echo "$H $N $D ${mode:-in-place} rc=$?"; grep -E '^\| [0-9]' /tmp/o.md | cut -d'|' -f4,5,9; cat /tmp/o.md >> $OUT/single32768.md
  done
done
