"""Every call the validators accept has a kernel in the C++ runtime: the JIT backend (which compiles whatever it is
asked) and the cpp backend (which has only what tools/aot_build.py built) take the same calls.

`addrmsnorm_norm_check` and `addrmsnorm_norm_backward_check` make the launch's own choice of kernel after the
checks, touching no driver, and refuse a call whose kernel was not built ("no ... kernel was built for these
dtypes"). Over generated grids of each variant -- dtypes, widths, head_dim and rotary_dim, angle sources,
alignments and numerics -- at the widths models use, the Python validator (validation.py, the JIT backend's) and
the C check must give the same verdict: a call Python accepts and C refuses is one the cpp backend cannot run.
Runs on the CPU (the built library alone), so CI sees a missing kernel before a GPU does.
"""

import itertools

import pytest
import torch

from addrmsnorm import c_library, validation

from conftest import DEVICE

LIB_PATH = c_library.library_path()
pytestmark = [
    pytest.mark.skipif(LIB_PATH is None, reason="no C++ library (build it: cmake -S . -B build && cmake --build build)"),
    pytest.mark.skipif(DEVICE is None, reason="the Python API needs CUDA or the Triton interpreter"),
]

VERDICT = {0: "ok", 1: "ValueError", 2: "TypeError"}


def _python(fn) -> tuple[str, str]:
    try:
        fn()
        return "ok", ""
    except (TypeError, ValueError) as e:
        return type(e).__name__, str(e)


def _c(lib, args) -> tuple[str, str]:
    st = c_library.check(lib, args)
    return VERDICT.get(st, f"status {st}"), lib.addrmsnorm_last_error().decode() if st else ""


class _Grid:
    """The verdicts of one grid: each call's two must agree; the grid must accept some calls and refuse none
    for want of a kernel."""

    def __init__(self, lib):
        self.lib, self.accepted, self.calls = lib, 0, 0

    def check(self, python_fn, c_args, what: str) -> None:
        py, py_msg = _python(python_fn)
        c, c_msg = _c(self.lib, c_args)
        assert "was built for" not in c_msg, f"no kernel for a call the C runtime accepts: {what}: {c_msg}"
        assert py == c, f"Python says {py} ({py_msg}), C says {c} ({c_msg}): {what}"
        self.calls += 1
        self.accepted += py == "ok"


def _buffer(nbytes: int) -> torch.Tensor:
    return torch.zeros(nbytes + 64, dtype=torch.uint8, device=DEVICE)


def _at(buf: torch.Tensor, offset: int, dtype, shape, strides) -> torch.Tensor:
    """A view of buf's bytes from offset on (a multiple of dtype's size) with the given shape and strides."""
    return torch.as_strided(buf[offset:].view(dtype), shape, strides)


def _rows(rows: int, H: int, misaligned: bool, *dtypes) -> list[torch.Tensor]:
    """(rows, H) views of one buffer, one a dtype, apart from each other: rows of H elements, or of H + 1 (row
    strides off the 16-byte vector) where misaligned."""
    stride = H + (1 if misaligned else 0)
    part = rows * stride * 4 + 64  # room for fp32, each view on a 16-byte boundary
    buf = _buffer(len(dtypes) * part)
    return [_at(buf, i * part, dt, (rows, H), (stride, 1)) for i, dt in enumerate(dtypes)]


