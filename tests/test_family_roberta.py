"""RoBERTa, XLM-RoBERTa and CamemBERT (BERT's encoder with position ids counted from the token ids): parameters of
every checkpoint class against transformers' numel(), forward FLOPs against FlopCounterMode (fp32, eager
attention), saved activations against the tensors autograd keeps (dropout on and off), no KV cache, the context
the position table leaves once pad_token_id + 1 positions are reserved, and `symform check`."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import hf_config, input_ids, preset_dict, saved_for_backward  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import symform  # noqa: E402
from symform.analysis.memory.oracle_check import check  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

PREFIXES = {"roberta": "Roberta", "xlm-roberta": "XLMRoberta", "camembert": "Camembert"}
HEADS = ["Model", "ForMaskedLM", "ForCausalLM"]
CLASSES = [(model_type, prefix + head) for model_type, prefix in PREFIXES.items() for head in HEADS]
# RoBERTa's checkpoints: one token type, 2 positions reserved (pad_token_id 1), LayerNorm eps 1e-5
TINY = dict(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96, vocab_size=101,
    max_position_embeddings=34, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2,
)  # fmt: skip


def tiny(model_type: str, cls: str, **changes) -> dict:
    return {"model_type": model_type, **TINY, "architectures": [cls], **changes}


def checkpoint_class(config: dict, dtype=torch.float32):
    """The class `architectures` names, with eager attention (the counter cannot see the CPU SDPA kernel)."""
    torch.manual_seed(0)
    model = getattr(transformers, config["architectures"][0])._from_config(hf_config(config), attn_implementation="eager", dtype=dtype)
    assert model.config._attn_implementation == "eager"
    return model


@pytest.mark.parametrize("preset", ["roberta-base", "roberta-large", "xlm-roberta-large", "camembert-base"])
@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("tied", [True, False])
def test_flagship_params_equal_transformers_for_every_head(preset, head, tied):
    config = preset_dict(preset)
    config = {**config, "architectures": [PREFIXES[config["model_type"]] + head], "tie_word_embeddings": tied}
    with torch.device("meta"):
        expected = sum(p.numel() for p in getattr(transformers, config["architectures"][0])(hf_config(config)).parameters())
    assert Model.from_config(config).evaluate("params") == expected


@pytest.mark.parametrize("model_type, cls", CLASSES)
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("batch, seq", [(2, 7), (1, 16)])
def test_forward_flops_equal_the_counter(model_type, cls, tied, batch, seq):
    config = tiny(model_type, cls, tie_word_embeddings=tied)
    module = checkpoint_class(config).eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        module(input_ids=input_ids(config, batch, seq))
    symbolic = Model.from_config(config).with_conventions(training=0)
    assert symbolic.evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops()
    assert symbolic.evaluate("kv_cache", batch=batch, seq=seq) == 0


@pytest.mark.parametrize("model_type, cls", CLASSES)
@pytest.mark.parametrize("dtype, act_bytes", [(torch.float32, 4), (torch.bfloat16, 2)], ids=["fp32", "bf16"])
@pytest.mark.parametrize("dropout", [0.0, 0.1], ids=["no-dropout", "dropout"])
@pytest.mark.parametrize("batch, seq", [(2, 9), (1, 11)])
def test_saved_activations_equal_what_eager_pytorch_keeps(model_type, cls, dtype, act_bytes, dropout, batch, seq):
    """The position ids and the gathered token-type ids are (batch, seq) tensors of their own, kept by the lookups
    (BERT's are views of its buffers). A head's training loss takes the ids as labels."""
    config = tiny(model_type, cls, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    ids = input_ids(config, batch, seq)
    kept = saved_for_backward(checkpoint_class(config, dtype).train(), ids, labels=ids.clone())
    conventions = {"act_bytes": act_bytes, "cpu_kernels": 1, "mask_bytes": act_bytes}  # the CPU kernel's masks in the input's dtype
    model = Model.from_config(config, accounting="eager", conventions=conventions)
    assert model.evaluate("saved_activations", batch=batch, seq=seq) == kept


@pytest.mark.parametrize("model_type, cls", CLASSES)
def test_symform_check_agrees_on_every_number(model_type, cls):
    report = check(Model.from_config(tiny(model_type, cls)))
    assert report.transformers_class == cls
    assert not report.differences, report.differences


def test_the_context_is_the_positions_left_after_the_reserved_ones():
    """transformers takes the longest sequence it reaches (34 positions, pad_token_id 1: tokens at 2 … 33, 32 of
    them) and fails one token past it; symform's context is that number."""
    config = tiny("roberta", "RobertaModel")
    module = checkpoint_class(config).eval()
    ids = torch.full((1, 33), 5)
    with torch.no_grad():
        module(input_ids=ids[:, :32])
        with pytest.raises((IndexError, RuntimeError)):  # the token-type gather or the position lookup
            module(input_ids=ids)
    assert Model.from_config(config).context_limit.tokens == 32
    assert symform.load("roberta-base").context_limit.tokens == 512


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"architectures": ["RobertaForSequenceClassification"]}, "architectures"),
        ({"is_decoder": True}, "is_decoder"),
        ({"add_cross_attention": True}, "add_cross_attention"),
        ({"pad_token_id": None}, "pad_token_id"),
        ({"pad_token_id": 40}, "pad_token_id"),
    ],
)
def test_what_is_not_modelled_is_refused_in_one_line(changes, named):
    with pytest.raises(symform.ConfigError, match=named) as refusal:
        Model.from_config(tiny("roberta", "RobertaForMaskedLM", **changes))
    assert "\n" not in str(refusal.value)


def test_symform_check_trains_the_pooler_of_a_headless_encoder():
    """BertModel's training step back-propagates through its pooled output too (a user's loss on it trains the
    pooler): `symform check` once back-propagated the last hidden state alone and reported the pooler's gradient
    FLOPs as a difference."""
    config = dict(model_type="bert", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96, vocab_size=101, max_position_embeddings=64, architectures=["BertModel"])
    assert not check(Model.from_config(config)).differences
