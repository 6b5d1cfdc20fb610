#!/bin/bash
# Session 11, call G: the single pass of 16 warps at 16384 < H <= 32768 for the plain 16-bit forward (.devrun/v1, a
# patched table) against main (.devrun/v0), for every weight dtype (the fp32- and int16-bits-weight kernels spill),
# and at odd H (ALIGN 1, spills), in place and into given outputs.
export PYTHONUNBUFFERED=1 ADDRMSNORM_BACKEND=triton
for v in v0 v1; do
  timeout 120 python3 .devrun/run_copy.py $PWD/.devrun/$v devtools/tune.py weight --h 32768,24576 --dtypes bf16,fp16 > /tmp/w.md 2>&1
  echo "weight $v rc=$?"; grep -E "^\| [0-9]" /tmp/w.md | cut -d'|' -f2,3,4,5,9; cat /tmp/w.md >> $OUT/weight-$v.md
  for mode in "" "--out-of-place"; do
    timeout 60 python3 .devrun/run_copy.py $PWD/.devrun/$v devtools/tune.py bulk --h 32767 --rows 2048 --only-extra $mode > /tmp/o.md 2>&1
    echo "odd $v ${mode:-in-place} rc=$? :: $(grep -E '^\| [0-9]' /tmp/o.md | cut -d'|' -f4,5,9 | tr '\n' ' ')"; cat /tmp/o.md >> $OUT/odd-$v.md
  done
done
