"""``symform import``: a declaration for a transformers causal LM no bundled family reads, its sizes bound to the
config's fields. Expected counts are PyTorch's own ``numel()`` of transformers' model on the meta device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from checks import one_line_error, run
from symform import ConfigError, Model
from symform.engine.language.userfile import load_declaration_file

ROOT = Path(__file__).resolve().parents[1]

# Tiny configs of model types no bundled family reads (symform models), each with a second of other sizes: a
# declaration whose sizes were copied as numbers would count the first right and the second wrong.
_SIZES = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 101, "max_position_embeddings": 64}
_OTHER = {"hidden_size": 96, "intermediate_size": 80, "num_hidden_layers": 3, "num_attention_heads": 6, "vocab_size": 131, "max_position_embeddings": 48}
CONFIGS = {
    "phi": ({**_SIZES, "num_key_value_heads": 2}, {**_OTHER, "num_key_value_heads": 3}),
    "stablelm": ({**_SIZES, "num_key_value_heads": 2}, {**_OTHER, "num_key_value_heads": 2}),
    "gpt_neox": ({**_SIZES, "rotary_pct": 0.5}, {**_OTHER, "rotary_pct": 0.5}),
    "codegen": ({"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 101, "n_positions": 64, "rotary_dim": 8}, {"n_embd": 96, "n_layer": 3, "n_head": 6, "vocab_size": 131, "n_positions": 48, "rotary_dim": 8}),
    "bloom": ({"hidden_size": 64, "n_layer": 2, "n_head": 4, "vocab_size": 101}, {"hidden_size": 96, "n_layer": 3, "n_head": 6, "vocab_size": 131}),
    "opt": (
        {"hidden_size": 64, "ffn_dim": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 101, "max_position_embeddings": 64, "word_embed_proj_dim": 64},
        {"hidden_size": 96, "ffn_dim": 80, "num_hidden_layers": 3, "num_attention_heads": 6, "vocab_size": 131, "max_position_embeddings": 48, "word_embed_proj_dim": 96},
    ),
    "helium": ({**_SIZES, "num_key_value_heads": 2, "head_dim": 16}, {**_OTHER, "num_key_value_heads": 3, "head_dim": 8}),
    # its masked-LM head registers one bias twice (its own, and its decoder's): counted once, where first yielded
    "camembert": ({**_SIZES, "type_vocab_size": 2}, {**_OTHER, "type_vocab_size": 3}),
    # its head is an nn.Linear with a per-token logit scale of its own; attention and MLP blocks alternate (its
    # config writes each layer as two blocks, and each count of layers twice over)
    "dory": tuple(
        {**sizes, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 6, "layer_types": ["sliding_attention", "mlp", "full_attention", "mlp", "sliding_attention", "mlp"], "n_input_layers": 2, "n_recurrent_layers": 2, "n_output_layers": 2}
        for sizes in (_SIZES, _OTHER)
    ),
}


@pytest.fixture(scope="module")
def oracle():
    """tests/oracle.py's meta-device model (torch and transformers, else the test is skipped)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import oracle as module

    return module


def _numel(oracle, config: dict) -> int:
    return oracle.meta_params(config)


def _full(oracle, config: dict) -> dict:
    """The config as transformers reads it, every default written out (what a saved config.json holds)."""
    return json.loads(json.dumps(oracle.hf_config(config).to_dict(), default=str))


def _imported(capsys, tmp_path: Path, config: dict) -> Path:
    source, out = tmp_path / "config.json", tmp_path / "imported.toml"
    source.write_text(json.dumps(config))
    code, stdout, stderr = run(capsys, "import", str(source), "--out", str(out))
    assert code == 0, stderr
    assert "parameters" in stdout
    return out


