"""Autograd of the operators, the same on both backends.

* The mutating operators bump the version counters of what they write, in every grad mode, so that
  autograd refuses a saved tensor they overwrote; with grad mode on they refuse any argument that
  requires grad, naming it, and write nothing.
* The functional operator's autograd (C++ on the cpp backend, Python on the Triton one) gives the
  gradients of the Python ``NormFunction`` bit for bit.

This file runs in-process against the backend this process chose, then once more in a subprocess
against the other one (``test_the_other_backend_passes_this_file_too``): on the CPU under the
interpreter, the C++ Autograd kernels redispatch to the Triton kernels, so CI checks both.
"""

import os
import subprocess
import sys

import pytest
import torch

import addrmsnorm
from addrmsnorm import ops
from addrmsnorm.autograd import IN_PLACE_OPS, NormFunction, no_backward_message

from conftest import DEVICE, ON_GPU, needs_kernels
from helpers import DTYPE_COMBOS, bits, combo_id, make_inputs

pytestmark = needs_kernels
OPS = torch.ops.addrmsnorm


def _issue_script(call):
    """A tensor saved for backward, then overwritten in place under no_grad by ``call``."""
    x = torch.randn(3, 64, device=DEVICE, requires_grad=True)
    r = torch.randn(3, 64, device=DEVICE)
    w = torch.ones(64, device=DEVICE)
    xx = x * 1.0
    z = (xx * xx).sum()  # saves xx
    with torch.no_grad():
        call(xx, r, w)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()


@pytest.mark.parametrize("form", ["python_api", "op", "into_op", "python_api_out"])
def test_overwriting_a_saved_tensor_makes_backward_raise(form):
    calls = {
        "python_api": lambda xx, r, w: addrmsnorm.fused_add_rmsnorm_(xx, r, w, 1e-6),
        "op": lambda xx, r, w: OPS.norm_(xx, r, w, 1e-6),
        "into_op": lambda xx, r, w: OPS.norm_into(xx, r, w, xx, r, None, 1e-6),
        "python_api_out": lambda xx, r, w: addrmsnorm.fused_add_rmsnorm(xx, r, w, out=xx),
    }
    _issue_script(calls[form])


def _versions(*ts):
    return [t._version for t in ts]


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
def test_versions_rise_after_every_in_place_call(grad_mode):
    x, r, w = make_inputs(5, 96, DTYPE_COMBOS[0], DEVICE, seed=1)
    base = torch.zeros(5, 96 + 8, dtype=x.dtype, device=DEVICE)
    out = base[:, :96]  # a view: its base shares the counter
    rout, rstd = torch.empty_like(r), torch.empty(5, device=DEVICE)
    with torch.set_grad_enabled(grad_mode):
        before = _versions(x, r)
        OPS.norm_(x, r, w, 1e-6)
        assert all(a > b for a, b in zip(_versions(x, r), before))

        before = _versions(x, r)
        addrmsnorm.fused_add_rmsnorm_(x, r, w)
        assert all(a > b for a, b in zip(_versions(x, r), before))

        before, wv = _versions(out, base, rout, rstd), w._version
        OPS.norm_into(x, r, w, out, rout, rstd, 1e-6)
        assert all(a > b for a, b in zip(_versions(out, base, rout, rstd), before))
        assert w._version == wv  # read only

        before = _versions(out, rout)
        xv, rv = _versions(x, r)
        addrmsnorm.fused_add_rmsnorm(x, r, w, out=out, residual_out=rout)
        assert all(a > b for a, b in zip(_versions(out, rout), before))
        assert _versions(x, r) == [xv, rv]  # read only

        before = _versions(x)
        OPS.norm_into(x, r, w, x, torch.empty_like(r), None, 1e-6)  # out aliases x
        assert _versions(x)[0] > before[0]


