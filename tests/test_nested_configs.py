"""Configs whose fields live in sub-configs (text_config, vision_config), and configs of an unknown
model_type whose `architectures` names a class symform reads."""

from __future__ import annotations

import pytest

from checks import one_line_error
from symform import ConfigError
from symform.engine.language.families import FieldSpec, family_for, read_fields
from symform.engine.graph.model import Model
from checks import preset_dict

SPECS = {
    "hidden_size": FieldSpec(type="int"),
    "heads": FieldSpec(type="int", key="num_attention_heads", default="8"),
    "vision_hidden_size": FieldSpec(type="int", in_="vision_config", key="hidden_size", default="1152"),
    "top": FieldSpec(type="bool", in_="", key="tie_word_embeddings", default=False),
}


def test_fields_are_read_from_their_sub_config():
    config = {"tie_word_embeddings": True, "text_config": {"hidden_size": 64, "num_attention_heads": 4}, "vision_config": {"hidden_size": 32}}
    values = read_fields(SPECS, config, "c", fields_in="text_config")
    assert values == {"hidden_size": 64, "heads": 4, "vision_hidden_size": 32, "top": 1}


def test_an_absent_or_null_sub_config_takes_the_class_defaults():
    for vision in ({}, {"vision_config": None}):
        values = read_fields(SPECS, {"text_config": {"hidden_size": 64}, **vision}, "c", fields_in="text_config")
        assert values == {"hidden_size": 64, "heads": 8, "vision_hidden_size": 1152, "top": 0}


def test_a_missing_field_is_named_with_its_sub_config():
    one_line_error(ConfigError, lambda: read_fields(SPECS, {"text_config": {}}, "c", fields_in="text_config"), "text_config.hidden_size", "missing")


def test_a_sub_config_that_is_not_an_object_is_refused():
    one_line_error(ConfigError, lambda: read_fields(SPECS, {"text_config": [1]}, "c", fields_in="text_config"), "text_config", "JSON object")


def test_dotted_paths_reach_deeper_sub_configs():
    specs = {"width": FieldSpec(type="int", in_="a.b")}
    assert read_fields(specs, {"a": {"b": {"width": 3}}}, "c") == {"width": 3}


def test_an_unknown_model_type_is_read_by_the_family_of_its_architecture():
    """Kimi K2 ships model_type kimi_k2 with architectures [DeepseekV3ForCausalLM]: the DeepSeek-V3 family reads it."""
    config = {**preset_dict("deepseek-v3"), "model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"]}
    assert family_for(config, "c").name == "deepseek_v3"
    assert Model.from_config(config).evaluate("params") == Model.from_config(preset_dict("deepseek-v3")).evaluate("params")


def test_an_unknown_model_type_and_class_still_point_to_declaring_it():
    config = {"model_type": "nothing_known", "architectures": ["NothingKnownForCausalLM"]}
    one_line_error(ConfigError, lambda: family_for(config, "c"), "nothing_known", "declaring-architectures")
    one_line_error(ConfigError, lambda: family_for({"model_type": "nothing_known", "architectures": "x"}, "c"), "nothing_known")
