"""BERT's and RoBERTa's relatives read through family inheritance (data2vec-text, ERNIE, ...): every number
`symform check` compares (parameters per part, forward FLOPs per part, backward FLOPs, no KV cache, the activations
eager PyTorch keeps) against a tiny instance of transformers' own checkpoint class, for every head class the
family reads; refusals in one line."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import symform  # noqa: E402
from symform.analysis.memory.oracle_check import check  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

BERT_SIZES = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96, vocab_size=101, max_position_embeddings=64)
ROBERTA_SIZES = {**BERT_SIZES, "max_position_embeddings": 34, "type_vocab_size": 1, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}

# model type -> (its tiny sizes, the classes its family reads, settings each read with)
CASES = {
    "data2vec-text": (ROBERTA_SIZES, ["Data2VecTextModel", "Data2VecTextForMaskedLM", "Data2VecTextForCausalLM"], [{}]),
    "ernie": (BERT_SIZES, ["ErnieModel", "ErnieForMaskedLM", "ErnieForCausalLM"], [{}, {"use_task_id": True, "task_type_vocab_size": 5}]),
    "roberta-prelayernorm": (ROBERTA_SIZES, ["RobertaPreLayerNormModel", "RobertaPreLayerNormForMaskedLM", "RobertaPreLayerNormForCausalLM"], [{}, {"tie_word_embeddings": False}]),
    "xlm-roberta-xl": (ROBERTA_SIZES, ["XLMRobertaXLModel", "XLMRobertaXLForMaskedLM", "XLMRobertaXLForCausalLM"], [{}, {"hidden_dropout_prob": 0.0}]),
    "megatron-bert": (BERT_SIZES, ["MegatronBertModel", "MegatronBertForMaskedLM", "MegatronBertForCausalLM"], [{}, {"attention_probs_dropout_prob": 0.0}]),
    "electra": (
        {**BERT_SIZES, "embedding_size": 32},
        ["ElectraModel", "ElectraForMaskedLM", "ElectraForCausalLM", "ElectraForPreTraining"],
        [{}, {"tie_word_embeddings": False, "embedding_size": 64, "hidden_dropout_prob": 0.0}],
    ),
    "distilbert": (
        dict(dim=64, n_layers=2, n_heads=4, hidden_dim=96, vocab_size=101, max_position_embeddings=64),
        ["DistilBertModel", "DistilBertForMaskedLM"],
        [{}, {"tie_word_embeddings": False, "attention_dropout": 0.0}],
    ),
    "bert-generation": (BERT_SIZES, ["BertGenerationEncoder", "BertGenerationDecoder"], [{}, {"tie_word_embeddings": False, "hidden_dropout_prob": 0.0}]),
}
CHECKED = [(model_type, cls, i) for model_type, (_, classes, settings) in CASES.items() for cls in classes for i in range(len(settings))]


def tiny(model_type: str, cls: str, **changes) -> dict:
    sizes, _, _ = CASES[model_type]
    return {"model_type": model_type, **sizes, "architectures": [cls], **changes}


@pytest.mark.parametrize("model_type, cls, setting", CHECKED)
def test_symform_check_agrees_on_every_number(model_type, cls, setting):
    config = tiny(model_type, cls, **CASES[model_type][2][setting])
    report = check(Model.from_config(config))
    assert report.transformers_class == cls
    # RobertaPreLayerNormModel's final norm is a top-level module named LayerNorm, a name too common to tell it
    # apart from other LayerNorms: for it the totals alone
    rows = [r for r in report.rows if r.part == "total"] if cls == "RobertaPreLayerNormModel" else report.rows
    assert all(r.agrees for r in rows), report.differences


def test_distilbert_base_uncased_counts_what_transformers_builds():
    """DistilBertForMaskedLM at distilbert-base-uncased's published sizes, against the meta-device module; by hand:
    embeddings 30522·768 + 512·768 + LayerNorm, 6 layers of 4·(768² + 768) + 2·768·3072 + 3072 + 768 + 2 LayerNorms,
    and the head's transform, LayerNorm and projection bias (its weight tied)."""
    d, ff, vocab = 768, 3072, 30522
    layer = 4 * (d * d + d) + 2 * d * ff + ff + d + 4 * d
    expected = vocab * d + 512 * d + 2 * d + 6 * layer + d * d + d + 2 * d + vocab
    assert expected == 66_985_530
    from oracle import preset_dict

    config = preset_dict("distilbert-base-uncased")
    with torch.device("meta"):
        module = transformers.DistilBertForMaskedLM(transformers.AutoConfig.for_model(**config))
    assert sum(p.numel() for p in module.parameters()) == expected
    assert symform.load("distilbert-base-uncased").evaluate("params") == expected


@pytest.mark.parametrize("model_type", list(CASES))
def test_an_unread_head_class_is_refused_in_one_line(model_type):
    with pytest.raises(symform.ConfigError, match="architectures") as refusal:
        Model.from_config(tiny(model_type, "SomethingForSequenceClassification"))
    assert "\n" not in str(refusal.value)
