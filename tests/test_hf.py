"""addrmsnorm.hf.patch on small transformers models built from configs (random weights, no download).

On the CPU (the interpreter) the models are fp32; on the GPU bf16. Each test compares a patched
model with the same model unpatched (``unpatch`` restores it exactly), within the model-level
tolerances of ``addrmsnorm.tolerances`` (HF_MODEL_TOLERANCES), whose reasons say why they are what
they are.
"""

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

from addrmsnorm import hf  # noqa: E402
from addrmsnorm.tolerances import HF_MODEL_TOLERANCES  # noqa: E402

from conftest import DEVICE, ON_GPU, gpu_only, needs_kernels  # noqa: E402

from packaging.version import Version  # noqa: E402

pytestmark = [needs_kernels, pytest.mark.skipif(
    Version(transformers.__version__).release[:2] < hf.MIN_TRANSFORMERS, reason=f"transformers {transformers.__version__} is older than the patch's "
                                         f"{'.'.join(map(str, hf.MIN_TRANSFORMERS))} (hf.patch refuses it: "
                                         f"tests/test_hf_version.py)")]

DTYPE = torch.bfloat16 if ON_GPU else torch.float32
TOL = HF_MODEL_TOLERANCES["bf16" if ON_GPU else "fp32"]

_COMMON = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
FAMILIES = {  # name: (config class, model class, extra config, the stack class patched)
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}, "LlamaModel"),
    "mistral": ("MistralConfig", "MistralForCausalLM", {}, "MistralModel"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}, "Qwen2Model"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 32}, "Qwen3Model"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"head_dim": 32}, "GemmaModel"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"head_dim": 32, "sliding_window": 8}, "Gemma2Model"),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"head_dim": 32, "sliding_window": 8}, "Gemma3TextModel"),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {}, "Olmo2Model"),
    "granite": ("GraniteConfig", "GraniteForCausalLM", {"residual_multiplier": 0.22, "embedding_multiplier": 12.0,
                                                        "attention_multiplier": 0.0078125, "logits_scaling": 8.0},
                "GraniteModel"),
    # Llama 4: the weightless L2 norm of q and k after RoPE; a MoE feed-forward in every second layer.
    "llama4": ("Llama4TextConfig", "Llama4ForCausalLM", {"head_dim": 32, "intermediate_size_mlp": 256,
                                                          "num_local_experts": 2, "interleave_moe_layer_step": 2,
                                                          "use_qk_norm": True}, "Llama4TextModel"),
    # Qwen3-Next: gated delta net layers (their gated norm on each value head of 32) around one attention layer,
    # Gemma's 1 + w norms, a MoE feed-forward.
    "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM",
                   {"head_dim": 32, "layer_types": ["linear_attention", "full_attention", "linear_attention"],
                    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 32,
                    "linear_value_head_dim": 32, "num_experts": 4, "num_experts_per_tok": 2,
                    "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64}, "Qwen3NextModel"),
    # DeepSeek-V3: MLA's two latent norms (q's 64 and kv's 32 columns, the latter a slice beside k_pe), a dense
    # first layer, then MoE.
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                    {"q_lora_rank": 64, "kv_lora_rank": 32, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16,
                     "v_head_dim": 16, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                     "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1, "num_key_value_heads": 4},
                    "DeepseekV3Model"),
}
# One of each layer form (norm, add; and Gemma 2/3's normed branches), for the slower tests.
FORMS = ["llama", "gemma3"]


def build(family, seed=0, dtype=DTYPE, **overrides):
    cfg_cls, model_cls, extra, _ = FAMILIES[family]
    cfg = getattr(transformers, cfg_cls)(**{**_COMMON, **extra, **overrides})
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(cfg)
    with torch.no_grad():  # norms that matter: HF initializes them to the identity
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
    return model.to(device=DEVICE, dtype=dtype).eval()


def prompt(batch=2, length=12, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, _COMMON["vocab_size"], (batch, length), generator=g).to(DEVICE)


def max_rel(a, b):
    """max |a - b| / max |b|: differences relative to the tensor's scale."""
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()


def greedy(model, ids, n):
    """n greedy tokens (KV cache on) and the logits each was chosen from."""
    out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, output_logits=True,
                         return_dict_in_generate=True)
    return out.sequences, out.logits


