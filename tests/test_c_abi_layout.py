"""c_library's ctypes mirrors of the C ABI's structs have the header's layout, field for field.

A C compiler builds a program from include/addrmsnorm/addrmsnorm.h that prints each struct's size and
each field's offset; ctypes must agree, or every call through c_library would pass garbage."""

import shutil
import subprocess
from pathlib import Path

import ctypes
import pytest

from addrmsnorm import c_library

ROOT = Path(__file__).resolve().parents[1]
CC = shutil.which("cc") or shutil.which("gcc")

MIRRORS = {"addrmsnorm_norm_args": c_library.NormArgs, "addrmsnorm_norm_backward_args": c_library.NormBackwardArgs,
           "addrmsnorm_quant": c_library.Quant}


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_ctypes_mirrors_match_the_header(tmp_path):
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "addrmsnorm/addrmsnorm.h"', "int main(void) {"]
    for name, mirror in MIRRORS.items():
        lines.append(f'    printf("{name} size %zu\\n", sizeof({name}));')
        for field, _ in mirror._fields_:
            lines.append(f'    printf("{name} {field} %zu\\n", offsetof({name}, {field}));')
    lines += ["    return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run([CC, "-std=c99", "-I", str(ROOT / "include"), str(src), "-o", str(exe)], check=True)
    got = dict(line.rsplit(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                               check=True).stdout.splitlines())
    for name, mirror in MIRRORS.items():
        assert int(got[f"{name} size"]) == ctypes.sizeof(mirror), name
        for field, _ in mirror._fields_:
            assert int(got[f"{name} {field}"]) == getattr(mirror, field).offset, f"{name}.{field}"
