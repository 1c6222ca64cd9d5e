"""Declarations that do not fit together are refused with one clear line."""

import pytest
import sympy

from symform import DeclarationError, Model
from symform.engine.graph.graph import root_component
from symform.engine.language.declarations import default_library, parse_components
from symform.engine.errors import ConfigError, SymformError


def merge(table):
    library = default_library()
    return library.merged(parse_components(table, library.vocabulary, "test", existing=library.components))


GOOD_PART = {"name": "proj", "use": "linear", "with": {"d_in": "d_model", "d_out": "d_model"}}


def test_a_new_composite_of_existing_parts_costs_what_its_parts_cost():
    library = merge({"two_projections": {"doc": "two square projections", "args": ["d_model"], "parts": [GOOD_PART, {**GOOD_PART, "name": "proj2"}]}})
    model = Model.from_component("two_projections", library=library, d_model=64)
    assert model.evaluate("params") == 2 * 64 * 64
    assert model.evaluate("forward_flops", batch=3, seq=5) == 2 * 2 * 3 * 5 * 64 * 64


@pytest.mark.parametrize(
    "table, message",
    [
        ({"c": {"doc": "", "args": ["d_model"], "parts": [{**GOOD_PART, "use": "nope"}]}}, "unknown component 'nope'"),
        ({"c": {"doc": "", "args": ["d_model"], "parts": [{**GOOD_PART, "with": {"d_in": "d_model"}}]}}, "missing argument 'd_out'"),
        ({"c": {"doc": "", "args": ["d_model"], "parts": [{**GOOD_PART, "with": {**GOOD_PART["with"], "width": "1"}}]}}, "unknown argument 'width'"),
        ({"c": {"doc": "", "args": ["d_model"], "parts": [{**GOOD_PART, "with": {"d_in": "d_modl", "d_out": "1"}}]}}, "unknown name 'd_modl'"),
        ({"c": {"doc": "", "args": ["d_model"], "parts": [GOOD_PART, GOOD_PART]}}, "declared twice"),
        ({"c": {"doc": "", "args": ["d_model"], "parts": [GOOD_PART], "params": "1"}}, "sum of its parts"),
        ({"c": {"doc": "", "parts": [], "params": "1"}}, "sum of its parts"),
        ({"c": {"doc": "", "args": ["w"], "params": "w"}}, "must declare forward_flops"),
        ({"c": {"doc": "", "args": ["w"], "params": "d_model", "forward_flops": "0", "bytes_moved": "0", "saved_activations": "0"}}, "unknown name 'd_model'"),
        ({"c": {"doc": "", "args": ["batch"], "params": "0"}}, "shadows the vocabulary"),
        ({"c": {"doc": "", "args": ["w"], "params": "__import__('os')", "forward_flops": "0", "bytes_moved": "0", "saved_activations": "0"}}, "unknown function '__import__'"),
        ({"c": {"doc": "", "args": [], "parts": [{"name": "me", "use": "c"}]}}, "cycle"),
        (
            {
                "a": {"doc": "", "args": [], "parts": [{"name": "b", "use": "b"}]},
                "b": {"doc": "", "args": [], "parts": [{"name": "a", "use": "a"}]},
            },
            "cycle",
        ),
        ({"c": {"doc": "", "args": ["d_model"], "parts": [{**GOOD_PART, "repeat": {"flopz": "2"}}]}}, "repeat names 'flopz'"),
        ({"c": {"doc": "", "args": ["d_model"], "parts": [{**GOOD_PART, "use": "@missing"}]}}, "no slot argument 'missing'"),
        ({"c": {"doc": "", "args": ["d_model"], "unknown_field": 1}}, "Extra inputs"),
        ({"linear": {"doc": "", "args": [], "params": "0", "forward_flops": "0", "bytes_moved": "0", "saved_activations": "0"}}, "already declared"),
    ],
)
def test_inconsistent_declarations_are_refused(table, message):
    with pytest.raises(DeclarationError, match=message) as info:
        merge(table)
    assert "\n" not in str(info.value)


