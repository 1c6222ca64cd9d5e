"""Encoders (BERT): parameters of every checkpoint class against transformers' numel(), forward FLOPs
against FlopCounterMode (fp32, eager attention: the full bidirectional score matrix), and no KV cache."""

from __future__ import annotations

import pytest
import sympy

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import hf_config, input_ids, preset_dict  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import symform  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

CLASSES = ["BertModel", "BertForMaskedLM", "BertForPreTraining", "BertLMHeadModel"]
TINY_BERT = dict(
    model_type="bert", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96, vocab_size=101,
    max_position_embeddings=64, type_vocab_size=3,
)  # fmt: skip


def checkpoint_class(config: dict):
    """The class `architectures` names, built from the same config dict symform reads, with eager attention
    (the counter cannot see the CPU SDPA kernel)."""
    hf = hf_config(config)
    hf._attn_implementation = "eager"
    return getattr(transformers, config["architectures"][0])(hf)


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("tied", [True, False])
def test_bert_base_params_equal_transformers_for_every_head(cls, tied):
    config = {**preset_dict("bert-base-uncased"), "architectures": [cls], "tie_word_embeddings": tied}
    with torch.device("meta"):
        expected = sum(p.numel() for p in checkpoint_class(config).parameters())
    assert Model.from_config(config).evaluate("params") == expected


def test_bert_base_uncased_is_the_published_count():
    assert symform.load("bert-base-uncased").evaluate("params") == 109_514_298


@pytest.mark.parametrize("cls", CLASSES[:3])
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("batch, seq", [(2, 7), (1, 16)])
def test_forward_flops_equal_the_counter(cls, tied, batch, seq):
    config = {**TINY_BERT, "architectures": [cls], "tie_word_embeddings": tied}
    torch.manual_seed(0)
    model = checkpoint_class(config).eval()
    assert model.config._attn_implementation == "eager"
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=input_ids(config, batch, seq))
    symbolic = Model.from_config(config).with_conventions(training=0)
    assert symbolic.evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops()
    # bidirectional: the causal convention does not halve an encoder's attention
    assert symbolic.with_conventions(causal=sympy.Rational(1, 2)).evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops()
    assert symbolic.evaluate("kv_cache", batch=batch, seq=seq) == 0


def test_an_unknown_checkpoint_class_is_named():
    config = {**preset_dict("bert-base-uncased"), "architectures": ["BertForSequenceClassification"]}
    with pytest.raises(symform.ConfigError, match="architectures"):
        Model.from_config(config)
