#!/usr/bin/env bash
# The whole test suite on a GPU machine, in one command:
#   1. build and install addrmsnorm editable with the C++ tests for this card's arch (scripts/build.sh);
#   2. ctest (the C++ runtime: host, no-driver and GPU tests);
#   3. pytest on the "cpp" backend (the C++ extension and the C ABI), then on the "triton" backend (the JIT).
# Each backend's pytest run is two steps, so that the workers never together ask for more than the card holds
# (each test also gives its cached GPU memory back: tests/conftest.py):
#   - the cases not marked `large` (tests/conftest.py) on W workers (pytest-xdist), W = min(CPU cores, the
#     card's free GiB / GPU_SUITE_GIB_PER_WORKER, default 5);
#   - the large cases on as many workers as the card has room for at GPU_SUITE_GIB_PER_LARGE (default 16) GiB
#     a case: on an 80 GB card, four at a time.
# Without pytest-xdist each step is one process. Set ADDRMSNORM_NO_SETUP=0 to run scripts/setup.sh first
# (it needs the network); the default assumes a machine that has torch, triton, scikit-build-core, pytest and
# GoogleTest (ADDRMSNORM_CMAKE_ARGS=-DADDRMSNORM_GTEST_SOURCE_DIR=... points the build at its sources).
# GPU_SUITE_BACKENDS (default "cpp triton") picks the backends' pytest runs, e.g. to split the suite over two calls
# of a machine with a time limit per command. Arguments go to every pytest run (e.g. -x, or a test path instead of the whole of tests/).
# The last line is the summary of counts; exit status 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh
if [ "${ADDRMSNORM_NO_SETUP:-1}" != 1 ]; then
  ADDRMSNORM_SETUP_GTEST=1 bash scripts/setup.sh || exit 1
fi
"$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" ||
  { echo "gpu_suite.sh: no CUDA device here (torch.cuda.is_available() is False); scripts/test.sh is the CPU suite" >&2
    exit 2; }
read -r arch free_gib < <("$PY" -c "
import torch
c = torch.cuda.get_device_capability()
print(f'{c[0]}{c[1]}', torch.cuda.mem_get_info()[0] // 2**30)")
export ADDRMSNORM_CUDA_ARCHS=${ADDRMSNORM_CUDA_ARCHS:-$arch}
cores=$(nproc)
workers=$(( free_gib / ${GPU_SUITE_GIB_PER_WORKER:-5} )); workers=$(( workers < cores ? workers : cores ))
large_workers=$(( free_gib / ${GPU_SUITE_GIB_PER_LARGE:-16} )); large_workers=$(( large_workers > 0 ? large_workers : 1 ))
if ! "$PY" -c "import xdist" 2>/dev/null; then
  echo "== pytest-xdist is not installed: each pytest step runs in one process"
  workers=0 large_workers=0
fi
t0=$SECONDS
echo "== $("$PY" -c "import torch; print(torch.cuda.get_device_name())"), sm_$arch, $free_gib GiB free, $cores cores: \
$workers workers, $large_workers for the large cases"

echo "== build: the C++ runtime, the torch extension and the C++ tests (sm_$ADDRMSNORM_CUDA_ARCHS)"
ADDRMSNORM_BUILD_TESTS=ON bash scripts/build.sh || { echo "gpu suite: the build failed"; exit 1; }
build_s=$((SECONDS - t0))

echo "== ctest"
ctest --test-dir build --output-on-failure -j "$cores" 2>&1 | tee build/ctest.log | tail -15
# ctest says "100% tests passed out of 65" when all pass and "95% tests passed, 3 tests failed out of 65" when not
ctest_line=$(grep -E "tests passed(, [0-9]+ tests failed)? out of" build/ctest.log | tail -1)
ctest_line=${ctest_line:-"ctest: no summary (see build/ctest.log)"}

declare -A counts
failed=0
grep_count() { local c; c=$(grep -oE "[0-9]+ $1" <<<"$2" | head -1 | cut -d' ' -f1); echo "${c:-0}"; }
# Files that never call the operators (kernel lists and plans, the C ABI's layout, the bench harness's tables, the
# docs' signatures) pass or fail alike on both backends: the triton run leaves them to the cpp run.
backend_free=(test_aot test_configs test_register_plan test_c_abi_layout test_bench_harness test_docs)
backends=(${GPU_SUITE_BACKENDS:-cpp triton})
for backend in "${backends[@]}"; do
  ignore=()
  if [ "$backend" = triton ] && [ -z "${GPU_SUITE_TESTS:-}" ]; then
    for f in "${backend_free[@]}"; do ignore+=(--ignore "tests/$f.py"); done
  fi
  for part in "not large" "large"; do
    n=$([ "$part" = large ] && echo "$large_workers" || echo "$workers")
    log=build/pytest-$backend-${part// /-}.log
    what=$([ "$part" = large ] && echo "large cases" || echo "cases not marked large")
    echo "== pytest, backend $backend, the $what ($n workers)"
    xdist=()
    [ "$n" -gt 0 ] && xdist=(-n "$n")
    ADDRMSNORM_BACKEND=$backend ADDRMSNORM_SUITE_BOTH_BACKENDS=1 "$PY" -m pytest -q -rfE -p no:cacheprovider -m "$part" --durations=8 \
      "${xdist[@]}" "${ignore[@]}" "$@" ${GPU_SUITE_TESTS:-tests} 2>&1 | tee "$log" |
      grep -vE "^\[gw[0-9]+\]|^[.sxFE]+ *(\[ *[0-9]+%\])?$"
    rc=${PIPESTATUS[0]}
    [ "$rc" != 0 ] && [ "$rc" != 5 ] && failed=1  # 5: no test collected (a filtered run)
    summary=$(grep -E "(passed|failed|error|skipped|deselected).* in [0-9.]+s" "$log" | tail -1)
    for what in passed failed skipped error; do
      counts[$backend-$what]=$(( ${counts[$backend-$what]:-0} + $(grep_count "$what" "$summary") ))
    done
  done
done
grep -qE "[1-9][0-9]* tests failed" <<<"$ctest_line" && failed=1
grep -q "tests passed" <<<"$ctest_line" || failed=1
line=()
for b in "${backends[@]}"; do
  line[${#line[@]}]="$b: ${counts[$b-passed]} passed, ${counts[$b-failed]} failed, ${counts[$b-error]} errors, ${counts[$b-skipped]} skipped"
done
echo "gpu suite: $(IFS=';'; echo "${line[*]}" | sed 's/;/; /g'); ctest: ${ctest_line}; build ${build_s} s, total $((SECONDS - t0)) s"
exit $failed
