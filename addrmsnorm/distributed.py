"""Tensor parallelism: the all-reduce that ends an attention or MLP block under tensor parallelism,
with the residual add and the RMSNorm after it, on a ``torch.distributed`` process group.

    y, h = fused_allreduce_add_rmsnorm(x_partial, residual, weight, eps, group=group)

    x      = the sum over the group's ranks of x_partial   (each rank holds its partial output)
    h      = float32(x) + float32(residual)                 the fused op's contract from here on
    y      = rmsnorm(h) * (weight + weight_offset)

Every rank gets the same y and h. Paths, by what the group and the tensors allow (``path(group)``
says which a call takes):

* ``"single"``: a group of one rank runs the single-GPU fused op.
* ``"fallback"``: the group's own ``all_reduce`` of x_partial (NCCL for CUDA tensors, gloo for CPU
  tensors under the Triton interpreter), then the fused op. The sum is the backend's, in x_partial's
  dtype and its order of ranks; the add and the norm are the contract's. It is also the benchmarks'
  baseline.

The fused kernel over symmetric memory (one-shot and two-shot, peers' buffers read over NVLink) is
not in this release: it needs two GPUs to build and test, and every call takes the fallback.

Before the collective, each rank checks its own arguments (the fused op's rules), and the group
compares every rank's shapes and dtypes in one small all_gather (``check_ranks``; skipped while a
CUDA graph is being captured, where it cannot synchronize). A rank whose arguments are refused, or
that disagrees with rank 0, makes every rank raise: the refusing rank its own error, the others one
that names it, so no rank waits in a collective that the others never join.
"""

from __future__ import annotations

import re

import torch

from . import functional
from . import validation as v

PATHS = ("single", "fallback")
_DTYPE_CODES = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}
_MAX_DIMS = 8


def _dist():
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError("addrmsnorm.distributed needs torch.distributed, which this torch build lacks")
    return dist


def world_size(group=None) -> int:
    dist = _dist()
    if not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialized: call torch.distributed.init_process_group first")
    return dist.get_world_size(group)


def path(group=None) -> str:
    """The path a call on ``group`` takes: "single" for a group of one rank, else "fallback"."""
    return "single" if world_size(group) == 1 else "fallback"


def _signature(x_partial, residual, weight, local_error: str | None) -> list[int]:
    """This rank's call as integers: whether its own checks passed, then each tensor's dtype and shape."""
    sig = [0 if local_error else 1]
    for t in (x_partial, residual, weight):
        if not isinstance(t, torch.Tensor) or t.dim() > _MAX_DIMS or t.dtype not in _DTYPE_CODES:
            sig += [-1] * (2 + _MAX_DIMS)
            continue
        sig += [_DTYPE_CODES[t.dtype], t.dim()] + list(t.shape) + [0] * (_MAX_DIMS - t.dim())
    return sig


_NAMES = ("x_partial", "residual", "weight")
_DTYPE_NAMES = {code: str(d) for d, code in _DTYPE_CODES.items()}


def _describe(sig: list[int], i: int) -> str:
    code, ndim = sig[1 + i * (2 + _MAX_DIMS)], sig[2 + i * (2 + _MAX_DIMS)]
    if code < 0:
        return "an unsupported tensor"
    shape = tuple(sig[3 + i * (2 + _MAX_DIMS):3 + i * (2 + _MAX_DIMS) + ndim])
    return f"{_DTYPE_NAMES[code]} of shape {shape}"


def _check_ranks(x_partial, residual, weight, local_error, group, device) -> None:
    """One all_gather of every rank's signature; raise on every rank if any refused or disagrees."""
    dist = _dist()
    n = world_size(group)
    mine = torch.tensor(_signature(x_partial, residual, weight, local_error), dtype=torch.int64, device=device)
    every = [torch.empty_like(mine) for _ in range(n)]
    dist.all_gather(every, mine, group=group)
    sigs = [t.tolist() for t in every]
    me = dist.get_rank(group)
    if local_error:
        raise ValueError(local_error)
    refused = [r for r, s in enumerate(sigs) if s[0] == 0]
    if refused:
        raise ValueError(f"addrmsnorm.distributed: rank {refused[0]} of the group refused its arguments (its own "
                         f"error says why); no rank ran the all-reduce")
    for i, name in enumerate(_NAMES):
        for r, s in enumerate(sigs):
            if _describe(s, i) != _describe(sigs[0], i):
                raise ValueError(f"{name} is {_describe(s, i)} on rank {r} but {_describe(sigs[0], i)} on rank 0 "
                                 f"(this is rank {me}); every rank passes the same shapes and dtypes")