def test_a_variant_extends_a_composite_without_repeating_it():
    library = merge(
        {
            "attention_without_rope": {"doc": "GQA without rotary positions", "extends": "gqa_attention", "remove": ["rope"]},
            "wide_mlp": {
                "doc": "gated MLP whose down projection has a bias",
                "extends": "gated_mlp",
                "args": ["mlp_bias = 1"],
                "parts": [{"name": "extra", "use": "linear", "with": {"d_in": "d_model", "d_out": "1"}}],
            },
        }
    )
    base = library["gqa_attention"]
    variant = library["attention_without_rope"]
    assert [p.name for p in variant.parts] == [p.name for p in base.parts if p.name != "rope"]
    assert variant.requirements == base.requirements and variant.assumptions == base.assumptions
    wide = Model.from_component("wide_mlp", library=library, d_model=8, d_ff=16)
    plain = Model.from_component("gated_mlp", d_model=8, d_ff=16, mlp_bias=1)
    assert wide.evaluate("params") == plain.evaluate("params") + 8
    assert [p.name for p in library["wide_mlp"].parts][-1] == "extra"


@pytest.mark.parametrize(
    "table, message",
    [
        ({"v": {"doc": "", "extends": "nothing_like_it"}}, "there is no component 'nothing_like_it'"),
        ({"a": {"doc": "", "extends": "b"}, "b": {"doc": "", "extends": "a"}}, "cycle"),
        ({"v": {"doc": "", "extends": "linear"}}, "only composites can be extended"),
        ({"v": {"doc": "", "extends": "gated_mlp", "remove": ["no_such_part"]}}, "does not have"),
        ({"v": {"doc": "", "remove": ["x"]}}, "'remove' needs 'extends'"),
    ],
)
def test_bad_variants_are_refused(table, message):
    with pytest.raises(DeclarationError, match=message):
        merge(table)


def test_requirements_are_checked_with_the_values():
    with pytest.raises(Exception, match=r"n_heads % n_kv_heads == 0 does not hold \(n_heads=6, n_kv_heads=4\)"):
        Model.from_component("gqa_attention", d_model=48, n_heads=6, n_kv_heads=4, d_head=8)


def test_slots_swap_components_without_new_declarations():
    sizes = dict(d_model=32, n_layers=2, vocab=50, d_ff=64, n_heads=4, n_kv_heads=4, d_head=8)
    gated = Model.from_component("causal_lm", **sizes)
    plain = Model.from_component("causal_lm", mlp="mlp", **sizes)
    # a gated MLP has one more d_model×d_ff projection per layer than a plain one
    assert gated.evaluate("params") - plain.evaluate("params") == 2 * 32 * 64


def test_an_empty_slot_costs_nothing_and_the_component_put_there_takes_the_models_sizes():
    library = merge(
        {
            "nothing": {"doc": "no tower", "parts": []},
            "tower": {"doc": "a projection to the model's width", "args": ["d_tower", "d_model", "bias = 0"], "parts": [{**GOOD_PART, "with": {"d_in": "d_tower", "d_out": "d_model", "bias": "bias"}}]},
            "towered": {"doc": "a projection and an optional tower", "args": ["d_model", "tower = @nothing"], "parts": [GOOD_PART, {"name": "visual", "use": "@tower", "pass": True}]},
        }
    )
    bare = Model.from_component("towered", library=library, d_model=8)
    assert bare.evaluate_breakdown("params", depth=None) == {"proj": 64}  # no entry for the empty slot
    assert bare.evaluate("forward_flops", batch=1, seq=2) == 2 * 2 * 64
    full = Model.from_component("towered", library=library, d_model=8, tower="tower", d_tower=3, bias=1)
    assert full.evaluate_breakdown("params", depth=None) == {"proj": 64, "visual/proj": 3 * 8 + 8}
    with pytest.raises(ConfigError, match="towered has no argument 'd_tower'"):
        Model.from_component("towered", library=library, d_model=8, d_tower=3)  # no tower to take it
    text = full.with_arguments(tower="nothing")  # the tower's own sizes go with it
    assert text.evaluate_breakdown("params", depth=None) == {"proj": 64}
    assert full.with_arguments(tower="nothing", d_model=4).evaluate("params") == 16
    with pytest.raises(ConfigError, match="towered has no argument 'd_tower'"):
        full.with_arguments(tower="nothing", d_tower=5)  # named again: nothing takes it
    with pytest.raises(SymformError, match="^model \\(towered\\): tower = tower needs d_tower, which this model does not bind; give a value for it too"):
        bare.with_arguments(tower="tower")


