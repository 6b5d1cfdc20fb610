"""A Llama- or Qwen3-shaped transformers model on the GPU: prefill, decode and a training step,
unpatched, with ``addrmsnorm.hf.patch`` and with Liger-Kernel's RMSNorm swap, each eager and compiled.

The model is built from a config with random weights (no download): hidden 4096, 32 heads (8 KV
heads), vocabulary 32000, bf16; 8 layers unless --layers says otherwise. --arch llama: intermediate
14336; --arch qwen3: intermediate 12288, head_dim 128, and per-head q_norm and k_norm. --arch qwen3_next:
Qwen3-Next-80B-A3B's layer (hidden 2048; three gated-delta-net layers, whose gated norms run on 32 value heads
of 128, then one attention layer of 16 heads of 256 with per-head q/k norms), with 16 experts of 512 (top 4)
and a shared expert in place of its 512; no Liger variant (Liger has no Qwen3-Next patch). --arch deepseek_v3:
DeepSeek-V3's layer at hidden 4096 (MLA: q latent 1536, kv latent 512, 32 heads of 128 + 64 rotary; a dense first
layer, then 16 routed experts of 1024, top 4, and a shared one). --arch gemma3: Gemma 3 27B's layer (hidden 5376,
32 heads of 128, 16 KV heads, intermediate 21504; its sandwich norms and per-head q/k norms; five sliding-window
layers to one global). --arch granite: Granite 3's layer (hidden 4096, intermediate 12800, residual_multiplier
0.22: the scaled residual).

Variants: "unpatched"; "addrmsnorm" (hf.patch: every norm through addrmsnorm); "addrmsnorm-pdl";
"addrmsnorm-adds-only" (hf.patch with its plain norms given back to HF: the first layer's input norm
and Qwen3's q/k norms run HF's modules, as before the plain norm existed); "addrmsnorm-no-rope" (hf.patch with
the attention given back to HF: the q/k norms run as plain norms, then HF's apply_rotary_pos_emb, as before the
QK norm with the rotation existed); "liger".

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

The variants are measured in turn, --rounds times, in one process (the models side by side), after
two warm-up samples each (which compile); each figure is the median of its rounds. A prefill or
training sample is the median of 3 timed calls on CUDA events.

    python devtools/hf_bench.py --out results.json [--variants unpatched,addrmsnorm,liger]
                                [--modes eager,compiled] [--what prefill,decode,train]
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import sys
import time

import torch


def build(layers: int, arch: str = "llama"):
    import transformers
    if arch == "deepseek_v3":
        cfg = transformers.DeepseekV3Config(
            vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=layers,
            num_attention_heads=32, num_key_value_heads=32, q_lora_rank=1536, kv_lora_rank=512,
            qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, n_routed_experts=16, num_experts_per_tok=4,
            moe_intermediate_size=1024, n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1,
            max_position_embeddings=4096)
        model_cls = transformers.DeepseekV3ForCausalLM
    elif arch == "qwen3_next":
        cfg = transformers.Qwen3NextConfig(
            vocab_size=32000, hidden_size=2048, num_hidden_layers=layers, num_attention_heads=16,
            num_key_value_heads=2, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=32,
            linear_key_head_dim=128, linear_value_head_dim=128, num_experts=16, num_experts_per_tok=4,
            moe_intermediate_size=512, shared_expert_intermediate_size=512, max_position_embeddings=4096,
            layer_types=[("full_attention" if (i + 1) % 4 == 0 else "linear_attention") for i in range(layers)])
        model_cls = transformers.Qwen3NextForCausalLM
    elif arch == "gemma3":
        cfg = transformers.Gemma3TextConfig(
            vocab_size=32000, hidden_size=5376, intermediate_size=21504, num_hidden_layers=layers,
            num_attention_heads=32, num_key_value_heads=16, head_dim=128, max_position_embeddings=4096,
            sliding_window=1024, layer_types=["sliding_attention" if (i + 1) % 6 else "full_attention"
                                              for i in range(layers)])
        model_cls = transformers.Gemma3ForCausalLM
    elif arch == "granite":
        cfg = transformers.GraniteConfig(vocab_size=32000, hidden_size=4096, intermediate_size=12800,
                                         num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
                                         max_position_embeddings=4096, rms_norm_eps=1e-5, residual_multiplier=0.22,
                                         embedding_multiplier=12.0, attention_multiplier=0.0078125,
                                         logits_scaling=16.0)
        model_cls = transformers.GraniteForCausalLM
    elif arch == "qwen3":
        cfg = transformers.Qwen3Config(vocab_size=32000, hidden_size=4096, intermediate_size=12288, head_dim=128,
                                       num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
                                       max_position_embeddings=4096, rms_norm_eps=1e-6)
        model_cls = transformers.Qwen3ForCausalLM
    else:
        cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                                       num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
                                       max_position_embeddings=4096, rms_norm_eps=1e-5)
        model_cls = transformers.LlamaForCausalLM
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = model_cls(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def apply(model, variant: str, arch: str = "llama"):
    if variant == "addrmsnorm":
        from addrmsnorm import hf
        hf.patch(model)
    elif variant == "addrmsnorm-adds-only":
        from addrmsnorm import hf
        hf.patch(model)
        for m in model.modules():  # the plain norms back to HF's class; the fused layers stay
            if getattr(type(m), "forward", None) is hf._norm_forward:
                m.__class__ = type(m)._addrmsnorm_unpatched
    elif variant == "addrmsnorm-no-rope":
        from addrmsnorm import hf
        hf.patch(model)
        for m in model.modules():  # the attention back to HF's class: its q/k norms stay plain norms, HF's rotation
            if getattr(type(m), "forward", None) is hf._attention_forward:
                m.__class__ = type(m)._addrmsnorm_unpatched
    elif variant == "addrmsnorm-pdl":
        from addrmsnorm import hf
        hf.patch(model, pdl=True)
    elif variant == "liger":
        if arch not in ("llama", "qwen3"):
            raise SystemExit(f"--arch {arch}: Liger has no patch of this family; pass --variants without liger")
        import liger_kernel.transformers as lk
        apply_to = lk.apply_liger_kernel_to_qwen3 if arch == "qwen3" else lk.apply_liger_kernel_to_llama
        apply_to(rope=False, swiglu=False, cross_entropy=False, fused_linear_cross_entropy=False, rms_norm=True,
                 model=model)
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


# Each measurement: name -> (make(model, compiled) -> a callable returning ms for one sample, and how
# the samples' median becomes the reported figure).
def _prefill(b, t):
    def make(model, compiled):
        fwd = torch.compile(model, dynamic=False) if compiled else model
        x = ids(b, t)

        def sample():
            with torch.inference_mode():
                return timed(lambda: fwd(x, use_cache=False, logits_to_keep=1), 0, 3)
        return sample
    return make, lambda ms: b * t / ms * 1e3


def _decode(b, new_tokens):
    def make(model, compiled):
        x = ids(b, 128, seed=1)

        def gen(n):
            return model.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                  cache_implementation="static", disable_compile=not compiled, pad_token_id=0)

        def sample():
            with torch.inference_mode():
                return (timed(lambda: gen(1 + new_tokens), 0, 1) - timed(lambda: gen(1), 0, 1)) / new_tokens
        return sample
    return make, lambda ms: ms


def _train(b, t):
    def make(model, compiled):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        fwd = torch.compile(model, dynamic=False) if compiled else model
        x = ids(b, t, seed=2)

        def step():
            fwd(x, labels=x).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        def sample():
            model.train()
            try:
                return timed(step, 0, 3)
            finally:
                model.eval()
        return sample
    return make, lambda ms: ms


def measurements(decode_tokens: int):
    return {
        "prefill": {"prefill 1x2048 tok/s": _prefill(1, 2048), "prefill 8x512 tok/s": _prefill(8, 512)},
        "decode": {"decode b1 ms/token": _decode(1, decode_tokens), "decode b32 ms/token": _decode(32, decode_tokens)},
        "train": {"train 4x1024 ms/step": _train(4, 1024)},
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--variants", default="unpatched,addrmsnorm,liger")
    p.add_argument("--modes", default="eager,compiled")
    p.add_argument("--what", default="prefill,decode,train")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--arch", default="llama",
                   choices=["llama", "qwen3", "qwen3_next", "deepseek_v3", "gemma3", "granite"])
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5, help="samples per variant, taken in turn")
    args = p.parse_args(argv)
    import transformers
    import addrmsnorm
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "transformers": transformers.__version__, "addrmsnorm_backend": addrmsnorm.backend(),
            "arch": args.arch, "layers": args.layers, "rounds": args.rounds, "decode_tokens": args.decode_tokens}
    variants = args.variants.split(",")
    # All models first (Liger's class swap would reach models built after it), each applied once.
    base = build(args.layers, args.arch)
    models = {v: apply(base if i == 0 else copy.deepcopy(base), v, args.arch) for i, v in enumerate(variants)}
    table = {}  # (variant, mode) -> {figure: value}
    for what in args.what.split(","):
        for mode in args.modes.split(","):
            for name, (make, figure) in measurements(args.decode_tokens)[what].items():
                t0 = time.time()
                torch._dynamo.reset()
                samplers = {v: make(models[v], mode == "compiled") for v in variants}
                for s in samplers.values():  # warm-up: compiles, caches, autotuning
                    s()
                    s()
                samples = {v: [] for v in variants}
                for _ in range(args.rounds):  # in turn, so that drift in the GPU's state hits all alike
                    for v, s in samplers.items():
                        samples[v].append(s())
                for v in variants:
                    table.setdefault((v, mode), {})[name] = figure(statistics.median(samples[v]))
                print(f"{mode} {name}: " + ", ".join(f"{v} {table[(v, mode)][name]:.4g}" for v in variants)
                      + f"  ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
                del samplers
                gc.collect()
    rows = [{"variant": v, "mode": m, **figs} for (v, m), figs in table.items()]
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print(markdown(rows))


def markdown(rows) -> str:
    names = [k for k in rows[0] if k not in ("variant", "mode")]
    out = ["| variant | mode | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for r in sorted(rows, key=lambda r: (r["mode"], r["variant"])):
        out.append(f"| {r['variant']} | {r['mode']} | " + " | ".join(
            f"{r[n]:,.0f}" if "tok/s" in n else f"{r[n]:.2f}" for n in names) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
