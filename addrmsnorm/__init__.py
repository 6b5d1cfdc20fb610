"""addrmsnorm: fused residual add + RMSNorm in one pass over memory.

    h            = float32(x) + float32(residual)
    residual_out = cast(h, residual dtype)
    rstd         = 1 / sqrt(sum(h*h over the last dim) / H + eps)
    y            = cast(h * rstd * (float32(weight) + weight_offset), x dtype)

The functions below call the ``torch.ops.addrmsnorm`` operators; ``backend()`` says whether CUDA
tensors go to the C++ extension ("cpp") or the Triton JIT launcher ("triton").
"""

from . import hf  # addrmsnorm.hf.patch(model): transformers decoders (imports no transformers itself)
from .functional import (fused_add_rmsnorm, fused_add_rmsnorm_, fused_add_rmsnorm_quant,
                         fused_add_rmsnorm_quant_, qk_rmsnorm_, qk_rmsnorm_rope, qk_rmsnorm_rope_, rmsnorm, rmsnorm_, rmsnorm_quant, sandwich_rmsnorm, gated_rmsnorm, gated_rmsnorm_quant,
                         rmsnorm_pair, rmsnorm_pair_,
                         sandwich_rmsnorm_)
from .module import FusedAddRMSNorm, RMSNorm
from .ops import backend, backend_reason
from .reference import fused_add_rmsnorm_ref, rmsnorm_ref

__all__ = ["fused_add_rmsnorm", "fused_add_rmsnorm_", "fused_add_rmsnorm_quant", "fused_add_rmsnorm_quant_", "FusedAddRMSNorm",
           "rmsnorm", "rmsnorm_", "rmsnorm_quant", "qk_rmsnorm_", "qk_rmsnorm_rope", "qk_rmsnorm_rope_", "sandwich_rmsnorm", "sandwich_rmsnorm_", "gated_rmsnorm", "gated_rmsnorm_quant", "rmsnorm_pair", "rmsnorm_pair_",
           "RMSNorm", "backend", "backend_reason", "fused_add_rmsnorm_ref", "rmsnorm_ref"]
__version__ = "0.1.0"
