"""The routed experts' own tensor degree (Layout.expert_tensor, Megatron-Core's expert_tensor_parallel_size): the
experts split by it and spread over expert × expert tensor of a stage's tensor × data × context ranks (MoE parallel
folding), and a layout whose expert tensor degree is its tensor degree is today's layout, number for number."""

from __future__ import annotations

import subprocess
import sys

import pytest
import sympy

from symform import ConfigError, EvaluationError, load
from symform.analysis.memory.memory import Training, expert_params_per_device, params_per_device, training_memory
from symform.analysis.memory.settings import Layout
from symform.analysis.time.estimate import _at_expert_tensor, kernels
from symform.analysis.time.timing import training_time

# Qwen3-30B-A3B: 48 layers, each with 128 routed experts of three d_model × d_ff_expert projections (2048 × 768),
# no bias, no dense layer: 48 · 128 · 3 · 2048 · 768 routed parameters in all
EXPERT = 3 * 2048 * 768
ROUTED = 48 * 128 * EXPERT
assert ROUTED == 28_991_029_248


@pytest.fixture(scope="module")
def qwen():
    return load("qwen3-30b-a3b")


def _number(model, expr) -> int:
    value = sympy.sympify(expr).xreplace({model.vocabulary[k]: v for k, v in model.values.items() if k in model.vocabulary})
    assert value.is_Integer
    return int(value)


def test_folded_experts_hold_whole_experts_of_their_expert_rank(qwen):
    """tensor 2, expert 8, expert tensor 1: each rank holds 128/8 = 16 whole experts of every layer (16 · 48 · EXPERT
    parameters); with expert tensor 2 (today's split) half of each: the rest of the rank is the same either way."""
    folded = Layout(data=8, tensor=2, expert=8, expert_tensor=1)
    assert _number(qwen, expert_params_per_device(qwen, folded)) == 16 * 48 * EXPERT == 3_623_878_656
    assert _number(qwen, expert_params_per_device(qwen, Layout(data=8, tensor=2, expert=8))) == 16 * 48 * EXPERT // 2
    grown = params_per_device(qwen, folded) - params_per_device(qwen, Layout(data=8, tensor=2, expert=8))
    assert _number(qwen, grown) == 16 * 48 * EXPERT // 2 == 1_811_939_328


def test_folded_expert_states_shard_over_the_expert_data_group(qwen):
    """Distributed optimizer over data 8 × tensor 2 = 16 ranks of a stage with expert 4 × expert tensor 1: each
    expert's shard is held by 16 / 4 = 4 ranks, its master weights and Adam states (4 + 2·4 bytes) split 4 ways;
    each rank's routed parameters are 128/4 = 32 whole experts of every layer."""
    layout = Layout(data=8, tensor=2, expert=4, expert_tensor=1, distributed_optimizer=True)
    assert layout.expert_data == 4
    values = training_memory(qwen, batch=1, seq=16, setup=Training(layout=layout)).values
    dense = params_per_device(qwen, Layout(tensor=2)) - sympy.Rational(ROUTED, 2)  # today's split of the rest
    routed = 32 * 48 * EXPERT
    assert values["optimizer"] + values["master_weights"] == 12 * (sympy.Rational(routed, 4) + _number(qwen, dense) / sympy.Integer(8))
    assert values["weights"] == 2 * (routed + _number(qwen, dense))


@pytest.mark.parametrize("layout", [Layout(data=8, tensor=2, expert=8, zero=1), Layout(data=4, tensor=4, pipeline=2, expert=4, distributed_optimizer=True, sequence=True)])
def test_an_expert_tensor_degree_equal_to_tensor_changes_nothing(qwen, layout):
    from dataclasses import replace

    same = replace(layout, expert_tensor=layout.tensor)
    assert training_memory(qwen, batch=2, seq=256, setup=Training(layout=layout)).values == training_memory(qwen, batch=2, seq=256, setup=Training(layout=same)).values
    a = training_time(qwen, "h100-sxm", global_batch=64, micro_batch=2, seq=256, layout=layout)
    b = training_time(qwen, "h100-sxm", global_batch=64, micro_batch=2, seq=256, layout=same)
    assert a.layout | {"expert_tensor": layout.tensor} == b.layout
    assert {k: v for k, v in vars(a).items() if k != "layout"} == {k: v for k, v in vars(b).items() if k != "layout"}


def test_the_all_to_all_spans_the_expert_tensor_ranks(qwen):
    """Expert ranks sit next to the expert tensor ranks (Megatron-Core's expert order etp-ep-dp-pp): expert 8 with
    expert tensor 1 spans 8 consecutive ranks, one H100 node of 8 (scale-up); with expert tensor 2, 16 (scale-out)."""

    def comm(etp):
        return training_time(qwen, "h100-sxm", global_batch=64, micro_batch=1, seq=256, layout=Layout(data=8, tensor=2, expert=8, expert_tensor=etp, sequence=True)).comm["expert"]

    assert (comm(1).ranks, comm(1).link) == (8, "scale_up")
    assert (comm(2).ranks, comm(2).link) == (8, "scale_out")


