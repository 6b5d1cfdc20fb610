"""The config table and dispatch rule: pure Python, no kernel runs."""

import inspect

import pytest

from addrmsnorm import configs
from addrmsnorm.configs import FORWARD_TABLE, SINGLE_PASS_MAX_H, select_forward_config

SAMPLE_H = sorted({*range(1, 300), 511, 512, 513, 1023, 1024, 1025, 2880, 3000, 3584, 4096, 4100,
                   5120, 7168, 8192, 11111, 14336, 16383, 16384, 16385, 32768, 65536, 131072, 262144,
                   1 << 20})


@pytest.mark.parametrize("act_bytes", [(2, 2), (2, 4), (4, 4)])
def test_every_h_gets_a_valid_config(act_bytes):
    for H in SAMPLE_H:
        cfg = select_forward_config(H, *act_bytes)
        assert cfg.block_h & (cfg.block_h - 1) == 0, "block_h must be a power of two"
        assert cfg.num_warps in (1, 2, 4, 8, 16, 32)
        if cfg.looped:  # the reloading looped path serves wide rows only; the re-reading one any H
            assert cfg.rows_per_program == 1 and (cfg.reread or H > SINGLE_PASS_MAX_H)
        else:
            assert cfg.block_h >= H, f"single-pass block {cfg.block_h} cannot hold H={H}"


def test_table_shape():
    for act in (2, 4):
        rules = [r for r in FORWARD_TABLE if r.act_bytes == act]
        bounded = [r.h_max for r in rules if r.h_max is not None]
        assert bounded == sorted(bounded), "rules must be in increasing h_max"
        assert rules[-1].h_max is None and rules[-1].config.looped, "last rule: unbounded, looped"
        unbounded = [i for i, r in enumerate(rules) if r.h_max is None]
        assert unbounded == list(range(len(rules) - len(unbounded), len(rules))), "unbounded rules come last"
        assert all(rules[i].quant_only and rules[i].config.looped for i in unbounded[:-1]), \
            "an unbounded rule before the last serves some quantized modes alone"


def test_dispatch_never_sees_the_row_count():
    """Batch invariance rests on this: the rule's inputs are H, the dtypes and the call's kind (quantized;
    vector accesses with the weight of x's dtype), never the row count."""
    params = list(inspect.signature(select_forward_config).parameters)
    assert params == ["H", "x_itemsize", "residual_itemsize", "quant", "vector_typed", "plain"]


def test_fp32_residual_stream_uses_the_wide_rules():
    assert select_forward_config(128, 2, 4) == select_forward_config(128, 4, 4)
    assert select_forward_config(128, 2, 2) != select_forward_config(128, 4, 4)


@pytest.mark.parametrize("args", [(0, 2, 2), (-5, 2, 2), (128, 8, 8), (128, 1, 2)])
def test_bad_dispatch_inputs(args):
    with pytest.raises(ValueError):
        select_forward_config(*args)


def test_grid():
    cfg = configs.KernelConfig(block_h=128, rows_per_program=8, num_warps=4, looped=False)
    assert [cfg.grid(n) for n in (1, 8, 9, 16, 17)] == [1, 1, 2, 2, 3]


