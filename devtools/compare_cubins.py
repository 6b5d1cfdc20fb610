"""Compare the machine code of two AOT builds, kernel by kernel: which kernels a change left alone.

A change to kernels.py (a helper moved, a parameter renamed, a new variant beside the old ones) must leave the
code of every kernel whose math it did not touch as it was. This reads two manifests that
``tools/aot_build.py --manifest`` wrote (each kernel described by what triton.compile was given: its function,
argument types, constexprs, options and arch), pairs the kernels by that description, and compares the
``.text`` sections of their cubins (the instructions; the symbol tables and the parameter metadata around them
may differ without a change in code).

    python tools/aot_build.py --archs 90 --out build-a --manifest a.json   # in the tree before
    python tools/aot_build.py --archs 90 --out build-b --manifest b.json   # in the tree after
    python devtools/compare_cubins.py a.json b.json

Prints a line per kind (identical, different, only before, only after) and the kernels that differ. Exit
status 1 if any paired kernel's code differs (--allow KIND, repeatable, for the kinds a change meant to
change).
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from collections import Counter
from pathlib import Path


def text_sections(cubin: bytes) -> dict[str, bytes]:
    """The ELF64 cubin's sections named .text.*, by name."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not an ELF64 cubin")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)

    def header(i):
        name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize)
        return name, offset, size

    _, str_off, str_size = header(shstrndx)
    names = cubin[str_off:str_off + str_size]
    out = {}
    for i in range(shnum):
        name_off, offset, size = header(i)
        name = names[name_off:names.index(b"\0", name_off)].decode()
        if name.startswith(".text."):
            out[name] = cubin[offset:offset + size]
    return out


def _key(row: dict) -> str:
    """The pairing key: the description without its aligned pointers (a pointer the kernel never reads may join
    the alignment promise, as the rotation's angles did, without a change in any other kernel's code)."""
    return json.dumps({k: v for k, v in row["describe"].items() if k != "aligned"}, sort_keys=True)


def load(path: Path) -> dict[str, dict]:
    rows = json.loads(path.read_text())
    return {_key(r): r for r in rows}


def compare(before: dict[str, dict], after: dict[str, dict]) -> tuple[Counter, list[str]]:
    """Counts by (kind, outcome) and a line for each paired kernel whose code differs."""
    counts, differ = Counter(), []
    for key in before.keys() | after.keys():
        a, b = before.get(key), after.get(key)
        kind = (a or b)["spec"]["kind"]
        if a is None or b is None:
            counts[(kind, "only after" if a is None else "only before")] += 1
            continue
        same = text_sections(Path(a["cubin"]).read_bytes()) == text_sections(Path(b["cubin"]).read_bytes())
        counts[(kind, "identical" if same else "different")] += 1
        if not same:
            spec = a["spec"]
            differ.append(f"{kind}: {spec} sm_{a['describe']['arch']}")
    return counts, sorted(differ)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--allow", action="append", default=[], help="a kind whose kernels may differ")
    args = ap.parse_args(argv)
    counts, differ = compare(load(args.before), load(args.after))
    outcomes = ("identical", "different", "only before", "only after")
    print("| kind | " + " | ".join(outcomes) + " |\n|---|" + "---|" * len(outcomes))
    for kind in sorted({k for k, _ in counts}):
        print(f"| {kind} | " + " | ".join(str(counts[(kind, o)]) for o in outcomes) + " |")
    for line in differ:
        print("differs:", line)
    bad = [d for d in differ if d.split(":")[0] not in args.allow]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
