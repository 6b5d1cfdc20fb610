#!/bin/bash
# Session 12, call B (right after A; carries .peers/qb, quack-part2, the FlashInfer shim): the report at 16384 < H <= 32768 with every peer.
REPO=$PWD
ls /tmp/q/cu13.part.00 /tmp/site >/dev/null || exit 3
mkdir -p /tmp/cdsl && cat /tmp/q/cu13.part.00 .peers/qb/cu13.part.01 | tar -xJ -C /tmp/cdsl || exit 4
for w in .peers/quack-part2/*.whl; do python3 -m zipfile -e $w /tmp/cdsl; done
export PYTHONPATH=/tmp/site:$REPO/.peers/flashinfer_shim:/tmp/cdsl:/tmp/cdsl/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
python3 -c "from quack.rmsnorm import rmsnorm_fwd; print('quack ok')" 2>&1 | tail -1
T0=$SECONDS
timeout 400 python3 -m addrmsnorm.bench --shapes 2048x32768,2730x24576,4096x16400 --dtypes bf16,fp16 --no-quant --no-decode --no-backward --no-overhead --out $OUT/bench > $OUT/bench.md 2> $OUT/bench.log; echo "bench rc=$? $((SECONDS-T0))s"
grep -E "roofline|FAIL|not measured" $OUT/bench.log | cut -c1-250
sed -n '/Targets (issue 15)/,/#### Bandwidth/p' $OUT/bench.md | grep -E "missed|met" | cut -c1-220
rm -f $OUT/bench/gbs_vs_h.png $OUT/bench/report.md
