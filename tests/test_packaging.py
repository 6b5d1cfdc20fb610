"""Where the package finds its compiled parts, and what it says when it cannot use them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import addrmsnorm
from addrmsnorm import c_library, locate, ops

REPO = Path(__file__).resolve().parents[1]


def test_an_environment_variable_names_the_file_first(tmp_path, monkeypatch):
    monkeypatch.setenv("ADDRMSNORM_LIB", str(tmp_path / "elsewhere.so"))
    assert locate.find("libaddrmsnorm.so", "ADDRMSNORM_LIB") == tmp_path / "elsewhere.so"
    assert c_library.library_path() is None  # named, but not there: not silently replaced


def test_the_package_lib_folder_comes_before_a_source_build():
    dirs = locate.search_dirs()
    assert dirs[-1] == REPO / "build"
    assert dirs[:-1] == [Path(p) / "lib" for p in addrmsnorm.__path__]


@pytest.mark.skipif(os.environ.get("ADDRMSNORM_EXPECT_INSTALLED") != "1",
                    reason="set by scripts/test.sh after `pip install -e .` (scripts/build.sh)")
def test_an_installed_package_finds_its_libraries_without_help():
    env_free = {k: v for k, v in os.environ.items() if k not in ("ADDRMSNORM_LIB", "ADDRMSNORM_TORCH_EXT")}
    code = ("from addrmsnorm import c_library, ops, locate; "
            "print(c_library.library_path()); print(ops.extension_path()); "
            "print(locate.build_info(ops.extension_path()).get('torch')); import torch; print(torch.__version__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_free,
                         cwd="/", check=True).stdout.split()
    lib, ext, built_with, running = out
    package_libs = {str(Path(p) / "lib") for p in addrmsnorm.__path__}
    assert str(Path(lib).parent) in package_libs, lib
    assert str(Path(ext).parent) in package_libs, ext
    assert built_with == running  # the extension was built against this torch


def _import_with(env_extra: dict) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_extra}
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, "-c", "import addrmsnorm; print(addrmsnorm.backend())"],
                          capture_output=True, text=True, env=env, cwd=str(REPO))


def test_an_extension_built_for_another_torch_is_refused_by_name(tmp_path):
    (tmp_path / ops.EXTENSION_NAME).write_bytes(b"not a library")
    (tmp_path / "build_info.json").write_text(json.dumps({"torch": "0.0.0"}))
    p = _import_with({ops.BACKEND_ENV: "cpp", ops.EXTENSION_ENV: str(tmp_path / ops.EXTENSION_NAME)})
    assert p.returncode != 0
    assert "was built against torch 0.0.0" in p.stderr and "rebuild it" in p.stderr, p.stderr


def test_a_missing_extension_is_refused_when_asked_for(tmp_path):
    p = _import_with({ops.BACKEND_ENV: "cpp", ops.EXTENSION_ENV: str(tmp_path / "nothing.so")})
    assert p.returncode != 0
    # It names the file the variable names, not a build the user never asked about.
    assert f"$ADDRMSNORM_TORCH_EXT names {tmp_path / 'nothing.so'}, which does not exist" in p.stderr, p.stderr
    assert "not built" not in p.stderr and "pip install" not in p.stderr, p.stderr


@pytest.mark.skipif(not (os.environ.get("TRITON_INTERPRET") != "1" and __import__("torch").version.cuda),
                    reason="the fallback warning concerns a CUDA torch outside the interpreter")
def test_auto_falls_back_to_triton_with_a_warning_that_says_why(tmp_path):
    p = _import_with({ops.BACKEND_ENV: "auto", ops.EXTENSION_ENV: str(tmp_path / "nothing.so"),
                      "PYTHONWARNINGS": "always"})
    assert p.returncode == 0 and p.stdout.strip() == "triton", p.stdout + p.stderr
    assert "BackendFallbackWarning" in p.stderr and "which does not exist" in p.stderr, p.stderr


@pytest.mark.skipif(os.environ.get("ADDRMSNORM_EXPECT_INSTALLED") != "1",
                    reason="set by scripts/test.sh after `pip install -e .` (scripts/build.sh)")
def test_the_first_import_builds_the_extension_for_this_torch(tmp_path):
    """Where the installed extension is missing (torch installed after the wheel), the import builds one
    for this torch into the cache, once, and the cpp backend loads it. Here the installed one is hidden by
    naming a missing one... which also turns the build off; so the builder is called as the import calls
    it, then the import is pointed at its result."""
    env = {**os.environ, "ADDRMSNORM_CACHE_DIR": str(tmp_path)}
    env.pop("TRITON_INTERPRET", None)
    code = ("from addrmsnorm import torch_ext_build, locate\n"
            "print(torch_ext_build.build(locate.find('libaddrmsnorm.so', 'ADDRMSNORM_LIB')))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/")
    assert p.returncode == 0, p.stderr
    built = Path(p.stdout.strip().splitlines()[-1])
    assert built.is_file() and built.parent.parent.parent == tmp_path, built
    assert "building the torch extension for torch" in p.stderr, p.stderr
    info = json.loads((built.parent / "build_info.json").read_text())
    import torch
    assert info["torch"] == torch.__version__
    # a second build is the cache: nothing printed
    p2 = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/")
    assert p2.returncode == 0 and Path(p2.stdout.strip()) == built and "building" not in p2.stderr, p2.stderr
    p3 = subprocess.run([sys.executable, "-c", "import addrmsnorm; from addrmsnorm import ops; "
                         "print(addrmsnorm.backend()); print(ops.extension_status())"], capture_output=True,
                        text=True, env={**env, ops.BACKEND_ENV: "cpp", ops.EXTENSION_ENV: str(built)}, cwd="/")
    assert p3.returncode == 0, p3.stderr
    backend, status = p3.stdout.strip().splitlines()
    assert backend == "cpp" and status.startswith(f"built for torch {torch.__version__}"), p3.stdout


def test_without_a_compiler_the_build_says_why(tmp_path, monkeypatch):
    from addrmsnorm import torch_ext_build
    monkeypatch.setenv("ADDRMSNORM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    lib = c_library.library_path()
    if lib is None:
        with pytest.raises(torch_ext_build.BuildError, match="libaddrmsnorm.so is not installed"):
            torch_ext_build.build(None)
        return
    with pytest.raises(torch_ext_build.BuildError, match="no-such-compiler"):
        torch_ext_build.build(lib, log=lambda msg: None)
    assert not list(tmp_path.rglob(ops.EXTENSION_NAME))  # nothing half-built is left to be loaded
