"""The ahead-of-time kernel list, for every default arch, without compiling it all.

CI builds one arch (scripts/test.sh). These tests check the others: each default arch gets the same
kernel list, within the size budget, and a sample of it (the first and last specialization of each
kind) compiles for that arch with the checks the full build makes (parameter count, no scratch).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import load_devtool

REPO = Path(__file__).resolve().parents[1]
AOT = REPO / "tools" / "aot_build.py"
DEFAULT_ARCHS = (80, 90, 100)  # CMakeLists.txt's ADDRMSNORM_DEFAULT_ARCHS
# The budget per arch: the three default archs build in minutes on two cores, and a wheel carries at
# most 40 MiB of cubins per arch (configs.AOT_MAX_MIB_PER_ARCH, which the build enforces as it embeds
# them). 759 kernels took 29.2 MiB on sm_90 with line info; without it (tools/aot_build.py), the plain
# norm's 322 (its own table), the QK norm's 64 and the plain quantized forward's 148 bring 1285 kernels
# to about 21 MiB on sm_90 and 28 on sm_100; the block-scaled formats' 144 bring 1429, embedded with their
# zero runs packed: 22.2 MiB on sm_90, 27.9 on sm_100. The plain norm's 32-warp loop above H = 32768 brings
# 24 more, the sandwich norm's own table 28 (configs.SANDWICH_TABLE: 6 rows x 6 kernels; its 36 took 0.6
# MiB of sm_90's), the gated norm's 42 (configs.GATED_TABLE: 7 rows x 6 kernels) and the pair's 32
# (configs.PAIR_TABLE: 8 rows x 4), the sandwich norm's quantized outputs 60 (configs.SANDWICH_QUANT: 5 modes
# x 6 rows x 2 dtypes; none on sm_80), the gated norm's 28 (configs.GATED_QUANT: 2 modes x 7 rows x 2
# dtypes), and the QK norm's rotation 100 (tools/aot_build.py's rope_forward, on sm_80 too; misaligned heads
# on one config, configs.ROPE_MISALIGNED_TABLE: 160 kernels took sm_100 to 46.1 MiB, 100 embed 39.0), and its
# backward's 16 (configs.ROPE_BACKWARD_TABLE: 4 rows x 2 dtypes x 2 alignments; sm_90 31.6 MiB, sm_100 39.4):
# 1759 on sm_90 and sm_100, 1387 on sm_80. Gemma 4's v heads (tools/aot_build.py's qkv_forward and rope_v_forward,
# at the vector alone: 32 and 80) bring 1871, 30.0 MiB on sm_90 and 37.8 on sm_100 (at ALIGN 1 too, 1923 took
# sm_100 to 41.1), 1499 on sm_80. The pair's narrower part packed (configs.pair_packs_built: the pack of 4 at the 6
# pair rows of 256 columns and more) brings 24 more, 1895 (three packs at every row, 1935, took sm_100 to 39.8 MiB).
# A new variant must fit.
MAX_KERNELS_PER_ARCH = 1895


def _run(*args):
    env = {k: v for k, v in os.environ.items() if k != "ADDRMSNORM_AOT_CACHE"}  # the cubins land in --out
    return subprocess.run([sys.executable, str(AOT), *args], capture_output=True, text=True, check=True,
                          env=env).stdout


def test_default_archs_match_cmake():
    text = (REPO / "CMakeLists.txt").read_text()
    default = re.search(r'set\(ADDRMSNORM_DEFAULT_ARCHS "([0-9;]+)"\)', text).group(1)
    assert tuple(int(a) for a in default.split(";")) == DEFAULT_ARCHS


def test_every_default_arch_has_the_same_kernel_list_within_budget():
    """The same list for every arch, but that sm_80 has no float8 and no block-scaled format
    (configs.quant_built_for): its quantized kernels are the int8 ones, fewer than half of sm_90's."""
    out = _run("--list", "--archs", ",".join(map(str, DEFAULT_ARCHS)))
    counts = {int(m.group(1)): (int(m.group(2)), sum(int(m.group(i)) for i in range(3, 7)))
              for m in re.finditer(r"sm_(\d+): (\d+) kernels .*?(\d+) quantized forward.*?(\d+) plain quantized"
                                   r".*?(\d+) sandwich quantized.*?(\d+) gated quantized", out)}
    assert sorted(counts) == list(DEFAULT_ARCHS), out
    assert counts[90] == counts[100], out
    total, quant = counts[90]
    total_80, quant_80 = counts[80]
    assert total_80 == total - (quant - quant_80) and 0 < 2 * quant_80 < quant, out
    assert 0 < total <= MAX_KERNELS_PER_ARCH, out


