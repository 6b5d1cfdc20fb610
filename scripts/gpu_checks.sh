#!/usr/bin/env bash
# compute-sanitizer over a small sample of every entry point, on a GPU, after scripts/build.sh (or
# scripts/test.sh) has built the package with the C++ tests: the Python API on both backends
# (devtools/sanitizer_sample.py: the forward in place and into outputs, the backward, the quantized
# modes) and the C ABI from C++ (the GPU tests' small grid). Each of memcheck, racecheck, initcheck and
# synccheck runs over each; one line per tool says what it found. Exit status 1 if any tool reported an
# error. Full logs: build/sanitizer/.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh
sanitizer=${COMPUTE_SANITIZER:-compute-sanitizer}
command -v "$sanitizer" >/dev/null || { echo "compute-sanitizer not found (it comes with the CUDA toolkit)" >&2; exit 2; }
gpu_test=build/tests/cpp/addrmsnorm_gpu_test
[ -x "$gpu_test" ] || { echo "$gpu_test is not built: ADDRMSNORM_BUILD_TESTS=ON bash scripts/build.sh" >&2; exit 2; }
mkdir -p build/sanitizer
failed=0
for tool in memcheck racecheck initcheck synccheck; do
  t0=$SECONDS
  verdicts=()
  for target in cpp triton c-abi; do
    log=build/sanitizer/$tool-$target.log
    if [ "$target" = c-abi ]; then
      cmd=(env ADDRMSNORM_TEST_SMALL=1 "$gpu_test" "--gtest_filter=Gpu.BoundaryGrid:Gpu.InPlaceAndStrided:Gpu.QuantizedOutputsAgainstTheReference:Gpu.PlainNormAndQkNormOfAFusedQkvBuffer")
    else
      cmd=(env ADDRMSNORM_BACKEND=$target "$PY" devtools/sanitizer_sample.py)
    fi
    "$sanitizer" --tool "$tool" --error-exitcode 9 "${cmd[@]}" > "$log" 2>&1
    rc=$?
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1 | sed 's/^========= //')
    if [ "$rc" = 0 ]; then
      verdicts+=("$target ok (${summary:-no summary})")
    else
      verdicts+=("$target FAILED, rc $rc (${summary:-see $log})")
      failed=1
    fi
  done
  printf '%-9s %s  [%ds]\n' "$tool:" "$(IFS=';'; echo "${verdicts[*]}" | sed 's/;/; /g')" $((SECONDS - t0))
done
exit $failed