def _mutating_calls(x, r, w):
    out, rout, rstd = torch.empty_like(x), torch.empty_like(r), torch.empty(x.shape[0], device=DEVICE)
    return {
        ("norm_", "x"): lambda t: OPS.norm_(t, r, w, 1e-6),
        ("norm_", "residual"): lambda t: OPS.norm_(x, t, w, 1e-6),
        ("norm_", "weight"): lambda t: OPS.norm_(x, r, t, 1e-6),
        ("norm_into", "x"): lambda t: OPS.norm_into(t, r, w, out, rout, None, 1e-6),
        ("norm_into", "residual"): lambda t: OPS.norm_into(x, t, w, out, rout, None, 1e-6),
        ("norm_into", "weight"): lambda t: OPS.norm_into(x, r, t, out, rout, None, 1e-6),
        ("norm_into", "out"): lambda t: OPS.norm_into(x, r, w, t, rout, None, 1e-6),
        ("norm_into", "residual_out"): lambda t: OPS.norm_into(x, r, w, out, t, None,
                                                                                        1e-6),
        ("norm_into", "rstd"): lambda t: OPS.norm_into(x, r, w, out, rout, t, 1e-6),
    }


def test_mutating_operators_refuse_arguments_that_require_grad():
    x, r, w = make_inputs(4, 64, DTYPE_COMBOS[0], DEVICE, seed=2)
    tensors = {"x": x, "residual": r, "weight": w, "out": torch.empty_like(x), "residual_out": torch.empty_like(r),
               "rstd": torch.empty(4, device=DEVICE)}
    calls = _mutating_calls(x, r, w)
    assert {op for op, _ in calls} == set(IN_PLACE_OPS)
    for (op, arg), call in calls.items():
        leaf = tensors[arg].clone().requires_grad_()
        snapshot = leaf.detach().clone()
        with pytest.raises(RuntimeError) as e:
            call(leaf)
        assert str(e.value).splitlines()[0] == no_backward_message(op, arg), (op, arg)
        assert torch.equal(bits(leaf.detach()), bits(snapshot)), f"{op} wrote into {arg} before refusing"
        with torch.no_grad():
            call(leaf)  # an optimizer-style update under no_grad is fine


def test_python_api_in_place_forms_refuse_grad_with_the_operators_message():
    x, r, w = make_inputs(4, 64, DTYPE_COMBOS[0], DEVICE, seed=3)
    w = w.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="addrmsnorm::norm_ has no backward, but weight requires grad"):
        addrmsnorm.fused_add_rmsnorm_(x, r, w)
    with pytest.raises(RuntimeError, match="norm_into has no backward, but weight requires grad"):
        addrmsnorm.fused_add_rmsnorm(x, r, w, out=torch.empty_like(x))


def test_in_place_variants_suggest_their_own_functional_form():
    """A grad-requiring input to a variant's in-place form (or its out= form) names that variant's functional form,
    not the fused op's."""
    x, r, w = make_inputs(4, 64, DTYPE_COMBOS[0], DEVICE, seed=4)
    g = w.clone().requires_grad_()
    qkv = torch.randn(3, 4 * 64, device=DEVICE, dtype=x.dtype)
    pos, cache = torch.zeros(3, dtype=torch.int64, device=DEVICE), torch.ones(8, 64, device=DEVICE)
    cases = [
        ("sandwich_rmsnorm(x, residual, post_weight, weight)", lambda: addrmsnorm.sandwich_rmsnorm_(x, r, g, w)),
        ("gated_rmsnorm(x, z, weight) without out=", lambda: addrmsnorm.gated_rmsnorm(x, x.clone(), g, out=x)),
        ("rmsnorm_pair(a, a_weight, b, b_weight)", lambda: addrmsnorm.rmsnorm_pair_(x, g, r, w)),
        ("qk_rmsnorm_rope(q, k, q_weight, k_weight", lambda: addrmsnorm.qk_rmsnorm_rope_(
            qkv, g, w, num_q_heads=2, num_kv_heads=1, head_dim=64, positions=pos, cos_sin_cache=cache)),
        ("normalize the q and k views", lambda: addrmsnorm.qk_rmsnorm_(qkv, g, w, num_q_heads=2, num_kv_heads=1,
                                                                       head_dim=64)),
        ("fused_add_rmsnorm(x, residual, weight)", lambda: addrmsnorm.fused_add_rmsnorm_(x, r, g)),
        ("rmsnorm(x, weight) without out=", lambda: addrmsnorm.rmsnorm(x, g, out=x)),
    ]
    for words, call in cases:
        with pytest.raises(RuntimeError, match="has no backward") as e:
            call()
        assert words in str(e.value), (words, str(e.value))


