"""Build a small Llama from a config, fuse its residual adds with addrmsnorm, and generate.

    python examples/hf_generate.py     (a GPU, or TRITON_INTERPRET=1 on the CPU)
"""
import os

import torch
import transformers

from addrmsnorm import hf

device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
dtype = torch.float32 if device == "cpu" else torch.bfloat16
config = transformers.LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                                  num_attention_heads=8, num_key_value_heads=2)
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()

prompt = torch.randint(0, config.vocab_size, (1, 16), device=device)
before = model.generate(prompt, max_new_tokens=20, do_sample=False)
hf.patch(model)  # every residual add is now fused with the RMSNorm after it, HF's roundings kept
after = model.generate(prompt, max_new_tokens=20, do_sample=False)
print("patched:", type(model.model.layers[0]).__name__, "| same tokens as unpatched:", torch.equal(before, after))
