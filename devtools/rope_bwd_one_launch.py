"""A prototype of the rotation's backward in one launch (issue 66), timed beside the functional form's backward.

The functional form's first-order backward (functional._QkRope.backward) gathers each token's angles from the
cache into fp32 (tokens, rotary_dim) tensors, then runs the backward operator with the rotation once for q's
heads and once for k's, each with its own dweight reduction: five launches or more, and the angles written and read
back. The prototype reads a token's cache row by its position, walks the token's q heads then its k heads in tiles
of HEADS heads (each head as its two halves, NeoX, the whole head rotated), and keeps both weights' dweight
partials in registers; one reduction launch sums the partials of both (a [programs, 2 * head_dim] workspace). Two
launches in all, and only the heads' bytes and the cache rows moved.

It is a measurement, not a kernel of the library: bf16 heads, an fp32 cos_sin_cache, int64 positions inside the
cache, weights of the heads' dtype, the contract's numerics. Its dx is held to the torch operations' gradient
(autograd.qk_rope_backward) within the backward's tolerance, and against the functional form's bits (reported, not
required: the tile's reduction order may differ).

    python devtools/rope_bwd_one_launch.py             the functional form, then the prototype's sweep, T = 8192
    TRITON_INTERPRET=1 python devtools/rope_bwd_one_launch.py --check      the gradients on small shapes, on the CPU
"""

from __future__ import annotations

import itertools
import sys

import torch
import triton
import triton.language as tl

from addrmsnorm import autograd, configs, functional
from addrmsnorm.kernels import _rope_halves_grad, rmsnorm_dweight

EPS = 1e-6
SHAPES = ((8192, 32, 8, 128), (8192, 16, 8, 256))
# Around the best of the first sweep (H100, 2026-12-07: 4 programs an SM, tiles of 8 heads, 2 and 4 warps; tiles of 2
# heads ran at 15-64%): a tile wider than a part's heads is masked (k's 8 heads in tiles of 16). The first sweep's
# kernel unrolled a part's tiles (tl.static_range): its sm_90 code held 200-255 registers at 2 and 4 warps (2
# programs an SM, or spills), where the loop below holds 80 (4 heads) and 128 (8 heads) at 4 warps at 32+8 x 128.
# The second sweep (H100, 2026-12-08, the loop) plateaued at 75% (4-8 programs an SM, 4-16 heads, 2-4 warps), and
# Triton's pipeline (tl.range's num_stages) leaves this loop's code as it is (sm_90, compiled here). The third
# sweep loads ahead by hand: the next token's position and cache row (a token's two dependent loads waited before
# its heads) and a part's next tile of heads.
SWEEP = {"programs_per_sm": (4, 6), "heads": (4, 8), "warps": (2, 4), "prefetch": (False, True),
         "tile_prefetch": (False, True)}


@triton.jit
def _tile(x_ptr, dy_ptr, t, h0, N: tl.constexpr, D: tl.constexpr, HEADS: tl.constexpr):
    """The offsets, mask and raw halves of x and dy of one tile: HEADS heads of token t from head h0 (masked past N)."""
    half: tl.constexpr = D // 2
    heads = h0 + tl.arange(0, HEADS)
    m = (heads < N)[:, None]
    off = (t * N + heads).to(tl.int64)[:, None] * D + tl.arange(0, half)[None, :]
    return (off, m, tl.load(x_ptr + off, mask=m, other=0.0), tl.load(x_ptr + off + half, mask=m, other=0.0),
            tl.load(dy_ptr + off, mask=m, other=0.0), tl.load(dy_ptr + off + half, mask=m, other=0.0))


@triton.jit
def _part(x_ptr, dy_ptr, dx_ptr, w_lo, w_hi, cos, sin, dw_lo, dw_hi, t, eps,
          N: tl.constexpr, D: tl.constexpr, HEADS: tl.constexpr, TILE_PREFETCH: tl.constexpr):
    """One token's N heads of one part (q's or k's), HEADS at a time: dx stored, dweight accumulated. TILE_PREFETCH:
    the next tile's loads go out before this tile is computed (a software pipeline of two tiles)."""
    half: tl.constexpr = D // 2
    off_n, m_n, xl_n, xh_n, dl_n, dh_n = _tile(x_ptr, dy_ptr, t, 0, N, D, HEADS)
    for h0 in range(0, N, HEADS):  # a loop, not unrolled: the tiles' loads are not all held at once
        if TILE_PREFETCH:
            off, m, xl, xh, dl, dh = off_n, m_n, xl_n, xh_n, dl_n, dh_n
            off_n, m_n, xl_n, xh_n, dl_n, dh_n = _tile(x_ptr, dy_ptr, t, h0 + HEADS, N, D, HEADS)
        else:
            off, m, xl, xh, dl, dh = _tile(x_ptr, dy_ptr, t, h0, N, D, HEADS)
        # the library's arithmetic (NeoX, angles by frequency: a column and its partner share cos and sin)
        dx_lo, dx_hi, g_lo, g_hi, n_lo, n_hi = _rope_halves_grad(dl.to(tl.float32), dh.to(tl.float32),
                                                                  xl.to(tl.float32), xh.to(tl.float32), w_lo, w_hi,
                                                                  cos, cos, sin, sin, D, eps)
        tl.store(dx_ptr + off, dx_lo.to(dx_ptr.dtype.element_ty), mask=m)
        tl.store(dx_ptr + off + half, dx_hi.to(dx_ptr.dtype.element_ty), mask=m)
        dw_lo += g_lo * n_lo
        dw_hi += g_hi * n_hi
    return dw_lo, dw_hi


