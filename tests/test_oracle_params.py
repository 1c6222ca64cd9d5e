"""Oracle: symform's parameter counts against transformers' own models.

Each expected value is ``sum(p.numel() for p in model.parameters())`` of the
transformers model built, on the meta device (no memory, no weights), from the
very config dict symform reads. ``parameters()`` yields a shared (tied) tensor
once, so a tied head is counted once, as symform counts it.

The modified-config tests start from a real preset config, remove or change a
field, and build the oracle from that same modified dict, so that the defaults
transformers applies (config class field defaults and ``__post_init__``
fill-ins) are what symform's family files are checked against.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import ABSENT, changed, meta_model, meta_params, preset_dict  # noqa: E402

from symform.engine.language.families import presets, supported_model_types  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

def modified(name: str, **changes) -> dict:
    """A preset's config with num_hidden_layers shrunk to 2 and ``changes`` applied
    (a value of ``ABSENT`` removes the field)."""
    return changed({**preset_dict(name), "num_hidden_layers": 2}, changes)


# -- every bundled preset, at its real size ------------------------------------


@pytest.mark.parametrize("name", sorted(presets()))
def test_preset_params_match_transformers(name):
    expected = meta_params(preset_dict(name))
    assert Model.load(name).evaluate("params") == expected


# Model types no published config.json carries (the checkpoints are published under the multimodal type):
# no preset is made up for them; their tiny-model oracle tests (tests/test_family_*.py) check them instead.
WITHOUT_PUBLISHED_CONFIG = {
    "gemma4_text": "Gemma 4 is published as gemma4 configs (Gemma4ForConditionalGeneration, preset gemma-4-31b-it)",
    "llama4_text": "Llama 4 is published as llama4 configs (Llama4ForConditionalGeneration, preset llama-4-maverick)",
    # not a missing file but one symform refuses by name: tests/test_family_hunyuan.py checks the family at tiny sizes
    "hunyuan_v1_moe": "Hunyuan-A13B's config.json writes moe_topk, moe_intermediate_size and num_shared_expert per layer (lists), which symform refuses",
    "umt5": "Google's umT5 checkpoints (google/umt5-base … -xxl) publish config.json without model_type (UMT5ForConditionalGeneration uploads that name dense_act_fn and is_gated_act only)",
}


# Families checked at tiny sizes against transformers (tests/test_family_dense_2026.py) whose published config.json
# is not bundled yet: no preset is made up for them.
PRESET_NOT_BUNDLED_YET = {
    model_type: "its tiny-model oracle tests are in tests/test_family_dense_2026.py; a published config.json is not bundled yet"
    for model_type in (
        "granite", "helium", "arcee", "ministral", "ministral3", "cohere", "cohere2", "glm", "glm4", "olmo", "stablelm", "gpt_neox",
        "codegen", "persimmon", "opt", "bloom", "gpt_bigcode", "vaultgemma", "jais2", "nanochat", "bitnet", "gpt_neo",
        "nemotron", "biogpt",
    )
}  # fmt: skip
# families whose flagship's published config.json no stored copy quotes whole: no preset is made up for them either;
# tests/test_family_moe_2026.py checks them at tiny sizes
WITHOUT_STORED_CONFIG = {
    "flex_olmo": "allenai/FlexOlmo-7x7B-1T's config.json is quoted nowhere symform's presets are taken from",
    "granitemoeshared": "no published checkpoint of its own found (IBM's shared-MLP MoE models ship as granitemoehybrid)",
}
# Model types read (each exact in symform check against transformers at tiny sizes, tests/test_family_encoder_relatives.py
# and tests/test_family_bart.py) whose flagship config.json was not found verbatim in a source symform could cite yet
PRESET_NOT_YET = {
    model_type: "no verbatim copy of a flagship's published config.json found yet"
    for model_type in ("electra", "roberta-prelayernorm", "xlm-roberta-xl", "megatron-bert", "data2vec-text", "ernie", "bert-generation",
                       "bart", "mbart", "blenderbot", "blenderbot-small", "plbart", "m2m_100")
}  # fmt: skip

# image-text families checked at tiny sizes (tests/test_family_<type>.py) whose flagship's published config.json was
# not found in a source symform could cite yet: no preset is made up for them
IMAGE_TEXT_PRESET_NOT_YET = {
    model_type: "its tiny-model oracle tests are in tests/test_family_{model_type}.py; no citable copy of a flagship's config.json yet"
    for model_type in ("cosmos3_omni", "deepseek_vl", "idefics3", "internvl", "lighton_ocr", "llava_next", "llava_next_video",
                       "llava_onevision", "qianfan_ocr", "smolvlm", "video_llava", "vipllava")
}  # fmt: skip


def test_presets_cover_every_family():
    model_types = {preset_dict(name)["model_type"] for name in presets()}
    without = {*WITHOUT_PUBLISHED_CONFIG, *PRESET_NOT_BUNDLED_YET, *WITHOUT_STORED_CONFIG, *PRESET_NOT_YET, *IMAGE_TEXT_PRESET_NOT_YET}
    assert model_types == set(supported_model_types()) - without


# -- transformers' defaults on modified configs -------------------------------

# (id, preset, changes, (config attribute, value transformers resolves it to))
# The last element checks the premise of each case on the oracle's own config:
# that the change really makes transformers fall back to the default we mean
# to exercise (and, where it matters, that the default differs from what the
# preset had, so the comparison can tell the two apart).
MODIFIED = [
    # num_key_value_heads absent
    ("llama-kv-absent", "llama-3.2-1b", {"num_key_value_heads": ABSENT}, ("num_key_value_heads", 32)),  # = heads (preset: 8)
    ("qwen3-kv-absent", "qwen3-32b", {"num_key_value_heads": ABSENT}, ("num_key_value_heads", 32)),  # Qwen3Config default 32 (preset: 8, heads 64)
    ("mistral-kv-absent-heads16", "mistral-7b-v0.3", {"num_key_value_heads": ABSENT, "num_attention_heads": 16}, ("num_key_value_heads", 8)),  # MistralConfig default 8, not heads
    ("qwen2-kv-absent", "qwen2.5-7b", {"num_key_value_heads": ABSENT, "num_attention_heads": 64, "hidden_size": 4096}, ("num_key_value_heads", 32)),  # Qwen2Config default 32
    # num_key_value_heads null: falls back to the number of heads. (Mistral is
    # left out: MistralConfig in transformers 5.x types the field as plain
    # ``int`` and its strict dataclass refuses null outright.)
    ("llama-kv-null", "llama-3.1-8b", {"num_key_value_heads": None}, ("num_key_value_heads", 32)),
    ("qwen2-kv-null", "qwen2-7b", {"num_key_value_heads": None}, ("num_key_value_heads", 28)),
    ("qwen3-kv-null", "qwen3-0.6b", {"num_key_value_heads": None}, ("num_key_value_heads", 16)),
    # head_dim absent
    ("llama-head-dim-absent", "llama-3.2-1b", {"head_dim": ABSENT, "num_attention_heads": 16}, ("head_dim", 128)),  # hidden // heads (preset head_dim: 64)
    ("qwen3-head-dim-absent", "qwen3-0.6b", {"head_dim": ABSENT}, ("head_dim", 128)),  # Qwen3Config default 128, not hidden // heads = 64
    ("qwen3-head-dim-absent-large", "qwen3-32b", {"head_dim": ABSENT, "num_attention_heads": 32}, ("head_dim", 128)),  # hidden // heads would be 160
    ("mistral-head-dim-null", "mistral-7b-v0.1", {"head_dim": None, "num_attention_heads": 16}, ("head_dim", 256)),  # hidden // heads
    ("llama-head-dim-null", "llama-3.2-3b", {"head_dim": None}, ("head_dim", 128)),  # hidden // heads = 3072 // 24
    # tie_word_embeddings
    ("qwen3-untied-made-tied", "qwen3-8b", {"tie_word_embeddings": True}, ("tie_word_embeddings", True)),
    ("llama-untied-made-tied", "llama-3.1-8b", {"tie_word_embeddings": True}, ("tie_word_embeddings", True)),
    ("qwen3-tied-made-untied", "qwen3-0.6b", {"tie_word_embeddings": False}, ("tie_word_embeddings", False)),
    ("llama-tied-made-untied", "llama-3.2-1b", {"tie_word_embeddings": False}, ("tie_word_embeddings", False)),
    ("qwen2-tied-made-untied", "qwen2.5-0.5b", {"tie_word_embeddings": False}, ("tie_word_embeddings", False)),
    ("mistral-untied-made-tied", "mistral-7b-v0.3", {"tie_word_embeddings": True}, ("tie_word_embeddings", True)),
    ("qwen3-tie-absent", "qwen3-0.6b", {"tie_word_embeddings": ABSENT}, ("tie_word_embeddings", False)),  # default: untied
    ("llama-tie-absent", "llama-3.2-1b", {"tie_word_embeddings": ABSENT}, ("tie_word_embeddings", False)),
    ("qwen2-tie-absent", "qwen2.5-0.5b", {"tie_word_embeddings": ABSENT}, ("tie_word_embeddings", False)),
    # biases
    ("llama-attention-bias", "llama-3.2-1b", {"attention_bias": True}, ("attention_bias", True)),
    ("llama-mlp-bias", "llama-3.2-1b", {"mlp_bias": True}, ("mlp_bias", True)),
    ("llama-both-biases-untied", "llama-3.1-8b", {"attention_bias": True, "mlp_bias": True}, ("mlp_bias", True)),
    ("qwen3-attention-bias", "qwen3-0.6b", {"attention_bias": True}, ("attention_bias", True)),
    ("llama-biases-absent", "llama-3.2-1b", {"attention_bias": ABSENT, "mlp_bias": ABSENT}, ("mlp_bias", False)),
]


@pytest.mark.parametrize("preset,changes,premise", [pytest.param(*case[1:], id=case[0]) for case in MODIFIED])
def test_modified_config_params_match_transformers(preset, changes, premise):
    config = modified(preset, **changes)
    model = meta_model(config)
    attribute, resolved = premise
    assert getattr(model.config, attribute) == resolved, "the test's premise about transformers' default no longer holds"
    expected = sum(p.numel() for p in model.parameters())
    assert Model.from_config(config, name=preset).evaluate("params") == expected


def test_tying_changes_the_count_by_one_embedding_matrix():
    """The tied and untied variants of one config differ by exactly vocab x hidden,
    in transformers and in symform alike."""
    untied = modified("qwen3-0.6b", tie_word_embeddings=False)
    tied = modified("qwen3-0.6b", tie_word_embeddings=True)
    oracle_diff = meta_params(untied) - meta_params(tied)
    assert oracle_diff == untied["vocab_size"] * untied["hidden_size"]
    assert Model.from_config(untied).evaluate("params") - Model.from_config(tied).evaluate("params") == oracle_diff