# ----- the functional operator's autograd -----------------------------------------------------------

def _grads(fn, x, r, w, dy, dro, **kw):
    xs, rs, ws = (t.detach().clone().requires_grad_() for t in (x, r, w))
    y, h, rstd = fn(xs, rs, ws, 1e-6, 0.25, False, kw.get("hf", False), False)
    assert rstd.numel() == 0  # return_rstd=False: the caller gets none, though autograd saved one
    loss = (y.float() * dy.float()).sum()
    if dro is not None:
        loss = loss + (h.float() * dro.float()).sum()
    loss.backward()
    return y, h, xs.grad, rs.grad, ws.grad


@pytest.mark.parametrize("combo", DTYPE_COMBOS, ids=combo_id)
@pytest.mark.parametrize("with_dro", [True, False], ids=["dres_out", "no_dres_out"])
def test_operator_autograd_matches_the_python_function_bit_for_bit(combo, with_dro):
    """On the cpp backend this is C++ autograd against the Python one; on the Triton backend, the
    registered kernel against a direct apply."""
    N, H = (33, 4100) if ON_GPU else (5, 96)
    x, r, w = make_inputs(N, H, combo, DEVICE, seed=N)
    g = torch.Generator(device=DEVICE).manual_seed(7)
    dy = torch.randn(x.shape, generator=g, device=DEVICE).to(x.dtype)
    dro = torch.randn(r.shape, generator=g, device=DEVICE).to(r.dtype) if with_dro else None
    a = _grads(OPS.norm.default, x, r, w, dy, dro)
    b = _grads(NormFunction.apply, x, r, w, dy, dro)
    for name, ta, tb in zip(("y", "h", "dx", "dresidual", "dweight"), a, b):
        assert ta.dtype == tb.dtype and torch.equal(bits(ta), bits(tb)), name


def test_only_the_inputs_that_require_grad_get_one():
    x, r, w = make_inputs(4, 64, DTYPE_COMBOS[3], DEVICE, seed=4)  # bf16 x, fp32 residual: separate dx
    x = x.clone().requires_grad_()
    y, h = addrmsnorm.fused_add_rmsnorm(x, r, w)
    y.float().sum().backward()  # h unused: no dresidual_out reaches the backward
    assert x.grad is not None and x.grad.dtype == x.dtype and r.grad is None and w.grad is None


def test_rstd_is_returned_only_when_asked_under_grad():
    x, r, w = make_inputs(4, 64, DTYPE_COMBOS[0], DEVICE, seed=5)
    w = w.clone().requires_grad_()
    _, _, rstd = OPS.norm(x, r, w, 1e-6)
    assert rstd.numel() == 0 and not rstd.requires_grad
    _, _, rstd = OPS.norm(x, r, w, 1e-6, 0.0, True)
    assert rstd.shape == (4,) and not rstd.requires_grad
    m = addrmsnorm.FusedAddRMSNorm(64, device=DEVICE, dtype=x.dtype)
    y, h = m(x, r)
    assert y.grad_fn is not None and h.grad_fn is not None


