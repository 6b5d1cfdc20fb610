"""The Python API: fused residual add + RMSNorm, functional and in place.

    h            = float32(x) + float32(residual)
    residual_out = cast(h, residual dtype)                   # the next layer's residual
    rstd         = 1 / sqrt(sum(h*h over the last dim) / H + eps)
    y            = cast(h * rstd * (float32(weight) + weight_offset), x dtype)

These functions check their Python-level arguments and call the ``torch.ops.addrmsnorm`` operators
(``ops.py``), so eager code, torch.compile and CUDA graphs all take the one path. The operators'
backends check the tensors.

Training: ``fused_add_rmsnorm`` without ``out``/``residual_out`` has autograd (a Triton backward, see
``kernels.py``). The in-place forms have none: the operators refuse arguments that require grad while
grad mode is on rather than silently cutting the graph, and bump the version counters of what they
write (``autograd.py``).

These functions check only the Python types of their arguments; every other rule is the operators'.
"""

from __future__ import annotations

import contextlib
import math
import re

import torch

from . import autograd, ops
from . import validation as v
from .configs import NUMERICS, PLAIN_NUMERICS


def _hf(numerics) -> bool:
    if numerics not in NUMERICS:
        raise ValueError(f"numerics must be 'contract' or 'hf', got {numerics!r}")
    return numerics == "hf"


def memory_order(t: torch.Tensor):
    """The permutation of t's dimensions that lists its leading ones by decreasing stride (the last
    stays last), or None when they already are. A head's rows transposed, as Gemma 3's
    ``q_proj(x).view(B, T, heads, D).transpose(1, 2)``, are rows of two strides again in that order:
    the plain norm normalizes the permuted view (each row alone, so the order of rows changes no bit)
    and permutes y back, with no copy."""
    if t.dim() < 3:
        return None
    s = t.stride()
    if all(s[i] >= s[i + 1] for i in range(t.dim() - 2)):
        return None
    return sorted(range(t.dim() - 1), key=lambda i: -s[i]) + [t.dim() - 1]


def inverse_order(order):
    inv = [0] * len(order)
    for i, o in enumerate(order):
        inv[o] = i
    return inv


def plain_numerics_index(numerics) -> int:
    """The plain norm's numerics as its operators take them: the index into configs.PLAIN_NUMERICS."""
    if numerics == "contract":
        return 0
    if numerics not in PLAIN_NUMERICS:
        raise ValueError(f"numerics must be one of {', '.join(map(repr, PLAIN_NUMERICS))}, got {numerics!r}")
    return PLAIN_NUMERICS.index(numerics)


_Tensor = torch.Tensor


def _check_types(x, residual, weight, eps, weight_offset, pdl, return_rstd=False, x_scale=1.0):
    # Only what the operators cannot say clearly: their schemas turn a wrong Python type into a
    # RuntimeError. Every rule on values, dtypes, shapes and memory lives in the operators. One
    # expression for the common call (this runs on every eager call; Dynamo traces it away).
    # weight None is the weightless norm.
    if (isinstance(x, _Tensor) and isinstance(residual, _Tensor) and (weight is None or isinstance(weight, _Tensor))
            and type(eps) is float and type(weight_offset) is float and type(pdl) is bool
            and type(return_rstd) is bool and type(x_scale) is float):
        return
    _type_errors({"x": x, "residual": residual, "weight": weight}, eps, weight_offset,
                 {"pdl": pdl, "return_rstd": return_rstd}, x_scale)


_OPTIONAL = ("weight", "q_weight", "k_weight", "a_weight", "b_weight")  # None: the weightless norm


