"""ModernBERT (a pre-norm rotary encoder alternating local and global attention): parameters of each checkpoint
class against transformers' numel(), forward and training-step FLOPs against FlopCounterMode (fp32, eager
attention: every layer computes the full bidirectional score matrix and masks a local layer's outside its
window), saved activations against the tensors autograd keeps, no KV cache, and `symform check`."""

from __future__ import annotations

import pytest
import sympy

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import hf_config, check_forward_flops, check_saved_config_reads_the_same, check_train_step_flops, count_forward, input_ids, saved_for_backward  # noqa: E402

import symform  # noqa: E402
from symform.analysis.memory.oracle_check import check  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

CLASSES = ["ModernBertModel", "ModernBertForMaskedLM"]
# layers 0 and 3 global, 1 and 2 local (global_attn_every_n_layers 3); a local query sees the 2 tokens either
# side of it (local_attention 4: a window of 5 keys); token ids inside the tiny vocabulary
TINY_MODERNBERT = dict(
    model_type="modernbert", hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=96, vocab_size=101,
    max_position_embeddings=64, local_attention=4, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
)  # fmt: skip
WINDOW = 5  # 2 * (local_attention // 2) + 1 keys around an interior query
BIASES = {"attention_bias": True, "mlp_bias": True, "norm_bias": True, "classifier_bias": True, "decoder_bias": False}
LOCAL_FIRST = {"layer_types": ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]}


def checkpoint_class(config: dict, dtype=torch.float32):
    """The class `architectures` names, built from the same config dict symform reads, with eager attention
    (the counter cannot see the CPU SDPA kernel)."""
    torch.manual_seed(0)
    model = getattr(transformers, config["architectures"][0])._from_config(hf_config(config), attn_implementation="eager", dtype=dtype)
    assert model.config._attn_implementation == "eager"
    return model


def local_layers(config: dict) -> int:
    return checkpoint_class(config).config.layer_types.count("sliding_attention")


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("changes", [{}, {"tie_word_embeddings": False}, BIASES, {"global_attn_every_n_layers": 2, "num_hidden_layers": 7}], ids=["tied", "untied", "biases", "every-2nd-global"])
def test_params_equal_transformers_at_the_config_class_defaults(cls, changes):
    """ModernBertConfig's defaults are ModernBERT-base's sizes (22 layers, width 768, GeGLU 1152)."""
    config = {"model_type": "modernbert", "architectures": [cls], **changes}
    with torch.device("meta"):
        expected = sum(p.numel() for p in getattr(transformers, cls)(hf_config(config)).parameters())
    assert Model.from_config(config).evaluate("params") == expected


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("changes", [{}, {"tie_word_embeddings": False}, BIASES, LOCAL_FIRST], ids=["tied", "untied", "biases", "local-first"])
def test_forward_flops_equal_the_counter_which_masks_a_full_score_matrix(cls, changes):
    config = {**TINY_MODERNBERT, "architectures": [cls], **changes}
    model = checkpoint_class(config).eval()
    symbolic = Model.from_config(config).with_conventions(training=0)
    assert symbolic.evaluate("params") == sum(p.numel() for p in model.parameters())
    # eager attention: seq keys for every query, local layers too (windowed = 0); seq 9 is longer than the window
    check_forward_flops(symbolic.with_conventions(windowed=0), model, config, [(2, 9), (1, 16)])
    # bidirectional: the causal convention does not halve an encoder's attention
    eager = symbolic.with_conventions(windowed=0, causal=sympy.Rational(1, 2))
    assert eager.evaluate("forward_flops", batch=2, seq=9) == count_forward(model, input_ids(config, 2, 9)).get_total_flops()
    assert symbolic.evaluate("kv_cache", batch=2, seq=9) == 0