def test_alignment_rule():
    from addrmsnorm.configs import align_elems, backward_align, vector_elems

    assert vector_elems(2, 2) == 8 and vector_elems(2, 4) == 8 and vector_elems(4, 4) == 4
    ptrs = (0x1000, 0x2000, 0x3000, 0x4000, 0x5000)
    assert align_elems(ptrs, 3000, (3000,) * 4, 2, 2) == 8      # 6000-byte rows: 16-byte aligned
    assert align_elems(ptrs, 4100, (4100,) * 4, 2, 2) == 4      # 8200-byte rows: 8-byte aligned
    assert align_elems(ptrs, 3002, (3002,) * 4, 2, 2) == 1      # 6004-byte rows: no 4-byte class
    assert align_elems(ptrs, 3002, (3002,) * 4, 4, 4) == 2      # fp32 rows of 12008 bytes: 8-byte class
    assert align_elems(ptrs, 11111, (11111,) * 4, 2, 2) == 1    # odd H
    assert align_elems(ptrs, 11111, (11112,) * 4, 2, 2) == 1    # padded rows, odd H: the mask needs H
    assert align_elems(ptrs, 4100, (4104,) * 4, 2, 4) == 4      # bf16 x, fp32 residual: 8 bytes of x
    assert align_elems(ptrs, 4100, (4100,) * 4, 4, 4) == 4      # fp32: 16400-byte rows are
    assert align_elems(ptrs, 4096, (0,) * 4, 2, 2) == 8         # one row: no stride to check
    assert align_elems((0x1008,) + ptrs[1:], 4096, (4096,) * 4, 2, 2) == 1  # a misaligned pointer
    assert align_elems(ptrs, 4096, (4096, 4096, 4100, 4096), 2, 2) == 4    # one stride of 4 mod 8
    assert align_elems(ptrs, 4096, (4096, 4096, 4097, 4096), 2, 2) == 1    # one odd stride
    assert backward_align(ptrs, 4100, (4100,) * 5, 2, 2) == 1             # the backward: both ends only
    assert backward_align(ptrs, 4096, (4096,) * 5, 2, 2) == 8


def test_backward_table_plans_its_grid():
    """Every backward config plans a persistent grid (programs per SM; tools/aot_build.py checks that
    they fit on sm_90) and a pipelining depth; the forward's configs leave both alone."""
    for rule in configs.BACKWARD_TABLE:
        cfg = rule.config
        assert cfg.programs_per_sm >= 1 and cfg.stages >= 1 and not cfg.reread
        assert configs.backward_programs(10**6, cfg, 132) == 132 * cfg.programs_per_sm
        assert configs.backward_programs(1, cfg, 132) == 1
    for rule in FORWARD_TABLE:
        assert rule.config.programs_per_sm == 0 and rule.config.stages == 1
        assert not rule.config.reread or rule.config.looped


def test_odd_h_rows_take_the_re_read_path():
    """Odd H of 16-bit streams between the single pass's 8192 and 16384 take their own rule (ALIGN 1
    always); even H beside them, and 4-byte streams, do not."""
    odd = select_forward_config(11111, 2, 2)
    assert odd.looped and odd.reread
    assert select_forward_config(16383, 2, 2) == odd and select_forward_config(8193, 2, 2) == odd
    assert not select_forward_config(11112, 2, 2).looped
    assert not select_forward_config(8191, 2, 2).reread and not select_forward_config(16385, 2, 2).reread
    assert not select_forward_config(11111, 4, 4).reread


STATIC, PER_TOKEN, PER_GROUP = configs.QUANT_STATIC, configs.QUANT_PER_TOKEN, configs.QUANT_PER_GROUP


FP4_MODES = (configs.QUANT_NVFP4, configs.QUANT_MXFP4)


def test_the_fp4_epilogues_take_half_the_warps_at_4096_and_8192():
    """NVFP4 and MXFP4 are instruction-bound (e2m1 and the nibble packing): from 2048 to 4096 and from
    6144 to 8192 they take the forward's row shape with half its warps; MXFP8 and the other modes keep
    the forward's config."""
    for H in (2064, 3072, 4096, 6160, 7168, 8192):
        f = select_forward_config(H, 2, 2, quant=configs.QUANT_STATIC)
        for mode in FP4_MODES:
            q = select_forward_config(H, 2, 2, quant=mode)
            assert (q.block_h, q.rows_per_program, q.looped, q.weight_first) == (f.block_h, 1, False, f.weight_first)
            assert q.num_warps * 2 == f.num_warps
        assert select_forward_config(H, 2, 2, quant=configs.QUANT_MXFP8) == f


