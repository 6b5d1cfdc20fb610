"""``python -m addrmsnorm``: version, backend, built archs, this GPU's cubin, and a passing self-check."""

import os
import subprocess
import sys
from pathlib import Path

import addrmsnorm


def test_python_m_addrmsnorm_describes_the_installation_and_checks_itself():
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # it picks the GPU or the interpreter itself
    p = subprocess.run([sys.executable, "-m", "addrmsnorm"], capture_output=True, text=True, env=env,
                       cwd=Path(__file__).resolve().parents[1], timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith(f"addrmsnorm {addrmsnorm.__version__} ")
    assert lines[1].startswith("backend: ") and "(" in lines[1]
    assert lines[2].startswith("torch extension: built for torch ") or lines[2].startswith("torch extension: missing: ")
    assert lines[3].startswith("C++ runtime: ")
    assert lines[4].startswith("GPU: ")
    assert lines[5].startswith("self-check on the ") and ": ok: " in lines[5], lines[5]


def _run(*args):
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd="/", timeout=120)


def test_help_prints_usage_and_runs_nothing():
    for args, prog in ((("-m", "addrmsnorm", "--help"), "python -m addrmsnorm"),
                       (("-m", "addrmsnorm.demo", "--help"), "addrmsnorm-demo")):
        p = _run(*args)
        assert p.returncode == 0, p.stderr
        assert p.stdout.startswith(f"usage: {prog} "), p.stdout
        assert "float64 reference" in p.stdout  # the description says what it does...
        assert "backend:" not in p.stdout and "max |dy|" not in p.stdout  # ...and it does not do it


def test_unknown_flags_are_refused():
    for args in (("-m", "addrmsnorm", "--bogus"), ("-m", "addrmsnorm.demo", "--bogus")):
        p = _run(*args)
        assert p.returncode == 2 and "unrecognized arguments: --bogus" in p.stderr, p.stdout + p.stderr
        assert p.stdout == ""
