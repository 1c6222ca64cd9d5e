"""Family files that extend others, and primitives with options.

A contributor adds a family that differs from a bundled one in a few fields by writing only those fields; its
count is checked against a hand derivation written out below and against transformers' own module. The merge
rules (formulas/families: extends, drop, bases) are checked on small tables; rms_norm's options against the
expressions the variants declared when they were separate primitives, written out by hand.
"""

from __future__ import annotations

import textwrap

import pytest
import sympy

from symform.engine.language.declarations import default_library
from symform.engine.errors import DeclarationError
from symform.engine.language.family_files import family_table, inherit
from symform.engine.language.families import all_families, load_family
from symform.engine.graph.model import Model

# A Llama whose attention projections have biases by default: the whole file a contributor writes.
BIASED_LLAMA = """\
# Llama with biased attention projections unless the config says otherwise.
extends = "llama"
model_types = ["biased_llama"]
transformers_class = "LlamaForCausalLM"
fields.attention_bias = { type = "bool", default = true }
"""

TINY = {"model_type": "biased_llama", "vocab_size": 101, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}


def _write(folder, name: str, text: str):
    path = folder / f"{name}.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _hand_params(V: int, d: int, ff: int, L: int, h: int, kv: int, tied: bool, bias: bool) -> int:
    """LlamaForCausalLM by hand: embedding V·d; per layer q (d·h·dh), k and v (d·kv·dh each), o (h·dh·d), biases on
    q, k, v (h·dh + 2·kv·dh, and on o: d) where attention_bias, gate/up/down 3·d·ff, two RMSNorms 2·d; a final
    RMSNorm d; the head V·d unless tied. dh = d/h."""
    dh = d // h
    attention = d * h * dh + 2 * d * kv * dh + h * dh * d + bias * (h * dh + 2 * kv * dh + d)
    layer = attention + 3 * d * ff + 2 * d
    return V * d + L * layer + d + (0 if tied else V * d)


def test_a_family_written_as_its_differences_counts_as_a_hand_derivation(tmp_path):
    model = Model.from_config(TINY, family=_write(tmp_path, "biased_llama", BIASED_LLAMA))
    assert model.spec.family == "biased_llama"
    assert model.evaluate("params") == _hand_params(101, 32, 48, 3, 4, 2, tied=False, bias=True)
    unbiased = Model.from_config({**TINY, "attention_bias": False}, family=tmp_path / "biased_llama.toml")
    assert unbiased.evaluate("params") == _hand_params(101, 32, 48, 3, 4, 2, tied=False, bias=False)


def test_a_fixed_choice_takes_its_component_whatever_the_config(tmp_path):
    """`choose.mlp = "mlp"`: Llama with a plain MLP, up and down without the gate: d·ff fewer weights a layer, by hand."""
    path = _write(tmp_path, "plain_llama", 'extends = "llama"\nmodel_types = ["plain_llama"]\nchoose.mlp = "mlp"\n')
    for bias in (False, True):
        model = Model.from_config({**TINY, "model_type": "plain_llama", "attention_bias": bias}, family=path)
        assert model.spec.arguments["mlp"] == "mlp"
        assert model.evaluate("params") == _hand_params(101, 32, 48, 3, 4, 2, tied=False, bias=bias) - 3 * 32 * 48