def assert_same_greedy(got, want, tol, what="greedy generation"):
    """The same greedy tokens, or tokens that part only where the two models' logits at that step were within tol
    of each other (a near-tie of the unpatched model's two best tokens, decided by a last-bit rounding: after that
    step the two sequences condition on different tokens and are not compared)."""
    (seq, logits), (ref_seq, ref_logits) = got, want
    assert seq.shape == ref_seq.shape, what
    start = seq.shape[1] - len(ref_logits)
    for step, (a, b) in enumerate(zip(logits, ref_logits)):
        if not torch.equal(seq[:, start + step], ref_seq[:, start + step]):
            assert max_rel(a, b) <= tol, f"{what} parts at step {step}, where the logits differ by {max_rel(a, b)}"
            return
    assert torch.equal(seq, ref_seq), what


def test_supported_architectures():
    assert hf.supported_architectures() == tuple(f[3] for f in FAMILIES.values())


@pytest.mark.parametrize("family", list(FAMILIES))
def test_patched_model_matches_unpatched(family):
    """numerics="hf": logits and every hidden state within TOL of the unpatched model, the same
    greedy generation (KV cache on), and the model's own parameters, untouched."""
    model = build(family)
    ids = prompt()
    params = {n: p for n, p in model.named_parameters()}
    state = {n: t.data_ptr() for n, t in model.state_dict().items()}
    with torch.no_grad():
        ref = model(ids, output_hidden_states=True)
        ref_gen = greedy(model, ids[:1], 32)

    assert hf.patch(model) is model and hf.is_patched(model)
    stack = model.model
    patched = stack.layers[0] if family != "olmo2" else stack.layers[0].post_attention_layernorm  # OLMo 2: norms
    assert type(patched).__name__ == "AddRMSNorm" + type(patched).__mro__[1].__name__
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        gen = greedy(model, ids[:1], 32)
    assert max_rel(out.logits, ref.logits) <= TOL.logits, TOL.reason
    assert len(out.hidden_states) == len(ref.hidden_states) == _COMMON["num_hidden_layers"] + 1
    for i, (a, b) in enumerate(zip(out.hidden_states, ref.hidden_states)):
        assert a.shape == b.shape and max_rel(a, b) <= TOL.logits, f"hidden state {i}"
    assert_same_greedy(gen, ref_gen, TOL.logits)

    # Same parameter objects and storage; same state dict.
    assert {n: p for n, p in model.named_parameters()} == params
    assert {n: t.data_ptr() for n, t in model.state_dict().items()} == state

    hf.unpatch(model)
    assert not hf.is_patched(model)
    with torch.no_grad():
        again = model(ids)
    assert torch.equal(again.logits, ref.logits), "unpatch did not restore the model"


@pytest.mark.parametrize("family", FORMS)
def test_contract_numerics(family):
    """numerics="contract" runs the fp32 add; in fp32 models it agrees with "hf" within TOL (the
    roundings they differ in are exact there)."""
    model = build(family)
    ids = prompt()
    with torch.no_grad():
        ref = model(ids).logits
        out = hf.patch(model, numerics="contract")(ids).logits
    if not ON_GPU:
        assert max_rel(out, ref) <= TOL.logits
    else:  # bf16: a different rounding, within what bf16 models differ by
        assert max_rel(out, ref) <= TOL.rounding_logits


@gpu_only
@pytest.mark.parametrize("family", FORMS)
def test_contract_is_closer_to_fp64(family):
    """bf16 with numerics="contract" is closer to the fp64 run of the same model than the unpatched
    bf16 model is (mean squared logit error over 4 x 128 tokens)."""
    model64 = build(family, dtype=torch.float64, num_hidden_layers=6)
    ids = prompt(batch=4, length=128, seed=3)
    with torch.no_grad():
        want = model64(ids).logits
        model = copy.deepcopy(model64).to(torch.bfloat16)
        err_hf = (model(ids).logits.double() - want).pow(2).mean().item()
        hf.patch(model, numerics="contract")
        err_contract = (model(ids).logits.double() - want).pow(2).mean().item()
    assert err_contract < err_hf, (err_contract, err_hf)


