"""The ``torch.ops.addrmsnorm`` operators: schemas, fake (meta) implementations, and the backend.

One operator per form; each takes an optional residual, and without one is the plain norm (h = x):

    norm(x, residual?, weight?, eps, weight_offset=0., return_rstd=False, numerics=0, pdl=False, x_scale=1.,
         post_weight?=None, post_weight_offset=0., z?=None, group_size=0, norm_before_gate=True)
        -> (y, residual_out, rstd)     functional; residual_out has 0 elements without a residual, rstd
                                       unless return_rstd; post_weight: the sandwich norm; z: the gated
                                       norm (no residual; norm_ and norm_into take the same fields)
    norm_(x!, residual!?, weight, eps, weight_offset=0., numerics=0, pdl=False, ..., b!?=None, b_weight?=None) -> ()
        in place, vLLM/FlashInfer convention: residual <- x + residual, x <- y
    norm_into(x, residual?, weight, out!, residual_out!?, rstd!?, eps, ...) -> ()
        into caller-given outputs, which may alias x or residual exactly
    norm_backward(dy, dresidual_out?, h, rstd?, weight, weight_offset=0., weight_grad=True, cos?=None, sin?=None,
                  rope_groups=0, rotary_dim=0, rope_style=0, eps=0.)
        -> (dresidual, dx, dweight)    dx has 0 elements when x's dtype is residual's; the plain
                                       norm's is this with h = x (its dx is dresidual); with cos and
                                       sin, the plain norm's backward of rotated heads (rstd None)
    norm_quant(x, residual?, weight, eps, quant_dtype, scale?, group_size=0, scale_ub?, ...)
        -> (q, residual_out, scales?, y?)   scales None when static, y None unless return_y
    norm_quant_into(x, residual?, weight, out!, residual_out!?, scales_out!?, y!?, eps, ...) -> ()
    qk_rmsnorm_(qkv!, q_weight, k_weight, eps, num_q_heads, num_kv_heads, head_dim, ...) -> ()
        q's and k's heads of a fused QKV buffer, in place, one launch

``numerics`` is the index into ``configs.PLAIN_NUMERICS`` everywhere: 0 "contract", 1 "hf", 2
"hf_round_once" (no residual). The functional operator has autograd; the mutating ones refuse
arguments that require grad while grad mode is on, and bump the version counters of what they write
(``autograd.py``, or its C++ twin: one autograd per backend, covering every operator).

Backends. CUDA tensors go to one of:

* "cpp": the C++ extension (``torch_ext/ops.cpp``, built by CMake as libaddrmsnorm_torch.so next to
  libaddrmsnorm.so, which it links; ``pip install .`` installs both in the package, and where torch
  came after the wheel, the first import builds it: ``torch_ext_build.py``), which checks
  its arguments in C++ and calls the C ABI of the AOT-compiled runtime on torch's current stream. A
  few microseconds per call.
* "triton": ``jit_backend.py``, Python checks and the Triton JIT launcher. Works wherever Triton
  does, at the cost of Python per call.

``ADDRMSNORM_BACKEND`` = ``auto`` (default: "cpp" when the extension is built and torch has CUDA),
``cpp`` (fail at import if it cannot load) or ``triton``. ``backend()`` says which was chosen and
``backend_reason()`` why. Where torch has CUDA but "auto" cannot use the extension (not built, built
against another torch, failed to load), the import warns with the reason (BackendFallbackWarning).
CPU tensors (under the Triton interpreter) always take the JIT backend.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch

from . import autograd, jit_backend, locate, torch_ext_build
from . import validation as v
from .launcher import INTERPRETED

NAMESPACE = "addrmsnorm"
_QUANT_TAIL = ("float eps, Tensor? scale=None, int group_size=0, Tensor? scale_ub=None, bool ue8m0_scales=False, "
               "float weight_offset=0., bool pdl=False, bool swizzled_scales=False, float x_scale=1., "
               "Tensor? post_weight=None, float post_weight_offset=0., Tensor? z=None, int gate_group_size=0, "
               "bool norm_before_gate=True) -> ()")
# weight None: the weightless norm. x_scale: h = residual + x_scale * x (1: the unscaled add). post_weight:
# the sandwich norm, h = residual + rmsnorm(x; post_weight + post_weight_offset) (rstd then (2, rows...)).
# z: the gated norm (no residual), rmsnorm(x) * silu(z) over groups of group_size columns (0: the row), or
# rmsnorm(x * silu(z)) with norm_before_gate False.
_SANDWICH = ("Tensor? post_weight=None, float post_weight_offset=0., Tensor? z=None, int group_size=0, "
             "bool norm_before_gate=True")
# b: the pair (no residual), b's rows normalized with b_weight in the same launch, into b (norm_) or b_out.
_PAIR_IN_PLACE = "Tensor(d!)? b=None, Tensor? b_weight=None"
_PAIR_INTO = "Tensor? b=None, Tensor? b_weight=None, Tensor(e!)? b_out=None"
# The rotation of the normalized heads (RoPE): positions (int32 or int64, one a token) into cos_sin_cache
# (max_position, rotary_dim: cos, then sin), or cos and sin (tokens, rotary_dim) by column, as HF gives them.
# rotary_dim 0 is head_dim; rope_style 0 NeoX (rotate_half), 1 GPT-J (interleaved).
_ROPE = ("Tensor? positions=None, Tensor? cos_sin_cache=None, Tensor? cos=None, Tensor? sin=None, int rotary_dim=0, "
         "int rope_style=0")
# The rotation's backward: the plain norm's of heads (rope_groups a token, rows (tokens * rope_groups, head_dim))
# that the forward rotated, cos and sin fp32 (tokens, rotary_dim) by column; rstd is then None (computed from h
# and eps).
_ROPE_BACKWARD = "Tensor? cos=None, Tensor? sin=None, int rope_groups=0, int rotary_dim=0, int rope_style=0, float eps=0."
SCHEMAS = {
    "norm": "(Tensor x, Tensor? residual, Tensor? weight, float eps, float weight_offset=0., "
            "bool return_rstd=False, int numerics=0, bool pdl=False, float x_scale=1., " + _SANDWICH
            + ") -> (Tensor, Tensor, Tensor)",
    "norm_": "(Tensor(a!) x, Tensor(b!)? residual, Tensor? weight, float eps, float weight_offset=0., "
             "int numerics=0, bool pdl=False, float x_scale=1., " + _SANDWICH + ", " + _PAIR_IN_PLACE + ") -> ()",
    "norm_into": "(Tensor x, Tensor? residual, Tensor? weight, Tensor(a!) out, Tensor(b!)? residual_out, "
                 "Tensor(c!)? rstd, float eps, float weight_offset=0., int numerics=0, bool pdl=False, "
                 "float x_scale=1., " + _SANDWICH + ", " + _PAIR_INTO + ") -> ()",
    "norm_backward": "(Tensor dy, Tensor? dresidual_out, Tensor h, Tensor? rstd, Tensor? weight, "
                     "float weight_offset=0., bool weight_grad=True, " + _ROPE_BACKWARD + ") -> (Tensor, Tensor, Tensor)",
    "norm_quant": "(Tensor x, Tensor? residual, Tensor? weight, float eps, ScalarType quant_dtype, "
                  "Tensor? scale=None, int group_size=0, Tensor? scale_ub=None, bool column_major_scales=False, "
                  "bool ue8m0_scales=False, float weight_offset=0., bool return_y=False, bool pdl=False, "
                  "bool swizzled_scales=False, float x_scale=1., Tensor? post_weight=None, "
                  "float post_weight_offset=0., Tensor? z=None, int gate_group_size=0, bool norm_before_gate=True) "
                  "-> (Tensor, Tensor, Tensor?, Tensor?)",
    "norm_quant_into": "(Tensor x, Tensor? residual, Tensor? weight, Tensor(a!) out, Tensor(b!)? residual_out, "
                       "Tensor(c!)? scales_out, Tensor(d!)? y, " + _QUANT_TAIL,
    # Per-head q and k norms of a fused QKV buffer, in place, in one launch (both weights None: weightless).
    "qk_rmsnorm_": "(Tensor(a!) qkv, Tensor? q_weight, Tensor? k_weight, float eps, int num_q_heads, "
                   "int num_kv_heads, int head_dim, float weight_offset=0., int numerics=0, bool pdl=False, "
                   + _ROPE + ", int num_v_heads=0) -> ()",
}
BACKEND_ENV = "ADDRMSNORM_BACKEND"
EXTENSION_ENV = "ADDRMSNORM_TORCH_EXT"
EXTENSION_NAME = "libaddrmsnorm_torch.so"


class BackendFallbackWarning(UserWarning):
    """CUDA calls run on the Triton JIT backend because the C++ extension cannot be used."""

_lib = torch.library.Library(NAMESPACE, "DEF")
for _name, _schema in SCHEMAS.items():
    _lib.define(_name + _schema)

_JIT_IMPLS = {name: getattr(jit_backend, name) for name in SCHEMAS}


# ----- fake implementations: shapes and dtypes for torch.compile and meta tensors -------------------

# The rules that need no memory, from validation.py (the one place they are written in Python); the
# real implementations check everything again, memory included.

def _fake_residual_out(x, residual):
    if residual is None:
        return x.new_empty((0,))
    return torch.empty_like(residual, memory_format=torch.contiguous_format)


def _fake_forward_meta(x, residual, weight, out=None, residual_out=None, rstd=None, *, eps=None, weight_offset=None,
                       numerics=0, x_scale=1.0, post_weight=None, post_weight_offset=0.0, z=None, group_size=0,
                       norm_before_gate=True, return_rstd=False, b=None, b_weight=None, b_out=None):
    if residual is None:
        v.check_rmsnorm_meta(x, weight, out, rstd, eps=eps, weight_offset=weight_offset, numerics=numerics,
                             x_scale=x_scale, post_weight=post_weight, post_weight_offset=post_weight_offset, z=z,
                             group_size=group_size, norm_before_gate=norm_before_gate, return_rstd=return_rstd,
                             b=b, b_weight=b_weight, b_out=b_out, residual_out=residual_out)
    else:
        v.check_forward_meta(x, residual, weight, out, residual_out, rstd, eps=eps, weight_offset=weight_offset,
                             numerics=numerics, x_scale=x_scale, post_weight=post_weight,
                             post_weight_offset=post_weight_offset, z=z, group_size=group_size,
                             norm_before_gate=norm_before_gate, b=b, b_weight=b_weight, b_out=b_out)


@torch.library.register_fake(f"{NAMESPACE}::norm")
def _(x, residual, weight, eps, weight_offset=0.0, return_rstd=False, numerics=0, pdl=False, x_scale=1.0,
      post_weight=None, post_weight_offset=0.0, z=None, group_size=0, norm_before_gate=True):
    _fake_forward_meta(x, residual, weight, eps=eps, weight_offset=weight_offset, numerics=numerics, x_scale=x_scale,
                       post_weight=post_weight, post_weight_offset=post_weight_offset, z=z, group_size=group_size,
                       norm_before_gate=norm_before_gate, return_rstd=return_rstd)
    rstd = x.new_empty(v.rstd_shape(x.shape, post_weight is not None) if return_rstd else (0,), dtype=torch.float32)
    return torch.empty_like(x, memory_format=torch.contiguous_format), _fake_residual_out(x, residual), rstd


@torch.library.register_fake(f"{NAMESPACE}::norm_")
def _(x, residual, weight, eps, weight_offset=0.0, numerics=0, pdl=False, x_scale=1.0, post_weight=None,
      post_weight_offset=0.0, z=None, group_size=0, norm_before_gate=True, b=None, b_weight=None):
    _fake_forward_meta(x, residual, weight, x, residual, eps=eps, weight_offset=weight_offset, numerics=numerics,
                       x_scale=x_scale, post_weight=post_weight, post_weight_offset=post_weight_offset, z=z,
                       group_size=group_size, norm_before_gate=norm_before_gate, b=b, b_weight=b_weight, b_out=b)


@torch.library.register_fake(f"{NAMESPACE}::norm_into")
def _(x, residual, weight, out, residual_out, rstd, eps, weight_offset=0.0, numerics=0, pdl=False, x_scale=1.0,
      post_weight=None, post_weight_offset=0.0, z=None, group_size=0, norm_before_gate=True, b=None, b_weight=None,
      b_out=None):
    _fake_forward_meta(x, residual, weight, out, residual_out, rstd, eps=eps, weight_offset=weight_offset,
                       numerics=numerics, x_scale=x_scale, post_weight=post_weight,
                       post_weight_offset=post_weight_offset, z=z, group_size=group_size,
                       norm_before_gate=norm_before_gate, b=b, b_weight=b_weight, b_out=b_out)


@torch.library.register_fake(f"{NAMESPACE}::norm_quant")
def _(x, residual, weight, eps, quant_dtype, scale=None, group_size=0, scale_ub=None, column_major_scales=False,
      ue8m0_scales=False, weight_offset=0.0, return_y=False, pdl=False, swizzled_scales=False, x_scale=1.0,
      post_weight=None, post_weight_offset=0.0, z=None, gate_group_size=0, norm_before_gate=True):
    shape, _, device, mode = v.check_quant_meta(x, residual, weight, quant_dtype, scale, group_size, scale_ub,
                                                ue8m0=ue8m0_scales, column_major=column_major_scales,
                                                swizzled=swizzled_scales, eps=eps, weight_offset=weight_offset,
                                                x_scale=x_scale, post_weight=post_weight,
                                                post_weight_offset=post_weight_offset, z=z,
                                                gate_group_size=gate_group_size, norm_before_gate=norm_before_gate)
    y = x.new_empty(shape) if return_y else None
    scales = v.alloc_scales(shape, group_size, mode, column_major_scales, device, swizzled_scales)
    return (x.new_empty(v.q_shape(shape, quant_dtype), dtype=quant_dtype), _fake_residual_out(x, residual), scales, y)


@torch.library.register_fake(f"{NAMESPACE}::norm_quant_into")
def _(x, residual, weight, out, residual_out, scales_out, y, eps, scale=None, group_size=0, scale_ub=None,
      ue8m0_scales=False, weight_offset=0.0, pdl=False, swizzled_scales=False, x_scale=1.0, post_weight=None,
      post_weight_offset=0.0, z=None, gate_group_size=0, norm_before_gate=True):
    v.check_quant_meta(x, residual, weight, out.dtype, scale, group_size, scale_ub, out, residual_out, scales_out, y,
                       ue8m0=ue8m0_scales, swizzled=swizzled_scales, eps=eps, weight_offset=weight_offset,
                       x_scale=x_scale, post_weight=post_weight, post_weight_offset=post_weight_offset, z=z,
                       gate_group_size=gate_group_size, norm_before_gate=norm_before_gate)


@torch.library.register_fake(f"{NAMESPACE}::norm_backward")
def _(dy, dresidual_out, h, rstd, weight, weight_offset=0.0, weight_grad=True, cos=None, sin=None, rope_groups=0,
      rotary_dim=0, rope_style=0, eps=0.0):
    v.check_backward_meta(dy, dresidual_out, h, rstd, weight, weight_offset=weight_offset, cos=cos, sin=sin,
                          rope_groups=rope_groups, rotary_dim=rotary_dim, rope_style=rope_style, eps=eps,
                          weight_grad=weight_grad)
    dres = torch.empty_like(h, memory_format=torch.contiguous_format)
    dx = torch.empty_like(dy, memory_format=torch.contiguous_format) if dy.dtype != h.dtype else dy.new_empty((0,))
    if weight is None:  # the weightless norm: no weight gradient
        return dres, dx, h.new_empty((0,))
    return dres, dx, weight.new_empty(weight.shape if weight_grad else (0,))


@torch.library.register_fake(f"{NAMESPACE}::qk_rmsnorm_")
def _(qkv, q_weight, k_weight, eps, num_q_heads, num_kv_heads, head_dim, weight_offset=0.0, numerics=0, pdl=False,
      positions=None, cos_sin_cache=None, cos=None, sin=None, rotary_dim=0, rope_style=0, num_v_heads=0):
    v.check_qk_rmsnorm_meta(qkv, q_weight, k_weight, num_q_heads, num_kv_heads, head_dim, eps=eps,
                            weight_offset=weight_offset, numerics=numerics, positions=positions,
                            cos_sin_cache=cos_sin_cache, cos=cos, sin=sin, rotary_dim=rotary_dim,
                            rope_style=rope_style, num_v_heads=num_v_heads)


# ----- backend selection ----------------------------------------------------------------------------

def extension_path() -> Path | None:
    """The C++ extension: $ADDRMSNORM_TORCH_EXT, else the installed package's lib/, else build/ in
    the source tree (locate.py); None where there is none."""
    p = locate.find(EXTENSION_NAME, EXTENSION_ENV)
    return p if p is not None and p.is_file() else None


_REBUILD = "pip install . (or pip install --no-build-isolation . to build against this environment's torch)"


def _usable_extension() -> tuple[Path | None, str | None]:
    """The extension to load and None, or None and why there is none. Where the installed one is
    missing or built for another torch, and $ADDRMSNORM_TORCH_EXT does not name one, it is built for
    this torch (torch_ext_build.py, cached: once per torch version)."""
    path = extension_path()
    problem = None
    named = os.environ.get(EXTENSION_ENV)
    if named and path is None:
        problem = (f"${EXTENSION_ENV} names {named}, which does not exist (point it at a built {EXTENSION_NAME}, "
                   f"or unset it to use the installed one)")
    elif path is None:
        problem = (f"the C++ extension is not built ({EXTENSION_NAME} is in neither the installed package, "
                   f"build/ nor ${EXTENSION_ENV})")
    else:
        built_with = locate.build_info(path).get("torch")
        if built_with and built_with != torch.__version__:
            problem = f"{path} was built against torch {built_with}, and this is torch {torch.__version__}"
    if problem is None:
        return path, None
    if named and path is None:
        return None, problem
    if named or not torch_ext_build.enabled():
        why = f"${EXTENSION_ENV} names it" if named else f"{torch_ext_build.BUILD_ENV}=0"
        return None, f"{problem}; rebuild it: {_REBUILD} (not built at import: {why})"
    try:
        return torch_ext_build.build(locate.find("libaddrmsnorm.so", "ADDRMSNORM_LIB")), None
    except torch_ext_build.BuildError as e:
        return None, f"{problem}, and building it for torch {torch.__version__} failed: {e}"


def _select_backend() -> tuple[str, str]:
    want = os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto"
    if want not in ("auto", "cpp", "triton"):
        raise ValueError(f"{BACKEND_ENV}={want!r}: expected auto, cpp or triton")
    if want == "triton":
        return "triton", f"{BACKEND_ENV}=triton"
    if want == "auto":
        if INTERPRETED:
            return "triton", "TRITON_INTERPRET=1: the kernels run on the CPU"
        if torch.version.cuda is None:
            return "triton", "this torch has no CUDA, so the C++ extension is not used"
    path, problem = _usable_extension()
    if problem is None:
        try:
            torch.ops.load_library(str(path))
        except OSError as e:
            problem = f"{path} failed to load ({e})"
    if problem is None:
        global _EXTENSION
        _EXTENSION = path
        return "cpp", f"C++ extension {path}"
    if want == "cpp":
        raise ImportError(f"{BACKEND_ENV}=cpp but {problem}")
    warnings.warn(f"addrmsnorm runs CUDA calls on the Triton JIT backend (more CPU time per call): {problem}",
                  BackendFallbackWarning, stacklevel=2)
    return "triton", problem


_EXTENSION: Path | None = None  # the extension the cpp backend loaded


def extension_status() -> str:
    """For ``python -m addrmsnorm``: "built for torch <version> (<path>)", or "missing: <reason>"."""
    if _EXTENSION is not None:
        return f"built for torch {torch.__version__} ({_EXTENSION})"
    path = extension_path() or torch_ext_build.cached(locate.find("libaddrmsnorm.so", "ADDRMSNORM_LIB"))
    built_with = locate.build_info(path).get("torch") if path else None
    if path is not None and built_with == torch.__version__:
        return f"built for torch {built_with} ({path}; not used: {_REASON})"
    return f"missing: {_REASON}"


_BACKEND, _REASON = _select_backend()
# CPU tensors: the interpreter (jit_backend refuses CPU tensors otherwise). With C_CHECKS_ENV=1 and the cpp
# backend, the C++ extension's operators instead, in its check-only mode for CPU tensors (torch_ext/ops.cpp): the
# C path's refusals, words included, seen on a machine without a GPU (scripts/test.sh runs the refusal tests so).
C_CHECKS_ENV = "ADDRMSNORM_C_CHECKS_ON_CPU"
if _BACKEND == "cpp" and os.environ.get(C_CHECKS_ENV) == "1":
    _CUDA_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    for _name in SCHEMAS:
        _lib.impl(_name, lambda *a, _op=getattr(getattr(torch.ops, NAMESPACE), _name).default, **k:
                  _op.redispatch(_CUDA_KEYS, *a, **k), "CPU")
else:
    for _name, _fn in _JIT_IMPLS.items():
        _lib.impl(_name, _fn, "CPU")
if _BACKEND == "triton":
    for _name, _fn in _JIT_IMPLS.items():
        _lib.impl(_name, _fn, "CUDA")
# The C++ extension registers its Autograd kernels when it loads; without it, the Python ones (the
# same guards, the same gradients).
if _BACKEND == "triton":
    autograd.register(_lib)


def backend() -> str:
    """The backend serving CUDA tensors in this process: "cpp" or "triton"."""
    return _BACKEND


def backend_reason() -> str:
    """Why ``backend()`` is what it is."""
    return _REASON


def tail(op: str, after: str, **values) -> tuple:
    """An operator's arguments after ``after``, given by name, as the positional tuple a hot call passes
    (``ops.norm(x, r, w, eps, *tail)``): the schema's order and defaults, cut after the last value that differs
    from its default. For a caller that fixes its arguments once (a module, a patched model): keywords would be
    parsed on every call (1.5 µs for seven), and a run of positions written by hand shifts when the schema
    grows."""
    args = getattr(torch.ops.addrmsnorm, op).default._schema.arguments
    names = [a.name for a in args]
    rest = args[names.index(after) + 1:]
    unknown = set(values) - {a.name for a in rest}
    if unknown:
        raise TypeError(f"{op} has no argument {sorted(unknown)[0]!r} after {after!r}")
    out = [values.get(a.name, a.default_value) for a in rest]
    while out and out[-1] == rest[len(out) - 1].default_value:
        out.pop()
    return tuple(out)


# The default overloads: calling them skips the overload resolution of the packets.
norm = torch.ops.addrmsnorm.norm.default
norm_ = torch.ops.addrmsnorm.norm_.default
norm_into = torch.ops.addrmsnorm.norm_into.default
norm_backward = torch.ops.addrmsnorm.norm_backward.default
norm_quant = torch.ops.addrmsnorm.norm_quant.default
norm_quant_into = torch.ops.addrmsnorm.norm_quant_into.default
qk_rmsnorm_ = torch.ops.addrmsnorm.qk_rmsnorm_.default
