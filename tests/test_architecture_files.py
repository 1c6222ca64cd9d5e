"""Architectures declared in a file of one's own: every command runs on them, and a hostile file runs nothing."""

from pathlib import Path

import pytest
import sympy
from checks import run

import symform

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"
SIZES = ["--set", "d_model=2048", "--set", "n_layers=24", "--set", "vocab=50304", "--set", "d_ff=5632"]


@pytest.mark.parametrize("example, heads", [("linear_attention.toml", 16), ("differential_attention.toml", 8)])
def test_every_command_runs_on_the_examples(capsys, example, heads):
    path = str(EXAMPLES / example)
    sized = [*SIZES, "--set", f"n_heads={heads}"]
    for argv in (
        ["params", path, *sized, "--json"],
        ["flops", path, *sized, "--batch", "2", "--seq", "1024"],
        ["derive", "train-flops", path, "--assume", "standard", "--leading"],
        ["derive", "params", path, *sized, "--assume", "standard", "--leading", "--json"],
        ["latex", "forward-flops", path],
    ):
        code, out, err = run(capsys, *argv)
        assert code == 0, err
        assert out.strip()


def test_linear_attention_costs_grow_linearly_with_the_sequence():
    """Katharopoulos et al. 2020: linear attention is O(N) in the sequence length."""
    model = symform.load(EXAMPLES / "linear_attention.toml")
    seq = symform.vocabulary()["seq"]
    for quantity in ("forward_flops", "bytes_moved", "saved_activations"):
        assert sympy.degree(model.expression(quantity).expr, seq) == 1


def test_differential_attention_adds_lambdas_and_a_head_norm_to_mha():
    """Ye et al. 2024: per layer, four λ vectors of d_h/2 and a per-head RMSNorm of width d_h over plain MHA projections."""
    d, heads = 2048, 8
    library = symform.load(EXAMPLES / "differential_attention.toml").library
    model = symform.Model.from_component("diff_attention", library=library, d_model=d, n_heads=heads)
    d_head = d // heads
    assert model.evaluate("params") == 4 * d * d + 4 * (d_head // 2) + d_head


def write(tmp_path, text):
    path = tmp_path / "arch.toml"
    path.write_text(text)
    return str(path)


MINIMAL = """
[model]
root = "proj"
[components.proj]
doc = "one projection"
args = ["d_model"]
[[components.proj.parts]]
name = "w"
use = "linear"
with = { d_in = "d_model", d_out = "d_model" }
"""


def test_a_minimal_file_with_defaults_and_new_symbols(capsys, tmp_path):
    text = MINIMAL.replace('root = "proj"', 'root = "proj"\narguments = { d_model = 64 }')
    code, out, _ = run(capsys, "params", write(tmp_path, text), "--json")
    assert code == 0 and '"total": 4096' in out
    text = MINIMAL.replace("d_model", "d_state") + '\n[symbols.d_state]\nlatex = "d_s"\nkind = "architecture"\ndescription = "state width"\n'
    code, out, _ = run(capsys, "latex", "params", write(tmp_path, text))
    assert code == 0 and out.strip() == "d_s^{2}"


SENTINEL = Path("/tmp/symform-hostile-file-ran")


@pytest.mark.parametrize(
    "text, message",
    [
        (MINIMAL.replace('d_out = "d_model"', f"d_out = \"__import__('os').system('touch {SENTINEL}')\""), "not allowed"),
        (MINIMAL.replace('d_out = "d_model"', "d_out = \"__import__('os')\""), "unknown function '__import__'"),
        (MINIMAL.replace('d_out = "d_model"', 'd_out = "d_model.__class__"'), "attribute access is not allowed"),
        (MINIMAL.replace('d_out = "d_model"', 'd_out = "(lambda: 0)()"'), "not allowed"),
        (MINIMAL.replace('use = "linear"', 'use = "nonexistent"'), "unknown component 'nonexistent'"),
        (MINIMAL.replace('root = "proj"', 'root = "proj"\nhook = "x"'), "Extra inputs"),
        (MINIMAL + '\n[symbols.d_model]\nlatex = "d"\nkind = "architecture"\ndescription = "again"\n', "already in symform's vocabulary"),
        (MINIMAL + '\n[symbols."bad name"]\nlatex = "x"\nkind = "architecture"\ndescription = "x"\n', "not an identifier"),
        ("[model\nroot=", "not valid TOML"),
        (MINIMAL.replace('root = "proj"', 'root = "nothing"'), "unknown component 'nothing'"),
    ],
)
def test_bad_or_hostile_files_are_refused_and_run_nothing(capsys, tmp_path, text, message):
    code, out, err = run(capsys, "params", write(tmp_path, text), "--set", "d_model=8")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err
    assert not SENTINEL.exists()


def test_unset_sizes_are_named_when_a_number_is_asked_for(capsys, tmp_path):
    code, _, err = run(capsys, "params", write(tmp_path, MINIMAL))
    assert code == 2 and "no value for d_model" in err