@pytest.mark.parametrize("arch", DEFAULT_ARCHS)
def test_a_sample_of_the_kernel_list_compiles_for(arch, tmp_path):
    out = _run("--sample", "--out", str(tmp_path), "--archs", str(arch), "--jobs", "2")
    assert f"compiled for sm_{arch}" in out, out
    cubins = list((tmp_path / "cache").glob("*.cubin"))
    assert len(cubins) >= 5 and all(c.stat().st_size > 0 for c in cubins)


def test_the_register_caps_spill_nothing(tmp_path):
    """Every forward kernel of a config in configs.MAX_REGISTERS (sm_90, the arch it was measured on)
    compiles within its cap and with no stack: the build refuses a capped kernel that spills, which
    would cost more than the occupancy the cap buys."""
    out = _run("--capped", "--out", str(tmp_path), "--archs", "90", "--jobs", "2")
    specs = int(re.search(r"(\d+) specializations compiled for sm_90", out).group(1))
    assert specs > 0, out
    assert len(list((tmp_path / "cache").glob("*.cubin"))) == specs, out


def test_backward_fit_rule():
    """tools/aot_build.py refuses a backward config whose planned programs per SM do not fit; the rule
    it applies (registers in multiples of 8 per thread, 1 KB of shared memory reserved per block).
    In a subprocess: importing aot_build turns the Triton interpreter off for its process."""
    code = ("import aot_build as a\n"
            "assert a.programs_that_fit(117, 49192, 8, 90) == 2      # registers: 65536 / (256 * 120)\n"
            "assert a.programs_that_fit(64, 98440, 32, 90) == 1      # threads: 2048 / 1024\n"
            "assert a.programs_that_fit(96, 12328, 4, 90) == 5       # 65536 / (128 * 96)\n"
            "assert a.programs_that_fit(60, 100000, 4, 80) == 1      # shared memory: 167936 / 101024\n"
            f"assert set(a.SM_LIMITS) == {set(DEFAULT_ARCHS)!r}\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=AOT.parent)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_the_jit_compiles_the_aot_builds_scalar_types():
    """Every scalar parameter's type, as the JIT binds a call (from kernels.py's annotations) and as the
    AOT build compiles it: the same, so that both compile the same code (Triton otherwise binds an
    int that fits in 32 bits as i32, where the AOT build takes row strides as i64). In a subprocess
    without the Triton interpreter, as the AOT build runs: Triton built under the interpreter and then
    switched off (importing aot_build does that) fails the binder's lazy import of Gluon."""
    code = r'''
import torch
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.runtime.jit import create_function_from_signature
import aot_build as a
backend = make_backend(GPUTarget("cuda", 90, 32))
t = torch.empty(64, dtype=torch.bfloat16)
for spec in (a.Spec("forward", 0, "bf16", "bf16", "bf16", 8),
             a.Spec("quant_forward", 0, "bf16", "bf16", "bf16", 8, quant=2, q="int8"),
             a.Spec("backward", 0, "bf16", "bf16", "any", 8), a.Spec("dweight", 0, "fp32", "fp32", "bf16", 1)):
    k = a.kernel_of(spec.kind)
    want = a.signature(spec)
    args = [t if n.endswith("_ptr") else (1e-6 if want[n] == "fp32" else 16) for n in k.arg_names]
    _, spec_types, _ = create_function_from_signature(k.signature, k.params, backend)(*args)
    got = {p.name: s[0] for p, s in zip(k.params, spec_types)}
    scalars = [n for n, ty in want.items() if ty != "constexpr" and not ty.startswith("*")]
    assert scalars, spec
    for n in scalars:
        assert got[n] == want[n], (spec.kind, n, got[n], want[n])
print("ok")
'''
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=AOT.parent, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_the_build_compiles_the_quantized_kernels_of_every_config_a_quantized_call_reaches_and_no_other():
    """The quantized kernels go to exactly the configs the dispatch rule gives quantized calls (H a
    multiple of 16, 16-bit streams), mode by mode: a quant_only row ahead of a plain row of the same bound
    takes every quantized call of its modes there, so the plain row's config gets no quantized kernels of
    those modes (aot_build._serves_quant).
    The plain 16-bit kernels likewise go to the configs that plain calls reach. In a subprocess:
    importing aot_build turns the Triton interpreter off for its process."""
    code = r'''
import aot_build as a
C = a.configs
cfgs = a.forward_configs()
specs = a.all_specs(cfgs, a.backward_configs())
for kind, plain in (("quant_forward", False), ("plain_quant_forward", True)):
    quant = {(s.config, s.quant) for s in specs if s.kind == kind}
    quant_reached = {(cfgs.index(C.select_forward_config(H, 2, 2, quant=m, plain=plain)), m)
                     for H in range(16, 262145, 16) for m in C.QUANT_MODES}
    assert quant == quant_reached, (kind, sorted(quant), sorted(quant_reached))
plain = {s.config for s in specs if s.kind == "forward" and s.x == s.residual and s.x in ("fp16", "bf16")}
plain_reached = {cfgs.index(C.select_forward_config(H, 2, 2, vector_typed=vt)) for H in range(1, 262145)
                 for vt in (False, True)}
assert plain == plain_reached, (sorted(plain), sorted(plain_reached))
# The plain norm's 16-bit kernels: exactly the configs its rule reaches (configs.PLAIN_TABLE).
norm = {s.config for s in specs if s.kind == "plain_forward" and s.x in ("fp16", "bf16")}
norm_reached = {cfgs.index(C.select_plain_config(H, 2, vt)) for H in range(1, 262145) for vt in (False, True)}
assert norm == norm_reached, (sorted(norm), sorted(norm_reached))
assert any(r.quant_only and r.h_max and r.h_max < C.QUANT_SINGLE_PASS_MAX_H for r in C.FORWARD_TABLE)  # the case it covers
assert any(r.quant_only and set(r.quant_modes) != set(C.QUANT_MODES) for r in C.FORWARD_TABLE)  # and mode by mode
print("ok")
'''
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=AOT.parent)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]



