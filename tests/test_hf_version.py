"""addrmsnorm.hf.patch refuses a transformers older than the one its decoder layers are written for (a patched
Qwen3-Next layer on transformers 5.17 ran its linear attention without its cache at decode: logits 22% off on an
H100, 2026-12-06), and the package's "hf" extra asks for the same release."""

import re
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from addrmsnorm import hf  # noqa: E402


def test_an_older_transformers_is_refused_by_name(monkeypatch):
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1)
    model = transformers.LlamaForCausalLM(cfg)
    monkeypatch.setattr(hf, "_transformers_version", lambda: "5.17.0")
    with pytest.raises(RuntimeError, match=r"needs transformers >= 5\.24, found 5\.17\.0"):
        hf.patch(model)
    assert not hf.is_patched(model)


def test_the_hf_extra_asks_for_the_same_release():
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    m = re.search(r'^hf = \["transformers>=([0-9.]+)"\]', pyproject, re.M)
    assert m, "pyproject.toml's hf extra is gone"
    assert tuple(int(p) for p in m.group(1).split(".")) == hf.MIN_TRANSFORMERS
