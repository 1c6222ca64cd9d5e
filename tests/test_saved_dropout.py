"""Dropout as the config sets it: GPT-2's embd_pdrop, attn_pdrop and resid_pdrop and BERT's hidden_dropout_prob
and attention_probs_dropout_prob decide where training keeps a dropout mask, and BERT's every checkpoint class
keeps what eager PyTorch keeps (its embeddings' id buffers, its losses), in fp32 and bf16, for one sequence
and several. The oracle counts the storages autograd holds after a training forward on the CPU, whose dropout
keeps its rescaled mask in the activations' dtype (cpu_kernels = 1)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import build_for_training, hf_config, input_ids, saved_for_backward  # noqa: E402

import symform  # noqa: E402
from symform import Model  # noqa: E402

pytestmark = pytest.mark.oracle

DTYPES = {torch.float32: 4, torch.bfloat16: 2}
SHAPES = [(2, 8), (1, 11)]
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64, "vocab_size": 101, "bos_token_id": 0, "eos_token_id": 0}
GPT2_DROPOUT = {
    "all 0.1": {"embd_pdrop": 0.1, "attn_pdrop": 0.1, "resid_pdrop": 0.1},
    "none": {"embd_pdrop": 0.0, "attn_pdrop": 0.0, "resid_pdrop": 0.0},
    "attention only": {"embd_pdrop": 0.0, "attn_pdrop": 0.2, "resid_pdrop": 0.0},
    "residual and embeddings": {"embd_pdrop": 0.1, "attn_pdrop": 0, "resid_pdrop": 0.3},
    "transformers' defaults": {},
}
BERT = dict(
    model_type="bert", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96, vocab_size=101,
    max_position_embeddings=64, type_vocab_size=3,
)  # fmt: skip
BERT_DROPOUT = {
    "both 0.1": {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1},
    "none": {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
    "attention only": {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.1},
    "hidden only": {"hidden_dropout_prob": 0.2, "attention_probs_dropout_prob": 0.0},
}
BERT_CLASSES = ["BertModel", "BertForMaskedLM", "BertForPreTraining", "BertLMHeadModel"]


def eager(config: dict, act_bytes: int) -> Model:
    return Model.from_config(config, accounting="eager", conventions={"act_bytes": act_bytes, "cpu_kernels": 1})


def bert_for_training(config: dict, dtype):
    hf = hf_config(config)
    hf._attn_implementation = "eager"
    torch.manual_seed(0)
    return getattr(transformers, config["architectures"][0])(hf).to(dtype).train()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dropout", GPT2_DROPOUT)
@pytest.mark.parametrize(("batch", "seq"), SHAPES)
def test_gpt2_keeps_the_masks_its_config_asks_for(dtype, dropout, batch, seq):
    config = {**GPT2, **GPT2_DROPOUT[dropout]}
    kept = saved_for_backward(build_for_training(config, dtype), input_ids(config, batch, seq))
    assert eager(config, DTYPES[dtype]).evaluate("saved_activations", batch=batch, seq=seq) == kept


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cls", BERT_CLASSES)
@pytest.mark.parametrize("dropout", BERT_DROPOUT)
@pytest.mark.parametrize(("batch", "seq"), SHAPES)
def test_bert_keeps_what_eager_pytorch_keeps(dtype, cls, dropout, batch, seq):
    """Every head (a pretraining step passes both kinds of labels, so both losses run), the masks the config
    asks for, the position ids' buffer (max_position_embeddings long) and the token types gathered for one sequence."""
    config = {**BERT, "architectures": [cls], **BERT_DROPOUT[dropout]}
    ids = input_ids(config, batch, seq)
    sentences = {"next_sentence_label": torch.zeros(batch, dtype=torch.long)} if cls == "BertForPreTraining" else {}
    kept = saved_for_backward(bert_for_training(config, dtype), ids, labels=ids.clone(), **sentences)
    assert eager(config, DTYPES[dtype]).evaluate("saved_activations", batch=batch, seq=seq) == kept


def test_dropout_follows_the_config_unless_the_user_sets_it():
    config = {**GPT2, **GPT2_DROPOUT["all 0.1"]}
    kept, dropped = Model.from_config(config), Model.from_config({**GPT2, **GPT2_DROPOUT["none"]})
    assert kept.spec.conventions == {"dropout": 1} and dropped.spec.conventions == {"dropout": 0}
    workload = {"batch": 2, "seq": 8}
    # each of the 8·64 residual-stream elements keeps a 1-byte mask at the embeddings and twice per layer, and
    # each of the 4·8·8 attention probabilities a mask and its dropped copy (2 bytes each) per layer
    masks = 2 * 8 * 64 * (1 + 2 * 2) + 2 * 4 * 8 * 8 * 2 * (1 + 2)
    assert kept.evaluate("saved_activations", **workload) - dropped.evaluate("saved_activations", **workload) == masks
    assert kept.with_conventions(dropout=0).evaluate("saved_activations", **workload) == dropped.evaluate("saved_activations", **workload)
    assert kept.with_accounting("eager").conventions[kept.vocabulary["dropout"]] == 1  # an accounting keeps the config's dropout
    assert Model.from_config(config, conventions={"dropout": 0}).evaluate("saved_activations", **workload) == dropped.evaluate("saved_activations", **workload)


@pytest.mark.parametrize(("config", "field"), [({**GPT2, "attn_pdrop": 1.0}, "attn_pdrop"), ({**BERT, "hidden_dropout_prob": -0.1}, "hidden_dropout_prob")])
def test_a_dropout_probability_outside_zero_to_one_is_refused_in_one_line(config, field):
    with pytest.raises(symform.ConfigError, match=field) as caught:
        Model.from_config(config)
    assert "\n" not in str(caught.value)
