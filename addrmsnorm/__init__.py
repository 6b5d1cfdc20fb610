"""addrmsnorm: fused residual add + RMSNorm in one pass over memory.

    h            = float32(x) + float32(residual)
    residual_out = cast(h, residual dtype)
    rstd         = 1 / sqrt(sum(h*h over the last dim) / H + eps)
    y            = cast(h * rstd * (float32(weight) + weight_offset), x dtype)
"""

from .functional import fused_add_rmsnorm, fused_add_rmsnorm_
from .reference import fused_add_rmsnorm_ref

__all__ = ["fused_add_rmsnorm", "fused_add_rmsnorm_", "fused_add_rmsnorm_ref"]
__version__ = "0.1.0"
