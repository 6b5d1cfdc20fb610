#!/usr/bin/env bash
# Installs what addrmsnorm needs to build and test: torch and triton where they are missing (a
# machine's own CUDA build of torch is kept; a fresh CPU-only machine gets the pinned releases), the
# build backend (scikit-build-core) and the test extras (transformers: the version addrmsnorm.hf is
# tested with); with ADDRMSNORM_SETUP_GTEST=1, GoogleTest
# from Debian's packages for the C++ tests. Building and installing addrmsnorm itself is
# scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh
# build.sh passes scikit-build-core its settings with pip's -C (--config-settings), which pip 23.1
# added; a virtual environment made from Debian's Python 3.11 starts with pip 23.0.1.
"$PY" -m pip install -q "pip>=23.1"
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install -q "torch==2.13.0"
fi
if ! "$PY" -c "import triton" 2>/dev/null; then
  "$PY" -m pip install -q "triton==3.6.0"
fi
"$PY" -m pip install -q "scikit-build-core>=0.10" "pytest>=7" numpy matplotlib "transformers==5.24.0"
if [ "${ADDRMSNORM_SETUP_GTEST:-0}" = 1 ] && [ ! -e /usr/include/gtest/gtest.h ] && \
   [ ! -e /usr/src/googletest/CMakeLists.txt ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -q && apt-get install -y -q libgtest-dev cmake ninja-build
  else
    echo "GoogleTest is missing: install Debian's libgtest-dev (the C++ tests need it)" >&2
    exit 1
  fi
fi
