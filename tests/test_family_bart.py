"""BART's decoder and its relatives as their causal-LM and conditional-generation classes build them (BART, mBART,
Marian, Pegasus, Blenderbot, BlenderbotSmall, PLBart, and M2M-100's encoder-decoder): every number `symform check` compares (parameters per part, the cross-attention each layer
builds and never runs included, forward and backward FLOPs, the KV cache transformers' DynamicCache holds, the
activations eager PyTorch keeps) against a tiny instance of transformers' own class; learned positions with and
without fairseq's offset, frozen sinusoidal tables, post- and pre-norm layers; refusals in one line."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import symform  # noqa: E402
from symform.analysis.memory.oracle_check import check  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

CLASSES = {
    "bart": "BartForCausalLM", "mbart": "MBartForCausalLM", "marian": "MarianForCausalLM", "pegasus": "PegasusForCausalLM",
    "blenderbot": "BlenderbotForCausalLM", "blenderbot-small": "BlenderbotSmallForCausalLM", "plbart": "PLBartForCausalLM",
}  # fmt: skip
SEQ2SEQ = {
    "bart": "BartForConditionalGeneration", "mbart": "MBartForConditionalGeneration", "marian": "MarianMTModel", "pegasus": "PegasusForConditionalGeneration",
    "blenderbot": "BlenderbotForConditionalGeneration", "blenderbot-small": "BlenderbotSmallForConditionalGeneration",
    "plbart": "PLBartForConditionalGeneration", "m2m_100": "M2M100ForConditionalGeneration",
}  # fmt: skip
# 4 heads of 12 (d_model 48), an MLP of 80; encoder sizes as the decoder's (transformers sizes the cache by encoder_layers)
TINY = dict(
    d_model=48, decoder_layers=2, encoder_layers=2, decoder_ffn_dim=80, encoder_ffn_dim=80, decoder_attention_heads=4, encoder_attention_heads=4,
    vocab_size=101, max_position_embeddings=40, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
    encoder_layerdrop=0.0, decoder_layerdrop=0.0,  # training skips layers at random otherwise (M2M-100's default)
)  # fmt: skip
SETTINGS = [
    {},
    {"tie_word_embeddings": False, "scale_embedding": True},
    {"dropout": 0.0, "attention_dropout": 0.1, "activation_dropout": 0.1},
]


def tiny(model_type: str, **changes) -> dict:
    extra = {"decoder_vocab_size": 101} if model_type == "marian" else {}
    return {"model_type": model_type, **TINY, **extra, "architectures": [CLASSES.get(model_type, SEQ2SEQ[model_type])], **changes}


@pytest.mark.parametrize("model_type", list(CLASSES))
@pytest.mark.parametrize("setting", range(len(SETTINGS)))
def test_symform_check_agrees_on_every_number(model_type, setting):
    report = check(Model.from_config(tiny(model_type, **SETTINGS[setting])))
    assert report.transformers_class == CLASSES[model_type]
    assert not report.differences, report.differences


@pytest.mark.parametrize("model_type", [*SEQ2SEQ])
@pytest.mark.parametrize("setting", range(len(SETTINGS)))
def test_the_encoder_decoder_class_agrees_on_every_number(model_type, setting):
    """The conditional-generation class: the encoder over 11 tokens, the decoder over 8 with cross-attention to
    them (its keys and values cached), the head plus final_logits_bias (M2M-100: none); an encoder 96 wide in its
    MLP beside the decoder's 80, and 4 heads beside the decoder's 8 (BART's sizes each stack by its own fields)."""
    config = {**tiny(model_type, **SETTINGS[setting]), "architectures": [SEQ2SEQ[model_type]], "encoder_ffn_dim": 96, "decoder_attention_heads": 8}
    report = check(Model.from_config(config))
    assert report.transformers_class == SEQ2SEQ[model_type]
    assert not report.differences, report.differences


def test_the_params_of_bart_large_sizes_equal_transformers():
    """BartForCausalLM at BART-large's sizes (1024 wide, 12 decoder layers, 16 heads, 4096 MLP, 50,265 tokens)."""
    config = {"model_type": "bart", "architectures": ["BartForCausalLM"]}
    with torch.device("meta"):
        module = transformers.BartForCausalLM(transformers.AutoConfig.for_model("bart"))
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize(
    "model_type, changes, named",
    [
        ("bart", {"architectures": ["BartForSequenceClassification"]}, "architectures"),
        ("bart", {"decoder_attention_heads": 5}, "decoder_attention_heads"),
        ("bart", {"encoder_attention_heads": 5}, "encoder_attention_heads"),
        ("bart", {"dropout": 1.0}, "dropout"),
        ("marian", {"decoder_vocab_size": 120}, "decoder_vocab_size"),
        ("marian", {"share_encoder_decoder_embeddings": False}, "share_encoder_decoder_embeddings"),
    ],
)
def test_what_is_not_modelled_is_refused_in_one_line(model_type, changes, named):
    with pytest.raises(symform.ConfigError, match=named) as refusal:
        Model.from_config(tiny(model_type, **changes))
    assert "\n" not in str(refusal.value)


@pytest.mark.parametrize("preset", ["pegasus-large", "opus-mt-en-de"])
def test_flagship_params_equal_transformers(preset):
    """The published config.json's class on the meta device; the frozen sinusoidal tables are parameters there
    (2 stacks x max_position_embeddings x d_model: PEGASUS-large's 2,097,152 beside the 568,699,904 trained ones)."""
    from oracle import preset_dict

    config = preset_dict(preset)
    with torch.device("meta"):
        module = getattr(transformers, config["architectures"][0])(transformers.AutoConfig.for_model(**config))
    assert symform.load(preset).evaluate("params") == sum(p.numel() for p in module.parameters())


def test_pegasus_large_counts_its_sinusoidal_tables_beside_the_trained_weights():
    """By hand: 16 + 16 pre-norm layers of 1024 wide, 16 heads, MLP 4096, 96,103 tokens tied, sinusoidal positions."""
    d, ff, vocab, positions = 1024, 4096, 96103, 1024
    attention, mlp, norm = 4 * (d * d + d), 2 * d * ff + ff + d, 2 * d
    encoder_layer, decoder_layer = attention + mlp + 2 * norm, 2 * attention + mlp + 3 * norm
    expected = vocab * d + 16 * encoder_layer + 16 * decoder_layer + 2 * norm + 2 * positions * d
    assert expected == 570_797_056
    assert symform.load("pegasus-large").evaluate("params") == expected
