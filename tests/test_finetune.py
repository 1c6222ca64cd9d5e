"""Fine-tuning against peft and PyTorch: trainable parameters, a training step's FLOPs, saved activations.

Tiny transformers models (float32, eager attention, CPU) get peft's LoRA or DoRA
adapters; the expected values are peft's own parameter counts, FlopCounterMode's
count of one forward and backward, and the storages autograd keeps for backward
(saved_tensors_hooks, parameters left out). The inputs need gradients from the
embeddings on (``enable_input_require_grads``, as gradient checkpointing and
peft's ``prepare_model_for_kbit_training`` set), the case symform counts
(symform.analysis.memory.finetune).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


from oracle import TINY, build_for_training, input_ids, saved_for_backward  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from symform import Model  # noqa: E402
from symform.analysis.memory.finetune import FineTune, finetune_counts, finetune_saved_activations  # noqa: E402
from symform.engine.errors import EvaluationError  # noqa: E402

# peft 0.21 asks transformers 5 for a property it has renamed
pytestmark = [pytest.mark.oracle, pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")]

MOE = {"model_type": "qwen3_moe", "num_experts": 4, "head_dim": 16, "moe_intermediate_size": 32, "num_experts_per_tok": 2}
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64, "bos_token_id": 0, "eos_token_id": 0, "attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0}
QWEN2_MOE = {"model_type": "qwen2_moe", "num_experts": 4, "shared_expert_intermediate_size": 48, "moe_intermediate_size": 32, "num_experts_per_tok": 2}
DEEPSEEK_V2 = {
    "model_type": "deepseek_v2", "moe_intermediate_size": 8, "num_key_value_heads": 4, "kv_lora_rank": 12, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
    "v_head_dim": 6, "q_lora_rank": None, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 2, "first_k_dense_replace": 1, "topk_method": "greedy",
}  # fmt: skip
EAGER_EXPERTS = ("qwen3_moe", "qwen2_moe", "deepseek_v2")
PEFT_NAMES = {"kv_a_proj": "kv_a_proj_with_mqa"}  # transformers' module names where symform's part names differ
ALL_LLAMA = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# (id, config, targets, method)
CASES = [
    ("llama q,v", {"model_type": "llama", "head_dim": 24}, ("q_proj", "v_proj"), "lora"),
    ("llama v only", {"model_type": "llama"}, ("v_proj",), "lora"),
    ("llama all linear", {"model_type": "llama", "tie_word_embeddings": True}, ALL_LLAMA, "lora"),
    ("llama up,down", {"model_type": "llama"}, ("up_proj", "down_proj"), "lora"),
    ("qwen2 biases k,o", {"model_type": "qwen2"}, ("k_proj", "o_proj"), "lora"),
    ("qwen3 q,v", {"model_type": "qwen3", "head_dim": 24}, ("q_proj", "v_proj"), "lora"),
    ("qwen3 dora all", {"model_type": "qwen3", "head_dim": 16}, ALL_LLAMA, "dora"),
    ("llama dora q,v", {"model_type": "llama"}, ("q_proj", "v_proj"), "dora"),
    ("qwen3_moe attention", MOE, ("q_proj", "k_proj", "v_proj", "o_proj"), "lora"),
    ("qwen2_moe shared expert gate", QWEN2_MOE, ("v_proj", "shared_expert_gate"), "lora"),
    ("deepseek_v2 MLA, direct q", DEEPSEEK_V2, ("q_proj", "kv_a_proj", "o_proj"), "lora"),
    ("gpt2 Conv1D", GPT2, ("c_attn", "c_proj", "c_fc"), "lora"),
    ("gpt2 Conv1D dora", GPT2, ("c_attn",), "dora"),
    # peft's target_modules="all-linear": every Linear (and GPT-2's Conv1D) but the output head
    ("llama all-linear keyword, untied head", {"model_type": "llama", "tie_word_embeddings": False}, ("all-linear",), "lora"),
    ("qwen3 all-linear keyword, dora", {"model_type": "qwen3", "head_dim": 16}, ("all-linear",), "dora"),
    ("gpt2 all-linear keyword", GPT2, ("all-linear",), "lora"),
]
RANK = 4


def peft_model(config: dict, targets: tuple[str, ...], method: str, *, rank: int = RANK):
    options = {"experts_implementation": "eager"} if config["model_type"] in EAGER_EXPERTS else {}
    targets = tuple(PEFT_NAMES.get(t, t) for t in targets)
    base = build_for_training(config, torch.float32, **options)
    base.enable_input_require_grads()
    modules = "all-linear" if targets == ("all-linear",) else list(targets)  # peft reads the keyword only as the whole string
    lora = peft.LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=modules, use_dora=method == "dora", fan_in_fan_out=config["model_type"] == "gpt2")
    return peft.get_peft_model(base, lora).train()


def symform_model(config: dict) -> Model:
    return Model.from_config({**TINY, **config}, accounting="eager", conventions={"act_bytes": 4, "cpu_kernels": 1})


def step_flops(model, ids) -> int:
    model.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize(("case", "config", "targets", "method"), CASES, ids=[c[0] for c in CASES])
def test_trainable_parameters_equal_peft(case, config, targets, method):
    model = peft_model({**TINY, **config}, targets, method)
    counts = finetune_counts(symform_model(config), FineTune(rank=RANK, targets=targets, method=method))
    assert counts.trainable_params == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert counts.params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("case", "config", "targets", "method"), CASES, ids=[c[0] for c in CASES])
def test_training_step_flops_equal_pytorch(case, config, targets, method):
    config = {**TINY, **config}
    ids = input_ids(config, 2, 7)
    expected = step_flops(peft_model(config, targets, method), ids)
    assert finetune_counts(symform_model(config), FineTune(rank=RANK, targets=targets, method=method), batch=2, seq=7).step_flops == expected


# peft's DoRA on a transposed (Conv1D) weight wraps the transpose in a new Parameter, which needs a gradient,
# so autograd also keeps W + s·B·A (d_out × d_in) for every such projection: peft's doing, left out here
SAVED_CASES = [c for c in CASES if c[0] != "gpt2 Conv1D dora"]


# several sequences everywhere; one sequence (where transformers' views differ) on a few
SHAPED = [(*c, 2, 8) for c in SAVED_CASES] + [(*c, 1, 11) for c in SAVED_CASES if c[0] in ("llama v only", "qwen3 dora all", "gpt2 Conv1D")]


@pytest.mark.parametrize(("case", "config", "targets", "method", "batch", "seq"), SHAPED, ids=[f"{c[0]}, {c[4]}x{c[5]}" for c in SHAPED])
def test_saved_activations_equal_what_pytorch_keeps(case, config, targets, method, batch, seq):
    config = {**TINY, **config}
    kept = saved_for_backward(peft_model(config, targets, method), input_ids(config, batch, seq))
    model = symform_model(config)
    total, _, _ = finetune_saved_activations(model, FineTune(rank=RANK, targets=targets, method=method))
    values = {**model.values, "lora_rank": RANK, "batch": batch, "seq": seq}
    assert total.xreplace({s: values[s.name] for s in total.free_symbols}) == kept


@pytest.mark.parametrize("frozen", [("embeddings", "layers:0-0"), ("embeddings", "layers:0-1"), ("layers:1-1",), ("embeddings",)])
def test_frozen_layers_step_flops_equal_pytorch(frozen):
    """No adapters: the named parts frozen (requires_grad off), the rest trained; nothing before the first
    trained weight records a backward."""
    config = {**TINY, "model_type": "llama", "num_hidden_layers": 3, "tie_word_embeddings": False}
    model = build_for_training(config, torch.float32)
    for name, parameter in model.named_parameters():
        layer = name.split(".")[2] if ".layers." in name else None
        parameter.requires_grad_(not (("embed_tokens" in name and "embeddings" in frozen) or (layer is not None and f"layers:{layer}-{layer}" in frozen) or (layer in ("0", "1") and "layers:0-1" in frozen)))
    ids = input_ids(config, 2, 5)
    counts = finetune_counts(symform_model(config), FineTune(freeze=frozen), batch=2, seq=5)
    assert counts.step_flops == step_flops(model, ids)
    assert counts.trainable_params == sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_unknown_targets_and_ranges_are_refused():
    model = symform_model({"model_type": "llama"})
    with pytest.raises(EvaluationError, match="no projection named 'qkv'"):
        finetune_counts(model, FineTune(rank=4, targets=("qkv",)))
    with pytest.raises(EvaluationError, match="has 2 layers"):
        finetune_counts(model, FineTune(freeze=("layers:2-3",)))
    with pytest.raises(EvaluationError, match="cannot freeze"):
        FineTune(freeze=("attention",))


@pytest.mark.filterwarnings("ignore:The following:RuntimeWarning")  # peft's own notes on its expert rank and alpha patterns
def test_all_linear_on_routed_experts_is_refused_by_name():
    """peft 0.21 extends all-linear to transformers' fused 3-D expert weights and the router (a qwen3_moe gets
    adapters on mlp.experts and mlp.gate), which symform's per-projection adapters do not model."""
    base = peft.get_peft_model(build_for_training({**TINY, **MOE}, torch.float32), peft.LoraConfig(r=RANK, target_modules="all-linear"))
    adapted = {name.split(".lora_")[0].rsplit(".", 1)[-1] for name, _ in base.named_parameters() if ".lora_" in name}
    assert {"experts", "gate"} <= adapted
    with pytest.raises(EvaluationError, match="routed experts"):
        finetune_counts(symform_model(MOE), FineTune(rank=RANK, targets=("all-linear",)))