@pytest.mark.oracle
def test_a_family_written_as_its_differences_counts_as_transformers_builds_it(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from oracle import build

    model = Model.from_config(TINY, family=_write(tmp_path, "biased_llama", BIASED_LLAMA))
    # transformers' Llama defaults attention_bias to false: its config is given the value the family defaults to
    real = build({**TINY, "model_type": "llama", "attention_bias": True})
    assert model.evaluate("params") == sum(p.numel() for p in real.parameters())


def test_only_what_the_file_writes_differs_from_its_base(tmp_path):
    spec = load_family(_write(tmp_path, "biased_llama", BIASED_LLAMA)).spec
    base = all_families()["llama"].spec
    assert spec.fields["attention_bias"].default is True
    assert {k: v for k, v in spec.fields.items() if k != "attention_bias"} == {k: v for k, v in base.fields.items() if k != "attention_bias"}
    assert (spec.bind, spec.choose, spec.root, spec.context) == (base.bind, base.choose, base.root, base.context)
    assert spec.model_types == ["biased_llama"]


def test_a_table_keeps_the_base_order_and_a_new_entry_follows_the_one_written_above_it():
    base = {"bind": {"a": "1", "b": "2", "c": "3"}}
    assert list(inherit(base, {"bind": {"b": "20", "x": "9"}}, "t")["bind"]) == ["a", "b", "x", "c"]
    assert list(inherit(base, {"bind": {"x": "9"}}, "t")["bind"]) == ["a", "b", "c", "x"]
    assert inherit(base, {"bind": {"b": "20"}}, "t")["bind"] == {"a": "1", "b": "20", "c": "3"}


def test_counts_merge_key_by_key_and_fields_replace_whole():
    base = {"counts": {"n": {"list": "layer_types", "when": "i > 0"}}, "fields": {"f": {"type": "int", "default": "2"}}}
    merged = inherit(base, {"counts": {"n": {"when": "i > 1"}}, "fields": {"f": {"type": "int"}}}, "t")
    assert merged["counts"]["n"] == {"list": "layer_types", "when": "i > 1"}
    assert merged["fields"]["f"] == {"type": "int"}


def test_refusals_add_to_the_base_s_and_drop_removes_entries():
    base = {"refuse": [{"when": "a > 0", "why": "a"}], "bind": {"a": "1", "b": "2"}, "per_layer": {"kinds": "k"}}
    merged = inherit(base, {"refuse": [{"when": "b > 0", "why": "b"}], "drop": ["bind.a", "per_layer"]}, "t")
    assert [r["why"] for r in merged["refuse"]] == ["a", "b"]
    assert merged["bind"] == {"b": "2"} and "per_layer" not in merged
    assert base["bind"] == {"a": "1", "b": "2"}  # the base's table is left as it was read
    with pytest.raises(DeclarationError, match="drop names 'bind.z'"):
        inherit(base, {"drop": ["bind.z"]}, "t")


def test_what_names_a_file_s_reader_is_never_inherited():
    merged = inherit({"model_types": ["a"], "when_present": "vision_config", "section_model_types": ["a_text"], "root": "r"}, {}, "t")
    assert merged == {"root": "r"}


def test_several_bases_apply_in_turn_and_a_base_may_be_a_partial_file(tmp_path):
    (tmp_path / "bases").mkdir()
    _write(tmp_path / "bases", "tower", '[fields]\nvision_width = { type = "int", default = "8", in = "vision_config" }\n[bind]\nd_vision = "vision_width"\n')
    path = _write(tmp_path, "mine", 'extends = ["llama", "tower"]\nmodel_types = ["mine"]\n')
    table = family_table(path)
    assert list(table["bind"])[-1] == "d_vision" and "vision_width" in table["fields"] and table["root"] == "causal_lm"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('extends = "nowhere"\nmodel_types = ["x"]\n', "no family file nowhere.toml"),
        ('extends = "me"\nmodel_types = ["x"]\n', "extends it back"),
        ('extends = 3\nmodel_types = ["x"]\n', "name a family file"),
        ('drop = ["bind.a"]\nmodel_types = ["x"]\n', "needs 'extends'"),
        ('extends = "llama"\nmodel_types = ["x"]\n[choose.mlp]\ncases = { true = "mlp", false = "gated_mlp" }\n', "choose.mlp: a choice with cases other than default needs the field"),
        ('extends = "llama"\nmodel_types = ["x"]\nchoose.mlp = 3\n', "choose.mlp: a choice is a component's name"),
        ('extends = "llama"\nmodel_types = ["x"]\nchoose.mlp = ["mlp"]\n', "choose.mlp: a choice is a component's name"),
    ],
)
def test_a_wrong_base_or_choice_is_one_line_naming_the_fix(tmp_path, text, message):
    with pytest.raises(DeclarationError, match=message) as caught:
        load_family(_write(tmp_path, "me", text))
    assert "\n" not in str(caught.value) and "Value error" not in str(caught.value)


