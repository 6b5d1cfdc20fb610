"""addrmsnorm.distributed on a process group of two ranks: gloo with CPU tensors, the kernels under the
Triton interpreter (the test's processes set TRITON_INTERPRET=1 themselves; it needs no GPU).

Both ranks derive every rank's partials from one seed, so each can compute the one-process reference of
the summed partials; the test compares y and h with it, both ranks' outputs bit for bit with each other,
and checks the refusals: a shape that differs across ranks, a rank whose own arguments are refused.
"""

import os
import tempfile

import pytest
import torch

from conftest import needs_kernels

pytestmark = [needs_kernels, pytest.mark.skipif(not torch.distributed.is_available() or
                                                 not torch.distributed.is_gloo_available(),
                                                 reason="needs torch.distributed with gloo")]

WORLD = 2


def _partials(N, H, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    parts = [torch.randn(N, H, generator=g).to(dtype) for _ in range(WORLD)]
    r = (2 * torch.randn(N, H, generator=g)).to(dtype)
    w = (1 + 0.1 * torch.randn(H, generator=g)).to(dtype)
    return parts, r, w


def _worker(rank, init_file, results):
    import torch.distributed as dist

    import addrmsnorm
    from addrmsnorm import distributed as D
    from addrmsnorm.reference import TOLERANCES, fused_add_rmsnorm_ref

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    out = {}
    try:
        assert D.path() == "fallback"
        for dtype, H in ((torch.float32, 96), (torch.float16, 1000)):
            parts, r, w = _partials(5, H, dtype, seed=H)
            x = parts[rank].clone()
            y, h = D.fused_allreduce_add_rmsnorm(x, r, w, 1e-6)
            assert torch.equal(x, parts[rank]), "x_partial was written"
            total = parts[0].clone()
            for p in parts[1:]:
                total += p  # the sum in x's dtype, as the backend sums
            ref = fused_add_rmsnorm_ref(total, r, w, 1e-6)
            tol = TOLERANCES[dtype]
            out[f"y {dtype}"] = ((y.double() - ref.y).abs() / (tol.atol + tol.rtol * ref.y.abs())).max().item()
            out[f"h exact {dtype}"] = torch.equal(h, ref.residual_out)
            every = [torch.empty_like(y) for _ in range(WORLD)]
            dist.all_gather(every, y)
            out[f"ranks agree {dtype}"] = all(torch.equal(e.view(torch.int16 if dtype != torch.float32 else torch.int32),
                                                          y.view(torch.int16 if dtype != torch.float32 else torch.int32))
                                              for e in every)
            # In place: x_partial <- y, residual <- h.
            xi, ri = parts[rank].clone(), r.clone()
            D.fused_allreduce_add_rmsnorm_(xi, ri, w, 1e-6)
            out[f"in place {dtype}"] = torch.equal(xi, y) and torch.equal(ri, h)
        # A shape that differs on rank 1: every rank raises, naming x_partial and the ranks.
        parts, r, w = _partials(4, 64, torch.float32)
        x = parts[rank] if rank == 0 else parts[rank][:3]
        rr = r if rank == 0 else r[:3]
        try:
            D.fused_allreduce_add_rmsnorm(x, rr, w, 1e-6)
            out["mismatch"] = "no error"
        except ValueError as e:
            out["mismatch"] = str(e)
        # A rank whose own arguments are refused (eps): it raises its error, the other names it.
        try:
            D.fused_allreduce_add_rmsnorm(parts[rank], r, w, 1e-6 if rank == 0 else -1.0)
            out["refused"] = "no error"
        except ValueError as e:
            out["refused"] = str(e)
        # A group of one rank runs the single-GPU op.
        groups = [dist.new_group([i]) for i in range(WORLD)]  # every rank makes every group
        one = groups[rank]
        y1, h1 = D.fused_allreduce_add_rmsnorm(parts[rank], r, w, 1e-6, group=one)
        y0, h0 = addrmsnorm.fused_add_rmsnorm(parts[rank], r, w, 1e-6)
        out["single"] = D.path(one) == "single" and torch.equal(y1, y0) and torch.equal(h1, h0)
    except Exception as e:  # noqa: BLE001 - reported to the test
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        dist.destroy_process_group()
    results.put((rank, out))


def test_two_ranks_with_gloo():
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as d:
        init_file = os.path.join(d, "init")
        procs = [ctx.Process(target=_worker, args=(rank, init_file, results)) for rank in range(WORLD)]
        before = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1"  # the children's kernels run on the CPU, GPU or not
        try:
            for p in procs:
                p.start()
        finally:
            if before is None:
                del os.environ["TRITON_INTERPRET"]
            else:
                os.environ["TRITON_INTERPRET"] = before
        got = dict(results.get(timeout=300) for _ in procs)
        for p in procs:
            p.join(timeout=60)
    for rank, out in got.items():
        assert "error" not in out, out["error"]
        for dtype in (torch.float32, torch.float16):
            assert out[f"y {dtype}"] <= 1.0, (rank, out)  # within the reference's tolerance
            assert out[f"h exact {dtype}"] and out[f"ranks agree {dtype}"] and out[f"in place {dtype}"], (rank, out)
        assert "x_partial is torch.float32 of shape (3, 64) on rank 1 but torch.float32 of shape (4, 64) on rank 0" \
            in out["mismatch"], out["mismatch"]
        want = "eps must be > 0" if rank == 1 else "rank 1 of the group refused its arguments"
        assert want in out["refused"], (rank, out["refused"])
        assert out["single"], rank


def test_uninitialized_is_named():
    from addrmsnorm import distributed as D

    if torch.distributed.is_initialized():
        pytest.skip("a process group is initialized in this process")
    with pytest.raises(RuntimeError, match="torch.distributed is not initialized"):
        D.path()