# pack_zero_runs and unpack_zero_runs, run in a subprocess: importing tools/aot_build.py sets the build's
# environment (it drops TRITON_INTERPRET) and must not touch this process's.
ZERO_RUNS_CHECK = """
import random, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import aot_build as aot
cases = [b"", b"\\x00", b"\\x01", b"\\x00" * 256, b"\\x00" * 257, b"\\x00" * 600 + b"\\x7fELF",
         b"\\x7fELF" + b"\\x00" * 3 + b"\\x05" + b"\\x00" * 512, bytes(range(256)) * 3]
rng = random.Random(0)
for _ in range(50):  # random mixes of zero runs and other bytes
    cases.append(b"".join(b"\\x00" * rng.choice([1, 2, 7, 255, 256, 300]) if rng.random() < 0.5
                          else bytes(rng.randrange(1, 256) for _ in range(rng.randrange(1, 9)))
                          for _ in range(rng.randrange(1, 40))))
cubins = [p.read_bytes() for p in Path(sys.argv[2]).glob("*.cubin")] if len(sys.argv) > 2 else []
for data in cases + cubins:
    assert aot.unpack_zero_runs(aot.pack_zero_runs(data)) == data
assert len(aot.pack_zero_runs(b"\\x00" * 512)) == 4 and len(aot.pack_zero_runs(b"\\x00")) == 2
total = sum(len(c) for c in cubins)
packed = sum(len(aot.pack_zero_runs(c)) for c in cubins)
assert all(c[:4] == b"\\x7fELF" for c in cubins)
print(len(cubins), total, packed)
"""


