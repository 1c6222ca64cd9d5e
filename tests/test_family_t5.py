"""T5, mT5 and umT5 (encoder-decoders for conditional generation): parameters against transformers' numel(), forward
FLOPs against FlopCounterMode (fp32, eager attention) with the encoder and the decoder at different lengths, a decode
step against the counter, the decoder's cache (transformers' EncoderDecoderCache: self-attention keys and values of
the decoder's tokens, cross-attention keys and values of the encoder's) and `symform check`; the workload rebinding
that lets the encoder read source_seq tokens where its components say seq."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oracle import hf_config, preset_dict  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import symform  # noqa: E402
from symform.analysis.memory.oracle_check import check  # noqa: E402
from symform.engine.language.declarations import default_library, parse_components  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

CLASSES = {"t5": "T5ForConditionalGeneration", "mt5": "MT5ForConditionalGeneration", "umt5": "UMT5ForConditionalGeneration"}
# inner width num_heads·d_kv (64) ≠ d_model (48), and a decoder deeper than the encoder, so that no size stands for another
TINY = dict(d_model=48, d_kv=16, d_ff=96, num_layers=2, num_decoder_layers=3, num_heads=4, vocab_size=101, relative_attention_num_buckets=8)


def tiny(model_type: str, **changes) -> dict:
    return {"model_type": model_type, **TINY, "architectures": [CLASSES[model_type]], **changes}


def module_for(config: dict):
    torch.manual_seed(0)
    return getattr(transformers, CLASSES[config["model_type"]])._from_config(hf_config(config), attn_implementation="eager", dtype=torch.float32).eval()


def ids(batch: int, length: int, seed: int):
    return torch.randint(0, TINY["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(seed))


def cache_of(output):
    return output.get("cache", output.get("past_key_values"))


def cache_bytes(cache) -> int:
    layers = [*cache.self_attention_cache.layers, *cache.cross_attention_cache.layers]
    return sum(t.numel() * t.element_size() for layer in layers for t in (layer.keys, layer.values))


@pytest.mark.parametrize("preset", ["flan-t5-xxl", "mt5-xxl"])
def test_flagship_params_equal_transformers(preset):
    """The flagships write tie_word_embeddings false; transformers 5.24's config classes tie the head whatever the
    config says, and symform counts the module it builds."""
    config = preset_dict(preset)
    with torch.device("meta"):
        module = getattr(transformers, CLASSES[config["model_type"]])(hf_config(config))
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("model_type", list(CLASSES))
@pytest.mark.parametrize("ff", ["relu", "gated-gelu"])
@pytest.mark.parametrize("tied", [True, False])
def test_params_equal_transformers(model_type, ff, tied):
    config = tiny(model_type, feed_forward_proj=ff, tie_word_embeddings=tied)
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in module_for(config).parameters())


@pytest.mark.parametrize("model_type", list(CLASSES))
@pytest.mark.parametrize("ff", ["relu", "gated-gelu"])
@pytest.mark.parametrize("batch, source, target", [(2, 7, 5), (1, 4, 9)])
def test_forward_flops_and_cache_equal_transformers(model_type, ff, batch, source, target):
    config = tiny(model_type, feed_forward_proj=ff)
    module = module_for(config)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        output = module(input_ids=ids(batch, source, 1), decoder_input_ids=ids(batch, target, 2), use_cache=True)
    model = Model.from_config(config).with_conventions(training=0, kv_bytes=4)
    workload = dict(batch=batch, seq=target, source_seq=source)
    assert model.evaluate("forward_flops", **workload) == counter.get_total_flops()
    assert model.evaluate("kv_cache", **workload) == cache_bytes(cache_of(output))


@pytest.mark.parametrize("model_type", list(CLASSES))
def test_a_decode_step_runs_the_decoder_alone(model_type):
    """Generation's later steps: the encoder's output and the cross-attention keys and values come from the first
    step; the decoder's one new token attends to past + 1 of its own."""
    batch, source, target = 2, 6, 4
    config = tiny(model_type, feed_forward_proj="gated-gelu")
    module = module_for(config)
    with torch.no_grad():
        first = module(input_ids=ids(batch, source, 1), decoder_input_ids=ids(batch, target, 2), use_cache=True)
        with FlopCounterMode(display=False) as counter:
            step = module(encoder_outputs=(first.encoder_last_hidden_state,), decoder_input_ids=ids(batch, 1, 3), cache=cache_of(first), use_cache=True)
    model = Model.from_config(config).with_conventions(training=0, kv_bytes=4)
    workload = dict(batch=batch, seq=1, past=target, source_seq=source, decoding=1)
    assert model.evaluate("forward_flops", **workload) == counter.get_total_flops()
    assert model.evaluate("kv_cache", **workload) == cache_bytes(cache_of(step))


@pytest.mark.parametrize("model_type", list(CLASSES))
def test_symform_check_agrees_on_params_flops_and_cache(model_type):
    report = check(Model.from_config(tiny(model_type)))
    assert report.transformers_class == CLASSES[model_type]
    exact = [row for row in report.differences if row.quantity in ("params", "forward_flops", "backward_flops", "kv_cache")]
    assert not exact, exact


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"architectures": ["T5Model"]}, "architectures"),
        ({"is_decoder": True}, "is_decoder"),
        ({"feed_forward_proj": "gated-tanh"}, "feed_forward_proj"),
    ],
)
def test_what_is_not_modelled_is_refused_in_one_line(changes, named):
    with pytest.raises(symform.ConfigError, match=named) as refusal:
        Model.from_config(tiny("t5", **changes))
    assert "\n" not in str(refusal.value)


def test_a_part_rebinds_the_workload_of_its_subtree():
    """Two projections of the same width, one reading source_seq tokens where linear's default rows say seq."""
    library = default_library()
    table = {
        "two_lengths": {
            "doc": "",
            "args": ["d_model"],
            "parts": [
                {"name": "here", "use": "linear", "with": {"d_in": "d_model", "d_out": "d_model"}},
                {"name": "there", "use": "linear", "with": {"d_in": "d_model", "d_out": "d_model"}, "workload": {"seq": "source_seq", "past": "0"}},
            ],
        }
    }
    library = library.merged(parse_components(table, library.vocabulary, "test", existing=library.components))
    model = Model.from_component("two_lengths", library=library, d_model=8)
    assert model.evaluate("forward_flops", batch=3, seq=5, source_seq=7) == 2 * 3 * (5 + 7) * 8 * 8


def test_rebinding_a_name_that_is_no_workload_setting_is_refused():
    library = default_library()
    table = {"c": {"doc": "", "args": ["d_model"], "parts": [{"name": "p", "use": "linear", "with": {"d_in": "d_model", "d_out": "d_model"}, "workload": {"d_model": "2"}}]}}
    with pytest.raises(symform.DeclarationError, match="not a workload setting") as refusal:
        parse_components(table, library.vocabulary, "test", existing=library.components)
    assert "\n" not in str(refusal.value)
