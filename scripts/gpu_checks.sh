#!/usr/bin/env bash
# compute-sanitizer over a small sample of every entry point, on a GPU, after scripts/build.sh (or
# scripts/test.sh, or scripts/gpu_suite.sh) has built the package with the C++ tests: the Python API on both
# backends (devtools/sanitizer_sample.py: the forward in place and into outputs, the backward, the quantized
# modes, every variant, the QK norm with the rotation; the rotation's backward on lines of its own) and the C
# ABI from C++ (the GPU tests' small grid and every variant's GPU test). Each of memcheck, racecheck, initcheck
# and synccheck runs over each; one line per tool says what it found, and the last line counts them. Exit
# status 1 if any tool reported an error. Full logs: build/sanitizer/.
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
failed=0
clean=0
dirty=0
for tool in memcheck racecheck initcheck synccheck; do
  t0=$SECONDS
  verdicts=()
  for target in cpp triton c-abi cpp-rope-backward triton-rope-backward; do
    log=build/sanitizer/$tool-$target.log
    case $target in
      c-abi) cmd=(env ADDRMSNORM_TEST_SMALL=1 "$gpu_test" "--gtest_filter=$gtest_filter") ;;
      *-rope-backward) cmd=(env ADDRMSNORM_BACKEND=${target%%-*} "$PY" devtools/sanitizer_sample.py rope_backward) ;;
      *) cmd=(env ADDRMSNORM_BACKEND=$target "$PY" devtools/sanitizer_sample.py "${sections[@]}") ;;
    esac
    "$sanitizer" --tool "$tool" --error-exitcode 9 "${cmd[@]}" > "$log" 2>&1
    rc=$?
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1 | sed 's/^========= //')
    if [ "$rc" = 0 ]; then
      verdicts+=("$target ok (${summary:-no summary})")
      clean=$((clean + 1))
    else
      verdicts+=("$target FAILED, rc $rc (${summary:-see $log})")
      failed=1
      dirty=$((dirty + 1))
    fi
  done
  printf '%-9s %s  [%ds]\n' "$tool:" "$(IFS=';'; echo "${verdicts[*]}" | sed 's/;/; /g')" $((SECONDS - t0))
done
echo "gpu checks: $clean clean, $dirty with errors (4 tools x 5 targets; logs in build/sanitizer/)"
exit $failed
