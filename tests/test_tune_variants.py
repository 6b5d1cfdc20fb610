"""devtools/tune.py variants, on small shapes under the Triton interpreter: every case's sweep runs its table
config and each candidate through the public call with the config rule patched, and none is refused or off the
table config's output (a sweep that silently measured nothing would read as "no better config")."""

import io

import pytest

from addrmsnorm.launcher import INTERPRETED
from helpers import load_devtool

pytestmark = pytest.mark.skipif(not INTERPRETED, reason="the sweep's smoke runs on CPU tensors, under the interpreter")


class _Timing:
    median_us = min_us = max_us = 1.0


def test_the_variants_sweep_times_every_candidate(monkeypatch):
    tune = load_devtool("tune")
    import addrmsnorm.bench.variants as bench_variants
    monkeypatch.setattr(tune, "time_graph", lambda f, n: (f(0), _Timing())[1])
    monkeypatch.setattr(tune, "sets_for_cold_l2", lambda nbytes: 1)
    monkeypatch.setattr(tune, "VARIANT_SHAPES", {"gated": ((4, 256, 128),), "pair": (3,), "sandwich": ((2, 64),)})
    monkeypatch.setattr(bench_variants, "PAIR_WIDTHS", (96, 32, 136))
    every = tune._variant_candidates
    monkeypatch.setattr(tune, "_variant_candidates", lambda width, chosen, extra=(): every(width, chosen, extra)[:3])
    out = io.StringIO()
    tune.variants(1000.0, out, ["gated", "pair", "sandwich"], device="cpu")
    rows = [r for r in out.getvalue().splitlines() if r.startswith("| ") and not r.startswith("| case")]
    for case in ("gated 4x256 g128", "pair 3x(96+32)", "sandwich 2x64"):
        mine = [r for r in rows if r.startswith(f"| {case} |")]
        assert len(mine) == 4, (case, mine)  # the table's config, two candidates, the best
        assert "**table**" in mine[0] and "**best**" in mine[-1], mine
        assert not any("failed" in r or "off the table" in r for r in mine), mine


def test_the_candidates_hold_8_to_64_elements_a_thread_with_and_without_evict_last():
    tune = load_devtool("tune")
    from addrmsnorm import configs
    chosen = configs.select_gated_config(8192, 2)
    cands = tune._variant_candidates(8192, chosen)
    assert cands[0] == chosen
    for c in cands[1:]:
        assert 8 <= c.block_h * c.rows_per_program // (32 * c.num_warps) <= 64 and not c.looped
    shape = lambda c: (c.block_h, c.rows_per_program, c.num_warps)  # noqa: E731
    for k in {shape(c) for c in cands[1:]}:  # the table's config may stand for one of the pair
        assert {c.evict_last for c in cands if shape(c) == k} == {True, False}, k


def test_a_capped_candidate_is_timed_under_its_cap_and_the_plan_restored(monkeypatch):
    """--extra's c<cap> suffix: the config is timed with the cap in configs.MAX_REGISTERS (where the launcher reads
    it), tagged with it, and the plan is as it was afterwards."""
    tune = load_devtool("tune")
    from addrmsnorm import configs, launcher
    monkeypatch.setattr(tune, "time_graph", lambda f, n: (f(0), _Timing())[1])
    monkeypatch.setattr(tune, "sets_for_cold_l2", lambda nbytes: 1)
    monkeypatch.setattr(tune, "VARIANT_SHAPES", {"gated": ((4, 256, 128),)})
    cfg = configs.KernelConfig(128, 2, 1, False, evict_last=True, weight_first=True)
    key = (cfg.block_h, cfg.rows_per_program, cfg.num_warps)
    seen = []
    planned = launcher._planned_cap
    monkeypatch.setattr(launcher, "_planned_cap", lambda kind, c, arch: seen.append((kind, c, planned(kind, c, 90)))
                        or None)  # the interpreter compiles no cap: record what the launcher would have asked
    before = {a: {k: dict(v) for k, v in kinds.items()} for a, kinds in configs.MAX_REGISTERS.items()}
    out = io.StringIO()
    other = configs.KernelConfig(256, 1, 1, False)  # another width's tile: not this case's candidate
    tune.variants(1000.0, out, ["gated"], device="cpu", extra=[other], capped=[(cfg, 48), (other, 48)],
                  only_extra=True)
    rows = [r for r in out.getvalue().splitlines() if "cap 48" in r and "**best**" not in r]
    assert len(rows) == 1 and "weight-first" in rows[0] and "failed" not in rows[0], out.getvalue()
    assert ("forward", cfg, 48) in seen, seen
    assert {a: {k: dict(v) for k, v in kinds.items()} for a, kinds in configs.MAX_REGISTERS.items()} == before
    assert key not in configs.MAX_REGISTERS[90]["forward"]
    assert len([r for r in out.getvalue().splitlines() if r.startswith("| gated")]) == 3  # table, capped, best