def test_a_field_s_default_may_name_a_field_a_file_that_extends_adds(tmp_path):
    """The base's default names a field declared after it in the merged table: it is read first all the same."""
    path = _write(tmp_path, "late", 'extends = "llama"\nmodel_types = ["late"]\nfields.head_dim = { type = "int", default = "width // num_attention_heads" }\nfields.width = { type = "int", default = "64" }\n')
    model = Model.from_config({k: v for k, v in TINY.items()}, family=path)
    assert model.values["d_head"] == 64 // 4


def test_every_bundled_family_resolves_and_no_base_is_read_as_a_family():
    families = all_families()
    assert "transformer" not in families and "router_loss" not in families
    assert all(f.spec.model_types for f in families.values())


# rms_norm's options: the expressions the separate primitives declared, written out (upcast = 1, norms unfused, unless said)
def _saved(name: str, **args) -> sympy.Expr:
    library = default_library()
    component = library[name]
    symbols = {s.name: s for s in component.quantities["saved_activations"].free_symbols}
    values = {"rows": 6, "width": 5, "act_bytes": 2, "stat_bytes": 4, "upcast": 1, "fused_norms": 0, **args}
    return component.quantities["saved_activations"].subs({symbols[k]: v for k, v in values.items() if k in symbols})


def test_rms_norm_forms_keep_what_each_scaling_keeps():
    rows, width, act, stat = 6, 5, 2, 4
    assert _saved("rms_norm") == act * rows * width + 4 * rows * width + stat * rows
    assert _saved("rms_norm(form=offset)") == 8 * rows * width + 4 * width + stat * rows  # fp32 x, x̂ and 1 + g
    assert _saved("rms_norm(form=fp32_scale)") == 8 * rows * width + stat * rows
    assert _saved("rms_norm(form=fp32_weight)") == 8 * rows * width + 4 * width + stat * rows  # and the fp32 copy of g
    assert _saved("rms_norm(form = pow)", scaled=1, input_kept=0) == 2 * 4 * rows * width + 4 * width + 2 * stat * rows  # two statistics


def test_an_option_changes_only_what_its_value_declares():
    library = default_library()
    plain, offset, pow_ = library["rms_norm"], library["rms_norm(form=offset)"], library["rms_norm(form=pow)"]
    assert offset.quantities["params"] == plain.quantities["params"] and offset.quantities["forward_flops"] == plain.quantities["forward_flops"]
    assert offset.kind == plain.kind == "norm" and offset.name == "rms_norm(form=offset)"
    assert pow_.arg_names == ("width", "rows", "scaled", "input_kept")
    assert library["rms_norm(form=pow)"] is pow_  # built once


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("rms_norm(form=wide)", "option form is one of offset, fp32_scale, fp32_weight, pow, not 'wide'"),
        ("rms_norm(shape=pow)", "has no option 'shape'"),
        ("linear(form=pow)", "has no options"),
        ("rms_norm(form=pow", "name\\(option=value"),
    ],
)
def test_a_wrong_option_is_one_line(name, message):
    library = default_library()
    with pytest.raises(DeclarationError, match=message):
        library[name]
    assert name not in library


def test_an_option_may_not_change_what_the_primitive_is():
    from symform.engine.language.declarations import parse_component, validate_declaration

    raw = {"doc": "d", "args": ["width"], "params": "width", "forward_flops": "0", "bytes_moved": "0", "saved_activations": "0", "kind": "norm",
           "options": {"form": {"odd": {"kind": "projection"}}}}
    with pytest.raises(DeclarationError, match="changes 'kind'"):
        parse_component("my_norm", validate_declaration("my_norm", raw), default_library().vocabulary)


def test_the_families_read_where_a_key_is_present_are_found_without_reading_every_family():
    # a config reads its own family file and the keyed readers of its model type, not all 60-odd families:
    # what that finds must be what reading every family finds, for every model type a family reads
    from symform.engine.language import families

    everything = [(model_type, present, family) for (model_type, present), family in families._readers().items() if present]
    for model_type in {model_type for model_type, _ in families._readers()} | {"no_such_type", "not an identifier"}:
        expected = [entry for entry in everything if entry[0] == model_type]
        assert [entry for entry in families._keyed_readers(model_type) if entry[0] == model_type] == expected, model_type
