"""Hugging Face ``transformers`` decoders with every residual add fused into the RMSNorm after it.

In HF's decoder layers the residual add and the norm are separate modules::

    h = residual + attn_out;  y = post_attention_layernorm(h)       # inside layer i
    h = residual + mlp_out;   y = layers[i + 1].input_layernorm(h)  # across the layer boundary

``patch(model)`` turns each such pair into one ``fused_add_rmsnorm`` call, including the pair that
straddles two layers and the last layer's add with the model's final norm. Every other RMSNorm of the
stack runs addrmsnorm's plain norm (``rmsnorm``): the first layer's input norm (there is no add before
it), Qwen 3's and Gemma 3's per-head ``q_norm`` and ``k_norm`` (on the projections' head views, no
copy), and all of OLMo 2's, whose layers normalize each
branch's output before its add (post-norm: no add is followed by a norm) and whose ``q_norm`` and
``k_norm`` span the whole projection. After a patch no module of the family's RMSNorm class runs its
own forward.

How the boundary is crossed. A patched layer ends by computing its MLP add together with the next
norm (the next layer's ``input_layernorm``, or the model's ``norm`` after the last layer), and
returns the pair ``(h, y)``: ``h`` is the residual stream, exactly the tensor the unpatched layer
returns, and ``y`` the next norm's output. The model's own loop passes the pair to the next layer as
its ``hidden_states``; that layer takes ``h`` as its residual and skips its input norm. The final
norm, given a pair, returns ``y``. So the model's forward, its masks and caches and HF's hidden-state
recording (which keeps element 0 of a tuple output: ``h``, as unpatched) run unchanged. A patched
layer given a plain tensor (the first layer, or a layer called on its own) normalizes it itself.

Nothing is added to the module tree: the layers and the norms change class (to a subclass of
their own, so ``isinstance`` and gradient checkpointing work as before), and each layer keeps a
reference to the next norm outside its submodules. Parameters, buffers and the state dict are the
model's own tensors, untouched. ``unpatch(model)`` restores the classes.

Numerics:

* ``"hf"`` (default) reproduces the unpatched model's roundings: the add in the model dtype (h is
  rounded before the variance), rstd as torch computes it, then each family's norm. Llama-style
  norms (Llama, Mistral, Qwen2, Qwen3) round ``h * rstd`` to the model dtype and multiply by the
  weight; Gemma's norms (Gemma, Gemma 2, Gemma 3) multiply by ``1 + w`` in fp32 and round once,
  and OLMo 2's by ``w`` in fp32, once (the plain norm's ``"hf_round_once"``).
  The kernel's ``numerics="hf"`` does the one or the other as the weight has no offset or has one.
  Where the activations, residual and weight are not all of one dtype (training under autocast
  with fp32 parameters: the residual stream is then fp32), HF's own modules add and normalize in
  fp32 and round y once, which is the contract, so the contract serves those calls.
* ``"contract"``: addrmsnorm's contract, the fp32 add with y rounded once; more accurate than HF's.

Granite's layers add ``residual + x * residual_multiplier``: the fused call's ``x_scale`` (with
``"hf"``, x * multiplier rounded to the model dtype first, as HF does). Llama 4's L2 norms of q and k
(weightless, after RoPE) are the plain norm with weight None; its MoE layers' feed-forward output is
reshaped to the residual's shape before the add.

Qwen3-Next's (Qwen3.5's) norms are Gemma's form (``1 + w``, one rounding); its linear-attention layers'
gated norms, ``rmsnorm(x) * w * silu(z)`` on each value head, are the gated norm (z); a layer's token
mixer is its gated delta net or its attention, as its ``block_type`` says.

DeepSeek-V3's layers are Llama's form (its MoE returns the residual's shape); its latent norms,
``q_a_layernorm`` and ``kv_a_layernorm`` (on a column slice of ``kv_a_proj_with_mqa``'s output, no copy),
run the plain norm one at a time: HF's attention projects q's latent before it computes kv's, so the pair
(``rmsnorm_pair``) would need a patched attention forward.

Qwen3's and Gemma 3's attention normalizes each head of q and k (``q_norm``, ``k_norm``), then rotates them
(``apply_rotary_pos_emb``): the patched attention runs the three as one ``qk_rmsnorm_rope`` call on the
projections' heads (HF's cos and sin, by column), under the same numerics; the rest of the attention is
HF's own. Calls the rotation's kernels do not take (fp32 activations, autocast) run HF's attention, with its
norms the plain norm.

Gemma 2/3's layers normalize each branch's output before its add, and the norm after the add is the
next: ``h = residual + post_norm(x); y = next_norm(h)``, twice a layer, is one sandwich-norm call
(``post_weight``), four passes over memory where a plain norm and a fused one take six.

The backward of either is the contract's gradient (HF's extra roundings differentiate as the
identity, as in autograd of HF's modules).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import ops, validation
from .configs import NUMERICS, PLAIN_NUMERICS
from .functional import inverse_order, memory_order


@dataclass(frozen=True)
class _Family:
    model: str      # the decoder stack: has .layers and .norm
    layer: str      # its decoder layer class
    norm: str       # its RMSNorm class
    sandwich: bool  # Gemma 2/3: a norm on each branch's output before its add
    offset: float   # the norm's weight offset: Gemma's 1 + w
    fuse: bool = True        # pre-norm layers, whose adds are followed by norms (OLMo 2's are not)
    hf_numerics: str = "hf"  # the plain norm's numerics that reproduce this family's norm
    x_scale: str = ""        # the layer's attribute that scales each branch's output in its add (Granite's
                             # residual_multiplier: h = residual + x * m), or "" for the plain add
    mlp: str = "mlp"         # the layer's feed-forward module (Llama 4's feed_forward, a MoE in some layers)
    l2_norm: str = ""        # the family's weightless norm class (Llama 4's L2 norm of q and k), or ""
    gated_norm: str = ""     # the family's gated norm class (Qwen3-Next's rmsnorm(x) * w * silu(z)), or ""
    hybrid: bool = False     # Qwen3-Next: a layer's token mixer is linear_attn or self_attn, by its block_type
    attention: str = ""      # the attention class whose per-head q_norm and k_norm, then RoPE, run as one
                             # qk_rmsnorm_rope call (Qwen3's, Gemma 3's), or ""


_FAMILIES = (
    _Family("LlamaModel", "LlamaDecoderLayer", "LlamaRMSNorm", False, 0.0),
    _Family("MistralModel", "MistralDecoderLayer", "MistralRMSNorm", False, 0.0),
    _Family("Qwen2Model", "Qwen2DecoderLayer", "Qwen2RMSNorm", False, 0.0),
    _Family("Qwen3Model", "Qwen3DecoderLayer", "Qwen3RMSNorm", False, 0.0, attention="Qwen3Attention"),
    _Family("GemmaModel", "GemmaDecoderLayer", "GemmaRMSNorm", False, 1.0),
    _Family("Gemma2Model", "Gemma2DecoderLayer", "Gemma2RMSNorm", True, 1.0),
    _Family("Gemma3TextModel", "Gemma3DecoderLayer", "Gemma3RMSNorm", True, 1.0, attention="Gemma3Attention"),
    _Family("Olmo2Model", "Olmo2DecoderLayer", "Olmo2RMSNorm", False, 0.0, fuse=False, hf_numerics="hf_round_once"),
    _Family("GraniteModel", "GraniteDecoderLayer", "GraniteRMSNorm", False, 0.0, x_scale="residual_multiplier"),
    _Family("Llama4TextModel", "Llama4TextDecoderLayer", "Llama4TextRMSNorm", False, 0.0, mlp="feed_forward",
            l2_norm="Llama4TextL2Norm"),
    _Family("Qwen3NextModel", "Qwen3NextDecoderLayer", "Qwen3NextRMSNorm", False, 1.0,
            gated_norm="Qwen3NextRMSNormGated", hybrid=True),
    _Family("DeepseekV3Model", "DeepseekV3DecoderLayer", "DeepseekV3RMSNorm", False, 0.0),
)
_BY_MODEL = {f.model: f for f in _FAMILIES}


def supported_architectures() -> tuple[str, ...]:
    """The decoder stacks ``patch`` knows, by ``transformers`` class name. A model is supported when
    it is one of them or contains one (``LlamaForCausalLM`` contains a ``LlamaModel``,
    ``Gemma3ForConditionalGeneration`` a ``Gemma3TextModel``)."""
    return tuple(f.model for f in _FAMILIES)


@dataclass(frozen=True)
class _Link:
    """What a patched layer needs beyond its own modules. Not a Module, so the next norm is not
    registered twice."""
    family: _Family
    next_norm: torch.nn.Module  # the next layer's input_layernorm, or the model's final norm
    hf: bool
    pdl: bool


_LINK = "_addrmsnorm_link"


def _eps(norm: torch.nn.Module) -> float:
    eps = getattr(norm, "variance_epsilon", None)
    return float(norm.eps if eps is None else eps)


def _fused(x: torch.Tensor, residual: torch.Tensor, norm: torch.nn.Module, link: _Link, x_scale: float = 1.0):
    """``h = residual + x_scale * x; y = norm(h)`` in one kernel: returns (y, h)."""
    w = norm.weight
    hf = link.hf and x.dtype == residual.dtype == w.dtype
    y, h, _ = ops.norm(x, residual, w, _eps(norm), weight_offset=link.family.offset, numerics=int(hf), pdl=link.pdl,
                       x_scale=x_scale)
    return y, h


def _sandwich(x: torch.Tensor, residual: torch.Tensor, post_norm: torch.nn.Module, norm: torch.nn.Module,
              link: _Link):
    """Gemma 2/3's ``h = residual + post_norm(x); y = norm(h)`` in one kernel (the sandwich norm): returns
    (y, h). Where the one call does not take the pair (fp32 activations or weights, as under autocast
    with fp32 parameters; two eps; a width not of 8's multiples), the plain norm, then the fused one."""
    pw, w, eps = post_norm.weight, norm.weight, _eps(norm)
    offset = link.family.offset
    if _eps(post_norm) != eps or not validation.sandwich_takes(x, residual, pw, w):
        return _fused(post_norm(x), residual, norm, link)
    y, h, _ = ops.norm(x, residual, w, eps, weight_offset=offset, numerics=int(link.hf), pdl=link.pdl, post_weight=pw,
                       post_weight_offset=offset)
    return y, h


@dataclass(frozen=True)
class _NormLink:
    """A patched norm's keyword arguments after eps (weight_offset, numerics, pdl), and those for weights of
    another dtype than the input's (numerics the contract: HF's own norms then compute in fp32 and round
    once)."""
    tail: dict
    mixed: dict


_NORM_LINK = "_addrmsnorm_norm"


def _plain_norm(norm: torch.nn.Module, hidden_states, weight, tail: dict):
    """addrmsnorm's plain norm of any view of the input (no copy): in its memory order, y in its strides."""
    order = memory_order(hidden_states)
    if order is None:
        return ops.norm(hidden_states, None, weight, _eps(norm), **tail)[0]
    return ops.norm(hidden_states.permute(order), None, weight, _eps(norm), **tail)[0].permute(inverse_order(order))


def _norm_forward(self, hidden_states):
    """A patched RMSNorm: addrmsnorm's plain norm."""
    link: _NormLink = getattr(self, _NORM_LINK)
    w = self.weight
    return _plain_norm(self, hidden_states, w, link.tail if hidden_states.dtype == w.dtype else link.mixed)


def _l2_norm_forward(self, hidden_states):
    """A patched weightless norm (Llama 4's L2 norm of q and k, after RoPE): the plain norm with weight
    None. HF computes it in fp32 and rounds once, as "hf" does without a weight."""
    return _plain_norm(self, hidden_states, None, getattr(self, _NORM_LINK).tail)


def _gated_norm_forward(self, hidden_states, gate):
    """A patched gated norm (Qwen3-Next's, on the linear attention's (tokens * heads, head_v_dim) rows): the
    gated norm, norm before gate, under the family's numerics. Calls the kernels do not take (fp32
    activations or weights, rows off 16-byte boundaries) run HF's own forward."""
    if not validation.gate_takes(hidden_states, gate, self.weight):
        return _unpatched_type(self).forward(self, hidden_states, gate)
    link: _NormLink = getattr(self, _NORM_LINK)
    return ops.norm(hidden_states, None, self.weight, _eps(self), numerics=link.tail["numerics"],
                    pdl=link.tail["pdl"], z=gate)[0]


def _rope_takes(self, hidden_states, cos, numerics: int) -> bool:
    """Whether the QK norm with the rotation takes this attention's call: 16-bit activations outside autocast,
    heads of at most QK_MAX_HEAD_DIM, q_norm and k_norm of one eps and one dtype (the heads' or fp32), cos and
    sin of the heads' dtype under "hf" (HF's rotary embedding casts them so)."""
    dt = hidden_states.dtype
    wq, wk = self.q_norm.weight, self.k_norm.weight
    return (dt in validation.ROPE_DTYPES and not torch.is_autocast_enabled(hidden_states.device.type)
            and self.head_dim <= validation.QK_MAX_HEAD_DIM and wq.dtype == wk.dtype and wq.dtype in (dt, torch.float32)
            and _eps(self.q_norm) == _eps(self.k_norm) and cos.shape[-1] == self.head_dim
            and cos.dtype in (dt, torch.float32) and not (numerics and (cos.dtype != dt or wq.dtype != dt)))


def _attention_forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs):
    """A patched attention (Qwen3's, Gemma 3's): q_norm, k_norm and apply_rotary_pos_emb as one qk_rmsnorm_rope
    call on the projections' heads (functional: autograd for training); the rest is HF's own attention, its
    cache update and its attention function. Calls the kernels do not take run HF's forward."""
    import sys

    from .functional import qk_rmsnorm_rope
    link: _NormLink = getattr(self, _NORM_LINK)
    if cache is None:  # the name transformers deprecates (its decorator on HF's forward maps it)
        cache = kwargs.pop("past_key_values", None)
    cos, sin = position_embeddings
    offset, numerics, pdl = link.tail["weight_offset"], link.tail["numerics"], link.tail["pdl"]
    if not _rope_takes(self, hidden_states, cos, numerics):
        return _unpatched_type(self).forward(self, hidden_states, position_embeddings, attention_mask, cache, **kwargs)
    hf_module = sys.modules[_unpatched_type(self).__module__]
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    q, k = qk_rmsnorm_rope(self.q_proj(hidden_states).view(hidden_shape), self.k_proj(hidden_states).view(hidden_shape),
                           self.q_norm.weight, self.k_norm.weight, _eps(self.q_norm), cos=cos, sin=sin,
                           weight_offset=offset, numerics=PLAIN_NUMERICS[numerics], pdl=pdl)
    query_states, key_states = q.transpose(1, 2), k.transpose(1, 2)
    value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    if cache is not None:
        key_states, value_states = cache.update(key_states, value_states, self.layer_idx, kwargs=kwargs)
    attention_interface = hf_module.ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation,
                                                                          hf_module.eager_attention_forward)
    attn_output, attn_weights = attention_interface(
        self, query_states, key_states, value_states, attention_mask,
        dropout=self.attention_dropout if self.training else 0.0, scaling=self.scaling,
        sliding_window=self.sliding_window, **kwargs)
    attn_output = attn_output.reshape(*input_shape, -1).contiguous()
    return self.o_proj(attn_output), attn_weights