def test_folded_expert_kernels_keep_their_flops_and_take_the_expert_tensor_split(qwen):
    """Under sequence parallelism a rank holds b·s/tensor tokens; an expert tensor group of 1 computes whole experts
    (width 768) for its own tokens: the per-device routed FLOPs are tensor 2's, half the rows at twice the width."""
    work = kernels(qwen, "train", workload={"batch": 2, "seq": 256}, tensor=2)
    folded = _at_expert_tensor(qwen, work, Layout(data=8, tensor=2, expert=8, expert_tensor=1, sequence=True), micro_batch=2, seq=256, attention="sdpa", recompute="none", finetune=None)
    routed = [(a, b) for a, b in zip(work, folded) if a.routed]
    assert routed
    for before, after in routed:
        assert after.flops == before.flops
        assert after.rows == before.rows / 2 == 256
        assert 768 in after.shape and 384 in before.shape
    assert [k for k in work if not k.routed] == [k for k in folded if not k.routed]


@pytest.mark.parametrize(
    "layout",
    [
        Layout(data=4, tensor=2, expert=8, expert_tensor=2),  # 16 expert ranks for 8 in a stage
        Layout(data=2, tensor=2, context=2, expert=8, expert_tensor=2),
        Layout(data=3, tensor=2, expert=4, expert_tensor=1),  # 4 does not divide 6
    ],
)
def test_expert_ranks_that_do_not_divide_a_stage_are_refused(qwen, layout):
    with pytest.raises(ConfigError, match="must divide a pipeline stage's tensor × data × context ranks") as caught:
        training_time(qwen, "h100-sxm", global_batch=48, micro_batch=1, seq=256, layout=layout)
    assert "\n" not in str(caught.value)
    if layout.folded:
        with pytest.raises(ConfigError, match="must divide a pipeline stage's"):
            training_memory(qwen, batch=1, seq=16, setup=Training(layout=layout))


def test_expert_ranks_may_fold_over_tensor_and_context_ranks(qwen):
    """Expert 8 × expert tensor 1 over tensor 2 × data 2 × context 2: accepted, where the experts span 8 ranks."""
    layout = Layout(data=2, tensor=2, context=2, expert=8, expert_tensor=1)
    assert layout.expert_data == 1
    assert training_time(qwen, "h100-sxm", global_batch=8, micro_batch=1, seq=256, layout=layout).comm["expert"].ranks == 8


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_an_expert_tensor_degree_is_a_whole_number(value):
    with pytest.raises(EvaluationError, match="expert tensor parallel degree"):
        Layout(tensor=2, expert_tensor=value)


def test_the_cli_takes_etp_and_refuses_in_one_line():
    base = [sys.executable, "-m", "symform", "time", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--train", "--global-batch", "64", "--seq", "256", "--dp", "8", "--tp", "2", "--ep", "8", "--sp"]
    ok = subprocess.run(base + ["--etp", "1"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(base + ["--etp", "4"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "must divide a pipeline stage's" in bad.stderr
    memory = [sys.executable, "-m", "symform", "memory", "qwen3-30b-a3b", "--train", "--batch", "1", "--seq", "256", "--dp", "8", "--tp", "2", "--ep", "8"]
    assert subprocess.run(memory + ["--etp", "1"], capture_output=True, text=True).returncode == 0
    assert subprocess.run(memory + ["--etp", "4"], capture_output=True, text=True).returncode == 2


def test_an_expert_tensor_degree_above_tensor_is_refused_by_time_and_counted_by_memory(qwen):
    """Expert tensor ranks beyond the attention's tensor ranks hold other tokens, which Megatron gathers across them
    before each expert: a transfer symform does not time, so time refuses it in one line rather than leave it out;
    the memory of that layout is still counted (each rank holds half of each of its experts)."""
    layout = Layout(data=16, expert_tensor=2)
    with pytest.raises(ConfigError, match="^an expert tensor degree of 2 above the tensor degree 1 .*give an expert tensor degree of at most 1$"):
        training_time(qwen, "h100-sxm", global_batch=64, micro_batch=1, seq=256, layout=layout)
    assert training_memory(qwen, batch=1, seq=256, setup=Training(layout=layout)).values["weights"] > 0


def test_a_folded_layout_widens_the_band_no_fitted_run_has():
    """No fitted run folds its experts (the three folded rows are held out): the band says so and widens."""
    from symform.analysis.time import measured_runs
    from symform.analysis.time.estimate import training_estimate

    assert not any(r.setup.get("expert_tensor") for r in measured_runs.runs() if r.split == "fit")
    model = load("qwen3-30b-a3b")
    step = dict(global_batch=64, micro_batch=1, seq=1024)
    plain = training_estimate(model, "h100-sxm", **step, layout=Layout(data=8, tensor=2, expert=8, sequence=True))
    folded = training_estimate(model, "h100-sxm", **step, layout=Layout(data=8, tensor=2, expert=8, expert_tensor=1, sequence=True))
    assert "experts folded at expert tensor degree 1 (no fitted run uses it)" in folded.extrapolating
    assert not any("folded" in note for note in plain.extrapolating)