def _type_errors(tensors: dict, eps, weight_offset, flags: dict, x_scale=1.0) -> None:
    """The slow path of the type checks: raise for the first argument of the wrong Python type."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor) and not (t is None and name in _OPTIONAL):
            kind = "a torch.Tensor or None" if name in _OPTIONAL else "a torch.Tensor"
            raise TypeError(f"{name} must be {kind}, got {type(t).__name__}")
    v.check_real("eps", eps)
    v.check_real("weight_offset", weight_offset)
    v.check_real("x_scale", x_scale)
    for name, flag in flags.items():
        if type(flag) is not bool:
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")


def fused_add_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    weight_offset: float = 0.0,
    out: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
    return_rstd: bool = False,
    numerics: str = "contract",
    pdl: bool = False,
    x_scale: float = 1.0,
):
    """Fused ``h = x_scale * x + residual; y = rmsnorm(h) * (weight + weight_offset)``.

    Args:
        x: (..., H) activations, float16, bfloat16 or float32. The last dimension must be
            contiguous; the leading dimensions must flatten to rows with one stride (a row-strided
            view such as ``buf[:, :H]`` is fine, and is not copied).
        residual: (..., H) residual stream, x's dtype or float32 (an fp32 residual stream).
        weight: (H,) weight, any of the three float dtypes; or None, the weightless norm
            (``y = h * rstd``; weight_offset then 0).
        eps: added to the mean square inside the square root; finite and > 0.
        weight_offset: added to the weight in fp32 (1.0 for Gemma's ``1 + w``).
        out: optional (..., H) tensor of x's dtype for y. May be ``x`` or ``residual`` itself.
        residual_out: optional (..., H) tensor of residual's dtype for h. May be ``residual`` or ``x``.
        return_rstd: also return rstd, float32 of shape x.shape[:-1].
        numerics: "contract" (the formula above, y rounded once) or "hf", HF's RMSNorm after an
            add in the model dtype: normalize h rounded to residual's dtype, then, with
            weight_offset == 0, LlamaRMSNorm's roundings (h * rstd rounded to x's dtype, then times
            the weight), and with weight_offset != 0 Gemma's (times weight + weight_offset in fp32,
            rounded once); see kernels.py. "hf" needs residual and weight of x's dtype.
        pdl: launch with programmatic dependent launch (sm_90+; ignored on older GPUs): the
            kernel may start while the previous kernel in the stream is still running and waits
            for it on the GPU before it touches memory, which hides the launch latency in chains
            of small calls. Off by default: see "Programmatic dependent launch" in docs/guide.md.
        x_scale: the scaled residual add of Granite and MiniCPM, ``h = residual + x_scale * x``
            in fp32 (1.0, the default, is the unscaled add bit for bit). With numerics="hf",
            ``x * x_scale`` is rounded to x's dtype first, as those models scale in their dtype.

    Returns:
        ``(y, residual_out)``, or ``(y, residual_out, rstd)`` when ``return_rstd``.

    Raises:
        TypeError / ValueError naming the argument, before the kernel is launched (with ``out`` or
        ``residual_out`` given, the other one is allocated before the operator checks them).
    """
    hf = numerics == "hf" or _hf(numerics)
    _check_types(x, residual, weight, eps, weight_offset, pdl, return_rstd, x_scale)
    if out is None and residual_out is None and weight_offset == 0.0 and x_scale == 1.0 and not (
            return_rstd or hf or pdl):  # the defaults: fewer arguments to parse
        return ops.norm(x, residual, weight, eps)[:2]
    return _fused_call(x, residual, weight, eps, weight_offset, out, residual_out, return_rstd, hf, pdl, x_scale)


def _fused_call(x, residual, weight, eps, weight_offset, out, residual_out, return_rstd, hf, pdl, x_scale,
                post_weight=None, post_weight_offset=0.0):
    """The functional fused forms (fused_add_rmsnorm, sandwich_rmsnorm) after their type checks: new
    outputs, or the caller's (the missing one allocated)."""
    if out is None and residual_out is None:
        # The operator's autograd computes and saves rstd itself whenever a gradient may be needed.
        # by position, in the schema's order (ops.SCHEMAS): the eager path, where keywords cost up to 1.5 µs a call
        y, h, rstd = ops.norm(x, residual, weight, eps, weight_offset, return_rstd, int(hf), pdl, x_scale,
                              post_weight, post_weight_offset)
        return (y, h, rstd) if return_rstd else (y, h)

    # Caller-given outputs: allocate the missing ones. The operator checks them all, and refuses
    # arguments that require grad, before it launches.
    for name, t in (("out", out), ("residual_out", residual_out)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if residual_out is None:
        residual_out = torch.empty(x.shape, dtype=residual.dtype, device=x.device)
    rstd = (torch.empty(v.rstd_shape(x.shape, post_weight is not None), dtype=torch.float32, device=x.device)
            if return_rstd else None)
    # by position, in the schema's order (ops.SCHEMAS): the eager path, where keywords cost up to 1.5 µs a call
    ops.norm_into(x, residual, weight, out, residual_out, rstd, eps, weight_offset, int(hf), pdl, x_scale,
                  post_weight, post_weight_offset)
    return (out, residual_out, rstd) if return_rstd else (out, residual_out)


def rmsnorm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    weight_offset: float = 0.0,
    numerics: str = "contract",
    out: torch.Tensor | None = None,
    return_rstd: bool = False,
    pdl: bool = False,
):
    """The plain RMSNorm, no residual: the fused kernel with the residual compiled out.

        rstd = 1 / sqrt(sum(float32(x)**2 over the last dim) / H + eps)
        y    = cast(float32(x) * rstd * (float32(weight) + weight_offset), x dtype)

    Args:
        x: (..., H), float16, bfloat16 or float32, with a contiguous last dimension. The leading
            dimensions may have any strides where, ordered by stride, all but the last of them
            flatten to one: a head's rows inside a fused QKV buffer,
            ``qkv[:, :q_size].view(T, heads, head_dim)``, with weight ``(head_dim,)``, and their
            transpose ``(1, heads, T, head_dim)`` (HF's layout), are normalized in place or out of it
            without a copy (y has x's strides where x is permuted).
        weight: (H,), any of the three float dtypes; or None, the weightless norm (Llama 4's L2
            norm: ``y = x * rstd``).
        eps, weight_offset, pdl: as in ``fused_add_rmsnorm``.
        numerics: "contract", "hf" (LlamaRMSNorm's roundings, or Gemma's with weight_offset != 0;
            the weight of x's dtype) or "hf_round_once" (HF's norms that multiply by the weight in
            fp32 and round once whatever the offset: OLMo 2's).
        out: optional (..., H) tensor of x's dtype for y, any view as x may be; may be x itself.
        return_rstd: also return rstd, float32 of shape x.shape[:-1].

    Returns:
        y, or ``(y, rstd)`` when ``return_rstd``. Without ``out`` it has autograd (dx and dweight,
        deterministic, from the fused backward with h = x).
    """
    n = plain_numerics_index(numerics)
    _check_norm_types(x, weight, eps, weight_offset, pdl, return_rstd)
    order = memory_order(x)
    if order is not None:  # rows of two strides once permuted: normalize them there, permute back
        inv = inverse_order(order)
        res = rmsnorm(x.permute(order), weight, eps, weight_offset=weight_offset, numerics=numerics,
                      out=None if out is None else out.permute(order), return_rstd=return_rstd, pdl=pdl)
        return (res[0].permute(inv), res[1].permute(inv[:-1])) if return_rstd else res.permute(inv)
    if out is None:
        if weight_offset == 0.0 and not (return_rstd or n or pdl):
            y, _, rstd = ops.norm(x, None, weight, eps)
        else:
            # by position, in the schema's order (ops.SCHEMAS): the eager path, where keywords cost up to 1.5 µs a call
            y, _, rstd = ops.norm(x, None, weight, eps, weight_offset, return_rstd, n, pdl)
        return (y, rstd) if return_rstd else y
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device) if return_rstd else None
    # by position, in the schema's order (ops.SCHEMAS): the eager path, where keywords cost up to 1.5 µs a call
    ops.norm_into(x, None, weight, out, None, rstd, eps, weight_offset, n, pdl)
    return (out, rstd) if return_rstd else out


def rmsnorm_(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    weight_offset: float = 0.0,
    numerics: str = "contract",
    pdl: bool = False,
):
    """In place: ``x <- rmsnorm(x) * (weight + weight_offset)``, with the rules of ``rmsnorm``
    (x may be a head's rows inside a fused QKV buffer). Returns x."""
    n = plain_numerics_index(numerics)
    _check_norm_types(x, weight, eps, weight_offset, pdl)
    order = memory_order(x)
    if order is not None:
        rmsnorm_(x.permute(order), weight, eps, weight_offset=weight_offset, numerics=numerics, pdl=pdl)
        return x
    if weight_offset == 0.0 and not (n or pdl):
        ops.norm_(x, None, weight, eps)
    else:
        # by position, in the schema's order (ops.SCHEMAS): the eager path, where keywords cost up to 1.5 µs a call
        ops.norm_(x, None, weight, eps, weight_offset, n, pdl)
    return x


def _check_gate_types(z, group_size, norm_before_gate) -> None:
    """The gated calls' Python types that the operators cannot name (the values' rules are theirs)."""
    if type(norm_before_gate) is not bool:
        raise TypeError(f"norm_before_gate must be a bool, got {type(norm_before_gate).__name__}")
    if not isinstance(z, _Tensor):
        raise TypeError(f"z must be a torch.Tensor, got {type(z).__name__}")
    if group_size is not None and type(group_size) is not int:
        raise TypeError(f"group_size must be an int or None, got {type(group_size).__name__}")
    if group_size is not None and group_size <= 0:  # 0 is the operators' "the whole row": None here
        raise ValueError(f"group_size must be None (the whole row) or a positive divisor of the row, got {group_size}")


def gated_rmsnorm(
    x: torch.Tensor,
    z: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    group_size: int | None = None,
    norm_before_gate: bool = True,
    activation: str = "silu",
    weight_offset: float = 0.0,
    numerics: str = "contract",
    out: torch.Tensor | None = None,
    pdl: bool = False,
):
    """The gated RMSNorm of Qwen3-Next (Qwen3.5), Mamba2, Nemotron-H and Falcon-H1, in one pass: each
    group of ``group_size`` columns of a row normalized on its own, gated by silu(z).

        norm_before_gate True:   y = cast(rmsnorm(x) * (weight + weight_offset) * silu(z))
        norm_before_gate False:  y = cast(rmsnorm(x * silu(z)) * (weight + weight_offset))

    rmsnorm of a group is ``v * rstd``, ``rstd = 1 / sqrt(sum(v*v over the group) / group_size + eps)``,
    all in fp32 with one rounding at the store; the weight is indexed by the column in the row.

    Args:
        x: (..., H), float16, bfloat16 or float32, rows of one stride (the leading dimensions flatten to one),
            a contiguous last dimension, 16-byte aligned, row strides of multiples of 8 elements.
        z: the gate, x's shape and dtype, under the same rules; its rows may have their own stride (a
            column slice of the input projection's output, as Qwen3-Next's z is).
        weight: (H,) of x's dtype, or None (the weightless gated norm).
        eps: > 0 and finite.
        group_size: the columns normalized together, dividing H, a multiple of 8 and at most
            ``configs.GATED_MAX_GROUP`` (8192); None: the whole row.
        norm_before_gate: the order, as fla-core's ``FusedRMSNormGated`` names it (True: Qwen3-Next's
            ``Qwen3NextRMSNormGated``; False: Mamba2's ``MambaRMSNormGated``).
        activation: the gate's, "silu" (the field names it so that others can follow).
        weight_offset: added to the weight in fp32 (contract numerics only).
        numerics: "contract", or "hf": the HF module's roundings (norm before gate: the normalized
            value rounded to x's dtype, times the weight rounded again, times silu(z) in fp32; gate
            first: x * silu(z) in fp32, then LlamaRMSNorm's two roundings).
        out: optional tensor for y, x's shape and dtype; may be x itself (in place), must not overlap z.
        pdl: programmatic dependent launch (sm_90+; ignored elsewhere).

    Returns:
        y. Autograd gives dx, dz and dweight (autograd.gated_backward: torch operations, not a kernel).
    """
    _check_gate_types(z, group_size, norm_before_gate)
    v.gate_activation_index(activation)
    n = plain_numerics_index(numerics)
    _check_norm_types(x, weight, eps, weight_offset, pdl)
    g = 0 if group_size is None else group_size
    if out is None:
        return ops.norm(x, None, weight, eps, weight_offset=weight_offset, numerics=n, pdl=pdl, z=z, group_size=g,
                        norm_before_gate=norm_before_gate)[0]
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    ops.norm_into(x, None, weight, out, None, None, eps, weight_offset=weight_offset, numerics=n, pdl=pdl, z=z,
                  group_size=g, norm_before_gate=norm_before_gate)
    return out