def _train(model, steps, ids, compile_model=False):
    """AdamW steps on a fixed batch; returns the losses and the last step's gradients."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    fwd = torch.compile(model, fullgraph=True, backend="inductor" if ON_GPU else "aot_eager") \
        if compile_model else model
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = fwd(ids, labels=ids).loss
        loss.backward()
        losses.append(loss.item())
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        opt.step()
    return losses, grads


@pytest.mark.parametrize("compile_model", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("family", FORMS + ["qwen3_next"]  # its gated norms' backward
                         + (["mistral", "qwen2", "qwen3", "gemma", "gemma2"] if ON_GPU else []))
def test_training_matches_unpatched(family, compile_model):
    """3 AdamW steps: every loss and every parameter's gradient at the last step within TOL of the
    unpatched model. Compiled with fullgraph=True, which fails on any graph break."""
    if compile_model and family not in FORMS:
        pytest.skip("compiled: one model of each layer form")
    base = build(family)
    ids = prompt(seed=5)
    try:
        ref_losses, ref_grads = _train(copy.deepcopy(base), 3, ids, compile_model)
    except Exception as e:  # noqa: BLE001 -- the unpatched model, HF's code and the kernels it calls: not ours
        # Qwen3-Next's linear attention calls fla-core's gated delta rule where fla is installed, and fla
        # refuses Triton < 3.7.1 on Hopper: there is then no unpatched model to compare with.
        pytest.skip(f"the unpatched {family} model does not train here: {type(e).__name__}: {str(e)[:300]}")
    losses, grads = _train(hf.patch(copy.deepcopy(base)), 3, ids, compile_model)
    for a, b in zip(losses, ref_losses):
        assert abs(a - b) <= TOL.loss * abs(b), (losses, ref_losses)
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        assert max_rel(grads[name], ref_grads[name]) <= TOL.grad, name


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_gradient_checkpointing(use_reentrant):
    """Checkpointed layers recompute the same kernels: the same loss and gradients, bit for bit,
    as the patched model without checkpointing (reentrant checkpointing sees both tensors of the
    pair passed between layers, so no gradient is lost)."""
    base = build("llama")
    ids = prompt(seed=7)
    want_losses, want = _train(hf.patch(copy.deepcopy(base)), 1, ids)
    model = hf.patch(copy.deepcopy(base))
    # transformers' name of many releases (newer ones also name it activation_checkpointing_enable)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
    losses, grads = _train(model, 1, ids)
    assert losses == want_losses
    assert grads.keys() == want.keys()
    for name in grads:
        assert torch.equal(grads[name], want[name]), name


def test_compiled_inference_matches_eager():
    """The patched model under torch.compile(fullgraph=True) gives the eager patched logits, within
    what inductor's own roundings of the other ops move them by (TOL.rounding_logits)."""
    model = hf.patch(build("gemma3"))
    ids = prompt()
    with torch.no_grad():
        want = model(ids).logits
        got = torch.compile(model, fullgraph=True, backend="inductor" if ON_GPU else "aot_eager")(ids).logits
    assert max_rel(got, want) <= TOL.rounding_logits


def test_save_pretrained_round_trip(tmp_path):
    """A patched model saves the unpatched model's checkpoint: it loads into a plain model."""
    model = hf.patch(build("qwen3"))
    model.save_pretrained(tmp_path)
    loaded = transformers.Qwen3ForCausalLM.from_pretrained(tmp_path, dtype=DTYPE).to(DEVICE).eval()
    assert not hf.is_patched(loaded)
    want = model.state_dict()
    got = loaded.state_dict()
    assert want.keys() == got.keys()
    for k in want:
        assert torch.equal(want[k], got[k]), k


def test_pdl_and_repatch():
    """Patching again re-links with the new arguments; the outputs do not depend on pdl."""
    model = build("mistral")
    ids = prompt()
    with torch.no_grad():
        a = hf.patch(model)(ids).logits
        b = hf.patch(model, pdl=True)(ids).logits
    assert torch.equal(a, b)
    assert all(getattr(layer, "_addrmsnorm_link").pdl for layer in model.model.layers)