X_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def test_every_accepted_rotation_has_a_kernel():
    """The QK norm with the rotation: head_dim and rotary_dim of the families, both styles, positions (int32,
    int64) into a cache or cos and sin, angles of the heads' dtype or fp32, weights of the heads' dtype, fp32 or
    none, the contract and HF's two forms, qkv on the 16-byte vector or off it."""
    lib = c_library.load(LIB_PATH)
    grid = _Grid(lib)
    T, nq, nk = 3, 2, 1
    for D, x_dtype, w_dtype, source, a_dtype, (hf, offset), misaligned in itertools.product(
            (64, 80, 128, 256, 512), X_DTYPES[:2] + (torch.float32,), ("x", torch.float32, None),
            ("int32", "int64", "cos_sin"), ("x", torch.float32), ((0, 0.0), (1, 0.0), (1, 1.0), (0, 1.0)),
            (False, True)):
        wd = x_dtype if w_dtype == "x" else w_dtype
        ad = x_dtype if a_dtype == "x" else a_dtype
        if wd is None and offset:
            continue  # an offset needs a weight (a rule of its own, tested elsewhere)
        for rd in sorted({0, D // 2, 32}):
            item = x_dtype.itemsize
            width = (nq + 2 * nk) * D
            stride = width + (1 if misaligned else 0)
            buf = _buffer((T * stride + D) * item + 4096)
            qkv = _at(buf, item if misaligned else 0, x_dtype, (T, width), (stride, 1))
            wbuf = _buffer(2 * D * 4)
            wq = _at(wbuf, 0, wd, (D,), (1,)) if wd is not None else None
            wk = _at(wbuf, D * 4, wd, (D,), (1,)) if wd is not None else None
            rot = rd or D
            angles = {}
            if source == "cos_sin":
                abuf = _buffer(2 * T * rot * 4)
                angles = dict(cos=_at(abuf, 0, ad, (T, rot), (rot, 1)), sin=_at(abuf, T * rot * 4, ad, (T, rot), (rot, 1)))
            else:
                pbuf = _buffer(16 * rot * 4)
                angles = dict(positions=torch.zeros(T, dtype=getattr(torch, source), device=DEVICE),
                              cos_sin_cache=_at(pbuf, 0, ad, (16, rot), (rot, 1)))
            style = D % 3 % 2  # both styles over the grid
            what = (f"D={D} rotary_dim={rd} x={x_dtype} weight={wd} {source} angles={ad} numerics={hf} "
                    f"offset={offset} misaligned={misaligned}")
            rope = c_library.rope_desc(rotary_dim=rd, style=style, **angles)
            grid.check(lambda: validation.check_qk_rmsnorm(qkv, wq, wk, nq, nk, D, eps=1e-6, weight_offset=offset,
                                                           numerics=hf, rotary_dim=rd, rope_style=style, **angles),
                       c_library.qk_args(qkv, wq, wk, nq, nk, D, 1e-6, offset, numerics=hf, rope=rope), what)
    assert grid.accepted >= 200, (grid.accepted, grid.calls)


def test_every_accepted_rotation_backward_has_a_kernel():
    """The rotation's backward: head_dim up to 512, both 16-bit dtypes and fp32, weighted or not, rows on the
    16-byte vector or off it."""
    lib = c_library.load(LIB_PATH)
    grid = _Grid(lib)
    T, heads = 3, 3
    for D, dtype, weighted, misaligned, rd in itertools.product((64, 128, 256, 512, 1024), X_DTYPES, (True, False),
                                                                (False, True), (0, 32)):
        dy, h, dres = _rows(T * heads, D, misaligned, dtype, dtype, dtype)
        w = torch.zeros(D, dtype=dtype, device=DEVICE) if weighted else None
        rot = rd or D
        cos, sin = (torch.zeros(T, rot, dtype=torch.float32, device=DEVICE) for _ in range(2))
        ws = torch.zeros(64, dtype=torch.float32, device=DEVICE)
        rope = c_library.rope_desc(cos=cos, sin=sin, rotary_dim=rd)
        what = f"D={D} rotary_dim={rd} {dtype} weighted={weighted} misaligned={misaligned}"
        grid.check(lambda: validation.check_backward(dy, None, h, None, w, weight_offset=0.0, cos=cos, sin=sin,
                                                     rope_groups=heads, rotary_dim=rd, eps=1e-6),
                   c_library.backward_args(dy, h, None, w, dx=dres, dweight=None, workspace=ws,
                                           workspace_bytes=256, rope=rope, rope_groups=heads, eps=1e-6), what)
    assert grid.accepted >= 20, (grid.accepted, grid.calls)


WIDTHS = (8, 64, 128, 1000, 1024, 2048, 4096, 5376, 7168, 8192, 16384, 32768)


def test_every_accepted_plain_gated_and_pair_call_has_a_kernel():
    """The plain norm (rows and heads), the gated norm (groups of the families) and the latent pair, at the
    widths of models, every dtype of x and weight, the contract and HF's forms, on the vector and off it."""
    lib = c_library.load(LIB_PATH)
    grid = _Grid(lib)
    rows = 2
    for H, x_dtype, w_dtype, (hf, offset), misaligned in itertools.product(
            WIDTHS, X_DTYPES, X_DTYPES + (None,), ((0, 0.0), (1, 0.0), (1, 1.0), (2, 0.0), (0, 1.0)), (False, True)):
        if w_dtype is None and offset:
            continue
        x, out, z = _rows(rows, H, misaligned, x_dtype, x_dtype, x_dtype)
        w = torch.zeros(H, dtype=w_dtype, device=DEVICE) if w_dtype is not None else None
        what = f"H={H} x={x_dtype} w={w_dtype} numerics={hf} offset={offset} misaligned={misaligned}"
        grid.check(lambda: validation.check_rmsnorm(x, w, out, None, eps=1e-6, weight_offset=offset, numerics=hf),
                   c_library.norm_args(x, w, out, eps=1e-6, weight_offset=offset, numerics=hf), "plain " + what)
        for group in sorted({None, 64, 128, 1024, H // 2 if H >= 16 else None} - {None}) + [None]:
            if group is not None and H % group:
                continue
            grid.check(lambda: validation.check_rmsnorm(x, w, out, None, eps=1e-6, weight_offset=offset,
                                                        numerics=hf, z=z, group_size=group or 0),
                       c_library.norm_args(x, w, out, eps=1e-6, weight_offset=offset, numerics=hf, z=z,
                                           group_size=group or 0), f"gated group={group} " + what)
        for b_width in (64, 512):
            b = torch.zeros(rows, b_width, dtype=x_dtype, device=DEVICE)
            b_out = torch.zeros(rows, b_width, dtype=x_dtype, device=DEVICE)
            bw = torch.zeros(b_width, dtype=w_dtype, device=DEVICE) if w_dtype is not None else None
            grid.check(lambda: validation.check_rmsnorm(x, w, out, None, eps=1e-6, weight_offset=offset, numerics=hf,
                                                        b=b, b_weight=bw, b_out=b_out),
                       c_library.norm_args(x, w, out, eps=1e-6, weight_offset=offset, numerics=hf, b=b, b_weight=bw,
                                           b_out=b_out), f"pair b={b_width} " + what)
    assert grid.accepted >= 200, (grid.accepted, grid.calls)


def test_every_accepted_fused_and_sandwich_call_has_a_kernel():
    """The fused norm (every dtype combination of x, residual and weight) and the sandwich norm at the widths
    of models, with the contract and HF's forms, on the vector and off it."""
    lib = c_library.load(LIB_PATH)
    grid = _Grid(lib)
    rows = 2
    for H, x_dtype, r_dtype, w_dtype, (hf, offset), misaligned, sandwich in itertools.product(
            WIDTHS, X_DTYPES, ("x", torch.float32), X_DTYPES + (None,), ((0, 0.0), (1, 0.0), (1, 1.0), (0, 1.0)),
            (False, True), (False, True)):
        rd = x_dtype if r_dtype == "x" else r_dtype
        if w_dtype is None and offset:
            continue
        x, r, out, rout = _rows(rows, H, misaligned, x_dtype, rd, x_dtype, rd)
        w = torch.zeros(H, dtype=w_dtype, device=DEVICE) if w_dtype is not None else None
        pw = torch.zeros(H, dtype=w_dtype or x_dtype, device=DEVICE) if sandwich else None
        what = (f"H={H} x={x_dtype} r={rd} w={w_dtype} numerics={hf} offset={offset} misaligned={misaligned} "
                f"sandwich={sandwich}")
        grid.check(lambda: validation.check_forward(x, r, w, out, rout, eps=1e-6, weight_offset=offset, numerics=hf,
                                                    post_weight=pw, post_weight_offset=offset),
                   c_library.norm_args(x, w, out, residual=r, residual_out=rout, eps=1e-6, weight_offset=offset,
                                       numerics=hf, post_weight=pw, post_weight_offset=offset), what)
    assert grid.accepted >= 200, (grid.accepted, grid.calls)

