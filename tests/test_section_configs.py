"""Configs that are read with the right sizes or refused by name: a text class's own config (Qwen3.5's
qwen3_5_text, what Qwen3_5ForCausalLM's save_pretrained writes), a config of an unknown model type naming a
known class, and a published config with a non-finite value in a field symform does not read.

Expected values come from transformers: its config classes write the configs, its models on the meta
device give the parameter counts."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from checks import one_line_error  # noqa: E402
from oracle import check_cache_bytes, meta_params, preset_dict  # noqa: E402

from symform import ConfigError  # noqa: E402
from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

TEXT = dict(
    hidden_size=32, num_hidden_layers=4, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
    vocab_size=101, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
    max_position_embeddings=64,
)  # fmt: skip
MOE = dict(moe_intermediate_size=12, shared_expert_intermediate_size=16, num_experts=4, num_experts_per_tok=2)

# (the text config's model type, its causal-LM class, the extra sizes it takes)
TEXT_TYPES = [("qwen3_5_text", "Qwen3_5ForCausalLM", {}), ("qwen3_5_moe_text", "Qwen3_5MoeForCausalLM", MOE)]


def saved_text_config(model_type: str, cls: str, extra: dict, directory) -> dict:
    """The config.json transformers writes for the text class: its config class's save_pretrained."""
    config = transformers.AutoConfig.for_model(model_type, **TEXT, **extra)
    config.architectures = [cls]
    config.save_pretrained(directory)
    return json.loads((directory / "config.json").read_text())


@pytest.mark.parametrize("model_type, cls, extra", TEXT_TYPES)
def test_a_text_class_config_is_read_with_its_own_sizes(model_type, cls, extra, tmp_path):
    """Read through `architectures` with the family's text_config defaults, this config counted 8.95 billion
    parameters for Qwen3.5's text class; its own fields are the sizes."""
    config = saved_text_config(model_type, cls, extra, tmp_path)
    assert Model.load(tmp_path / "config.json").evaluate("params") == meta_params(config)


@pytest.mark.parametrize("model_type, cls, extra", TEXT_TYPES)
def test_a_text_class_config_caches_what_transformers_keeps(model_type, cls, extra, tmp_path):
    config = saved_text_config(model_type, cls, extra, tmp_path)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config), dtype=torch.float32).eval()
    check_cache_bytes(config, model, 5)


def test_an_unknown_type_naming_a_class_without_its_sub_config_is_refused():
    config = {"model_type": "my_qwen", "architectures": ["Qwen3_5ForCausalLM"], **TEXT}
    one_line_error(ConfigError, lambda: Model.from_config(config), "my_qwen", "Qwen3_5ForCausalLM", "text_config")


def test_an_unknown_type_naming_a_class_without_its_sizes_is_refused():
    """A config of another class's fields would be read with DeepSeek-V3's defaults for the sizes it lacks."""
    config = {"model_type": "my_moe", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 101}
    one_line_error(ConfigError, lambda: Model.from_config(config), "my_moe", "DeepseekV3ForCausalLM", "intermediate_size")


def test_infinity_in_a_field_symform_does_not_read_is_accepted(tmp_path):
    """nvidia/Nemotron-H-56B-Base-8K's published config.json has "time_step_limit": [0.0, Infinity]; Python's
    json and transformers read it, and no size depends on it."""
    config = dict(preset_dict("nemotron-h-8b"), time_step_limit=[0.0, float("inf")])
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert "Infinity" in (tmp_path / "config.json").read_text()
    read_by_transformers = transformers.AutoConfig.from_pretrained(tmp_path)
    assert read_by_transformers.time_step_limit[1] == float("inf")
    assert Model.load(tmp_path / "config.json").evaluate("params") == meta_params(config)


@pytest.mark.parametrize("changes, field", [({"hidden_size": float("inf")}, "hidden_size"), ({"rope_scaling": {"rope_type": "yarn", "factor": float("nan")}}, "rope_scaling.factor")])
def test_a_non_finite_value_in_a_field_symform_reads_is_refused(changes, field, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(dict(preset_dict("qwen3-0.6b"), **changes)))
    one_line_error(ConfigError, lambda: Model.load(tmp_path / "config.json"), field, "not finite")


def test_an_unknown_type_holding_the_family_s_fields_is_read_with_them():
    """sarvam_mla's config class writes DeepSeek-V3's fields (q_lora_rank null among them) and transformers builds
    DeepseekV3ForCausalLM for it: the fallback reads it, a null field being a value the config gives."""
    config = transformers.AutoConfig.for_model("sarvam_mla", num_hidden_layers=2).to_dict()
    config["architectures"] = ["DeepseekV3ForCausalLM"]
    assert config["q_lora_rank"] is None
    model = Model.from_config(config)
    assert model.spec.family == "deepseek_v3"
    assert model.evaluate("params") == meta_params(config)