@triton.jit
def _qk_rope_bwd_one_launch(q_ptr, k_ptr, dq_ptr, dk_ptr, dxq_ptr, dxk_ptr, wq_ptr, wk_ptr, pos_ptr, cache_ptr,
                            stride_cache, partial_ptr, T, eps,
                            NQ: tl.constexpr, NK: tl.constexpr, D: tl.constexpr, HEADS: tl.constexpr,
                            PREFETCH: tl.constexpr, TILE_PREFETCH: tl.constexpr):
    """PREFETCH: the next token's position and cache row are loaded at the top of this token's iteration, so that
    their two dependent loads (the position, then the row it points at) wait behind this token's heads, not before
    the next token's. TILE_PREFETCH: see _part."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    half: tl.constexpr = D // 2
    c = tl.arange(0, half)
    wq_lo = tl.load(wq_ptr + c).to(tl.float32)[None, :]
    wq_hi = tl.load(wq_ptr + half + c).to(tl.float32)[None, :]
    wk_lo = tl.load(wk_ptr + c).to(tl.float32)[None, :]
    wk_hi = tl.load(wk_ptr + half + c).to(tl.float32)[None, :]
    dwq_lo = tl.zeros([HEADS, half], dtype=tl.float32)
    dwq_hi = tl.zeros([HEADS, half], dtype=tl.float32)
    dwk_lo = tl.zeros([HEADS, half], dtype=tl.float32)
    dwk_hi = tl.zeros([HEADS, half], dtype=tl.float32)
    per = tl.cdiv(T, n_programs)
    first = pid * per
    end = tl.minimum(first + per, T)
    if PREFETCH:
        has = first < end
        row = cache_ptr + tl.load(pos_ptr + first, mask=has, other=0) * stride_cache
        cos_next = tl.load(row + c, mask=has & (c < half), other=0.0)[None, :]
        sin_next = tl.load(row + half + c, mask=has & (c < half), other=0.0)[None, :]
    for t in range(first, end):
        if PREFETCH:
            cos, sin = cos_next, sin_next
            has = t + 1 < end
            row = cache_ptr + tl.load(pos_ptr + t + 1, mask=has, other=0) * stride_cache
            cos_next = tl.load(row + c, mask=has & (c < half), other=0.0)[None, :]
            sin_next = tl.load(row + half + c, mask=has & (c < half), other=0.0)[None, :]
        else:
            row = cache_ptr + tl.load(pos_ptr + t) * stride_cache
            cos = tl.load(row + c)[None, :]
            sin = tl.load(row + half + c)[None, :]
        dwq_lo, dwq_hi = _part(q_ptr, dq_ptr, dxq_ptr, wq_lo, wq_hi, cos, sin, dwq_lo, dwq_hi, t, eps, NQ, D, HEADS,
                               TILE_PREFETCH)
        dwk_lo, dwk_hi = _part(k_ptr, dk_ptr, dxk_ptr, wk_lo, wk_hi, cos, sin, dwk_lo, dwk_hi, t, eps, NK, D, HEADS,
                               TILE_PREFETCH)
    out = partial_ptr + pid.to(tl.int64) * (2 * D) + c
    tl.store(out, tl.sum(dwq_lo, axis=0))
    tl.store(out + half, tl.sum(dwq_hi, axis=0))
    tl.store(out + D, tl.sum(dwk_lo, axis=0))
    tl.store(out + D + half, tl.sum(dwk_hi, axis=0))


def one_launch(q, k, dq, dk, wq, wk, positions, cache, programs_per_sm=8, heads=4, warps=2, prefetch=False, tile_prefetch=False,
               n_sms=None):
    """(dq_x, dk_x, dwq, dwk) of the QK norm with the rotation (NeoX, whole heads), in two launches."""
    T, nq, D = q.shape
    nk = k.shape[1]
    if n_sms is None:
        n_sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 4
    programs = max(1, min(T, n_sms * programs_per_sm))
    dxq, dxk = torch.empty_like(q), torch.empty_like(k)
    partial = torch.empty(programs, 2 * D, dtype=torch.float32, device=q.device)
    _qk_rope_bwd_one_launch[(programs,)](q, k, dq, dk, dxq, dxk, wq, wk, positions, cache, cache.stride(0), partial,
                                         T, EPS, NQ=nq, NK=nk, D=D, HEADS=heads, PREFETCH=prefetch, TILE_PREFETCH=tile_prefetch,
                                         num_warps=warps)
    dw = torch.empty(2 * D, dtype=wq.dtype, device=q.device)
    bc = configs.DWEIGHT_BLOCK_C
    rmsnorm_dweight[(triton.cdiv(2 * D, bc),)](partial, dw, programs, 2 * D, BLOCK_P=configs.DWEIGHT_BLOCK_P,
                                               BLOCK_C=bc, num_warps=configs.DWEIGHT_WARPS)
    return dxq, dxk, dw[:D], dw[D:]


def functional_form(q, k, dq, dk, wq, wk, positions, cache):
    """The functional form's first-order backward as it runs (the gather, then one operator call a part)."""
    D = q.shape[2]
    c, s = autograd.rope_angles(positions, cache, None, None, D, 0, inside=True)  # checked positions: one gather
    (dxq, dwq), (dxk, dwk) = (functional._rope_part_backward(x, w, dy, c, s, EPS, 0.0, D, 0, True)
                              for x, w, dy in ((q, wq, dq), (k, wk, dk)))
    return dxq, dxk, dwq, dwk


