"""Megatron-Core's per-module recomputation (TransformerConfig.recompute_modules): what each module's output-discarding
checkpoint frees, derived by hand from Megatron-Core's modules (commit d98e8a64)."""

from __future__ import annotations

import pytest

from symform import EvaluationError, load
from symform.analysis.memory.settings import Layout
from symform.analysis.memory.memory import Training, training_memory

ROWS = 16  # one sequence of 16 tokens


def activations(name: str, modules=(), *, recompute="none", precision="mixed", framework="megatron") -> float:
    setup = Training(precision=precision, recompute=recompute, flash=True, layout=Layout(), framework=framework, recompute_modules=tuple(modules))
    return training_memory(load(name), batch=1, seq=ROWS, setup=setup).values["activations"]


def test_layernorm_frees_the_copy_the_first_linear_after_each_norm_keeps():
    """transformer_layer.py: input_layernorm and pre_mlp_layernorm run under CheckpointWithoutOutput and
    discard_output_and_register_recompute drops their outputs once QKV's and fc1's linears have read them, so neither
    keeps a copy. Llama 3.1 8B (hidden_size 4096, 32 layers), bf16: 2 norms · 2 bytes · 4096 = 16,384 bytes per token
    and layer; under fp8 the linears kept one byte each, 8,192."""
    assert activations("llama-3.1-8b") - activations("llama-3.1-8b", ["layernorm"]) == 32 * 16_384 * ROWS
    fp8 = activations("llama-3.1-8b", precision="fp8") - activations("llama-3.1-8b", ["layernorm"], precision="fp8")
    assert fp8 == 32 * 8_192 * ROWS


def test_core_attn_alone_is_megatrons_selective_default():
    assert activations("llama-3.1-8b", ["core_attn"]) == activations("llama-3.1-8b", recompute="selective")
    both = activations("llama-3.1-8b", ["core_attn", "layernorm"])
    assert activations("llama-3.1-8b", recompute="selective") - both == 32 * 16_384 * ROWS


def test_moe_act_frees_each_routed_tokens_down_projection_input():
    """moe/experts.py: the activation runs under CheckpointWithoutOutput and its output, fc2's input, is discarded.
    Qwen3-30B-A3B (48 layers, num_experts_per_tok 8, moe_intermediate_size 768), bf16: 8 · 768 · 2 = 12,288 bytes per
    token and layer; with gpt-oss's ["layernorm", "moe_act"] (hidden 2880, 36 layers, top-4 of experts 2880 wide) the
    two add: 2·2·2880 + 4·2880·2 = 34,560."""
    assert activations("qwen3-30b-a3b") - activations("qwen3-30b-a3b", ["moe_act"]) == 48 * 12_288 * ROWS
    assert activations("gpt-oss-120b") - activations("gpt-oss-120b", ["layernorm", "moe_act"]) == 36 * 34_560 * ROWS


def test_mla_up_proj_frees_the_up_projections_inputs_and_the_attention_kernels_q_k_v():
    """multi_latent_attention.py: qkv_up_proj_and_rope_apply runs under no_grad inside CheckpointWithoutOutput from
    q_compressed and kv_compressed, and its query, key and value are discarded after the core attention. DeepSeek-V3
    (61 layers, 128 heads, q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v 128), bf16, per token and
    layer: the up-projections' inputs 2·(1536 + 512) = 4,096 and Q, K, V 2·128·(192 + 192 + 128) = 131,072."""
    per_token = 2 * (1536 + 512) + 2 * 128 * (192 + 192 + 128)
    assert per_token == 135_168
    assert activations("deepseek-v3") - activations("deepseek-v3", ["mla_up_proj"]) == 61 * per_token * ROWS


def test_unknown_or_uncounted_modules_are_one_line():
    with pytest.raises(EvaluationError, match="'moe' is not counted under megatron"):
        activations("llama-3.1-8b", ["moe"])
    with pytest.raises(EvaluationError, match="torchtitan has no per-module recomputation"):
        activations("llama-3.1-8b", ["layernorm"], framework="torchtitan")
    with pytest.raises(EvaluationError, match="not 'full'"):
        activations("llama-3.1-8b", ["layernorm"], recompute="full")


def test_cli_takes_the_modules_and_refuses_an_uncounted_one_in_one_line(capsys):
    from checks import run, run_json

    argv = ("memory", "llama-3.1-8b", "--train", "--batch", "1", "--seq", str(ROWS), "--framework", "megatron")
    plain, freed = run_json(capsys, *argv), run_json(capsys, *argv, "--recompute-modules", "layernorm")
    assert plain["components"]["activations"] - freed["components"]["activations"] == 32 * 16_384 * ROWS
    code, _, err = run(capsys, *argv, "--recompute-modules", "moe")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "'moe'" in err
