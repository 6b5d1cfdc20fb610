"""The one table of forward-kernel specializations, and the rule that picks a row of it.

Both the JIT launcher and the ahead-of-time C++ build read this module: the launcher calls
``select_forward_config`` on every call, and the AOT build walks ``FORWARD_TABLE`` to compile every
specialization and to generate the C++ dispatch rule. A new variant is a new row here, never a copy
of the kernel.

Batch invariance depends on one property of this rule: it looks at H (its size, and for some rows
its parity) and the dtypes only, never at the number of rows. A row therefore always runs the same
reduction, alone or among many.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

# The Triton release this table's register plan (MAX_REGISTERS, BACKWARD_TABLE's programs_per_sm) was
# tuned and verified with. The AOT build compiles with it alone (pyproject.toml pins it as a build
# requirement; build_info.json records it); the JIT backend runs on others and degrades a config
# whose plan no longer holds (register_plan.py).
AOT_TRITON_VERSION = "3.6.0"
# Multiplies and adds fused into FMAs, as Triton 3.6 compiles by default. Stated for every compile,
# JIT and AOT alike, because Triton 3.9 announces that its default turns off in 3.10: the kernels'
# bits (and the two backends' agreement) must not change with it.
FP_FUSION = True
# The most cubin bytes the AOT build embeds per arch (tools/aot_build.py refuses more): what a wheel of
# three archs can carry. A wheel stores the library deflated, and cubins deflate about 3.8 to 1: sm_100's
# 1555 kernels (the gated norm and the pair included) are 36.8 MiB of cubins, 31.2 embedded with zero runs
# packed, and 9.8 MiB deflated (zlib level 6). 40 MiB embedded per arch keeps a wheel of sm_80, sm_90 and
# sm_100 near 30 MiB, a third of PyPI's default file limit; it was 30 until those variants put sm_100 past it.
AOT_MAX_MIB_PER_ARCH = 40


@dataclass(frozen=True)
class KernelConfig:
    """Constexpr specialization and launch shape of a kernel: ``kernels.rmsnorm_fwd``'s
    (FORWARD_TABLE), or ``kernels.rmsnorm_bwd``'s (BACKWARD_TABLE, which also sets
    ``stages`` and ``programs_per_sm``)."""

    block_h: int           # power of two; >= H on the single-pass path, the chunk width when looped
    rows_per_program: int  # rows each program normalizes (1 on the looped path)
    num_warps: int
    looped: bool           # walk each row in chunks, twice
    weight_first: bool = False  # single pass: load the weight with x and residual, before the reduction
    evict_last: bool = False  # single pass: load x and residual with the evict-last L2 hint
    reread: bool = False   # forward, looped: pass 2 re-reads x and residual (else it reloads h)
    keep_h: bool = False   # forward, looped (not reread): h stored evict-last for the passes that reload it
    stages: int = 1        # backward: software-pipelining depth of its row loop (1: none)
    programs_per_sm: int = 0  # backward: resident programs per SM of its persistent grid

    def grid(self, n_rows: int) -> int:
        """Programs to launch for ``n_rows`` rows."""
        return -(-n_rows // self.rows_per_program)


@dataclass(frozen=True)
class TableRule:
    """One row of the table: serves every H up to ``h_max`` (None: no bound) for its stream width,
    or with ``odd_h_only`` every odd H up to ``h_max`` (rows of odd length are never 2-byte aligned
    beyond their first, so they always run ALIGN = 1). With ``quant_modes`` it serves the quantized
    forward alone (``kernels.rmsnorm_quant_fwd``), in those of its modes (QUANT_MODES); the
    plain forward and the other modes skip it; with ``plain_quant_only`` too it serves the plain
    norm's quantized calls alone (no residual: half the bytes of a fused row). With
    ``vector_typed_only`` it serves only plain calls that take 16-byte accesses (ALIGN is the
    vector), with the weight of x's dtype and the contract's numerics: the calls whose kernels at
    its config hold the row without spilling (select_forward_config's ``vector_typed``)."""

    act_bytes: int         # widest of x and residual, in bytes per element (2 or 4)
    h_max: int | None
    config: KernelConfig
    odd_h_only: bool = False
    quant_modes: tuple[int, ...] = ()
    vector_typed_only: bool = False
    plain_quant_only: bool = False

    def __post_init__(self):
        if self.plain_quant_only and not self.quant_modes:
            raise ValueError("a plain_quant_only row names its quant_modes")

    @property
    def quant_only(self) -> bool:
        """Whether the row serves the quantized forward alone."""
        return bool(self.quant_modes)

    def takes(self, quant: int, vector_typed: bool, plain: bool = False) -> bool:
        """Whether the row is open to a call of this kind, H aside: quant 0 for the plain forward,
        else the quantized forward's mode; vector_typed and plain as select_forward_config's. The one
        statement of the rows' flags, for the dispatch rule and for the AOT build's reachable kernels."""
        if self.plain_quant_only and not plain:
            return False
        if self.quant_only:
            return quant in self.quant_modes
        if self.vector_typed_only:
            return quant == 0 and vector_typed
        return True


def _memo(rule):
    """A dispatch rule remembered per argument list (types too: a bool is not the int it equals): the tables are
    constants, and the JIT asks a rule on every call, where a table's scan costs microseconds and a lookup a tenth of
    one."""
    return functools.lru_cache(maxsize=4096, typed=True)(rule)


# The quantized forward's modes: the QUANT constexpr, one specialization per mode (the values of the
# C ABI's addrmsnorm_quant_mode; 0 is the plain forward). Per token and per group are separate kernels:
# one kernel serving both carried the per-group code's registers into per-token calls (76 against 64 at
# H = 14336, half the occupancy; 87% of the roofline).
QUANT_STATIC, QUANT_PER_TOKEN, QUANT_PER_GROUP = 1, 2, 3
# Block-scaled formats (Blackwell's GEMM inputs; kernels.py states their arithmetic): one scale byte per
# block of BLOCK_QUANT_SIZE[mode] columns. They take the per-group mode's rows.
QUANT_NVFP4, QUANT_MXFP8, QUANT_MXFP4 = 4, 5, 6
BLOCK_QUANT_MODES = (QUANT_NVFP4, QUANT_MXFP8, QUANT_MXFP4)
BLOCK_QUANT_SIZE = {QUANT_NVFP4: 16, QUANT_MXFP8: 32, QUANT_MXFP4: 32}
# The quantized output's dtype per block mode (QUANT_DTYPES' names) and the scales' ("e4m3", "e8m0").
BLOCK_QUANT_DTYPE = {QUANT_NVFP4: "fp4e2m1", QUANT_MXFP8: "fp8e4m3", QUANT_MXFP4: "fp4e2m1"}
BLOCK_SCALE_DTYPE = {QUANT_NVFP4: "e4m3", QUANT_MXFP8: "e8m0", QUANT_MXFP4: "e8m0"}
# The quantized outputs' admission rules (validation.py's check_quant and src/validate.cpp's validate_quant, which
# reads them as kQuant*, generated by tools/aot_build.py): x of QUANT_ACTIVATION_DTYPES; H and every row stride
# multiples of QUANT_ALIGN elements and every tensor on a 16-byte boundary (what fp8 and int8 GEMMs consume);
# the per-group mode's groups of QUANT_GROUP_SIZES columns (the block formats' are BLOCK_QUANT_SIZE's).
QUANT_ACTIVATION_DTYPES = ("fp16", "bf16")
QUANT_ALIGN = 16
QUANT_GROUP_SIZES = (64, 128)
# The swizzled scale layout's tile: rows rounded up to 128, blocks to 4.
SWIZZLE_ROWS, SWIZZLE_BLOCKS = 128, 4
QUANT_MODES = (QUANT_STATIC, QUANT_PER_TOKEN, QUANT_PER_GROUP) + BLOCK_QUANT_MODES
_QUANT_ALL = {"quant_modes": QUANT_MODES}
# The fp4 epilogues (NVFP4, MXFP4): their e2m1 rounding and nibble packing make them instruction-bound,
# so they take half the warps of the rows below at 4096 and 8192 (twice the elements per thread, the
# row's reductions and addressing spread over more of them).
_QUANT_FP4 = {"quant_modes": (QUANT_NVFP4, QUANT_MXFP4)}
# The plain norm's static and per-token epilogues (no residual: 3 bytes a value for fp8 and int8, against the fused
# op's 7) want more bytes in flight per thread: half or a quarter of the fused rows' warps.
_PLAIN_FP8 = {"quant_modes": (QUANT_STATIC, QUANT_PER_TOKEN), "plain_quant_only": True}
_QUANT_ARGS = (0,) + QUANT_MODES  # select_forward_config's quant


def _single(block_h: int, rows: int, warps: int, weight_first: bool = False, evict_last: bool = True) -> KernelConfig:
    # evict_last: measured on every row (the note before the rows)
    return KernelConfig(block_h=block_h, rows_per_program=rows, num_warps=warps, looped=False,
                         weight_first=weight_first, evict_last=evict_last)


def _looped(chunk: int, warps: int, keep_h: bool = False) -> KernelConfig:
    return KernelConfig(block_h=chunk, rows_per_program=1, num_warps=warps, looped=True, keep_h=keep_h)


def _reread(chunk: int, warps: int) -> KernelConfig:
    return KernelConfig(block_h=chunk, rows_per_program=1, num_warps=warps, looped=True, reread=True)


# Widest H kept whole in registers. Above it each row is walked twice in chunks.
# Each thread then holds at most 32 fp32 values of h. Measured (bf16): at 16384 the single
# pass (89.8%) beats 4096- and 8192-wide loops (86.8%, 87.4%); at 32768 a single pass of 32 warps
# and a 16384-wide loop tie (87.8%, 87.7%), so the single pass stops at 16384.
SINGLE_PASS_MAX_H = 16384
# The quantized forward's widest single pass (a rule of its own below).
QUANT_SINGLE_PASS_MAX_H = 32768
# The quantized forward's widest loop without the h-kept L2 hint, for static scales (a rule of its own below).
QUANT_UNHINTED_LOOP_MAX_H = 65536

# The measurements behind the rows below were taken with devtools/tune.py (H200, in place, cold L2,
# N*H = 2**25); docs/perf-notes.md has them by topic. Within about 2 points of the
# roofline, differences are run-to-run noise, and the rows were left as they were.
#
# Evict-last: the single-pass rows load x and residual with the evict-last L2 hint, the hint of
# torch.compile's first read (docs/perf-notes.md, "Bulk single pass", and the row-by-row table), but the plain
# forward's 16-bit rows at 2048 < H <= 4096 and 6144 < H <= 8192 (measured on an H100, perf-notes "The candidate
# rows, measured").


def _small_h_rows(act_bytes: int) -> list:
    # Small H: several rows per program so that each program moves a few KB, not a few hundred bytes.
    # 4-byte streams move twice the bytes per row, so they need half the rows for the same tile bytes.
    # (Shared by the forward and backward tables.)
    scale = 2 if act_bytes == 2 else 1
    return [
        (64, _single(64, 16 * scale, 4)),
        (128, _single(128, 8 * scale, 4)),
        (256, _single(256, 4 * scale, 4)),
        (512, _single(512, 2 * scale, 4)),
        (1024, _single(1024, 1 * scale, 4)),
        (2048, _single(2048, 1, 4)),
    ]


def _table(large_h_rows) -> tuple[TableRule, ...]:
    """Both stream widths' rules: the shared small-H rows, then large_h_rows(act_bytes); a row is
    (h_max, config) or (h_max, config, {TableRule's flags})."""
    return tuple(TableRule(act_bytes, row[0], row[1], **(row[2] if len(row) > 2 else {}))
                 for act_bytes in (2, 4) for row in _small_h_rows(act_bytes) + large_h_rows(act_bytes))


def _forward_large_h_rows(act_bytes: int) -> list:
    # Each row's measurements: docs/perf-notes.md, "The forward table, row by row".
    return [
        # 2048 < H <= 4096: 16-bit streams one pass, the weight loaded with x (decode): the quantized forward 8
        # warps (the fp4 epilogues and the plain norm's fp8 ones 4), the plain forward its own row below; 4-byte
        # streams the re-read path (two passes, the second re-reading x and residual from L2).
        *([(4096, _single(4096, 1, 4, evict_last=False), _PLAIN_FP8),
           (4096, _single(4096, 1, 4, weight_first=True), _QUANT_FP4),
           (4096, _single(4096, 1, 8, weight_first=True), _QUANT_ALL)] if act_bytes == 2 else []),
        # The plain forward's 16-bit row: 4 warps without evict-last (the prefill chunks on an H100, perf-notes
        # "The candidate rows, measured"), the weight still first.
        (4096, _single(4096, 1, 4, weight_first=True, evict_last=False) if act_bytes == 2 else _reread(2048, 16)),
        # 4096 < H <= 6144, 16-bit streams: 8 warps, the weight after the reduction.
        *([(6144, _single(8192, 1, 8))] if act_bytes == 2 else []),
        # 6144 < H <= 8192: the quantized forward 16 warps (the fp4 epilogues 8, the plain norm's fp8 ones 4), the
        # weight after the reduction (its kernels would spill under MAX_REGISTERS otherwise); the plain forward 4
        # warps without evict-last (the prefill chunks on an H100).
        *([(8192, _single(8192, 1, 4, evict_last=False), _PLAIN_FP8),
           (8192, _single(8192, 1, 8), _QUANT_FP4),
           (8192, _single(8192, 1, 16), _QUANT_ALL),
           (8192, _single(8192, 1, 4, evict_last=False))] if act_bytes == 2 else
          [(8192, _single(8192, 1, 16))]),
        # Odd H of 16-bit streams up to 16384 (2-byte accesses): the re-read path, 2048-wide chunks.
        *([(SINGLE_PASS_MAX_H, _reread(2048, 16), {"odd_h_only": True})] if act_bytes == 2 else []),
        (SINGLE_PASS_MAX_H, _single(SINGLE_PASS_MAX_H, 1, 16)),
        # The quantized forward keeps rows up to 32768 whole (one pass of 32 warps, no evict-last):
        # a loop would reload h, and q would come from h rounded to bf16.
        *([(QUANT_SINGLE_PASS_MAX_H, _single(QUANT_SINGLE_PASS_MAX_H, 1, 32, evict_last=False),
            _QUANT_ALL)] if act_bytes == 2 else []),
        # The plain forward at 16384 < H <= 32768, for vector-typed calls only (16-byte rows, the weight
        # of x's dtype, the contract's numerics): one pass of 16 warps; other calls' kernels would spill.
        *([(QUANT_SINGLE_PASS_MAX_H, _single(QUANT_SINGLE_PASS_MAX_H, 1, 16), {"vector_typed_only": True})]
          if act_bytes == 2 else []),
        # The quantized forward above 32768, by mode: static loops in 16384-wide chunks without the
        # h-kept hint up to 65536; per group and the block formats in 8192-wide chunks with it.
        *([(QUANT_UNHINTED_LOOP_MAX_H, _looped(16384, 32), {"quant_modes": (QUANT_STATIC,)}),
           (None, _looped(8192, 32, keep_h=True), {"quant_modes": (QUANT_PER_GROUP,) + BLOCK_QUANT_MODES})]
          if act_bytes == 2 else []),
        # Everything else loops: 16384-wide chunks of 32 warps, h kept in L2 for the second pass.
        (None, _looped(16384, 32, keep_h=True)),
    ]


FORWARD_TABLE: tuple[TableRule, ...] = _table(_forward_large_h_rows)

# Element sizes the kernels accept, in bytes: fp16/bf16 and fp32.
SUPPORTED_ITEMSIZES = (2, 4)

# The dtype dimensions of the table, for the ahead-of-time build. The order of DTYPES is the order
# of the C ABI's addrmsnorm_dtype enum. Each rule's act_bytes admits these (x, residual) pairs:
# residual is x's dtype, or fp32 (an fp32 residual stream). The weight may be any dtype.
DTYPES = ("fp16", "bf16", "fp32")
ACTIVATION_PAIRS = {
    2: (("fp16", "fp16"), ("bf16", "bf16")),
    4: (("fp32", "fp32"), ("fp16", "fp32"), ("bf16", "fp32")),
}
WEIGHT_DTYPES = DTYPES

# Weights. The forward is typed for a weight of x's dtype (a checkpoint's) and for an fp32 weight
# (mixed-precision training); any other weight (a bf16 weight beside fp16 x, a 16-bit weight beside
# fp32 x) runs the "w16" variant, which loads the weight's int16 bits and converts them as the
# runtime weight_dtype says. The backward reads the weight through one variant for every dtype.
# The weight's type and HF numerics stay specializations (a runtime branch or select cost 9-14% and
# registers: docs/perf-notes.md, "Specializations and runtime arguments"), and "w16" takes only the
# two ends of the alignment classes. rstd on/off is a runtime argument, stored last in a branch.
WEIGHT_W16 = "w16"


def forward_weight_arg(x_dtype: str, weight_dtype: str) -> str:
    """The forward's weight pointer type for this call: the weight's own dtype if it is x's or
    fp32, else WEIGHT_W16 (its int16 bits)."""
    return weight_dtype if weight_dtype in (x_dtype, "fp32") else WEIGHT_W16


def forward_weight_args(x_dtype: str) -> tuple[str, ...]:
    """The weight pointer types the forward is built with, for x of dtype x_dtype."""
    return tuple(dict.fromkeys((x_dtype, "fp32", WEIGHT_W16)))


# Numerics. "contract" rounds y once; "hf" reproduces HF RMSNorms' roundings (kernels.py). HF
# models carry the residual and the weight in the model dtype, so "hf" takes residual and weight of
# x's dtype only (validation.py and the C ABI check it), which also keeps the AOT build from
# compiling variants nobody calls.
NUMERICS = ("contract", "hf")
# The plain norm has a third: "hf_round_once", HF's norms that multiply by the weight in fp32 and
# round once whatever the weight's offset (OLMo 2's `(weight * (h * rstd)).to(dtype)`), which "hf"
# gives only with an offset. Its torch operators take the index into this tuple.
PLAIN_NUMERICS = ("contract", "hf", "hf_round_once")
HF_ACTIVATION_PAIRS = (("fp16", "fp16"), ("bf16", "bf16"), ("fp32", "fp32"))

# The kernel's HF_NUMERICS constexpr. HF has two RMSNorm forms, told apart by the weight: stored as
# is, LlamaRMSNorm's `weight * (h * rstd).to(dtype)` (two roundings); stored as an offset, Gemma's
# `(h * rstd * (1 + weight.float())).to(dtype)` (one). "hf" with weight_offset != 0 is the second.
# On fp32 the rounding to the activation dtype is exact, so both are HF_LLAMA there and the build
# has no HF_GEMMA kernels for fp32.
CONTRACT, HF_LLAMA, HF_GEMMA = 0, 1, 2
HF_GEMMA_ACTIVATION_PAIRS = (("fp16", "fp16"), ("bf16", "bf16"))


def numerics_mode(hf: bool, weight_offset: float, x_itemsize: int, round_once: bool = False) -> int:
    """HF_NUMERICS for a call (CONTRACT, HF_LLAMA or HF_GEMMA); tools/aot_build.py generates the C++
    runtime's table of it (indexed by whether the offset is nonzero as fp32). round_once (the plain
    norm's "hf_round_once") asks for HF_GEMMA's single rounding with any offset."""
    if not hf:
        return CONTRACT
    # abs(w) > 2**-150: the offset is nonzero as fp32, the type the kernel and the C ABI take it in.
    once = round_once or abs(weight_offset) > 2.0 ** -150
    return HF_GEMMA if once and x_itemsize == 2 else HF_LLAMA

# Quantized outputs (kernels.rmsnorm_quant_fwd): QUANT 1 (static scale), 2 (per token)
# and 3 (per group of 64 or 128 columns, the group size a runtime argument), for 16-bit activations
# with residual and weight of their dtype, and int8 or float8_e4m3fn targets. fp8 and int8 GEMMs take
# rows of 16-element multiples, 16-byte aligned, and the quantized forward is built for that
# alignment alone (the C runtime refuses other rows): 2 targets x 2 dtypes x the modes that
# reach each of the 14 16-bit configs serving even rows (11 single passes in every mode, B8192 and
# B32768 among them for the quantized forward alone; the loop without keep_h, static; the 8192-wide
# loop, per group; the plain forward's loop, static and per token) = 148 kernels per arch (aot_build
# builds the reachable ones). The order of QUANT_DTYPES is the C ABI's addrmsnorm_quant_dtype.
QUANT_DTYPES = ("int8", "fp8e4m3", "fp4e2m1")


def quant_dtypes_of(mode: int) -> tuple[str, ...]:
    """The quantized output dtypes (QUANT_DTYPES' names) a mode writes."""
    return (BLOCK_QUANT_DTYPE[mode],) if mode in BLOCK_QUANT_MODES else ("int8", "fp8e4m3")
# The QUANT constexpr (QUANT_MODES, above the table: its rows may serve some modes alone).


# Register caps (ptxas maxnreg), per arch and kernel kind ("forward", "quant_forward" or "backward"), by
# (block_h, rows_per_program, num_warps): a cap raises the programs that fit on an SM
# (65536 registers per SM) where the kernel would otherwise hold more registers than it needs. Only
# for the arch it was measured on, and only where no kernel of the config spills under the cap: the
# AOT build refuses a capped kernel with stack, and tests/test_aot.py compiles every capped kernel.
# "quant_forward": the plain forward's programs per SM at that config. Per-token int8 at block 8192 with 16
# warps held 49 registers (2 programs per SM against 3) and reached 88% of the roofline at 16384 x
# 7168; capped at 40, 98.6%. Block 4096 with 8 warps would spill at 40 on sm_90, and block 8192 with
# 8 warps at 64 (fp16 -> int8 per token on sm_90, fp8 per token on sm_100), so per-token int8 at
# H = 5120 keeps its 71 registers.
# "forward": none yet. devtools/tune.py caps measures candidates (MAX_REGISTERS_OVERRIDE below).
MAX_REGISTERS = {
    90: {
        "quant_forward": {(128, 16, 4): 40, (512, 4, 4): 48, (2048, 1, 4): 40, (8192, 1, 16): 40},
        "forward": {},
        "backward": {},
    },
}


def max_registers(kind: str, cfg: KernelConfig, arch: int) -> int | None:
    """The maxnreg kernels of kind ("forward", "quant_forward" or "backward") are compiled with at cfg for
    arch (e.g. 90), or None (no cap)."""
    return MAX_REGISTERS.get(arch, {}).get(kind, {}).get((cfg.block_h, cfg.rows_per_program, cfg.num_warps))


def quant_kernel_mode(static: bool, group_size: int, q: str = "") -> int:
    """The QUANT constexpr of a call: static, per token (group_size 0) or per group; fp4 outputs (q
    "fp4e2m1") NVFP4 (group_size 16, static: the global scale) or MXFP4 (32); fp8 with group_size 32 MXFP8."""
    if q == "fp4e2m1":
        return QUANT_NVFP4 if group_size == BLOCK_QUANT_SIZE[QUANT_NVFP4] else QUANT_MXFP4
    if group_size == BLOCK_QUANT_SIZE[QUANT_MXFP8] and q == "fp8e4m3":
        return QUANT_MXFP8
    return QUANT_STATIC if static else (QUANT_PER_GROUP if group_size else QUANT_PER_TOKEN)


QUANT_ACTIVATION_PAIRS = (("fp16", "fp16"), ("bf16", "bf16"))
QUANT_ALIGNED_POINTER_ARGS = ("x_ptr", "residual_ptr", "weight_ptr", "q_ptr", "residual_out_ptr", "y_ptr",
                              "post_weight_ptr", "z_ptr")
# float8_e4m3fn is a type of sm_89 and newer (Triton refuses it below): sm_80 gets the int8 kernels only.
QUANT_FP8_MIN_ARCH = 89


def quant_built_for(q: str, arch: int) -> bool:
    """Whether the quantized forward writing q is built for arch (e.g. 90). fp4 too needs sm_89: NVFP4's
    scales are e4m3 (and one rule for the fp4 formats keeps the C ABI's refusal one sentence)."""
    return q == "int8" or arch >= QUANT_FP8_MIN_ARCH

# Alignment. The forward is compiled once per alignment class: ALIGN = 1, and each ALIGN whose
# accesses of the narrower stream are 8 or 16 bytes wide (4 and 8 elements for 16-bit streams, 2 and 4
# for fp32). 4-byte accesses (ALIGN 2 of 16-bit streams, for H = 2 mod 4) were dropped to save
# kernels: no measurement showed them to help, and no shape of the report takes them; such rows run
# ALIGN = 1. ALIGN > 1 promises that the five tensor
# pointers are 16-byte aligned (Triton's tt.divisibility=16 on them) and that H and every row stride
# are multiples of ALIGN elements, so every row starts on an ALIGN-element boundary and the kernel can
# load and store ALIGN elements at a time. bf16 rows of H = 4100 (8200 bytes) take 8-byte accesses
# (ALIGN = 4) rather than 2-byte ones. ALIGN = 1 promises nothing. The backward has the two ends only
# (1 and the vector). The JIT launcher and the AOT runtime pick the class with `align_elems` and
# `backward_align`, so that both compile the same specialization for the same call.
ALIGNED_POINTER_ARGS = ("x_ptr", "residual_ptr", "weight_ptr", "out_ptr", "residual_out_ptr", "weight2_ptr",
                        "post_weight_ptr", "z_ptr", "b_ptr", "b_weight_ptr", "b_out_ptr", "cos_ptr", "sin_ptr")
ALIGNMENT_BYTES = 16


def vector_elems(x_itemsize: int, residual_itemsize: int) -> int:
    """Elements in one 16-byte access of the narrower activation stream."""
    return ALIGNMENT_BYTES // min(x_itemsize, residual_itemsize)


# The sandwich norm's, the gated norm's and the pair's kernels are built for one ALIGN alone, the 16-bit
# vector's: H (a gated group, the pair's widths) and every row stride in multiples of 8 elements, whole 16-byte
# accesses at every dtype (two for fp32 groups). validation.py reads it, and the C runtime the copy that
# tools/aot_build.py generates (kVariantAlign), as it does each variant's dtypes and built quantized outputs.
VARIANT_ALIGN = ALIGNMENT_BYTES // 2


MIN_ACCESS_BYTES = 8  # the narrowest vector access an ALIGN class > 1 is built for


def align_classes(x_itemsize: int, residual_itemsize: int, ends_only: bool = False) -> tuple[int, ...]:
    """The ALIGN values the forward is built for. HF numerics (HF checkpoints' widths are multiples
    of the vector) and the "w16" weight (a rare pairing) have only the two ends: ends_only."""
    v = vector_elems(x_itemsize, residual_itemsize)
    if ends_only:
        return (1, v)
    narrow = min(x_itemsize, residual_itemsize)
    return (1,) + tuple(1 << k for k in range(1, v.bit_length()) if (1 << k) * narrow >= MIN_ACCESS_BYTES)


def align_elems(pointers, H: int, strides, x_itemsize: int, residual_itemsize: int, ends_only: bool = False) -> int:
    """ALIGN for a forward call: the largest class that divides H and every row stride, if every
    pointer is 16-byte aligned; else 1. Pass stride 0 for a single row (it has no stride)."""
    if not all(p % ALIGNMENT_BYTES == 0 for p in pointers):
        return 1
    for a in reversed(align_classes(x_itemsize, residual_itemsize, ends_only)):
        if H % a == 0 and all(s % a == 0 for s in strides):
            return a
    return 1


def backward_align(pointers, H: int, strides, x_itemsize: int, residual_itemsize: int) -> int:
    """ALIGN for a backward call: the vector width, or 1."""
    v = vector_elems(x_itemsize, residual_itemsize)
    if all(p % ALIGNMENT_BYTES == 0 for p in pointers) and H % v == 0 and all(s % v == 0 for s in strides):
        return v
    return 1


# Programmatic dependent launch: the forward waits on the previous grid (griddepcontrol) on archs
# that have it. The kernels are always compiled with it there; whether a launch uses it is the
# caller's choice (the launch attribute), off by default.
PDL_MIN_ARCH = 90


def pdl_compiled(arch: int) -> bool:
    """Whether the forward for this arch (e.g. 90) has the grid-dependency wait compiled in."""
    return arch >= PDL_MIN_ARCH


# ----- backward --------------------------------------------------------------------------------
# The backward kernel takes the same KernelConfig fields (a config is a tile shape), from its own
# rows: it holds dy, h, n and g for a tile where the forward holds h, so it leaves the single pass
# at a narrower H (8192 for 4-byte streams, 16384 for 16-bit ones, whose widest pass spills; below).
#
# Its grid is persistent: programs_per_sm programs per SM, each walking a contiguous block of rows
# and summing its dweight partial in registers. programs_per_sm is what fits on an SM at once (by
# registers, shared memory and threads, for the 16-byte-aligned kernels of every dtype pair, on
# each default arch: sm_80, sm_90, sm_100; tools/aot_build.py refuses a build of those archs where it
# does not fit): planning more than fit runs the grid in two waves.
# stages > 1 pipelines the row loop (Triton's tl.range num_stages: the next rows' dy, h and
# dresidual_out are fetched to shared memory while this row is computed), within sm_80's 163 KB of
# shared memory per program. The looped path reads each program's rows twice (pass 1, then chunk by
# chunk); 16-bit streams keep rows up to 16384 in one pass of 32 warps instead, which spills (below).
# The measurements: docs/perf-notes.md, "The backward".
BACKWARD_SINGLE_PASS_MAX_H = 8192  # 4-byte streams loop above it; 16-bit ones above BACKWARD_SINGLE_PASS_MAX_H_16

# 16-bit streams at 8192 < H <= 16384: one 32-warp program per SM holding the row (dy, h, and the
# dweight partial) in 64 registers, with 112-120 bytes of stack per thread on sm_80/90/100 (272-280
# at ALIGN 1); it beat the loop and every config that does not spill (docs/perf-notes.md).
BACKWARD_SINGLE_PASS_MAX_H_16 = 16384
# The backward configs whose kernels may use stack (tools/aot_build.py refuses stack elsewhere): each
# was measured against every config of its rows that does not spill, and won.
BACKWARD_SPILLS_MEASURED = {(BACKWARD_SINGLE_PASS_MAX_H_16, 1, 32)}


def _bwd(block_h: int, rows: int, warps: int, stages: int, programs_per_sm: int) -> KernelConfig:
    return KernelConfig(block_h=block_h, rows_per_program=rows, num_warps=warps, looped=False, stages=stages,
                         programs_per_sm=programs_per_sm)


def _bwd_looped(chunk: int, warps: int, programs_per_sm: int) -> KernelConfig:
    return KernelConfig(block_h=chunk, rows_per_program=1, num_warps=warps, looped=True,
                         programs_per_sm=programs_per_sm)


def _backward_rows(act_bytes: int) -> list:
    if act_bytes == 2:
        return [
            (64, _bwd(64, 32, 4, 2, 4)),
            (128, _bwd(128, 16, 4, 2, 4)),
            (256, _bwd(256, 8, 4, 2, 4)),
            (512, _bwd(512, 4, 4, 2, 4)),
            (1024, _bwd(1024, 2, 4, 2, 5)),
            (2048, _bwd(2048, 1, 4, 2, 4)),
            (4096, _bwd(4096, 1, 8, 3, 2)),
            (BACKWARD_SINGLE_PASS_MAX_H, _bwd(8192, 1, 32, 3, 1)),
            (BACKWARD_SINGLE_PASS_MAX_H_16, _bwd(BACKWARD_SINGLE_PASS_MAX_H_16, 1, 32, 1, 1)),
            (None, _bwd_looped(4096, 8, 2)),
        ]
    # 4-byte streams (fp32, or an fp32 residual beside 16-bit x): half the rows per program at small
    # H. At 4096 the 16-bit config would fit one 8-warp program per SM, so 32 warps; at 8192, 32
    # warps spill (64 registers at most) and 3 stages need more than sm_80's shared memory.
    # Not measured on a GPU beyond the test suites: these follow the 16-bit rows within the limits.
    return [
        (64, _bwd(64, 16, 4, 2, 4)),
        (128, _bwd(128, 8, 4, 2, 4)),
        (256, _bwd(256, 4, 4, 2, 4)),
        (512, _bwd(512, 2, 4, 2, 5)),
        (1024, _bwd(1024, 1, 4, 2, 7)),
        (2048, _bwd(2048, 1, 8, 2, 3)),
        (4096, _bwd(4096, 1, 32, 3, 1)),
        (BACKWARD_SINGLE_PASS_MAX_H, _bwd(8192, 1, 16, 2, 1)),
        (None, _bwd_looped(4096, 8, 1)),
    ]


BACKWARD_TABLE: tuple[TableRule, ...] = tuple(
    TableRule(act_bytes=act_bytes, h_max=h_max, config=cfg)
    for act_bytes in (2, 4) for h_max, cfg in _backward_rows(act_bytes))

# The dweight reduction: tile of partials x columns, and its warps. Each program sums its columns
# over every partial in a fixed order, in ceil(partials / BLOCK_P) dependent steps: tall, narrow
# tiles keep the steps few (1-2 for a grid of 132 SMs x up to 7 programs) and the programs many
# (H / 16); 512 partials a step read a 2-programs-per-SM grid in one (166 registers, no spill on
# sm_80/90/100). The measurements: docs/perf-notes.md, "The backward".
DWEIGHT_BLOCK_P, DWEIGHT_BLOCK_C, DWEIGHT_WARPS = 512, 16, 4


@_memo
def select_backward_config(H: int, x_itemsize: int, residual_itemsize: int) -> KernelConfig:
    """The backward's dispatch rule: as ``select_forward_config``, over ``BACKWARD_TABLE``."""
    return _select(BACKWARD_TABLE, H, x_itemsize, residual_itemsize)


# The rotation's backward (kernels.py's rmsnorm_bwd with ROPE) holds cos, sin and dy beside h: a table of its own,
# for 16-bit heads up to QK_MAX_HEAD_DIM. The vector kernels (_bwd_rope_halves) hold a row as its two halves,
# [rows, BLOCK_H / 2] tiles, and each such tile has at least as many elements as its warps' lanes hold in 16-byte
# vectors (2 warps x 32 lanes x 8 = 512): a smaller tile is replicated across lanes, and then several lanes write
# the same dweight partial to the same word of shared memory (compute-sanitizer's racecheck reported those
# writes as hazards, with tiles of a quarter of that). Swept on an H100 (T = 8192 of 32 + 8 heads of 128 and of
# 16 + 8 of 256, cos and sin by column, the two parts' passes; perf-notes "The rotation"): 2 warps, 8 programs an
# SM (128 registers a thread) against 4 warps and 4: 1667 against 1334 GB/s at 128, 1343 against 909 at 256.
# 64 and 512 keep the same tile size unmeasured. The ALIGN 1 kernel (GPT-J, partial rotations) takes a row's grid
# and workspace but walks its rows one at a time (kernels.py's rmsnorm_bwd: racecheck's hazards again otherwise).
# tools/aot_build.py generates the C++ rule from it.
ROPE_BACKWARD_TABLE = tuple(TableRule(2, h, cfg) for h, cfg in (
    (64, _bwd(64, 16, 2, 2, 8)),
    (128, _bwd(128, 8, 2, 2, 8)),
    (256, _bwd(256, 4, 2, 2, 8)),
    (512, _bwd(512, 2, 2, 2, 8)),  # QK_MAX_HEAD_DIM (below)
))


@_memo
def select_rope_backward_config(H: int) -> KernelConfig:
    """The rotation's backward config for 16-bit heads of H <= QK_MAX_HEAD_DIM columns."""
    return _select(ROPE_BACKWARD_TABLE, H, 2, 2)


def rope_backward_configs() -> list:
    """The rotation's backward kernels' configs, in the table's order (its last row is QK_MAX_HEAD_DIM wide)."""
    assert ROPE_BACKWARD_TABLE[-1].h_max == QK_MAX_HEAD_DIM
    return list(dict.fromkeys(r.config for r in ROPE_BACKWARD_TABLE))


def backward_programs(n_rows: int, cfg: KernelConfig, n_sms: int) -> int:
    """Programs of the persistent backward grid (also the number of dweight partials)."""
    blocks = -(-n_rows // cfg.rows_per_program)
    return max(1, min(blocks, n_sms * cfg.programs_per_sm))


def backward_workspace_floats(n_rows: int, H: int, cfg: KernelConfig, n_sms: int) -> int:
    """fp32 elements of backward workspace: the dweight partials, then (looped) a mean per row."""
    return backward_programs(n_rows, cfg, n_sms) * H + (n_rows if cfg.looped else 0)


# The plain norm's own rows for 16-bit x (RESIDUAL off: it reads x alone, half the fused forward's bytes
# per element, so the fused rows' tiles leave half the bytes in flight; at 16384 x 4096 bf16 the fused
# row ran 78% of the roofline). Measured with devtools/tune.py plain (H200, bf16, N * H = 2**26 into
# fresh outputs, % of the same-run roofline, 4228 GB/s): fewer warps per tile, 32 to 64 elements per
# thread, win everywhere:
#   128: r16 w2 96.7 (the fused row's r16 w4 87.7)   512: r4 w1 96.3   1024: r2 w2 96.9 (r1 w4 76.7)
#   2048: r1 w4 97.0 (w8 78.2)   2880 / 3000: b4096 w4 91.9 / 93.0   4096: w4 95.8 (w8 92.3)
#   5120 / 7168 / 8192: b8192 w4 82.0 / 94.7 / 94.7 (w8 80.9 / - / 95.1)   4100: b8192 w8 70.0
#   odd 11111: looped 4096 w4, x kept in L2, 62.7 (single b16384 w8 37.5; re-read 2048 w16 44.9)
#   14336 / 16384: b16384 w8 88.1 / 91.9 (w16 81.8)   32768: single b32768 w16 81.7 (loops <= 73.2)
#   65536: looped 16384 w8, x kept, 69.7 (the loop reads x twice: 6 bytes per element of 4 moved)
# 64 and 256 follow their neighbours' 32 elements per thread (not measured). fp32 x moves the fused
# 16-bit forward's bytes per element and keeps the fused table's 4-byte rows (not tuned for the plain
# norm). The quantized forward's plain calls take FORWARD_TABLE's rows, their own (plain_quant_only) where
# measured.
PLAIN_TABLE = tuple(TableRule(2, *row) for row in (
    (64, _single(64, 32, 2)),
    (128, _single(128, 16, 2)),
    (256, _single(256, 8, 2)),
    (512, _single(512, 4, 1)),
    (1024, _single(1024, 2, 2)),
    (2048, _single(2048, 1, 4)),
    (4096, _single(4096, 1, 8, evict_last=False)),
    (16384, _looped(4096, 4, keep_h=True), True),  # odd H
    (8192, _single(8192, 1, 4, evict_last=False)),
    (16384, _single(16384, 1, 8)),
    (32768, _single(32768, 1, 16), False, (), True),  # vector-typed calls only: others would spill
    (32768, _looped(16384, 8, keep_h=True)),
    # Above 32768: 8192-wide chunks with 32 warps a row. tune.py plain, bf16 into fresh outputs, % of the
    # same-run roofline (H200, 2026-12-03): 1024 x 65536: chunk 8192 w32 h kept 74.1%, 16384 w32 h kept
    # 62.7%, 16384 w8 h kept (the row above) 66.6%; 512 x 131072: 8192 w32 h kept 61.9%, 16384 w32 h
    # kept 65.7%, 16384 w8 h kept 55.6%. One row for both (a row is 24 kernels per arch).
    (None, _looped(8192, 32, keep_h=True)),
))


# The QK norm (kernels.py's SPLIT: a token's q and k heads as one group of rows, two weights) is built
# for head_dim up to 512 (the single-pass rows of PLAIN_TABLE up to 512), 16-bit x, and the weight of x's
# dtype or fp32, at ALIGN 1 and the vector: 4 configs x 16 kernels per arch. In one group the q and k
# heads ran 90.6% of the roofline at T = 8192 (32 + 8 heads of 128, bf16, in place), where two parts on
# a second grid axis ran 60.3% (devtools/tune.py plain).
QK_MAX_HEAD_DIM = 512

# The rotation (kernels.py's ROPE, with GROUPED and SPLIT: one kernel for the QK norm and the plain norm of
# (tokens, heads, head_dim) views) on the QK norm's single-pass rows: 16-bit heads, weights of their dtype or
# fp32, the angles fp32 or the heads' dtype, no positions (cos and sin a token) or int32 or int64 positions
# into a cos_sin_cache; HF's numerics with cos and sin of the heads' dtype alone. The style and rotary_dim
# are runtime arguments. ROPE_VARIANTS lists (angle dtype, positions) in the order of the C runtime's index.
ROPE_STYLES = ("neox", "gptj")
ROPE_DTYPES = ("fp16", "bf16")
POSITION_DTYPES = ("int32", "int64")
ROPE_VARIANTS = tuple((angles, pos) for angles in ("x", "fp32") for pos in (None,) + POSITION_DTYPES)
# Weights of the heads' dtype with every variant; float32 weights (training under autocast, with HF's cos and sin)
# with cos and sin alone: with positions into a cos_sin_cache (vLLM's serving call) no float32-weight kernel is
# built, and the one validator refuses the call (validate.cpp's validate_rope).
ROPE_FP32_WEIGHTS_WITH_POSITIONS = False
# The rotation's vector-aligned kernels (ALIGN > 1: the QK norm's rows) rotate NeoX's halves with every column of
# the head rotated (rotary_dim = head_dim, as Llama, Qwen, Mistral and Gemma rotate): they read a head as its two
# halves, so that a thread holds both columns of each pair. Every other call (GPT-J's interleaved pairs, a partial
# rotation) takes the ALIGN 1 kernel, which reads each column's partner at its index: rope_on_vector is the rule,
# which tools/aot_build.py generates for the C runtime (forward.cpp and backward.cpp call it).
ROPE_VECTOR_STYLE = 0


def rope_on_vector(style: int, rotary_dim: int, head_dim: int) -> bool:
    """Whether a rotation may take the vector kernels (given its heads' and angles' alignment)."""
    return style == ROPE_VECTOR_STYLE and rotary_dim == head_dim


# Heads off the 16-byte vector (ALIGN 1: qkv's start, its row stride or head_dim not a multiple of 8 elements,
# which no model's projection gives) take one config for every head_dim: a head a program on one warp. At
# ALIGN 1 every access of the tile is a scalar instruction, and the rotation adds three gathers (the partner
# column, cos, sin), so a kernel's code grows with its elements per thread: the QK norm's four rows at ALIGN 1
# were 80 kernels of 6.7 MiB of sm_90's cubins and 8.2 of sm_100's (tools/aot_build.py, 2026-12-06), which
# put sm_100 over AOT_MAX_MIB_PER_ARCH. Not tuned: the aligned calls are the ones that matter.
ROPE_MISALIGNED_TABLE = (TableRule(2, None, _single(QK_MAX_HEAD_DIM, 1, 1)),)


# The rotation's vector kernels (_rope_halves) read each head once, as its two halves, with their weights and
# angles in fp32. Swept on an H100 (issue 66's shapes, a cache; perf-notes "The rotation"): at 128, 16 rows on 4
# warps ran at 2639 GB/s at T = 65536 (32 + 8 heads), 8 on 2 warps 2628, 16 on 2 warps 2611, 32 on 4 2598, 16 on 8
# 2345; at 256, 8 rows on 4 warps 2565, 4 on 2 2539, 16 on 4 2512 (the sweep ran the kernel's first arrangement, 64
# registers on sm_90, where it now holds 48 at 16 x 128: the report's rows are this one's). 64 and 512 keep the same
# tile size unmeasured.
# The vector kernels take no eviction hint (evict_last made no difference there); the ALIGN 1 kernel's table is
# ROPE_MISALIGNED_TABLE. tools/aot_build.py generates the C++ rule.
ROPE_TABLE = tuple(TableRule(2, h, cfg) for h, cfg in (
    (64, _single(64, 32, 4)),
    (128, _single(128, 16, 4)),
    (256, _single(256, 8, 4)),
    (512, _single(512, 4, 4)),  # QK_MAX_HEAD_DIM
))


@_memo
def select_rope_config(H: int, aligned: bool) -> KernelConfig:
    """The rotation's config: ROPE_TABLE's for heads on the 16-byte vector (ALIGN > 1), ROPE_MISALIGNED_TABLE's
    otherwise."""
    return _select(ROPE_TABLE if aligned else ROPE_MISALIGNED_TABLE, H, 2, 2)


# The backward's weight_dtype for the weightless norm (beside the addrmsnorm_dtype codes 0-2): no weight
# is read, every w is 1 (kernels._load_weight_any). The C runtime has it as kWeightlessDtype.
WEIGHTLESS_DTYPE = 3


# The sandwich norm (kernels.py's SANDWICH: x normalized with post_weight before the add) has rows of its
# own, few because each is 6 kernels per arch (fp16 and bf16 x, the weights of x's dtype, vector-aligned
# rows, the contract and HF's two forms): the fused table's would have been 224 kernels, 4 MiB on sm_90,
# which sm_100's share of the AOT budget cannot hold. The single pass holds x's row and h's: on the fused
# op's rows 79 registers at 4096 (8 warps, weight first; the fused op 40) and 115 at 8192 (8 warps; 61).
# These rows give each thread at most 16 elements of a row: 64 registers at 4096 and 8192, 60 in the loop
# (sm_90, bf16, no stack). Not yet tuned on the GPU.
SANDWICH_TABLE = tuple(TableRule(2, *row) for row in (
    (256, _single(256, 8, 4)),
    (1024, _single(1024, 2, 4)),
    (2048, _single(2048, 1, 4)),
    (4096, _single(4096, 1, 8)),
    (8192, _single(8192, 1, 16)),
    (None, _looped(8192, 16, keep_h=True)),
))
# The sandwich norm's calls: 16-bit x, residual and weights of x's dtype, rows of 16-byte multiples on
# 16-byte boundaries (validation.check_forward and the C runtime refuse others).
SANDWICH_DTYPES = ("fp16", "bf16")


# The sandwich norm's quantized outputs (y into a GEMM's input): the modes and q dtypes built on its rows,
# fp8 static, per token and per group, NVFP4 and MXFP8 (SANDWICH_QUANT): 5 kernels a row
# and dtype, 60 per arch (sm_80: none, having no fp8).
SANDWICH_QUANT = ((QUANT_STATIC, "fp8e4m3"), (QUANT_PER_TOKEN, "fp8e4m3"), (QUANT_PER_GROUP, "fp8e4m3"),
                  (QUANT_NVFP4, "fp4e2m1"), (QUANT_MXFP8, "fp8e4m3"))


@_memo
def select_sandwich_config(H: int, x_itemsize: int) -> KernelConfig:
    """The sandwich norm's config: the row of SANDWICH_TABLE that admits H (x_itemsize 2)."""
    return _select(SANDWICH_TABLE, H, x_itemsize, x_itemsize)


# The gated norm (kernels.py's GATED: Qwen3-Next's and Mamba2's rmsnorm with a silu gate of z, over groups
# of a row) is the plain norm's single pass over a group, z's group read beside x's: rows of its own, each
# 6 kernels per arch (fp16, bf16 and fp32 x and z, weights of x's dtype, vector-aligned rows, the contract
# and HF's form). A group wider than the last row is refused (GATED_MAX_GROUP, the C runtime's rule): the families'
# groups are 128 (Qwen3-Next's value heads) to 8192 (Mamba2's one group of d_inner). Each thread holds at
# most 16 elements of x and of z; fp32 x (training without autocast) takes the same rows. Swept on an H100
# (docs/perf-notes.md, "The gated norm's rows on an H100"); no row changed yet. The looped path gates too (kernels.py's _looped_row with GATED: a group walked in chunks, z and the
# weight read again in the second pass), a candidate for the widest groups (devtools/tune.py variants --extra
# l<chunk>w<warps>); no row takes it until it is measured, and the gated quantized outputs stay single-pass.
_GATED_ROWS = (
    (128, _single(128, 16, 4)),
    (256, _single(256, 8, 4)),
    (512, _single(512, 4, 4)),
    (1024, _single(1024, 2, 4)),
    (2048, _single(2048, 1, 4)),
    (4096, _single(4096, 1, 8)),
    (None, _single(8192, 1, 16)),
)
GATED_TABLE = tuple(TableRule(act, *row) for act in (2, 4) for row in _GATED_ROWS)
GATED_MAX_GROUP = 8192  # GATED_TABLE's widest row
GATED_DTYPES = ("fp16", "bf16", "fp32")
# The gate's activations (the C ABI's addrmsnorm_gate_activation): silu, as every family using the gated
# norm has it; the field leaves room for others.
GATE_ACTIVATIONS = ("silu",)


# The gated norm's quantized outputs (out_proj's input): fp8 static at any group, per token where the group is
# the row, on GATED_TABLE's 16-bit rows: 2 kernels a row and dtype, 28 per arch (none on sm_80).
GATED_QUANT = ((QUANT_STATIC, "fp8e4m3"), (QUANT_PER_TOKEN, "fp8e4m3"))


@_memo
def select_gated_config(group_size: int, x_itemsize: int) -> KernelConfig:
    """The gated norm's config: the row of GATED_TABLE that admits the group (validation refuses wider)."""
    return _select(GATED_TABLE, group_size, x_itemsize, x_itemsize)


# The pair (kernels.py's PAIR: two parts of the same rows, of two widths, in one launch; MLA's q and kv latents,
# 1536 + 512) runs the plain norm's single pass on the tile of the wider part: PLAIN_TABLE's 16-bit single-pass
# rows up to PAIR_MAX_WIDTH (the last unbounded here; validation refuses wider parts). 4 kernels a row and pack
# (PAIR_PACKS, below) per arch: fp16 and bf16 x with weights of its dtype, vector-aligned rows, the contract and HF's
# Llama form.
PAIR_MAX_WIDTH = 8192
PAIR_TABLE = tuple(
    TableRule(2, r.h_max if r.h_max < PAIR_MAX_WIDTH else None, r.config) for r in PLAIN_TABLE
    if r.act_bytes == 2 and not (r.odd_h_only or r.vector_typed_only or r.quant_only or r.config.looped)
    and r.h_max is not None and r.h_max <= PAIR_MAX_WIDTH)
PAIR_DTYPES = ("fp16", "bf16")


@_memo
def select_pair_config(width: int, x_itemsize: int) -> KernelConfig:
    """The pair's config: the row of PAIR_TABLE that admits the wider part (x_itemsize 2)."""
    return _select(PAIR_TABLE, width, x_itemsize, x_itemsize)


# The pair's narrower part runs in a tile of its own width (kernels.py's PAIR_PACK): the launchers put it second, and
# its programs take PAIR_PACK of its rows in a tile of block_h / PAIR_PACK columns where the wider part's take one
# of block_h, as many elements a program. In the wider part's tile the narrower's columns past its width were masked
# lanes: MLA's 512-wide kv latent beside the 1536-wide q latent filled a quarter of a 2048-wide tile (MiniCPM3's
# 256 beside 768 likewise). A pair config is built at each pack whose tile is at least PAIR_MIN_PACKED_WIDTH wide
# (aot_build.py's _pair_specs): 24 kernels an arch more, where three packs at every row took sm_100 to 39.8 MiB.
PAIR_PACKS = (1, 4)
PAIR_MIN_PACKED_WIDTH = 64


def pair_packs_built(block_h: int) -> tuple[int, ...]:
    """The packs built at a pair config: 1, and those whose tile is PAIR_MIN_PACKED_WIDTH wide or wider."""
    return tuple(p for p in PAIR_PACKS if p == 1 or block_h // p >= PAIR_MIN_PACKED_WIDTH)


@_memo
def pair_pack(block_h: int, narrower: int) -> int:
    """The pair's PAIR_PACK: the largest pack built at block_h whose tile, block_h / pack columns, holds the narrower
    part."""
    return max(p for p in pair_packs_built(block_h) if block_h // p >= narrower)


def pair_grid(cfg: KernelConfig, n_rows: int, pack: int) -> tuple[int, int]:
    """The pair's grid: (the wider part's programs, which is the kernel's pair_split, and the programs of both)."""
    split = cfg.grid(n_rows)
    return split, split - (-n_rows // (cfg.rows_per_program * pack))


# The table the plain norm takes, by x's element size: its own for 16-bit x, the fused rows of an fp32
# stream for fp32 x. tools/aot_build.py generates the C++ select_plain_config from this.
PLAIN_TABLES = {2: "PLAIN_TABLE", 4: "FORWARD_TABLE"}


@_memo
def select_plain_config(H: int, x_itemsize: int, vector_typed: bool = False) -> KernelConfig:
    """The plain norm's config: the row of PLAIN_TABLES[x_itemsize] for (x, x) that admits H."""
    return _select(globals()[PLAIN_TABLES[x_itemsize]], H, x_itemsize, x_itemsize, 0, vector_typed)


@_memo
def select_forward_config(H: int, x_itemsize: int, residual_itemsize: int, quant: int = 0,
                          vector_typed: bool = False, plain: bool = False) -> KernelConfig:
    """The dispatch rule: the first table row of the stream width whose ``h_max`` admits H.

    ``quant``: 0 for the plain forward, else the quantized forward's mode (one of QUANT_MODES,
    ``quant_kernel_mode``), which alone takes the rows whose ``quant_modes`` name it.
    ``vector_typed``: the call takes 16-byte accesses (its ALIGN is the vector), its weight has x's
    dtype and its numerics are the contract's (``is_vector_typed``); only such calls take the
    ``vector_typed_only`` rows. Otherwise the weight's dtype does not change the choice: it is read
    once per column and stays in cache. ``plain``: a quantized call of the plain norm (no residual),
    which alone takes the ``plain_quant_only`` rows. The row count never enters.
    """
    return _select(FORWARD_TABLE, H, x_itemsize, residual_itemsize, quant, vector_typed, plain)


def is_vector_typed(align: int, x_itemsize: int, residual_itemsize: int, weight_is_x_dtype: bool,
                    numerics: int) -> bool:
    """select_forward_config's ``vector_typed`` for a plain call: ALIGN (align_elems) is the full
    vector, the weight has x's dtype, and the numerics are the contract's. tools/aot_build.py generates
    the C++ runtime's table of it."""
    return align == vector_elems(x_itemsize, residual_itemsize) and weight_is_x_dtype and numerics == CONTRACT


def contiguous_forward_config(H: int, x_itemsize: int, residual_itemsize: int,
                              weight_is_x_dtype: bool = True) -> KernelConfig:
    """The config the launcher picks for a plain, contract-numerics call on fresh contiguous buffers
    (16-byte aligned, rows of H): ALIGN by align_elems, then select_forward_config. For tools and
    the demo, which name the path a call takes without launching it."""
    align = align_elems((0,), H, (H,), x_itemsize, residual_itemsize)
    return select_forward_config(H, x_itemsize, residual_itemsize, vector_typed=is_vector_typed(
        align, x_itemsize, residual_itemsize, weight_is_x_dtype, CONTRACT))


def _select(table, H: int, x_itemsize: int, residual_itemsize: int, quant: int = 0,
            vector_typed: bool = False, plain: bool = False) -> KernelConfig:
    if H <= 0:
        raise ValueError(f"H must be positive, got {H}")
    if isinstance(quant, bool) or quant not in _QUANT_ARGS:  # a bool would pass as mode 1
        raise ValueError(f"quant must be 0 (the plain forward) or one of {QUANT_MODES}, got {quant!r}")
    if x_itemsize not in SUPPORTED_ITEMSIZES or residual_itemsize not in SUPPORTED_ITEMSIZES:
        raise ValueError(f"unsupported element sizes x={x_itemsize}, residual={residual_itemsize}")
    act_bytes = max(x_itemsize, residual_itemsize)
    for rule in table:
        if (rule.odd_h_only and H % 2 == 0) or not rule.takes(quant, vector_typed, plain):
            continue
        if rule.act_bytes == act_bytes and (rule.h_max is None or H <= rule.h_max):
            return rule.config
    raise AssertionError("the table has no unbounded row")  # a table always ends with one
