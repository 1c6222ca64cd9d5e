"""Configs as transformers writes them, and every field its modeling code reads: read by symform or refused.

transformers' save_pretrained writes some fields under other names than Hub files use
(its attribute_map: qwen3_moe's num_experts is saved as num_local_experts) and leaves
out fields equal to the config class's defaults. A config round-tripped through
transformers must cost the same as the one written by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from oracle import TINY, hf_config, meta_params  # noqa: E402
from test_activations import FAMILIES  # noqa: E402

from symform import Model  # noqa: E402
from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.language.families import all_families, families  # noqa: E402


# transformers saves Gemma 4's global_head_dim (and num_global_key_value_heads) only inside per_layer_config
@pytest.mark.parametrize("family", FAMILIES)
def test_a_config_saved_by_transformers_reads_as_the_one_written_by_hand(family, tmp_path):
    config = {**TINY, **FAMILIES[family]}
    hf_config(config).save_pretrained(tmp_path)
    saved = Model.load(tmp_path / "config.json")
    by_hand = Model.from_config(config)
    assert saved.evaluate("params") == meta_params(config) == by_hand.evaluate("params")
    workload = {"batch": 2, "seq": 9, "past": 7}
    for quantity in ("forward_flops", "saved_activations", "kv_cache"):
        assert saved.evaluate(quantity, **workload) == by_hand.evaluate(quantity, **workload), quantity


# Fields transformers' modeling code reads that change no count symform makes, and why.
COST_FREE = {
    "_attn_implementation": "the attention kernel is the caller's choice (eager here), not a config field",
    "attention_dropout": "dropout is the `dropout` convention",
    "attn_pdrop": "dropout is the `dropout` convention (GPT-2 reads it)",
    "embd_pdrop": "dropout is the `dropout` convention (GPT-2 reads it)",
    "resid_pdrop": "dropout is the `dropout` convention (GPT-2 reads it)",
    "hidden_dropout": "a classification head's dropout",
    "classifier_dropout": "a classification head's dropout",
    "rms_norm_eps": "a value, not a size",
    "layer_norm_epsilon": "a value, not a size",
    "norm_epsilon": "a value, not a size (StarCoder 2's LayerNorms)",
    "dtype": "the weights' dtype is a convention (weight_bytes), not a size (Apertus's xIELU makes its scalars in it)",
    "initializer_range": "initialisation only",
    "pad_token_id": "a token id",
    "image_token_id": "a token id of the multimodal wrapper",
    "use_cache": "whether inference keeps a cache; kv_cache is asked for explicitly",
    "rope_parameters": "rotary base frequency and scaling: values, not sizes (Phi-3's partial_rotary_factor inside it is read)",
    "rope_interleave": "the order of rotary pairs",
    "max_position_embeddings": "rotary tables cover the positions in use; no parameter depends on it (GPT-2's wpe reads it as n_positions)",
    "original_max_position_embeddings": "which long-context rotary scaling applies: values, not sizes",
    "hidden_act": "a one-op activation keeps one tensor whatever it computes",
    "hidden_activation": "a one-op activation keeps one tensor whatever it computes",
    "query_pre_attn_scalar": "the value the scores are scaled by",
    "routed_scaling_factor": "the value routing weights are scaled by",
    "scale_attn_weights": "whether the value the scores are scaled by is 1/√d_h or 1",
    "scale_attn_by_inverse_layer_idx": "the value the scores are scaled by",
    "router_aux_loss_coef": "the auxiliary loss's weight; the loss itself is refused (output_router_logits)",
    "num_labels": "other heads (sequence classification)",
    "problem_type": "other heads (sequence classification)",
    "get_text_config": "the multimodal wrapper, not the text model",
    "text_config": "the multimodal wrapper, not the text model",
    "vision_config": "the multimodal wrapper, not the text model",
    "mm_tokens_per_image": "the multimodal wrapper, not the text model",
}
COST_FREE_IN = {
    "gpt2": {name: "GPT-2's double-heads summary, not the language model" for name in ("summary_activation", "summary_first_dropout", "summary_last_dropout", "summary_proj_to_labels", "summary_type", "summary_use_proj")},
    "gemma": {"use_bidirectional_attention": "Gemma has no window: the mask changes, eager attention's work does not"},
    "gemma3_text": {"attn_logit_softcapping": "Gemma3Attention stores it but never applies it"},
    "gemma3": {"attn_logit_softcapping": "Gemma3Attention stores it but never applies it"},
    "deepseek_v2": {"head_dim": "the rotary width, qk_rope_head_dim, which is read", "num_key_value_heads": "MLA's heads are num_attention_heads"},
    "deepseek_v3": {"head_dim": "the rotary width, qk_rope_head_dim, which is read", "num_key_value_heads": "MLA's heads are num_attention_heads"},
    "deepseek_v32": {"head_dim": "the rotary width, qk_rope_head_dim, which is read (the config class overwrites head_dim with it)", "num_key_value_heads": "MLA's heads are num_attention_heads (DeepseekV32Attention expands keys and values to them)"},
    "gpt_oss": {"swiglu_alpha": "a value inside the clamped SwiGLU, not a size", "swiglu_limit": "the clamp's bound: a value, not a size"},
    "bert": {
        "layer_norm_eps": "a value, not a size",
        "chunk_size_feed_forward": "the feed-forward runs in chunks of the sequence: the same work, piece by piece",
    },
    "modernbert": {
        "classifier_activation": "a one-op activation keeps one tensor whatever it computes",
        "classifier_pooling": "other heads (sequence classification)",
        "deterministic_flash_attn": "the flash-attention kernel's determinism, not a size",
        "embedding_dropout": "dropout is the `dropout` convention",
        "mlp_dropout": "dropout is the `dropout` convention",
        "initializer_cutoff_factor": "initialisation only",
        "norm_eps": "a value, not a size",
        "sliding_window": "local_attention // 2, read as local_attention",
        "sparse_pred_ignore_index": "the label sparse prediction drops; sparse_prediction itself is refused",
        "head_dim": "the rotary tables' width where a config sets it; the attention's heads are hidden_size // num_attention_heads, which is read",
    },
    "mamba2": {
        "layer_types": "a property: every layer linear_attention",
        "output_hidden_states": "which outputs are returned, not work",
        "return_dict": "which outputs are returned, not work",
        "rescale_prenorm_residual": "initialisation only",
        "residual_in_fp32": "the residual stream's dtype: no size, FLOP or cache (saved activations are modelled in float32)",
        **{name: "initialisation only (the dt bias)" for name in ("time_step_floor", "time_step_max", "time_step_min")},
        "time_step_limit": "a clamp on dt: a value, not a size",
        "time_step_rank": "stored by Mamba2Mixer and never used",
    },
    "bamba": {
        "layer_types": "a property derived from attn_layer_indices, which is read",
        "layers_block_type": "a property derived from attn_layer_indices, which is read",
        "num_logits_to_keep": "how many logits generation asks for; symform counts every position's logits",
        "time_step_limit": "a clamp on dt: a value, not a size",
    },
    "granitemoehybrid": {
        **{name: "a scale: a value, not a size" for name in ("attention_multiplier", "embedding_multiplier", "logits_scaling", "residual_multiplier")},
        "time_step_limit": "a clamp on dt: a value, not a size",
    },
    "falcon_h1": {
        **{name: "a μP scale: a value, not a size" for name in (
            "attention_in_multiplier", "attention_out_multiplier", "embedding_multiplier", "key_multiplier", "lm_head_multiplier",
            "mlp_multipliers", "ssm_in_multiplier", "ssm_multipliers", "ssm_out_multiplier",
        )},
        "mamba_norm_before_gate": "the order of the gate and the grouped norm: the same work (saved activations of Falcon-H1 are not modelled)",
        "layer_types": "a property: every layer hybrid",
        "num_logits_to_keep": "how many logits generation asks for; symform counts every position's logits",
        "time_step_limit": "a clamp on dt: a value, not a size",
    },
    "jamba": {
        **{name: "a property derived from the layer periods and offsets, which are read" for name in ("layer_types", "layers_block_type", "layers_num_experts")},
        **{name: "the scan's implementation is the caller's choice (the torch loop here), not a size" for name in ("use_associative_scan", "use_mamba_kernels", "use_mambapy")},
    },
    "lfm2": {"norm_eps": "a value, not a size"},
    "nemotron_h": {
        "mamba_hidden_act": "a one-op activation keeps one tensor whatever it computes",
        "mlp_hidden_act": "a one-op activation keeps one tensor whatever it computes",
        "rescale_prenorm_residual": "initialisation only",
        "time_step_floor": "initialisation only (the dt bias)",
        "time_step_max": "initialisation only (the dt bias)",
        "time_step_min": "initialisation only (the dt bias)",
        "use_mamba_kernels": "the kernel is the caller's choice (the torch scan here), not a size",
        "num_hidden_layers": "transformers derives it from layers_block_type (or the pattern), which is read",
        "num_logits_to_keep": "how many logits generation asks for; symform counts every position's logits",
    },
    "gemma4_text": {
        **{name: "the multimodal wrapper's audio tower, not the text model" for name in (
            "attention_chunk_size", "attention_context_left", "attention_context_right", "attention_invalid_logits_value",
            "attention_logit_cap", "audio_config", "audio_token_id", "conv_kernel_size", "gradient_clipping", "output_proj_dims",
            "residual_weight", "subsampling_conv_channels",
        )},
        **{name: "the multimodal wrapper's vision tower, not the text model" for name in (
            "patch_size", "pooling_kernel_size", "position_embedding_size", "standardize", "use_clipped_linears", "video_token_id",
        )},
        "kv_sharing_modes": "derived from num_kv_shared_layers and layer_types, which are read",
    },
    "gemma4": {
        **{name: "the audio tower's values (a cap, a mask value, a clamp bound, a residual scale), not sizes" for name in (
            "attention_invalid_logits_value", "attention_logit_cap", "gradient_clipping", "residual_weight",
        )},
        "audio_token_id": "the audio placeholder's token id: audio is the workload symform counts (audios, audio_frames)",
        "video_token_id": "videos: images are the workload symform counts (images, image_height, image_width)",
        "kv_sharing_modes": "derived from num_kv_shared_layers and layer_types, which are read",
    },
    "llama4_text": {
        **{name: "the multimodal wrapper's vision tower, not the text model" for name in (
            "image_size", "num_channels", "patch_size", "pixel_shuffle_ratio", "projector_dropout", "projector_input_dim", "projector_output_dim",
        )},
        "attn_scale": "the temperature's value, not a size (attn_temperature_tuning, which is read, says whether it applies)",
        "floor_scale": "the temperature's value, not a size (attn_temperature_tuning, which is read, says whether it applies)",
        "output_attentions": "what forward returns, not what it computes",
        "output_hidden_states": "what forward returns, not what it computes",
        "return_dict": "what forward returns, not what it computes",
    },
    "llama4": {
        "attn_scale": "the temperature's value, not a size (attn_temperature_tuning, which is read, says whether it applies)",
        "floor_scale": "the temperature's value, not a size (attn_temperature_tuning, which is read, says whether it applies)",
        "projector_dropout": "dropout is the `dropout` convention (the vision adapter's, as attention_dropout)",
        "output_attentions": "what forward returns, not what it computes",
        "output_hidden_states": "what forward returns, not what it computes",
        "return_dict": "what forward returns, not what it computes",
    },
    "qwen3_5": {
        name: "the multimodal wrapper's vision tower, not the text model"
        for name in ("depth", "in_channels", "num_heads", "num_position_embeddings", "out_hidden_size", "patch_size", "spatial_merge_size", "temporal_patch_size", "video_token_id")
    },
    "qwen3_vl": {
        "layer_types": "stored by each text attention layer and never used: every Qwen3-VL text layer attends over the whole sequence",
        "video_token_id": "videos: images are the workload symform counts (images, image_height, image_width)",
    },
    "qwen3_5_moe": {
        name: "the multimodal wrapper's vision tower, not the text model (its MLP's intermediate_size too)"
        for name in ("depth", "in_channels", "intermediate_size", "num_heads", "num_position_embeddings", "out_hidden_size", "patch_size", "spatial_merge_size", "temporal_patch_size", "video_token_id")
    },
}
# Fields a new family (i13b) reads in transformers that symform does not model yet and does not refuse either:
# real gaps, listed here so the test names them rather than hiding them. Remove an entry once it is read or refused.
COST_FREE_IN.update({model_type: COST_FREE_IN["bert"] for model_type in ("roberta", "xlm-roberta", "camembert")})  # BERT's layers
_T5_COST_FREE = {
    "decoder_start_token_id": "a token id", "eos_token_id": "a token id", "initializer_factor": "initialisation only",
    "relative_attention_max_distance": "which bucket a distance falls in, not how many buckets (relative_attention_num_buckets, read)",
    "dense_act_fn": "derived by the config class from feed_forward_proj, which is read", "is_gated_act": "derived by the config class from feed_forward_proj, which is read",
    "scale_decoder_outputs": "one element-wise scaling of the decoder's output (from tie_word_embeddings, which is read)",
}  # fmt: skip
COST_FREE_IN.update({model_type: _T5_COST_FREE for model_type in ("t5", "mt5", "umt5")})
# BERT's relatives read through family inheritance: BERT's layers, and ELECTRA's sequence-summary head
COST_FREE_IN.update({model_type: COST_FREE_IN["bert"] for model_type in ("ernie", "megatron-bert", "data2vec-text", "bert-generation", "roberta-prelayernorm", "xlm-roberta-xl")})
COST_FREE_IN["megatron-bert"] = {**COST_FREE_IN["bert"], **{name: "what forward returns, not what it computes" for name in ("output_attentions", "output_hidden_states", "return_dict")}}
COST_FREE_IN["electra"] = {
    **COST_FREE_IN["bert"],
    **{name: "the sequence-summary head of ElectraForMultipleChoice and the like, which symform does not read" for name in (
        "summary_activation", "summary_first_dropout", "summary_last_dropout", "summary_proj_to_labels", "summary_type", "summary_use_proj",
    )},
}  # fmt: skip
COST_FREE_IN["distilbert"] = {
    **COST_FREE_IN["bert"],
    **{name: "the question-answering and classification heads' dropout, heads symform does not read" for name in ("qa_dropout", "seq_classif_dropout")},
}
_BART_COST_FREE = {
    "decoder_start_token_id": "a token id", "eos_token_id": "a token id", "return_dict": "what forward returns, not what it computes",
    "is_decoder": "set by the class: the causal-LM class makes the decoder a decoder alone (architectures, read, names the class)",
    "is_encoder_decoder": "set by the class: the conditional-generation class is the encoder-decoder (architectures, read, names the class)",
}  # fmt: skip
COST_FREE_IN.update({model_type: _BART_COST_FREE for model_type in ("bart", "mbart", "marian", "pegasus", "blenderbot", "blenderbot-small", "plbart", "m2m_100")})

NOT_YET = {
    **{t: {"dropout_rate": "T5's dropout sites are not declared yet: its saved activations in training are not modelled"} for t in ("t5", "mt5", "umt5")},
    "gemma4_text": {
    },
    **{t: {name: "LayerDrop skips layers at random in training; symform counts every layer's activations" for name in ("encoder_layerdrop", "decoder_layerdrop")}
       for t in ("bart", "mbart", "marian", "pegasus", "blenderbot", "blenderbot-small", "plbart", "m2m_100")},
}
NOT_YET["gemma4"] = NOT_YET["gemma4_text"]  # the same text stack, read from text_config
COST_FREE_IN["qwen3_vl_moe"] = COST_FREE_IN["qwen3_vl"]  # Qwen3-VL's tower and text attention, with experts
COST_FREE_IN["cosmos3_omni"] = COST_FREE_IN["qwen3_vl"]  # Qwen3-VL's modules under another wrapper
COST_FREE_IN["qwen2_5_vl"] = {
    "layer_types": "which text layers slide, only with use_sliding_window, which is refused",
    "sliding_window": "the text layers' window, only with use_sliding_window, which is refused",
    "video_token_id": "videos are not modelled for Qwen2-VL and Qwen2.5-VL: no cost depends on them, so --videos is refused",
}
COST_FREE_IN["qwen2_vl"] = COST_FREE_IN["qwen2_5_vl"]  # the same text stack, sliding window refused
# the dense families of tests/test_family_dense_2026.py
_OUTPUTS = {name: "what forward returns, not what it computes" for name in ("output_attentions", "output_hidden_states", "return_dict")}
_LN_EPS = {"layer_norm_eps": "a value, not a size"}
_HEAD_DIM_PROPERTY = {"head_dim": "the rotary tables' width where a config writes head_dim; the attention splits hidden_size // heads, which symform reads"}
COST_FREE_IN.update({
    "bloom": {**_OUTPUTS, "apply_residual_connection_post_layernorm": "which tensor is added back to the residual, not what is computed or kept"},
    "cohere": {**_LN_EPS, "logit_scale": "the logits times a constant: no parameter, no matrix product, nothing kept"},
    "falcon": {**_OUTPUTS, "head_dim": "FalconConfig's property hidden_size // num_attention_heads, which symform computes"},
    "gpt_bigcode": {name: "a softmax path transformers' eager attention no longer takes (it upcasts always)" for name in ("attention_softmax_in_fp32", "scale_attention_softmax_in_fp32")},
    "gpt_neo": {**_OUTPUTS, **{name: "local layers mask a full score matrix and cache every token: counted as full layers" for name in ("attention_layers", "window_size")}},
    "gpt_neox": {**_LN_EPS, **_HEAD_DIM_PROPERTY, "is_decoder": "GPTNeoXForCausalLM's warning when it is false; nothing computed changes"},
    "granite": {name: "a product by a constant (μP): no parameter, no matrix product, nothing kept" for name in ("attention_multiplier", "embedding_multiplier", "logits_scaling", "residual_multiplier")},
    "jais2": _LN_EPS,
    "opt": {"_remove_final_layer_norm": "a backward-compatibility flag of OPT-350m's post-norm layout, which is refused (do_layer_norm_before)"},
    "persimmon": {**_LN_EPS, **_HEAD_DIM_PROPERTY},
    "phi": _LN_EPS,
    "stablelm": {**_LN_EPS, **_HEAD_DIM_PROPERTY},
})
COST_FREE_IN["cohere2"] = COST_FREE_IN["cohere"]
COST_FREE_IN["granitemoe"] = COST_FREE_IN["granitemoeshared"] = COST_FREE_IN["granite"]
COST_FREE_IN["ernie4_5_moe"] = {"moe_norm_min": "the floor of the renormalised top-k weights' sum (an epsilon): a value, not a size"}
COST_FREE_IN["glm4_moe_lite"] = {
    "head_dim": "GLM-4.7-Flash's MLA attention sizes its heads by qk_nope_head_dim, qk_rope_head_dim and v_head_dim, which symform reads",
    "num_key_value_heads": "MLA's keys and values come from the latent (kv_lora_rank) for every head: the field sizes nothing",
}
COST_FREE_IN["dbrx"] = {
    **{name: "DbrxConfig's attribute_map alias of a field symform reads (d_model, n_heads, n_layers)" for name in ("hidden_size", "num_attention_heads", "num_hidden_layers")},
    "head_dim": "d_model // n_heads, which symform computes",
    "rope_theta": "a value, not a size",
    "ffn_act_fn": "read as ffn_act_name (its name; only silu is read, others refused)",
}
COST_FREE_IN["nemotron"] = {"norm_eps": "a value, not a size"}
_TEXT_ONLY_TOWERS = {  # image-text families that count their towers' weights and refuse images
    "image_grid_pinpoints": "the anyres grid images are tiled on: images are refused, so no cost depends on it",
    "video_token_id": "a token id; videos are refused",
    "layer_norm_eps": "a value, not a size",
    "projector_layernorm_eps": "a value, not a size",
    "layer_scale_init_value": "initialisation only (InternViT's lambda_1, lambda_2 are counted)",
    "chunk_size_feed_forward": "InternViT's MLP in chunks does the same work",
    "hidden_dropout_prob": "dropout is the `dropout` convention (InternViT's, with images, which are refused)",
    "projection_dropout": "dropout is the `dropout` convention (InternViT's, with images, which are refused)",
    "spatial_pool_stride": "the video frames' pooling window, weightless unless spatial_pool_mode is conv, which is refused",
    "spatial_pool_out_channels": "the pooling convolution's width, only with spatial_pool_mode conv, which is refused",
    "drop_path_rate": "Qianfan-OCR's tower's stochastic depth: acts on images only, which are refused",
}
COST_FREE_IN.update({t: _TEXT_ONLY_TOWERS for t in (
    "llava_next", "llava_next_video", "llava_onevision", "vipllava", "idefics3", "smolvlm", "internvl", "video_llava", "lighton_ocr", "deepseek_vl", "paligemma", "qianfan_ocr",
)})  # fmt: skip
COST_FREE_IN["biogpt"] = {**_LN_EPS, "scale_embedding": "the embeddings times a constant: no parameter, no matrix product, nothing kept"}
MODELS = Path(transformers.__file__).parent / "models"
MODULE = {
    "gemma3_text": "gemma3", "gemma4_text": "gemma4", "llama4_text": "llama4", "xlm-roberta": "xlm_roberta", "roberta-prelayernorm": "roberta_prelayernorm",
    "xlm-roberta-xl": "xlm_roberta_xl", "megatron-bert": "megatron_bert", "bert-generation": "bert_generation", "blenderbot-small": "blenderbot_small",
}  # fmt: skip


def fields_the_modeling_code_reads(model_type: str) -> set[str]:
    module = MODULE.get(model_type, model_type)
    path = {"data2vec-text": "data2vec/modeling_data2vec_text.py"}.get(model_type, f"{module}/modeling_{module}.py")  # a folder of several models
    source = (MODELS / path).read_text(encoding="utf-8")
    return set(re.findall(r"config\.(\w+)", source)) | set(re.findall(r"getattr\(config, \"(\w+)\"", source))


def handled(model_type: str) -> tuple[set[str], set[str]]:
    """What the families reading the model type read (with or without a vision_config) and refuse."""
    read, refused = set(), set()
    for family in all_families().values():
        spec = family.spec
        if model_type in spec.model_types:
            read |= set(spec.fields) | {f.key for f in spec.fields.values() if f.key} | {alias.split(".")[0] for field in spec.fields.values() for alias in field.aliases}
            refused |= {name for refusal in spec.refuse for name in re.findall(r"[A-Za-z_]\w*", refusal.when)}
            refused |= {refusal.field for refusal in spec.refuse if refusal.field}
            read |= {"per_layer_config"} if spec.per_layer else set()  # read where declared, refused unless one per kind
    return read, refused


@pytest.mark.parametrize("model_type", sorted(families()))
def test_every_field_the_modeling_code_reads_is_read_or_refused(model_type):
    read, refused = handled(model_type)
    cost_free = COST_FREE | COST_FREE_IN.get(model_type, {})
    unaccounted = sorted(fields_the_modeling_code_reads(model_type) - read - refused - set(cost_free) - set(NOT_YET.get(model_type, {})))
    assert not unaccounted, f"{model_type}: transformers reads {unaccounted}, which symform neither reads nor refuses"


REFUSED = {
    "qwen2_moe with a window": {"model_type": "qwen2_moe", "use_sliding_window": True, "sliding_window": 4, "max_window_layers": 2},
    "qwen3_moe with a window": {"model_type": "qwen3_moe", "use_sliding_window": True, "sliding_window": 4},
    "mixtral with a window": {"model_type": "mixtral", "sliding_window": 4},
    "mixtral with router jitter": {"model_type": "mixtral", "router_jitter_noise": 0.01},
    "minimax_m2 with router jitter": {"model_type": "minimax_m2", "router_jitter_noise": 0.01},
    "minimax_m2 with the router loss": {"model_type": "minimax_m2", "output_router_logits": True},
    "qwen3_moe with the router loss": {"model_type": "qwen3_moe", "output_router_logits": True},
    "glm4_moe with the router loss": {"model_type": "glm4_moe", "n_routed_experts": 4, "output_router_logits": True},
    "gemma2, bidirectional": {"model_type": "gemma2", "use_bidirectional_attention": True},
    "gpt2, reordered upcast": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "reorder_and_upcast_attn": True},
    "gpt2, an activation written out in products": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "activation_function": "gelu_fast"},
    "deepseek_v32 without the query bottleneck": {"model_type": "deepseek_v32", "q_lora_rank": None},
    "nemotron_h with 0-wide latent experts": {"model_type": "nemotron_h", "hybrid_override_pattern": "ME", "moe_latent_size": 0},
    "modernbert, sparse prediction": {"model_type": "modernbert", "sparse_prediction": True},
}
MOE_SIZES = {"num_experts": 4, "num_local_experts": 4, "moe_intermediate_size": 8, "num_experts_per_tok": 2}


@pytest.mark.parametrize("case", REFUSED)
def test_a_setting_symform_does_not_model_is_refused_in_one_line(case):
    config = {**TINY, **MOE_SIZES, **REFUSED[case]}
    with pytest.raises(ConfigError) as refusal:
        Model.from_config(config)
    assert "\n" not in str(refusal.value)


@pytest.mark.parametrize(
    "per_layer_config, says",
    [
        ({"1": {"head_dim": 32}, "0": {"head_dim": 32}}, "differ between them, miss some of them, or are not read"),
        ({"1": {"head_dim": 32, "intermediate_size": 8}}, "not read"),
        ({"7": {"head_dim": 32}}, "must be a layer index"),
        ({"1" * 5000: {"head_dim": 32}}, "must be a layer index"),
        ({"1": 32}, "must be a layer index"),
        ([32], "must be a JSON object"),
    ],
)
def test_a_per_layer_config_symform_cannot_read_per_kind_is_refused_in_one_line(per_layer_config, says):
    """Sizes per layer that are not one value per kind of layer (symform's sizes are per kind) are refused."""
    config = {"model_type": "gemma4_text", **TINY, "head_dim": 16, "layer_types": ["sliding_attention", "full_attention"],
              "num_hidden_layers": 2, "per_layer_config": per_layer_config}  # fmt: skip
    with pytest.raises(ConfigError, match=says) as refused:
        Model.from_config(config)
    assert "\n" not in str(refused.value)


def test_per_layer_config_reads_as_the_fields_the_hub_names():
    """{"1": {"head_dim": 32}} on a sliding/full stack is global_head_dim 32; a contradicting field is refused."""
    base = {"model_type": "gemma4_text", **TINY, "head_dim": 16, "layer_types": ["sliding_attention", "full_attention"], "num_hidden_layers": 2}
    assert Model.from_config({**base, "per_layer_config": {"1": {"head_dim": 32}}}).evaluate("params") == Model.from_config({**base, "global_head_dim": 32}).evaluate("params")
    assert Model.from_config({**base, "global_head_dim": 32}).evaluate("params") != Model.from_config(base).evaluate("params")
    with pytest.raises(ConfigError, match="contradicts global_head_dim"):
        Model.from_config({**base, "global_head_dim": 64, "per_layer_config": {"1": {"head_dim": 32}}})


@pytest.mark.parametrize("model_type", ["gemma4_text", "gemma4"])
def test_gemma4_every_layer_bidirectional_is_refused_and_vision_is_read(model_type):
    """'all' changes the windows (sliding_window // 2 + 1) and the masks: refused; 'vision' costs nothing more."""
    text = {**TINY, "head_dim": 16, "layer_types": ["sliding_attention", "full_attention"], "num_hidden_layers": 2}
    config = {"model_type": model_type, **text} if model_type == "gemma4_text" else {"model_type": model_type, "text_config": text}
    section = config if model_type == "gemma4_text" else config["text_config"]
    with pytest.raises(ConfigError, match="use_bidirectional_attention 'all'") as refused:
        Model.from_config({**config, **({"use_bidirectional_attention": "all"} if section is config else {"text_config": {**text, "use_bidirectional_attention": "all"}})})
    assert "\n" not in str(refused.value)
    vision = {**config, **({"use_bidirectional_attention": "vision"} if section is config else {"text_config": {**text, "use_bidirectional_attention": "vision"}})}
    assert Model.from_config(vision).evaluate("params") == Model.from_config(config).evaluate("params")
