"""BART's decoder and its relatives as their causal-LM classes build them (BART, mBART, Marian, Pegasus, Blenderbot,
BlenderbotSmall, PLBart): every number `symform check` compares (parameters per part, the cross-attention each layer
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
# 4 heads of 12 (d_model 48), an MLP of 80; encoder sizes as the decoder's (transformers sizes the cache by encoder_layers)
TINY = dict(
    d_model=48, decoder_layers=2, encoder_layers=2, decoder_ffn_dim=80, encoder_ffn_dim=80, decoder_attention_heads=4, encoder_attention_heads=4,
    vocab_size=101, max_position_embeddings=40, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
)  # fmt: skip
SETTINGS = [
    {},
    {"tie_word_embeddings": False, "scale_embedding": True},
    {"dropout": 0.0, "attention_dropout": 0.1, "activation_dropout": 0.1},
]


def tiny(model_type: str, **changes) -> dict:
    extra = {"decoder_vocab_size": 101} if model_type == "marian" else {}
    return {"model_type": model_type, **TINY, **extra, "architectures": [CLASSES[model_type]], **changes}


@pytest.mark.parametrize("model_type", list(CLASSES))
@pytest.mark.parametrize("setting", range(len(SETTINGS)))
def test_symform_check_agrees_on_every_number(model_type, setting):
    report = check(Model.from_config(tiny(model_type, **SETTINGS[setting])))
    assert report.transformers_class == CLASSES[model_type]
    assert not report.differences, report.differences


def test_an_untied_marian_head_has_its_own_vocabulary():
    """Marian's decoder table has decoder_vocab_size rows; untied, the head projects to vocab_size instead."""
    config = tiny("marian", decoder_vocab_size=120, tie_word_embeddings=False)
    report = check(Model.from_config(config))
    assert not report.differences, report.differences


def test_the_params_of_bart_large_sizes_equal_transformers():
    """BartForCausalLM at BART-large's sizes (1024 wide, 12 decoder layers, 16 heads, 4096 MLP, 50,265 tokens)."""
    config = {"model_type": "bart", "architectures": ["BartForCausalLM"]}
    with torch.device("meta"):
        module = transformers.BartForCausalLM(transformers.AutoConfig.for_model("bart"))
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("changes, named", [({"architectures": ["BartForSequenceClassification"]}, "architectures"), ({"decoder_attention_heads": 5}, "decoder_attention_heads"), ({"dropout": 1.0}, "dropout")])
def test_what_is_not_modelled_is_refused_in_one_line(changes, named):
    with pytest.raises(symform.ConfigError, match=named) as refusal:
        Model.from_config(tiny("bart", **changes))
    assert "\n" not in str(refusal.value)