def gated_rmsnorm_quant(
    x: torch.Tensor,
    z: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    quant_dtype: torch.dtype,
    scale: torch.Tensor | None = None,
    group_size: int | None = None,
    norm_before_gate: bool = True,
    scale_ub: torch.Tensor | None = None,
    ue8m0_scales: bool = False,
    weight_offset: float = 0.0,
    out: torch.Tensor | None = None,
    scales_out: torch.Tensor | None = None,
    return_y: bool = False,
    pdl: bool = False,
):
    """The gated norm (``gated_rmsnorm``, contract numerics) with y quantized for the next GEMM (Qwen3-Next's
    out_proj): ``q = quant(y)``, y the fp32 value, never rounded before. float8_e4m3fn, static (``scale``,
    any group) or per token (no scale; ``group_size`` the row), with ``fused_add_rmsnorm_quant``'s rules for
    the scales. x, z and the weight are float16 or bfloat16 of one dtype. Returns ``(q, scales)`` (static:
    scales is ``scale``), or ``(q, scales, y)`` with ``return_y``. Inference only: no autograd."""
    _check_gate_types(z, group_size, norm_before_gate)
    _check_quant_types(x, x, weight, eps, quant_dtype, scale, None, scale_ub, False, ue8m0_scales, weight_offset,
                       return_y, pdl)
    g = group_size or 0
    if out is None:
        q, _, scales, y = ops.norm_quant(x, None, weight, eps, quant_dtype, scale=scale, scale_ub=scale_ub,
                                         ue8m0_scales=ue8m0_scales, weight_offset=weight_offset, return_y=return_y,
                                         pdl=pdl, z=z, gate_group_size=g, norm_before_gate=norm_before_gate)
    else:
        q, scales, y = _quant_outputs(x, quant_dtype, scale, 0, False, return_y, out, scales_out, False)
        ops.norm_quant_into(x, None, weight, q, None, scales, y, eps, scale=scale, scale_ub=scale_ub,
                            ue8m0_scales=ue8m0_scales, weight_offset=weight_offset, pdl=pdl, z=z, gate_group_size=g,
                            norm_before_gate=norm_before_gate)
    if scales is None:
        scales = scale
    return (q, scales, y) if return_y else (q, scales)


def rmsnorm_pair_(
    a: torch.Tensor,
    a_weight: torch.Tensor | None,
    b: torch.Tensor,
    b_weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    weight_offset: float = 0.0,
    numerics: str = "contract",
    pdl: bool = False,
):
    """Two plain norms of the same rows in one launch, in place: ``a <- rmsnorm(a) * a_weight`` and
    ``b <- rmsnorm(b) * b_weight``. DeepSeek-V3's and Kimi-K2's latent norms, q_a_layernorm (1536) and
    kv_a_layernorm (512): two tensors, or two column slices of one buffer (``buf[:, :1536]`` and
    ``buf[:, 1536:2048]`` of the 2112-wide ``fused_qkv_a_proj`` output; the rest of the row is untouched).

    Each part is the plain norm's contract over its own width (fp32, one rounding). a and b are float16 or
    bfloat16 of one dtype, with the same leading dimensions (the rows, of one stride each), widths of
    multiples of 8 up to ``configs.PAIR_MAX_WIDTH`` (8192), row strides of multiples of 8 and 16-byte
    aligned starts; the weights are of their dtype, both given or both None (weightless). ``numerics="hf"``
    is LlamaRMSNorm's form (DeepSeek's norms), weight_offset 0. No autograd (the mutating form): use
    ``rmsnorm_pair``. Returns (a, b)."""
    n = plain_numerics_index(numerics)
    _check_pair_types(a, a_weight, b, b_weight, eps, weight_offset, pdl)
    with _named_as(_PAIR_IN_PLACE_NAMES):
        ops.norm_(a, None, a_weight, eps, weight_offset=weight_offset, numerics=n, pdl=pdl, b=b, b_weight=b_weight)
    return a, b


def rmsnorm_pair(
    a: torch.Tensor,
    a_weight: torch.Tensor | None,
    b: torch.Tensor,
    b_weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    weight_offset: float = 0.0,
    numerics: str = "contract",
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    pdl: bool = False,
):
    """The functional pair: returns ``(rmsnorm(a) * a_weight, rmsnorm(b) * b_weight)``, new tensors (or into
    ``out=(a_out, b_out)``), in one launch, under the rules of ``rmsnorm_pair_``. Where autograd needs a
    gradient, the two parts run as two ``rmsnorm`` calls (each with its backward): the latent norms are for
    inference, and fusing them would not pay in training."""
    n = plain_numerics_index(numerics)
    _check_pair_types(a, a_weight, b, b_weight, eps, weight_offset, pdl)
    if out is None and torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (a, a_weight, b, b_weight)):
        return (rmsnorm(a, a_weight, eps, weight_offset=weight_offset, numerics=numerics, pdl=pdl),
                rmsnorm(b, b_weight, eps, weight_offset=weight_offset, numerics=numerics, pdl=pdl))
    if out is None:
        a_out = torch.empty(a.shape, dtype=a.dtype, device=a.device)
        b_out = torch.empty(b.shape, dtype=b.dtype, device=b.device)
    else:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"out must be a tuple (a_out, b_out), got {type(out).__name__}")
        a_out, b_out = out
    with _named_as(_PAIR_INTO_NAMES):
        ops.norm_into(a, None, a_weight, a_out, None, None, eps, weight_offset=weight_offset, numerics=n, pdl=pdl,
                      b=b, b_weight=b_weight, b_out=b_out)
    return a_out, b_out


def _check_pair_types(a, a_weight, b, b_weight, eps, weight_offset, pdl):
    if isinstance(b, _Tensor) and (b_weight is None or isinstance(b_weight, _Tensor)):
        _check_norm_types(a, a_weight, eps, weight_offset, pdl)
        return
    _type_errors({"b": b, "b_weight": b_weight}, eps, weight_offset, {"pdl": pdl})


