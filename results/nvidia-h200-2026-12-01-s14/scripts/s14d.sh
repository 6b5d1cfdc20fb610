#!/bin/bash
# Session 14, call D (main as call C tested it, with per-group scales in the tile's layout): the quantized rows of the report (every mode at the standard grid
# and at 65536 / 131072, the decode chain, the CPU cost) beside FlashInfer (norm.cuh, from its headers) and
# torch.compile.
REPO=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$REPO/.peers/flashinfer_shim PYTHONUNBUFFERED=1 ADDRMSNORM_CUDA_ARCHS=90
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
T0=$SECONDS
bash scripts/build.sh > $OUT/build.log 2>&1; echo "build rc=$? $((SECONDS-T0))s"; grep -E "MiB" $OUT/build.log | tail -1
T0=$SECONDS
timeout 420 python3 -m addrmsnorm.bench --shapes 16384x4096 --dtypes bf16 --no-decode --no-backward --no-overhead --out $OUT/benchq > $OUT/benchq.md 2> $OUT/benchq.log; echo "bench quant rc=$? $((SECONDS-T0))s"
grep -E "Targets \(issue 14\)" $OUT/benchq.md; grep -E "missed" $OUT/benchq.md | cut -c1-220 | head -40
grep -E "roofline|FAIL|not measured" $OUT/benchq.log | cut -c1-250 | head
rm -f $OUT/benchq/gbs_vs_h.png $OUT/benchq/report.md
