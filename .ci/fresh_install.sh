#!/usr/bin/env bash
# The README's install line, as a user types it: a fresh virtual environment with nothing in it,
# `pip install .` with pip's build isolation (the build requirements, Triton pinned, come from the
# package index), then `python -m addrmsnorm` from another directory. torch arrives after the wheel is
# built, so the first import builds the torch extension for it: the output must say so. Then the
# guide's CMake recipe, typed from the repository root (where the source tree would shadow the
# installed package for a plain import): examples/ built against the installed package and run; with no
# GPU it must stop at the library's own answer. One arch
# (ADDRMSNORM_CUDA_ARCHS, default 90) keeps it short; ADDRMSNORM_AOT_CACHE, when set, lends it the
# kernels an earlier build compiled.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
t0=$SECONDS
ADDRMSNORM_CUDA_ARCHS=${ADDRMSNORM_CUDA_ARCHS:-90} ADDRMSNORM_CACHE_DIR="$work/cache" \
  "$work/venv/bin/pip" install -q "$repo" 2>&1 | grep -v "^WARNING: Location" || true
echo "== pip install . in a fresh venv: $((SECONDS - t0)) s"
t0=$SECONDS
out=$(cd "$work" && ADDRMSNORM_CACHE_DIR="$work/cache" "$work/venv/bin/python" -m addrmsnorm 2>&1) || {
  echo "$out"; echo "python -m addrmsnorm failed" >&2; exit 1; }
echo "$out"
echo "== python -m addrmsnorm: $((SECONDS - t0)) s"
echo "$out" | grep -q "^torch extension: built for torch" || {
  echo "the torch extension was not built for this environment's torch" >&2; exit 1; }
echo "$out" | grep -q "^self-check on the CPU: ok" || { echo "the self-check did not pass" >&2; exit 1; }
t0=$SECONDS
ex=$(cd "$repo" && PATH="$work/venv/bin:$PATH" && \
  cmake -S examples -B "$work/build-example" -Daddrmsnorm_DIR="$(python -c "import importlib.metadata as m; print(m.distribution('addrmsnorm').locate_file('addrmsnorm/lib/cmake/addrmsnorm'))")" >/dev/null && \
  cmake --build "$work/build-example" >/dev/null && { "$work/build-example/addrmsnorm_example" 2>&1 || true; }) || {
  echo "the guide's CMake recipe failed from the repository root" >&2; exit 1; }
echo "$ex"
echo "== examples/ against the installed package: $((SECONDS - t0)) s"
echo "$ex" | grep -q "^addrmsnorm: the call's arguments are valid" || { echo "the example did not check its call" >&2; exit 1; }
echo "$ex" | grep -qE "^(addrmsnorm cannot run here: no CUDA driver|row 0: residual_out exact)" || {
  echo "the example neither ran nor gave the library's reason" >&2; exit 1; }
if [ -d "$HOME/.cache/addrmsnorm" ] && [ -n "$(find "$HOME/.cache/addrmsnorm" -newer "$work/venv/bin/python" -name '*.so' 2>/dev/null)" ]; then
  echo "the recipe built a torch extension into ~/.cache as a side effect" >&2; exit 1
fi
