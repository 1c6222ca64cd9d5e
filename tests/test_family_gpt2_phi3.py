"""Oracle: the gpt2 and phi3 families against transformers' own models.

Tiny GPT2LMHeadModel and Phi3ForCausalLM models (random init, float32, eager
attention, CPU) are built from each config dict; symform reads the very same
dict. Parameters are checked against ``numel`` (on the meta device and on the
CPU model, whose ``parameters()`` yields a tied tensor once), FLOPs against
``torch.utils.flop_counter.FlopCounterMode``, both in total and module by
module: every part symform names is matched to the transformers module of
that name (c_attn, c_proj, c_fc, qkv_proj, gate_up_proj, ...). Every expected
value comes from transformers or the counter, never from symform's formulas.
"""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import (  # noqa: E402
    ABSENT,
    build,
    changed,
    count_forward,
    count_forward_backward,
    global_counts,
    input_ids,
    meta_params,
)

from symform.engine.errors import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

GPT2_BASE = {"model_type": "gpt2", "vocab_size": 101, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 16}
PHI3_BASE = {
    "model_type": "phi3",
    "vocab_size": 101,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "original_max_position_embeddings": 64,
    "partial_rotary_factor": 0.5,
    # Phi3Config's token ids (32000) lie outside a 101-token vocabulary
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

# (id, base, changes). GPT-2: tied by default, n_inner absent/null/given,
# cross-attention (parameters only in a language-model forward), options that
# change element-wise work only. Phi-3: GQA, MHA (num_key_value_heads absent
# or null), MQA, tied and untied, a head_dim field other than hidden / heads,
# a sliding window shorter than the sequence, bias flags Phi-3 ignores.
CONFIGS = [
    ("gpt2-tied-inner-absent", GPT2_BASE, {}),
    ("gpt2-untied-inner48", GPT2_BASE, {"tie_word_embeddings": False, "n_inner": 48}),
    ("gpt2-tied-inner-null-nctx-ignored", GPT2_BASE, {"tie_word_embeddings": True, "n_inner": None, "n_ctx": 8}),
    ("gpt2-cross-attention-untied", GPT2_BASE, {"add_cross_attention": True, "tie_word_embeddings": False, "n_inner": 40}),
    (
        "gpt2-8heads-layer-scaled-relu",  # reorder_and_upcast_attn is refused (tests/test_config_fields.py)
        GPT2_BASE,
        {"n_head": 8, "scale_attn_by_inverse_layer_idx": True, "activation_function": "relu"},
    ),
    ("gpt2-positions-absent", GPT2_BASE, {"n_positions": ABSENT, "n_layer": 1}),  # GPT2Config's 1024 rows
    ("phi3-gqa-untied", PHI3_BASE, {}),
    ("phi3-mha-tied-kv-absent", PHI3_BASE, {"num_key_value_heads": ABSENT, "tie_word_embeddings": True}),
    ("phi3-mha-kv-null", PHI3_BASE, {"num_key_value_heads": None, "partial_rotary_factor": ABSENT}),
    ("phi3-mqa-tied", PHI3_BASE, {"num_key_value_heads": 1, "tie_word_embeddings": True, "partial_rotary_factor": 0.75}),
    ("phi3-gqa-head-dim24", PHI3_BASE, {"head_dim": 24}),
    ("phi3-sliding-window3", PHI3_BASE, {"sliding_window": 3}),
    ("phi3-bias-flags-ignored", PHI3_BASE, {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True}),
]

SHAPES = [(2, 7), (3, 5), (1, 1), (1, 16)]  # seq <= n_positions (16) throughout

# Each symform part (full path) and the transformers modules it stands for
# (module paths below the top-level model, any layer index).
LAYER = r"(?:transformer\.h|model\.layers)\.\d+\."
MODULES = {
    "gpt2": {
        "embed/wte": r"transformer\.wte",
        "embed/wpe": r"transformer\.wpe",
        "layers/attn_norm": LAYER + r"ln_1",
        "layers/attn/c_attn": LAYER + r"attn\.c_attn",
        "layers/attn/c_proj": LAYER + r"attn\.c_proj",
        "layers/mlp_norm": LAYER + r"ln_2",
        "layers/mlp/c_fc": LAYER + r"mlp\.c_fc",
        "layers/mlp/c_proj": LAYER + r"mlp\.c_proj",
        "layers/cross_attn_norm": LAYER + r"ln_cross_attn",
        "layers/cross_attn/c_attn": LAYER + r"crossattention\.c_attn",
        "layers/cross_attn/q_attn": LAYER + r"crossattention\.q_attn",
        "layers/cross_attn/c_proj": LAYER + r"crossattention\.c_proj",
        "final_norm": r"transformer\.ln_f",
        "lm_head": r"lm_head",
    },
    "phi3": {
        "embed": r"model\.embed_tokens",
        "layers/attn_norm": LAYER + r"input_layernorm",
        "layers/attn/qkv_proj": LAYER + r"self_attn\.qkv_proj",
        "layers/attn/o_proj": LAYER + r"self_attn\.o_proj",
        "layers/mlp_norm": LAYER + r"post_attention_layernorm",
        "layers/mlp/gate_up_proj": LAYER + r"mlp\.gate_up_proj",
        "layers/mlp/down_proj": LAYER + r"mlp\.down_proj",
        "final_norm": r"model\.norm",
        "lm_head": r"lm_head",
    },
}
ATTENTION_PRODUCTS = ("layers/attn/core/scores", "layers/attn/core/context")


def part_for(family: str, module: str) -> str:
    """The one symform path whose transformers module pattern matches ``module``."""
    found = {path for path, pattern in MODULES[family].items() if re.fullmatch(pattern, module)}
    assert len(found) == 1, (module, found)
    return found.pop()


def by_part(model: Model, quantity: str, **workload) -> dict[str, int]:
    """symform's nonzero leaf values by path; a tied head's single part is named lm_head, and
    the local and global layers of a model with a sliding window are one stack, as in transformers."""
    merged: dict[str, int] = {}
    for path, value in model.evaluate_breakdown(quantity, depth=None, **workload).items():
        path = "lm_head" if path == "lm_head/shared" else re.sub(r"^layers/(local|global)/", "layers/", path)
        if value:
            merged[path] = merged.get(path, 0) + value
    return merged


CASES = [pytest.param(base, changes, id=name) for name, base, changes in CONFIGS]


@pytest.mark.parametrize("base,changes", CASES)
def test_params_match_numel(base, changes):
    config = changed(base, changes)
    model = build(config)
    expected = sum(p.numel() for p in model.parameters())
    assert meta_params(config) == expected
    assert Model.from_config(config, name="tiny").with_conventions(windowed=0).evaluate("params") == expected


@pytest.mark.parametrize("base,changes", CASES)
def test_params_by_part_match_modules(base, changes):
    """Every transformers parameter belongs to the symform part of its module's
    name, and each part owns exactly those parameters (a tied head owns none)."""
    config = changed(base, changes)
    family = config["model_type"]
    model = build(config)
    expected: dict[str, int] = {}
    for name, p in model.named_parameters():  # a tied lm_head.weight is yielded once, as the embedding
        path = part_for(family, name.rsplit(".", 1)[0])
        expected[path] = expected.get(path, 0) + p.numel()
    assert by_part(Model.from_config(config, name="tiny").with_conventions(windowed=0), "params") == expected


@pytest.mark.parametrize("base,changes", CASES)
def test_forward_flops_match_counter(base, changes):
    config = changed(base, changes)
    model = build(config)
    sym = Model.from_config(config, name="tiny").with_conventions(windowed=0)
    for batch, seq in SHAPES:
        counter = count_forward(model, input_ids(config, batch, seq))
        assert sym.evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops(), (batch, seq, global_counts(counter))


@pytest.mark.parametrize("base,changes", CASES)
def test_forward_flops_by_part_match_counter_modules(base, changes):
    """Each projection's FLOPs equal the counter's for the module of that name
    (summed over layers); the score and context products equal its bmm."""
    config = changed(base, changes)
    family = config["model_type"]
    model = build(config)
    batch, seq = 2, 7
    counter = count_forward(model, input_ids(config, batch, seq))
    projections = set(MODULES[family].values())
    expected: dict[str, int] = {}
    for name, ops in counter.get_flop_counts().items():
        module = name.partition(".")[2]
        if name == "Global" or not any(re.fullmatch(p, module) for p in projections):
            continue  # containers (blocks, attention, MLP) count their children again
        path = part_for(family, module)
        expected[path] = expected.get(path, 0) + sum(ops.values())
    counts = global_counts(counter)
    bmm = counts.get("aten.bmm", 0) + counts.get("aten.baddbmm", 0)  # QKᵀ is a baddbmm with reorder_and_upcast_attn
    assert bmm > 0 and sum(expected.values()) + bmm == counter.get_total_flops()
    got = by_part(Model.from_config(config, name="tiny").with_conventions(windowed=0), "forward_flops", batch=batch, seq=seq)
    assert sum(got.pop(p) for p in ATTENTION_PRODUCTS) == bmm
    assert got == expected


@pytest.mark.parametrize("base,changes", CASES)
def test_forward_backward_flops_match_counter(base, changes):
    """Forward + backward under the counter is exactly 3x the forward (every
    counted op is a matrix product whose two operands both need gradients),
    and symform's forward + backward equals it."""
    config = changed(base, changes)
    model = build(config)
    sym = Model.from_config(config, name="tiny").with_conventions(windowed=0)
    for batch, seq in SHAPES[:2] + SHAPES[3:]:
        ids = input_ids(config, batch, seq)
        forward = count_forward(model, ids).get_total_flops()
        both = count_forward_backward(model, ids)
        assert both.get_total_flops() == 3 * forward
        assert set(global_counts(both)) <= {"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm"}
        assert sym.evaluate("forward_flops", batch=batch, seq=seq) == forward
        assert sym.evaluate("backward_flops", batch=batch, seq=seq) == both.get_total_flops() - forward


# -- premises and refusals ----------------------------------------------------------


def test_gpt2_defaults_premises():
    """GPT2Config: n_inner null -> 4 * n_embd, tied head, 1024 positions, n_ctx inert."""
    config = changed(GPT2_BASE, {"n_inner": None, "n_positions": ABSENT, "n_ctx": 8})
    model = build(config)
    assert model.transformer.h[0].mlp.c_fc.nf == 4 * 32
    assert model.transformer.wpe.num_embeddings == 1024
    assert model.lm_head.weight is model.transformer.wte.weight
    sym = Model.from_config(config, name="tiny").with_conventions(windowed=0)
    assert sym.values["d_ff"] == 128 and sym.values["max_positions"] == 1024


def test_phi3_premises():
    """Phi-3 reads a head_dim field when present, ignores bias flags, and its
    sliding window only masks: eager attention computes the full products."""
    wide = build(changed(PHI3_BASE, {"head_dim": 24}))
    assert wide.model.layers[0].self_attn.qkv_proj.out_features == (4 + 2 * 2) * 24
    assert wide.model.layers[0].self_attn.o_proj.in_features == 4 * 24
    biased = build(changed(PHI3_BASE, {"attention_bias": True, "mlp_bias": True}))
    assert all(m.bias is None for m in biased.modules() if isinstance(m, torch.nn.Linear))
    ids = input_ids(PHI3_BASE, 2, 9)
    windowed = count_forward(build(changed(PHI3_BASE, {"sliding_window": 3})), ids).get_total_flops()
    assert windowed == count_forward(build(PHI3_BASE), ids).get_total_flops()


def test_partial_rotary_factor_changes_neither_params_nor_flops():
    ids = input_ids(PHI3_BASE, 2, 7)
    totals = set()
    for factor in (0.25, 0.5, 1.0):
        model = build(changed(PHI3_BASE, {"partial_rotary_factor": factor}))
        totals.add((sum(p.numel() for p in model.parameters()), count_forward(model, ids).get_total_flops()))
    assert len(totals) == 1


def test_gpt2_heads_must_divide_hidden_size():
    config = changed(GPT2_BASE, {"n_embd": 30})
    with pytest.raises(ValueError, match="divisible"):
        build(config)
    with pytest.raises(ConfigError, match="d_model % n_heads == 0"):
        Model.from_config(config, name="tiny").with_conventions(windowed=0)


def test_phi3_null_head_dim_is_refused():
    config = changed(PHI3_BASE, {"head_dim": None})
    with pytest.raises(TypeError):
        build(config)
    with pytest.raises(ConfigError, match="head_dim"):
        Model.from_config(config, name="tiny").with_conventions(windowed=0)


def test_gpt2_cross_attention_adds_parameters_only():
    plain = changed(GPT2_BASE, {})
    cross = changed(GPT2_BASE, {"add_cross_attention": True})
    d, layers = 32, 2
    # per block: c_attn d->2d, q_attn d->d, c_proj d->d (with biases) and a LayerNorm
    assert meta_params(cross) - meta_params(plain) == layers * (4 * d * d + 4 * d + 2 * d)
    a, b = Model.from_config(plain), Model.from_config(cross)
    assert b.evaluate("params") - a.evaluate("params") == layers * (4 * d * d + 4 * d + 2 * d)
    assert b.evaluate("forward_flops", batch=2, seq=7) == a.evaluate("forward_flops", batch=2, seq=7)
    assert b.evaluate("active_params") == a.evaluate("active_params")