def test_compiled_training_step_has_one_graph_and_eager_gradients():
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    H = 64
    m = addrmsnorm.FusedAddRMSNorm(H, device=DEVICE, dtype=torch.float32)

    def step(x, r):
        y, h = m(torch.tanh(x), r)
        y2, h2 = addrmsnorm.fused_add_rmsnorm(y, h, m.weight)  # the next layer's add + norm
        return (y2 * y2).sum() + h2.sum()
    g = torch.Generator(device=DEVICE).manual_seed(9)
    x = torch.randn(6, H, generator=g, device=DEVICE, requires_grad=True)
    r = torch.randn(6, H, generator=g, device=DEVICE, requires_grad=True)
    step(x, r).backward()
    want = (x.grad.clone(), r.grad.clone(), m.weight.grad.clone())
    x.grad = r.grad = m.weight.grad = None
    compiled = torch.compile(step, fullgraph=True, backend="inductor" if ON_GPU else "aot_eager")
    compiled(x, r).backward()
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert not torch._dynamo.utils.counters["graph_break"]
    for got, w_ in zip((x.grad, r.grad, m.weight.grad), want):
        torch.testing.assert_close(got, w_, rtol=1e-5, atol=1e-5)


# ----- second-order gradients: refused, never a silent zero -----------------------------------------

def _second_order_cases():
    g = torch.Generator(device=DEVICE).manual_seed(5)
    H = 64
    x = torch.randn(4, H, generator=g, device=DEVICE, requires_grad=True)
    r = torch.randn(4, H, generator=g, device=DEVICE, requires_grad=True)
    w = (1 + 0.1 * torch.randn(H, generator=g, device=DEVICE)).requires_grad_()
    fused_module = addrmsnorm.FusedAddRMSNorm(H, device=DEVICE, dtype=torch.float32)
    plain_module = addrmsnorm.RMSNorm(H, device=DEVICE, dtype=torch.float32)
    return {
        "fused_add_rmsnorm": (lambda: addrmsnorm.fused_add_rmsnorm(x, r, w)[0], (x, r, w)),
        "fused_add_rmsnorm_h": (lambda: addrmsnorm.fused_add_rmsnorm(x, r, w)[1] * x, (x, r, w)),
        "rmsnorm": (lambda: addrmsnorm.rmsnorm(x, w), (x, w)),
        "FusedAddRMSNorm": (lambda: fused_module(x, r)[0], (x, r, fused_module.weight)),
        "RMSNorm": (lambda: plain_module(x), (x, plain_module.weight)),
        "op": (lambda: OPS.norm(x, r, w, 1e-6)[0], (x, r, w)),
    }


@pytest.mark.parametrize("case", list(_second_order_cases()))
def test_second_order_gradient_raises_naming_the_limit(case):
    fn, inputs = _second_order_cases()[case]
    y = fn()
    grads = torch.autograd.grad((y * y).sum(), inputs, create_graph=True)
    # First order under create_graph=True: the same gradients as without it.
    plain = torch.autograd.grad((fn() ** 2).sum(), inputs)
    for a, b in zip(grads, plain):
        assert torch.equal(a, b)
    loss = sum((g_ * g_).sum() for g_ in grads)
    with pytest.raises(RuntimeError, match="first order only") as e:
        loss.backward()
    assert "addrmsnorm.fused_add_rmsnorm_ref" in str(e.value)
    for t in inputs:
        assert t.grad is None  # nothing was accumulated before the refusal
    # Every way of asking meets the refusal: torch.autograd.grad too, allow_unused or not (never a silent None).
    for allow_unused in (False, True):
        grads = torch.autograd.grad((fn() ** 2).sum(), inputs, create_graph=True)
        with pytest.raises(RuntimeError, match="first order only"):
            torch.autograd.grad(sum((g_ * g_).sum() for g_ in grads), inputs, allow_unused=allow_unused)


