"""Shared test helpers: random inputs, and the checks every forward test makes against the one
reference in ``addrmsnorm.reference``."""

import importlib.util
import re
from pathlib import Path

import torch

from addrmsnorm.reference import (INTERPRETER_BF16_TOLERANCE, RSTD_TOLERANCE, TOLERANCES,
                                  assert_close, fused_add_rmsnorm_ref, truncate_to_bf16)

from conftest import ON_GPU

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}

# (x, residual, weight) dtype combinations: same-dtype, the fp32 residual stream, mixed weights.
DTYPE_COMBOS = [
    ("bf16", "bf16", "bf16"),
    ("fp16", "fp16", "fp16"),
    ("fp32", "fp32", "fp32"),
    ("bf16", "fp32", "bf16"),
    ("fp16", "fp32", "fp32"),
    ("bf16", "bf16", "fp32"),
]


def combo_id(c):
    return "x{}-r{}-w{}".format(*c)


def randn(shape, dtype, device, gen, scale=1.0):
    # Never zeros: an unwritten output or a wrong index must show.
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * scale).to(dtype).to(device)


def make_inputs(N, H, combo, device, seed=0, lead=None):
    gen = torch.Generator().manual_seed(seed)
    xd, rd, wd = (DTYPES[c] for c in combo)
    shape = (N, H) if lead is None else (*lead, H)
    x = randn(shape, xd, device, gen)
    r = randn(shape, rd, device, gen, scale=4.0)  # a residual stream larger than the update
    w = (1.0 + 0.1 * torch.randn(H, generator=gen)).to(wd).to(device)
    return x, r, w


def strided_rows(rng, dtype, n, H, device):
    """n rows of H in a buffer of their own, laid out as callers' views come (for the predicates' tests): a row
    stride of H, H + 8 or H + 4, and a start 0, 8 elements (16 bytes of fp16) or one element's size in elements
    off the buffer's, drawn from rng (a random.Random)."""
    item = torch.tensor([], dtype=dtype).element_size()
    stride = H + (8 if rng.random() < 0.3 else 4 if rng.random() < 0.05 else 0)
    off = 8 if rng.random() < 0.3 else item if rng.random() < 0.05 else 0
    buf = torch.zeros(off + n * stride + H, dtype=dtype, device=device)
    return torch.as_strided(buf[off:], (n, H), (stride, 1))


def assert_predicate_is_the_checks(rng, widths, tensors, check, takes, rounds=400, each=50):
    """hf.py's "would this call be taken" predicates against the checks: over random calls (16-bit mostly, fp32
    sometimes; a width of ``widths`` or 100; one or three rows), ``tensors(dtype, n, H, of)`` makes the call's
    tensors (``of(dtype)``: that dtype, or now and then fp32), ``check(*tensors)`` raises where the checks refuse
    it, and ``takes(*tensors)``, the predicate, must say the same; each verdict at least ``each`` times."""
    seen = {True: 0, False: 0}
    for _ in range(rounds):
        dt = torch.float32 if rng.random() < 0.1 else rng.choice([torch.bfloat16, torch.float16])
        H, n = 100 if rng.random() < 0.1 else rng.choice(widths), rng.choice([1, 3])
        t = tensors(dt, n, H, lambda dtype: dtype if rng.random() < 0.95 else torch.float32)
        try:
            check(*t)
            admitted = True
        except (TypeError, ValueError):
            admitted = False
        assert takes(*t) == admitted, (H, n, [(a.dtype, a.stride(), a.data_ptr() % 16) for a in t])
        seen[admitted] += 1
    assert min(seen.values()) >= each, seen


def expected_residual_out(h_fp32, dtype):
    """What residual_out must hold, bit for bit, on this backend."""
    if dtype == torch.bfloat16 and not ON_GPU:
        return truncate_to_bf16(h_fp32)  # the interpreter's fp32 -> bf16 store truncates
    return h_fp32.to(dtype)


def y_tolerance(dtype):
    if dtype == torch.bfloat16 and not ON_GPU:
        return INTERPRETER_BF16_TOLERANCE
    return TOLERANCES[dtype]


def bits(t):
    """The raw bytes of t, so that equality is bitwise (NaN == NaN, -0 != +0)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def check_forward(x, r, w, y, residual_out, rstd, eps, weight_offset, what=""):
    """y, residual_out and rstd against the reference computed from the original x, r, w."""
    ref = fused_add_rmsnorm_ref(x, r, w, eps, weight_offset)
    want_rout = expected_residual_out(ref.h, r.dtype)
    if not torch.equal(bits(residual_out), bits(want_rout)):
        diff = (residual_out.float() != want_rout.float()).sum().item()
        raise AssertionError(f"{what}: residual_out is not bit-exact ({diff} elements differ)")
    assert y.dtype == x.dtype and residual_out.dtype == r.dtype
    assert_close(y, ref.y, y_tolerance(x.dtype), f"{what} y")
    if rstd is not None:
        assert rstd.dtype == torch.float32 and rstd.shape == x.shape[:-1]
        assert_close(rstd, ref.rstd, RSTD_TOLERANCE, f"{what} rstd")


def assert_refused(exc, match, fn, *tensors):
    """fn raises exc matching match, and leaves every one of tensors as it was, bit for bit."""
    import pytest

    before = [bits(t).clone() for t in tensors]
    with pytest.raises(exc, match=match):
        fn()
    for t, b in zip(tensors, before):
        assert torch.equal(bits(t), b), "a rejected call changed a tensor"


def argument_named(message: str, fields: dict | None = None) -> str:
    """The argument a refusal names first, in the Python API's terms. The two validators word their
    rules differently (the C runtime's messages name its struct's fields: residual_dtype, stride_x,
    hidden, numerics by its enum), so tests that hold the backends together compare the exception's
    type and this, not the words. ``fields`` maps one call kind's C names to the Python ones (the
    backward's x_dtype is dy's)."""
    word = re.split(r"[ :=(,'\-]", message.strip(), maxsplit=1)[0]
    if word.startswith("ADDRMSNORM_NUMERICS") or word == "numerics":
        return "numerics"
    if word.startswith("stride_"):
        word = word[len("stride_"):]
    if word.endswith("_dtype"):
        word = word[: -len("_dtype")]
    return (fields or FORWARD_FIELDS).get(word, word)


FORWARD_FIELDS = {"hidden": "x", "gate_first": "norm_before_gate", "b_hidden": "b"}
BACKWARD_FIELDS = {"hidden": "dy", "x": "dy", "residual": "h"}
QK_FIELDS = {"x": "qkv", "hidden": "qkv", "weight": "q_weight"}
QUANT_FIELDS = {"hidden": "x"}


def c_library_or_skip():
    """The C++ runtime through ctypes (addrmsnorm.c_library), or skip the test where it is not built."""
    import pytest

    from addrmsnorm import c_library
    path = c_library.library_path()
    if path is None:
        pytest.skip("no C++ library")
    return c_library.load(path)


def load_devtool(name: str):
    """devtools/<name>.py as a module (devtools is a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "devtools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