def test_quantized_rows_up_to_32768_run_one_pass_and_wider_ones_loop_by_mode():
    """The quantized forward keeps 16-bit rows up to QUANT_SINGLE_PASS_MAX_H whole, where the plain
    forward loops, in every mode; below 16384 every mode takes the plain forward's config (the fp4
    epilogues aside: the next test), but at 2048 < H <= 4096 and 6144 < H <= 8192, where the plain
    forward has rows of its own (test_the_plain_forward_runs_4_warps_without_evict_last). Above 32768
    each mode has its loop: per token the plain forward's (h kept in L2), static the same loop without
    the hint up to 65536, per group a loop of 8192-wide chunks with the hint. 4-byte streams (which the
    quantized forward does not take) have no such rule."""
    for mode in configs.QUANT_MODES:
        for H in (16400, 20480, 32768):
            q = select_forward_config(H, 2, 2, quant=mode)
            assert not q.looped and q.block_h == configs.QUANT_SINGLE_PASS_MAX_H
            assert select_forward_config(H, 2, 2).looped
        for H in (16, 2048, 5120, 16384) if mode in FP4_MODES else (16, 2048, 5120, 16384):
            assert select_forward_config(H, 2, 2, quant=mode) == select_forward_config(H, 2, 2)
    for H in (32784, 65536, 65552, 131072):
        plain = select_forward_config(H, 2, 2)
        assert plain.looped and plain.keep_h and (plain.block_h, plain.num_warps) == (16384, 32)
        assert select_forward_config(H, 2, 2, quant=PER_TOKEN) == plain
        g = select_forward_config(H, 2, 2, quant=PER_GROUP)
        assert g.looped and g.keep_h and (g.block_h, g.num_warps) == (8192, 32)
        s = select_forward_config(H, 2, 2, quant=STATIC)
        if H <= configs.QUANT_UNHINTED_LOOP_MAX_H:  # the same loop, without the hint that keeps h in L2
            assert s.looped and not s.keep_h and (s.block_h, s.num_warps) == (plain.block_h, plain.num_warps)
        else:
            assert s == plain


def test_the_quant_argument_is_a_mode_not_a_flag():
    """select_forward_config's quant is 0 or a QUANT mode: True would pass as mode 1 (static)."""
    for bad in (True, False, 7, -1):
        with pytest.raises(ValueError, match="quant"):
            select_forward_config(4096, 2, 2, quant=bad)


def test_vector_typed_plain_rows_up_to_32768_run_one_pass():
    """At 16384 < H <= 32768 the plain forward of 16-bit streams keeps the row in one pass of 16 warps
    for vector-typed calls (16-byte accesses, the weight of x's dtype, the contract's numerics), whose
    kernels do not spill; every other call there loops, the quantized forward keeps its own row, and
    4-byte streams have no such rule."""
    for H in (16400, 24576, 32768):
        vt = select_forward_config(H, 2, 2, vector_typed=True)
        assert not vt.looped and (vt.block_h, vt.num_warps) == (configs.QUANT_SINGLE_PASS_MAX_H, 16)
        assert vt.evict_last and not vt.weight_first
        assert select_forward_config(H, 2, 2).looped
        for mode in configs.QUANT_MODES:
            assert (select_forward_config(H, 2, 2, quant=mode, vector_typed=True)
                    == select_forward_config(H, 2, 2, quant=mode))
        assert select_forward_config(H, 4, 4, vector_typed=True).looped
        assert select_forward_config(H, 2, 4, vector_typed=True).looped
    for H in (16, 4096, 16384, 32769, 65536):
        assert select_forward_config(H, 2, 2, vector_typed=True) == select_forward_config(H, 2, 2)
    # The rule's input, as the launcher and forward.cpp compute it.
    assert configs.is_vector_typed(8, 2, 2, True, configs.CONTRACT)
    assert not configs.is_vector_typed(4, 2, 2, True, configs.CONTRACT)  # 8-byte accesses
    assert not configs.is_vector_typed(1, 2, 2, True, configs.CONTRACT)  # odd H, a misaligned row
    assert not configs.is_vector_typed(8, 2, 2, False, configs.CONTRACT)  # fp32 or the other 16-bit weight
    assert not configs.is_vector_typed(8, 2, 2, True, configs.HF_LLAMA)
    assert configs.is_vector_typed(4, 4, 4, True, configs.CONTRACT) and configs.is_vector_typed(8, 2, 4, True, 0)


