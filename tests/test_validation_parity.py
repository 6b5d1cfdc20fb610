"""The C ABI's validation and the Python API's agree, case by case.

Each backend runs one validator: the C runtime's (src/validate.cpp) on the C++ backend, where the
torch extension only maps tensors onto the call's struct, and addrmsnorm/validation.py on the JIT
backend and under the interpreter, which checks the same mapping and then the C runtime's rules in
its order. These tests draw random calls -- views of one shared buffer with random offsets and
strides, random dtypes, eps and weight_offset from the whole double range, and aliasing -- and ask
both whether each is valid: the same verdict, the same exception type (ValueError or TypeError) and
the same argument named first (helpers.argument_named), for the fused forward, the plain norm, the
backward, the QK norm and the quantized calls. The words may differ: the C runtime names its
struct's fields. `addrmsnorm_norm_check` and `addrmsnorm_norm_backward_check` touch no driver, so
this runs on the CPU: it needs only the built library (scripts/test.sh builds it before the Python
suites).

On the GPU, with the C++ extension as the backend, the torch operators of both backends are also
held to the same exception naming the same argument for every drawn call.
"""

import math
import random
import re

import pytest
import torch

import addrmsnorm
from addrmsnorm import jit_backend, validation
from addrmsnorm import c_library

from conftest import DEVICE
from helpers import BACKWARD_FIELDS, FORWARD_FIELDS, QK_FIELDS, QUANT_FIELDS, argument_named

LIB_PATH = c_library.library_path()
pytestmark = [
    pytest.mark.skipif(LIB_PATH is None, reason="no C++ library (build it: cmake -S . -B build && cmake --build build)"),
    pytest.mark.skipif(DEVICE is None, reason="the Python API needs CUDA or the Triton interpreter"),
]

DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def _scalar(rng):
    """A real number from anywhere in the double range: the edges of fp32, and beyond them."""
    fixed = [1e-6, 1e-5, 0.0, -0.0, -1.0, 1.0, math.inf, -math.inf, math.nan, 1e-50, 1e39, -1e39, 1e300,
             5e-324, 3.4028234663852886e38, 3.4028235677973366e38, 3.4028235e38, 1.4e-45, 7e-46, 7.1e-46]
    if rng.random() < 0.5:
        return rng.choice(fixed)
    return rng.choice([-1.0, 1.0]) * 10.0 ** rng.uniform(-320, 308)


