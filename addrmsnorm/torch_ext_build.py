"""The torch extension (libaddrmsnorm_torch.so), built for the torch that is here, when the wheel lacks one.

``pip install .`` builds the extension against the torch of the environment it installs into. In a
fresh environment torch arrives after the wheel is built (pip installs the dependencies last), and a
later ``pip install -U torch`` leaves an extension built for another torch. Then the first import
builds it: two small C++ files (``torch_ext/``) against torch's headers and the installed
``libaddrmsnorm.so``, with the C++ compiler torch's own extensions use (``$CXX``, else ``c++``). It
takes under a minute, once: the result is cached per torch version, ABI and runtime build under
``$ADDRMSNORM_CACHE_DIR`` (default ``$XDG_CACHE_HOME/addrmsnorm``, else ``~/.cache/addrmsnorm``).
``ADDRMSNORM_TORCH_EXT_BUILD=0`` turns it off. Where it cannot build (no compiler, no headers), the
backend falls back to Triton, and ``ops.backend_reason()`` and ``python -m addrmsnorm`` say why.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import locate

EXTENSION_NAME = "libaddrmsnorm_torch.so"
SOURCES = ("ops.cpp", "autograd.cpp")
BUILD_ENV = "ADDRMSNORM_TORCH_EXT_BUILD"
CACHE_ENV = "ADDRMSNORM_CACHE_DIR"


class BuildError(Exception):
    """The extension could not be built; the message says why."""


def enabled() -> bool:
    return os.environ.get(BUILD_ENV, "1").strip() not in ("0", "off", "false", "no")


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "addrmsnorm"


def source_dir() -> Path | None:
    """torch_ext/ beside the package (a wheel installs it there) or in the source tree."""
    for d in [Path(p) / "torch_ext" for p in __import__("addrmsnorm").__path__] + [locate.REPO / "torch_ext"]:
        if all((d / s).is_file() for s in SOURCES):
            return d
    return None


def _include_dir(runtime: Path) -> Path | None:
    """include/ with addrmsnorm/addrmsnorm.h: beside the runtime's lib/ (a wheel), or in the source tree."""
    for d in (runtime.parent.parent / "include", locate.REPO / "include"):
        if (d / "addrmsnorm" / "addrmsnorm.h").is_file():
            return d
    return None


def _torch_facts() -> dict:
    import torch

    # What torch.utils.cpp_extension.include_paths() and library_paths() give for a CPU extension,
    # without importing that module (it looks for a CUDA toolkit, and warns where there is none).
    root = Path(torch.__file__).resolve().parent
    with open("/proc/self/maps") as maps:
        libstdcxx = next((line.split()[-1] for line in maps if "libstdc++" in line), None)
    return {"torch": torch.__version__, "abi": int(torch._C._GLIBCXX_USE_CXX11_ABI),
            "includes": [str(root / "include"), str(root / "include" / "torch" / "csrc" / "api" / "include")],
            "libdirs": [str(root / "lib")], "libstdcxx": libstdcxx}


def _key(runtime: Path, src: Path, facts: dict) -> str:
    h = hashlib.sha256()
    st = runtime.stat()
    h.update(json.dumps([facts["torch"], facts["abi"], str(runtime), st.st_size, st.st_mtime_ns, sys.version]).encode())
    for s in SOURCES:
        h.update((src / s).read_bytes())
    return h.hexdigest()[:16]


def cached(runtime: Path | None) -> Path | None:
    """The cached extension for this torch and this runtime, if it was built; builds nothing."""
    src = source_dir()
    if runtime is None or src is None:
        return None
    import torch

    p = cache_root() / "torch_ext" / f"torch-{torch.__version__}-{_key(runtime, src, _torch_facts())}" / EXTENSION_NAME
    return p if p.is_file() else None


def build(runtime: Path | None, log=None) -> Path:
    """The extension for this torch, linked against ``runtime`` (libaddrmsnorm.so): from the cache, else
    built into it (under a lock, so that concurrent imports build it once). Raises BuildError."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    if runtime is None:
        raise BuildError("the C++ runtime libaddrmsnorm.so is not installed")
    src = source_dir()
    if src is None:
        raise BuildError("its sources (torch_ext/ops.cpp, autograd.cpp) are not installed")
    include = _include_dir(runtime)
    if include is None:
        raise BuildError("addrmsnorm/addrmsnorm.h is not installed beside the runtime")
    named = os.environ.get("CXX")
    cxx = shutil.which(named) if named else (shutil.which("c++") or shutil.which("g++"))
    if not cxx:
        raise BuildError(f"no C++ compiler to build it with ({f'$CXX={named} is not found' if named else 'c++ or g++ on PATH, or $CXX'})")
    facts = _torch_facts()
    if not any(Path(d, "torch", "library.h").is_file() for d in facts["includes"]):
        raise BuildError("this torch has no C++ headers (torch/library.h)")
    out_dir = cache_root() / "torch_ext" / f"torch-{facts['torch']}-{_key(runtime, src, facts)}"
    target = out_dir / EXTENSION_NAME
    if target.is_file():
        return target
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        lock = open(out_dir / ".lock", "w")
    except OSError as e:
        raise BuildError(f"cannot write the cache {out_dir} ({e}); set {CACHE_ENV}") from e
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():  # another process built it while this one waited
            return target
        log(f"addrmsnorm: building the torch extension for torch {facts['torch']} (once, under a minute; cached "
            f"in {out_dir})")
        t0 = time.time()
        # C++20: torch 2.14's headers need it (concepts), as torch's own extension builder says.
        flags = ["-O2", "-std=c++20", "-fPIC", "-fvisibility=hidden", f"-D_GLIBCXX_USE_CXX11_ABI={facts['abi']}",
                 f"-I{include}"] + [f"-isystem{d}" for d in facts["includes"]]
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            def compile_one(name):
                obj = Path(tmp) / (name + ".o")
                return obj, subprocess.run([cxx, *flags, "-c", str(src / name), "-o", str(obj)],
                                           capture_output=True, text=True)

            with ThreadPoolExecutor(len(SOURCES)) as ex:
                results = list(ex.map(compile_one, SOURCES))
            for (obj, p), name in zip(results, SOURCES):
                if p.returncode:
                    raise BuildError(f"{cxx} failed on torch_ext/{name}: {p.stderr.strip()[-1500:]}")
            libdirs = [str(runtime.parent), *facts["libdirs"]]
            # torch and this extension must share one libstdc++: link the very one torch loads
            # (CMakeLists.txt does the same).
            link = [cxx, "-shared", *(str(o) for o, _ in results), "-o", str(Path(tmp) / EXTENSION_NAME),
                    *(f"-L{d}" for d in libdirs), "-laddrmsnorm", "-lc10", "-ltorch_cpu",
                    *([facts["libstdcxx"]] if facts["libstdcxx"] else []),
                    *(f"-Wl,-rpath,{d}" for d in libdirs)]
            p = subprocess.run(link, capture_output=True, text=True)
            if p.returncode:
                raise BuildError(f"linking failed: {p.stderr.strip()[-1500:]}")
            (Path(tmp) / "build_info.json").write_text(json.dumps({**locate.build_info(runtime),
                                                                  "torch": facts["torch"]}) + "\n")
            os.replace(Path(tmp) / "build_info.json", out_dir / "build_info.json")
            os.replace(Path(tmp) / EXTENSION_NAME, target)  # last: its presence means the build is whole
        log(f"addrmsnorm: built {target} in {time.time() - t0:.0f} s")
    return target