@contextlib.contextmanager
def _named_as(names):
    """The operator's refusal in the words of the function the user called: ``names`` maps the operator's
    argument names to that function's (the pair's a is the operator's x, and in place its out)."""
    try:
        yield
    except (TypeError, ValueError) as e:
        msg = str(e)
        for op_name, user_name in names:
            msg = re.sub(rf"(?<![\w.\[]){re.escape(op_name)}(?![\w\[])", user_name, msg)
        raise type(e)(msg) from None


_PAIR_IN_PLACE_NAMES = (("x", "a"), ("weight", "a_weight"), ("out", "a"))
_PAIR_INTO_NAMES = (("x", "a"), ("weight", "a_weight"), ("b_out", "out[1]"), ("out", "out[0]"))


def _check_norm_types(x, weight, eps, weight_offset, pdl, return_rstd=False):
    if (isinstance(x, _Tensor) and (weight is None or isinstance(weight, _Tensor)) and type(eps) is float
            and type(weight_offset) is float and type(pdl) is bool and type(return_rstd) is bool):
        return
    _type_errors({"x": x, "weight": weight}, eps, weight_offset, {"pdl": pdl, "return_rstd": return_rstd})


def fused_add_rmsnorm_(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    weight_offset: float = 0.0,
    numerics: str = "contract",
    pdl: bool = False,
    x_scale: float = 1.0,
):
    """In place, vLLM/FlashInfer convention: ``residual <- x_scale * x + residual``, then ``x <- y``.

    Takes the same arguments and obeys the same rules as ``fused_add_rmsnorm``; residual must be
    x's dtype or float32. Returns ``(x, residual)``, now holding ``(y, h)``.
    """
    hf = numerics == "hf" or _hf(numerics)
    _check_types(x, residual, weight, eps, weight_offset, pdl, x_scale=x_scale)
    if weight_offset == 0.0 and x_scale == 1.0 and not (hf or pdl):  # the schema's defaults: fewer to parse
        ops.norm_(x, residual, weight, eps)
    else:
        # by position, in the schema's order (ops.SCHEMAS): the eager path, where keywords cost up to 1.5 µs a call
        ops.norm_(x, residual, weight, eps, weight_offset, int(hf), pdl, x_scale)
    return x, residual


def _sandwich_args(x, residual, post_weight, weight, eps, weight_offset, post_weight_offset, numerics, pdl,
                   return_rstd=False):
    """The two sandwich functions' common start: post_weight_offset None takes weight_offset, numerics
    becomes the hf flag, and the arguments' Python types are checked. Returns (hf, post_weight_offset)."""
    if post_weight_offset is None:
        post_weight_offset = weight_offset
    hf = numerics == "hf" or _hf(numerics)
    if not isinstance(post_weight, _Tensor):
        raise TypeError(f"post_weight must be a torch.Tensor, got {type(post_weight).__name__}")
    v.check_real("post_weight_offset", post_weight_offset)
    _check_types(x, residual, weight, eps, weight_offset, pdl, return_rstd)
    return hf, post_weight_offset


def sandwich_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor,
    post_weight: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    weight_offset: float = 0.0,
    post_weight_offset: float | None = None,
    out: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
    return_rstd: bool = False,
    numerics: str = "contract",
    pdl: bool = False,
):
    """The sandwich norm of Gemma 2/3 and GLM-4 in one pass:
    ``h = residual + rmsnorm(x) * (post_weight + post_weight_offset); y = rmsnorm(h) * (weight + weight_offset)``.

    x is the attention's or the MLP's output, normalized by the block's post-norm before it joins
    the residual stream; y is the next block's pre-norm of h. One kernel reads x and residual and
    writes h and y (two norms of one row, both in fp32, as the fused op's contract says: p =
    rmsnorm(x; post_weight) is not rounded before the add).

    Args:
        x, residual: (..., H), float16 or bfloat16, residual of x's dtype; H and every row stride
            multiples of 8, each tensor on a 16-byte boundary (the kernels take 16-byte accesses
            only). As in ``fused_add_rmsnorm`` otherwise.
        post_weight: (H,) the post-norm's weight, x's dtype.
        weight: (H,) the pre-norm's weight, x's dtype; or None (weightless).
        eps: both norms' eps.
        weight_offset: added to weight in fp32 (1.0 for Gemma's ``1 + w``).
        post_weight_offset: added to post_weight in fp32; None (the default) takes weight_offset,
            as a model's norms share their form.
        out, residual_out: as ``fused_add_rmsnorm``'s (out may be x or residual, residual_out
            residual or x).
        return_rstd: also return rstd, float32 of shape (2, *x.shape[:-1]): h's, then x's.
        numerics: "contract", or "hf": HF's modules bit for bit (the post-norm's output rounded to
            x's dtype, the add in x's dtype, then the pre-norm as ``fused_add_rmsnorm``'s "hf");
            needs post_weight_offset equal to weight_offset.
        pdl: as ``fused_add_rmsnorm``'s.

    Returns:
        ``(y, residual_out)``, or ``(y, residual_out, rstd)`` when ``return_rstd``. Differentiable
        in x, residual, post_weight and weight.
    """
    hf, post_weight_offset = _sandwich_args(x, residual, post_weight, weight, eps, weight_offset, post_weight_offset,
                                            numerics, pdl, return_rstd)
    return _fused_call(x, residual, weight, eps, weight_offset, out, residual_out, return_rstd, hf, pdl, 1.0,
                       post_weight, post_weight_offset)


def sandwich_rmsnorm_(
    x: torch.Tensor,
    residual: torch.Tensor,
    post_weight: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    weight_offset: float = 0.0,
    post_weight_offset: float | None = None,
    numerics: str = "contract",
    pdl: bool = False,
):
    """In place, vLLM's convention: ``residual <- residual + rmsnorm(x; post_weight)``, then ``x <- y``.

    Takes the same arguments and obeys the same rules as ``sandwich_rmsnorm``. Returns
    ``(x, residual)``, now holding ``(y, h)``.
    """
    hf, post_weight_offset = _sandwich_args(x, residual, post_weight, weight, eps, weight_offset, post_weight_offset,
                                            numerics, pdl)
    ops.norm_(x, residual, weight, eps, weight_offset=weight_offset, numerics=int(hf), pdl=pdl, post_weight=post_weight,
              post_weight_offset=post_weight_offset)
    return x, residual


def _quant_mode_args(quant_dtype, group_size, scale_dtype=None, swizzled_scales=False):
    """The schema's group_size (0 for none) from the Python API's: fp4 without one is NVFP4 (16), or
    MXFP4 (32) with e8m0 scales. scale_dtype, where given, must be the block format's."""
    if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int)):
        raise TypeError(f"group_size must be an int or None, got {type(group_size).__name__}")
    if type(swizzled_scales) is not bool:
        raise TypeError(f"swizzled_scales must be a bool, got {type(swizzled_scales).__name__}")
    if scale_dtype is not None and not isinstance(scale_dtype, torch.dtype):
        raise TypeError(f"scale_dtype must be a torch.dtype or None, got {type(scale_dtype).__name__}")
    if group_size is None and quant_dtype == torch.float4_e2m1fn_x2:
        group_size = 32 if scale_dtype == torch.float8_e8m0fnu else 16
    gs = 0 if group_size is None else group_size
    if scale_dtype is not None:
        mode = v.quant_mode(None, gs, quant_dtype)
        if mode not in v.BLOCK_MODES:
            raise ValueError(f"scale_dtype is for the block-scaled formats (NVFP4, MXFP8, MXFP4); this call's "
                             f"scales are float32 ({mode})")
        want = v.block_scale_dtype(mode)
        if scale_dtype != want:
            raise ValueError(f"{mode.upper()} writes scales of {want}, not {scale_dtype}")
    return gs