@pytest.mark.parametrize("changes", [{}, LOCAL_FIRST], ids=["global-first", "local-first"])
def test_a_windowed_kernel_spans_the_window_of_each_local_layer(changes):
    """A sequence no longer than window // 2 + 1 lies inside every local window: the windowed count is then the
    counter's. A longer one saves, in each local layer, two products (scores and context) of
    2·batch·heads·seq·(seq − window)·d_head FLOPs each, as the hand arithmetic here has it."""
    config = {**TINY_MODERNBERT, "architectures": ["ModernBertModel"], **changes}
    model = checkpoint_class(config).eval()
    symbolic = Model.from_config(config).with_conventions(training=0)
    check_forward_flops(symbolic, model, config, [(2, 3), (1, 2)])
    batch, seq, heads, d_head = 2, 9, 4, 16
    saved = local_layers(config) * 2 * 2 * batch * heads * seq * (seq - WINDOW) * d_head
    assert symbolic.evaluate("forward_flops", batch=batch, seq=seq) == count_forward(model, input_ids(config, batch, seq)).get_total_flops() - saved


@pytest.mark.parametrize("changes", [{}, {"tie_word_embeddings": False}, BIASES], ids=["tied", "untied", "biases"])
def test_a_training_step_equals_the_counter(changes):
    config = {**TINY_MODERNBERT, "architectures": ["ModernBertForMaskedLM"], **changes}
    check_train_step_flops(Model.from_config(config).with_conventions(training=0, windowed=0), checkpoint_class(config).train(), config)


@pytest.mark.parametrize("dtype, act_bytes", [(torch.float32, 4), (torch.bfloat16, 2)], ids=["fp32", "bf16"])
@pytest.mark.parametrize("changes", [{}, {"tie_word_embeddings": False}, BIASES, LOCAL_FIRST], ids=["tied", "untied", "biases", "local-first"])
@pytest.mark.parametrize("batch, seq", [(2, 9), (1, 11)])
def test_saved_activations_equal_what_eager_pytorch_keeps(dtype, act_bytes, changes, batch, seq):
    """Masked-LM training: labels are a tensor of their own (the inputs carry mask tokens), and the loss keeps a view of them."""
    config = {**TINY_MODERNBERT, "architectures": ["ModernBertForMaskedLM"], **changes}
    ids = input_ids(config, batch, seq)
    kept = saved_for_backward(checkpoint_class(config, dtype).train(), ids, labels=ids.clone())
    # the oracle runs PyTorch's CPU kernels (LayerNorm statistics in the input's dtype) and eager attention (windowed = 0)
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": act_bytes, "cpu_kernels": 1, "windowed": 0})
    assert model.evaluate("saved_activations", batch=batch, seq=seq) == kept


@pytest.mark.parametrize("batch, seq", [(2, 9), (1, 11)])
def test_dropout_keeps_a_mask_where_transformers_drops(batch, seq):
    """Dropout on the embeddings, the attention probabilities, the attention output and the MLP's gated product
    (d_ff wide). PyTorch's CPU kernel keeps each mask as a tensor of the input's dtype (mask_bytes = act_bytes)."""
    config = {**TINY_MODERNBERT, "architectures": ["ModernBertForMaskedLM"], "attention_dropout": 0.1, "mlp_dropout": 0.1, "embedding_dropout": 0.1}
    ids = input_ids(config, batch, seq)
    kept = saved_for_backward(checkpoint_class(config).train(), ids, labels=ids.clone())
    conventions = {"act_bytes": 4, "cpu_kernels": 1, "windowed": 0, "dropout": 1, "mask_bytes": 4}
    assert Model.from_config(config, accounting="eager", conventions=conventions).evaluate("saved_activations", batch=batch, seq=seq) == kept


@pytest.mark.parametrize("cls", CLASSES)
def test_symform_check_agrees_on_every_number(cls):
    report = check(Model.from_config({**TINY_MODERNBERT, "architectures": [cls]}))
    assert report.transformers_class == cls
    assert not report.differences, report.differences


def test_a_config_saved_by_transformers_reads_as_the_one_written_by_hand(tmp_path):
    check_saved_config_reads_the_same({**TINY_MODERNBERT, "architectures": ["ModernBertForMaskedLM"]}, tmp_path)


@pytest.mark.parametrize(
    "changes, named",
    [({"architectures": ["ModernBertForSequenceClassification"]}, "architectures"), ({"sparse_prediction": True}, "sparse_prediction")],
)
def test_what_is_not_modelled_is_refused_in_one_line(changes, named):
    with pytest.raises(symform.ConfigError, match=named) as refusal:
        Model.from_config({**TINY_MODERNBERT, **changes})
    assert "\n" not in str(refusal.value)
