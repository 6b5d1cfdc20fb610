"""The kernel table's register plan (addrmsnorm/register_plan.py) and the JIT's degrade where a Triton
release breaks it: a register cap that spills is dropped, a backward grid that does not fit launches
the programs that do, each with one warning and the same bits."""

import dataclasses
import warnings

import pytest
import torch

from addrmsnorm import configs, jit_backend, launcher, register_plan

from conftest import ON_GPU
from helpers import make_inputs


def test_the_plan_rules():
    assert register_plan.cap_problem(40, 0, 40) is None
    assert register_plan.cap_problem(40, 8, 40) == "40 registers under a cap of 40, 8 bytes of stack"
    assert register_plan.backward_fit(109, 28676, 8, 90, planned=3) == 2  # Triton 3.8's sm_90 backward
    assert register_plan.backward_fit(64, 28676, 8, 90, planned=3) is None
    assert register_plan.backward_fit(255, 0, 32, 75, planned=4) is None  # an arch the plan does not cover


def test_the_aot_compiler_is_pinned():
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert f"triton=={configs.AOT_TRITON_VERSION}" in pyproject["build-system"]["requires"]


gpu = pytest.mark.skipif(not ON_GPU, reason="registers are known once a compiled kernel is loaded on a GPU")


@pytest.fixture
def fresh_plan(monkeypatch):
    monkeypatch.setattr(launcher, "_CHECKED", set())
    monkeypatch.setattr(launcher, "_UNCAPPED", set())
    monkeypatch.setattr(launcher, "_BACKWARD_FIT", {})


@gpu
def test_a_cap_that_spills_is_dropped_once_with_a_warning(monkeypatch, fresh_plan):
    N, H = 64, 4096
    x, r, w = make_inputs(N, H, ("bf16", "bf16", "bf16"), "cuda", seed=1)
    mode = configs.QUANT_PER_TOKEN
    cfg = configs.select_forward_config(H, 2, 2, quant=mode)
    arch = launcher._arch(x.device)
    want = jit_backend.norm_quant(x, r, w, 1e-6, torch.int8)  # the table's plan
    # A cap no kernel keeps: 24 registers for every thread of this config.
    monkeypatch.setattr(configs, "MAX_REGISTERS", {arch: {"quant_forward": {(cfg.block_h, cfg.rows_per_program,
                                                                    cfg.num_warps): 24}}})
    with pytest.warns(RuntimeWarning, match="compiled without the cap from now on"):
        first = jit_backend.norm_quant(x, r, w, 1e-6, torch.int8)
    assert ("quant_forward", cfg, arch) in launcher._UNCAPPED
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once
        second = jit_backend.norm_quant(x, r, w, 1e-6, torch.int8)
    for got in (first, second):
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])


@gpu
def test_a_backward_grid_that_does_not_fit_launches_what_fits(monkeypatch, fresh_plan):
    N, H = 4096, 1024
    x, r, w = make_inputs(N, H, ("bf16", "bf16", "bf16"), "cuda", seed=2)
    dy = torch.randn_like(x)
    _, h, rstd = jit_backend.norm(x, r, w, 1e-6, return_rstd=True)
    want = jit_backend.norm_backward(dy, None, h, rstd, w)
    select = configs.select_backward_config
    monkeypatch.setattr(configs, "select_backward_config",
                        lambda *a: dataclasses.replace(select(*a), programs_per_sm=64))  # more than fit
    with pytest.warns(RuntimeWarning, match="its grid launches"):
        jit_backend.norm_backward(dy, None, h, rstd, w)
    cfg = configs.select_backward_config(H, 2, 2)
    fit = launcher._BACKWARD_FIT[(cfg, launcher._arch(x.device))]
    assert 1 <= fit < 64
    got = jit_backend.norm_backward(dy, None, h, rstd, w)
    assert torch.equal(got[0], want[0])  # dresidual: per row, whatever the grid
    torch.testing.assert_close(got[2].float(), want[2].float(), rtol=2e-2, atol=1e-2)  # dweight: another split