def fused_add_rmsnorm_quant(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    quant_dtype: torch.dtype,
    scale: torch.Tensor | None = None,
    group_size: int | None = None,
    scale_ub: torch.Tensor | None = None,
    column_major_scales: bool = False,
    ue8m0_scales: bool = False,
    weight_offset: float = 0.0,
    out: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
    scales_out: torch.Tensor | None = None,
    return_y: bool = False,
    pdl: bool = False,
    scale_dtype: torch.dtype | None = None,
    swizzled_scales: bool = False,
    x_scale: float = 1.0,
    post_weight: torch.Tensor | None = None,
    post_weight_offset: float | None = None,
):
    """Fused ``h = x_scale * x + residual; y = rmsnorm(h) * (weight + weight_offset); q = quant(y)``
    (weight None: weightless; x_scale as in ``fused_add_rmsnorm``).

    y is the contract's fp32 value (never rounded to x's dtype before it is quantized). The mode
    follows from the arguments:

    * static (``scale`` given, a 1-element fp32 tensor on x's device): ``q = quant(y * (1 / scale))``.
    * per token (neither): ``s = max(min(amax|y|, scale_ub), 1e-10) / qmax`` per row, ``q = quant(y / s)``
      as ``y * (1 / s)``; scales fp32 of shape x.shape[:-1].
    * per group (``group_size`` 64 or 128): the same per group of columns; scales of shape
      ``(*x.shape[:-1], H // group_size)``, row-major, or with ``column_major_scales`` column-major
      with the column stride rounded up to a multiple of 4 rows (DeepGEMM's TMA-aligned layout).

    ``ue8m0_scales`` rounds each dynamic scale up to a power of two (stored as fp32). quant: int8
    (qmax 127) rounds half to even and clamps to [-128, 127]; float8_e4m3fn (qmax 448) clamps to
    +-448 and rounds to nearest even.

    Block-scaled formats (Blackwell's GEMM inputs; docs/guide.md states their arithmetic bit for bit):

    * NVFP4: ``quant_dtype=torch.float4_e2m1fn_x2`` (group_size 16, the default for fp4), ``scale`` the
      global scale (1-element fp32); q ``(..., H // 2)``, scales ``(..., H // 16)`` float8_e4m3fn.
    * MXFP8: ``quant_dtype=torch.float8_e4m3fn, group_size=32``; scales ``(..., H // 32)`` float8_e8m0fnu.
    * MXFP4: ``quant_dtype=torch.float4_e2m1fn_x2, group_size=32`` (or ``scale_dtype=torch.float8_e8m0fnu``).

    ``scale_dtype`` (optional) names the format's scale dtype and is checked against it.
    ``swizzled_scales`` returns the scales as one 1-D tensor in the 128 x 4 tiled layout that
    cuBLASLt's and CUTLASS's block-scaled GEMMs read (rows padded to 128, blocks to 4, padding zeros).

    x: float16 or bfloat16, residual and weight of x's dtype; H a multiple of 16, rows 16-byte
    aligned (what fp8 and int8 GEMMs consume).

    ``post_weight`` quantizes the sandwich norm's y (``h = residual + rmsnorm(x; post_weight +
    post_weight_offset)``, ``post_weight_offset`` defaulting to ``weight_offset``; ``sandwich_rmsnorm``):
    fp8 static, per token and per group, NVFP4 and MXFP8, x_scale 1.

    Returns ``(q, residual_out, scales)``, or ``(q, residual_out, scales, y)`` with ``return_y`` (y in
    x's dtype). In static mode ``scales`` is ``scale``. No autograd: inference only.
    """
    gs = _check_quant_types(x, residual, weight, eps, quant_dtype, scale, group_size, scale_ub, column_major_scales,
                            ue8m0_scales, weight_offset, return_y, pdl, scale_dtype, swizzled_scales, x_scale)
    pwo = _post_offset(post_weight, post_weight_offset, weight_offset)
    if out is None and residual_out is None and scales_out is None:
        q, h, scales, y = ops.norm_quant(x, residual, weight, eps, quant_dtype, scale=scale, group_size=gs,
                                         scale_ub=scale_ub, column_major_scales=column_major_scales,
                                         ue8m0_scales=ue8m0_scales, weight_offset=weight_offset, return_y=return_y,
                                         pdl=pdl, swizzled_scales=swizzled_scales, x_scale=x_scale,
                                         post_weight=post_weight, post_weight_offset=pwo)
    else:
        q, h, scales, y = _quant_into(x, residual, weight, eps, quant_dtype, scale, gs, scale_ub, column_major_scales,
                                      ue8m0_scales, weight_offset, out, residual_out, scales_out, return_y, pdl,
                                      swizzled_scales, x_scale, post_weight, pwo)
    if scales is None:  # static: the caller's scale
        scales = scale
    return (q, h, scales, y) if return_y else (q, h, scales)


def _check_quant_types(x, residual, weight, eps, quant_dtype, scale, group_size, scale_ub, column_major_scales,
                       ue8m0_scales, weight_offset, return_y, pdl, scale_dtype=None, swizzled_scales=False,
                       x_scale=1.0) -> int:
    """The Python types of a quantized call's arguments (as _check_types); returns the schema's
    group_size (0 for none). One expression for the common call, which runs on every eager call."""
    gs = _quant_mode_args(quant_dtype, group_size, scale_dtype, swizzled_scales)
    if not (type(column_major_scales) is bool and type(ue8m0_scales) is bool and type(return_y) is bool
            and type(pdl) is bool):
        for name, flag in (("column_major_scales", column_major_scales), ("ue8m0_scales", ue8m0_scales),
                           ("return_y", return_y), ("pdl", pdl)):
            if type(flag) is not bool:
                raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
    _check_types(x, residual, weight, eps, weight_offset, pdl, x_scale=x_scale)
    if not isinstance(quant_dtype, torch.dtype):
        raise TypeError(f"quant_dtype must be a torch.dtype, got {type(quant_dtype).__name__}")
    if not ((scale is None or isinstance(scale, _Tensor)) and (scale_ub is None or isinstance(scale_ub, _Tensor))):
        for name, t in (("scale", scale), ("scale_ub", scale_ub)):
            if t is not None and not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor (1-element float32, on x's device), got "
                                f"{type(t).__name__}")
    return gs


def _quant_outputs(x, quant_dtype, scale, gs, column_major_scales, return_y, out, scales_out, swizzled=False,
                   **more):
    """A quantized call's outputs where the caller gave some: checks them (and ``more``, the fused call's
    residual_out) and allocates the missing ones (scales as the operator lays them out).
    Returns (q, scales, y)."""
    if isinstance(out, _Tensor) and out.dtype != quant_dtype:
        raise TypeError(f"out has dtype {out.dtype}; it must be quant_dtype ({quant_dtype})")
    for name, t in (("out", out), *more.items(), ("scales_out", scales_out)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    mode = v.quant_mode(scale, gs, quant_dtype)
    if scales_out is not None and mode == "static":
        raise ValueError("scales_out receives dynamic scales; a static call has none to write")
    if column_major_scales and scales_out is not None:
        raise ValueError("column_major_scales lays out scales this call allocates; scales_out has its own "
                         "layout (pass one or the other)")
    q = torch.empty(v.q_shape(x.shape, quant_dtype), dtype=quant_dtype, device=x.device) if out is None else out
    scales = (scales_out if scales_out is not None
              else v.alloc_scales(x.shape, gs, mode, column_major_scales, x.device, swizzled))
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device) if return_y else None
    return q, scales, y


