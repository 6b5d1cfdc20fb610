# Sourced by setup.sh, test.sh and main.sh: sets PY, the Python that installs and runs addrmsnorm.
#   - $PYTHON (default python3) is the base interpreter;
#   - a .venv in the project root, if there is one, is used;
#   - else, if the base Python is externally managed (PEP 668: Debian's and Ubuntu's system Python
#     refuse pip installs), .venv is created from it, with its system site-packages visible so that a
#     machine's own torch build is kept;
#   - else the base Python is used as it is (a conda env, a venv, pyenv).
# The choice is made once and passed to the scripts this one calls (ADDRMSNORM_PY).
if [ -n "${ADDRMSNORM_PY:-}" ]; then
  PY=$ADDRMSNORM_PY
else
  BASE_PY=${PYTHON:-python3}
  if [ -x .venv/bin/python ]; then
    PY=$PWD/.venv/bin/python
    echo "== using the virtual environment .venv ($("$PY" --version 2>&1))"
  # PEP 668: the marker beside the standard library, outside a virtual environment (a venv made from
  # a managed Python sees the same marker and is not managed).
  elif "$BASE_PY" -c 'import os, sys, sysconfig; sys.exit(0 if sys.prefix == sys.base_prefix and os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
    echo "== $BASE_PY is externally managed (PEP 668): creating the virtual environment .venv"
    "$BASE_PY" -m venv --system-site-packages .venv || {
      echo "could not create .venv: install Debian's python3-venv (apt-get install python3-venv)" >&2; exit 1; }
    PY=$PWD/.venv/bin/python
  else
    PY=$(command -v "$BASE_PY")
    echo "== using $PY ($("$PY" --version 2>&1)) as it is: what the scripts install goes into it"
  fi
  export ADDRMSNORM_PY=$PY
fi