def _inputs(T, nq, nk, D, device, g, max_position=131072):
    q = torch.randn(T, nq, D, generator=g, device=device).bfloat16()
    k = torch.randn(T, nk, D, generator=g, device=device).bfloat16()
    return (q, k, torch.randn_like(q), torch.randn_like(k),
            (1 + 0.1 * torch.randn(D, generator=g, device=device)).bfloat16(),
            (1 + 0.1 * torch.randn(D, generator=g, device=device)).bfloat16(),
            torch.randint(0, max_position, (T,), generator=g, device=device, dtype=torch.int64))


def check(device="cpu", shapes=((16, 4, 2, 64), (9, 3, 1, 128)), **cfg) -> None:
    """The prototype's gradients against the torch operations' (and the functional form's bits, reported)."""
    from addrmsnorm.reference import GRAD_TOLERANCES_BY_DTYPE, assert_grad_close

    tol = GRAD_TOLERANCES_BY_DTYPE[torch.bfloat16]
    for T, nq, nk, D in shapes:
        g = torch.Generator(device=device).manual_seed(T + D)
        q, k, dq, dk, wq, wk, p = _inputs(T, nq, nk, D, device, g, 64)
        cache = torch.randn(64, D, generator=g, device=device)
        got = one_launch(q, k, dq, dk, wq, wk, p, cache, **cfg)
        c, s = autograd.rope_angles(p, cache, None, None, D, 0)
        want_q = autograd.qk_rope_backward(q, wq, dq, EPS, 0.0, c, s, D, 0)
        want_k = autograd.qk_rope_backward(k, wk, dk, EPS, 0.0, c, s, D, 0)
        for name, a, b in (("dq", got[0], want_q[0]), ("dk", got[1], want_k[0]), ("dwq", got[2], want_q[1]),
                           ("dwk", got[3], want_k[1])):
            assert_grad_close(a, b, tol, f"{T} x ({nq} + {nk}) x {D} {name}")
        ours = functional_form(q, k, dq, dk, wq, wk, p, cache)
        same = [torch.equal(a, b) for a, b in zip(got, ours)]
        print(f"check {T} x ({nq} + {nk}) x {D} {cfg}: within the tolerance; the functional form's bits "
              f"(dq, dk, dwq, dwk): {same}")


def bench() -> None:
    from addrmsnorm.bench.timing import measure_roofline, sets_for_cold_l2, time_graph

    roof = measure_roofline().gbs
    print(f"== {torch.cuda.get_device_name()}, roofline {roof:.0f} GB/s")
    for T, nq, nk, D in SHAPES:
        nbytes = 3 * 2 * T * (nq + nk) * D
        g = torch.Generator(device="cuda").manual_seed(T + D)
        cache = torch.randn(131072, D, generator=g, device="cuda")
        sets = [_inputs(T, nq, nk, D, "cuda", g) for _ in range(sets_for_cold_l2(nbytes))]
        check("cuda", ((T, nq, nk, D),))

        def timed(name, fn):
            kept = []
            t = time_graph(lambda i: kept.append(fn(*sets[i], cache)), len(sets))
            gbs = nbytes / t.median_us / 1e3
            print(f"{nq}+{nk} x {D} T {T} | {name:40s} | {t.median_us:7.1f} us | {100 * gbs / roof:5.1f}%", flush=True)

        timed("the functional form (gather, two passes)", functional_form)
        for values in itertools.product(*SWEEP.values()):
            cfg = dict(zip(SWEEP, values))
            if cfg["heads"] > nq:
                continue
            name = (f"one launch: {cfg['programs_per_sm']}/SM, {cfg['heads']} heads, {cfg['warps']} warps"
                    + (", the token ahead" if cfg["prefetch"] else "") + (", the tile ahead" if cfg["tile_prefetch"] else ""))
            try:
                timed(name, lambda *a, cfg=cfg: one_launch(*a, **cfg))
            except Exception as e:  # noqa: BLE001 - a config that does not compile or fit is reported
                print(f"{nq}+{nk} x {D} T {T} | {name} | failed: {type(e).__name__}: {str(e)[:80]}")
        sets = None
        torch.cuda.empty_cache()


if __name__ == "__main__":
    if "--check" in sys.argv:
        check()
    else:
        bench()