def _post_offset(post_weight, post_weight_offset, weight_offset) -> float:
    """The sandwich norm's first offset as the quantized calls take it: weight_offset's unless given."""
    if post_weight_offset is None:
        return weight_offset if post_weight is not None else 0.0
    v.check_real("post_weight_offset", post_weight_offset)
    return float(post_weight_offset)


def _quant_into(x, residual, weight, eps, quant_dtype, scale, gs, scale_ub, column_major_scales, ue8m0_scales,
                weight_offset, out, residual_out, scales_out, return_y, pdl, swizzled=False, x_scale=1.0,
                post_weight=None, post_weight_offset=0.0):
    """A fused quantized call with caller-given outputs: the missing ones allocated, then the operator
    that writes into them. Returns (q, h, scales, y)."""
    q, scales, y = _quant_outputs(x, quant_dtype, scale, gs, column_major_scales, return_y, out, scales_out,
                                  swizzled, residual_out=residual_out)
    h = torch.empty(x.shape, dtype=residual.dtype, device=x.device) if residual_out is None else residual_out
    ops.norm_quant_into(x, residual, weight, q, h, scales, y, eps, scale=scale, group_size=gs, scale_ub=scale_ub,
                        ue8m0_scales=ue8m0_scales, weight_offset=weight_offset, pdl=pdl, swizzled_scales=swizzled,
                        x_scale=x_scale, post_weight=post_weight, post_weight_offset=post_weight_offset)
    return q, h, scales, y


def fused_add_rmsnorm_quant_(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    out: torch.Tensor,
    quant_dtype: torch.dtype | None = None,
    scale: torch.Tensor | None = None,
    group_size: int | None = None,
    scale_ub: torch.Tensor | None = None,
    column_major_scales: bool = False,
    ue8m0_scales: bool = False,
    weight_offset: float = 0.0,
    scales_out: torch.Tensor | None = None,
    pdl: bool = False,
    scale_dtype: torch.dtype | None = None,
    swizzled_scales: bool = False,
    x_scale: float = 1.0,
    post_weight: torch.Tensor | None = None,
    post_weight_offset: float | None = None,
):
    """vLLM's convention: ``residual <- x_scale * x + residual``, ``out <- quant(y)``; x is left as it was.
    ``post_weight``: the sandwich norm's (``residual <- residual + rmsnorm(x; post_weight)``).

    Takes the arguments of ``fused_add_rmsnorm_quant``; ``quant_dtype`` defaults to out's dtype and
    must equal it. Returns ``(out, residual, scales)``.
    """
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if quant_dtype is not None and quant_dtype != out.dtype:
        raise TypeError(f"quant_dtype is {quant_dtype} but out has dtype {out.dtype}; they must agree")
    gs = _check_quant_types(x, residual, weight, eps, out.dtype, scale, group_size, scale_ub, column_major_scales,
                            ue8m0_scales, weight_offset, False, pdl, scale_dtype, swizzled_scales, x_scale)
    q, h, scales, _ = _quant_into(x, residual, weight, eps, out.dtype, scale, gs, scale_ub, column_major_scales,
                                  ue8m0_scales, weight_offset, out, residual, scales_out, False, pdl, swizzled_scales,
                                  x_scale, post_weight, _post_offset(post_weight, post_weight_offset, weight_offset))
    return q, h, scale if scales is None else scales


def qk_rmsnorm_(
    qkv: torch.Tensor,
    q_weight: torch.Tensor | None,
    k_weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    weight_offset: float = 0.0,
    numerics: str = "contract",
    pdl: bool = False,
    num_v_heads: int = 0,
):
    """Per-head q and k norms of a fused QKV buffer, in place, in one launch (Qwen3's and Gemma 3's
    ``q_norm`` and ``k_norm``, as vLLM and SGLang lay out q, k and v).

    qkv is ``(T, width)`` with a contiguous last dimension and any row stride; its first
    ``num_q_heads * head_dim`` columns are q's heads and the next ``num_kv_heads * head_dim`` k's
    (v, after them, is not touched). Columns past the q and k heads are allowed and never read or
    written: the buffer may hold v or not (a q and k buffer alone is fine), and the C ABI, which
    takes a row stride rather than a width, cannot tell the two apart either. Each head's row is normalized as ``rmsnorm`` does it, q's with
    ``q_weight`` and k's with ``k_weight`` (both ``(head_dim,)``, of one dtype): the same bits as
    ``rmsnorm_`` on ``qkv[:, :q_size].view(T, num_q_heads, head_dim)`` and on k's view. Both weights
    None is the weightless QK norm (Llama 4's L2 norm of q and k). ``num_v_heads`` (Gemma 4's ``v_norm``)
    normalizes that many heads after k's too, with no weight (``rmsnorm_`` with weight None). No autograd (in
    place). Returns qkv.
    """
    n = plain_numerics_index(numerics)
    if not (isinstance(qkv, _Tensor) and isinstance(q_weight, _Tensor) and isinstance(k_weight, _Tensor)):
        _type_errors({"qkv": qkv, "q_weight": q_weight, "k_weight": k_weight}, eps, weight_offset, {"pdl": pdl})
    _type_errors({}, eps, weight_offset, {"pdl": pdl})
    if not (type(num_q_heads) is int and type(num_kv_heads) is int and type(head_dim) is int
            and type(num_v_heads) is int):
        v.check_head_counts(num_q_heads, num_kv_heads, head_dim, num_v_heads)  # the slow path: raise naming it
    ops.qk_rmsnorm_(qkv, q_weight, k_weight, eps, num_q_heads, num_kv_heads, head_dim, weight_offset=weight_offset,
                    numerics=n, pdl=pdl, num_v_heads=num_v_heads)
    return qkv


