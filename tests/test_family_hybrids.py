"""Hybrid language models built from recurrent or convolutional mixers beside attention: Mamba-2 alone
(Mamba2ForCausalLM), Mamba-2 decoder layers with attention ones (Bamba, Granite 4.0-H with its experts and shared
MLP), Mamba-2 and attention side by side in every layer (Falcon-H1), Mamba-1 with attention and experts (Jamba) and
gated short convolutions with attention (LFM2). Parameters, forward FLOPs, KV cache and recurrent state against
transformers' own modules (float32, eager attention and experts, torch fallback paths), saved activations under the
eager accounting where symform models them, and the one-line refusals.

What PyTorch's FLOP counter sees in these torch paths: every projection (addmm/mm), the depthwise convolutions
(counted by aten.convolution as channels·kernel multiply-adds per output position, the padded positions included),
Mamba-2's chunked scan einsums (bmm), Jamba's dt_proj weight product and its token-by-token state read (one
[d_inner, state]·[state, 1] bmm per token), attention's two products. Nothing element-wise; no triangular solve
(only Gated DeltaNet has those), so the counter's forward total is the expected value as it stands.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from family_checks import check_saved_activations  # noqa: E402
from oracle import TINY, build, check_saved_config_reads_the_same, count_forward, input_ids, meta_params  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import symform  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

# Mamba-2 alone: 8 heads of 16 spanning expand (2) x hidden (64), two groups of B and C, 16-token chunks
MAMBA2 = dict(
    model_type="mamba2", hidden_size=64, num_hidden_layers=2, vocab_size=101, num_heads=8, head_dim=16, state_size=6,
    n_groups=2, chunk_size=16, conv_kernel=4,
)  # fmt: skip
# projection biases, no convolution bias, one group, a 3-tap convolution, the head tied to the embedding
MAMBA2_BIASED = dict(MAMBA2, use_bias=True, use_conv_bias=False, tie_word_embeddings=True, n_groups=1, conv_kernel=3)
# Mamba-2, attention (half-rotary, head_dim hidden/heads), Mamba-2; a SwiGLU MLP after each
BAMBA = dict(
    TINY, model_type="bamba", num_hidden_layers=3, attn_layer_indices=[1], mamba_n_heads=8, mamba_d_state=6,
    mamba_n_groups=2, mamba_chunk_size=16,
)  # fmt: skip
# Granite 4.0-H: no positional encoding, 4 experts (2 a token) beside a shared MLP wider than them
GRANITE = dict(
    TINY, model_type="granitemoehybrid", intermediate_size=24, shared_intermediate_size=40, num_hidden_layers=3,
    layer_types=["linear_attention", "attention", "linear_attention"], mamba_n_heads=8, mamba_d_state=6, mamba_n_groups=2,
    mamba_chunk_size=16, num_local_experts=4, num_experts_per_tok=2, position_embedding_type="nope",
)  # fmt: skip
# without experts (the shared MLP alone), rotary positions, a tied head; the older kind names Granite's published
# configs write (mamba, attention), which transformers renames
GRANITE_DENSE = dict(
    GRANITE, layer_types=["attention", "mamba"], num_hidden_layers=2, num_local_experts=0,
    position_embedding_type="rope", tie_word_embeddings=True,
)  # fmt: skip
# Falcon-H1: attention and a 96-wide Mamba-2 mixer side by side, with its gated RMSNorm and out_proj bias
FALCON_H1 = dict(
    TINY, model_type="falcon_h1", mamba_d_ssm=96, mamba_n_heads=8, mamba_d_state=6, mamba_n_groups=2,
    mamba_chunk_size=16, mamba_rms_norm=True, projectors_bias=True,
)  # fmt: skip
# the mixer expand x hidden wide (mamba_d_ssm null), no norm (the gate alone), no out_proj bias, one group
FALCON_H1_NO_NORM = dict(FALCON_H1, mamba_d_ssm=None, mamba_rms_norm=False, projectors_bias=False, mamba_n_groups=1)
# Jamba: layers 0 and 2 Mamba, 1 and 3 attention (period 2, offset 1); experts at layers 0 and 3 (period 3, offset 0)
JAMBA = dict(
    TINY, model_type="jamba", num_hidden_layers=4, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=3,
    expert_layer_offset=0, num_experts=4, mamba_d_state=6, mamba_dt_rank=5,
)  # fmt: skip
# LFM2: conv, attention, conv; the MLP int(2/3 · 96) = 64 wide, rounded up to a multiple of 8
LFM2 = dict(TINY, model_type="lfm2", num_hidden_layers=3, layer_types=["conv", "full_attention", "conv"], block_multiple_of=8)
# the older names: kinds from full_attn_idxs, block_ff_dim (200: int(2/3 of it) 133, rounded up to 136),
# tie_embedding false; biases on the convolution and its projections
LFM2_OLD_NAMES = dict(
    {k: v for k, v in LFM2.items() if k not in ("layer_types", "intermediate_size")}, full_attn_idxs=[1], conv_bias=True,
    tie_embedding=False, block_ff_dim=200,
)  # fmt: skip
CONFIGS = {
    "mamba2": MAMBA2, "mamba2-biased-tied": MAMBA2_BIASED, "bamba": BAMBA, "granitemoehybrid": GRANITE,
    "granitemoehybrid-dense-rope": GRANITE_DENSE, "falcon_h1": FALCON_H1, "falcon_h1-no-norm": FALCON_H1_NO_NORM,
    "jamba": JAMBA, "lfm2": LFM2, "lfm2-old-names": LFM2_OLD_NAMES,
}  # fmt: skip
# saved activations under the eager accounting: not modelled for Jamba's token-by-token scan, nor for Falcon-H1's
# μP-scaled mixer; Mamba2ForCausalLM's fp32 residual stream (residual_in_fp32) is modelled in float32 only
SAVED = {
    "mamba2": (torch.float32,), "mamba2-biased-tied": (torch.float32,), "bamba": (torch.float32, torch.bfloat16),
    "granitemoehybrid": (torch.float32, torch.bfloat16), "granitemoehybrid-dense-rope": (torch.float32, torch.bfloat16),
    "lfm2": (torch.float32, torch.bfloat16), "lfm2-old-names": (torch.float32, torch.bfloat16),
}  # fmt: skip


@pytest.mark.parametrize("case", CONFIGS)
def test_parameters_equal_numel(case):
    assert Model.from_config(CONFIGS[case]).evaluate("params") == meta_params(CONFIGS[case])


def test_lfm2_mlp_width_follows_transformers_rule():
    """int(2·200/3) = 133, times the multiplier 1, rounded up to a multiple of 8: 136 (w1, w3: 64 x 136; w2 back)."""
    mlp = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**LFM2_OLD_NAMES)).model.layers[0].feed_forward
    assert mlp.w1.weight.shape == (136, 64)
    model = Model.from_config(LFM2_OLD_NAMES)
    assert model.evaluate_breakdown("params", depth=3)["layers/full/mlp"] == 3 * 64 * 136


# (2, 70): several chunks, the last padded; (1, 2): fewer tokens than the convolution's taps; (1, 32): whole chunks
@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq", [(2, 70), (1, 2), (1, 32)])
def test_forward_flops_equal_the_counter(case, batch, seq):
    config = CONFIGS[case]
    counted = count_forward(build(config, eager_experts=True), input_ids(config, batch, seq)).get_total_flops()
    assert Model.from_config(config).with_conventions(training=0).evaluate("forward_flops", batch=batch, seq=seq) == counted


def cache_after(model, config: dict, batch: int, seq: int):
    with torch.no_grad():
        return model(input_ids=input_ids(config, batch, seq), use_cache=True).past_key_values


def tensors_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, seq", [(2, 7), (1, 2), (3, 40)])
def test_cache_and_state_bytes_equal_the_tensors_transformers_keeps(case, batch, seq):
    """Attention layers keep keys and values for every token; the Mamba and convolution layers a window of
    conv_kernel inputs and (Mamba) a state matrix, whatever the sequence (seq 2 is shorter than the window)."""
    config = CONFIGS[case]
    cache = cache_after(build(config, eager_experts=True), config, batch, seq)
    keys_values = tensors_bytes(t for layer in cache.layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None)))
    states = tensors_bytes(t for layer in cache.layers for t in (*getattr(layer, "conv_states", {}).values(), *getattr(layer, "recurrent_states", {}).values()))
    assert states > 0
    # float32 model; the state is fp32 by default, and transformers' conv windows hold conv_kernel inputs (eager)
    model = Model.from_config(config, accounting="eager").with_conventions(kv_bytes=4)
    assert model.evaluate("kv_cache", batch=batch, seq=seq) == keys_values
    assert model.evaluate("recurrent_state", batch=batch, seq=seq) == states


@pytest.mark.parametrize("case", CONFIGS)
@pytest.mark.parametrize("batch, past", [(2, 9), (1, 40)])
def test_a_decode_step_takes_the_recurrent_update(case, batch, past):
    """One token after a cached prefix: the convolutions update their window, Mamba-2 takes one state step (one
    [head_dim, state]·[state, 1] product per head), Jamba's Mamba one [d_inner, state]·[state, 1] product, attention
    reads past + 1 keys."""
    config = CONFIGS[case]
    model = build(config, eager_experts=True)
    cache = cache_after(model, config, batch, past)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=input_ids(config, batch, 1), cache=cache, use_cache=True)
    symbolic = Model.from_config(config).with_conventions(training=0, decoding=1)
    assert symbolic.evaluate("forward_flops", batch=batch, seq=1, past=past) == counter.get_total_flops()


@pytest.mark.parametrize("case, dtype", [(case, dtype) for case, dtypes in SAVED.items() for dtype in dtypes])
@pytest.mark.parametrize("batch, seq", [(2, 8), (1, 3)])
def test_saved_activations_equal_what_eager_pytorch_keeps(case, dtype, batch, seq):
    check_saved_activations(CONFIGS[case], dtype, batch=batch, seq=seq)


@pytest.mark.parametrize("case", ["bamba", "granitemoehybrid", "falcon_h1", "lfm2"])
def test_a_config_saved_by_transformers_reads_the_same(case, tmp_path):
    """transformers writes its resolved fields (mamba_d_head, layer_types, LFM2's intermediate_size beside
    full_attn_idxs) and drops none symform reads."""
    quantities = ("forward_flops", "kv_cache", "recurrent_state") if case == "falcon_h1" else ("forward_flops", "saved_activations", "kv_cache")
    check_saved_config_reads_the_same(CONFIGS[case], tmp_path, quantities)


# Granite without position_embedding_type (transformers' default, None): no rotary positions, and check's count of
# the kinds a tiny config must keep finds no kind named there
CHECKED = {**CONFIGS, "granitemoehybrid-no-position-type": {k: v for k, v in GRANITE.items() if k != "position_embedding_type"}}


@pytest.mark.parametrize("case", ["mamba2", "bamba", "granitemoehybrid", "granitemoehybrid-no-position-type", "falcon_h1", "jamba", "lfm2"])
def test_check_agrees_with_the_real_module_part_by_part(case):
    """symform check at its own tiny sizes (formulas/check.toml): every part's parameters and FLOPs and the cache."""
    from symform.analysis.memory.oracle_check import check

    report = check(Model.from_config(CHECKED[case], name=case))
    assert [r for r in report.differences if r.quantity != "saved_activations"] == []
    assert {"params", "forward_flops", "kv_cache", "recurrent_state"} <= {r.quantity for r in report.rows}


@pytest.mark.parametrize(
    "config, names",
    [
        (dict(MAMBA2, num_heads=4), ("hidden_size·expand", "num_heads·head_dim")),
        (dict(BAMBA, mamba_d_head=12), ("mamba_n_heads·mamba_d_head", "mamba_expand·hidden_size")),
        (dict(FALCON_H1, mamba_n_heads=5), ("mamba_n_heads·mamba_d_head", "mamba_d_ssm")),
        (dict(JAMBA, attn_layer_offset=2), ("attn_layer_offset", "period")),
        (dict(BAMBA, mamba_d_head="auto"), ("mamba_d_head", "auto")),
    ],
)
def test_sizes_transformers_refuses_are_refused_in_one_line(config, names):
    from checks import one_line_error

    one_line_error(symform.ConfigError, lambda: Model.from_config(config), *names)
