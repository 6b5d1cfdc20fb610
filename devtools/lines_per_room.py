"""Production lines per room: where a variant's cost lands, at one or two git revisions.

A variant of the norm touches some of these rooms (layers): the kernel, its config tables, the two launchers, the
validators, the torch schemas, autograd, the public functions, the HF patch, the C runtime, the C ABI's headers,
the torch extension. Counting each room's lines before and after a change shows where it wrote and what it
saved. A line counts when it is neither blank nor a comment alone (``#`` in Python, ``//`` in C and C++);
docstrings count, as they are part of what a variant writes.

    python devtools/lines_per_room.py                 # the working tree
    python devtools/lines_per_room.py main HEAD       # two revisions side by side, and the difference

Files outside every room (the bench, the reference, the demo, tests, docs) are not production code here;
tests/test_lines_per_room.py checks that every production file belongs to exactly one room.
"""

from __future__ import annotations

import argparse
import fnmatch
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# name -> glob patterns, relative to the repository root
ROOMS = {
    "kernels (Triton)": ["addrmsnorm/kernels.py"],
    "configs (tables, rules)": ["addrmsnorm/configs.py", "addrmsnorm/register_plan.py"],
    "JIT launcher": ["addrmsnorm/launcher.py"],
    "JIT backend (operators)": ["addrmsnorm/jit_backend.py"],
    "validation (Python)": ["addrmsnorm/validation.py"],
    "torch schemas and fakes": ["addrmsnorm/ops.py"],
    "autograd (Python)": ["addrmsnorm/autograd.py"],
    "public functions and modules": ["addrmsnorm/functional.py", "addrmsnorm/module.py", "addrmsnorm/__init__.py"],
    "HF patch": ["addrmsnorm/hf.py"],
    "C path from Python (ctypes)": ["addrmsnorm/c_library.py"],
    "AOT build and generated C++": ["tools/aot_build.py"],
    "C runtime: kernel table": ["src/kernel_table.h"],
    "C runtime: validation": ["src/validate.cpp", "src/validate.h"],
    "C runtime: launch": ["src/forward.cpp", "src/backward.cpp", "src/driver.*", "src/modules.*", "src/errors.*"],
    "C ABI headers": ["include/addrmsnorm/*"],
    "torch extension": ["torch_ext/ops.cpp", "torch_ext/autograd.cpp"],
}

# Production files that are no room of a variant: packaging, environment and support code.
OUTSIDE = ["addrmsnorm/__main__.py", "addrmsnorm/demo.py", "addrmsnorm/distributed.py", "addrmsnorm/info.py",
           "addrmsnorm/interpreter_compat.py", "addrmsnorm/locate.py", "addrmsnorm/reference.py",
           "addrmsnorm/tolerances.py", "addrmsnorm/torch_ext_build.py", "addrmsnorm/bench/*"]

# Where production files live (the test's scope).
PRODUCTION = ["addrmsnorm/*.py", "addrmsnorm/bench/*.py", "src/*", "include/addrmsnorm/*", "torch_ext/*",
              "tools/aot_build.py"]


def _files(rev: str | None) -> list[str]:
    """The repository's tracked files at rev (None: the working tree's tracked files)."""
    cmd = ["git", "ls-files"] if rev is None else ["git", "ls-tree", "-r", "--name-only", rev]
    return subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()


def _text(path: str, rev: str | None) -> str:
    if rev is None:
        return (ROOT / path).read_text()
    return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout


def code_lines(text: str, path: str) -> int:
    """Lines that are neither blank nor a comment alone."""
    mark = "#" if path.endswith(".py") else "//"
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith(mark))


def room_of(path: str) -> str | None:
    rooms = [name for name, pats in ROOMS.items() if any(fnmatch.fnmatch(path, p) for p in pats)]
    return rooms[0] if len(rooms) == 1 else None


def count(rev: str | None) -> dict[str, int]:
    """Code lines per room at rev."""
    out = dict.fromkeys(ROOMS, 0)
    for path in _files(rev):
        room = room_of(path)
        if room is not None:
            out[room] += code_lines(_text(path, rev), path)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="*", help="zero (the working tree), one or two git revisions")
    args = ap.parse_args(argv)
    if len(args.revs) > 2:
        ap.error("at most two revisions")
    revs = args.revs or [None]
    counts = [count(r) for r in revs]
    names = [r or "working tree" for r in revs]
    head = "| room | " + " | ".join(names) + (" | change |" if len(revs) == 2 else " |")
    print(head)
    print("|---" * (len(revs) + 1 + (len(revs) == 2)) + "|")
    for room in ROOMS:
        cells = [str(c[room]) for c in counts]
        if len(revs) == 2:
            cells.append(f"{counts[1][room] - counts[0][room]:+d}")
        print(f"| {room} | " + " | ".join(cells) + " |")
    totals = [sum(c.values()) for c in counts]
    cells = [str(t) for t in totals] + ([f"{totals[1] - totals[0]:+d}"] if len(revs) == 2 else [])
    print("| **total** | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
