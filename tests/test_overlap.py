"""The overlap check of row-strided views against brute force over their bytes (no kernel runs)."""

import random

import torch

from addrmsnorm.validation import Rows, _overlaps


def _view(buf, off, n, h, stride):
    return torch.as_strided(buf, (n, h), (stride, 1), off)


def _bytes(t):
    s = set()
    for i in range(t.shape[0]):
        base = t.data_ptr() + i * t.stride(0) * t.element_size()
        s.update(range(base, base + t.shape[1] * t.element_size()))
    return s


def _rows(t):
    return Rows(tensor=t, n_rows=t.shape[0], row_stride=t.stride(0) if t.shape[0] > 1 else t.shape[1])


def test_overlap_matches_brute_force():
    rng = random.Random(0)
    buf16 = torch.zeros(4096, dtype=torch.float16)
    buf32 = buf16.view(torch.float32)
    for _ in range(3000):
        views = []
        for _ in range(2):
            h = rng.randint(1, 8)
            stride = rng.choice([h, h + 1, h + 3, 2 * h, 0])
            buf = rng.choice([buf16, buf32])
            views.append(_view(buf, rng.randint(0, 40), rng.randint(1, 5), h, stride))
        a, b = views
        truth = bool(_bytes(a) & _bytes(b))
        got = _overlaps(_rows(a), _rows(b))
        if truth:
            assert got, "missed an overlap"
        elif got:
            # Only allowed where the check is documented to be conservative.
            same = (a.element_size() * a.stride(0) == b.element_size() * b.stride(0))
            assert not same or a.shape[0] == 1 or b.shape[0] == 1, "false overlap at equal strides"