def qk_rmsnorm_rope_(
    qkv: torch.Tensor,
    q_weight: torch.Tensor | None,
    k_weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    positions: torch.Tensor | None = None,
    cos_sin_cache: torch.Tensor | None = None,
    cos: torch.Tensor | None = None,
    sin: torch.Tensor | None = None,
    rotary_dim: int | None = None,
    style: str = "neox",
    weight_offset: float = 0.0,
    numerics: str = "contract",
    pdl: bool = False,
    check_positions: bool = True,
    num_v_heads: int = 0,
):
    """The QK norm, then the rotation (RoPE) of every q and k head, in place in one pass over the fused QKV
    buffer (Qwen3's, Gemma 3's, GLM-4.5's and OLMo 2's attention: ``q_norm``, ``k_norm``, then
    ``apply_rotary_pos_emb``). qkv, the weights and the head counts are ``qk_rmsnorm_``'s; v is not touched, or
    with ``num_v_heads`` normalized with no weight and not rotated (Gemma 4's ``v_norm``).

    The angles come one of two ways:

    * ``positions`` (int32 or int64, ``(T,)``, one a token, in any order and repeated as a batch of sequences
      has them) with ``cos_sin_cache`` ``(max_position, rotary_dim)``: a position's cosines in the first
      ``rotary_dim / 2`` columns, its sines in the rest (vLLM's layout; YaRN and other scalings live in it);
    * ``cos`` and ``sin`` ``(T, rotary_dim)``, a token's angle per column, as HF's rotary embedding gives them
      (flatten batch and sequence; broadcast over heads).

    The angles are float32 or qkv's dtype. ``rotary_dim`` (None: head_dim) is even and at most head_dim: the
    head's columns past it are normalized and not rotated (GLM's and Phi's partial rotation). ``style``
    "neox" rotates the halves (HF's ``rotate_half``), "gptj" interleaved pairs. ``numerics`` "contract" rotates
    the fp32 norm and rounds once; "hf" is the family's HF norm and ``apply_rotary_pos_emb`` bit for bit (cos
    and sin of qkv's dtype), given the kernel's rstd: torch sums a head's squares in another order, and where the
    last fp32 bit of rstd decides a rounding the two differ by one step (docs/guide.md gives the measured count).
    ``check_positions`` reads positions back to the host to refuse one outside the
    cache before anything is written (a synchronization; skipped while a CUDA graph is captured and under
    torch.compile); the kernel itself never reads past the cache and writes nothing of such a token. No
    autograd (in place). Returns qkv.
    """
    n = plain_numerics_index(numerics)
    if not (isinstance(qkv, _Tensor) and isinstance(q_weight, _Tensor) and isinstance(k_weight, _Tensor)):
        _type_errors({"qkv": qkv, "q_weight": q_weight, "k_weight": k_weight}, eps, weight_offset, {"pdl": pdl})
    _type_errors({}, eps, weight_offset, {"pdl": pdl, "check_positions": check_positions})
    if not (type(num_q_heads) is int and type(num_kv_heads) is int and type(head_dim) is int
            and type(num_v_heads) is int):
        v.check_head_counts(num_q_heads, num_kv_heads, head_dim, num_v_heads)
    rd = _rotary_dim(rotary_dim)
    rs = v.rope_style_index(style)
    if positions is None and cos_sin_cache is None and cos is None and sin is None:
        raise ValueError("qk_rmsnorm_rope_ rotates by positions and cos_sin_cache, or by cos and sin: none is given "
                         "(qk_rmsnorm_ is the QK norm alone)")
    # Positions read back before anything is written, where they and the cache can be read as such; every rule is
    # the operator's (it refuses the calls this skips, and a call with positions outside the cache is refused here
    # first).
    if (check_positions and _eager() and isinstance(positions, _Tensor) and isinstance(cos_sin_cache, _Tensor)
            and positions.dtype in v.POSITION_DTYPES and cos_sin_cache.dim() == 2):
        v.check_positions_in_cache(positions, cos_sin_cache.shape[0])
    ops.qk_rmsnorm_(qkv, q_weight, k_weight, eps, num_q_heads, num_kv_heads, head_dim, weight_offset=weight_offset,
                    numerics=n, pdl=pdl, positions=positions, cos_sin_cache=cos_sin_cache, cos=cos, sin=sin,
                    rotary_dim=rd, rope_style=rs, num_v_heads=num_v_heads)
    return qkv


def _rotary_dim(rotary_dim) -> int:
    """The operators' rotary_dim (0: head_dim) of the functions' (None: head_dim); 0 itself is refused there."""
    if rotary_dim is None:
        return 0
    if type(rotary_dim) is int and rotary_dim <= 0:
        raise ValueError(f"rotary_dim must be None (head_dim) or even in [2, head_dim], got {rotary_dim}")
    return rotary_dim


class _QkRope(torch.autograd.Function):
    """qk_rmsnorm_rope's autograd: the forward one QK-norm call with the rotation on a fresh (tokens, q and k
    heads, head_dim) buffer; the backward autograd.qk_rope_backward for each part."""

    @staticmethod
    def forward(ctx, q, k, q_weight, k_weight, eps, weight_offset, n, pdl, positions, cache, cos, sin, rd, rs,
                checked):
        T, nq, nk, D = q.shape[0], q.shape[1], k.shape[1], q.shape[2]
        buf = torch.cat([q.reshape(T, nq * D), k.reshape(T, nk * D)], dim=1)
        ops.qk_rmsnorm_(buf, q_weight, k_weight, eps, nq, nk, D, weight_offset=weight_offset, numerics=n, pdl=pdl,
                        positions=positions, cos_sin_cache=cache, cos=cos, sin=sin, rotary_dim=rd, rope_style=rs)
        if positions is not None and not checked:
            # Positions not read back (check_positions=False, or under capture or compile): the kernel wrote nothing
            # of a token outside the cache, whose rows of buf still hold its input. They become NaN: never an
            # unnormalized head passed off as a result.
            buf.masked_fill_(((positions < 0) | (positions >= cache.shape[0]))[:, None], float("nan"))
        ctx.save_for_backward(q, k, q_weight, k_weight, positions, cache, cos, sin)
        ctx.checked = checked
        ctx.args = (eps, weight_offset, rd if rd else D, rs)
        return buf[:, :nq * D].view(T, nq, D), buf[:, nq * D:].view(T, nk, D)

    @staticmethod
    def backward(ctx, dq, dk):
        q, k, q_weight, k_weight, positions, cache, cos, sin = ctx.saved_tensors
        eps, weight_offset, rd, rs = ctx.args
        if positions is not None and not ctx.checked and _eager():  # the forward read no positions back
            try:
                v.check_positions_in_cache(positions, cache.shape[0])
            except ValueError as e:
                raise ValueError(f"qk_rmsnorm_rope's backward: {e}; the forward did not check them "
                                 f"(check_positions=False, capture or compile) and gave NaN for those tokens") from None
        # Positions checked (by the forward, or just above) are rows of the cache: one gather. Elsewhere, NaN angles
        # for the tokens outside it.
        c, s = autograd.rope_angles(positions, cache, cos, sin, rd, rs, inside=ctx.checked or _eager())
        if torch.is_grad_enabled():  # create_graph: the gradient in torch operations, differentiable again
            dqx, dwq = autograd.qk_rope_backward(q, q_weight, dq, eps, weight_offset, c, s, rd, rs)
            dkx, dwk = autograd.qk_rope_backward(k, k_weight, dk, eps, weight_offset, c, s, rd, rs)
        else:  # one pass a part: the rotation by the negative angle, then the norm's backward (rmsnorm_bwd's ROPE)
            # the kernel takes rows of any stride, of consecutive columns
            c, s = (a if a.stride(-1) == 1 else a.contiguous() for a in (c, s))
            (dqx, dwq), (dkx, dwk) = (_rope_part_backward(x, w, dy, c, s, eps, weight_offset, rd, rs, need)
                                      for x, w, dy, need in ((q, q_weight, dq, ctx.needs_input_grad[2]),
                                                             (k, k_weight, dk, ctx.needs_input_grad[3])))
        return (dqx, dkx, dwq if ctx.needs_input_grad[2] else None, dwk if ctx.needs_input_grad[3] else None,
                *([None] * 11))


def _rope_part_backward(x, weight, dy, cos, sin, eps, weight_offset, rotary_dim, style, weight_grad):
    """One part's (q's or k's heads, x (tokens, heads, head_dim)) gradients (dx, dweight) by the backward
    operator with the rotation: rows of the heads, a token's heads consecutive."""
    heads, D = x.shape[1], x.shape[2]
    dres, _, dw = ops.norm_backward(dy.reshape(-1, D), None, x.reshape(-1, D), None, weight,
                                    weight_offset=weight_offset, weight_grad=weight is not None and bool(weight_grad),
                                    cos=cos, sin=sin, rope_groups=heads, rotary_dim=rotary_dim, rope_style=style,
                                    eps=eps)
    return dres.view(x.shape), (dw if weight is not None and weight_grad else None)