def _local_checks(x_partial, residual, weight, eps, weight_offset, numerics) -> str | None:
    try:
        if not (isinstance(x_partial, torch.Tensor) and isinstance(residual, torch.Tensor)
                and isinstance(weight, torch.Tensor)):
            for name, t in zip(_NAMES, (x_partial, residual, weight)):
                if not isinstance(t, torch.Tensor):
                    raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        v.check_scalar("eps", eps, positive=True)
        v.check_scalar("weight_offset", weight_offset, positive=False)
        v.check_forward_meta(x_partial, residual, weight, hf=functional._hf(numerics))
        v.check_same_shape(x_partial.shape, {"residual": residual})
    except (TypeError, ValueError) as e:
        return re.sub(r"\bx\b", "x_partial", str(e))  # the fused op's words, for this API's argument
    return None


def _reduce(x, group, check_ranks, residual, weight, eps, weight_offset, numerics, x_partial) -> None:
    dist = _dist()
    local_error = _local_checks(x_partial, residual, weight, eps, weight_offset, numerics)
    capturing = x.is_cuda and torch.cuda.is_current_stream_capturing()
    if check_ranks and not capturing:
        _check_ranks(x_partial, residual, weight, local_error, group, x.device)
    elif local_error:
        raise ValueError(local_error)
    dist.all_reduce(x, op=dist.ReduceOp.SUM, group=group)


def fused_allreduce_add_rmsnorm(
    x_partial: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    group=None,
    weight_offset: float = 0.0,
    numerics: str = "contract",
    out: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
    check_ranks: bool = True,
):
    """``h = sum over the group of x_partial + residual``, ``y = rmsnorm(h)``: returns ``(y, h)``.

    x_partial and residual are each rank's own ``(..., H)`` tensors, weight ``(H,)``, with the rules of
    ``fused_add_rmsnorm``; every rank passes the same shapes and dtypes. x_partial and residual are
    not written: the fallback reduces a copy of x_partial (which becomes y unless ``out`` is given).
    ``out`` and ``residual_out`` as in ``fused_add_rmsnorm``. ``group``: the process group (None: the
    default group). ``check_ranks``: compare the ranks' shapes and dtypes first (the module docstring).
    """
    if world_size(group) == 1:
        return functional.fused_add_rmsnorm(x_partial, residual, weight, eps, weight_offset=weight_offset,
                                            numerics=numerics, out=out, residual_out=residual_out)
    x = x_partial.clone(memory_format=torch.contiguous_format) if isinstance(x_partial, torch.Tensor) else x_partial
    _reduce(x, group, check_ranks, residual, weight, eps, weight_offset, numerics, x_partial)
    return functional.fused_add_rmsnorm(x, residual, weight, eps, weight_offset=weight_offset, numerics=numerics,
                                        out=x if out is None else out, residual_out=residual_out)


def fused_allreduce_add_rmsnorm_(
    x_partial: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    group=None,
    weight_offset: float = 0.0,
    numerics: str = "contract",
    check_ranks: bool = True,
):
    """In place, vLLM's convention: ``residual <- sum of x_partial + residual``, ``x_partial <- y``.
    Returns ``(x_partial, residual)``. The rules of ``fused_allreduce_add_rmsnorm``."""
    if world_size(group) > 1:
        if isinstance(x_partial, torch.Tensor) and not x_partial.is_contiguous():
            raise ValueError("x_partial must be contiguous: the in-place form all-reduces it where it is "
                             "(fused_allreduce_add_rmsnorm reduces a copy)")
        _reduce(x_partial, group, check_ranks, residual, weight, eps, weight_offset, numerics, x_partial)
    functional.fused_add_rmsnorm_(x_partial, residual, weight, eps, weight_offset=weight_offset, numerics=numerics)
    return x_partial, residual