def test_every_bundled_component_instantiates_with_symbols():
    library = default_library()
    names = set(library.vocabulary.names("architecture"))
    for component in library.components.values():
        args = {a.name: 3 for a in root_component(library, component.name, {}).args if not a.is_slot and a.default is None}  # a tower's sizes too
        if component.requirements:
            args = {k: 4 for k in args}
        if "window" in args:  # a window spans whole merged patches (Qwen2.5-VL: window // (merge·patch) windows' width)
            args["window"] = 4 * args["window"] ** 3
        try:
            model = Model.from_component(component.name, **args)
        except ConfigError as e:  # a stack that parts its total among kinds (Jamba: n_layers - n_mamba_layers - n_attention_moe_layers) needs a larger total
            if "repeats" not in str(e) or "n_layers" not in args:
                raise
            model = Model.from_component(component.name, **(args | {"n_layers": 4 * args["n_layers"]}))
        for quantity in ("params", "forward_flops", "backward_flops", "bytes_moved", "saved_activations"):
            expr = model.expression(quantity).expr
            assert isinstance(expr, sympy.Expr)
            assert {s.name for s in expr.free_symbols} <= names | {"batch", "seq", "source_seq"}  # source_seq: an encoder-decoder's encoder length, no default


def test_the_header_scan_names_every_bundled_files_components_as_tomllib_reads_them():
    # a command reads only the component files it uses: which file declares which component comes from a scan
    import tomllib

    from symform.engine.language.declarations import component_files, declared_names

    for path in component_files():
        text = path.read_text(encoding="utf-8")
        assert declared_names(text) in (None, tuple(tomllib.loads(text))), path.name


@pytest.mark.parametrize(
    "text",
    [
        'doc = "a key before any header"\n[a]\ndoc = ""\n',
        '[a]\ndoc = """\n[b]\n"""\n',
        '["a quoted name"]\ndoc = ""\n',
        '[a]\nshape = [\n  [1, 2],\n]\n',
    ],
)
def test_a_file_a_header_scan_could_misread_is_read_whole(text):
    from symform.engine.language.declarations import declared_names

    assert declared_names(text) is None


def test_a_scan_misled_by_a_header_inside_a_value_reads_every_file_instead(tmp_path, monkeypatch):
    from symform.engine.language import declarations

    plain = tmp_path / "plain.toml"
    plain.write_text('[one]\ndoc = "one"\nargs = ["w"]\nparams = "w"\nforward_flops = "w"\nbytes_moved = "w"\nsaved_activations = "w"\n')
    misleading = tmp_path / "misleading.toml"  # the line [1] is a value of an array, not a table header
    misleading.write_text('[two]\ndoc = "two"\nargs = ["w"]\nparams = "w"\nforward_flops = "w"\nbytes_moved = "w"\nsaved_activations = "w"\nleading = {}\nswitches = [\n[1]\n]\n')
    monkeypatch.setattr(declarations, "component_files", lambda: [plain, misleading])
    assert declarations.declared_names(misleading.read_text()) == ("two", "1")
    components = declarations.LazyComponents(declarations.component_tables(), default_library().vocabulary, "test")
    assert "1" in components  # what the scan said, until the file is read
    with pytest.raises(DeclarationError, match="switches"):
        components["two"]  # read whole: the array is the declaration's (and not a list of names)
    assert list(components) == ["one", "two"] and components["one"].name == "one"