def test_a_cap_on_an_arch_the_plan_does_not_name_leaves_no_entry(monkeypatch):
    """The plan as it was, also where it had no entry for the arch (a new card): none is left behind, empty."""
    tune = load_devtool("tune")
    from addrmsnorm import configs
    monkeypatch.setattr(tune, "time_graph", lambda f, n: (f(0), _Timing())[1])
    monkeypatch.setattr(tune, "sets_for_cold_l2", lambda nbytes: 1)
    monkeypatch.setattr(tune, "VARIANT_SHAPES", {"gated": ((4, 256, 128),)})
    monkeypatch.setattr(configs, "MAX_REGISTERS", {a: k for a, k in configs.MAX_REGISTERS.items() if a != 90})
    cfg = configs.KernelConfig(128, 2, 1, False, evict_last=True)
    tune.variants(1000.0, io.StringIO(), ["gated"], device="cpu", capped=[(cfg, 48)], only_extra=True)
    assert 90 not in configs.MAX_REGISTERS


def test_the_plain_decode_chain_times_the_table_and_its_weight_first_form(monkeypatch):
    """tune.py decode --plain (issue 68's plain decode chain): the table's config and its weight-first form, with
    and without PDL, each a chain of in-place calls that stays within the tolerance of the plain norm."""
    tune = load_devtool("tune")
    import torch
    import addrmsnorm
    from addrmsnorm import configs
    from addrmsnorm.reference import TOLERANCES, assert_close
    seen = []

    def once(f, n):
        f(0)
        seen.append(1)
        return _Timing()
    monkeypatch.setattr(tune, "time_graph", once)
    out = io.StringIO()
    tune.plain_decode(out, hs=(64,), chain=1, device="cpu")
    rows = [r for r in out.getvalue().splitlines() if r.startswith("| ") and not r.startswith("| N x H")]
    chosen = configs.select_plain_config(64, 2)
    for n in (1, 8):
        mine = [r for r in rows if r.startswith(f"| {n}x64 |")]
        assert len(mine) == 4, mine  # the table's and the weight-first form, with and without PDL
        assert sum("(table)" in r for r in mine) == 2 and sum("weight-first" in r for r in mine) == 2
    assert len(seen) == 8
    # one call of each form gives the plain norm of x
    x = torch.randn(8, 64).to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(64)).to(torch.bfloat16)
    want = addrmsnorm.rmsnorm(x, w, 1e-6)
    from dataclasses import replace
    from addrmsnorm.launcher import launch_forward
    for cfg in (chosen, replace(chosen, weight_first=not chosen.weight_first)):
        y = x.clone()
        launch_forward(y, None, w, y, None, None, n_rows=8, H=64, stride_x=64, stride_residual=0, stride_out=64,
                       stride_residual_out=0, eps=1e-6, weight_offset=0.0, config=cfg)
        assert_close(y.float(), want.float(), TOLERANCES[torch.bfloat16], "y")