def qk_rmsnorm_rope(
    q: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor | None,
    k_weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    positions: torch.Tensor | None = None,
    cos_sin_cache: torch.Tensor | None = None,
    cos: torch.Tensor | None = None,
    sin: torch.Tensor | None = None,
    rotary_dim: int | None = None,
    style: str = "neox",
    weight_offset: float = 0.0,
    numerics: str = "contract",
    pdl: bool = False,
    check_positions: bool = True,
):
    """The functional form of ``qk_rmsnorm_rope_``, with autograd (training with HF): q ``(..., num_q_heads,
    head_dim)`` and k ``(..., num_kv_heads, head_dim)``, of the same leading dimensions (the tokens, flattened in
    order: batch, then sequence), each normalized with its weight and rotated; returns new ``(q, k)`` of their
    shapes. The angles are ``qk_rmsnorm_rope_``'s, a row a token: ``cos`` and ``sin`` may have HF's shape
    ``(batch, seq, rotary_dim)``, or ``(1, seq, rotary_dim)``, broadcast over the batch. One copy of q and k into
    one buffer, then the one call on it in place (the outputs are views of that buffer). q and k are HF's
    ``(batch, seq, heads, head_dim)`` layout, the projections' view before HF transposes it; a transposed view
    ``(batch, heads, seq, head_dim)``, whose strides show it, is refused. With ``check_positions=False`` (or
    under CUDA-graph capture and torch.compile, where positions are not read back) a token whose position is
    outside the cache comes back as NaN, and an eager backward then refuses the positions by name.

    The backward is the contract's gradient (HF's roundings differentiate as the identity): the first order one
    ``norm_backward`` launch a part with the rotation (the rotation by the negative angle, then the norm's
    backward); under ``create_graph=True`` the same gradient in fp32 torch operations
    (autograd.qk_rope_backward), which autograd can differentiate again."""
    for name, t in (("q", q), ("k", k)):
        if not isinstance(t, _Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if q.dim() < 2 or k.dim() != q.dim() or q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q has shape {tuple(q.shape)} and k {tuple(k.shape)}: they must be (..., heads, head_dim) "
                         f"with the same leading dimensions and head_dim")
    for name, t in (("q", q), ("k", k)):
        if t.dtype not in v.ROPE_DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; qk_rmsnorm_rope takes float16 or bfloat16 q and k")
        # HF's q and k after its transpose(1, 2), (batch, heads, seq, head_dim): the strides show it even where
        # heads == seq, and read as (batch, seq, heads, head_dim) it would mix tokens and heads.
        if t.dim() >= 3 and t.shape[-3] > 1 and t.shape[-2] > 1 and t.stride(-3) < t.stride(-2):
            raise ValueError(f"{name} has shape {tuple(t.shape)} and strides {t.stride()}: a transposed view, as HF's "
                             f"(batch, heads, seq, head_dim) after its transpose(1, 2); qk_rmsnorm_rope takes "
                             f"(batch, seq, heads, head_dim), the projection's view before the transpose")
    if k.dtype != q.dtype:
        raise TypeError(f"k has dtype {k.dtype}; it must be q's dtype ({q.dtype})")
    lead, D = q.shape[:-2], q.shape[-1]
    T = math.prod(lead)
    qf, kf = q.reshape(T, q.shape[-2], D), k.reshape(T, k.shape[-2], D)
    rd = _rotary_dim(rotary_dim)
    rs = v.rope_style_index(style)
    v.check_rope_types(positions, cos_sin_cache, cos, sin, rd, rs)  # before the angles are reshaped
    cos, sin = _token_rows(cos, lead), _token_rows(sin, lead)
    if positions is not None and positions.dim() > 1:
        positions = positions.reshape(-1)
    n = plain_numerics_index(numerics)
    _type_errors({"q_weight": q_weight, "k_weight": k_weight}, eps, weight_offset,
                 {"pdl": pdl, "check_positions": check_positions})
    if positions is None and cos_sin_cache is None and cos is None and sin is None:
        raise ValueError("qk_rmsnorm_rope rotates by positions and cos_sin_cache, or by cos and sin: none is given")
    checked = check_positions and positions is not None and _eager()
    oq, ok = _QkRope.apply(qf, kf, q_weight, k_weight, eps, weight_offset, n, pdl, positions, cos_sin_cache, cos, sin,
                           rd, rs, checked)
    if checked:  # after the call, which checked every rule (its outputs are its own: nothing of the caller's written)
        v.check_positions_in_cache(positions, cos_sin_cache.shape[0])
    return oq.view(q.shape), ok.view(k.shape)


def _token_rows(angles, lead):
    """HF's cos or sin, ``(batch or 1, seq, rotary_dim)``, as one row a token: broadcast over q's leading
    dimensions (HF gives one batch row when every sequence has the same positions), then flattened."""
    if angles is None or angles.dim() <= 2:
        return angles
    fits = angles.dim() - 1 == len(lead) and all(a in (1, n) for a, n in zip(angles.shape[:-1], lead))
    if not fits:
        raise ValueError(f"cos and sin of shape {tuple(angles.shape)} do not broadcast over q's leading dimensions "
                         f"{tuple(lead)}: they must be (..., rotary_dim), a row a token")
    return angles.expand(*lead, angles.shape[-1]).reshape(-1, angles.shape[-1])


def _eager() -> bool:
    """Not capturing a CUDA graph and not tracing for torch.compile: a host read is allowed."""
    if torch.compiler.is_compiling():
        return False
    return not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def rmsnorm_quant(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    quant_dtype: torch.dtype,
    scale: torch.Tensor | None = None,
    group_size: int | None = None,
    scale_ub: torch.Tensor | None = None,
    column_major_scales: bool = False,
    ue8m0_scales: bool = False,
    weight_offset: float = 0.0,
    out: torch.Tensor | None = None,
    scales_out: torch.Tensor | None = None,
    return_y: bool = False,
    pdl: bool = False,
    scale_dtype: torch.dtype | None = None,
    swizzled_scales: bool = False,
):
    """The plain norm's quantized outputs (fp8 or int8 serving of a first layer's input norm):
    ``y = rmsnorm(x) * (weight + weight_offset)`` in fp32, ``q = quant(y)``, as an epilogue of the
    same kernel. The modes (the block-scaled formats too), dtypes, scale layouts and rules are
    ``fused_add_rmsnorm_quant``'s, with no residual (x of float16 or bfloat16, weight of x's dtype, H a multiple of 16, aligned rows).

    Returns ``(q, scales)``, or ``(q, scales, y)`` with ``return_y``. In static mode ``scales`` is
    ``scale``. No autograd: inference only.
    """
    gs = _check_quant_types(x, x, weight, eps, quant_dtype, scale, group_size, scale_ub, column_major_scales,
                            ue8m0_scales, weight_offset, return_y, pdl, scale_dtype, swizzled_scales)
    if out is None and scales_out is None:
        q, _, scales, y = ops.norm_quant(x, None, weight, eps, quant_dtype, scale=scale, group_size=gs,
                                         scale_ub=scale_ub, column_major_scales=column_major_scales,
                                         ue8m0_scales=ue8m0_scales, weight_offset=weight_offset, return_y=return_y,
                                         pdl=pdl, swizzled_scales=swizzled_scales)
    else:
        q, scales, y = _quant_outputs(x, quant_dtype, scale, gs, column_major_scales, return_y, out, scales_out,
                                      swizzled_scales)
        ops.norm_quant_into(x, None, weight, q, None, scales, y, eps, scale=scale, group_size=gs, scale_ub=scale_ub,
                            ue8m0_scales=ue8m0_scales, weight_offset=weight_offset, pdl=pdl,
                            swizzled_scales=swizzled_scales)
    if scales is None:  # static: the caller's scale
        scales = scale
    return (q, scales, y) if return_y else (q, scales)