def test_second_order_message_is_the_same_in_cpp():
    # torch_ext/autograd.cpp states the message word for word.
    from addrmsnorm.autograd import no_double_backward_message

    with open(os.path.join(os.path.dirname(__file__), "..", "torch_ext", "autograd.cpp")) as f:
        src = f.read()
    start = src.index("kNoDoubleBackward[] =")
    literal = "".join(part for part in src[start:src.index('";', start) + 1].split('"')[1::2])
    assert literal == no_double_backward_message()


def test_the_reference_gives_the_second_order_gradient():
    # What the message points to does give it: a nonzero second-order gradient, in float64.
    g = torch.Generator(device=DEVICE).manual_seed(6)
    x = torch.randn(3, 32, generator=g, device=DEVICE, requires_grad=True)
    r = torch.randn(3, 32, generator=g, device=DEVICE)
    w = torch.ones(32, device=DEVICE)
    y = addrmsnorm.fused_add_rmsnorm_ref(x, r, w, 1e-6).y
    (gx,) = torch.autograd.grad((y * y * y).sum(), x, create_graph=True)
    (gx * gx).sum().backward()
    assert x.grad.abs().sum() > 0


def test_backward_operator_called_directly_refuses_its_own_gradient():
    h = torch.randn(4, 64, device=DEVICE, requires_grad=True)
    rstd = torch.rand(4, device=DEVICE) + 0.5
    w = torch.ones(64, device=DEVICE, requires_grad=True)
    dy = torch.randn(4, 64, device=DEVICE)
    dres, _, dw = OPS.norm_backward(dy, None, h, rstd, w)
    assert dres.requires_grad and dw.requires_grad
    with pytest.raises(RuntimeError, match="first order only"):
        dres.sum().backward()
    with torch.no_grad():  # outside a graph it is the plain operator
        dres2, _, _ = OPS.norm_backward(dy, None, h, rstd, w)
    assert not dres2.requires_grad and torch.equal(dres2, dres.detach())


@pytest.mark.parametrize("op", ["fused_add_rmsnorm_quant", "rmsnorm_quant"])
def test_quantized_outputs_refuse_grad_naming_the_argument(op):
    x = torch.randn(2, 64, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(64, device=DEVICE, dtype=torch.bfloat16)
    call = ((lambda: addrmsnorm.fused_add_rmsnorm_quant(x, torch.zeros_like(x), w, quant_dtype=torch.float8_e4m3fn))
            if op == "fused_add_rmsnorm_quant" else
            (lambda: addrmsnorm.rmsnorm_quant(x, w, quant_dtype=torch.float8_e4m3fn)))
    with pytest.raises(RuntimeError, match="addrmsnorm::norm_quant has no backward, but x requires grad"):
        call()


# ----- the other backend ----------------------------------------------------------------------------

@pytest.mark.skipif(os.environ.get("ADDRMSNORM_GUARDS_RERUN") == "1", reason="this is the rerun")
@pytest.mark.skipif(ops.extension_path() is None, reason="the C++ extension is not built, so there is one backend")
@pytest.mark.skipif(os.environ.get("ADDRMSNORM_SUITE_BOTH_BACKENDS") == "1",
                    reason="scripts/gpu_suite.sh runs the whole suite on both backends")
def test_the_other_backend_passes_this_file_too():
    other = "triton" if ops.backend() == "cpp" else "cpp"
    env = {**os.environ, ops.BACKEND_ENV: other, "ADDRMSNORM_GUARDS_RERUN": "1",
           ops.EXTENSION_ENV: str(ops.extension_path())}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
                       capture_output=True, text=True, env=env, cwd=os.path.dirname(__file__))
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert " passed" in p.stdout and "failed" not in p.stdout


def test_this_process_backend():
    # Which backend the assertions above ran on, for the log.
    print(f"backend: {addrmsnorm.backend()} ({addrmsnorm.backend_reason()})")
    if os.environ.get("ADDRMSNORM_GUARDS_RERUN") == "1":
        assert addrmsnorm.backend() == os.environ[ops.BACKEND_ENV]