def _view_drawer(rng, clustered=False):
    """``view(dtype, N, H)``: a random (N, H) view of one shared buffer, with a random row stride
    (sometimes under H, so that rows overlap) at a random element-aligned offset. ``clustered`` puts
    half the views in the buffer's first 4 KiB, so that views often overlap each other."""
    buf = torch.zeros(1 << 16, dtype=torch.uint8, device=DEVICE)

    def view(dtype, N, H):
        item = torch.tensor([], dtype=dtype).element_size()
        stride = rng.choice([H, H, H + rng.randint(1, 5), max(H // 2, 1), 2 * H])
        span = max(((N - 1) * stride + H) * item, 0)
        if clustered and rng.random() < 0.5:
            off = rng.randrange(0, 4096, item)
        else:
            off = rng.randrange(8192 if clustered else 0, len(buf) - span - 16, item)
        return torch.as_strided(buf[off:off + span].view(dtype), (N, H), (stride, 1))
    return view


# The message of the Python validator's last refusal in this file's verdict helpers.
_LAST_PYTHON = [""]


_FORWARD_FIELDS = FORWARD_FIELDS
_BACKWARD_FIELDS = BACKWARD_FIELDS
_argument = argument_named


def _assert_same_argument(lib, verdict: str, fields: dict, context: str) -> None:
    """Both validators refused the call: they must name the same argument first."""
    if verdict == "ok":
        return
    py, c = _LAST_PYTHON[0], addrmsnorm_last_error(lib)
    assert _argument(py, fields) == _argument(c, fields), (
        f"Python names {_argument(py, fields)!r} ({py}); C names {_argument(c, fields)!r} ({c}): {context}")


def _python_verdict(x, r, w, out, rout, eps, weight_offset, x_scale=None):
    try:  # the checks of the JIT backend, without a launch
        validation.check_forward(x, r, w, out, rout, eps=eps, weight_offset=weight_offset,
                                 x_scale=1.0 if x_scale is None else x_scale)
        return "ok"
    except (TypeError, ValueError) as e:
        _LAST_PYTHON[0] = str(e)
        return "type" if isinstance(e, TypeError) else "value"


def _c_verdict(lib, x, r, w, out, rout, eps, weight_offset, x_scale=None):
    N, H = x.shape
    st = c_library.check(lib, c_library.norm_args(x, w, out, residual=r, residual_out=rout, eps=eps,
                                                  weight_offset=weight_offset, x_scale=x_scale))
    return {0: "ok", 1: "value", 2: "type"}.get(st, f"status {st}")


def test_random_calls_get_the_same_verdict():
    lib = c_library.load(LIB_PATH)
    rng = random.Random(0)
    view = _view_drawer(rng, clustered=True)
    seen = {"ok": 0, "value": 0, "type": 0}

    for _ in range(1000):
        N, H = rng.choice([1, 2, 5]), rng.choice([0, 1, 8, 8, 13, 64, 64])
        xd = rng.choice(DTYPES)
        rd = rng.choice([xd, xd, torch.float32, rng.choice(DTYPES)])
        wd = rng.choice(DTYPES)
        x, r = view(xd, N, H), view(rd, N, H)
        w = view(wd, 1, H)[0] if rng.random() < 0.85 else None  # None: the weightless norm
        # x_scale: absent (no flag), or a drawn value with ADDRMSNORM_FLAG_X_SCALE (0 and 1 included).
        x_scale = None if rng.random() < 0.7 else rng.choice([1.0, 0.22, 0.0, _scalar(rng)])
        # The C ABI has no dtype of its own for out and residual_out (they are x's and residual's),
        # so only calls it can express are drawn: out of x's dtype, residual_out of residual's,
        # aliasing x or residual where the dtypes allow it.
        out = x if rng.random() < 0.2 else (r if rng.random() < 0.1 and rd == xd else view(xd, N, H))
        rout = r if rng.random() < 0.2 else (x if rng.random() < 0.1 and rd == xd else view(rd, N, H))
        eps = rng.choice([1e-6, 1e-5]) if rng.random() < 0.6 else _scalar(rng)
        weight_offset = rng.choice([0.0, 1.0]) if rng.random() < 0.7 else _scalar(rng)
        py = _python_verdict(x, r, w, out, rout, eps, weight_offset, x_scale)
        c = _c_verdict(lib, x, r, w, out, rout, eps, weight_offset, x_scale)
        assert py == c, (f"Python says {py}, C says {c} ({addrmsnorm_last_error(lib)}): N={N} H={H} "
                         f"x={xd} r={rd} w={wd if w is not None else None} out={out.dtype} rout={rout.dtype} "
                         f"eps={eps} weight_offset={weight_offset} x_scale={x_scale} "
                         f"strides x{x.stride(0)} r{r.stride(0)} o{out.stride(0)} ro{rout.stride(0)}")
        _assert_same_argument(lib, py, _FORWARD_FIELDS, f"N={N} H={H} x={xd} r={rd} w={wd}")
        seen[py] += 1
    # The draw must exercise every verdict, or the agreement above means little.
    assert all(v >= 15 for v in seen.values()), seen


def test_random_sandwich_calls_get_the_same_verdict():
    """The sandwich norm (post_weight): its dtype rules, its offset's rules, x_scale and numerics with it,
    and post_weight's overlap with the outputs."""
    lib = c_library.load(LIB_PATH)
    rng = random.Random(3)
    view = _view_drawer(rng, clustered=True)
    seen = {"ok": 0, "value": 0, "type": 0}
    def fresh(dtype, N, H):  # a tensor of its own: contiguous and 16-byte aligned, as most calls are
        return torch.zeros(N, H, dtype=dtype, device=DEVICE)

    for _ in range(600):
        N, H = rng.choice([1, 2, 5]), rng.choice([1, 8, 13, 64, 64])
        xd = rng.choice([torch.float16, torch.bfloat16, torch.bfloat16, torch.float32])
        rd = rng.choice([xd, xd, xd, torch.float32])
        wd = rng.choice([xd, xd, xd, torch.float32, rng.choice(DTYPES)])
        make = fresh if rng.random() < 0.6 else view  # views of one buffer: offsets, strides and overlaps
        x, r = make(xd, N, H), make(rd, N, H)
        pw = make(wd, 1, H)[0]
        w = make(wd, 1, H)[0] if rng.random() < 0.8 else None
        out = x if rng.random() < 0.3 else make(xd, N, H)
        rout = r if rng.random() < 0.3 else make(rd, N, H)
        numerics = rng.choice([0, 0, 1])
        weight_offset = rng.choice([0.0, 1.0]) if w is not None else 0.0
        post_offset = rng.choice([weight_offset, weight_offset, 0.0, 1.0, _scalar(rng)])
        x_scale = None if rng.random() < 0.85 else rng.choice([1.0, 0.5])
        py = _verdict_of(lambda: validation.check_forward(
            x, r, w, out, rout, eps=1e-6, weight_offset=weight_offset, numerics=numerics,
            x_scale=1.0 if x_scale is None else x_scale, post_weight=pw, post_weight_offset=post_offset))
        st = c_library.check(lib, c_library.norm_args(x, w, out, residual=r, residual_out=rout, eps=1e-6,
                                                      weight_offset=weight_offset, numerics=numerics,
                                                      x_scale=x_scale, post_weight=pw,
                                                      post_weight_offset=post_offset))
        context = (f"N={N} H={H} x={xd} r={rd} w={wd if w is not None else None} numerics={numerics} "
                   f"offsets {weight_offset} {post_offset} x_scale={x_scale}")
        _judge(lib, py, st, _FORWARD_FIELDS, context, seen)
    assert all(v >= 15 for v in seen.values()), seen


def test_random_gated_calls_get_the_same_verdict():
    """The gated norm (z): its dtype rules, the group's rules, numerics with it, rstd, 16-byte rows and
    tensors, and out's overlap with z."""
    lib = c_library.load(LIB_PATH)
    rng = random.Random(5)
    view = _view_drawer(rng, clustered=True)
    seen = {"ok": 0, "value": 0, "type": 0}
    def fresh(dtype, N, H):
        return torch.zeros(N, H, dtype=dtype, device=DEVICE)

    for _ in range(600):
        N, H = rng.choice([1, 2, 5]), rng.choice([8, 13, 64, 64, 128])
        xd = rng.choice([torch.float16, torch.bfloat16, torch.bfloat16, torch.float32])
        wd = rng.choice([xd, xd, xd, torch.float32])
        make = fresh if rng.random() < 0.6 else view
        x, z = make(xd, N, H), make(xd, N, H)
        w = make(wd, 1, H)[0] if rng.random() < 0.8 else None
        out = x if rng.random() < 0.3 else (z if rng.random() < 0.1 else make(xd, N, H))
        rstd = torch.zeros(N, device=DEVICE) if rng.random() < 0.05 else None
        numerics = rng.choice([0, 0, 1, 2])
        weight_offset = rng.choice([0.0, 0.0, 1.0]) if w is not None else 0.0
        group = rng.choice([0, 0, 8, 16, 32, 12, -8])
        before = rng.random() < 0.7
        py = _verdict_of(lambda: validation.check_rmsnorm(
            x, w, out, rstd, eps=1e-6, weight_offset=weight_offset, numerics=numerics, z=z, group_size=group,
            norm_before_gate=before))
        st = c_library.check(lib, c_library.norm_args(x, w, out, rstd=rstd, eps=1e-6, weight_offset=weight_offset,
                                                      numerics=numerics, z=z, group_size=group,
                                                      norm_before_gate=before))
        context = (f"N={N} H={H} x={xd} w={wd if w is not None else None} numerics={numerics} group={group} "
                   f"offset={weight_offset} strides x{x.stride(0)} z{z.stride(0)} o{out.stride(0)}")
        _judge(lib, py, st, _FORWARD_FIELDS, context, seen)
    assert all(v >= 15 for v in seen.values()), seen


def test_random_pair_calls_get_the_same_verdict():
    """The pair (b): its dtype and weight rules, the widths, numerics with it, 16-byte rows and tensors, and
    the outputs' overlaps, column slices of one buffer included."""
    lib = c_library.load(LIB_PATH)
    rng = random.Random(7)
    seen = {"ok": 0, "value": 0, "type": 0}

    for _ in range(600):
        N = rng.choice([1, 2, 5])
        Ha, Hb = rng.choice([8, 64, 64, 128, 13]), rng.choice([8, 16, 64, 12])
        xd = rng.choice([torch.float16, torch.bfloat16, torch.bfloat16, torch.float32])
        wd = rng.choice([xd, xd, xd, torch.float32])
        width = Ha + Hb + rng.choice([0, 8, 3])
        buf = torch.zeros(N, width + 16, dtype=xd, device=DEVICE)
        shift = rng.choice([0, 0, 0, 8, 1])
        if rng.random() < 0.6:  # column slices of one buffer
            a, b = buf[:, shift:shift + Ha], buf[:, shift + Ha:shift + Ha + Hb]
        else:
            a, b = torch.zeros(N, Ha, dtype=xd, device=DEVICE), torch.zeros(N, Hb, dtype=xd, device=DEVICE)
        weighted = rng.random() < 0.85
        wa = torch.zeros(Ha, dtype=wd, device=DEVICE) if weighted else None
        wb = torch.zeros(Hb, dtype=wd, device=DEVICE) if weighted and rng.random() < 0.95 else None
        r = rng.random()
        oa = a if r < 0.4 else (buf[:, :Ha] if r < 0.5 and buf.shape[1] >= Ha else torch.zeros(N, Ha, dtype=xd,
                                                                                                device=DEVICE))
        ob = b if rng.random() < 0.5 else torch.zeros(N, Hb, dtype=xd, device=DEVICE)
        numerics = rng.choice([0, 0, 1, 2])
        weight_offset = rng.choice([0.0, 0.0, 1.0]) if weighted else 0.0
        py = _verdict_of(lambda: validation.check_rmsnorm(
            a, wa, oa, None, eps=1e-6, weight_offset=weight_offset, numerics=numerics, b=b, b_weight=wb, b_out=ob))
        st = c_library.check(lib, c_library.norm_args(a, wa, oa, eps=1e-6, weight_offset=weight_offset,
                                                      numerics=numerics, b=b, b_weight=wb, b_out=ob))
        context = (f"N={N} Ha={Ha} Hb={Hb} width={width} shift={shift} x={xd} w={wd if weighted else None} "
                   f"numerics={numerics} offset={weight_offset}")
        _judge(lib, py, st, _FORWARD_FIELDS, context, seen)
    assert all(v >= 15 for v in seen.values()), seen


def addrmsnorm_last_error(lib):
    return lib.addrmsnorm_last_error().decode()


# ----- the backward ---------------------------------------------------------------------------------

def _python_backward_verdict(dy, dro, h, rstd, w, weight_offset):
    try:
        validation.check_backward(dy, dro, h, rstd, w, weight_offset=weight_offset)
        return "ok"
    except (TypeError, ValueError) as e:
        _LAST_PYTHON[0] = str(e)
        return "type" if isinstance(e, TypeError) else "value"


def _c_backward_verdict(lib, dy, dro, h, rstd, w, weight_offset):
    N, H = dy.shape
    dev = dy.device
    separate = dy.dtype != h.dtype
    # Fresh outputs and workspace: the verdict is about the inputs, which is all the Python check sees.
    dres = torch.empty(N, H, dtype=h.dtype, device=dev)
    dx = torch.empty(N, H, dtype=dy.dtype, device=dev) if separate else None
    dweight = torch.empty(H, dtype=w.dtype, device=dev)
    ws = torch.empty(64, dtype=torch.float32, device=dev)
    st = c_library.check(lib, c_library.backward_args(dy, h, rstd, w, dresidual_out=dro, dresidual=dres, dx=dx,
                                                      dweight=dweight, workspace=ws, workspace_bytes=256,
                                                      weight_offset=weight_offset))
    return {0: "ok", 1: "value", 2: "type"}.get(st, f"status {st}")


def test_random_backward_calls_get_the_same_verdict():
    lib = c_library.load(LIB_PATH)
    rng = random.Random(1)
    view = _view_drawer(rng)
    seen = {"ok": 0, "value": 0, "type": 0}

    for _ in range(1000):
        N, H = rng.choice([0, 1, 2, 5]), rng.choice([0, 1, 8, 13, 64])
        xd = rng.choice(DTYPES)
        rd = rng.choice([xd, xd, torch.float32, rng.choice(DTYPES)])
        wd = rng.choice(DTYPES)
        dy, h = view(xd, N, H), view(rd, N, H)
        # The C ABI has no dtype of its own for dresidual_out (it is h's), so only that is drawn.
        dro = view(rd, N, H) if rng.random() < 0.5 else None
        w = view(wd, 1, max(H, 1))[0, :H]
        rstd = torch.empty(N, dtype=torch.float32, device=DEVICE)
        weight_offset = rng.choice([0.0, 1.0]) if rng.random() < 0.6 else _scalar(rng)
        py = _python_backward_verdict(dy, dro, h, rstd, w, weight_offset)
        c = _c_backward_verdict(lib, dy, dro, h, rstd, w, weight_offset)
        assert py == c, (f"Python says {py}, C says {c} ({addrmsnorm_last_error(lib)}): N={N} H={H} "
                         f"dy={xd} h={rd} w={wd} dro={dro is not None} weight_offset={weight_offset} "
                         f"strides dy{dy.stride(0)} h{h.stride(0)}")
        _assert_same_argument(lib, py, _BACKWARD_FIELDS, f"N={N} H={H} dy={xd} h={rd} w={wd}")
        seen[py] += 1
    assert all(v >= 15 for v in seen.values()), seen


# ----- the torch operators of both backends: the same exception, naming the same argument --------------

def _outcome(fn, fields=FORWARD_FIELDS):
    """(exception type, argument named, message): the backends word a rule differently (the C
    runtime's words on the C++ backend), so the first two are compared."""
    try:
        fn()
        return ("ok", "", "")
    except (TypeError, ValueError, RuntimeError) as e:
        first = str(e).splitlines()[0]
        return (type(e).__name__, argument_named(first, fields), first)


@pytest.mark.skipif(DEVICE != "cuda" or addrmsnorm.backend() != "cpp",
                    reason="needs the cpp backend on a GPU, to compare with the Triton backend")
def test_both_backends_raise_the_same_errors():
    ops_ = torch.ops.addrmsnorm
    rng = random.Random(2)
    view = _view_drawer(rng)
    seen = {}

    for i in range(600):
        N, H = rng.choice([1, 2, 5]), rng.choice([1, 8, 13, 64])
        xd = rng.choice(DTYPES)
        rd = rng.choice([xd, xd, torch.float32, rng.choice(DTYPES)])
        wd = rng.choice(DTYPES + [torch.int32])
        x, r, w = view(xd, N, H), view(rd, N, H), view(wd, 1, H)[0]
        if rng.random() < 0.1:
            w = w[: max(H - 1, 1)]
        out, rout = view(rng.choice([xd, xd, torch.float16]), N, H), view(rd, N, H)
        eps = rng.choice([1e-6, 1e-5]) if rng.random() < 0.6 else _scalar(rng)
        weight_offset = rng.choice([0.0, 1.0]) if rng.random() < 0.7 else _scalar(rng)
        hf = rng.random() < 0.2
        kind = i % 3
        if kind == 0:  # into, then the in-place form: scratch copies, so that both backends see the same bits
            a = _outcome(lambda: ops_.norm_into(x, r, w, out, rout, None, eps, weight_offset, hf))
            b = _outcome(lambda: jit_backend.norm_into(x, r, w, out, rout, None, eps, weight_offset, numerics=int(hf)))
        elif kind == 1:
            a = _outcome(lambda: ops_.norm(x, r, w, eps, weight_offset, False, hf))
            b = _outcome(lambda: jit_backend.norm(x, r, w, eps, weight_offset, numerics=int(hf)))
        else:
            rstd = torch.ones(N, device=DEVICE)
            dro = view(rd, N, H) if rng.random() < 0.5 else None
            a = _outcome(lambda: ops_.norm_backward(x, dro, r, rstd, w, weight_offset, True), BACKWARD_FIELDS)
            b = _outcome(lambda: jit_backend.norm_backward(x, dro, r, rstd, w, weight_offset),
                         BACKWARD_FIELDS)
        assert a[:2] == b[:2], f"cpp: {a}\ntriton: {b}\n(call {i}: kind {kind}, N={N} H={H} {xd} {rd} {wd} eps={eps} " \
                       f"weight_offset={weight_offset} hf={hf})"
        seen[a[0]] = seen.get(a[0], 0) + 1
    assert seen.get("ok", 0) >= 30 and seen.get("ValueError", 0) >= 30 and seen.get("TypeError", 0) >= 30, seen


# ----- the quantized forward ------------------------------------------------------------------------

def _python_quant_verdict(x, r, w, q, rout, y, scale, gs, ub, scales, ue8m0, eps, swizzled=False, pw=None, z=None,
                          zg=0):
    try:
        validation.check_quant(x, None if rout is None else r, w, q.dtype, scale, gs, ub, q, rout, scales, y,
                               ue8m0=ue8m0, swizzled=swizzled, eps=eps, post_weight=pw, z=z, gate_group_size=zg)
        return "ok"
    except (TypeError, ValueError) as e:
        _LAST_PYTHON[0] = str(e)
        return "type" if isinstance(e, TypeError) else "value"


def _c_quant_verdict(lib, x, r, w, q, rout, y, scale, gs, ub, scales, ue8m0, eps, swizzled=False, pw=None, z=None,
                     zg=0):
    qd = c_library.quant_desc(q, scale=scale, group_size=gs, scale_ub=ub, scales=scales, ue8m0=ue8m0,
                              swizzled=swizzled)
    plain = rout is None  # the plain norm's: no residual
    st = c_library.check(lib, c_library.norm_args(x, w, q, residual=None if plain else r, residual_out=rout, eps=eps,
                                                  quant=qd, y=y, post_weight=pw, z=z, group_size=zg))
    return {0: "ok", 1: "value", 2: "type"}.get(st, f"status {st}")


@pytest.mark.parametrize("plain", [False, True], ids=["fused", "plain"])
def test_random_quantized_calls_get_the_same_verdict(plain):
    """The fused quantized forward, and the plain norm's (rmsnorm_quant: residual is x, no residual_out)."""
    lib = c_library.load(LIB_PATH)
    rng = random.Random(3 + plain)
    buf = torch.zeros(1 << 16, dtype=torch.uint8, device=DEVICE)

    def view(dtype, N, H, aligned=True):
        item = torch.tensor([], dtype=dtype).element_size()
        stride = rng.choice([H, H, H + 16, 2 * H, H + rng.randint(1, 5), max(H // 2, 1)])
        span = max(((N - 1) * stride + H) * item, 0)
        step = 16 if aligned and rng.random() < 0.9 else item
        off = rng.randrange(0, len(buf) - span - 64, step)
        return torch.as_strided(buf[off:off + span].view(dtype), (N, H), (stride, 1))

    def f32(n):
        off = rng.randrange(0, len(buf) - 4 * n - 8, 4)
        return buf[off:off + 4 * n].view(torch.float32)

    seen = {"ok": 0, "value": 0, "type": 0}
    for _ in range(1000):
        N, H = rng.choice([0, 1, 2, 5]), rng.choice([0, 16, 64, 120, 128, 192, 256])
        xd = rng.choice([torch.float16, torch.bfloat16, torch.bfloat16, torch.float32])
        qdt = rng.choice([torch.int8, torch.float8_e4m3fn])
        x, r = view(xd, N, H), view(xd, N, H)
        w = view(xd, 1, max(H, 1))[0, :H]
        q = view(qdt, N, H)
        rout = r if rng.random() < 0.2 else (x if rng.random() < 0.1 else view(xd, N, H))
        if plain:
            r, rout = x, None
        y = None if rng.random() < 0.6 else (x if rng.random() < 0.3 and rout is not x else view(xd, N, H))
        mode = rng.choice(["static", "token", "group", "block", "block"])
        # 32 with int8 only: with fp8 it is MXFP8, whose scales are bytes (the block branch below)
        gs = rng.choice([64, 64, 128, 32 if qdt == torch.int8 else 64]) if mode == "group" else 0
        scale = f32(1) if mode == "static" else None
        ub = f32(1) if mode != "static" and rng.random() < 0.3 else None
        ue8m0 = rng.random() < 0.2
        scales = None
        swizzled = False
        if mode == "block":  # NVFP4, MXFP8, MXFP4: q of fp4 (H / 2 bytes a row) or fp8, scale bytes
            fmt = rng.choice(["nvfp4", "mxfp8", "mxfp4"])
            qdt = torch.float8_e4m3fn if fmt == "mxfp8" else torch.float4_e2m1fn_x2
            # a wrong block for fp4 only: fp8 with another group size is the per-group mode, whose fp32 scales
            # the C ABI cannot tell from these bytes
            gs = {"nvfp4": 16, "mxfp8": 32, "mxfp4": 32}[fmt]
            if fmt != "mxfp8" and rng.random() < 0.1:
                gs = rng.choice([16, 64])
            q = view(qdt, N, H // 2 if qdt == torch.float4_e2m1fn_x2 else H)
            scale = f32(1) if (fmt == "nvfp4") != (rng.random() < 0.1) else None
            ub = f32(1) if rng.random() < 0.05 else None
            ue8m0 = rng.random() < 0.05
            swizzled = rng.random() < 0.4
            # the scales' dtype of the mode the C ABI is given (the group size picks NVFP4 or MXFP4)
            sdt = torch.float8_e4m3fn if qdt == torch.float4_e2m1fn_x2 and gs == 16 else torch.float8_e8m0fnu
            G = H // gs if H % gs == 0 else 1
            if swizzled:
                n = validation.swizzled_scales_numel(N, H, gs) if H % gs == 0 else 4
                off = rng.randrange(0, len(buf) - n - 8)
                scales = buf[off:off + n].view(sdt)
            else:
                off = rng.randrange(0, len(buf) - max(N, 1) * max(G, 1) * 2 - 8)
                flat = buf[off:off + max(N, 1) * max(G, 1) * 2].view(sdt)
                scales = torch.as_strided(flat, (N, G), (G, 1) if rng.random() < 0.7 else (1, rng.choice([N, 1])))
        elif mode != "static":
            G = H // gs if gs and H % gs == 0 else 1
            n = max(N, 1) * max(G, 1)
            flat = f32(n + 8)
            # The C ABI takes the scales' shape from rows and hidden: only their strides are drawn.
            if mode == "token":
                scales = torch.as_strided(flat, (N,), (rng.choice([1, 1, 2, 0]),))
            elif rng.random() < 0.5:
                scales = torch.as_strided(flat, (N, G), (G, 1))
            else:
                scales = torch.as_strided(flat, (N, G), (1, rng.choice([N, N + 3, 1])))
        eps = rng.choice([1e-6, 1e-5]) if rng.random() < 0.8 else _scalar(rng)
        # The sandwich norm's quantized outputs: post_weight of x's dtype (the C ABI has no dtype of its own for
        # it), drawn from the same buffer (so at times inside an output).
        pw = view(xd, 1, max(H, 1))[0, :H] if not plain and rng.random() < 0.3 else None
        # The gated norm's quantized outputs: z of x's dtype, groups of the row or of 8 (which divide every H
        # drawn: the C ABI names the gate's group group_size, Python gate_group_size).
        z = view(xd, N, H) if plain and rng.random() < 0.3 else None
        zg = rng.choice([0, 8]) if z is not None else 0
        py = _python_quant_verdict(x, r, w, q, rout, y, scale, gs, ub, scales, ue8m0, eps, swizzled, pw, z, zg)
        c = _c_quant_verdict(lib, x, r, w, q, rout, y, scale, gs, ub, scales, ue8m0, eps, swizzled, pw, z, zg)
        assert py == c, (f"Python says {py}, C says {c} ({addrmsnorm_last_error(lib)}): N={N} H={H} x={xd} q={qdt} "
                         f"mode={mode} gs={gs} ue8m0={ue8m0} eps={eps} y={y is not None} ub={ub is not None} "
                         f"swizzled={swizzled} scale={scale is not None} "
                         f"strides x{x.stride(0)} r{r.stride(0)} q{q.stride(0)} ro{rout.stride(0) if rout is not None else '-'} "
                         f"scales={None if scales is None else (tuple(scales.shape), scales.stride())}")
        _assert_same_argument(lib, py, QUANT_FIELDS, f"N={N} H={H} x={xd} q={qdt} mode={mode} gs={gs}")
        seen[py] += 1
    assert all(v >= 15 for v in seen.values()), seen


@pytest.mark.skipif(DEVICE != "cuda" or addrmsnorm.backend() != "cpp",
                    reason="needs the cpp backend on a GPU, to compare with the Triton backend")
def test_both_backends_raise_the_same_quantized_errors():
    """The quantized operators: the C++ extension (its mapping, then the C ABI's validator) and the
    Triton backend (validation.py) raise the same exception naming the same argument, call by call."""
    ops_ = torch.ops.addrmsnorm
    rng = random.Random(4)
    buf = torch.zeros(1 << 18, dtype=torch.uint8, device=DEVICE)

    def view(dtype, N, H):
        item = torch.tensor([], dtype=dtype).element_size()
        stride = rng.choice([H, H, H + 16, H + rng.randint(1, 5), max(H // 2, 1)])
        span = max(((N - 1) * stride + H) * item, 0)
        off = rng.randrange(0, len(buf) - span - 64, 16 if rng.random() < 0.9 else item)
        return torch.as_strided(buf[off:off + span].view(dtype), (N, H), (stride, 1))

    seen = {}
    for i in range(400):
        N, H = rng.choice([1, 2, 5]), rng.choice([16, 64, 120, 128, 256])
        xd = rng.choice([torch.bfloat16, torch.bfloat16, torch.float16, torch.float32])
        qd = rng.choice([torch.int8, torch.float8_e4m3fn, torch.float16])
        x, r = view(xd, N, H), view(rng.choice([xd, xd, torch.float16]), N, H)
        w = view(rng.choice([xd, xd, torch.float32]), 1, H)[0]
        gs = rng.choice([0, 0, 64, 128, 32])
        scale = torch.full((1,), 0.02, device=DEVICE) if rng.random() < 0.3 else None
        ub = torch.full((1,), 1.0, device=DEVICE) if rng.random() < 0.2 else None
        ue8m0 = rng.random() < 0.2
        eps = rng.choice([1e-6, 1e-5]) if rng.random() < 0.8 else _scalar(rng)
        if i % 2:
            a = _outcome(lambda: ops_.norm_quant(x, r, w, eps, qd, scale, gs, ub, False, ue8m0, 0.0, False))
            b = _outcome(lambda: jit_backend.norm_quant(x, r, w, eps, qd, scale, gs, ub, ue8m0_scales=ue8m0))
        else:
            out, rout = view(qd, N, H), view(xd, N, H)
            groups = H // gs if gs and H % gs == 0 else 1
            scales = None if scale is not None else view(torch.float32, N, groups) if gs else view(torch.float32, 1, N)[0]
            a = _outcome(lambda: ops_.norm_quant_into(x, r, w, out, rout, scales, None, eps, scale, gs, ub,
                                                                   ue8m0, 0.0))
            b = _outcome(lambda: jit_backend.norm_quant_into(x, r, w, out, rout, scales, None, eps, scale, gs, ub,
                                                        ue8m0_scales=ue8m0))
        assert a[:2] == b[:2], f"cpp: {a}\ntriton: {b}\n(call {i}: N={N} H={H} x={xd} q={qd} gs={gs} eps={eps})"
        seen[a[0]] = seen.get(a[0], 0) + 1
    assert seen.get("ok", 0) >= 10 and seen.get("ValueError", 0) >= 30 and seen.get("TypeError", 0) >= 30, seen


# ----- the plain norm: views of two leading strides ------------------------------------------------

def _head_view_drawer(rng):
    """``view(dtype, T, heads, D)``: a random (T, heads, D) view of one shared buffer: contiguous, a
    head's rows inside a wider row (a QKV buffer's q part), or strides that make rows overlap."""
    buf = torch.zeros(1 << 16, dtype=torch.uint8, device=DEVICE)

    def view(dtype, T, heads, D):
        item = torch.tensor([], dtype=dtype).element_size()
        hs = rng.choice([D, D, D + rng.randint(1, 3), max(D // 2, 1), 0])
        rs = rng.choice([heads * hs, (heads + rng.randint(1, 3)) * max(hs, D), max(hs, 1), heads * D - 1])
        rs = max(rs, 0)
        span = ((T - 1) * rs + (heads - 1) * hs + D) * item if T * heads * D else 0
        off = rng.randrange(0, 4096, item) if rng.random() < 0.5 else rng.randrange(8192, len(buf) - span - 16, item)
        return torch.as_strided(buf[off:off + span].view(dtype), (T, heads, D), (rs, hs, 1))
    return view


def test_random_plain_norm_calls_get_the_same_verdict():
    lib = c_library.load(LIB_PATH)
    rng = random.Random(1)
    view = _head_view_drawer(rng)
    flat = _view_drawer(rng, clustered=True)
    seen = {"ok": 0, "value": 0, "type": 0}
    for _ in range(1500):
        T, heads, D = rng.choice([1, 2, 4]), rng.choice([1, 2, 3]), rng.choice([0, 1, 8, 16, 64])
        xd, wd = rng.choice(DTYPES), rng.choice(DTYPES)
        x = view(xd, T, heads, D)
        w = flat(wd, 1, D)[0]
        out = x if rng.random() < 0.3 else view(xd, T, heads, D)
        rstd = None
        if rng.random() < 0.3:
            rstd = flat(torch.float32, 1, T * heads)[0].view(T, heads)
        eps = rng.choice([1e-6, 1e-5]) if rng.random() < 0.7 else _scalar(rng)
        weight_offset = rng.choice([0.0, 1.0]) if rng.random() < 0.8 else _scalar(rng)
        hf = rng.random() < 0.15
        py = _verdict_of(lambda: validation.check_rmsnorm(x, w, out, rstd, eps=eps, weight_offset=weight_offset,
                                                          numerics=int(hf)))
        st = c_library.check(lib, c_library.norm_args(x, w, out, rstd=rstd, eps=eps, weight_offset=weight_offset,
                                                      numerics=int(hf)))
        c = {0: "ok", 1: "value", 2: "type"}[st]
        assert py == c, (f"Python says {py}, C says {c} ({addrmsnorm_last_error(lib)}): T={T} heads={heads} D={D} "
                         f"x={xd} {x.stride()} out={out.stride()} same={out is x} w={wd} hf={hf} eps={eps} "
                         f"offset={weight_offset}")
        _assert_same_argument(lib, py, _FORWARD_FIELDS, f"T={T} heads={heads} D={D} x={xd} w={wd} hf={hf}")
        seen[py] += 1
    assert all(v >= 15 for v in seen.values()), seen


def test_random_qk_norm_calls_get_the_same_verdict():
    lib = c_library.load(LIB_PATH)
    rng = random.Random(5)
    buf = torch.zeros(1 << 16, dtype=torch.uint8, device=DEVICE)
    seen = {"ok": 0, "value": 0, "type": 0}
    for _ in range(800):
        T, nq, nk, D = rng.choice([0, 1, 3]), rng.choice([0, 1, 4]), rng.choice([1, 2]), rng.choice([0, 8, 64])
        xd, wd = rng.choice(DTYPES), rng.choice(DTYPES)
        width = (nq + 2 * nk) * D
        stride = max(rng.choice([width, width, width + 8, (nq + nk) * D - 1, 0]), 0)
        item = torch.tensor([], dtype=xd).element_size()
        span = ((T - 1) * stride + width) * item if T else 0
        off = rng.randrange(0, 4096, 4)
        qkv = torch.as_strided(buf[off:off + max(span, 0)].view(xd), (T, width), (stride, 1))
        wi = torch.tensor([], dtype=wd).element_size()
        wq = torch.as_strided(buf[rng.randrange(0, 8192, 4):].view(wd), (D,), (1,))
        wk = torch.as_strided(buf[rng.randrange(0, 60000 - D * wi, 4):].view(wd), (D,), (1,))
        hf = rng.random() < 0.15
        eps = 1e-6 if rng.random() < 0.85 else _scalar(rng)
        py = _verdict_of(lambda: validation.check_qk_rmsnorm(qkv, wq, wk, nq, nk, D, eps=eps, numerics=int(hf)))
        st = c_library.check(lib, c_library.qk_args(qkv, wq, wk, nq, nk, D, eps, numerics=int(hf)))
        c = {0: "ok", 1: "value", 2: "type"}[st]
        assert py == c, (f"Python says {py}, C says {c} ({addrmsnorm_last_error(lib)}): T={T} nq={nq} nk={nk} D={D} "
                         f"stride={stride} x={xd} w={wd} hf={hf} eps={eps}")
        _assert_same_argument(lib, py, QK_FIELDS, f"T={T} nq={nq} nk={nk} D={D} stride={stride} x={xd} w={wd} hf={hf}")
        seen[py] += 1
    assert all(v >= 15 for v in seen.values()), seen


ROPE_FIELDS = {**QK_FIELDS, "angle": "cos", "positions": "positions", "style": "rope_style"}


def _judge(lib, py: str, st: int, fields: dict, context: str, seen: dict) -> None:
    """One call's two verdicts, Python's and the C status st: the same, naming the same argument; tallied."""
    c = {0: "ok", 1: "value", 2: "type"}.get(st, f"status {st}")
    assert py == c, f"Python says {py} ({_LAST_PYTHON[0]}), C says {c} ({addrmsnorm_last_error(lib)}): {context}"
    _assert_same_argument(lib, py, fields, context)
    seen[py] += 1


def _verdict_of(check) -> str:
    """The Python validator's verdict on a call (its message kept for _assert_same_argument)."""
    try:
        check()
        return "ok"
    except (TypeError, ValueError) as e:
        _LAST_PYTHON[0] = str(e)
        return "type" if isinstance(e, TypeError) else "value"


def test_random_rotation_calls_get_the_same_verdict():
    """The QK norm with the rotation: positions into a cos_sin_cache or cos and sin by token, of every dtype,
    each source alone, both, half of one or none; rotary_dim whole, partial, odd or wider than the head; both
    styles and a bad one; angles in the buffer the call writes; HF's numerics; float32 weights with positions;
    heads wider than the kernels take. Every tensor has the shape and dtype its mapping asks (positions int32 or
    int64, sin of cos's dtype: the mapping's own rules, which the C struct cannot carry, are the torch tests'), so
    that the two validators see the same call."""
    lib = c_library.load(LIB_PATH)
    rng = random.Random(11)
    buf = torch.zeros(1 << 18, dtype=torch.uint8, device=DEVICE)
    seen = {"ok": 0, "value": 0, "type": 0}
    for _ in range(1200):
        T, nq, nk = rng.choice([1, 3, 4]), rng.choice([1, 4]), rng.choice([1, 2])
        D = rng.choice([8, 16, 64, 64, 520])
        xd = rng.choice([torch.bfloat16, torch.bfloat16, torch.float16, torch.float32])
        wd = rng.choice([xd, xd, torch.float32])
        width = (nq + nk) * D
        item = torch.tensor([], dtype=xd).element_size()
        qkv_off = rng.randrange(0, 2048, 16)
        qkv = torch.as_strided(buf[qkv_off:].view(xd), (T, width), (width, 1))
        q_end = qkv_off + T * width * item
        wq = torch.as_strided(buf[150000:].view(wd), (D,), (1,))
        wk = torch.as_strided(buf[160000:].view(wd), (D,), (1,))
        rotary_dim = rng.choice([0, 0, 0, D, D // 2, D - 1, D + 2])
        style = rng.choice([0, 0, 1, 2])
        rd = D if rotary_dim == 0 else rotary_dim
        ad = rng.choice([torch.float32, xd, xd, torch.float16, torch.bfloat16])

        def angles(rows, dt=None):  # rows of rd angles, apart from qkv or (sometimes) inside what it writes
            dt = dt or ad
            start = rng.randrange(qkv_off, max(q_end - 16, qkv_off + 1), 16) if rng.random() < 0.1 \
                else rng.randrange(170000, 180000, 16)
            return torch.as_strided(buf[start:].view(dt), (rows, rd), (rd, 1))

        source = rng.choice(["cache", "cache", "cols", "cols", "both", "cos only", "positions only", "none"])
        positions = cache = cos = sin = None
        if source in ("cache", "both", "positions only"):
            pd = rng.choice([torch.int64, torch.int32])
            positions = torch.as_strided(buf[240000:].view(pd), (T,), (1,))
        if source in ("cache", "both"):
            cache = angles(rng.choice([1, 16]))
        if source in ("cols", "both", "cos only"):
            cos = angles(T)
            if source != "cos only":
                sin = angles(T)
        if source == "none":  # rotary_dim or a style without angles: the mapping's rule (ops.cpp's rope_of)
            rotary_dim, style = 0, 0
        hf = rng.random() < 0.2
        kw = dict(positions=positions, cos_sin_cache=cache, cos=cos, sin=sin, rotary_dim=rotary_dim, rope_style=style)
        py = _verdict_of(lambda: validation.check_qk_rmsnorm(qkv, wq, wk, nq, nk, D, eps=1e-6, numerics=int(hf), **kw))
        rope = None
        if any(t is not None for t in (positions, cache, cos, sin)) or rotary_dim or style:
            rope = c_library.rope_desc(positions=positions, cos_sin_cache=cache, cos=cos, sin=sin,
                                       rotary_dim=rotary_dim, style=style)
        st = c_library.check(lib, c_library.qk_args(qkv, wq, wk, nq, nk, D, 1e-6, numerics=int(hf), rope=rope))
        context = (f"T={T} nq={nq} nk={nk} D={D} x={xd} w={wd} source={source} angles={ad} rotary_dim={rotary_dim} "
                   f"style={style} hf={hf} positions={None if positions is None else positions.dtype}")
        _judge(lib, py, st, ROPE_FIELDS, context, seen)
    assert all(v >= 30 for v in seen.values()), seen


def test_random_rotation_backward_calls_get_the_same_verdict():
    """The rotation's backward (the plain norm's backward of a part's rotated heads, rows of rope_groups heads a
    token): angles of every dtype, rotary_dim and style drawn as above, rope_groups that divide the rows or not,
    a dresidual_out or an rstd where none is taken, h of another dtype, eps from the whole range."""
    lib = c_library.load(LIB_PATH)
    rng = random.Random(12)
    buf = torch.zeros(1 << 18, dtype=torch.uint8, device=DEVICE)
    ws = torch.empty(1 << 18, dtype=torch.float32, device=DEVICE)
    seen = {"ok": 0, "value": 0, "type": 0}
    for _ in range(1000):
        T, heads, D = rng.choice([1, 2, 3]), rng.choice([1, 2, 4]), rng.choice([8, 64, 520])
        N = T * heads
        xd = rng.choice([torch.bfloat16, torch.float16, torch.float32])
        hd = xd if rng.random() < 0.9 else rng.choice(DTYPES)
        dy = torch.as_strided(buf[0:].view(xd), (N, D), (D, 1))
        h = torch.as_strided(buf[40000:].view(hd), (N, D), (D, 1))
        dx = torch.as_strided(buf[80000:].view(xd), (N, D), (D, 1))
        dro = torch.as_strided(buf[120000:].view(hd), (N, D), (D, 1)) if rng.random() < 0.1 else None
        rstd = torch.as_strided(buf[160000:].view(torch.float32), (N,), (1,)) if rng.random() < 0.1 else None
        w = torch.as_strided(buf[170000:].view(rng.choice([xd, torch.float32])), (D,), (1,))
        dweight = torch.as_strided(buf[175000:].view(w.dtype), (D,), (1,))
        groups = heads if rng.random() < 0.85 else rng.choice([0, N + 1])
        rotary_dim = rng.choice([0, 0, 0, D, D // 2, D - 1, D + 2])
        style = rng.choice([0, 0, 1, 2])
        rd = D if rotary_dim == 0 else rotary_dim
        ad = rng.choice([torch.float32, torch.float32, torch.float32, xd, torch.bfloat16])
        tokens = N // groups if groups > 0 and N % groups == 0 else T
        cos = torch.as_strided(buf[180000:].view(ad), (tokens, rd), (rd, 1))
        sin = torch.as_strided(buf[220000:].view(ad), (tokens, rd), (rd, 1))
        eps = 1e-6 if rng.random() < 0.85 else _scalar(rng)
        py = _verdict_of(lambda: validation.check_backward(dy, dro, h, rstd, w, weight_offset=0.0, cos=cos, sin=sin,
                                                           rope_groups=groups, rotary_dim=rotary_dim, rope_style=style,
                                                           eps=eps))
        rope = c_library.rope_desc(cos=cos, sin=sin, rotary_dim=rotary_dim, style=style)
        # dweight and a workspace the call cannot outgrow: the verdict is about the inputs
        st = c_library.check(lib, c_library.backward_args(dy, h, rstd, w, dresidual_out=dro, dx=dx, rope=rope,
                                                          rope_groups=groups, eps=eps, dweight=dweight, workspace=ws,
                                                          workspace_bytes=ws.numel() * 4))
        context = (f"T={T} heads={heads} D={D} dy={xd} h={hd} dro={dro is not None} rstd={rstd is not None} "
                   f"groups={groups} angles={ad} rotary_dim={rotary_dim} style={style} eps={eps}")
        _judge(lib, py, st, {**_BACKWARD_FIELDS, "angle": "cos", "style": "rope_style"}, context, seen)
    assert all(v >= 30 for v in seen.values()), seen
