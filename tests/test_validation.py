"""Every bad input raises TypeError/ValueError naming the argument, before anything is launched,
and leaves every tensor as it was."""

import math

import pytest
import torch

import addrmsnorm

from conftest import DEVICE, ON_GPU, needs_kernels
from helpers import bits, make_inputs, assert_refused

pytestmark = needs_kernels

N, H = 5, 96


@pytest.fixture
def inputs():
    return make_inputs(N, H, ("bf16", "bf16", "bf16"), DEVICE, seed=3)



@pytest.mark.parametrize("eps,exc,match", [
    (0.0, ValueError, "eps must be > 0"),
    (-1e-6, ValueError, "eps must be > 0"),
    (math.nan, ValueError, "eps must be finite"),
    (math.inf, ValueError, "eps must be finite"),
    (1e-50, ValueError, "eps=1e-50 rounds to 0 in float32"),
    (1e39, ValueError, r"eps=1e\+39 overflows float32"),
    (3.4028236e38, ValueError, r"eps=3.4028236e\+38 overflows float32"),  # rounds up past FLT_MAX
    ("1e-6", TypeError, "eps must be a real number"),
    (True, TypeError, "eps must be a real number"),
])
def test_bad_eps(inputs, eps, exc, match):
    x, r, w = inputs
    assert_refused(exc, match, lambda: addrmsnorm.fused_add_rmsnorm_(x, r, w, eps), x, r, w)


@pytest.mark.parametrize("off,match", [(math.nan, "weight_offset must be finite"),
                                       (-math.inf, "weight_offset must be finite"),
                                       (1e39, r"weight_offset=1e\+39 overflows float32"),
                                       (-1e300, r"weight_offset=-1e\+300 overflows float32")])
def test_bad_weight_offset(inputs, off, match):
    x, r, w = inputs
    assert_refused(ValueError, match, lambda: addrmsnorm.fused_add_rmsnorm_(x, r, w, weight_offset=off), x, r, w)
    assert_refused(ValueError, match, lambda: addrmsnorm.fused_add_rmsnorm(x, r, w, weight_offset=off), x, r, w)


# weight_offset = -FLT_MAX makes y overflow to inf, as it must in fp32: under the interpreter numpy
# says so with a RuntimeWarning, which is the kernel's arithmetic, not a fault of the call.
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_largest_fp32_scalars_are_accepted(inputs):
    x, r, w = inputs
    big = 3.4028234663852886e38  # FLT_MAX itself
    for call in (lambda: addrmsnorm.fused_add_rmsnorm(x, r, w, eps=big),
                 lambda: addrmsnorm.fused_add_rmsnorm(x, r, w, weight_offset=-big)):
        y, h = call()
        assert h.shape == x.shape


def test_h_zero():
    x = torch.empty(4, 0, device=DEVICE)
    # The JIT backend says "x has H = 0 ...; H must be > 0", the C runtime "hidden (H) must be > 0, got 0".
    with pytest.raises(ValueError, match=r"H\b.*must be > 0"):
        addrmsnorm.fused_add_rmsnorm(x, x.clone(), torch.empty(0, device=DEVICE))


def test_scalar_x():
    x = torch.tensor(1.0, device=DEVICE)
    with pytest.raises(ValueError, match="x must have at least one dimension"):
        addrmsnorm.fused_add_rmsnorm(x, x, x)


def test_shape_mismatch(inputs):
    x, r, w = inputs
    r2 = torch.randn(N + 1, H, device=DEVICE, dtype=r.dtype)
    assert_refused(ValueError, r"residual has shape \(6, 96\), expected \(5, 96\)",
             lambda: addrmsnorm.fused_add_rmsnorm_(x, r2, w), x, r2, w)


@pytest.mark.parametrize("wshape", [(H + 1,), (1, H), ()])
def test_bad_weight_shape(inputs, wshape):
    x, r, _ = inputs
    w = torch.randn(wshape, device=DEVICE, dtype=torch.bfloat16)
    assert_refused(ValueError, "weight has shape", lambda: addrmsnorm.fused_add_rmsnorm_(x, r, w), x, r, w)


def test_strided_weight(inputs):
    x, r, _ = inputs
    w = torch.randn(2 * H, device=DEVICE, dtype=torch.bfloat16)[::2]
    assert_refused(ValueError, "weight must be contiguous", lambda: addrmsnorm.fused_add_rmsnorm_(x, r, w),
             x, r, w)


@pytest.mark.parametrize("which,dtype,match", [
    ("x", torch.int32, "x has dtype torch.int32"),
    ("x", torch.float64, "x has dtype torch.float64"),
    ("residual", torch.int8, "residual has dtype torch.int8"),
    # the C runtime names the struct's field: "residual_dtype is float16; it must be x_dtype (bfloat16)"
    ("residual", torch.float16, r"residual(_dtype is | has dtype torch\.)float16; it must be x"),
    ("weight", torch.int64, "weight has dtype torch.int64"),
])
def test_bad_dtypes(inputs, which, dtype, match):
    x, r, w = inputs
    t = {"x": x, "residual": r, "weight": w}
    t[which] = t[which].to(dtype)
    assert_refused(TypeError, match, lambda: addrmsnorm.fused_add_rmsnorm(t["x"], t["residual"], t["weight"]),
             *t.values())


def test_bad_output_dtypes(inputs):
    x, r, w = inputs
    out = torch.empty(N, H, device=DEVICE, dtype=torch.float32)
    assert_refused(TypeError, "out has dtype torch.float32; it must be x's dtype",
             lambda: addrmsnorm.fused_add_rmsnorm(x, r, w, out=out), x, r, w, out)
    rout = torch.empty(N, H, device=DEVICE, dtype=torch.float16)
    assert_refused(TypeError, "residual_out has dtype torch.float16",
             lambda: addrmsnorm.fused_add_rmsnorm(x, r, w, residual_out=rout), x, r, w, rout)