def test_zero_run_packing_round_trips():
    """The blob's packing (aot_build.pack_zero_runs; modules.cpp unpacks it the same way): runs of 1 to
    well past 256 zeros, at the ends and between bytes, come back exactly, and a run costs 2 bytes per 256."""
    p = subprocess.run([sys.executable, "-c", ZERO_RUNS_CHECK, str(AOT.parent)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]


def test_compiled_cubins_pack_smaller_and_round_trip(tmp_path):
    out = _run("--sample", "--out", str(tmp_path), "--archs", "90", "--jobs", "2")
    assert "compiled for sm_90" in out, out
    p = subprocess.run([sys.executable, "-c", ZERO_RUNS_CHECK, str(AOT.parent), str(tmp_path / "cache")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    n, total, packed = map(int, p.stdout.split())
    assert n >= 5 and 0 < packed < 0.95 * total, p.stdout


def _elf(sections: dict) -> bytes:
    """A minimal ELF64 image with the given sections (name -> bytes), as devtools/compare_cubins.py reads one."""
    import struct
    names = b"\0" + b"".join(n.encode() + b"\0" for n in sections) + b".shstrtab\0"
    body, offsets, name_offs, pos = b"", [], [], 1
    for n, data in sections.items():
        offsets.append(64 + len(body))
        body += data
        name_offs.append(pos)
        pos += len(n) + 1
    str_off = 64 + len(body)
    body += names
    shoff = 64 + len(body)
    headers = struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    for (n, data), off, no in zip(sections.items(), offsets, name_offs):
        headers += struct.pack("<IIQQQQIIQQ", no, 1, 0, 0, off, len(data), 0, 0, 1, 0)
    headers += struct.pack("<IIQQQQIIQQ", pos, 3, 0, 0, str_off, len(names), 0, 0, 1, 0)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(sections) + 2,
                                 len(sections) + 1)
    return header + body + headers


def test_compare_cubins_reads_the_code_sections_and_pairs_by_description(tmp_path):
    """devtools/compare_cubins.py: the .text sections decide (not the other sections), kernels pair by their
    description without its aligned pointers, and a difference is reported by kind."""
    cc = load_devtool("compare_cubins")
    a = _elf({".text.k": b"\x01\x02", ".nv.info.k": b"a"})
    assert cc.text_sections(a) == {".text.k": b"\x01\x02"}
    paths = {}
    for name, data in (("a", a), ("b", _elf({".text.k": b"\x01\x02", ".nv.info.k": b"b"})),
                       ("c", _elf({".text.k": b"\x01\x03"}))):
        paths[name] = tmp_path / f"{name}.cubin"
        paths[name].write_bytes(data)

    def row(kind, cubin, aligned):
        return {"spec": {"kind": kind}, "describe": {"kernel": kind, "arch": 90, "aligned": aligned},
                "cubin": str(paths[cubin])}
    before = {cc._key(r): r for r in (row("same", "a", ["x"]), row("changed", "a", []))}
    after = {cc._key(r): r for r in (row("same", "b", ["x", "cos"]), row("changed", "c", []))}
    counts, differ = cc.compare(before, after)
    assert counts[("same", "identical")] == 1 and counts[("changed", "different")] == 1
    assert len(differ) == 1 and differ[0].startswith("changed:")
