"""Each error names what the caller passed: the in-place operators name x and residual (the caller passed
no out or residual_out), the quantized operator into given outputs names out (it takes no quant_dtype),
the quantized operators' grad refusal says they are for inference, and a CPU call explains a
TRITON_INTERPRET=1 set after the import. The messages this file checks word for word are ones both
validators word alike; elsewhere the backends may word a rule differently, and
test_validation_parity.py holds them to the same exception and the same argument named."""

import os
import subprocess
import sys

import pytest
import torch

import addrmsnorm

from conftest import DEVICE, needs_kernels
from helpers import bits, assert_refused

H = 64



@needs_kernels
def test_in_place_on_one_tensor_names_x_and_residual():
    a = torch.randn(4, H, device=DEVICE)
    w = torch.ones(H, device=DEVICE)
    assert_refused(ValueError, r"^x and residual overlap in memory; outputs must not share memory \(x and residual are "
             r"written in place\)$", lambda: addrmsnorm.fused_add_rmsnorm_(a, a, w), a, w)


@needs_kernels
def test_in_place_on_a_broadcast_x_names_x():
    x = torch.randn(1, H, device=DEVICE).expand(4, H)
    r = torch.randn(4, H, device=DEVICE)
    w = torch.ones(H, device=DEVICE)
    assert_refused(ValueError, r"^x: row stride 0 < H=64, so its rows overlap; an output must not overlap itself "
             r"\(x is written in place\)$", lambda: addrmsnorm.fused_add_rmsnorm_(x, r, w), x, r, w)


@needs_kernels
def test_into_given_outputs_still_names_them():
    x, r = torch.randn(4, H, device=DEVICE), torch.randn(4, H, device=DEVICE)
    w = torch.ones(H, device=DEVICE)
    o = torch.empty(4, H, device=DEVICE)
    assert_refused(ValueError, r"^out and residual_out overlap in memory; outputs must not share memory$",
             lambda: addrmsnorm.fused_add_rmsnorm(x, r, w, out=o, residual_out=o), x, r, w)


@needs_kernels
def test_quantized_into_an_out_of_the_wrong_dtype_names_out():
    x = torch.randn(4, H, device=DEVICE, dtype=torch.float16)
    r = torch.randn(4, H, device=DEVICE, dtype=torch.float16)
    w = torch.ones(H, device=DEVICE, dtype=torch.float16)
    out = torch.zeros(4, H, device=DEVICE, dtype=torch.float16)
    scale = torch.ones(1, device=DEVICE)
    assert_refused(TypeError, r"^out has dtype torch.float16; the quantized output must be torch.float8_e4m3fn, "
             r"torch.int8 or torch.float4_e2m1fn_x2$", lambda: addrmsnorm.fused_add_rmsnorm_quant_(x, r, w, out=out, scale=scale), x, r, out)


@needs_kernels
def test_quantized_with_grad_says_it_is_for_inference():
    x = torch.randn(4, H, device=DEVICE, dtype=torch.float16, requires_grad=True)
    r = torch.randn(4, H, device=DEVICE, dtype=torch.float16)
    w = torch.ones(H, device=DEVICE, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="quantized outputs are for inference: call it under torch.no_grad()") as e:
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=torch.int8)
    assert "fused_add_rmsnorm(" not in str(e.value)  # no other operation is suggested


def test_interpret_set_after_the_import_is_explained():
    code = ("import os, torch, addrmsnorm\n"
            "os.environ['TRITON_INTERPRET'] = '1'\n"
            "x = torch.randn(2, 8)\n"
            "try:\n"
            "    addrmsnorm.fused_add_rmsnorm(x, x.clone(), torch.ones(8))\n"
            "except ValueError as e:\n"
            "    print(e)\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert "TRITON_INTERPRET=1 is set, but it was set after addrmsnorm was imported" in out, out
    assert "Set TRITON_INTERPRET=1 before importing addrmsnorm" in out, out
