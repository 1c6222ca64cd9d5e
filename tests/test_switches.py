"""A convention or a size that is a switch (0 or 1, formulas/symbols.toml most = 1) refuses 2 in one line on every path:
a model's conventions, an evaluation's values, a sweep's axis and the command line. fused_glu = 2 had counted a
gated MLP's kept tensors below what any kernel keeps, and kv_broadcast = 2 a cache no implementation holds."""

import numpy as np
import pytest

import symform
from symform.engine.errors import EvaluationError
from symform.engine.language.vocabulary import default_vocabulary
from symform.interface.cli.cli import main

SWITCH_CONVENTIONS = ("count_elementwise", "windowed", "kv_broadcast", "full_conv_window", "fp8_index_keys", "dropout", "upcast", "views", "every_expert", "fp8_linears", "fused_glu", "fused_loss", "cpu_kernels")


def test_the_switches_are_the_vocabulary_s_greatest_ones():
    assert set(SWITCH_CONVENTIONS) <= set(default_vocabulary().greatest)
    assert all(most == 1 for most in default_vocabulary().greatest.values())


@pytest.mark.parametrize("name", SWITCH_CONVENTIONS)
def test_a_switch_convention_refuses_2(name):
    model = symform.load("qwen3-0.6b")
    with pytest.raises(EvaluationError, match=f"{name} is a switch: give 0 or 1, got 2"):
        model.with_conventions(**{name: 2})
    assert model.with_conventions(**{name: 1}).evaluate("params") == model.evaluate("params")


def test_an_evaluation_value_refuses_2():
    model = symform.load("qwen3-0.6b")
    with pytest.raises(EvaluationError, match="all_logits is a switch: give 0 or 1, got 2"):
        model.evaluate("forward_flops", batch=1, seq=8, all_logits=2)


def test_a_sweep_axis_refuses_2():
    model = symform.load("qwen3-0.6b")
    with pytest.raises(EvaluationError, match="fused_glu is a switch: give 0 or 1, got 2"):
        symform.sweep(model, "saved_activations", grid={"batch": np.array([1, 2]), "seq": np.array([8]), "fused_glu": np.array([0, 2])})


def test_the_command_line_refuses_2(capsys):
    assert main(["memory", "qwen3-0.6b", "--train", "--batch", "1", "--seq", "64", "--convention", "fused_glu=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fused_glu is a switch: give 0 or 1, got 2" in err[0]


def test_a_lazy_sweep_s_blocks_refuse_2():
    """A lazy sweep's blocks check their points without the vocabulary: the switches' bound travels with them."""
    from symform.analysis.sweeps.lazy_sweeps import lazy_sweep

    model = symform.load("qwen3-0.6b")
    lazy = lazy_sweep(model, ["forward_flops"], zip={"batch": np.array([1, 1, 1, 1]), "seq": np.array([8, 8, 8, 8]), "decoding": np.array([0, 1, 0, 2])}, chunk=2)
    with pytest.raises(EvaluationError, match="decoding is a switch: give 0 or 1, got 2"):
        lazy.compute()
