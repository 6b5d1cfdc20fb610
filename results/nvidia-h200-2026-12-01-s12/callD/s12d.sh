#!/bin/bash
# Session 12, call D (right after C, on the same machine; carries .peers/qb, .peers/quack-part2 and the
# FlashInfer shim): Quack's runtime assembled, then the report with every peer: the bf16 grid with the
# decode chain, CPU cost and training rows, and fp32 at 8192 x 16384 and 16384 x 4096.
REPO=$PWD
ls /tmp/q/cu13.part.00 /tmp/site >/dev/null || exit 3
mkdir -p /tmp/cdsl && cat /tmp/q/cu13.part.00 .peers/qb/cu13.part.01 | tar -xJ -C /tmp/cdsl || exit 4
for w in .peers/quack-part2/*.whl; do python3 -m zipfile -e $w /tmp/cdsl; done
export PYTHONPATH=/tmp/site:$REPO/.peers/flashinfer_shim:/tmp/cdsl:/tmp/cdsl/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
python3 -c "from quack.rmsnorm import rmsnorm_fwd; print('quack ok')" 2>&1 | tail -1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
T0=$SECONDS
timeout 400 python3 -m addrmsnorm.bench --shapes 16384x4096,16384x8192,16384x7168,16384x5120,16384x2048,2048x4096,512x4096,16384x4100,16384x11111,4096x14336,16384x3000,1048576x128,2048x32768,2730x24576,2048x65536,1024x131072 --dtypes bf16 --no-quant --out $OUT/bench > $OUT/bench.md 2> $OUT/bench.log; echo "bench rc=$? $((SECONDS-T0))s"
T0=$SECONDS
timeout 90 python3 -m addrmsnorm.bench --shapes 8192x16384,16384x4096 --dtypes fp32 --no-quant --no-decode --no-backward --no-overhead --out $OUT/bench32 > $OUT/bench32.md 2> $OUT/bench32.log; echo "bench fp32 rc=$? $((SECONDS-T0))s"
grep -E "roofline|FAIL|not measured" $OUT/bench.log | cut -c1-250
sed -n '/Targets (issue 15)/,/#### Bandwidth/p' $OUT/bench.md | grep -E "missed|met" | cut -c1-200
sed -n '/Targets (issue 15)/,/#### Bandwidth/p' $OUT/bench32.md | grep -E "missed|met" | cut -c1-200
rm -f $OUT/bench/gbs_vs_h.png $OUT/bench/report.md $OUT/bench32/gbs_vs_h.png $OUT/bench32/report.md $OUT/bench32/results.csv