def test_not_a_tensor(inputs):
    x, r, w = inputs
    with pytest.raises(TypeError, match="weight must be a torch.Tensor"):
        addrmsnorm.fused_add_rmsnorm(x, r, [1.0] * H)


def test_different_devices(inputs):
    x, r, w = inputs
    other = "cpu" if ON_GPU else "meta"
    r2 = r.to(other)
    assert_refused(ValueError, f"residual is on {other}.* but x is on", lambda: addrmsnorm.fused_add_rmsnorm(x, r2, w),
             x, w)


@pytest.mark.skipif(not ON_GPU, reason="on the CPU interpreter, CPU tensors are the supported case")
def test_cpu_tensors_without_interpreter():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="x is on cpu; addrmsnorm runs on CUDA tensors"):
        addrmsnorm.fused_add_rmsnorm(x, x.clone(), torch.ones(8))


def test_last_dim_not_contiguous(inputs):
    x, r, w = inputs
    xs = torch.randn(N, 2 * H, device=DEVICE, dtype=x.dtype)[:, ::2]
    assert_refused(ValueError, "x: the last dimension must be contiguous",
             lambda: addrmsnorm.fused_add_rmsnorm(xs, r, w), xs, r, w)


def test_leading_dims_not_flattenable():
    x = torch.randn(4, 3, 32, device=DEVICE).transpose(0, 1)  # (3, 4, 32), rows of two strides
    with pytest.raises(ValueError, match="x: the leading dimensions .* cannot be flattened"):
        addrmsnorm.fused_add_rmsnorm(x, x.contiguous(), torch.ones(32, device=DEVICE))


def test_output_partly_overlaps_input(inputs):
    x, r, w = inputs
    buf = torch.randn(N + 1, H, device=DEVICE, dtype=x.dtype)
    xv, shifted = buf[:N], buf[1:]
    assert_refused(ValueError, "out partly overlaps x", lambda: addrmsnorm.fused_add_rmsnorm(xv, r, w, out=shifted),
             buf, r, w)
    half = torch.randn(N, 2 * H, device=DEVICE, dtype=x.dtype)
    assert_refused(ValueError, "residual_out partly overlaps residual",
             lambda: addrmsnorm.fused_add_rmsnorm(x, half[:, :H], w, residual_out=half[:, H // 2:H // 2 + H]),
             half, x, w)


def test_output_overlaps_weight(inputs):
    x, r, _ = inputs
    buf = torch.randn(N * H, device=DEVICE, dtype=x.dtype)
    w = buf[:H]
    out = buf.view(N, H)
    assert_refused(ValueError, "out overlaps weight", lambda: addrmsnorm.fused_add_rmsnorm(x, r, w, out=out),
             buf, x, r)


def test_outputs_overlap_each_other(inputs):
    x, r, w = inputs
    o = torch.empty_like(x)
    assert_refused(ValueError, "out and residual_out overlap",
             lambda: addrmsnorm.fused_add_rmsnorm(x, r, w, out=o, residual_out=o), x, r, w, o)
    # Both outputs aliasing x (the in-place forms allow one of them, never both).
    assert_refused(ValueError, "out and residual_out overlap",
             lambda: addrmsnorm.fused_add_rmsnorm(x, r, w, out=x, residual_out=x), x, r, w)


def test_output_overlaps_itself(inputs):
    x, r, w = inputs
    buf = torch.randn(N * H, device=DEVICE, dtype=x.dtype)
    out = buf.as_strided((N, H), (H // 2, 1))
    assert_refused(ValueError, r"out: row stride 48 < (H|hidden)=96", lambda: addrmsnorm.fused_add_rmsnorm(x, r, w, out=out),
             buf, x, r, w)


def test_disjoint_column_slices_of_one_buffer_are_fine(inputs):
    """out and residual_out as the two halves of one (N, 2H) buffer do not overlap."""
    x, r, w = inputs
    buf = torch.full((N, 2 * H), float("nan"), device=DEVICE, dtype=x.dtype)
    y, ro = addrmsnorm.fused_add_rmsnorm(x, r, w, out=buf[:, :H], residual_out=buf[:, H:])
    assert not torch.isnan(buf).any()


def test_in_place_forms_refuse_grad(inputs):
    """The in-place forms have no backward: refused under grad mode, naming the argument, and fine
    under no_grad. (tests/test_autograd_guards.py covers every operator and argument.)"""
    x, r, w = inputs
    w = w.clone().requires_grad_()
    assert_refused(RuntimeError, "addrmsnorm::norm_ has no backward, but weight requires grad",
             lambda: addrmsnorm.fused_add_rmsnorm_(x, r, w), x, r, w)
    assert_refused(RuntimeError, "norm_into has no backward, but weight requires grad",
             lambda: addrmsnorm.fused_add_rmsnorm(x, r, w, out=torch.empty_like(x)), x, r, w)
    assert_refused(RuntimeError, "addrmsnorm::norm_ has no backward, but weight requires grad",
             lambda: torch.ops.addrmsnorm.norm_(x, r, w, 1e-6), x, r, w)
    with torch.no_grad():
        addrmsnorm.fused_add_rmsnorm_(x, r, w)


def test_bad_return_rstd(inputs):
    x, r, w = inputs
    with pytest.raises(TypeError, match="return_rstd must be a bool"):
        addrmsnorm.fused_add_rmsnorm(x, r, w, return_rstd=1)
