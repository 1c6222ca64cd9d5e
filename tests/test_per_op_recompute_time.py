"""A framework's per-op selective checkpointing, timed: torchtitan's policy saves every second aten.mm's result
(the 1st, 3rd, ... in forward order) and the attention kernel's outputs, and backward replays the layer, running
again every op it did not save (torchtitan/distributed/activation_checkpoint.py _apply_op_sac). Under FlashAttention
symform's Korthikanti-style selective recomputes nothing; torchtitan's recomputes a third of Llama's products.

Expected values are Llama 3.1 8B's sizes from its config, worked by hand: d_model 4,096, 8 key/value heads of 128,
d_ff 14,336, 32 layers."""

from __future__ import annotations

from checks import run_json

import symform
from symform.analysis.memory.frameworks import timed_recompute
from symform.analysis.time import step_model

D, KV, FF, LAYERS = 4096, 8 * 128, 14336, 32


def test_torchtitan_keeps_the_odd_products_and_the_attention_kernel():
    """Llama's products in forward order: q, k, v, o, gate, up, down; torchtitan saves the 1st, 3rd, 5th and 7th."""
    model = symform.load("llama-3.1-8b")
    mode = timed_recompute("torchtitan", "selective")
    units = step_model.recomputed_units(model, mode)
    kept = set(step_model.kept_ops(model, units, mode, flash=True))
    assert kept == {"layers/attn/q_proj", "layers/attn/v_proj", "layers/mlp/gate_proj", "layers/mlp/down_proj", "layers/attn/core"}


def test_the_step_runs_k_o_and_up_again(capsys):
    """A step of 8 GPUs, one micro-batch of 2 × 8,192 tokens each: selective under torchtitan adds the forward FLOPs
    of k_proj, o_proj and up_proj (2 · tokens · d_in · d_out each, every layer) over no recomputation."""
    common = ("time", "llama-3.1-8b", "--train", "--gpu", "h100-sxm", "--gpus", "8", "--zero", "3", "--global-batch", "16", "--micro-batch", "2", "--seq", "8192", "--json")
    selective = run_json(capsys, *common, "--recompute", "selective")
    none = run_json(capsys, *common, "--recompute", "none")
    tokens = 16 * 8192
    assert selective["hardware_flops"] - none["hardware_flops"] == 2 * tokens * LAYERS * (D * KV + D * D + D * FF)
    assert selective["estimate"]["estimate_s"]["estimate"] > none["estimate"]["estimate_s"]["estimate"]


def test_a_framework_without_a_replaying_policy_keeps_the_attention_core_selective():
    """Megatron-Core's selective recomputes the attention core (nothing under FlashAttention); MaxText's JAX remat
    policies recompute only what backward reads, which the time does not trace: both stay symform's selective."""
    assert timed_recompute("megatron", "selective") == "selective"
    assert timed_recompute("maxtext", "selective") == "selective"
    assert timed_recompute(None, "selective") == "selective"
    assert timed_recompute("torchtitan", "full") == "full"


def _tensor_bytes(capsys, recompute: str, *extra: str) -> float:
    found = run_json(capsys, "time", "llama-3.1-8b", "--train", "--gpu", "h100-sxm", "--gpus", "8", "--tp", "4", "--global-batch", "16", "--micro-batch", "2", "--seq", "8192", "--recompute", recompute, "--json", *extra)
    return found["comm"]["tensor"]["bytes_per_rank"]


def test_the_replay_gathers_again_what_the_policy_does_not_save(capsys):
    """With sequence parallelism a layer's forward runs two all-gathers and two reduce-scatters of the same bytes;
    the policy saves the reduce-scatters' results (torchtitan's save list), so its replay adds the all-gathers alone,
    half of what full recomputation's replay adds (torchtitan runs it with tensor parallelism: the default). Without it
    (--no-sp) the layer's all-reduces are not saved: all run again."""
    none, selective, full = (_tensor_bytes(capsys, r, "--sp") for r in ("none", "selective", "full"))
    assert selective - none == (full - none) / 2 > 0
    assert _tensor_bytes(capsys, "selective", "--no-sp") == _tensor_bytes(capsys, "full", "--no-sp") > _tensor_bytes(capsys, "none", "--no-sp")


def test_offload_and_the_json_name_the_option_and_the_policy(capsys):
    """Activation offload counts its copies under the option the user gave (selective, as the framework keeps it);
    the JSON keeps the option's word and names the policy timed."""
    found = run_json(capsys, "time", "llama-3.1-8b", "--train", "--gpu", "h100-sxm", "--gpus", "8", "--zero", "3", "--global-batch", "16", "--micro-batch", "2", "--seq", "8192", "--recompute", "selective", "--offload-layers", "2", "--json")
    assert found["recompute"] == "selective" and found["recompute_policy"] == "saved_ops"
    assert found["comm"]["offload"]["bytes_per_rank"] > 0


def test_a_direct_query_projection_comes_first_in_forward_order():
    """DeepSeek-V2-Lite (no query LoRA) computes q_proj before kv_a_proj_with_mqa (transformers'
    DeepseekV2Attention.forward), so torchtitan's alternation keeps q_proj and kv_b_proj, not kv_a_proj and o_proj."""
    model = symform.load("deepseek-v2-lite")
    units = step_model.recomputed_units(model, "saved_ops")
    kept = {path.rsplit("/", 1)[-1] for path in step_model.kept_ops(model, units, "saved_ops", flash=True) if "/attn/" in path}
    assert kept == {"q_proj", "kv_b_proj", "core"}


def test_a_part_its_convention_switches_off_is_not_counted():
    """Llama 4's every_expert path (transformers' eager module: every expert on every token) runs only with
    every_expert = 1; under the engines' routing (the default, 0) its products are not in the alternation, so the MoE
    layer keeps q, v, the router and the shared expert's up projection (5th and 7th products after q, k, v, o)."""
    model = symform.load("llama-4-scout")
    units = step_model.recomputed_units(model, "saved_ops")
    kept = {path.split("/", 2)[2] for path in step_model.kept_ops(model, units, "saved_ops", flash=True) if path.startswith("layers/rope_moe/")}
    assert kept == {"attn/core", "attn/q_proj", "attn/v_proj", "mlp/router", "mlp/shared_expert/up_proj"}