def test_unsupported_model_is_named():
    with pytest.raises(TypeError, match="Linear is not supported"):
        hf.patch(torch.nn.Linear(4, 4))
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    with pytest.raises(TypeError, match="GPT2LMHeadModel is not supported.*LlamaModel"):
        hf.patch(gpt2)


def test_replaced_norm_is_refused_and_nothing_changes():
    """A norm another patch replaced (Liger swaps RMSNorm modules) is refused by name, and the
    model is left as it was."""
    model = build("llama")
    model.model.layers[2].post_attention_layernorm = torch.nn.RMSNorm(_COMMON["hidden_size"], device=DEVICE)
    with pytest.raises(TypeError, match=r"LlamaModel.layers\[2\].post_attention_layernorm is a RMSNorm"):
        hf.patch(model)
    assert not hf.is_patched(model)


def test_bad_arguments():
    model = build("llama")
    with pytest.raises(ValueError, match="numerics must be one of 'contract', 'hf', got 'fast'"):
        hf.patch(model, numerics="fast")
    with pytest.raises(TypeError, match="pdl must be a bool, got int"):
        hf.patch(model, pdl=1)
    assert not hf.is_patched(model)


def test_patched_layer_alone_normalizes_its_input():
    """A patched layer given a plain tensor (as the first layer is) runs its own input norm: layer 1
    called alone on a hidden state returns the unpatched layer's output as the first of its pair,
    and the next layer's input norm of it as the second."""
    model = build("llama")
    ids = prompt()
    stack = model.model
    with torch.no_grad():
        h1 = model(ids, output_hidden_states=True).hidden_states[1]
        pos = torch.arange(ids.shape[1], device=DEVICE)[None]
        kwargs = dict(attention_mask=None, position_ids=pos, position_embeddings=stack.rotary_emb(h1, pos))
        want = stack.layers[1](h1, **kwargs)
        want_next = stack.layers[2].input_layernorm(want)
        hf.patch(model)
        h2, y = stack.layers[1](h1, **kwargs)
    assert max_rel(h2, want) <= TOL.logits
    assert max_rel(y, want_next) <= TOL.logits


def test_gemma3_multimodal_model_patches_its_text_stack():
    """A model that contains a supported stack is supported: Gemma3ForConditionalGeneration's
    Gemma3TextModel is patched, its vision tower is left alone."""
    text = dict(_COMMON, head_dim=32, sliding_window=8, num_hidden_layers=2)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    cfg = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                    image_token_index=255, boi_token_index=253, eoi_token_index=254)
    torch.manual_seed(0)
    model = transformers.Gemma3ForConditionalGeneration(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and "language_model" in name:
                p.add_(0.2 * torch.randn_like(p))
    model = model.to(device=DEVICE, dtype=DTYPE).eval()
    ids = prompt() % 250
    with torch.no_grad():
        ref = model(input_ids=ids).logits
        out = hf.patch(model)(input_ids=ids).logits
    patched = [name for name, m in model.named_modules() if type(m).__name__.startswith("AddRMSNorm")]
    assert patched and all("language_model" in name for name in patched)
    assert max_rel(out, ref) <= TOL.logits


def test_reachable_from_the_package():
    import addrmsnorm
    assert addrmsnorm.hf.patch is hf.patch


@gpu_only
@pytest.mark.large
def test_batch_one_is_bit_identical_at_a_real_hidden_size(capsys):
    """A Llama-3-8B-shaped model (hidden 4096, 14336 intermediate, 32 heads, 8 KV heads; 4 layers, random
    weights, bf16): patched with numerics="hf", batch 1 gives the unpatched logits bit for bit. At batch 2
    they differ, and so does the unpatched model from itself at batch 1: HF's own norm reduces in an
    order that depends on the batch. Both figures are printed (the README quotes them)."""
    cfg = transformers.LlamaConfig(vocab_size=1024, hidden_size=4096, intermediate_size=14336, num_hidden_layers=4,
                                   num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=512)
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, cfg.vocab_size, (2, 64), generator=g).to(DEVICE)
    with torch.no_grad():
        ref1 = model(ids[:1]).logits
        ref2 = model(ids).logits
        hf.patch(model)
        out1 = model(ids[:1]).logits
        out2 = model(ids).logits
    assert torch.equal(out1, ref1), f"batch 1: max relative difference {max_rel(out1, ref1):.2e}"
    with capsys.disabled():
        print(f"\nhidden 4096, bf16: patched against unpatched at batch 2, max relative difference "
              f"{max_rel(out2, ref2):.2e}; unpatched batch 2 against batch 1 (row 0) {max_rel(ref2[:1], ref1):.2e}; "
              f"patched batch 2 against batch 1 (row 0) {max_rel(out2[:1], out1):.2e}")
    # Beyond batch 1, within what HF's batch variance itself moves bf16 logits by (a rounding elsewhere).
    assert max_rel(out2, ref2) <= TOL.rounding_logits, TOL.reason


