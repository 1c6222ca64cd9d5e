"""Recurrent-state mixers (Gated DeltaNet, Mamba-2) and the hybrid stacks built from them (Qwen3-Next, Nemotron-H
with its mixture-of-experts blocks): parameters, FLOPs, cache and state bytes against transformers' own models (torch
fallback paths, float32, eager attention and experts), configs saved by transformers, and the leading order of a
Gated DeltaNet layer.

What PyTorch's FLOP counter gets wrong here, and how each test corrects for it:

- it has no formula for ``linalg_solve_triangular``: Gated DeltaNet's chunked scan's two unit-triangular
  solves per chunk (chunk·(chunk - 1)/2 multiply-adds per right-hand column, d_k + d_v columns)
  count nothing forward, and nothing for the transposed solve their backward runs. symform
  counts them; the tests take them out, computed here from the shapes.
- it counts the weight gradient of a depthwise (grouped) convolution as if the convolution were
  dense: ``conv_backward_flop`` ignores ``groups``, so the weight gradient of the causal conv1d
  is counted channels times over. The tests put the counter's figure in place of the real one.
"""

from __future__ import annotations

import math

import pytest
import sympy

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import TINY, build, check_saved_config_reads_the_same, count_forward, count_forward_backward, input_ids, meta_params  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import symform  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

CHUNK = 64  # transformers' torch_chunk_gated_delta_rule

# 3 linear : 1 full (full_attention_interval 4), every layer routed with a gated shared expert
QWEN3_NEXT = dict(
    TINY, model_type="qwen3_next", num_hidden_layers=4, head_dim=16, linear_num_value_heads=4, linear_num_key_heads=2,
    linear_key_head_dim=8, linear_value_head_dim=12, linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
    moe_intermediate_size=8, shared_expert_intermediate_size=16,
)  # fmt: skip
# the same mixers with a dense MLP everywhere, layer kinds from layer_types, value heads = key heads
QWEN3_NEXT_DENSE = dict(
    TINY, model_type="qwen3_next", num_hidden_layers=3, head_dim=24, linear_num_value_heads=2, linear_num_key_heads=2,
    linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_kernel_dim=3, num_experts=0, tie_word_embeddings=True,
    layer_types=["linear_attention", "full_attention", "linear_attention"],
)  # fmt: skip
# Mamba-2, attention and MLP blocks in the order of the pattern; two groups of B and C; 16-token chunks
NEMOTRON_H = dict(
    TINY, model_type="nemotron_h", hybrid_override_pattern="M*M-M", num_hidden_layers=5, head_dim=16, mamba_num_heads=4,
    mamba_head_dim=8, ssm_state_size=6, n_groups=2, chunk_size=16, conv_kernel=4,
)  # fmt: skip
NEMOTRON_H_NO_BIAS = dict(NEMOTRON_H, hybrid_override_pattern="-MM*", num_hidden_layers=4, use_conv_bias=False, n_groups=1, conv_kernel=3)
# mixture-of-experts blocks (E): 8 squared-ReLU experts in 4 groups, the best 2 groups kept, 3 experts a token,
# one shared MLP wider than the experts (n_shared_experts says nothing to transformers)
NEMOTRON_H_MOE = dict(
    NEMOTRON_H, hybrid_override_pattern="ME*M-E", num_hidden_layers=6, n_routed_experts=8, num_experts_per_tok=3,
    moe_intermediate_size=24, moe_shared_expert_intermediate_size=40, n_group=4, topk_group=2, n_shared_experts=3,
)  # fmt: skip
# the routed experts behind a latent projection (moe_latent_size): 12 wide, projected from and back to the 64-wide
# stream, with biases (mlp_bias) on the projections and the MLPs
NEMOTRON_H_LATENT = dict(NEMOTRON_H_MOE, moe_latent_size=12, mlp_bias=True)
# the kinds from layers_block_type instead, old and new names mixed, no num_hidden_layers (transformers counts the
# list), one group, weights not renormalised; tie_word_embeddings, which NemotronHForCausalLM ignores (no tied keys)
NEMOTRON_H_BLOCK_TYPES = dict(
    {k: v for k, v in NEMOTRON_H.items() if k not in ("hybrid_override_pattern", "num_hidden_layers")},
    layers_block_type=["mamba", "moe", "full_attention", "linear_attention", "mlp", "moe", "attention"], n_routed_experts=6,
    num_experts_per_tok=2, moe_intermediate_size=16, moe_shared_expert_intermediate_size=24, norm_topk_prob=False,
    tie_word_embeddings=True,
)  # fmt: skip
# Qwen3.5: the same mixers read from text_config, four input projections instead of two; 1 linear : 1 full
QWEN3_5 = dict(
    model_type="qwen3_5",
    text_config=dict(
        TINY, head_dim=16, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
        linear_value_head_dim=12, linear_conv_kernel_dim=4, layer_types=["linear_attention", "full_attention"],
    ),
)  # fmt: skip
CONFIGS = {
    "qwen3_next-moe": QWEN3_NEXT, "qwen3_next-dense": QWEN3_NEXT_DENSE, "qwen3_5": QWEN3_5,
    "nemotron_h": NEMOTRON_H, "nemotron_h-no-conv-bias": NEMOTRON_H_NO_BIAS, "nemotron_h-moe": NEMOTRON_H_MOE,
    "nemotron_h-layers_block_type": NEMOTRON_H_BLOCK_TYPES, "nemotron_h-moe-latent": NEMOTRON_H_LATENT,
}  # fmt: skip
NEMOTRON_CASES = [case for case, config in CONFIGS.items() if config["model_type"] == "nemotron_h"]


