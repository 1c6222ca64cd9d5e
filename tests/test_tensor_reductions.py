"""Tensor parallelism's all-reduces per layer, as the layers declare them (``tensor_reductions``).

Megatron's split reduces the attention's and the MLP's row-parallel outputs each before they enter the residual
(Shoeybi et al. 2019, Fig. 3): two a layer. A parallel residual layer, x + attn(norm(x)) + mlp(norm'(x)), may sum
the two partial outputs first and reduce once; Falcon's serving engines do (TensorRT-LLM's FalconDecoderLayer: "Not
to apply allreduce inside the Attention/MLP layers. allreduce applies after those layer."; vLLM's Falcon), so
Falcon's layers declare one, where TensorRT-LLM's GPT-NeoX and vLLM's GPT-J reduce each block and keep two.
"""

from __future__ import annotations

import json

import pytest

import symform
from symform.analysis.memory.settings import Layout
from symform.analysis.time import timing
from symform.analysis.time.step_model import tensor_reductions
from symform.engine.graph.model import Model

FALCON = dict(model_type="falcon", vocab_size=128, num_hidden_layers=4, hidden_size=64, num_attention_heads=4, ffn_hidden_size=96, max_position_embeddings=64)
LAYOUTS = {
    "new decoder architecture, two norms": (dict(new_decoder_architecture=True, num_kv_heads=2), 1),
    "new decoder architecture, one norm": (dict(new_decoder_architecture=True, num_kv_heads=2, num_ln_in_parallel_attn=1), 1),
    "multi-query attention beside the MLP behind one norm": (dict(multi_query=True, parallel_attn=True), 1),
    "sequential blocks": (dict(multi_query=False, parallel_attn=False, num_kv_heads=4), 2),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_falcon_layout_declares_its_all_reduces(layout):
    fields, expected = LAYOUTS[layout]
    assert tensor_reductions(Model.from_config({**FALCON, **fields})) == expected


@pytest.mark.parametrize("preset, expected", [("falcon-180b", 1), ("gpt-j-6b", 2), ("llama-3-8b", 2), ("qwen3-30b-a3b", 2), ("deepseek-v3", 2)])
def test_presets_reduce_as_their_layers_are_built(preset, expected):
    assert tensor_reductions(symform.load(preset)) == expected


def test_a_parallel_layer_sends_one_all_reduce_a_layer_less():
    """The same sizes with sequential and parallel blocks: the tensor-parallel bytes differ by one forward
    all-reduce of b·s·d activations a layer, 2(t−1)/t of the buffer on each rank (a ring's bus bytes)."""
    tensor, micro, seq, layers = 2, 2, 32, FALCON["num_hidden_layers"]
    sent = {}
    for name in ("new decoder architecture, two norms", "sequential blocks"):
        model = Model.from_config({**FALCON, **LAYOUTS[name][0]})
        step = timing.training_time(model, "h100-sxm", global_batch=micro, micro_batch=micro, seq=seq, layout=Layout(tensor=tensor))
        sent[name] = step.comm["tensor"].bytes_per_rank
    buffer = micro * seq * FALCON["hidden_size"] * 2  # bf16 activations
    assert sent["sequential blocks"] - sent["new decoder architecture, two norms"] == pytest.approx(layers * 2 * (tensor - 1) / tensor * buffer)


def test_serving_says_how_many_all_reduces_a_layer_runs(capsys):
    from symform.interface.cli.cli import main

    said = {}
    for preset in ("falcon-180b", "llama-3.1-70b"):
        assert main(["time", preset, "--gpu", "h100-sxm", "--gpus", "8", "--tp", "8", "--infer", "--batch", "1", "--prompt", "128", "--output", "2", "--json"]) == 0
        said[preset] = json.loads(capsys.readouterr().out)["assumptions"]["tensor_parallel"]
    assert "; 1 all-reduce per layer" in said["falcon-180b"] and "; 2 all-reduces per layer" in said["llama-3.1-70b"]


def _with_reductions(tmp_path, declared: str, kind: str = 'kind = "layer"\n') -> str:
    """docs/examples/linear_attention.toml with its layer declaring ``tensor_reductions``."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "examples" / "linear_attention.toml").read_text()
    layer = "[components.linear_attention_layer]\n"
    assert layer in text
    path = tmp_path / "arch.toml"
    path.write_text(text.replace(layer, layer + kind + f'tensor_reductions = "{declared}"\n'))
    return str(path)


SIZES = ["--set", "d_model=2048", "--set", "n_layers=24", "--set", "vocab=50304", "--set", "d_ff=5632", "--set", "n_heads=16"]
SERVE = ["--gpu", "h100-sxm", "--gpus", "2", "--tp", "2", "--infer", "--batch", "1", "--prompt", "128", "--output", "2", "--json"]


def test_a_users_layer_declares_its_own_all_reduces(capsys, tmp_path):
    from symform.interface.cli.cli import main

    assert main(["time", _with_reductions(tmp_path, "1"), *SIZES, *SERVE]) == 0
    assert "; 1 all-reduce per layer" in json.loads(capsys.readouterr().out)["assumptions"]["tensor_parallel"]


@pytest.mark.parametrize(
    "declared, kind, message",
    [
        ("-1", 'kind = "layer"\n', "give a whole number from 0 to 16"),
        ("1/2", 'kind = "layer"\n', "give a whole number from 0 to 16"),
        ("seq", 'kind = "layer"\n', "give a whole number from 0 to 16"),
        ("10**30", 'kind = "layer"\n', "give a whole number from 0 to 16"),
        ("17", 'kind = "layer"\n', "give a whole number from 0 to 16"),
        ("²", 'kind = "layer"\n', "give a whole number from 0 to 16"),
        ("1", "", 'declare it on a component of kind "layer"'),
    ],
)
def test_a_count_that_is_no_layers_whole_number_is_refused_in_one_line(capsys, tmp_path, declared, kind, message):
    from symform.interface.cli.cli import main

    assert main(["params", _with_reductions(tmp_path, declared, kind), *SIZES]) == 2
    err = capsys.readouterr().err
    assert "tensor_reductions" in err and message in err and err.count("\n") == 1


def test_the_api_refuses_a_count_that_is_no_number():
    from fractions import Fraction

    from symform.analysis.parallel import parallel_comm

    sizes = dict(batch=1, seq=8, d_model=16, bytes_per_element=2, tensor=2)
    assert parallel_comm.tensor_parallel_layer(**sizes, reductions=Fraction(3, 2))[0].count == Fraction(3, 2)
    for bad in (-1, 2.5, "x", None, True):
        with pytest.raises(symform.SymformError, match="reductions is"):
            parallel_comm.tensor_parallel_layer(**sizes, reductions=bad)


def test_sequence_parallelism_keeps_the_layers_count():
    """The reduce-scatters of the blocks' outputs follow the count as the all-reduces do, so sequence parallelism
    sends the same bytes as tensor parallelism alone, for a parallel layer too."""
    sent = {}
    model = symform.load("falcon-180b")
    for sequence in (False, True):
        step = timing.training_time(model, "h100-sxm", global_batch=1, micro_batch=1, seq=512, layout=Layout(tensor=8, sequence=sequence))
        sent[sequence] = step.comm["tensor"].bytes_per_rank
    assert sent[True] == pytest.approx(sent[False])


def _nested(tmp_path, outer: str, inner: str) -> str:
    """linear_attention.toml's layer (kind layer) twice inside a pair layer (kind layer) repeated n_layers times."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "examples" / "linear_attention.toml").read_text()
    layer = "[components.linear_attention_layer]\n"
    text = text.replace(layer, layer + 'kind = "layer"\n' + (f'tensor_reductions = "{inner}"\n' if inner else ""))
    pair = '\n[components.pair_layer]\nkind = "layer"\ndoc = "two layers as one"\nargs = ["d_model", "d_ff", "n_heads"]\n' + (f'tensor_reductions = "{outer}"\n' if outer else "")
    pair += '\n[[components.pair_layer.parts]]\nname = "pair"\nuse = "linear_attention_layer"\nrepeat = "2"\npass = true\n'
    path = tmp_path / "nested.toml"
    path.write_text(text.replace('use = "linear_attention_layer"', 'use = "pair_layer"') + pair)
    return str(path)


@pytest.mark.parametrize("outer, inner, expected", [("3", "1", 3), ("", "3", 6), ("", "0", 0), ("", "", 2)])
def test_a_layer_inside_a_declaring_layer_is_its_part_and_layers_in_pairs_count_both(capsys, tmp_path, outer, inner, expected):
    """The outer declaration holds for the layers inside it; with the inner alone declared, each of the n_layers
    pairs runs its two layers' counts (3 each: 6 a pair)."""
    from symform.interface.cli.cli import main

    assert main(["time", _nested(tmp_path, outer, inner), *SIZES, *SERVE]) == 0
    said = json.loads(capsys.readouterr().out)["assumptions"]["tensor_parallel"]
    assert f"; {expected} all-reduce{'' if expected == 1 else 's'} per layer" in said


def test_a_component_of_another_kind_may_not_inherit_a_layers_count(capsys, tmp_path):
    from pathlib import Path

    from symform.interface.cli.cli import main

    text = Path(_with_reductions(tmp_path, "1")).read_text()
    text += '\n[components.odd_layer]\nextends = "linear_attention_layer"\nkind = "mixer"\ndoc = "the same layer, another kind"\n'
    text = text.replace('root = "linear_attention_lm"', 'root = "linear_attention_lm"', 1)
    path = tmp_path / "odd.toml"
    path.write_text(text)
    assert main(["params", str(path), *SIZES]) == 2
    err = capsys.readouterr().err
    assert "inherits one" in err and err.count("\n") == 1