@pytest.mark.parametrize("family", list(FAMILIES))
def test_no_rmsnorm_module_runs_its_own_forward(family, monkeypatch):
    """Count: in a patched model's prefill and decode, the family's norm classes (its RMSNorm, and Llama
    4's weightless L2 norm) run their forward 0 times (every norm goes through addrmsnorm), where the
    unpatched model runs them at every norm."""
    model = build(family)
    classes = {type(m) for m in model.modules() if type(m).__name__.endswith(("RMSNorm", "L2Norm", "RMSNormGated"))}
    calls = []
    for cls in classes:
        monkeypatch.setattr(cls, "forward", lambda self, *a, _f=cls.forward, **k: (calls.append(1), _f(self, *a, **k))[1])
    n_norms = sum(1 for m in model.modules() if isinstance(m, tuple(classes)))
    ids = prompt(batch=1, length=6)
    with torch.no_grad():
        model(ids)
    assert len(calls) >= n_norms > 0, (len(calls), n_norms)  # the count sees the unpatched norms
    calls.clear()
    hf.patch(model)
    with torch.no_grad():
        model(ids)
        model.generate(ids, max_new_tokens=3, do_sample=False, min_new_tokens=3)
    assert calls == [], f"{len(calls)} calls of {sorted(c.__name__ for c in classes)} forwards after the patch"
    assert all(type(m).__name__.startswith("AddRMSNorm") for m in model.modules() if isinstance(m, tuple(classes)))


@pytest.mark.parametrize("family", ["qwen3", "gemma3"])
def test_qk_norms_and_rope_run_as_one_call(family, monkeypatch):
    """Qwen3's and Gemma 3's attention (bf16): after the patch HF's apply_rotary_pos_emb never runs and each
    attention makes one qk_rmsnorm_rope call, in prefill and decode; logits within TOL.head_logits of the unpatched
    model's and the same greedy tokens but at a near-tie (the interpreter truncates its bf16 stores: there, logits
    within its rounding and no token check). A batch of two:
    HF's rotary embedding gives cos and sin of one batch row, (1, seq, head_dim), which the call broadcasts."""
    import sys

    from addrmsnorm import functional
    model = build(family, dtype=torch.bfloat16)
    ids = prompt(batch=2, length=6)
    with torch.no_grad():
        ref = model(ids).logits
        ref_gen = greedy(model, ids, 4)
    module = sys.modules[type(model.model.layers[0].self_attn).__module__]
    hf_rope, ours = [], []
    monkeypatch.setattr(module, "apply_rotary_pos_emb",
                        lambda *a, _f=module.apply_rotary_pos_emb, **k: (hf_rope.append(1), _f(*a, **k))[1])
    monkeypatch.setattr(functional, "qk_rmsnorm_rope",
                        lambda *a, _f=functional.qk_rmsnorm_rope, **k: (ours.append(1), _f(*a, **k))[1])
    with torch.no_grad():
        model(ids)
    assert hf_rope and not ours  # the count sees HF's rotation unpatched
    hf_rope.clear()
    hf.patch(model)
    with torch.no_grad():
        out = model(ids).logits
        gen = greedy(model, ids, 4)
    layers = _COMMON["num_hidden_layers"]
    assert hf_rope == [] and len(ours) == layers * 5, (len(hf_rope), len(ours))  # a prefill, then 4 decode steps
    tol = TOL.head_logits if ON_GPU else HF_MODEL_TOLERANCES["bf16"].rounding_logits
    assert max_rel(out, ref) <= tol
    if ON_GPU:
        assert_same_greedy(gen, ref_gen, tol)
