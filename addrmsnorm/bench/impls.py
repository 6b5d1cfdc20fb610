"""Every implementation the report measures, behind one interface.

The bandwidth grid and the decode chain time each kernel once, through the torch op; the other
entry points to the same kernels are measured for their CPU cost per eager call only.

Each is a function ``fn(x, residual, weight, eps) -> (y, residual_out)``; in-place ones (the
vLLM/FlashInfer convention) write y into x and h into residual and return them. A peer that
cannot be imported is kept, marked unavailable with the reason, and listed as such in the report.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

import addrmsnorm



@dataclass
class Impl:
    name: str
    fn: Callable | None
    in_place: bool
    reason: str = ""                       # why it is unavailable
    ours: bool = False
    supports: Callable = field(default=lambda xd, rd: True)  # (x dtype, residual dtype) -> bool
    setup: Callable | None = None           # called once before its first use
    overhead_only: bool = False             # measured for CPU cost per call only (same kernel as another row)
    latency_only: bool = False              # measured in the decode chain and for CPU cost, not for bandwidth

    @property
    def available(self) -> bool:
        return self.fn is not None


def _same_dtype(xd, rd):
    return xd == rd


def _in_place(call):
    """The report's fn for an in-place call that returns nothing: it hands back (x, residual),
    which now hold (y, h)."""
    def fn(x, r, w, eps):
        call(x, r, w, eps)
        return x, r
    return fn


# ---- addrmsnorm ----------------------------------------------------------------------------

PYTHON_API = "addrmsnorm (Python API)"
PYTHON_API_FUNCTIONAL = "addrmsnorm (Python API, functional)"
MODULE_GRAD_MODE = "addrmsnorm (FusedAddRMSNorm, grad mode on)"


def _ours_python_api():
    return Impl(PYTHON_API, lambda x, r, w, eps: addrmsnorm.fused_add_rmsnorm_(x, r, w, eps),
                in_place=True, ours=True, overhead_only=True)


def _ours_python_api_functional():
    return Impl(PYTHON_API_FUNCTIONAL, lambda x, r, w, eps: addrmsnorm.fused_add_rmsnorm(x, r, w, eps),
                in_place=False, ours=True, overhead_only=True)


def _ours_module():
    """The nn.Module with its weight a Parameter (requires grad), called with grad mode on: what an
    eager HF-style model pays per norm in training, or in inference without torch.no_grad()."""
    modules = {}

    def fn(x, r, w, eps):
        key = (w.shape[0], w.dtype, w.device, eps)
        m = modules.get(key)
        if m is None:
            m = modules[key] = addrmsnorm.FusedAddRMSNorm(w.shape[0], eps, device=w.device, dtype=w.dtype)
            with torch.no_grad():
                m.weight.copy_(w)
        with torch.enable_grad():
            return m(x, r)
    return Impl(MODULE_GRAD_MODE, fn, in_place=False, ours=True, overhead_only=True)


def _ours_jit_backend():
    """The Triton JIT backend called directly: its Python checks, then the JIT launcher."""
    from addrmsnorm import jit_backend

    return Impl("addrmsnorm (Triton JIT backend)", _in_place(jit_backend.norm_), in_place=True, ours=True, overhead_only=True)


def _ours_jit_launch():
    """The Triton JIT launcher alone, with no checks: the floor of any Python path through Triton."""
    from addrmsnorm.launcher import launch_forward

    def fn(x, r, w, eps):
        H = x.shape[-1]
        launch_forward(x, r, w, x, r, None, n_rows=x.numel() // H, H=H, stride_x=H, stride_residual=H,
                       stride_out=H, stride_residual_out=H, eps=eps, weight_offset=0.0)
        return x, r
    return Impl("Triton JIT launch, no checks", fn, in_place=True, ours=True, overhead_only=True)


def _ours_c():
    from addrmsnorm import c_library

    path = c_library.library_path()
    name = "addrmsnorm (C++ runtime)"
    if path is None:
        return Impl(name, None, True, reason="not built (cmake -S . -B build && cmake --build build)", ours=True)
    lib = c_library.load(path)

    def fn(x, r, w, eps):
        H = x.shape[-1]
        x2, r2 = x.view(-1, H), r.view(-1, H)
        c_library.forward(lib, x2, r2, w, x2, r2, None, eps)
        return x, r

    def setup():
        torch.cuda.init()  # the library launches in the current context: make torch create it
        torch.zeros(1, device="cuda")
        if lib.addrmsnorm_preload() != 0:
            raise RuntimeError(lib.addrmsnorm_last_error().decode())

    # The same cubins as the torch op's C++ backend: measured for its CPU cost per call only.
    return Impl(name, fn, True, ours=True, setup=setup, overhead_only=True)


def _ours_torch_op():
    from addrmsnorm import ops

    return Impl(f"addrmsnorm (torch op, {ops.backend()} backend)", _in_place(torch.ops.addrmsnorm.norm_),
                in_place=True, ours=True)


def _ours_torch_op_functional():
    """The functional operator: new y and residual_out, like torch.compile's and Liger's."""
    from addrmsnorm import ops

    op = torch.ops.addrmsnorm.norm.default

    def fn(x, r, w, eps):
        y, h, _ = op(x, r, w, eps)
        return y, h
    return Impl(f"addrmsnorm (torch op, {ops.backend()} backend, functional)", fn, in_place=False, ours=True)


def _ours_torch_op_pdl():
    """The same operator with programmatic dependent launch (opt-in; sm_90+)."""
    from addrmsnorm import ops

    op = torch.ops.addrmsnorm.norm_.default
    return Impl(f"addrmsnorm (torch op, {ops.backend()} backend, PDL)",
                _in_place(lambda x, r, w, eps: op(x, r, w, eps, 0.0, 0, True)), in_place=True, ours=True)


def _one_row_baseline():
    """A plain one-row-per-program Triton kernel: what the decode-chain target is a ratio of."""
    from .baseline import one_row_

    return Impl(BASELINE, _in_place(one_row_), in_place=True, supports=_same_dtype, latency_only=True)


BASELINE = "one-row Triton kernel (baseline)"


# ---- PyTorch ---------------------------------------------------------------------------------

def _hf_eager(x, r, w, eps):
    h = x + r
    hf = h.float()
    y = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w
    return y, h


def _two_kernels(x, r, w, eps):
    h = torch.add(x, r)
    y = F.rms_norm(h, (h.shape[-1],), w if w.dtype == h.dtype else w.to(h.dtype), eps)
    return y.to(x.dtype), h


def contract_torch(x, r, w, eps):
    """The contract in plain torch ops: what torch.compile is given."""
    h = x.float() + r.float()
    rstd = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * rstd * w.float()).to(x.dtype), h.to(r.dtype)


def raise_recompile_limits() -> None:
    """Let Dynamo compile one static graph per shape of a report (rather than stop recompiling, or
    fall back to a dynamic-shape graph, which runs the contract at about half the speed)."""
    import torch._dynamo

    cfg = torch._dynamo.config
    for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(cfg, knob):
            setattr(cfg, knob, 4096)


class CompiledReference:
    """torch.compile(dynamic=False) of the contract, compiled afresh per shape and dtype, with
    the recompile limit raised; records shapes where Dynamo compiled nothing (fell back to eager)."""

    def __init__(self):
        raise_recompile_limits()
        self._compiled = {}
        self.fallbacks = []

    def __call__(self, x, r, w, eps):
        key = (tuple(x.shape), x.dtype, r.dtype, w.dtype, eps)
        fn = self._compiled.get(key)
        if fn is None:
            from torch._dynamo.utils import counters

            before = counters["stats"]["unique_graphs"]
            fn = torch.compile(contract_torch, dynamic=False, fullgraph=False)
            out = fn(x, r, w, eps)
            if counters["stats"]["unique_graphs"] == before:
                self.fallbacks.append(key)
            self._compiled[key] = fn
            return out
        return fn(x, r, w, eps)


# ---- peers -----------------------------------------------------------------------------------

def _liger():
    name = "Liger-Kernel"
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    except Exception as e:  # noqa: BLE001 - any import failure means "not installed"
        return Impl(name, None, False, reason=f"not installed ({type(e).__name__})")

    def fn(x, r, w, eps):
        return LigerFusedAddRMSNormFunction.apply(x, r, w, eps, 0.0, "llama")

    return Impl(name, fn, False, supports=_same_dtype)


def _flashinfer(pdl: bool):
    name = f"FlashInfer{' (PDL)' if pdl else ''}"
    try:
        from flashinfer.norm import fused_add_rmsnorm
    except Exception as e:  # noqa: BLE001
        return Impl(name, None, True, reason=f"not installed ({type(e).__name__})")

    return Impl(name, _in_place(functools.partial(fused_add_rmsnorm, enable_pdl=pdl)), True, supports=_same_dtype)


def _vllm():
    name = "vLLM"
    try:
        from vllm import _custom_ops as ops
    except Exception as e:  # noqa: BLE001
        return Impl(name, None, True, reason=f"not installed ({type(e).__name__})")

    return Impl(name, _in_place(ops.fused_add_rms_norm), True, supports=_same_dtype)


def _quack():
    """Quack's RMSNorm forward with its residual input (quack-kernels, CuTe DSL): new y and residual_out,
    compiled per shape on first use."""
    name = "Quack"
    try:
        from quack.rmsnorm import rmsnorm_fwd
    except Exception as e:  # noqa: BLE001
        return Impl(name, None, False, reason=f"not installed ({type(e).__name__})")

    def fn(x, r, w, eps):
        y, h, _ = rmsnorm_fwd(x, w, residual=r, eps=eps)
        return y, h

    return Impl(name, fn, False)


def all_impls() -> list[Impl]:
    return [
        _ours_torch_op(), _ours_torch_op_pdl(), _ours_torch_op_functional(), _ours_python_api(),
        _ours_python_api_functional(), _ours_module(), _ours_c(), _ours_jit_backend(), _ours_jit_launch(),
        Impl("PyTorch eager, HF style", _hf_eager, False),
        Impl("torch.add + F.rms_norm", _two_kernels, False),
        Impl("torch.compile (reference)", CompiledReference(), False),
        _one_row_baseline(),
        _liger(), _flashinfer(False), _flashinfer(True), _vllm(), _quack(),
    ]