def _mixer(layer, x: torch.Tensor, kwargs: dict) -> torch.Tensor:
    """The layer's token mixer on the normed input: its attention, or (Qwen3-Next's linear-attention layers)
    its gated delta net, given the arguments the unpatched layer gives it."""
    if getattr(layer, "block_type", None) == "linear_attention":
        rest = {k: v for k, v in kwargs.items() if k not in ("position_embeddings", "position_ids", "cache",
                                                             "attention_mask")}
        return layer.linear_attn(hidden_states=x, cache=kwargs.get("cache"), attention_mask=kwargs.get("attention_mask"),
                                 **rest)
    return layer.self_attn(hidden_states=x, **kwargs)[0]


def _mlp(layer, link: _Link, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """The layer's feed-forward output, shaped as the residual (Llama 4's MoE returns (out, router logits)
    with the tokens flattened)."""
    out = getattr(layer, link.family.mlp)(x)
    if isinstance(out, tuple):
        out = out[0]
    return out.view(residual.shape)


def _split(layer, hidden_states, normed):
    # A pair from the previous patched layer carries the input norm's output already.
    if normed is None:
        normed = layer.input_layernorm(hidden_states)
    return hidden_states, normed


def _forward(self, hidden_states, normed=None, **kwargs):
    """A patched decoder layer. ``kwargs`` are the layer's own (mask, positions, cache, ...),
    passed to its attention as the unpatched layer does. Returns ``(h, next norm's output)``."""
    link: _Link = getattr(self, _LINK)
    residual, x = _split(self, hidden_states, normed)
    x = _mixer(self, x, kwargs)
    # Granite scales each branch's output in its add (residual_multiplier): the kernels' x_scale.
    scale = float(getattr(self, link.family.x_scale)) if link.family.x_scale else 1.0
    if link.family.sandwich:  # Gemma 2/3: the branch is normed before its add, both in one kernel with the next norm
        x, residual = _sandwich(x, residual, self.post_attention_layernorm, self.pre_feedforward_layernorm, link)
        y, h = _sandwich(self.mlp(x), residual, self.post_feedforward_layernorm, link.next_norm, link)
        return h, y
    x, residual = _fused(x, residual, self.post_attention_layernorm, link, scale)
    y, h = _fused(_mlp(self, link, x, residual), residual, link.next_norm, link, scale)
    return h, y


def _call(self, hidden_states, *args, **kwargs):
    # Unpack a pair into two positional arguments, so that reentrant gradient checkpointing (which
    # tracks only top-level tensor arguments) and forward hooks see both tensors.
    if type(hidden_states) is tuple:
        return torch.nn.Module.__call__(self, *hidden_states, *args, **kwargs)
    return torch.nn.Module.__call__(self, hidden_states, *args, **kwargs)


def _final_norm_forward(self, hidden_states):
    if type(hidden_states) is tuple:  # (h, y) from the last patched layer: y is this norm's output
        return hidden_states[1]
    return _norm_forward(self, hidden_states)


_CLASSES: dict = {}


def _patched_class(cls: type, body: dict) -> type:
    # A subclass per original class, made once. GradientCheckpointingLayer's __init_subclass__ wraps
    # the new forward for checkpointing, as it wraps the original.
    key = (cls, tuple(body.items()))
    sub = _CLASSES.get(key)
    if sub is None:
        sub = _CLASSES[key] = type("AddRMSNorm" + cls.__name__, (cls,),
                                   {**body, "_addrmsnorm_unpatched": cls, "__module__": __name__})
    return sub


def _stacks(model: torch.nn.Module):
    found = [(m, _BY_MODEL[type(m).__name__]) for m in model.modules() if type(m).__name__ in _BY_MODEL]
    if not found:
        raise TypeError(
            f"addrmsnorm.hf.patch: {type(model).__name__} is not supported: it contains none of the decoder "
            f"stacks {', '.join(supported_architectures())} (addrmsnorm.hf.supported_architectures())")
    return found


def _check_stack(stack, family: _Family):
    n = getattr(getattr(stack, "config", None), "num_hidden_layers", None)
    layers = list(stack.layers) if n is None else list(stack.layers[:n])
    for name, m in [(f"layers[{i}]", layer) for i, layer in enumerate(layers)] + [("norm", stack.norm)]:
        want = family.norm if name == "norm" else family.layer
        if _unpatched_type(m).__name__ != want:
            raise TypeError(f"addrmsnorm.hf.patch: {type(stack).__name__}.{name} is a {type(m).__name__}, not the "
                            f"{want} it fuses with (was it replaced by another patch?)")
        norms = ["norm"] if name == "norm" else (
            (["input_layernorm", "post_attention_layernorm"] if family.fuse else ["post_attention_layernorm"])
            + (["pre_feedforward_layernorm"] if family.sandwich else [])
            + (["post_feedforward_layernorm"] if family.sandwich or not family.fuse else []))
        for attr in norms:
            norm = m if attr == "norm" else getattr(m, attr, None)
            if norm is None or _unpatched_type(norm).__name__ != family.norm:
                raise TypeError(
                    f"addrmsnorm.hf.patch: {type(stack).__name__}.{name}.{attr} is a {type(norm).__name__}, "
                    f"not a {family.norm}; addrmsnorm reproduces that norm only (was it replaced by "
                    f"another patch?)")
    return layers


# The oldest transformers whose decoder layers this patch is written for: 5.24 renamed the layers' and the
# attentions' cache argument (past_key_values, and Qwen3-Next's linear attention's cache_params) to cache, so on an
# older release a patched Qwen3-Next layer would run its linear attention without its cache. pyproject.toml's
# "hf" extra asks for the same.
MIN_TRANSFORMERS = (5, 24)


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def _check_transformers() -> None:
    from packaging.version import Version  # a dependency of transformers

    version = _transformers_version()
    if Version(version).release[:2] < MIN_TRANSFORMERS:
        need = ".".join(map(str, MIN_TRANSFORMERS))
        raise RuntimeError(f"addrmsnorm.hf.patch needs transformers >= {need}, found {version}: "
                           f"the decoder layers it patches take their cache as `cache` from {need} on "
                           f"(pip install 'transformers>={need}')")


def _unpatched_type(m) -> type:
    return getattr(type(m), "_addrmsnorm_unpatched", type(m))


def patch(model: torch.nn.Module, *, numerics: str = "hf", pdl: bool = False) -> torch.nn.Module:
    """Fuse every residual add of ``model`` with the RMSNorm that follows it, in place.

    Args:
        model: an instantiated ``transformers`` model that is, or contains, one of
            ``supported_architectures()`` (e.g. ``LlamaForCausalLM``).
        numerics: "hf" (the unpatched model's roundings, per family) or "contract" (the fp32 add,
            y rounded once). See the module docstring.
        pdl: launch the fused kernels with programmatic dependent launch (sm_90+), which hides
            launch latency in decode.

    Returns:
        ``model`` itself. Patching again re-links the layers with the new arguments;
        ``unpatch(model)`` undoes it.

    Raises:
        TypeError naming the model's class when it contains no supported decoder stack, or naming
        the module when a layer or norm is not of the class the family has (another patch, such as
        Liger's norm swap, replaced it); ValueError for a bad ``numerics``; RuntimeError where transformers is
        older than MIN_TRANSFORMERS. The model is unchanged when it raises.
    """
    if numerics not in NUMERICS:
        raise ValueError(f"numerics must be one of {', '.join(map(repr, NUMERICS))}, got {numerics!r}")
    if type(pdl) is not bool:
        raise TypeError(f"pdl must be a bool, got {type(pdl).__name__}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"addrmsnorm.hf.patch takes a torch.nn.Module, got {type(model).__name__}")
    _check_transformers()
    plan = [(stack, family, _check_stack(stack, family)) for stack, family in _stacks(model)]
    for stack, family, layers in plan:  # checked all first: nothing changes unless all of it can
        index = PLAIN_NUMERICS.index(family.hf_numerics if numerics == "hf" else "contract")
        link = _NormLink(dict(weight_offset=family.offset, numerics=index, pdl=pdl),
                         dict(weight_offset=family.offset, numerics=0, pdl=pdl))
        for m in stack.modules():  # every norm of the family's classes: the plain norm
            name = _unpatched_type(m).__name__
            if name in (family.norm, family.l2_norm, family.gated_norm) and name:
                forward = {family.norm: _norm_forward, family.l2_norm: _l2_norm_forward,
                           family.gated_norm: _gated_norm_forward}[name]
                m.__class__ = _patched_class(_unpatched_type(m), {"forward": forward})
                object.__setattr__(m, _NORM_LINK, link)
            elif family.attention and name == family.attention:  # its q and k norms and RoPE: one call
                m.__class__ = _patched_class(_unpatched_type(m), {"forward": _attention_forward})
                object.__setattr__(m, _NORM_LINK, link)
        if not family.fuse:
            continue
        for i, layer in enumerate(layers):
            next_norm = layers[i + 1].input_layernorm if i + 1 < len(layers) else stack.norm
            layer.__class__ = _patched_class(_unpatched_type(layer), {"forward": _forward, "__call__": _call})
            object.__setattr__(layer, _LINK, _Link(family, next_norm, numerics == "hf", pdl))
        stack.norm.__class__ = _patched_class(_unpatched_type(stack.norm), {"forward": _final_norm_forward})
    return model


def unpatch(model: torch.nn.Module) -> torch.nn.Module:
    """Undo ``patch``: every patched module gets its class back. Returns ``model``."""
    for m in model.modules():
        cls = getattr(type(m), "_addrmsnorm_unpatched", None)
        if cls is not None:
            m.__class__ = cls
            m.__dict__.pop(_LINK, None)
            m.__dict__.pop(_NORM_LINK, None)
    return model


def is_patched(model: torch.nn.Module) -> bool:
    """Whether any module of ``model`` is patched."""
    return any(getattr(type(m), "_addrmsnorm_unpatched", None) is not None for m in model.modules())
