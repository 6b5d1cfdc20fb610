#!/usr/bin/env bash
# The JIT backend under the Triton releases current torch releases pin, compiled on the CPU: for each
# release, a virtual environment with that Triton alone, then tools/aot_build.py --jit-check for
# the default archs (the kernels the JIT compiles, and the register plans it degrades; the guide's
# "Triton versions"). Usage: .ci/triton_versions.sh 3.8.0 3.9.0
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for v in "$@"; do
  t0=$SECONDS
  python3 -m venv "$work/t$v"
  "$work/t$v/bin/pip" install -q "triton==$v" 2>&1 | grep -v "^WARNING: Location" || true
  "$work/t$v/bin/python" "$repo/tools/aot_build.py" --jit-check --out "$work/out$v" --archs 80,90,100 \
    --jobs "$(nproc)" | grep -v "compiled, "
  echo "== Triton $v: $((SECONDS - t0)) s"
done
