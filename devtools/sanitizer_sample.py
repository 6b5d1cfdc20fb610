#!/usr/bin/env python3
"""A small sample of every Python entry point, for compute-sanitizer (scripts/gpu_checks.sh): the
forward in place and into given outputs (single pass, looped, re-read, odd H, a strided view, an fp32
residual stream), the backward with and without dresidual_out, and every quantized mode (the block-scaled
formats too); the plain norm (rows, heads of a fused QKV buffer in place, the looped path); the variants (the
weightless norm, the scaled residual, the sandwich norm, the gated norm and the latent pair, forward, quantized
and backward); the QK norm with the rotation, forward ("rope") and backward ("rope_backward"). Results are
checked against the reference where one is cheap, so a kernel that the sanitizer lets pass still has to be
right. Arguments name the sections to run (default: all). The backend is ADDRMSNORM_BACKEND's (cpp or
triton)."""

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


def _grad(*leaves):
    return [t.clone().requires_grad_() for t in leaves]


def variants():
    """The weightless norm, the scaled residual, the sandwich norm, the gated norm and the latent pair: forward
    in place and functional, their quantized outputs, and their backward through autograd."""
    x, r, w = _inputs(6, 4096, torch.bfloat16, torch.bfloat16, 7)
    y, h = addrmsnorm.fused_add_rmsnorm(x, r, None, EPS)  # weightless
    want = fused_add_rmsnorm_ref(x, r, None, EPS)
    assert torch.equal(h, want.residual_out), "weightless residual_out"
    addrmsnorm.fused_add_rmsnorm(x, r, w, EPS, x_scale=0.22)  # Granite's scaled residual
    xs, rs, pw, ws = _grad(x, r, w, w)  # the sandwich norm, forward and backward
    y, h = addrmsnorm.sandwich_rmsnorm(xs, rs, pw, ws, EPS, weight_offset=1.0)
    (y.float().square().sum() + h.float().sum()).backward()
    assert all(t.grad is not None and torch.isfinite(t.grad.float()).all() for t in (xs, rs, pw, ws))
    xi, ri = x.clone(), r.clone()
    addrmsnorm.sandwich_rmsnorm_(xi, ri, w, w, EPS)
    addrmsnorm.fused_add_rmsnorm_quant(x, r, w, EPS, quant_dtype=torch.float8_e4m3fn, post_weight=w)
    z = torch.randn_like(x)  # the gated norm: the row, groups of 128 (Qwen3-Next), gate first
    for group, before in ((None, True), (128, True), (1024, False)):
        xg, zg, wg = _grad(x, z, w)
        yg = addrmsnorm.gated_rmsnorm(xg, zg, wg, EPS, group_size=group, norm_before_gate=before)
        yg.float().square().sum().backward()
        assert all(t.grad is not None for t in (xg, zg, wg)), ("gated", group)
    addrmsnorm.gated_rmsnorm_quant(x, z, w, EPS, quant_dtype=torch.float8_e4m3fn)  # per token: the row a group
    addrmsnorm.gated_rmsnorm_quant(x, z, w, EPS, quant_dtype=torch.float8_e4m3fn, group_size=128,
                                   scale=torch.tensor([0.02], device="cuda"))  # static, groups of 128
    buf = torch.randn(5, 2112, device="cuda", dtype=torch.bfloat16)  # DeepSeek-V3's latents: 1536 + 512 of 2112
    wa, wb = (1 + 0.1 * torch.randn(1536, device="cuda")).bfloat16(), (1 + 0.1 * torch.randn(512, device="cuda")).bfloat16()
    ya, yb = addrmsnorm.rmsnorm_pair(buf[:, :1536], wa, buf[:, 1536:2048], wb, EPS)
    addrmsnorm.rmsnorm_pair_(buf[:, :1536], wa, buf[:, 1536:2048], wb, EPS)
    assert torch.equal(buf[:, :1536], ya) and torch.equal(buf[:, 1536:2048], yb), "pair in place"


def _rope_inputs(T, nq, nk, D, rd):
    g = torch.Generator().manual_seed(T + D)
    qkv = torch.randn(T, (nq + 2 * nk) * D, generator=g).bfloat16().cuda()
    w = (1 + 0.1 * torch.randn(2, D, generator=g)).bfloat16().cuda()
    inv = 1.0 / 10000 ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd)
    f = torch.arange(4096, dtype=torch.float64)[:, None] * inv[None, :]
    cache = torch.cat([f.cos(), f.sin()], -1).float().cuda()
    pos = torch.randint(0, 4096, (T,), generator=g).cuda()
    return qkv, w, cache, pos


def rope():
    """The QK norm with the rotation, in place on a fused QKV buffer: positions into a cache (NeoX, GPT-J,
    partial), HF's cos and sin (bf16, numerics="hf"), decode and prefill."""
    for T, nq, nk, D, rd, style in ((1, 32, 8, 128, 128, "neox"), (37, 16, 4, 128, 64, "gptj"),
                                    (9, 8, 2, 256, 256, "neox")):
        qkv, w, cache, pos = _rope_inputs(T, nq, nk, D, rd)
        addrmsnorm.qk_rmsnorm_rope_(qkv, w[0], w[1], EPS, num_q_heads=nq, num_kv_heads=nk, head_dim=D,
                                    positions=pos, cos_sin_cache=cache, rotary_dim=rd, style=style)
        rows = cache[pos]
        c, s = rows[:, :rd // 2], rows[:, rd // 2:]
        cos, sin = torch.cat([c, c], -1).bfloat16(), torch.cat([s, s], -1).bfloat16()
        if style == "neox":
            addrmsnorm.qk_rmsnorm_rope_(qkv, w[0], w[1], EPS, num_q_heads=nq, num_kv_heads=nk, head_dim=D, cos=cos,
                                        sin=sin, rotary_dim=rd, numerics="hf")
        assert torch.isfinite(qkv.float()).all(), (T, D, style)


def rope_backward():
    """The rotation's backward (rmsnorm_bwd with ROPE), through the functional form's autograd."""
    for T, nq, nk, D, rd in ((5, 8, 2, 128, 128), (33, 4, 2, 256, 64)):
        qkv, w, cache, pos = _rope_inputs(T, nq, nk, D, rd)
        q = qkv[:, :nq * D].view(T, nq, D).clone().requires_grad_()
        k = qkv[:, nq * D:(nq + nk) * D].view(T, nk, D).clone().requires_grad_()
        wq, wk = w[0].clone().requires_grad_(), w[1].clone().requires_grad_()
        oq, ok = addrmsnorm.qk_rmsnorm_rope(q, k, wq, wk, EPS, positions=pos, cos_sin_cache=cache, rotary_dim=rd)
        (oq.float().square().sum() + ok.float().sum()).backward()
        assert all(t.grad is not None and torch.isfinite(t.grad.float()).all() for t in (q, k, wq, wk)), (T, D)


SECTIONS = {"forward": forward, "plain_norm": plain_norm, "backward": backward, "quantized": quantized,
            "variants": variants, "rope": rope, "rope_backward": rope_backward}

if __name__ == "__main__":
    names = sys.argv[1:] or list(SECTIONS)
    for name in names:
        SECTIONS[name]()
    torch.cuda.synchronize()
    print(f"sample ok: {' '.join(names)} ({addrmsnorm.backend()} backend)")
    sys.exit(0)
