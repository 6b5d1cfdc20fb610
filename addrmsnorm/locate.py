"""Where the compiled parts of addrmsnorm are: libaddrmsnorm.so (the C++ runtime),
libaddrmsnorm_torch.so (the torch extension, the "cpp" backend) and build_info.json.

In order:
1. the environment variable that names the file (ADDRMSNORM_LIB, ADDRMSNORM_TORCH_EXT);
2. lib/ inside the installed package, where `pip install .` and `pip install -e .` put them (an
   editable install serves the Python files from the source tree and the built ones from
   site-packages: both folders are on the package's __path__);
3. build/ in a source checkout, where `cmake -S . -B build` puts them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def search_dirs() -> list[Path]:
    """The folders searched after the environment variable, in order."""
    import addrmsnorm

    dirs = [Path(p) / "lib" for p in getattr(addrmsnorm, "__path__", [])]
    return dirs + [REPO / "build"]


def find(name: str, env: str | None = None) -> Path | None:
    """The file `name`: $env if set (even if it does not exist: the caller reports it), else the
    first of search_dirs() that has it."""
    value = os.environ.get(env) if env else None
    if value:
        return Path(value)
    for d in search_dirs():
        if (d / name).is_file():
            return d / name
    return None


def build_info(next_to: Path | None) -> dict:
    """build_info.json of the build that produced `next_to` (archs, torch and triton versions), or
    {} where there is none."""
    if next_to is None:
        return {}
    path = Path(next_to).parent / "build_info.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