@pytest.mark.parametrize("case", ["nemotron_h", "nemotron_h-no-conv-bias", "qwen3_5", "qwen3_next-dense"])
@pytest.mark.parametrize("batch, seq", [(2, 70), (1, 5)])
def test_lora_on_a_hybrid_skips_the_frozen_convolution_s_weight_gradient(case, batch, seq):
    """Adapters on the attention projections freeze the recurrent layers' depthwise convolution: PyTorch computes
    its input's gradient only. The counter misses the scans' triangular solves (forward, and one transposed solve
    each in backward), as tests/test_family_recurrent.py names them."""
    from test_family_recurrent import CONFIGS, uncounted_solves

    config = CONFIGS[case]
    base = build_for_training(config, torch.float32, experts_implementation="eager")
    base.enable_input_require_grads()
    model = peft.get_peft_model(base, peft.LoraConfig(r=RANK, target_modules=["q_proj", "o_proj"])).train()
    expected = step_flops(model, input_ids(config.get("text_config", config), batch, seq)) + 2 * uncounted_solves(config, batch, seq)
    counts = finetune_counts(Model.from_config(config, accounting="eager"), FineTune(rank=RANK, targets=("q_proj", "o_proj")), batch=batch, seq=seq)
    assert counts.step_flops == expected