@pytest.mark.oracle
@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_an_imported_declaration_counts_pytorchs_parameters_at_its_config_and_at_other_sizes(model_type, oracle, capsys, tmp_path):
    first, second = ({"model_type": model_type, **sizes} for sizes in CONFIGS[model_type])
    out = _imported(capsys, tmp_path, first)
    assert int(Model.load(out).evaluate("params")) == _numel(oracle, first)
    spec, library = load_declaration_file(out, config=_full(oracle, second))
    assert int(Model(spec, library=library).evaluate("params")) == _numel(oracle, second)
    code, stdout, _ = run(capsys, "params", str(out))  # the file is an ordinary declaration for every command
    assert code == 0 and f"{_numel(oracle, first):,}" in stdout


@pytest.mark.oracle
def test_check_sets_an_imported_declaration_beside_the_real_module(oracle, capsys, tmp_path):
    """Parameters per module, forward and backward FLOPs and the KV cache agree (the attention's score and
    context products come from the heads the config names); saved activations are not imported."""
    from symform.analysis.memory.oracle_check import check

    out = _imported(capsys, tmp_path, {"model_type": "gpt_neox", **CONFIGS["gpt_neox"][0]})
    report = check(Model.load(out))
    assert {r.quantity for r in report.differences} <= {"saved_activations"}, report.differences
    assert {r.part for r in report.rows if r.quantity == "params"} > {"total", "attn"}


@pytest.mark.oracle
def test_the_fields_a_size_follows_are_symform_names_bound_to_the_config(oracle, capsys, tmp_path):
    """GPT-NeoX's fused query_key_value is 3·hidden wide; its key/value cache 2·hidden per token and layer."""
    text = _imported(capsys, tmp_path, {"model_type": "gpt_neox", **CONFIGS["gpt_neox"][0]}).read_text()
    assert 'd_model = "hidden_size"' in text and 'n_layers = "num_hidden_layers"' in text
    assert 'with = { d_in = "d_model", d_out = "3*d_model", bias = "1" }' in text
    assert 'repeat = "n_layers"' in text


def test_a_module_no_primitive_describes_is_refused_by_its_path():
    torch = pytest.importorskip("torch")
    from symform.analysis.memory.module_tree import Unmappable, describe

    model = torch.nn.Module()
    model.block = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Conv2d(4, 4, 3)])
    one_line_error(Unmappable, lambda: describe(model, torch), "block.1", "Conv2d")
    model.block = torch.nn.ModuleList([torch.nn.LSTM(4, 4)])
    one_line_error(Unmappable, lambda: describe(model, torch), "block.0", "LSTM")
    grouped = torch.nn.Module()
    grouped.conv = torch.nn.Conv1d(8, 8, 3, groups=2)  # not depthwise: no causal_conv1d
    one_line_error(Unmappable, lambda: describe(grouped, torch), "conv", "depthwise")


