"""The C runtime's overlap check of row-strided views (asked through validation.check_forward, no kernel runs)
against brute force over their bytes: out may be x exactly, and otherwise must share no byte with it."""

import random

import pytest
import torch

from addrmsnorm import c_library, validation

pytestmark = pytest.mark.skipif(c_library.library_path() is None, reason="no C++ library")


def _view(buf, off, n, h, stride):
    return torch.as_strided(buf, (n, h), (stride, 1), off)


def _bytes(t):
    s = set()
    for i in range(t.shape[0]):
        base = t.data_ptr() + i * t.stride(0) * t.element_size()
        s.update(range(base, base + t.shape[1] * t.element_size()))
    return s


def test_overlap_matches_brute_force():
    rng = random.Random(0)
    refused = 0
    for dtype in (torch.float16, torch.float32):
        buf = torch.zeros(4096, dtype=dtype)
        for _ in range(600):
            h, n = rng.randint(1, 8), rng.randint(1, 5)
            x, out = (_view(buf, rng.randint(0, 40), n, h, rng.choice([h, h + 1, h + 3, 2 * h])) for _ in range(2))
            residual, residual_out = torch.zeros(n, h, dtype=dtype), torch.zeros(n, h, dtype=dtype)
            same_view = x.data_ptr() == out.data_ptr() and (n == 1 or x.stride() == out.stride())
            truth = bool(_bytes(x) & _bytes(out)) and not same_view
            try:
                validation.check_forward(x, residual, torch.ones(h, dtype=dtype), out, residual_out, eps=1e-6)
                got = False
            except ValueError as e:
                assert "overlap" in str(e), str(e)
                got = True
            if truth:
                assert got, f"missed an overlap: {x.data_ptr()} {x.stride()} and {out.data_ptr()} {out.stride()}"
                refused += 1
            elif got:  # conservative only where the row strides differ
                assert x.stride(0) != out.stride(0) and n > 1, "a false overlap at equal strides"
    assert refused > 100
