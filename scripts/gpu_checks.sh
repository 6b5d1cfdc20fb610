#!/usr/bin/env bash
# compute-sanitizer over a small sample of every entry point, on a GPU, after scripts/build.sh (or
# scripts/test.sh, or scripts/gpu_suite.sh) has built the package with the C++ tests: the Python API on both
# backends (devtools/sanitizer_sample.py: the forward in place and into outputs, the backward, the quantized
# modes, every variant, the QK norm with the rotation; the rotation's backward on lines of its own) and the C
# ABI from C++ (the GPU tests' small grid and every variant's GPU test). Each of memcheck, racecheck, initcheck
# and synccheck runs over each target, GPU_CHECKS_JOBS (default: half the CPU cores) at a time: the sanitizer's
# instrumentation is the CPU's work, and the samples are small. One line per tool says what it found, and the
# last line counts them. Exit status 1 if any tool reported an error. Full logs: build/sanitizer/.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh
sanitizer=${COMPUTE_SANITIZER:-compute-sanitizer}
command -v "$sanitizer" >/dev/null || { echo "compute-sanitizer not found (it comes with the CUDA toolkit)" >&2; exit 2; }
gpu_test=build/tests/cpp/addrmsnorm_gpu_test
[ -x "$gpu_test" ] || { echo "$gpu_test is not built: ADDRMSNORM_BUILD_TESTS=ON bash scripts/build.sh" >&2; exit 2; }
mkdir -p build/sanitizer
# Every section of the Python sample but the rotation's backward, which runs on its own line (its racecheck
# report is the rotation's speed issue's); the C ABI's GPU tests of the fused, plain, QK, gated and pair calls
# (the sandwich norm and the rotation reach the C ABI through the cpp backend's lines).
sections=(forward plain_norm backward quantized variants rope)
gtest_filter="Gpu.BoundaryGrid:Gpu.InPlaceAndStrided:Gpu.QuantizedOutputsAgainstTheReference:\
Gpu.PlainNormAndQkNormOfAFusedQkvBuffer:Gpu.GatedNormThroughTheCppLayer:Gpu.LatentPairInOneBufferThroughTheCppLayer"
tools=(memcheck racecheck initcheck synccheck)
targets=(cpp triton c-abi cpp-rope-backward triton-rope-backward)
jobs=${GPU_CHECKS_JOBS:-$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}

# The JIT's kernels compiled once, outside the sanitizer, so that the parallel runs share Triton's cache.
ADDRMSNORM_BACKEND=triton "$PY" devtools/sanitizer_sample.py > build/sanitizer/warm-triton.log 2>&1 ||
  { echo "the sample fails without the sanitizer (build/sanitizer/warm-triton.log)"; tail -20 build/sanitizer/warm-triton.log; exit 1; }

run_one() {  # tool target: one sanitizer run, its exit status in build/sanitizer/<tool>-<target>.rc
  local tool=$1 target=$2 log=build/sanitizer/$1-$2.log cmd
  case $target in
    c-abi) cmd=(env ADDRMSNORM_TEST_SMALL=1 "$gpu_test" "--gtest_filter=$gtest_filter") ;;
    *-rope-backward) cmd=(env ADDRMSNORM_BACKEND=${target%%-*} "$PY" devtools/sanitizer_sample.py rope_backward) ;;
    *) cmd=(env ADDRMSNORM_BACKEND=$target "$PY" devtools/sanitizer_sample.py "${sections[@]}") ;;
  esac
  local t0=$SECONDS
  "$sanitizer" --tool "$tool" --error-exitcode 9 "${cmd[@]}" > "$log" 2>&1
  echo "$? $((SECONDS - t0))" > "build/sanitizer/$tool-$target.rc"
}

t0=$SECONDS
running=0
for tool in "${tools[@]}"; do
  for target in "${targets[@]}"; do
    run_one "$tool" "$target" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
  done
done
wait

failed=0 clean=0 dirty=0
for tool in "${tools[@]}"; do
  verdicts=()
  for target in "${targets[@]}"; do
    log=build/sanitizer/$tool-$target.log
    read -r rc secs < "build/sanitizer/$tool-$target.rc"
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1 | sed 's/^========= //')
    if [ "$rc" = 0 ]; then
      verdicts+=("$target ok (${summary:-no summary}, ${secs} s)")
      clean=$((clean + 1))
    else
      verdicts+=("$target FAILED, rc $rc (${summary:-see $log}, ${secs} s)")
      failed=1
      dirty=$((dirty + 1))
    fi
  done
  printf '%-9s %s\n' "$tool:" "$(IFS=';'; echo "${verdicts[*]}" | sed 's/;/; /g')"
done
echo "gpu checks: $clean clean, $dirty with errors (${#tools[@]} tools x ${#targets[@]} targets, $jobs at a time," \
     "$((SECONDS - t0)) s; logs in build/sanitizer/)"
exit $failed