@pytest.mark.oracle
@pytest.mark.parametrize(
    "source, words",
    [
        ('{"model_type": "no_such_model"}', ["no_such_model", "transformers"]),
        ('{"model_type": "vit"}', ["causal"]),
        ('{"model_type": "phi", "hidden_size": -64}', ["cannot build", "-64"]),
        ('{"model_type": "phi", "hidden_size": "wide"}', ["phi"]),
        ("[1, 2, 3]", ["JSON object"]),
        ('{"model_type": 7}', ["model_type"]),
        ("{not json", ["config.json"]),
        ('{"model_type": "phi", "num_hidden_layers": 1000000}', ["num_hidden_layers", "budget"]),
    ],
)
def test_malformed_or_hostile_configs_are_refused_in_one_line(source, words, oracle, capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(source)
    code, out, err = run(capsys, "import", str(path))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    for word in words:
        assert word in err, err


def test_a_hostile_name_or_unwritable_output_is_refused(capsys, tmp_path):
    code, _, err = run(capsys, "import", "phi", "--name", "x'; rm -rf /")
    assert code == 2 and "--name" in err and err.count("\n") == 1


def test_without_the_oracle_extra_import_names_the_pip_command():
    code = "import sys\nsys.modules['torch'] = None\nfrom symform.interface.cli.cli import main\nsys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, "import", "phi"], check=False, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert "pip install 'symform[oracle]'" in done.stderr and done.stderr.count("\n") == 1


# --- [model.bind]: a declaration's arguments from its config ------------------------------------------------

_DECLARATION = """
[model]
root = "linear"
bind = {{ d_in = {d_in!r}, d_out = "vocab_size" }}

[model.transformers]
model_type = "phi"
hidden_size = 64
vocab_size = 101
"""


def test_bind_reads_the_arguments_from_the_config_and_refuses_what_it_cannot_read(tmp_path):
    path = tmp_path / "decl.toml"
    path.write_text(_DECLARATION.format(d_in="2*hidden_size"))
    assert int(Model.load(path).evaluate("params")) == 2 * 64 * 101  # a 128 × 101 projection, by hand
    spec, library = load_declaration_file(path, config={"model_type": "phi", "hidden_size": 10, "vocab_size": 7})
    assert int(Model(spec, library=library).evaluate("params")) == 20 * 7
    path.write_text(_DECLARATION.format(d_in="num_layers"))
    one_line_error(ConfigError, lambda: Model.load(path), "num_layers", "[model.transformers]")
    path.write_text(_DECLARATION.format(d_in="__import__('os').system('true')"))
    with pytest.raises(ConfigError) as caught:
        Model.load(path)
    assert "\n" not in str(caught.value)
    path.write_text(_DECLARATION.format(d_in="hidden_size/3"))
    one_line_error(ConfigError, lambda: Model.load(path), "whole number")


# --- the fit itself: a size linear in each atom is recovered exactly from its corners -------------------------


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-3, 3), min_size=8, max_size=8), st.sets(st.sampled_from(["@K", "@G", "@D"]), max_size=3))
def test_a_size_linear_in_each_atom_is_recovered_from_its_corners(coefficients, depends):
    """c0 + c1·K + c2·G + c3·D + c4·KG + c5·KD + c6·GD + c7·KGD over the atoms it depends on, by hand."""
    from symform.analysis.memory.module_import import Atoms, _assign, _interpolate

    atoms = Atoms({"num_key_value_heads": {"@K": 1}, "num_attention_heads": {"@K": 1, "@G": 1}, "hidden_size": {"@K": 1, "@G": 1, "@D": 1}}, frozenset())
    names = atoms.names
    K, G, D = (sympy.Symbol(a) if a in depends else 0 for a in ("@K", "@G", "@D"))
    monomials = [1, K, G, D, K * G, K * D, G * D, K * G * D]
    truth = sympy.expand(sum(c * m for c, m in zip(coefficients, monomials)))
    low, high = _assign(names, atoms.layers, 0), _assign(names, atoms.layers, 1)

    def numbers_at(flipped):
        values = {sympy.Symbol(a): (high if a in flipped else low)[a] for a in names}
        return [truth.subs(values)]

    assert sympy.expand(_interpolate(0, set(depends), names, atoms, numbers_at, ["size"], "test") - truth) == 0


@pytest.mark.oracle
def test_a_module_inside_an_embedding_subclass_is_counted(oracle, capsys, tmp_path):
    """Inkling's token embedding is an nn.Embedding holding an RMSNorm of its own (embed_norm), its experts fused
    3-D tensors, its short convolutions depthwise Conv1d: every tensor is counted, at its config and at another."""
    from symform.analysis.memory.oracle_check import tiny_config

    first = tiny_config(_full(oracle, {"model_type": "inkling_text"}))
    out = _imported(capsys, tmp_path, first)
    assert int(Model.load(out).evaluate("params")) == _numel(oracle, first)
    second = {**first, "hidden_size": 96, "vocab_size": 131, "moe_intermediate_size": 48}
    spec, library = load_declaration_file(out, config=_full(oracle, second))
    assert int(Model(spec, library=library).evaluate("params")) == _numel(oracle, second)
