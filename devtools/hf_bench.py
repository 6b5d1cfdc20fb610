"""A Llama-shaped transformers model on the GPU: prefill, decode and a training step, unpatched,
with ``addrmsnorm.hf.patch`` and with Liger-Kernel's RMSNorm swap, each eager and compiled.

The model is built from a config with random weights (no download): hidden 4096, intermediate
14336, 32 heads (8 KV heads), vocabulary 32000, bf16; 8 layers unless --layers says otherwise.

    prefill   model(ids, logits_to_keep=1) with no cache, as generate's first step computes the
              last position's logits: tokens/s at 1 x 2048 and 8 x 512.
    decode    model.generate with HF's static cache, greedy, from a 128-token prompt: ms per token,
              measured as (time for 1 + D new tokens - time for 1 new token) / D, which leaves the
              prefill out. "compiled" is generate's own compilation (CompileConfig: mode
              "reduce-overhead", so CUDA graphs); "eager" passes disable_compile=True.
    train     one AdamW step at 4 x 1024 (forward with labels, backward, step): ms.

Liger is applied with rms_norm=True and everything else off (its RoPE, SwiGLU and cross-entropy
kernels would change other ops than the norms; the comparison is of the norm and the add). Liger
replaces the LlamaRMSNorm class in transformers' module for the whole process, so its rows run last.

Every time is the median of --repeats runs after warm-up runs, on CUDA events.

    python devtools/hf_bench.py --out results.json [--variants unpatched,addrmsnorm,liger]
                                [--modes eager,compiled] [--what prefill,decode,train]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time

import torch


def build(layers: int):
    import transformers
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                                   num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
                                   max_position_embeddings=4096, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def apply(model, variant: str):
    if variant == "addrmsnorm":
        from addrmsnorm import hf
        hf.patch(model)
    elif variant == "addrmsnorm-pdl":
        from addrmsnorm import hf
        hf.patch(model, pdl=True)
    elif variant == "liger":
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        apply_liger_kernel_to_llama(rope=False, swiglu=False, cross_entropy=False,
                                    fused_linear_cross_entropy=False, rms_norm=True, model=model)
    elif variant != "unpatched":
        raise SystemExit(f"unknown variant {variant}")
    return model


def timed(fn, warmup: int, repeats: int) -> float:
    """Median ms of fn() over repeats, after warmup calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def ids(batch: int, length: int, seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randint(0, 32000, (batch, length), device="cuda", generator=g)


def prefill(model, compiled: bool, args) -> dict:
    fwd = torch.compile(model, dynamic=False) if compiled else model
    out = {}
    for b, t in ((1, 2048), (8, 512)):
        x = ids(b, t)
        with torch.inference_mode():
            ms = timed(lambda: fwd(x, use_cache=False, logits_to_keep=1), args.warmup, args.repeats)
        out[f"prefill {b}x{t} tok/s"] = b * t / ms * 1e3
    return out


def decode(model, compiled: bool, args) -> dict:
    out = {}
    d = args.decode_tokens
    for b in (1, 32):
        x = ids(b, 128, seed=1)

        def gen(n):
            return model.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                  cache_implementation="static", disable_compile=not compiled, pad_token_id=0)
        with torch.inference_mode():
            t1 = timed(lambda: gen(1), args.warmup, args.repeats)
            tn = timed(lambda: gen(1 + d), args.warmup, args.repeats)
        out[f"decode b{b} ms/token"] = (tn - t1) / d
    return out


def train(model, compiled: bool, args) -> dict:
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    fwd = torch.compile(model, dynamic=False) if compiled else model
    x = ids(4, 1024, seed=2)

    def step():
        loss = fwd(x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    ms = timed(step, args.warmup, args.repeats)
    model.eval()
    del opt
    return {"train 4x1024 ms/step": ms}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--variants", default="unpatched,addrmsnorm,liger")
    p.add_argument("--modes", default="eager,compiled")
    p.add_argument("--what", default="prefill,decode,train")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    import transformers
    import addrmsnorm
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "transformers": transformers.__version__, "addrmsnorm_backend": addrmsnorm.backend(),
            "layers": args.layers}
    rows = []
    for variant in args.variants.split(","):
        model = apply(build(args.layers), variant)
        for mode in args.modes.split(","):
            row = {"variant": variant, "mode": mode}
            for what in args.what.split(","):
                t0 = time.time()
                torch._dynamo.reset()
                row.update({"prefill": prefill, "decode": decode, "train": train}[what](model, mode == "compiled", args))
                print(f"{variant} {mode} {what}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
            rows.append(row)
            print(json.dumps(row), flush=True)
        del model
        gc.collect()
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