def text(config: dict) -> dict:
    """The language model's fields: the text_config of a vision-language config, else the config itself."""
    return config.get("text_config", config)


def mixer_shapes(config: dict) -> dict[str, int]:
    """The recurrent mixers' sizes, read from the config as transformers reads them."""
    if config["model_type"] == "nemotron_h":
        width = config["mamba_num_heads"] * config["mamba_head_dim"]
        channels = width + 2 * config.get("n_groups", 8) * config["ssm_state_size"]
        kinds = config.get("layers_block_type") or list(config["hybrid_override_pattern"])
        mamba = sum(kind in ("M", "mamba", "linear_attention") for kind in kinds)
        return dict(layers=mamba, heads=0, dk=0, dv=0, channels=channels, kernel=config["conv_kernel"])
    config = text(config)
    kinds = config.get("layer_types") or [
        "full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(config["num_hidden_layers"])
    ]
    dk, dv = config["linear_key_head_dim"], config["linear_value_head_dim"]
    heads = config["linear_num_value_heads"]
    channels = 2 * config["linear_num_key_heads"] * dk + heads * dv
    return dict(layers=kinds.count("linear_attention"), heads=heads, dk=dk, dv=dv, channels=channels, kernel=config["linear_conv_kernel_dim"])


def uncounted_solves(config: dict, batch: int, seq: int) -> int:
    """FLOPs of the forward triangular solves of every linear layer (the counter sees none)."""
    m = mixer_shapes(config)
    return m["layers"] * 2 * batch * m["heads"] * math.ceil(seq / CHUNK) * (m["dv"] + m["dk"]) * CHUNK * (CHUNK - 1) // 2


def conv_forward(config: dict, batch: int, seq: int) -> int:
    m = mixer_shapes(config)
    return m["layers"] * 2 * batch * m["channels"] * m["kernel"] * (seq + m["kernel"] - 1)


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq", [(2, 70), (1, 5), (1, 64), (2, 130)])
def test_forward_flops_equal_the_counter_but_for_the_triangular_solves(case, batch, seq):
    config = CONFIGS[case]
    counted = count_forward(build(config, eager_experts=True), input_ids(text(config), batch, seq)).get_total_flops()
    model = Model.from_config(config).with_conventions(training=0)
    assert model.evaluate("forward_flops", batch=batch, seq=seq) - uncounted_solves(config, batch, seq) == counted


