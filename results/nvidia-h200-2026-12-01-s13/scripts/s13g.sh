#!/bin/bash
# Session 13, call G (main after the review's refactor of the rule's flags): the whole GPU suite on the Triton
# backend, which runs the Python dispatch rule directly (no build: the C++ rule and the AOT specs were shown
# unchanged offline).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
git log --oneline -1 2>/dev/null
T0=$SECONDS
ADDRMSNORM_BACKEND=triton timeout 165 python3 -m pytest -q -rs tests -n 16 -p no:cacheprovider > $OUT/gpu-pytest-triton.log 2>&1; echo "pytest triton rc=$? $((SECONDS-T0))s"
grep -E "passed|failed|FAILED|Error" $OUT/gpu-pytest-triton.log | tail -6
