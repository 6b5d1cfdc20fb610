#!/usr/bin/env bash
# The README's install line, as a user types it: a fresh virtual environment with nothing in it,
# `pip install .` with pip's build isolation (the build requirements, Triton pinned, come from the
# package index), then `python -m addrmsnorm` from another directory. torch arrives after the wheel is
# built, so the first import builds the torch extension for it: the output must say so. One arch
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