GEMMA4 = {
    "model_type": "gemma4_text", "num_hidden_layers": 3, "head_dim": 8, "global_head_dim": 16, "sliding_window": 4,
    "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": 101,
}  # fmt: skip
# peft's target_modules as transformers names the modules, where symform's part names differ
TRANSFORMERS_NAMES = [
    ("gemma4_text per-layer embeddings", GEMMA4, ("per_layer_input_gate", "per_layer_projection", "per_layer_model_projection")),
    ("deepseek_v2 latent key/value projection", DEEPSEEK_V2, ("kv_a_proj_with_mqa", "o_proj")),
]


@pytest.mark.parametrize(("case", "config", "targets"), TRANSFORMERS_NAMES, ids=[c[0] for c in TRANSFORMERS_NAMES])
def test_targets_named_as_transformers_names_the_modules(case, config, targets):
    config = {**TINY, **config}
    base = build_for_training(config, torch.float32, experts_implementation="eager")
    base.enable_input_require_grads()
    model = peft.get_peft_model(base, peft.LoraConfig(r=RANK, lora_alpha=2 * RANK, lora_dropout=0.0, target_modules=list(targets))).train()
    counts = finetune_counts(symform_model(config), FineTune(rank=RANK, targets=targets), batch=2, seq=7)
    assert counts.trainable_params == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert counts.step_flops == step_flops(model, input_ids(config, 2, 7))


# targets named after expert projections: peft adapts Linear modules by name, and transformers holds the routed
# experts as fused 3-D weights, so only the shared experts' (and dense layers') projections get adapters
EXPERT_NAMES = [
    ("qwen2_moe up,down: the shared expert's only", {**TINY, **QWEN2_MOE}, ("up_proj", "down_proj")),
    ("nemotron_h MoE up,down: shared experts and MLP layers only", "nemotron_h-moe", ("up_proj", "down_proj")),
]


@pytest.mark.parametrize(("case", "config", "targets"), EXPERT_NAMES, ids=[c[0] for c in EXPERT_NAMES])
def test_expert_projection_names_adapt_no_routed_expert(case, config, targets):
    if isinstance(config, str):
        from test_family_recurrent import CONFIGS

        config = CONFIGS[config]
    base = build_for_training(config, torch.float32, experts_implementation="eager")
    base.enable_input_require_grads()
    model = peft.get_peft_model(base, peft.LoraConfig(r=RANK, lora_alpha=2 * RANK, lora_dropout=0.0, target_modules=list(targets))).train()
    counts = finetune_counts(Model.from_config(config, accounting="eager"), FineTune(rank=RANK, targets=targets), batch=2, seq=7)
    assert counts.trainable_params == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert counts.step_flops == step_flops(model, input_ids(config, 2, 7))


@pytest.mark.filterwarnings("ignore:The following:RuntimeWarning")  # peft's own notes on its expert rank and alpha patterns
def test_expert_projection_names_are_refused_where_peft_adapts_the_fused_experts():
    """For qwen3_moe (among the model types transformers' conversion table fuses) peft turns gate_proj, up_proj and
    down_proj into adapters on the fused 3-D expert weights."""
    base = build_for_training({**TINY, **MOE}, torch.float32, experts_implementation="eager")
    model = peft.get_peft_model(base, peft.LoraConfig(r=RANK, target_modules=["gate_proj", "up_proj", "down_proj"]))
    assert any("mlp.experts.lora_" in name for name, _ in model.named_parameters())
    with pytest.raises(EvaluationError, match="fused routed-expert weights"):
        finetune_counts(symform_model(MOE), FineTune(rank=RANK, targets=("gate_proj", "up_proj", "down_proj")))
