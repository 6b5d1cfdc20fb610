#!/usr/bin/env python3
"""A small sample of every Python entry point, for compute-sanitizer (scripts/gpu_checks.sh): the
forward in place and into given outputs (single pass, looped, re-read, odd H, a strided view, an fp32
residual stream), the backward with and without dresidual_out, and every quantized mode (the block-scaled
formats too). Each result is
checked against the reference, so a kernel that the sanitizer lets pass still has to be right. The
plain norm too (rows, heads of a fused QKV buffer in place, the looped path). The
backend is ADDRMSNORM_BACKEND's (cpp or triton)."""

import sys

import torch

import addrmsnorm
from addrmsnorm.reference import fused_add_rmsnorm_ref

EPS = 1e-6


def _inputs(n, h, xd, rd, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, h, generator=g).to(xd).cuda()
    r = (4 * torch.randn(n, h, generator=g)).to(rd).cuda()
    w = (1 + 0.1 * torch.randn(h, generator=g)).to(xd).cuda()
    return x, r, w


def forward():
    for n, h, xd, rd in ((5, 4096, torch.bfloat16, torch.bfloat16), (3, 40000, torch.bfloat16, torch.bfloat16),
                         (4, 3000, torch.float32, torch.float32), (3, 1111, torch.float16, torch.float16),
                         (6, 512, torch.bfloat16, torch.float32)):
        x, r, w = _inputs(n, h, xd, rd, h)
        ref = fused_add_rmsnorm_ref(x, r, w, EPS)
        y, h_out = addrmsnorm.fused_add_rmsnorm(x, r, w, EPS)
        assert torch.equal(h_out, ref.residual_out), (n, h, "functional residual_out")
        buf = torch.empty(n, h + 64, dtype=xd, device="cuda")  # a row-strided output
        out = buf[:, :h]
        addrmsnorm.fused_add_rmsnorm(x, r, w, EPS, out=out, residual_out=torch.empty_like(r))
        assert torch.equal(out, y), (n, h, "into a strided out")
        addrmsnorm.fused_add_rmsnorm_(x, r, w, EPS)  # in place: residual <- h, x <- y
        assert torch.equal(r, ref.residual_out) and torch.equal(x, y), (n, h, "in place")


def plain_norm():
    x, _, w = _inputs(5, 4096, torch.bfloat16, torch.bfloat16, 3)
    y = addrmsnorm.rmsnorm(x, w, EPS)
    qkv = torch.randn(7, 12 * 128, device="cuda", dtype=torch.bfloat16)
    addrmsnorm.rmsnorm_(qkv[:, :8 * 128].view(7, 8, 128), w[:128], EPS)  # heads of a fused QKV buffer
    xl, _, wl = _inputs(2, 40000, torch.float32, torch.float32, 4)
    addrmsnorm.rmsnorm(xl, wl, EPS)
    assert torch.isfinite(y.float()).all()
    # q and k of a fused QKV buffer in one launch (GQA: 8 q heads, 2 kv heads), against rmsnorm_ per view.
    qkv = torch.randn(9, 12 * 128, device="cuda", dtype=torch.bfloat16)
    want = qkv.clone()
    addrmsnorm.rmsnorm_(want[:, :8 * 128].view(9, 8, 128), w[:128], EPS)
    addrmsnorm.rmsnorm_(want[:, 8 * 128:10 * 128].view(9, 2, 128), w[128:256], EPS)
    addrmsnorm.qk_rmsnorm_(qkv, w[:128], w[128:256], EPS, num_q_heads=8, num_kv_heads=2, head_dim=128)
    assert torch.equal(qkv, want), "qk_rmsnorm_"
    # The plain norm's quantized outputs: a per-token fp8 row and a looped static row.
    q, s = addrmsnorm.rmsnorm_quant(x, w, EPS, quant_dtype=torch.float8_e4m3fn)
    assert q.shape == x.shape and s.shape == (5,)
    xq, _, wq = _inputs(2, 65536, torch.bfloat16, torch.bfloat16, 5)
    addrmsnorm.rmsnorm_quant(xq, wq, EPS, quant_dtype=torch.int8, scale=torch.tensor([0.02], device="cuda"))


def backward():
    for n, h, xd, rd in ((7, 4096, torch.bfloat16, torch.bfloat16), (3, 20000, torch.bfloat16, torch.float32)):
        x, r, w = _inputs(n, h, xd, rd, h)
        x.requires_grad_()
        r.requires_grad_()
        w.requires_grad_()
        y, h_out = addrmsnorm.fused_add_rmsnorm(x, r, w, EPS)
        (y.float().square().sum() + h_out.float().sum()).backward()
        assert all(t.grad is not None and torch.isfinite(t.grad.float()).all() for t in (x, r, w))


def quantized():
    x, r, w = _inputs(9, 4096, torch.bfloat16, torch.bfloat16, 1)
    scale = torch.tensor([0.02], device="cuda")
    for q in (torch.float8_e4m3fn, torch.int8):
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=q, scale=scale)
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=q)
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=q, group_size=128, column_major_scales=True,
                                           ue8m0_scales=True, return_y=True)
    xl, rl, wl = _inputs(2, 65536, torch.bfloat16, torch.bfloat16, 2)  # the looped quantized path
    addrmsnorm.fused_add_rmsnorm_quant(xl, rl, wl, quant_dtype=torch.float8_e4m3fn)
    q = torch.empty_like(x, dtype=torch.float8_e4m3fn)
    addrmsnorm.fused_add_rmsnorm_quant_(x, r, w, out=q, scale=scale)  # vLLM's convention: residual <- h
    # The block-scaled formats: swizzled scales (9 rows: the padded tiles' rows are written as zeros, and
    # initcheck would flag any byte left unwritten), linear, the looped path, the plain norm's.
    g = torch.tensor([0.5], device="cuda")
    for qd, gs in ((torch.float4_e2m1fn_x2, 16), (torch.float8_e4m3fn, 32), (torch.float4_e2m1fn_x2, 32)):
        scale_arg = g if gs == 16 else None
        _, _, s = addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=qd, group_size=gs, scale=scale_arg,
                                                     swizzled_scales=True)
        s.view(torch.uint8).sum().item()  # read every byte: initcheck sees an unwritten one
        addrmsnorm.fused_add_rmsnorm_quant(x, r, w, quant_dtype=qd, group_size=gs, scale=scale_arg)
        addrmsnorm.fused_add_rmsnorm_quant(xl, rl, wl, quant_dtype=qd, group_size=gs, scale=scale_arg,
                                           swizzled_scales=True)
        addrmsnorm.rmsnorm_quant(x, w, quant_dtype=qd, group_size=gs, scale=scale_arg, swizzled_scales=True)


if __name__ == "__main__":
    forward()
    plain_norm()
    backward()
    quantized()
    torch.cuda.synchronize()
    print(f"sample ok ({addrmsnorm.backend()} backend)")
    sys.exit(0)
