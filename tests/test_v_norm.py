"""Gemma 4's v_norm in the QK call (num_v_heads): v's heads, after k's in the fused QKV buffer, normalized in the
same launch with no weight and not rotated, while q's and k's are normalized with their weights (and rotated when
angles are given).

Held to the library's own calls: q's and k's heads give the bits of the call without v, and v's heads the bits of
the weightless plain norm (rmsnorm_ with weight None) of v's view; the columns after v are untouched. Both
backends and the C ABI give the same bits on the GPU; the refusals name num_v_heads and write nothing."""

import pytest
import torch

import addrmsnorm
from addrmsnorm import jit_backend

from conftest import DEVICE, gpu_only, needs_kernels
from helpers import assert_refused, bits, c_library_or_skip

pytestmark = needs_kernels
OPS = torch.ops.addrmsnorm


def _qkv(T, nq, nk, nv, D, dtype, seed=0, pad=16):
    g = torch.Generator().manual_seed(seed)
    return (2 * torch.randn(T, (nq + nk + nv) * D + pad, generator=g)).to(dtype).to(DEVICE)


def _weights(D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed + 100)
    return tuple((1 + 0.2 * torch.randn(D, generator=g)).to(dtype).to(DEVICE) for _ in range(2))


def _cache(max_position, rotary_dim):
    inv = 1.0 / 10000.0 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    f = torch.arange(max_position, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([f.cos(), f.sin()], dim=-1).float().to(DEVICE)


def _expected(qkv, wq, wk, nq, nk, nv, D, rope):
    """q's and k's heads by the call without v, v's by the weightless plain norm of its view."""
    want = qkv.clone()
    if rope:
        addrmsnorm.qk_rmsnorm_rope_(want, wq, wk, num_q_heads=nq, num_kv_heads=nk, head_dim=D, **rope)
    else:
        addrmsnorm.qk_rmsnorm_(want, wq, wk, num_q_heads=nq, num_kv_heads=nk, head_dim=D)
    v0, v1 = (nq + nk) * D, (nq + nk + nv) * D
    v = qkv[:, v0:v1].clone().view(-1, nv, D)
    addrmsnorm.rmsnorm_(v, None)
    want[:, v0:v1] = v.view(-1, nv * D)
    return want


# (T, q heads, kv heads, v heads, head_dim): Gemma 4's sliding layers (head_dim 256) and its global ones (512), and
# a small odd case.
SHAPES = [(3, 4, 2, 2, 64), (5, 8, 4, 4, 256), (2, 8, 1, 1, 512)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("weighted", [True, False], ids=["weighted", "weightless"])
@pytest.mark.parametrize("rope", [None, "cache", "partial"])
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "misaligned"])
def test_v_heads_are_the_weightless_norm_and_q_k_unchanged(shape, weighted, rope, aligned):
    """Misaligned (qkv one element past a 16-byte boundary): the kernels with v heads are built at the vector alone,
    and the C runtime runs the call as two launches, q's and k's heads, then v's, with the same bits."""
    T, nq, nk, nv, D = shape
    dtype = torch.bfloat16
    qkv = _qkv(T, nq, nk, nv, D, dtype, seed=T + D)
    if not aligned:
        qkv = qkv[:, 1:]
    wq, wk = _weights(D, dtype) if weighted else (None, None)
    angles = None
    if rope is not None:
        rd = D if rope == "cache" else D // 2  # partial: the scalar kernels (configs.rope_on_vector)
        g = torch.Generator().manual_seed(1)
        angles = {"positions": torch.randint(0, 64, (T,), generator=g).to(DEVICE), "cos_sin_cache": _cache(64, rd),
                  "rotary_dim": rd}
    got = qkv.clone()
    if angles:
        addrmsnorm.qk_rmsnorm_rope_(got, wq, wk, num_q_heads=nq, num_kv_heads=nk, head_dim=D, num_v_heads=nv, **angles)
    else:
        addrmsnorm.qk_rmsnorm_(got, wq, wk, num_q_heads=nq, num_kv_heads=nk, head_dim=D, num_v_heads=nv)
    assert torch.equal(bits(got), bits(_expected(qkv, wq, wk, nq, nk, nv, D, angles)))


def test_refusals_name_num_v_heads_and_write_nothing():
    T, nq, nk, nv, D = 2, 4, 2, 2, 64
    qkv = _qkv(T, nq, nk, nv, D, torch.bfloat16, pad=0)
    wq, wk = _weights(D, torch.bfloat16)
    assert_refused(ValueError, "num_v_heads must be >= 0", lambda: addrmsnorm.qk_rmsnorm_(
        qkv, wq, wk, num_q_heads=nq, num_kv_heads=nk, head_dim=D, num_v_heads=-1), qkv)
    assert_refused(ValueError, r"q, k and v heads' \(4 \+ 2 \+ 3\)", lambda: addrmsnorm.qk_rmsnorm_(
        qkv, wq, wk, num_q_heads=nq, num_kv_heads=nk, head_dim=D, num_v_heads=3), qkv)
    assert_refused(TypeError, "num_v_heads must be an int", lambda: addrmsnorm.qk_rmsnorm_(
        qkv, wq, wk, num_q_heads=nq, num_kv_heads=nk, head_dim=D, num_v_heads=2.0), qkv)


@gpu_only
def test_c_abi_and_both_backends_give_the_same_bits():
    from addrmsnorm import c_library
    lib = c_library_or_skip()
    for T, nq, nk, nv, D, start in ((1, 8, 4, 4, 256, 0), (300, 16, 8, 8, 256, 0), (77, 8, 1, 1, 512, 0),
                                    (300, 16, 8, 8, 256, 1)):  # start 1: misaligned, two launches in C
        qkv = _qkv(T, nq, nk, nv, D, torch.bfloat16, seed=T)[:, start:]
        wq, wk = _weights(D, torch.bfloat16)
        cache, pos = _cache(4096, D), torch.randint(0, 4096, (T,), device=DEVICE)
        op, jit, c = qkv.clone(), qkv.clone(), qkv.clone()
        OPS.qk_rmsnorm_(op, wq, wk, 1e-6, nq, nk, D, positions=pos, cos_sin_cache=cache, rotary_dim=D,
                        num_v_heads=nv)
        jit_backend.qk_rmsnorm_(jit, wq, wk, 1e-6, nq, nk, D, positions=pos, cos_sin_cache=cache, rotary_dim=D,
                                num_v_heads=nv)
        rope = c_library.rope_desc(positions=pos, cos_sin_cache=cache, rotary_dim=D, style=0)
        c_library.qk_rmsnorm(lib, c, wq, wk, nq, nk, D, rope=rope, num_v_heads=nv)
        torch.cuda.synchronize()
        assert torch.equal(bits(op), bits(jit)) and torch.equal(bits(op), bits(c)), (T, nq, nk, nv, D)
