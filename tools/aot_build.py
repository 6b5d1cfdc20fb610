#!/usr/bin/env python3
"""Ahead-of-time build of the addrmsnorm kernels for the C++ runtime.

Reads the one kernel source (``addrmsnorm/kernels.py``) and the one config table
(``addrmsnorm/configs.py``), compiles every specialization for every requested CUDA arch with
``triton.compile`` (no GPU needed: Triton's bundled ptxas does the work), and writes:

    <out>/addrmsnorm_cubins.bin   every cubin, zero runs packed (pack_zero_runs), concatenated
    <out>/addrmsnorm_cubins.S     embeds the .bin into the library with .incbin
    <out>/kernel_table.cpp        metadata per kernel and arch, the kernel keys, and the dispatch rule as C++ code
    <out>/kernel_keys.h           the kernel kinds and the packing of a kernel key
    <out>/kernel_params.h         each kernel's parameters as a C struct
    <out>/dispatch_cases.inc      H -> config cases from the Python rule, for the C++ tests
    <out>/rule_cases.inc          the alignment classes and the backward's grid and workspace, likewise
    <out>/tolerances.inc          the reference's tolerance table, for the C++ tests
    <out>/cache/                  one cubin + metadata per specialization, keyed by a hash of
                                  everything that determines it: unchanged kernels are not rebuilt

The cubins are compiled with the one Triton release the kernel table was tuned and verified with
(configs.AOT_TRITON_VERSION, pinned in pyproject.toml's build requirements); another refuses to build.

Usage: aot_build.py --out DIR --archs "80;90;100" [--jobs N]
       aot_build.py --list --archs "80;90;100"          the kernels per arch, compiling nothing
       aot_build.py --sample --out DIR --archs "80;100" compile a sample of each arch's list (CI checks
                                                        archs it does not build)
       aot_build.py --jit-check --out DIR --archs "80;90;100" under any Triton: what the JIT backend
                                                        compiles, and the register plans it degrades
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent / "addrmsnorm"
# Compile for real even if the caller's environment asks Triton for its CPU interpreter.
os.environ.pop("TRITON_INTERPRET", None)
# No line info in the embedded cubins: it is more than half of each (the PTX text and line tables that
# profilers map SASS back to Python with). The build sets this before Triton is imported, workers
# included; --jit-check keeps it on, as the JIT compiles (main()).
LINE_INFO_ENV = "TRITON_DISABLE_LINE_INFO"


def _load(name):
    """Load one torch-free module of the package by path: the build needs triton, not torch."""
    import importlib.util

    mod_name = f"_addrmsnorm_aot_{name}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, PACKAGE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod
    spec.loader.exec_module(mod)
    return mod


configs = _load("configs")
register_plan = _load("register_plan")

# "w16": a 16-bit weight's int16 bits (configs.WEIGHT_W16); "any": the backward's untyped weight.
TRITON_TYPES = {"fp16": "fp16", "bf16": "bf16", "fp32": "fp32", configs.WEIGHT_W16: "i16", "any": "u8",
                "int8": "i8", "fp8e4m3": "fp8e4nv", "fp4e2m1": "u8"}
ITEMSIZE = {"fp16": 2, "bf16": 2, "fp32": 4}
# Kernel arguments in order. Pointers take the dtype of their tensor; sizes are 32-bit (the grid
# and H fit), strides 64-bit (a row stride may not).

@dataclass(frozen=True)
class Kind:
    """A Spec kind: one kernel compiled with some of its constexpr flags on (the optional inputs its calls give),
    its name in the host tests' enum (variants.inc), and whether its register cap has a plan of its own
    (configs.max_registers; else its kernel's)."""
    kernel: str   # "forward" (rmsnorm_fwd), "quant_forward" (rmsnorm_quant_fwd), "backward" (rmsnorm_bwd), "dweight"
    flags: tuple  # the flags on
    enum: str
    own_plan: bool = False


# Every kind, in the order of the host tests' KernelKind. The sandwich and gated norms' quantized kernels hold a
# second row (x's beside h's, z's beside x's): the quantized forward's register plan is not theirs.
KINDS = {
    "forward": Kind("forward", ("RESIDUAL",), "Forward"),
    "backward": Kind("backward", (), "Backward"),
    "dweight": Kind("dweight", (), "Dweight"),
    "quant_forward": Kind("quant_forward", ("RESIDUAL",), "QuantForward"),
    "plain_forward": Kind("forward", ("GROUPED",), "PlainForward"),
    "plain_quant_forward": Kind("quant_forward", (), "PlainQuantForward"),
    "qk_forward": Kind("forward", ("GROUPED", "SPLIT"), "QkForward"),
    "sandwich_forward": Kind("forward", ("RESIDUAL", "SANDWICH"), "SandwichForward"),
    "gated_forward": Kind("forward", ("GROUPED", "GATED"), "GatedForward"),
    "pair_forward": Kind("forward", ("PAIR",), "PairForward"),
    "sandwich_quant_forward": Kind("quant_forward", ("RESIDUAL", "SANDWICH"), "SandwichQuantForward", own_plan=True),
    "gated_quant_forward": Kind("quant_forward", ("GATED",), "GatedQuantForward", own_plan=True),
    "rope_forward": Kind("forward", ("GROUPED", "SPLIT", "ROPE"), "RopeForward"),
    "rope_backward": Kind("backward", ("ROPE",), "RopeBackward"),
    "qkv_forward": Kind("forward", ("GROUPED", "SPLIT", "V_HEADS"), "QkvForward"),
    "rope_v_forward": Kind("forward", ("GROUPED", "SPLIT", "ROPE", "V_HEADS"), "RopeVForward"),
}
# The flags each kernel is always given (False where off), in its order; a kind's other flags (the forward's
# rotation) are given only where on.
KERNEL_FLAGS = {"forward": ("RESIDUAL", "GROUPED", "SPLIT", "SANDWICH", "GATED", "PAIR"),
                "quant_forward": ("RESIDUAL", "SANDWICH", "GATED"), "backward": ("ROPE",), "dweight": ()}


@dataclass(frozen=True)
class Spec:
    kind: str         # "forward" and "quant_forward" (rmsnorm_fwd, rmsnorm_quant_fwd), "backward" (rmsnorm_bwd),
                      # "dweight" (rmsnorm_dweight), and the plain norm's "plain_forward" and "plain_quant_forward"
                      # (the two forwards with RESIDUAL off, plain_forward GROUPED), "qk_forward" (SPLIT too), and
                      # "sandwich_forward" (rmsnorm_fwd with SANDWICH), "gated_forward" (the plain forward
                      # GATED), "pair_forward" (the plain forward PAIR, rows of one stride), "rope_forward"
                      # (the QK norm's kernel with ROPE: the rotation of each normalized head),
                      # "rope_backward" (rmsnorm_bwd with ROPE: the plain norm's backward of rotated heads), and
                      # "qkv_forward" and "rope_v_forward" (the QK norm's two with V_HEADS: Gemma 4's v heads)
    config: int       # index into the deduplicated config list of its kind (0 for "dweight")
    x: str
    residual: str
    weight: str       # forward: the weight pointer's type (configs.forward_weight_arg); backward: "any";
                      # dweight: its dtype
    align: int        # the ALIGN constexpr; > 1 also promises 16-byte aligned pointers
    numerics: int = 0  # HF_NUMERICS (forward): configs.CONTRACT, HF_LLAMA or HF_GEMMA
    quant: int = 0     # QUANT (quant_forward): one of configs.QUANT_MODES
    q: str = ""        # quant_forward: the quantized output's dtype, one of configs.QUANT_DTYPES
    rope: int = 0      # rope_forward: 1 + the index of its (angle dtype, positions) in configs.ROPE_VARIANTS
    pack: int = 0      # pair_forward: the index of its PAIR_PACK in configs.PAIR_PACKS

    @property
    def base(self) -> str:
        """The kernel it compiles (KINDS): "forward", "quant_forward", "backward" or "dweight"."""
        return KINDS[self.kind].kernel

    @property
    def align_class(self) -> int:
        """Index of ALIGN among the built classes: log2(ALIGN) for the forward; 0/1 for the backward;
        0 for the quantized forward (built for the vector alone)."""
        if self.base == "backward":
            return int(self.align > 1)
        if self.base == "quant_forward":
            return 0
        return self.align.bit_length() - 1


def unique_configs(table=None):
    out = []
    for rule in (table or configs.FORWARD_TABLE):
        if rule.config not in out:
            out.append(rule.config)
    return out


def _odd_h_only(cfg, act_bytes: int) -> bool:
    """Whether only odd-H rules serve a forward config for a stream width (its rows then always run
    ALIGN 1, and never reach the quantized forward, whose rows are multiples of 16)."""
    rules = [r for r in configs.FORWARD_TABLE if r.config == cfg and r.act_bytes == act_bytes]
    return bool(rules) and all(r.odd_h_only for r in rules)


def _vector_typed_only(cfg, act_bytes: int) -> bool:
    """Whether only vector_typed_only rules serve a forward config for a stream width (its calls then
    always run the full vector with the weight of x's dtype and the contract's numerics)."""
    rules = [r for r in configs.FORWARD_TABLE if r.config == cfg and r.act_bytes == act_bytes and not r.quant_only]
    return bool(rules) and all(r.vector_typed_only for r in rules)


def _plain_widths(cfg) -> list:
    """The stream widths whose plain-forward rules use cfg (quant_only rules serve no plain call)."""
    return sorted({r.act_bytes for r in configs.FORWARD_TABLE if r.config == cfg and not r.quant_only})


def _kinds(x: str, res: str) -> tuple:
    """The forward kinds built at a fused config for a dtype pair: the plain norm of fp32 x there too
    (its rows are the fused fp32 stream's; 16-bit x has configs.PLAIN_TABLE)."""
    return ("forward", "plain_forward") if x == res == "fp32" else ("forward",)


def _serves_quant(cfg, mode: int, plain: bool) -> bool:
    """Whether some quantized call of mode (configs.QUANT_MODES), fused or plain, reaches cfg: a 16-bit
    rule that is not for odd H alone (the quantized forward's rows are multiples of 16) nor for other
    modes or the other kind of call alone, and not shadowed by the rules before it (a quant_only row
    ahead of a plain row of the same bound takes every quantized call of its modes there)."""
    covered = 0  # quantized calls with H <= covered have found their rule
    for r in configs.FORWARD_TABLE:
        if r.act_bytes != 2 or r.odd_h_only or not r.takes(mode, False, plain):  # rows these calls never take
            continue
        if r.config == cfg and (r.h_max is None or r.h_max > covered):
            return True
        if r.h_max is None:
            return False
        covered = max(covered, r.h_max)
    return False


def all_specs(cfgs, bcfgs):
    """Every kernel to compile per arch: only combinations some call can reach (the C++ host test
    checks that every reachable call finds its kernel)."""
    specs = []
    for ci, cfg in enumerate(bcfgs):  # the backward reads the weight through its runtime dtype
        widths = sorted({r.act_bytes for r in configs.BACKWARD_TABLE if r.config == cfg})
        for act_bytes in widths:
            for x, res in configs.ACTIVATION_PAIRS[act_bytes]:
                v = configs.vector_elems(ITEMSIZE[x], ITEMSIZE[res])
                for align in (1, v):
                    specs.append(Spec("backward", ci, x, res, "any", align))
    specs += _rope_backward_specs(bcfgs)
    for w in configs.WEIGHT_DTYPES:
        specs.append(Spec("dweight", 0, "fp32", "fp32", w, 1))
    for ci, cfg in enumerate(cfgs):
        for act_bytes in _plain_widths(cfg):
            odd_only = _odd_h_only(cfg, act_bytes)  # odd rows run ALIGN 1 only
            if _vector_typed_only(cfg, act_bytes):  # one kernel per dtype pair: the full vector, typed weight
                for x, res in configs.ACTIVATION_PAIRS[act_bytes]:
                    v = configs.vector_elems(ITEMSIZE[x], ITEMSIZE[res])
                    specs += [Spec(k, ci, x, res, x, v) for k in _kinds(x, res)]
                continue
            for x, res in configs.ACTIVATION_PAIRS[act_bytes]:
                kinds = _kinds(x, res)
                for w in configs.forward_weight_args(x):
                    w16 = w == configs.WEIGHT_W16
                    for align in configs.align_classes(ITEMSIZE[x], ITEMSIZE[res], ends_only=w16):
                        if align == 1 or not odd_only:
                            specs += [Spec(k, ci, x, res, w, align) for k in kinds]
                for mode, pairs in ((configs.HF_LLAMA, configs.HF_ACTIVATION_PAIRS),
                                    (configs.HF_GEMMA, configs.HF_GEMMA_ACTIVATION_PAIRS)):
                    if (x, res) in pairs:  # HF: the weight of x's dtype only
                        for align in configs.align_classes(ITEMSIZE[x], ITEMSIZE[res], ends_only=True):
                            if align == 1 or not odd_only:
                                specs += [Spec(k, ci, x, res, x, align, numerics=mode) for k in kinds]
    for ci, cfg in enumerate(cfgs):  # the plain norm of 16-bit x: configs.PLAIN_TABLE's rows
        rules = [r for r in configs.PLAIN_TABLE if r.config == cfg]
        if not rules:
            continue
        odd_only = all(r.odd_h_only for r in rules)
        if all(r.vector_typed_only for r in rules):
            specs += [Spec("plain_forward", ci, x, x, x, configs.vector_elems(2, 2)) for x in ("fp16", "bf16")]
            continue
        for x in ("fp16", "bf16"):
            for w in configs.forward_weight_args(x):
                for align in configs.align_classes(2, 2, ends_only=w == configs.WEIGHT_W16):
                    if align == 1 or not odd_only:
                        specs.append(Spec("plain_forward", ci, x, x, w, align))
            for mode in (configs.HF_LLAMA, configs.HF_GEMMA):
                for align in configs.align_classes(2, 2, ends_only=True):
                    if align == 1 or not odd_only:
                        specs.append(Spec("plain_forward", ci, x, x, x, align, numerics=mode))
    for ci, cfg in enumerate(cfgs):  # the QK norm (SPLIT): PLAIN_TABLE's single passes up to QK_MAX_HEAD_DIM
        if not any(r.config == cfg and not r.odd_h_only and not r.vector_typed_only and r.h_max is not None
                   and r.h_max <= configs.QK_MAX_HEAD_DIM for r in configs.PLAIN_TABLE):
            continue
        for x in ("fp16", "bf16"):
            for align in configs.align_classes(2, 2, ends_only=True):
                for kind in _qk_kinds(align):
                    specs += [Spec(kind, ci, x, x, w, align) for w in (x, "fp32")]
                    specs += [Spec(kind, ci, x, x, x, align, numerics=m) for m in (configs.HF_LLAMA, configs.HF_GEMMA)]
    specs += _rope_specs(cfgs)
    specs += _sandwich_specs(cfgs) + _gated_specs(cfgs) + _pair_specs(cfgs) + _sandwich_quant_specs(cfgs)
    specs += _gated_quant_specs(cfgs)
    for ci, cfg in enumerate(cfgs):  # quantized outputs: 16-bit streams, aligned rows (never odd H)
        for x, res in configs.QUANT_ACTIVATION_PAIRS:
            for mode in configs.QUANT_MODES:
                kinds = [k for k, plain in (("quant_forward", False), ("plain_quant_forward", True))
                         if _serves_quant(cfg, mode, plain)]
                for q in configs.quant_dtypes_of(mode):
                    specs += [Spec(k, ci, x, res, x, configs.vector_elems(2, 2), quant=mode, q=q) for k in kinds]
    return specs


def _qk_kinds(align: int, rope: bool = False) -> tuple:
    """The QK norm's kinds at an alignment: with Gemma 4's v heads (V_HEADS) at the vector alone, where every model's
    projection puts its heads. At ALIGN 1 too they took sm_100 to 41.1 MiB, over configs.AOT_MAX_MIB_PER_ARCH (37.8
    without them; the v programs' scalar code nearly doubles an ALIGN 1 QK kernel); the C runtime runs such a call
    as two launches, q's and k's heads and then v's (forward.cpp's qk_then_v), with the bits of the one."""
    base = ("rope_forward", "rope_v_forward") if rope else ("qk_forward", "qkv_forward")
    return base if align > 1 else base[:1]


def _rope_backward_specs(bcfgs) -> list:
    """The rotation's backward (configs.select_rope_backward_config): the backward's configs for heads up to
    QK_MAX_HEAD_DIM, 16-bit heads, ALIGN 1 and the vector."""
    out = []
    for cfg in configs.rope_backward_configs():
        for x in configs.ROPE_DTYPES:
            out += [Spec("rope_backward", bcfgs.index(cfg), x, x, "any", align) for align in (1, configs.vector_elems(2, 2))]
    return out


def _rope_specs(cfgs) -> list:
    """The rotation's kernels (configs.ROPE_VARIANTS): the QK norm's configs and alignments, 16-bit heads, each
    (angle dtype, positions) under the contract with weights of the heads' dtype, and fp32 weights too with cos
    and sin (training under autocast); HF's two forms with the weight, cos and sin of the heads' dtype; on the
    configs configs.select_rope_config routes to: ROPE_TABLE's at the vector, ROPE_MISALIGNED_TABLE's at ALIGN 1."""
    aligns = configs.align_classes(2, 2, ends_only=True)
    # the configs configs.select_rope_config routes each alignment to, over every head_dim it takes
    served = {a: {cfgs.index(configs.select_rope_config(H, a > 1)) for H in range(1, configs.QK_MAX_HEAD_DIM + 1)}
              for a in aligns}
    specs = []
    for ci in sorted(set().union(*served.values())):
        for x in configs.ROPE_DTYPES:
            for align in aligns:
                if ci not in served[align]:
                    continue
                for vi, (angles, pos) in enumerate(configs.ROPE_VARIANTS):
                    # fp32 weights: training, HF's cos and sin (configs.ROPE_FP32_WEIGHTS_WITH_POSITIONS)
                    weights = (x, "fp32") if pos is None or configs.ROPE_FP32_WEIGHTS_WITH_POSITIONS else (x,)
                    for kind in _qk_kinds(align, rope=True):
                        specs += [Spec(kind, ci, x, x, w, align, rope=vi + 1) for w in weights]
                        if angles == "x" and pos is None:
                            specs += [Spec(kind, ci, x, x, x, align, numerics=m, rope=vi + 1)
                                      for m in (configs.HF_LLAMA, configs.HF_GEMMA)]
    return specs


def _sandwich_specs(cfgs) -> list:
    """The sandwich norm's kernels: configs.SANDWICH_TABLE's rows, for 16-bit x with residual and weights
    of its dtype, vector-aligned rows, the contract and HF's two forms."""
    v = configs.vector_elems(2, 2)
    return [Spec("sandwich_forward", cfgs.index(cfg), x, x, x, v, numerics=mode)
            for cfg in unique_configs(configs.SANDWICH_TABLE) for x in configs.SANDWICH_DTYPES
            for mode in (configs.CONTRACT, configs.HF_LLAMA, configs.HF_GEMMA)]


def _gated_specs(cfgs) -> list:
    """The gated norm's kernels: configs.GATED_TABLE's rows of each element size, for x and z of each dtype
    with weights of theirs, vector-aligned rows, the contract and HF's form (HF's gated norms have no offset
    weight)."""
    return [Spec("gated_forward", cfgs.index(r.config), x, x, x, configs.vector_elems(ITEMSIZE[x], ITEMSIZE[x]),
                 numerics=mode)
            for x in configs.GATED_DTYPES
            for r in configs.GATED_TABLE if r.act_bytes == ITEMSIZE[x]
            for mode in (configs.CONTRACT, configs.HF_LLAMA)]


def _sandwich_quant_specs(cfgs) -> list:
    """The sandwich norm's quantized outputs: configs.SANDWICH_TABLE's rows, 16-bit x with residual and weights
    of its dtype, configs.SANDWICH_QUANT's modes."""
    return [Spec("sandwich_quant_forward", cfgs.index(cfg), x, x, x, configs.vector_elems(2, 2), quant=mode, q=q)
            for cfg in unique_configs(configs.SANDWICH_TABLE) for x in configs.SANDWICH_DTYPES
            for mode, q in configs.SANDWICH_QUANT]


def _gated_quant_specs(cfgs) -> list:
    """The gated norm's quantized outputs: configs.GATED_TABLE's 16-bit rows, x and z of one 16-bit dtype with
    weights of theirs, configs.GATED_QUANT's modes."""
    return [Spec("gated_quant_forward", cfgs.index(r.config), x, x, x, configs.vector_elems(2, 2), quant=mode, q=q)
            for r in configs.GATED_TABLE if r.act_bytes == 2 for x in ("fp16", "bf16")
            for mode, q in configs.GATED_QUANT]


def _pair_specs(cfgs) -> list:
    """The pair's kernels: configs.PAIR_TABLE's rows, for 16-bit x with weights of its dtype, vector-aligned
    rows, the contract and HF's Llama form."""
    v = configs.vector_elems(2, 2)
    return [Spec("pair_forward", cfgs.index(cfg), x, x, x, v, numerics=mode, pack=configs.PAIR_PACKS.index(p))
            for cfg in unique_configs(configs.PAIR_TABLE) for x in configs.PAIR_DTYPES
            for mode in (configs.CONTRACT, configs.HF_LLAMA) for p in configs.pair_packs_built(cfg.block_h)]


def forward_configs() -> list:
    """The forward kernels' configs, deduplicated, in the order of kConfigs: every table's rows."""
    return unique_configs(configs.FORWARD_TABLE + configs.PLAIN_TABLE + configs.SANDWICH_TABLE + configs.GATED_TABLE
                          + configs.PAIR_TABLE + configs.ROPE_TABLE + configs.ROPE_MISALIGNED_TABLE)


def backward_configs() -> list:
    """The backward kernels' configs, deduplicated, in the order of kBackwardConfigs: the backward's table,
    then the rotation's."""
    return unique_configs(configs.BACKWARD_TABLE + configs.ROPE_BACKWARD_TABLE)


BACKWARD_ALIGNED_POINTER_ARGS = ("dy_ptr", "dres_out_ptr", "h_ptr", "weight_ptr", "dres_ptr", "dx_ptr", "cos_ptr",
                                 "sin_ptr")


def kernel_of(kind: str):
    """The @triton.jit kernel of a Spec kind."""
    k = _load("kernels")
    return {"forward": k.rmsnorm_fwd, "quant_forward": k.rmsnorm_quant_fwd, "backward": k.rmsnorm_bwd,
            "dweight": k.rmsnorm_dweight}[KINDS[kind].kernel]


def _pointer_types(spec: Spec) -> dict:
    ptr = lambda d: "*" + TRITON_TYPES[d]  # noqa: E731
    if spec.base == "backward":
        return {"dy_ptr": ptr(spec.x), "dres_out_ptr": ptr(spec.residual), "h_ptr": ptr(spec.residual),
                "rstd_ptr": "*fp32", "weight_ptr": ptr(spec.weight), "dres_ptr": ptr(spec.residual),
                "dx_ptr": ptr(spec.x), "partial_ptr": "*fp32", "mean_ptr": "*fp32", "cos_ptr": "*fp32",
                "sin_ptr": "*fp32"}
    if spec.kind == "dweight":
        return {"partial_ptr": "*fp32", "dweight_ptr": ptr(spec.weight)}
    if spec.base == "quant_forward":
        return {"x_ptr": ptr(spec.x), "residual_ptr": ptr(spec.residual), "weight_ptr": ptr(spec.weight),
                "q_ptr": ptr(spec.q), "residual_out_ptr": ptr(spec.residual), "y_ptr": ptr(spec.x),
                "scale_ptr": "*fp32", "scales_ptr": "*u8" if spec.quant in configs.BLOCK_QUANT_MODES else "*fp32",
                "scale_ub_ptr": "*fp32", "post_weight_ptr": ptr(spec.weight), "z_ptr": ptr(spec.x)}
    angles, pos = configs.ROPE_VARIANTS[spec.rope - 1] if spec.rope else ("x", None)
    angle = ptr(spec.x if angles == "x" else angles)
    return {"x_ptr": ptr(spec.x), "residual_ptr": ptr(spec.residual), "weight_ptr": ptr(spec.weight),
            "out_ptr": ptr(spec.x), "residual_out_ptr": ptr(spec.residual), "rstd_ptr": "*fp32",
            "weight2_ptr": ptr(spec.weight), "post_weight_ptr": ptr(spec.weight), "z_ptr": ptr(spec.x),
            "b_ptr": ptr(spec.x), "b_weight_ptr": ptr(spec.weight), "b_out_ptr": ptr(spec.x),
            "cos_ptr": angle, "sin_ptr": angle, "pos_ptr": {None: "*fp32", "int32": "*i32", "int64": "*i64"}[pos]}


def signature(spec: Spec) -> dict:
    """The kernel's signature for a spec, in its parameters' order: the spec's pointer types, the
    scalars' own annotations in kernels.py (n_rows: tl.int32, strides tl.int64, ...: the types the
    JIT compiles too), and the constexprs."""
    ptrs = _pointer_types(spec)
    sig = {}
    for p in kernel_of(spec.kind).params:
        if p.is_constexpr:
            sig[p.name] = "constexpr"
        elif p.name in ptrs:
            sig[p.name] = ptrs.pop(p.name)
        elif p.annotation:
            sig[p.name] = p.annotation
        else:
            raise RuntimeError(f"{spec.kind}: parameter {p.name} has no type annotation in kernels.py")
    if ptrs:
        raise RuntimeError(f"{spec.kind}: no parameters {sorted(ptrs)} in kernels.py")
    return sig


def cache_key(spec: Spec, cfg, arch: int, kernel_key: str, triton_version: str) -> str:
    maxnreg = spec_cap(spec, cfg, arch) if cfg else None
    blob = json.dumps({"spec": asdict(spec), "cfg": asdict(cfg) if cfg else None, "arch": arch, "kernel": kernel_key,
                       "triton": triton_version, "tool": TOOL_VERSION, "maxnreg": maxnreg,
                       "line_info": os.environ.get(LINE_INFO_ENV) != "1"}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


TOOL_VERSION = 9


def spec_cap(spec: Spec, cfg, arch: int) -> int | None:
    """The register cap a spec compiles with (configs.max_registers), as the JIT launcher has it: its kind's plan
    or its kernel's (KINDS)."""
    if spec.kind == "dweight":
        return None
    return configs.max_registers(spec.kind if KINDS[spec.kind].own_plan else spec.base, cfg, arch)


def compile_inputs(spec: Spec, cfg, arch: int):
    """What triton.compile is given for one specialization on one arch: the kernel, its signature, the pointer
    arguments' alignment attributes, the constexprs and the options (num_warps, fp fusion, the register cap).
    compile_one compiles them; --manifest describes each cubin by them (devtools/compare_cubins.py)."""
    kernel = kernel_of(spec.kind)
    sig = signature(spec)
    attrs, align = {}, spec.align
    if spec.kind == "dweight":
        constexprs = {"BLOCK_P": configs.DWEIGHT_BLOCK_P, "BLOCK_C": configs.DWEIGHT_BLOCK_C}
        num_warps = configs.DWEIGHT_WARPS
    else:
        aligned_args = {"backward": BACKWARD_ALIGNED_POINTER_ARGS, "forward": configs.ALIGNED_POINTER_ARGS,
                        "quant_forward": configs.QUANT_ALIGNED_POINTER_ARGS}[spec.base]
        if spec.align > 1:  # the same promise the JIT launcher makes with configs.align_elems
            attrs = {(kernel.arg_names.index(a),): [["tt.divisibility", configs.ALIGNMENT_BYTES]]
                     for a in aligned_args}
        if spec.base == "backward":
            constexprs = {"BLOCK_H": cfg.block_h, "ROWS_PER_PROGRAM": cfg.rows_per_program, "LOOPED": cfg.looped,
                          "SEPARATE_DX": spec.x != spec.residual, "ALIGN": align, "STAGES": cfg.stages}
        elif spec.base == "quant_forward":
            constexprs = {"BLOCK_H": cfg.block_h, "ROWS_PER_PROGRAM": cfg.rows_per_program, "LOOPED": cfg.looped,
                          "ALIGN": align, "QUANT": spec.quant, "PDL": configs.pdl_compiled(arch),
                          "WEIGHT_FIRST": cfg.weight_first, "EVICT_LAST": cfg.evict_last, "KEEP_H": cfg.keep_h}
        else:
            constexprs = {"BLOCK_H": cfg.block_h, "ROWS_PER_PROGRAM": cfg.rows_per_program, "LOOPED": cfg.looped,
                          "ALIGN": align, "HF_NUMERICS": spec.numerics, "PDL": configs.pdl_compiled(arch),
                          "WEIGHT_FIRST": cfg.weight_first, "REREAD": cfg.reread, "EVICT_LAST": cfg.evict_last,
                          "KEEP_H": cfg.keep_h}
        # the kind's flags: its kernel's, on or off, then its others (on)
        flags = KINDS[spec.kind].flags
        constexprs.update({f: f in flags for f in KERNEL_FLAGS[spec.base]})
        constexprs.update({f: True for f in flags if f not in KERNEL_FLAGS[spec.base]})
        if "ROPE" in flags and spec.base == "forward":
            constexprs["POSITIONS"] = configs.ROPE_VARIANTS[spec.rope - 1][1] is not None
        if "PAIR" in flags:  # (the JIT's default, 1, where it does not pack: an AOT constexpr has no default)
            constexprs["PAIR_PACK"] = configs.PAIR_PACKS[spec.pack]
        num_warps = cfg.num_warps
    options = {"num_warps": num_warps, "enable_fp_fusion": configs.FP_FUSION}
    cap = spec_cap(spec, cfg, arch)
    if cap is not None:  # as the JIT launcher does
        options["maxnreg"] = cap
    return kernel, sig, attrs, constexprs, options


def describe(spec: Spec, cfg, arch: int) -> dict:
    """A kernel as triton.compile sees it, in JSON's terms: its function, its arguments' types by name (not their
    order, which a rearranged parameter list changes without changing the code), constexprs, options, the arch,
    and the pointer arguments promised aligned."""
    kernel, sig, attrs, constexprs, options = compile_inputs(spec, cfg, arch)
    names = list(sig)
    return {"kernel": kernel.__name__, "types": {n: t for n, t in sorted(sig.items()) if t != "constexpr"},
            "constexprs": constexprs, "options": options, "arch": arch,
            "aligned": sorted(names[i[0]] for i in attrs)}


def write_manifest(path: Path, jobs: list, cache_dir: Path) -> None:
    """Each job's description (describe) beside its cubin's path in the cache."""
    rows = [{"spec": asdict(spec), "describe": describe(spec, cfg, arch),
             "cubin": str(Path(cache_dir) / f"{key}.cubin")} for spec, cfg, arch, _, key, _ in jobs]
    path.write_text(json.dumps(rows, indent=0))


def compile_one(job):
    """Compile one specialization for one arch (runs in a worker process)."""
    spec, cfg, arch, cache_dir, key, jit_check = job
    cubin_path = Path(cache_dir) / f"{key}.cubin"
    meta_path = Path(cache_dir) / f"{key}.json"
    if cubin_path.exists() and meta_path.exists():
        return key, []
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel, sig, attrs, constexprs, options = compile_inputs(spec, cfg, arch)
    n_args = sum(t != "constexpr" for t in sig.values())
    src = ASTSource(fn=kernel, signature=sig, attrs=attrs, constexprs=constexprs)
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    problems = []
    if "maxnreg" in options:
        regs, stack = _resource_usage(compiled.asm["cubin"])
        problem = register_plan.cap_problem(regs, stack, options["maxnreg"])
        if problem:
            problems.append(f"{problem}; configs.MAX_REGISTERS must not cap this config")
    if spec.base == "backward" and spec.align > 1 and arch in register_plan.SM_LIMITS:
        problem = _check_backward_fit(spec, cfg, arch, compiled)
        if problem:
            problems.append(f"{problem}; configs.BACKWARD_TABLE must plan what fits, with no spill outside "
                            "configs.BACKWARD_SPILLS_MEASURED")
    if problems and not jit_check:
        raise RuntimeError(f"{spec} at {cfg} for sm_{arch}: " + "; ".join(problems))
    md = compiled.metadata
    entry = re.search(r"\.entry\s+(\w+)\s*\(([^)]*)\)", compiled.asm["ptx"], re.S)
    n_params = len([p for p in entry.group(2).split(",") if p.strip()])
    if n_params != n_args + 2 and not jit_check:  # the C ABI's launch convention; the JIT launches its own way
        raise RuntimeError(f"expected {n_args} arguments plus Triton's two hidden scratch pointers, "
                           f"the kernel has {n_params} parameters: this Triton version is not supported")
    if md.global_scratch_size or md.profile_scratch_size:
        raise RuntimeError(f"{spec} needs global/profile scratch ({md.global_scratch_size}, "
                           f"{md.profile_scratch_size} bytes); the runtime launches without allocating")
    meta = {"name": md.name, "num_warps": md.num_warps, "shared": md.shared,
            "global_scratch_size": md.global_scratch_size, "global_scratch_align": md.global_scratch_align,
            "profile_scratch_size": md.profile_scratch_size, "num_params": n_params,
            "grid_dependency": spec.base in ("forward", "quant_forward") and configs.pdl_compiled(arch)}
    tmp = cubin_path.with_suffix(".tmp")
    tmp.write_bytes(compiled.asm["cubin"])
    tmp.replace(cubin_path)
    meta_path.write_text(json.dumps(meta))
    return key, problems


SM_LIMITS = register_plan.SM_LIMITS
programs_that_fit = register_plan.programs_that_fit


def _check_backward_fit(spec: Spec, cfg, arch: int, compiled) -> str | None:
    """The persistent backward grid plans cfg.programs_per_sm programs per SM: why a 16-byte-aligned
    backward kernel breaks that plan (it fits fewer, or spills outside
    configs.BACKWARD_SPILLS_MEASURED), or None. ALIGN 1 rows (odd H) hold more registers and may run
    in waves; they are rare and not checked."""
    regs, stack = _resource_usage(compiled.asm["cubin"])
    fit = register_plan.backward_fit(regs, compiled.metadata.shared, cfg.num_warps, arch, cfg.programs_per_sm)
    if stack and (cfg.block_h, cfg.rows_per_program, cfg.num_warps) in configs.BACKWARD_SPILLS_MEASURED:
        stack = 0  # measured to win despite its spill (configs.BACKWARD_SPILLS_MEASURED)
    if fit is None and not stack:
        return None
    return (f"{regs} registers, {compiled.metadata.shared} bytes of shared memory and {stack} of stack fit "
            f"{register_plan.programs_that_fit(regs, compiled.metadata.shared, cfg.num_warps, arch)} programs "
            f"per SM, and the table plans {cfg.programs_per_sm}")


def _resource_usage(cubin: bytes) -> tuple[int, int]:
    """(registers, stack bytes) of a one-kernel cubin, from the cuobjdump bundled with Triton."""
    import tempfile

    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    return tuple(int(re.search(rf"{k}:(\d+)", usage).group(1)) for k in ("REG", "STACK"))


def _write_if_changed(path: Path, text: str | bytes):
    data = text.encode() if isinstance(text, str) else text
    if path.exists() and path.read_bytes() == data:
        return
    path.write_bytes(data)


DTYPE_INDEX = {d: i for i, d in enumerate(configs.DTYPES)}
WEIGHT_SLOTS = 3  # the forward's weight slot: 0 x's dtype, 1 fp32, 2 w16 (kernel_table.h: weight_slot)
N_NUMERICS = 3  # HF_NUMERICS values: configs.CONTRACT, HF_LLAMA, HF_GEMMA (kernel_table.h: kNumNumerics)


def weight_slot_of(x: str, weight_arg: str) -> int:
    """The forward's weight slot of a weight pointer type (configs.forward_weight_arg): 0 x's dtype,
    1 fp32, 2 the int16 bits (WEIGHT_W16)."""
    return 0 if weight_arg == x else 1 if weight_arg == "fp32" else 2


def weight_slot(spec) -> int:
    return weight_slot_of(spec.x, spec.weight)


# The kernel key: a kind (KINDS) and its specialization, the one lookup of every built kernel (the C runtime's
# find_kernel). Each field's bits, in order from the lowest; kernel_keys.h's pack_kernel_key is generated from it.
KEY_FIELDS = (("kind", 5), ("config", 8), ("x", 3), ("residual", 3), ("weight", 3), ("align_class", 3),
              ("numerics", 3), ("quant", 4), ("q", 3), ("rope", 4), ("pack", 2))


def key_fields(s: Spec) -> dict:
    """A spec's key: its kind's index in KINDS, its config, the dtypes' addrmsnorm_dtype values, the weight (the
    forwards' weight slot, the dweight reduction's dtype, 0 for the backward's untyped weight), the alignment
    class, HF_NUMERICS, QUANT, the quantized output's dtype + 1 (0: none), the rotation's variant + 1 (0: none) and
    the pair's pack (its index in configs.PAIR_PACKS)."""
    weight = (weight_slot(s) if s.base in ("forward", "quant_forward") else DTYPE_INDEX[s.weight]
              if s.base == "dweight" else 0)
    return {"kind": list(KINDS).index(s.kind), "config": s.config, "x": DTYPE_INDEX[s.x],
            "residual": DTYPE_INDEX[s.residual], "weight": weight, "align_class": s.align_class,
            "numerics": s.numerics, "quant": s.quant, "q": configs.QUANT_DTYPES.index(s.q) + 1 if s.q else 0,
            "rope": s.rope, "pack": s.pack}


def pack_key(fields: dict) -> int:
    key, shift = 0, 0
    for name, bits in KEY_FIELDS:
        assert 0 <= fields[name] < 1 << bits, (name, fields[name])
        key |= fields[name] << shift
        shift += bits
    return key


def _kernel_keys_header() -> str:
    """kernel_keys.h: the kinds (KINDS, in order) and the key's packing (KEY_FIELDS)."""
    pack = " |\n           ".join(
        f"(static_cast<unsigned long long>({'static_cast<int>(k.kind)' if n == 'kind' else 'k.' + n}) << {sum(b for _, b in KEY_FIELDS[:i])})"
        for i, (n, _) in enumerate(KEY_FIELDS))
    fields = ", ".join(n for n, _ in KEY_FIELDS[1:])
    ranges = " ||\n        ".join(f"k.{n} < 0 || k.{n} >= {1 << b}" for n, b in KEY_FIELDS[1:])
    return f"""\
// Generated by tools/aot_build.py: the kernel kinds (a kernel and the flags its calls turn on) and the kernel key,
// a kind and its specialization packed as tools/aot_build.py's KEY_FIELDS packs it. find_kernel (kernel_table.h)
// looks a key up among the built kernels.
#pragma once

namespace addrmsnorm {{
namespace detail {{

enum class KernelKind {{ {', '.join(k.enum for k in KINDS.values())} }};

struct KernelKey {{
    KernelKind kind;
    int {fields};
}};

// A key no kernel has (all bits set) where a field is out of its bits.
inline unsigned long long pack_kernel_key(const KernelKey& k) {{
    if ({ranges})
        return ~0ull;
    return {pack};
}}

}}  // namespace detail
}}  // namespace addrmsnorm
"""


def _call_rules(n_align_classes: int) -> list[str]:
    """The rules by which the C runtime picks a call's kernel, beside the alignment and the dispatch
    rules, as tables of configs' answers over their whole (finite) domains."""
    d = configs.DTYPES
    slots = [weight_slot_of(x, configs.forward_weight_arg(x, w)) for x in d for w in d]
    lines = ["", "// configs.forward_weight_arg as a weight slot: [x addrmsnorm_dtype][weight addrmsnorm_dtype]",
             f"const signed char kWeightSlot[] = {{{', '.join(map(str, slots))}}};"]
    modes = [configs.numerics_mode(hf, 1.0 if nonzero else 0.0, xs, once)
             for hf in (False, True) for nonzero in (False, True) for once in (False, True) for xs in (2, 4)]
    lines += ["// configs.numerics_mode: [hf][weight_offset nonzero as fp32][round_once][x_itemsize == 4]",
              f"const signed char kNumericsMode[] = {{{', '.join(map(str, modes))}}};"]
    typed = [configs.is_vector_typed(1 << ac, xs, rs, t, n)
             for ac in range(n_align_classes) for xs in (2, 4) for rs in (2, 4) for t in (False, True)
             for n in range(N_NUMERICS)]
    lines += ["// configs.is_vector_typed: [align class][x_itemsize == 4][residual_itemsize == 4][weight is x's dtype]"
              "[numerics]", f"const bool kVectorTyped[] = {{{', '.join('true' if t else 'false' for t in typed)}}};"]
    rule = {"FORWARD_TABLE": "select_forward_config", "PLAIN_TABLE": "select_plain_table_config"}
    lines += ["// configs.select_plain_config: the table of configs.PLAIN_TABLES for x's element size.",
              "int select_plain_config(long long H, int x_itemsize, bool vector_typed) {"]
    for xs, table in sorted(configs.PLAIN_TABLES.items()):
        plain_arg = ", false" if table == "FORWARD_TABLE" else ""  # not a quantized call
        lines.append(f"    if (x_itemsize == {xs}) return {rule[table]}(H, {xs}, {xs}, 0, vector_typed{plain_arg});")
    lines += ["    return -1;", "}"]
    return lines




def _variants_header() -> list:
    """The head of variants.inc: what each variant of kernel_table.cpp is, in its order, for the host tests
    alone (the runtime reads only the kernel keys). The array's rows follow."""
    return ["// Generated by tools/aot_build.py: kernel_table.cpp's variants, in order (tests/cpp/host_test.cpp).",
            "struct KernelVariant {",
            "    KernelKind kind;",
            "    int config;            // index into kConfigs (the forwards) or kBackwardConfigs",
            "    int x_dtype, residual_dtype;  // addrmsnorm_dtype values",
            "    int weight;            // the forwards: the weight slot (weight_slot); backward: -1 (any weight, by",
            "                           // its runtime dtype); dweight reduction: the weight's addrmsnorm_dtype",
            "    int align_class;       // forward: ALIGN = 1 << align_class; backward: 0 (ALIGN 1) or 1 (the vector)",
            "    int numerics;          // HF_NUMERICS (configs.numerics_mode)",
            "    int quant;             // the quantized forwards: QUANT (configs.QUANT_MODES); else 0",
            "    int quant_dtype;       // the quantized forwards: addrmsnorm_quant_dtype of q; else -1",
            "};",
            "const KernelVariant kVariants[] = {"]

ITEMSIZE_PAIRS = ((2, 2), (2, 4), (4, 2), (4, 4))


def _alignment_rules() -> list[str]:
    """configs.align_elems and configs.backward_align as C++: the class of ALIGN to launch."""
    lines = ["", f"const int kAlignmentBytes = {configs.ALIGNMENT_BYTES};",
             "// configs.align_elems: log2 of the forward's ALIGN. `common` is H OR-ed with every row stride",
             "// (0 for a single row): a power of two divides them all exactly when it divides that.",
             "int forward_align_class(bool pointers_aligned, long long common, int x_itemsize, int residual_itemsize,",
             "                        bool ends_only) {",
             "    if (!pointers_aligned) return 0;"]
    for xs, rs in ITEMSIZE_PAIRS:
        classes = configs.align_classes(xs, rs)
        assert all(a & (a - 1) == 0 for a in classes), "ALIGN classes must be powers of two"
        lines.append(f"    if (x_itemsize == {xs} && residual_itemsize == {rs}) {{")
        ends = configs.align_classes(xs, rs, ends_only=True)
        lines.append(f"        if (ends_only) return common % {ends[-1]} == 0 ? {ends[-1].bit_length() - 1} : 0;")
        for a in reversed(classes):
            if a > 1:
                lines.append(f"        if (common % {a} == 0) return {a.bit_length() - 1};")
        lines.append("        return 0;")
        lines.append("    }")
    lines += ["    return 0;", "}", "",
              "// configs.backward_align: 1 for the vector-wide class, 0 for ALIGN 1.",
              "int backward_align_class(bool pointers_aligned, long long common, int x_itemsize, int residual_itemsize) {",
              "    if (!pointers_aligned) return 0;"]
    for xs, rs in ITEMSIZE_PAIRS:
        v = configs.vector_elems(xs, rs)
        lines.append(f"    if (x_itemsize == {xs} && residual_itemsize == {rs}) return common % {v} == 0 ? 1 : 0;")
    lines += ["    return 0;", "}", ""]
    return lines


def _backward_grid_rules(bcfgs) -> list[str]:
    """configs.backward_programs and configs.backward_workspace_floats as C++."""
    per_sm = ", ".join(str(c.programs_per_sm) for c in bcfgs)
    means = ", ".join("true" if c.looped else "false" for c in bcfgs)
    return [
        "// each backward config's programs_per_sm, and whether the workspace holds a mean per row (looped), per",
        "// backward config.",
        f"const int kBackwardProgramsPerSm[] = {{{per_sm}}};",
        f"const bool kBackwardRowMeans[] = {{{means}}};",
        "// configs.backward_programs",
        "long long backward_programs(long long rows, int config, int sm_count) {",
        "    const long long per_program = kBackwardConfigs[config].rows_per_program;",
        "    const long long blocks = (rows + per_program - 1) / per_program;",
        "    const long long cap = static_cast<long long>(sm_count) * kBackwardProgramsPerSm[config];",
        "    const long long p = blocks < cap ? blocks : cap;",
        "    return p > 0 ? p : 1;",
        "}",
        "// configs.backward_workspace_floats, in bytes",
        "unsigned long long backward_workspace_bytes(long long rows, long long hidden, int config, int sm_count) {",
        "    const long long floats = backward_programs(rows, config, sm_count) * hidden +",
        "                             (kBackwardRowMeans[config] ? rows : 0);",
        "    return 4ull * static_cast<unsigned long long>(floats);",
        "}",
    ]


# The C++ type of each kernel parameter as kernels.py annotates it ("" is a pointer), and the launches'
# parameter structs (kernel_params.h): one per kernel function, the constexprs left out.
C_PARAM_TYPES = {"": "CUdeviceptr", "i32": "int32_t", "i64": "int64_t", "fp32": "float"}
PARAM_STRUCTS = (("ForwardParams", "forward"), ("QuantForwardParams", "quant_forward"), ("BackwardParams", "backward"),
                 ("DweightParams", "dweight"))


def _kernel_params_header() -> str:
    """Each kernel's runtime parameters as a struct the launch fills by name: generated from the kernel's
    signature (names, types, order), so that the C path cannot pass two parameters swapped or of the wrong
    width. A parameter renamed or removed in kernels.py stops the launch from compiling; one added and not
    set makes pack() refuse the launch, naming it."""
    out = ["// Generated by tools/aot_build.py from addrmsnorm/kernels.py: each kernel's parameters without its",
           "// constexprs, in order and typed as the kernel compiles them, then Triton's two hidden scratch",
           "// pointers (null: the build refuses kernels that need scratch). A launch sets them by name; pack()",
           "// gives cuLaunchKernelEx's array, or names the first parameter the launch did not set.",
           "#pragma once", "", "#include <cuda.h>", "", "#include <cstdint>", "",
           "namespace addrmsnorm {", "namespace detail {", "",
           "template <typename T>", "struct KernelParam {", "    T value{};", "    bool set = false;",
           "    KernelParam& operator=(T v) {", "        value = v;", "        set = true;", "        return *this;",
           "    }", "};", "",
           "inline CUdeviceptr devptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }", ""]
    for struct, kind in PARAM_STRUCTS:
        kernel = kernel_of(kind)
        params = [p for p in kernel.params if not p.is_constexpr]
        for p in params:
            if p.annotation not in C_PARAM_TYPES:
                raise RuntimeError(f"kernels.{kernel.__name__}: parameter {p.name} has type {p.annotation!r}, "
                                   f"which the C launch has no type for ({sorted(C_PARAM_TYPES)})")
        out.append(f"struct {struct} {{  // kernels.{kernel.__name__}")
        out += [f"    KernelParam<{C_PARAM_TYPES[p.annotation]}> {p.name};" for p in params]
        out += ["    CUdeviceptr global_scratch = 0, profile_scratch = 0;",
                f"    static constexpr int kCount = {len(params) + 2};", "",
                "    bool pack(void* (&out)[kCount], const char** missing) {"]
        for i, p in enumerate(params):
            out += [f"        if (!{p.name}.set) {{ *missing = \"{p.name}\"; return false; }}",
                    f"        out[{i}] = &{p.name}.value;"]
        out += [f"        out[{len(params)}] = &global_scratch;", f"        out[{len(params) + 1}] = &profile_scratch;",
                "        return true;", "    }", "};", ""]
    out += ["}  // namespace detail", "}  // namespace addrmsnorm", ""]
    return "\n".join(out)


def _rule_cases() -> str:
    """The Python rules' answers, which the generated C++ rules must reproduce (tests/cpp/host_test.cpp)."""
    out = ["// Generated by tools/aot_build.py from addrmsnorm/configs.py",
           "#ifdef ADDRMSNORM_ALIGN_CASES",
           "// {pointers_aligned, H, stride, x_itemsize, residual_itemsize, ends_only, forward class, backward class}"]
    for aligned in (True, False):
        for H in (1, 2, 3, 4, 6, 8, 12, 16, 96, 100, 111, 4096, 4100, 4098, 11111):
            for stride in (0, H, H + 2, H + 4, H + 8, 2 * H):
                for xs, rs in ITEMSIZE_PAIRS:
                    for ends in (False, True):
                        p = [0 if aligned else 2]
                        fwd = configs.align_elems(p, H, (stride,) * 4, xs, rs, ends).bit_length() - 1
                        bwd = int(configs.backward_align(p, H, (stride,) * 5, xs, rs) > 1)
                        out.append(f"{{{str(aligned).lower()}, {H}, {stride}, {xs}, {rs}, {str(ends).lower()}, "
                                   f"{fwd}, {bwd}}},")
    out += ["#endif", "#ifdef ADDRMSNORM_BACKWARD_GRID_CASES",
            "// {rows, H, x_itemsize, residual_itemsize, sm_count, programs, workspace bytes}"]
    for rows in (1, 2, 7, 64, 1000, 4099, 100000):
        for H in (64, 1000, 4096, 8192, 8193, 65536):
            for xs, rs in ((2, 2), (2, 4), (4, 4)):
                for sms in (1, 3, 132):
                    cfg = configs.select_backward_config(H, xs, rs)
                    programs = configs.backward_programs(rows, cfg, sms)
                    ws = 4 * configs.backward_workspace_floats(rows, H, cfg, sms)
                    out.append(f"{{{rows}, {H}, {xs}, {rs}, {sms}, {programs}, {ws}ull}},")
    out += ["#endif", "#ifdef ADDRMSNORM_NUMERICS_CASES",
            "// {hf, weight_offset, x_itemsize, HF_NUMERICS}: configs.numerics_mode, which kernel_table.h reads from a generated table"]
    for hf in (False, True):
        for offset in (0.0, 1.0, -1.0, 0.5, 1e-30, 1e-45, 7e-46, -0.0):
            for xs in (2, 4):
                # The offset as the C ABI receives it, rounded to fp32 and written exactly (a hex
                # literal): 7e-46f would be a literal that GCC truncates to zero with a warning.
                as_fp32 = struct.unpack("<f", struct.pack("<f", offset))[0]
                out.append(f"{{{str(hf).lower()}, {as_fp32.hex()}f /* {offset!r} */, {xs}, "
                           f"{configs.numerics_mode(hf, offset, xs)}}},")
    out += ["#endif", "#ifdef ADDRMSNORM_VECTOR_TYPED_CASES",
            "// {align class, x_itemsize, residual_itemsize, weight_is_x_dtype, numerics, vector_typed}: "
            "configs.is_vector_typed, likewise"]
    for align_class in range(4):
        for xs, rs in ITEMSIZE_PAIRS:
            for typed in (False, True):
                for numerics in (configs.CONTRACT, configs.HF_LLAMA, configs.HF_GEMMA):
                    vt = configs.is_vector_typed(1 << align_class, xs, rs, typed, numerics)
                    out.append(f"{{{align_class}, {xs}, {rs}, {str(typed).lower()}, {numerics}, {str(vt).lower()}}},")
    out += ["#endif", "#ifdef ADDRMSNORM_PAIR_CASES",
            "// {rows, wider, narrower, config's block_h, pack, the wider part's programs, all programs}: "
            "configs.pair_pack and configs.pair_grid"]
    for rows in (1, 5, 64, 16384):
        for wider, narrower in ((1536, 512), (2048, 2048), (4096, 8), (8192, 8192), (768, 256), (64, 16), (512, 264)):
            cfg = configs.select_pair_config(wider, 2)
            pack = configs.pair_pack(cfg.block_h, narrower)
            split, programs = configs.pair_grid(cfg, rows, pack)
            out.append(f"{{{rows}, {wider}, {narrower}, {cfg.block_h}, {pack}, {split}, {programs}}},")
    out.append("#endif")
    return "\n".join(out) + "\n"


def pack_zero_runs(data: bytes) -> bytes:
    """A cubin as embedded: each run of 1-256 zero bytes as 0x00 and the run's length minus 1; every other
    byte as itself. Cubins are about a sixth zero runs (ELF padding, zero immediates), and the runtime
    (modules.cpp, unpack_zero_runs) unpacks a kernel once, at its first load, with no dependency."""
    out = bytearray()
    for m in re.finditer(rb"\x00+|[^\x00]+", data):
        run = m.group()
        if run[0]:
            out += run
            continue
        n = len(run)
        while n:
            k = min(n, 256)
            out += bytes((0, k - 1))
            n -= k
    return bytes(out)


def unpack_zero_runs(packed: bytes) -> bytes:
    """The inverse of pack_zero_runs (for the tests; the runtime has its own in C++)."""
    out, i = bytearray(), 0
    while i < len(packed):
        if packed[i]:
            out.append(packed[i])
            i += 1
        else:
            out += bytes(packed[i + 1] + 1)
            i += 2
    return bytes(out)


def generate(out: Path, archs, cfgs, bcfgs, specs, keys, cache_dir: Path):
    blob = bytearray()
    images = []  # [spec][arch] -> dict
    for si, spec in enumerate(specs):
        row = []
        for arch in archs:
            key = keys.get((si, arch))
            if key is None:  # not built for this arch (configs.quant_built_for): an empty image
                row.append({"offset": 0, "packed": 0, "size": 0, "num_warps": 0, "shared": 0, "global_scratch_size": 0,
                            "profile_scratch_size": 0, "name": "", "grid_dependency": False})
                continue
            data = (cache_dir / f"{key}.cubin").read_bytes()
            meta = json.loads((cache_dir / f"{key}.json").read_text())
            packed = pack_zero_runs(data)
            row.append(dict(meta, offset=len(blob), packed=len(packed), size=len(data)))
            blob += packed
        images.append(row)
    for ai, arch in enumerate(archs):
        mib = sum(row[ai]["packed"] for row in images) / 2**20
        if mib > configs.AOT_MAX_MIB_PER_ARCH:
            raise SystemExit(f"addrmsnorm AOT: sm_{arch} embeds {mib:.1f} MiB of cubins, over the budget of "
                             f"{configs.AOT_MAX_MIB_PER_ARCH} MiB per arch (configs.AOT_MAX_MIB_PER_ARCH)")
        print(f"addrmsnorm AOT: sm_{arch}: {sum(1 for row in images if row[ai]['size'])} kernels, {mib:.1f} MiB "
              f"embedded ({sum(row[ai]['size'] for row in images) / 2**20:.1f} MiB of cubins unpacked)", flush=True)
    _write_if_changed(out / "addrmsnorm_cubins.bin", bytes(blob))
    _write_if_changed(out / "addrmsnorm_cubins.S", f"""\
/* Generated by tools/aot_build.py: the cubins of every kernel specialization, embedded. */
    .section .rodata.addrmsnorm_cubins, "a"
    .balign 16
    .globl addrmsnorm_cubin_blob
    .hidden addrmsnorm_cubin_blob
    .type addrmsnorm_cubin_blob, @object
addrmsnorm_cubin_blob:
    .incbin "{(out / 'addrmsnorm_cubins.bin').as_posix()}"
    .size addrmsnorm_cubin_blob, . - addrmsnorm_cubin_blob
    .section .note.GNU-stack, "", @progbits
""")

    n_d = len(configs.DTYPES)
    n_a = max(s.align_class for s in specs if s.kind == "forward") + 1
    n_w = WEIGHT_SLOTS
    lines = ["// Generated by tools/aot_build.py from addrmsnorm/configs.py. Do not edit.",
             '#include "kernel_table.h"', "", "namespace addrmsnorm {", "namespace detail {", ""]
    lines.append(f"const int kNumArchs = {len(archs)};")
    lines.append(f"const int kArchs[] = {{{', '.join(str(a) for a in archs)}}};")
    lines.append(f'const char kArchList[] = "{", ".join(f"sm_{a}" for a in archs)}";')
    lines.append(f"const int kNumConfigs = {len(cfgs)};")
    lines.append("const KernelConfig kConfigs[] = {")
    for c in cfgs:
        lines.append(f"    {{{c.block_h}, {c.rows_per_program}, {c.num_warps}, {str(c.looped).lower()}}},")
    lines.append("};")
    lines.append(f"const int kNumVariants = {len(specs)};")
    # What each variant is, for the host tests alone (the runtime reads only the kernel keys).
    variants = _variants_header()
    for s in specs:
        weight = (weight_slot(s) if s.base in ("forward", "quant_forward") else -1 if s.base == "backward"
                  else DTYPE_INDEX[s.weight])
        q = configs.QUANT_DTYPES.index(s.q) if s.q else -1
        variants.append(f"    {{KernelKind::{KINDS[s.kind].enum}, {s.config}, {DTYPE_INDEX[s.x]}, {DTYPE_INDEX[s.residual]}, "
                        f"{weight}, {s.align_class}, {s.numerics}, {s.quant}, {q}}},")
    variants.append("};")
    _write_if_changed(out / "variants.inc", "\n".join(variants) + "\n")
    lines.append("// [variant * kNumArchs + arch]")
    lines.append("const CubinImage kImages[] = {")
    for row in images:
        for m in row:
            lines.append(f"    {{{m['offset']}u, {m['packed']}u, {m['size']}u, {m['num_warps']}, {m['shared']}u, "
                         f"{m['global_scratch_size']}u, {m['profile_scratch_size']}u, \"{m['name']}\", "
                         f"{str(m['grid_dependency']).lower()}}},")
    lines.append("};")
    lines.append(f"const int kNumDtypes = {n_d};")
    lines.append(f"const int kNumAlignClasses = {n_a};")
    lines.append(f"const int kNumWeightSlots = {n_w};")
    lines.append(f"const int kNumNumerics = {N_NUMERICS};")
    # The one lookup: every built kernel's key (kernel_keys.h), ascending, and its variant.
    keyed = sorted((pack_key(key_fields(s)), si) for si, s in enumerate(specs))
    assert len({k for k, _ in keyed}) == len(keyed), "two kernels with one key"
    lines.append(f"const int kNumKernelKeys = {len(keyed)};")
    lines.append("const unsigned long long kKernelKeys[] = {")
    lines += ["    " + ", ".join(f"{k:#x}ull" for k, _ in keyed[i:i + 6]) + "," for i in range(0, len(keyed), 6)]
    lines.append("};")
    lines.append("const short kKeyVariants[] = {")
    lines += ["    " + ", ".join(str(si) for _, si in keyed[i:i + 24]) + "," for i in range(0, len(keyed), 24)]
    lines.append("};")
    n_r = len(configs.ROPE_VARIANTS)
    lines.append(f"const int kNumRopeVariants = {n_r};")
    lines.append(f"const int kQkMaxHeadDim = {configs.QK_MAX_HEAD_DIM};")
    lines.append(f"const int kWeightlessDtype = {configs.WEIGHTLESS_DTYPE};")
    lines.append(f"const int kGatedMaxGroup = {configs.GATED_MAX_GROUP};")
    lines.append(f"const int kPairMaxWidth = {configs.PAIR_MAX_WIDTH};")
    assert configs.PAIR_PACKS[0] == 1, "pair_pack_index falls back to the first pack"
    lines += ["// configs.pair_pack, as its index in configs.PAIR_PACKS: the largest pack built at block_h",
              "// (configs.pair_packs_built) whose tile holds the narrower part.",
              "int pair_pack_index(int block_h, long long narrower) {"]
    for i, p in reversed(list(enumerate(configs.PAIR_PACKS))):
        lines.append(f"    if (block_h / {p} >= narrower && block_h / {p} >= {configs.PAIR_MIN_PACKED_WIDTH}) return {i};"
                     if i else f"    return {i};")
    lines += ["}", f"const int kPairPacks[] = {{{', '.join(map(str, configs.PAIR_PACKS))}}};"]
    # The variants' admission rules as data (configs.py, which validation.py reads too): their one alignment,
    # the activation dtypes each takes (bits of addrmsnorm_dtype) and the quantized outputs built for them (bit
    # (mode - 1) * kNumQuantDtypes + quant dtype).
    lines.append(f"const int kVariantAlign = {configs.VARIANT_ALIGN};")
    for name, dtypes in (("kSandwichDtypes", configs.SANDWICH_DTYPES), ("kPairDtypes", configs.PAIR_DTYPES),
                         ("kRopeDtypes", configs.ROPE_DTYPES)):  # the gated norm takes every dtype
        lines.append(f"const unsigned {name} = {sum(1 << configs.DTYPES.index(d) for d in dtypes):#x}u;")
    for name, built in (("kSandwichQuant", configs.SANDWICH_QUANT), ("kGatedQuant", configs.GATED_QUANT)):
        bits = sum(1 << ((m - 1) * len(configs.QUANT_DTYPES) + configs.QUANT_DTYPES.index(q)) for m, q in built)
        lines.append(f"const unsigned {name} = {bits:#x}u;")
    # The quantized outputs' rules (configs.QUANT_*): x's dtypes (bits of addrmsnorm_dtype), the alignment in
    # elements, the per-group mode's group sizes and each block format's block (by mode - 1; 0 where not a block).
    lines.append(f"const unsigned kQuantActivationDtypes = "
                 f"{sum(1 << configs.DTYPES.index(d) for d in configs.QUANT_ACTIVATION_DTYPES):#x}u;")
    lines.append(f"const int kQuantAlign = {configs.QUANT_ALIGN};")
    lines.append(f"const int kNumQuantGroupSizes = {len(configs.QUANT_GROUP_SIZES)};")
    lines.append(f"const int kQuantGroupSizes[] = {{{', '.join(map(str, configs.QUANT_GROUP_SIZES))}}};")
    lines.append(f"const int kSwizzleRows = {configs.SWIZZLE_ROWS}, kSwizzleBlocks = {configs.SWIZZLE_BLOCKS};")
    lines.append(f"const int kBlockQuantSize[] = {{{', '.join(str(configs.BLOCK_QUANT_SIZE.get(m, 0)) for m in configs.QUANT_MODES)}}};")
    lines.append(f"const bool kRopeFp32WeightsWithPositions = {str(configs.ROPE_FP32_WEIGHTS_WITH_POSITIONS).lower()};")
    on_vector = [configs.rope_on_vector(style, 64 if whole else 32, 64)
                 for style in range(len(configs.ROPE_STYLES)) for whole in (False, True)]
    lines.append(f"const int kNumRopeStyles = {len(configs.ROPE_STYLES)};")
    lines += ["// configs.rope_on_vector: [style][rotary_dim == head_dim]",
              f"const bool kRopeOnVector[] = {{{', '.join('true' if v else 'false' for v in on_vector)}}};"]
    # Backward: configs.
    lines.append(f"const int kNumBackwardConfigs = {len(bcfgs)};")
    lines.append("const KernelConfig kBackwardConfigs[] = {")
    for c in bcfgs:
        lines.append(f"    {{{c.block_h}, {c.rows_per_program}, {c.num_warps}, {str(c.looped).lower()}}},")
    lines.append("};")
    n_q = len(configs.QUANT_DTYPES)
    n_m = len(configs.QUANT_MODES)
    lines.append(f"const int kNumQuantDtypes = {n_q};")
    lines.append(f"const int kNumQuantModes = {n_m};")
    lines.append(f"const int kDweightBlockC = {configs.DWEIGHT_BLOCK_C};")
    lines.append("")
    for fname, table, cl in (("select_forward_config", configs.FORWARD_TABLE, cfgs),
                             ("select_plain_table_config", configs.PLAIN_TABLE, cfgs),
                             ("select_sandwich_table_config", configs.SANDWICH_TABLE, cfgs),
                             ("select_gated_table_config", configs.GATED_TABLE, cfgs),
                             ("select_pair_table_config", configs.PAIR_TABLE, cfgs),
                             ("select_rope_table_config", configs.ROPE_TABLE, cfgs),
                             ("select_rope_misaligned_table_config", configs.ROPE_MISALIGNED_TABLE, cfgs),
                             ("select_backward_config", configs.BACKWARD_TABLE, bcfgs),
                             ("select_rope_backward_table_config", configs.ROPE_BACKWARD_TABLE, bcfgs)):
        lines.append(f"// A dispatch rule, generated from configs (see {fname} there).")
        # the forward's extra inputs: the quantized forward's rows, and the vector-typed calls' rows
        # (a table of one row for every H, or without quantized or vector-typed rows, leaves H, quant or
        # vector_typed unread: [[maybe_unused]], so that the build shows no -Wunused-parameter warnings)
        quant_arg = ("" if table in (configs.BACKWARD_TABLE, configs.ROPE_BACKWARD_TABLE)
                     else ", [[maybe_unused]] int quant, [[maybe_unused]] bool vector_typed")
        if table is configs.FORWARD_TABLE:  # the plain norm's quantized calls, which alone take plain_quant_only rows
            quant_arg += ", bool plain"
        lines.append(f"int {fname}([[maybe_unused]] long long H, int x_itemsize, int residual_itemsize{quant_arg}) {{")
        lines.append("    const int act_bytes = x_itemsize > residual_itemsize ? x_itemsize : residual_itemsize;")
        for act in sorted({r.act_bytes for r in table}):
            lines.append(f"    if (act_bytes == {act}) {{")
            for r in table:
                if r.act_bytes != act:
                    continue
                ci = cl.index(r.config)
                if r.quant_only:
                    assert not r.odd_h_only, "the quantized forward's rows are never odd"
                    modes = ("quant != 0" if set(r.quant_modes) == set(configs.QUANT_MODES) else
                             " || ".join(f"quant == {m}" for m in r.quant_modes))
                    bound = "" if r.h_max is None else f" && H <= {r.h_max}"
                    plain = "plain && " if r.plain_quant_only else ""
                    lines.append(f"        if ({plain}({modes}){bound}) return {ci};")
                elif r.vector_typed_only:
                    assert r.h_max is not None and not r.odd_h_only, "a vector-typed rule has a bound"
                    lines.append(f"        if (quant == 0 && vector_typed && H <= {r.h_max}) return {ci};")
                elif r.odd_h_only:
                    assert r.h_max is not None, "an odd-H rule has a bound"
                    lines.append(f"        if (H % 2 == 1 && H <= {r.h_max}) return {ci};")
                elif r.h_max is None:
                    lines.append(f"        return {ci};")
                else:
                    lines.append(f"        if (H <= {r.h_max}) return {ci};")
            lines.append("    }")
        lines.append("    return -1;")
        lines.append("}")
        lines.append("")
    lines += _alignment_rules() + _backward_grid_rules(bcfgs) + _call_rules(n_a)
    lines += ["", "}  // namespace detail", "}  // namespace addrmsnorm", ""]
    _write_if_changed(out / "kernel_table.cpp", "\n".join(lines))

    _write_if_changed(out / "rule_cases.inc", _rule_cases())
    _write_if_changed(out / "kernel_params.h", _kernel_params_header())
    _write_if_changed(out / "kernel_keys.h", _kernel_keys_header())

    # Test vectors: the Python rule's answers, which the generated C++ rule must reproduce: the tile,
    # and the config's index, which also tells apart configs of one tile with other flags. Each names its rule
    # (tests/cpp/host_test.cpp's DispatchRule): the forward's (quantized or not), or a variant's table.
    cases = []

    def case(rule, H, xs, rs, quant, vt, plain, c):
        cases.append(f"{{DispatchRule::{rule}, {H}, {xs}, {rs}, {quant}, {str(vt).lower()}, {str(plain).lower()}, "
                     f"{c.block_h}, {c.rows_per_program}, {c.num_warps}, {str(c.looped).lower()}, {cfgs.index(c)}}},")
    for H in sorted({*range(1, 70), 127, 128, 129, 255, 256, 257, 511, 512, 513, 1000, 1024, 1025,
                     2048, 2049, 3000, 4096, 4100, 5120, 6144, 6145, 8192, 8193, 8194, 11111, 11112, 16383, 16384,
                     16385, 24576, 32767, 32768, 32769, 32784, 65536, 262144}):
        for xs, rs, quant, vt, plain in ((2, 2, 0, False, False), (2, 2, 0, True, False), (2, 4, 0, False, False),
                                         (2, 4, 0, True, False), (4, 4, 0, False, False), (4, 4, 0, True, False),
                                         *((2, 2, m, vt, p) for m in configs.QUANT_MODES for vt in (False, True)
                                           for p in (False, True))):
            case("kForward", H, xs, rs, quant, vt, plain, configs.select_forward_config(H, xs, rs, quant, vt, plain))
        for xs, vt in ((2, False), (2, True), (4, False), (4, True)):
            case("kPlain", H, xs, xs, 0, vt, False, configs.select_plain_config(H, xs, vt))
        case("kSandwich", H, 2, 2, 0, False, False, configs.select_sandwich_config(H, 2))
        for xs in (2, 4) if H <= configs.GATED_MAX_GROUP else ():
            case("kGated", H, xs, xs, 0, False, False, configs.select_gated_config(H, xs))
        if H <= configs.PAIR_MAX_WIDTH:
            case("kPair", H, 2, 2, 0, False, False, configs.select_pair_config(H, 2))
        for aligned in (False, True) if H <= configs.QK_MAX_HEAD_DIM else ():  # vector_typed: aligned heads
            case("kRope", H, 2, 2, 0, aligned, False, configs.select_rope_config(H, aligned))
    _write_if_changed(out / "dispatch_cases.inc", "// Generated by tools/aot_build.py\n" + "\n".join(cases) + "\n")

    tols = _load("tolerances")
    tol_lines = ["// Generated by tools/aot_build.py from addrmsnorm/tolerances.py: {dtype, rtol, atol}"]
    for name in configs.DTYPES:
        t = tols.Y_TOLERANCES[name]
        tol_lines.append(f"{{{DTYPE_INDEX[name]}, {t.rtol!r}, {t.atol!r}}},  // {t.reason}")
    RSTD_TOLERANCE = tols.RSTD_TOLERANCE
    tol_lines.append(f"// rstd: {RSTD_TOLERANCE.reason}")
    tol_lines.append(f"#define ADDRMSNORM_RSTD_RTOL {RSTD_TOLERANCE.rtol!r}")
    tol_lines.append(f"// quantized outputs: {tols.QUANT_Y_RTOL.reason}")
    tol_lines.append(f"#define ADDRMSNORM_QUANT_Y_RTOL {tols.QUANT_Y_RTOL.rtol!r}")
    tol_lines.append("// q at rounding boundaries, as a fraction of q: one pass, and the looped path above")
    tol_lines.append("// configs.QUANT_SINGLE_PASS_MAX_H, whose y comes from h as stored (tolerances.py says why)")
    tol_lines.append(f"#define ADDRMSNORM_QUANT_BOUNDARY_FRACTION {tols.QUANT_BOUNDARY_FRACTION!r}")
    tol_lines.append(f"#define ADDRMSNORM_QUANT_BOUNDARY_FRACTION_LOOPED {tols.QUANT_BOUNDARY_FRACTION_LOOPED!r}")
    tol_lines.append(f"#define ADDRMSNORM_QUANT_SINGLE_PASS_MAX_H {configs.QUANT_SINGLE_PASS_MAX_H}")
    _write_if_changed(out / "tolerances.inc", "\n".join(tol_lines) + "\n")
    return len(blob)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--archs", default="80;90;100", help="semicolon- or comma-separated, e.g. 80;90;100")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--list", action="store_true", help="print the kernels per arch and exit")
    ap.add_argument("--manifest", type=Path,
                    help="also write each kernel's description (what triton.compile is given) and cache key, as JSON "
                         "(devtools/compare_cubins.py compares two builds' code by it)")
    ap.add_argument("--sample", action="store_true",
                    help="compile the first and last specialization of each kind per arch, write no table")
    ap.add_argument("--capped", action="store_true",
                    help="compile the forward kernels under a register cap (each is checked for spills), "
                         "write no table")
    ap.add_argument("--jit-check", action="store_true",
                    help="under any Triton release, compile what the JIT backend would: the sample, every "
                         "capped kernel and every aligned backward kernel; report each broken register plan "
                         "(which the JIT degrades, register_plan.py) instead of failing; write no table")
    args = ap.parse_args()
    if not args.list and args.out is None:
        ap.error("--out is required")
    archs = [int(a) for a in re.split(r"[;,\s]+", args.archs.strip()) if a]
    if not archs:
        ap.error("no archs")
    if not args.jit_check:
        os.environ[LINE_INFO_ENV] = "1"
    import triton

    if not (args.list or args.jit_check) and triton.__version__ != configs.AOT_TRITON_VERSION:
        sys.exit(f"addrmsnorm AOT: this is Triton {triton.__version__}, and the kernel table's register plan was "
                 f"tuned and verified with Triton {configs.AOT_TRITON_VERSION}, which the build pins "
                 f"(pyproject.toml): pip install triton=={configs.AOT_TRITON_VERSION} into the build "
                 "environment. The JIT backend runs on other releases (tools/aot_build.py --jit-check).")
    kernels = _load("kernels")

    cfgs = forward_configs()
    bcfgs = backward_configs()
    specs = all_specs(cfgs, bcfgs)
    kernel_key = "/".join(k.cache_key for k in (kernels.rmsnorm_fwd, kernels.rmsnorm_bwd,
                                                 kernels.rmsnorm_dweight,
                                                 kernels.rmsnorm_quant_fwd))
    kernel_key += f"/dw{configs.DWEIGHT_BLOCK_P},{configs.DWEIGHT_BLOCK_C},{configs.DWEIGHT_WARPS}"
    if args.list:
        for arch in archs:
            built = [s for s in specs if s.base != "quant_forward" or configs.quant_built_for(s.q, arch)]
            kinds = {k: sum(1 for s in built if s.kind == k) for k in KINDS}
            print(f"sm_{arch}: {len(built)} kernels ({kinds['forward']} forward, {kinds['backward']} backward, "
                  f"{kinds['dweight']} dweight reduction, {kinds['quant_forward']} quantized forward, "
                  f"{kinds['plain_forward']} plain norm, "
                  f"{kinds['qk_forward']} QK norm, {kinds['rope_forward']} QK norm + RoPE, {kinds['rope_backward']} its backward, "
                  f"{kinds['qkv_forward']} and {kinds['rope_v_forward']} of those with v heads, "
                  f"{kinds['plain_quant_forward']} plain quantized, "
                  f"{kinds['sandwich_forward']} sandwich norm, {kinds['gated_forward']} gated norm, "
                  f"{kinds['pair_forward']} pair, {kinds['sandwich_quant_forward']} sandwich quantized, "
                  f"{kinds['gated_quant_forward']} gated quantized)")
        return
    if args.sample or args.jit_check:
        picked = []
        for kind in KINDS:
            of_kind = [s for s in specs if s.kind == kind]
            picked += [of_kind[0], of_kind[-1]] if len(of_kind) > 1 else of_kind
        if args.jit_check:  # the kernels a register plan covers
            picked += [s for s in specs if (s.base == "backward" and s.align > 1) or any(
                spec_cap(s, (bcfgs if s.base == "backward" else cfgs)[s.config], a) for a in archs)]
        specs = list(dict.fromkeys(picked))
    if args.capped:
        specs = [s for s in specs if any(spec_cap(s, (bcfgs if s.base == "backward" else cfgs)[s.config], a)
                                         for a in archs)]
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)  # not made by the cache's mkdir below where ADDRMSNORM_AOT_CACHE is set
    # ADDRMSNORM_AOT_CACHE: a kernel cache shared between build trees (keys cover everything that
    # determines a cubin, the Triton release included).
    cache_dir = Path(os.environ["ADDRMSNORM_AOT_CACHE"]).resolve() if os.environ.get("ADDRMSNORM_AOT_CACHE") \
        else out / "cache"
    cache_dir.mkdir(parents=True, exist_ok=True)
    keys, jobs = {}, []
    for si, spec in enumerate(specs):
        cfg = ({"forward": cfgs, "quant_forward": cfgs, "backward": bcfgs}[spec.base][spec.config]
               if spec.kind != "dweight" else None)
        for arch in archs:
            if spec.base == "quant_forward" and not configs.quant_built_for(spec.q, arch):
                continue
            key = cache_key(spec, cfg, arch, kernel_key, triton.__version__)
            keys[(si, arch)] = key
            jobs.append((spec, cfg, arch, str(cache_dir), key, args.jit_check))
    if args.manifest is not None:
        write_manifest(args.manifest, jobs, cache_dir)
    todo = [j for j in jobs if not ((cache_dir / f"{j[4]}.cubin").exists() and (cache_dir / f"{j[4]}.json").exists())]
    print(f"addrmsnorm AOT: {len(specs)} specializations x {len(archs)} archs "
          f"({', '.join(f'sm_{a}' for a in archs)}) = {len(jobs)} kernels; "
          f"{len(jobs) - len(todo)} up to date, {len(todo)} to compile with {args.jobs} jobs", flush=True)
    t0 = time.time()
    broken = []  # (job, problems): --jit-check's broken register plans
    if todo:
        done = 0
        step = max(1, len(todo) // 20)

        def progress(job, result):
            nonlocal done
            done += 1
            if result[1]:
                broken.append((job, result[1]))
            if done % step == 0 or done == len(todo):
                print(f"  [{done}/{len(todo)}] compiled, {time.time() - t0:.0f}s", flush=True)

        if args.jobs > 1:
            import multiprocessing as mp
            with cf.ProcessPoolExecutor(max_workers=args.jobs, mp_context=mp.get_context("spawn")) as ex:
                for job, result in zip(todo, ex.map(compile_one, todo, chunksize=4)):
                    progress(job, result)
        else:
            for job in todo:
                progress(job, compile_one(job))
    if args.jit_check:
        for (spec, cfg, arch, *_), problems in broken:
            print(f"  sm_{arch} {spec.kind} {spec.x}/{spec.residual} block {cfg.block_h} x {cfg.rows_per_program} "
                  f"rows, {cfg.num_warps} warps: the plan breaks ({'; '.join(problems)}); the JIT degrades it")
        print(f"addrmsnorm JIT check, Triton {triton.__version__}: {len(specs)} specializations compiled for "
              f"{', '.join(f'sm_{a}' for a in archs)}, {len(broken)} register plans broken, "
              f"{time.time() - t0:.0f}s", flush=True)
        return
    if args.sample or args.capped:
        print(f"addrmsnorm AOT: {'a sample of ' if args.sample else ''}{len(specs)} specializations compiled for "
              f"{', '.join(f'sm_{a}' for a in archs)}, {time.time() - t0:.0f}s", flush=True)
        return
    size = generate(out, archs, cfgs, bcfgs, specs, keys, cache_dir)
    print(f"addrmsnorm AOT: {len(jobs)} cubins, {size / 2**20:.1f} MiB embedded, "
          f"{time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