def test_the_config_for_fresh_contiguous_buffers_follows_the_launchers_rule():
    """configs.contiguous_forward_config (the demo's and tune.py's): fresh 16-byte-aligned rows of H
    take the vector-typed row where H is a multiple of the vector and the weight has x's dtype."""
    single = configs.contiguous_forward_config(24576, 2, 2)
    assert not single.looped and single == select_forward_config(24576, 2, 2, vector_typed=True)
    assert configs.contiguous_forward_config(24576, 2, 2, weight_is_x_dtype=False).looped
    assert configs.contiguous_forward_config(24580, 2, 2).looped  # 8-byte rows: ALIGN 4, not the vector
    assert configs.contiguous_forward_config(32767, 2, 2).looped
    assert configs.contiguous_forward_config(24576, 4, 4).looped
    for H in (128, 4096, 11111, 65536):
        assert configs.contiguous_forward_config(H, 2, 2) == select_forward_config(H, 2, 2)


def test_the_plain_forward_runs_4_warps_without_evict_last():
    """The fused op's own 16-bit rows (the prefill chunks, measured on an H100): at 2048 < H <= 4096 one pass of 4
    warps with the weight first, at 6144 < H <= 8192 one of 4 warps with the weight after the reduction, both
    without the evict-last hint. The quantized forward keeps its rows there: 8 warps with the weight first at 4096,
    16 with it after the reduction at 8192 (its register cap would spill otherwise), both with the hint; 4-byte
    streams keep theirs. At 4096 < H <= 6144 the plain and quantized forward share a row that loads the weight
    after the reduction (first, it lost 2.8 points at 4100)."""
    for H, wf, quant_warps in ((2064, True, 8), (3072, True, 8), (4096, True, 8), (6160, False, 16),
                               (7168, False, 16), (8192, False, 16)):
        plain = select_forward_config(H, 2, 2)
        assert (plain.looped, plain.num_warps, plain.weight_first, plain.evict_last) == (False, 4, wf, False), H
        for mode in configs.QUANT_MODES:
            quant = select_forward_config(H, 2, 2, quant=mode)
            halved = 2 if mode in FP4_MODES else 1  # the fp4 epilogues: half the warps (the test above)
            assert (quant.block_h, quant.num_warps * halved, quant.weight_first, quant.evict_last) == \
                (plain.block_h, quant_warps, wf, True), (H, mode)
        assert not select_forward_config(H, 4, 4).weight_first
    for H in (4100, 5120, 6144):
        for mode in configs.QUANT_MODES:
            assert select_forward_config(H, 2, 2) == select_forward_config(H, 2, 2, quant=mode)
        assert not select_forward_config(H, 2, 2).weight_first
    assert all(r.act_bytes == 2 and not r.odd_h_only and set(r.quant_modes) <= set(configs.QUANT_MODES)
               for r in FORWARD_TABLE if r.quant_only)


@pytest.mark.parametrize("act_bytes", [(2, 2), (2, 4), (4, 4)])
def test_every_single_pass_loads_evict_last_and_every_reloading_loop_keeps_h(act_bytes):
    """The L2 hints of the table: every single pass loads x and residual evict-last, but the
    quantized one wider than the plain one's (it lost up to 21 points with the hint); the looped
    path that reloads h keeps it in L2, but the static quantized one up to 65536; the re-read path carries
    its own hints and neither flag."""
    for H in SAMPLE_H:
        for quant in (0,) + configs.QUANT_MODES if act_bytes == (2, 2) else (0,):
            cfg = select_forward_config(H, *act_bytes, quant=quant)
            own_rows = quant == 0 and act_bytes == (2, 2) and (2048 < H <= 4096 or 6144 < H <= 8192)
            assert cfg.evict_last == (not cfg.looped and H <= SINGLE_PASS_MAX_H and not own_rows), (H, quant, cfg)
            unhinted = quant == STATIC and H <= configs.QUANT_UNHINTED_LOOP_MAX_H
            assert cfg.keep_h == (cfg.looped and not cfg.reread and not unhinted), (H, quant, cfg)
