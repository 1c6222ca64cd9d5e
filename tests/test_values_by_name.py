"""Numbers valued by symbol name in fractions (multiplied.fraction_at) are the sympy route's: a model's own size keeps its value
whatever its name, beside the parallel degrees a rank's parameters and an FSDP unit are derived over; and a layer that is
one product is its own part under a per-op checkpointing policy."""

from __future__ import annotations

import json

import pytest
from checks import run

import symform
from symform.analysis.memory import frameworks
from symform.analysis.memory.memory import params_on_rank
from symform.analysis.memory.settings import Layout

# an architecture of one's own: two bias-free projections d_model -> SIZE -> d_model, SIZE a new symbol (not
# split by tensor parallelism); by hand each projection holds 64 * 96 = 6144 weights, the model 12288
TWO_PROJECTIONS = """
[model]
root = "proj"
arguments = {{ d_model = 64, {size} = 96 }}
[components.proj]
doc = "two projections"
args = ["d_model", "{size}"]
[[components.proj.parts]]
name = "up"
use = "linear"
with = {{ d_in = "d_model", d_out = "{size}" }}
[[components.proj.parts]]
name = "down"
use = "linear"
with = {{ d_in = "{size}", d_out = "d_model" }}
[symbols.{size}]
latex = "w"
kind = "architecture"
description = "inner width"
"""


def _model(tmp_path, size: str):
    path = tmp_path / f"{size}.toml"
    path.write_text(TWO_PROJECTIONS.format(size=size))
    return str(path)


@pytest.mark.parametrize("size", ["tensor", "pipeline", "expert"])
def test_a_size_named_like_a_degree_keeps_its_value_on_a_rank(tmp_path, size):
    """A model's own size named 'tensor', 'pipeline' or 'expert' keeps its value on a rank: 12,288 parameters, at any tensor degree."""
    model = symform.load(_model(tmp_path, size))
    assert model.evaluate("params") == 12288
    for tensor in (1, 2):
        assert params_on_rank(model, Layout(tensor=tensor)) == 12288


def test_the_time_estimate_does_not_depend_on_a_size_s_name(tmp_path, capsys):
    """symform time's optimizer seconds and step time are the same whether a size is named 'width' or 'tensor'."""
    found = {}
    for size in ("width", "tensor"):
        code, out, err = run(capsys, "time", _model(tmp_path, size), "--gpu", "h100-sxm", "--gpus", "2", "--train", "--tp", "2", "--global-batch", "2", "--seq", "16", "--json")
        assert code == 0, err
        report = json.loads(out)
        found[size] = (report["estimate"]["optimizer_s"], report["estimate"]["tokens_per_s"])
    assert found["tensor"] == found["width"]


@pytest.mark.parametrize("size", ["tensor_degree", "expert_degree", "expert_tensor_degree"])
def test_a_size_named_like_a_unit_degree_keeps_its_value_in_fsdp_units(tmp_path, size):
    """An FSDP unit holds a model size named tensor_degree, expert_degree or expert_tensor_degree at its own value, not a degree's."""
    model = symform.load(_model(tmp_path, size))
    for tensor in (1, 2):
        assert frameworks.unit_params(model, tensor=tensor, expert=2, expert_tensor=1) == 6144
        assert frameworks.unit_params(model, tensor=tensor) == 6144


def test_fsdp_buffers_do_not_depend_on_a_size_s_name(tmp_path, capsys):
    """memory --train --framework torchtitan --zero 3 gathers 2 × 6,144 × 2 bytes for a size named tensor_degree, as for any other name."""
    found = {}
    for size in ("width", "tensor_degree"):
        code, out, err = run(capsys, "memory", _model(tmp_path, size), "--train", "--tp", "2", "--batch", "2", "--seq", "16", "--framework", "torchtitan", "--zero", "3", "--json")
        assert code == 0, err
        found[size] = json.loads(out)["total"]
    assert found["tensor_degree"] == found["width"]


# a layer that is itself one matrix product (a primitive with a per-op policy's ``output``), checkpointed whole
ONE_PRODUCT_LAYERS = """
[model]
root = "stack"
arguments = { d_model = 64, n_layers = 4 }
[components.block]
doc = "a layer that is one product, recomputed whole"
args = ["d_model"]
params = "d_model*d_model"
forward_flops = "2*batch*seq*d_model*d_model"
bytes_moved = "2*batch*seq*d_model + 2*d_model*d_model"
saved_activations = "2*batch*seq*d_model"
saved_activations_when = { full = "2*batch*seq*d_model", output = "2*batch*seq*d_model" }
[components.stack]
doc = "layers"
args = ["d_model", "n_layers"]
[[components.stack.parts]]
name = "layers"
use = "block"
repeat = "n_layers"
with = { d_model = "d_model" }
"""


def test_per_op_checkpointing_saves_a_layer_that_is_one_product(tmp_path, capsys):
    """torchtitan's per-op policy keeps the output of a layer that is itself its one (first) matrix product, beside its input."""
    path = tmp_path / "one_product.toml"
    path.write_text(ONE_PRODUCT_LAYERS)
    code, out, err = run(capsys, "memory", str(path), "--train", "--batch", "2", "--seq", "16", "--framework", "torchtitan", "--recompute", "selective", "--json")
    assert code == 0, err
    # each of 4 layers keeps its input and its product's output (the 1st mm is saved): 2 x 2 bytes x 2 x 16 x 64
    assert json.loads(out)["activations_by_component"]["layers"] == 4 * 2 * (2 * 2 * 16 * 64)