@pytest.mark.parametrize(
    "case, seq", [(case, seq) for case in NEMOTRON_CASES for seq in range(1, CONFIGS[case]["conv_kernel"])]
)
def test_mamba2_forward_flops_under_conv_kernel_tokens_count_the_padded_convolution(case, seq):
    """A forward that fills the cache pads the convolution's input to conv_kernel positions first (transformers'
    update_conv_state), so the convolution computes conv_kernel + conv_kernel - 1 positions, whatever seq < conv_kernel."""
    config = CONFIGS[case]
    counted = count_forward(build(config, eager_experts=True), input_ids(text(config), 2, seq)).get_total_flops()
    model = Model.from_config(config).with_conventions(training=0)
    assert model.evaluate("forward_flops", batch=2, seq=seq) == counted


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq", [(2, 70), (1, 5), (1, 128)])
def test_forward_and_backward_flops_equal_the_counter_once_its_mistakes_are_named(case, batch, seq):
    config = CONFIGS[case]
    model = build(config, eager_experts=True).train()
    counted = count_forward_backward(model, input_ids(text(config), batch, seq)).get_total_flops()
    channels = mixer_shapes(config)["channels"]
    # backward: one more transposed solve per solve; the depthwise weight gradient counted channels times
    expected = counted + 2 * uncounted_solves(config, batch, seq) - (channels - 1) * conv_forward(config, batch, seq)
    symbolic = Model.from_config(config).with_conventions(training=0)
    assert symbolic.evaluate("forward_flops", batch=batch, seq=seq) + symbolic.evaluate("backward_flops", batch=batch, seq=seq) == expected


def cache_after(model, config: dict, batch: int, seq: int):
    with torch.no_grad():
        return model(input_ids=input_ids(text(config), batch, seq), use_cache=True).past_key_values


def check_decode_step_flops(model, config: dict, batch: int, past: int) -> None:
    """One token after a cached prefix of ``past``: symform's decode-step FLOPs equal the counter's."""
    cache = cache_after(model, config, batch, past)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=input_ids(text(config), batch, 1), cache=cache, use_cache=True)
    symbolic = Model.from_config(config).with_conventions(training=0, decoding=1)
    assert symbolic.evaluate("forward_flops", batch=batch, seq=1, past=past) == counter.get_total_flops()


def tensors_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq", [(2, 7), (1, 2), (3, 70)])
def test_cache_and_state_bytes_equal_the_tensors_transformers_keeps(case, batch, seq):
    """Attention layers keep keys and values for every token; linear layers a conv window and a state
    matrix whatever the sequence (seq 2 is shorter than the conv window, which transformers pads)."""
    config = CONFIGS[case]
    cache = cache_after(build(config, eager_experts=True), config, batch, seq)
    keys_values = tensors_bytes(t for layer in cache.layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None)))
    states = tensors_bytes(t for layer in cache.layers for t in (*getattr(layer, "conv_states", {}).values(), *getattr(layer, "recurrent_states", {}).values()))
    assert states > 0 and keys_values > 0
    # float32 model; the state is fp32 by default, and transformers' conv windows hold conv_kernel inputs (eager)
    model = Model.from_config(config, accounting="eager").with_conventions(kv_bytes=4)
    assert model.evaluate("kv_cache", batch=batch, seq=seq) == keys_values
    assert model.evaluate("recurrent_state", batch=batch, seq=seq) == states


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, past", [(2, 9), (1, 70)])
def test_a_decode_step_takes_the_recurrent_update(case, batch, past):
    """One token after a cached prefix: the conv updates its window (seq + 1 outputs), the delta rule takes
    one element-wise step (no product the counter sees), attention reads past + 1 keys."""
    config = CONFIGS[case]
    check_decode_step_flops(build(config, eager_experts=True), config, batch, past)


@pytest.mark.parametrize("case", NEMOTRON_CASES)
def test_nemotron_h_parameters_equal_numel(case):
    """Every kind of block, the routers' weights included (their e_score_correction_bias is a buffer)."""
    assert Model.from_config(CONFIGS[case]).evaluate("params") == meta_params(CONFIGS[case])


@pytest.mark.parametrize("case", NEMOTRON_CASES)
def test_a_nemotron_h_config_saved_by_transformers_reads_the_same(case, tmp_path):
    """transformers writes layers_block_type (its own names) and no num_hidden_layers nor pattern."""
    config = CONFIGS[case]
    written = hf_config_dict(config, tmp_path)
    assert "layers_block_type" in written and "hybrid_override_pattern" not in written
    check_saved_config_reads_the_same(config, tmp_path)


def hf_config_dict(config: dict, directory) -> dict:
    import json

    transformers.AutoConfig.for_model(**config).save_pretrained(directory)
    return json.loads((directory / "config.json").read_text())


@pytest.mark.parametrize("case", ["nemotron_h-moe", "nemotron_h-layers_block_type", "nemotron_h-moe-latent"])
def test_check_agrees_with_the_real_nemotron_h_module(case):
    """symform check at its own tiny sizes: every part (saved activations are tests/test_check.py's)."""
    from symform.analysis.memory.oracle_check import check

    report = check(Model.from_config(CONFIGS[case], name=case))
    assert [r for r in report.differences if r.quantity != "saved_activations"] == []
    assert {"params", "forward_flops", "kv_cache", "recurrent_state"} <= {r.quantity for r in report.rows}
    assert {r.part for r in report.rows if r.quantity == "params"} >= {"mlp", "attn"}


def test_qwen3_next_cache_of_a_long_context_is_mostly_state_free():
    """Qwen3-Next-80B-A3B: 12 of 48 layers keep 2 KV heads of 256; the 36 Gated DeltaNet layers keep
    (2·16·128 + 32·128)·3 conv values in bf16 (the kernel of 4 less the new input, as serving engines cache it;
    transformers keeps all 4) and 32·128·128 fp32 state values each, at any context."""
    model = symform.load("qwen3-next-80b-a3b")
    kv = model.evaluate("kv_cache", batch=1, seq=1, past=262143)
    assert kv == 12 * 2 * 2 * 256 * 2 * 262144
    state = (2 * 16 * 128 + 32 * 128) * 3 * 2 + 32 * 128 * 128 * 4
    assert model.evaluate("recurrent_state", batch=1, seq=1, past=0) == model.evaluate("recurrent_state", batch=1, seq=1, past=10**6) == 36 * state
    transformers = (2 * 16 * 128 + 32 * 128) * 4 * 2 + 32 * 128 * 128 * 4
    assert model.with_accounting("eager").evaluate("recurrent_state", batch=1, seq=1, past=0) == 36 * transformers


def test_gated_deltanet_flops_are_linear_in_seq_to_leading_order():
    layer = Model.from_component("gated_deltanet")
    v = layer.vocabulary
    result = symform.derive(layer, "forward_flops", leading=True, large=["seq"]).result.expr
    assert sympy.degree(sympy.expand(result), v["seq"]) == 1
    # the scan's products: 2·C·d_k·d_v (state update) + 2·2·C·d_k·d_v (state reads) per chunk of C tokens
    scan = sympy.expand(result).coeff(v["d_k_lin"] * v["d_v_lin"])
    assert sympy.simplify(scan - 6 * v["batch"] * v["lin_v_heads"] * v["seq"]) == 0


@pytest.mark.parametrize("latent", [12, None])
@pytest.mark.parametrize("batch, seq", [(2, 7), (1, 20)])
def test_nemotron_h_latent_experts_keep_what_eager_pytorch_keeps(latent, batch, seq):
    """bf16 training forward, eager experts: the saved bytes with and without the latent projection (the
    projection's input is the shared MLP's; the back-projection keeps the experts' summed output)."""
    from oracle import build_for_training, saved_for_backward

    config = dict(NEMOTRON_H_LATENT, moe_latent_size=latent)
    kept = saved_for_backward(build_for_training(config, torch.bfloat16, experts_implementation="eager"), input_ids(config, batch, seq))
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": 2, "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq) == kept


def test_a_zero_wide_latent_projection_is_refused_in_one_line():
    """moe_latent_size 0 is not 'no projection' to transformers (that is null): it builds 0-wide experts."""
    from checks import one_line_error

    one_line_error(symform.ConfigError, lambda: Model.from_config(dict(NEMOTRON_H_LATENT, moe_latent_size=0)), "moe_latent_size 0", "null")
    assert Model.from_config(dict(NEMOTRON_H_LATENT, moe_latent_size=None)).evaluate("params") == meta_params(dict(NEMOTRON_H_LATENT, moe_latent_size=None))
