"""The layout planner: its vectorised screen equals the exact memory and time of each layout,
every layout it offers fits, and nothing faster that fits was left out."""

import json
from dataclasses import replace

import numpy as np
import pytest

from symform import EvaluationError, load
from symform.interface.cli.cli import main
from symform.analysis.memory import frameworks
from symform.analysis.memory.memory import Training, training_memory
from symform.analysis.memory.settings import Layout
from symform.analysis.plans.planner import HEADROOM, enumerate_layouts, memory_per_device, plan, static_per_device, step_time_bounds
from symform.analysis.time.efficiencies import profile
from symform.analysis.time.estimate import training_estimate
from symform.analysis.time.timing import training_time

MODEL = "llama-3.1-8b"
GLOBAL_BATCH, SEQ = 64, 2048


@pytest.fixture(scope="module")
def screened():
    model = load(MODEL)
    c = enumerate_layouts(model, 16, GLOBAL_BATCH)
    memory = memory_per_device(model, c, seq=SEQ, global_batch=GLOBAL_BATCH, precision="mixed", optimizer="adamw", flash=True)
    lower, upper = step_time_bounds(model, c, "h100-sxm", seq=SEQ, global_batch=GLOBAL_BATCH, precision="mixed", flash=True, dtype="bf16", node_size=None)
    return model, c, memory, lower, upper


def test_candidates_multiply_to_the_device_count_and_split_the_batch(screened):
    _, c, _, _, _ = screened
    assert np.all(c.data * c.tensor * c.pipeline == 16)
    assert np.all(GLOBAL_BATCH % (c.micro_batch * c.data) == 0)
    assert np.all(32 % c.pipeline == 0)  # whole layers per stage
    assert len(c) > 100


def test_screen_equals_the_exact_memory_and_time_of_each_layout(screened):
    model, c, memory, lower, upper = screened
    for i in np.random.default_rng(0).choice(len(c), 30, replace=False):  # a spread of layouts, every mode among them
        layout, micro_batch, recompute = c.layout(int(i), GLOBAL_BATCH)
        exact = training_memory(model, batch=micro_batch, seq=SEQ, setup=Training(recompute=recompute, flash=True, layout=layout))
        assert memory[i] == pytest.approx(float(exact.total), rel=1e-12)
        timed = training_time(model, "h100-sxm", global_batch=GLOBAL_BATCH, micro_batch=micro_batch, seq=SEQ, layout=layout, recompute=recompute, flash=True)
        assert lower[i] == pytest.approx(timed.time_lower, rel=1e-9)
        assert upper[i] == pytest.approx(timed.time_upper, rel=1e-9)


def test_the_plan_offers_only_layouts_that_fit_and_none_faster_fits(screened):
    model, c, memory, lower, _ = screened
    result = plan(model, "h100-sxm", devices=16, global_batch=GLOBAL_BATCH, seq=SEQ, flash=True, top=3)
    capacity = 80 * 2**30 - HEADROOM  # the plan leaves its headroom free
    assert result.candidates == len(c) and result.fitting == int((memory <= capacity).sum())
    assert all(row.memory.total <= capacity for row in result.best)
    # ranked by the estimate, ties broken by its ceiling: the floor's fastest layout is no faster by estimate
    fits = np.flatnonzero(memory <= capacity)
    layout, micro_batch, recompute = c.layout(int(fits[np.argmin(lower[fits])]), GLOBAL_BATCH)
    floor_fastest = training_estimate(model, "h100-sxm", global_batch=GLOBAL_BATCH, micro_batch=micro_batch, seq=SEQ, layout=layout, recompute=recompute)
    assert result.best[0].estimate.step.estimate <= floor_fastest.step.estimate * (1 + 1e-12)
    keys = [(row.estimate.step.estimate, row.estimate.step.ceiling) for row in result.best]
    assert keys == sorted(keys)


def test_the_plan_breaks_the_floors_tie_by_the_estimate():
    """llama-3.1-70b on 64 H100s: the floor is the compute at peak wherever compute sets it, so the layouts it ranks
    first tie (98.8 % MFU); the estimate tells them apart, and equal estimates go by the estimate's ceiling."""
    result = plan(load("llama-3.1-70b"), "h100-sxm", devices=64, global_batch=512, seq=4096, flash=True, top=5)
    estimates = [row.estimate.step.estimate for row in result.best]
    assert estimates == sorted(estimates) and estimates[0] < estimates[-1]
    for a, b in zip(result.best, result.best[1:]):
        if a.estimate.step.estimate == b.estimate.step.estimate:
            assert a.estimate.step.ceiling <= b.estimate.step.ceiling


def test_a_plan_ranks_by_estimates_under_the_framework_s_time_facts():
    """plan --framework automodel: NeMo Automodel's DeepEP dispatch overlaps the all-to-alls
    (formulas/frameworks/automodel.toml [[time.facts]]); each planned layout's estimate is the one `symform time`
    gives it under the same facts, never above the estimate without them, and below it where the layout has expert
    parallelism to overlap."""
    model = load("qwen3-30b-a3b")
    facts = profile("automodel", None, model.name)
    result = plan(model, "h100-sxm", devices=16, global_batch=512, seq=4096, flash=True, top=4, framework="automodel", time_facts=facts)
    assert result.assumptions["time_facts"]["facts"] == facts.describe()
    for row in result.best:
        setup = dict(global_batch=512, micro_batch=row.micro_batch, seq=4096, layout=row.layout, recompute=row.recompute)
        assert row.estimate.step.estimate == training_estimate(model, "h100-sxm", profile=facts, **setup).step.estimate
        assert row.estimate.step.estimate <= training_estimate(model, "h100-sxm", **setup).step.estimate
    experts = dict(global_batch=512, micro_batch=1, seq=4096, layout=Layout(data=16, expert=8, zero=3), recompute="full")
    assert training_estimate(model, "h100-sxm", profile=facts, **experts).step.estimate < training_estimate(model, "h100-sxm", **experts).step.estimate


def test_a_tight_budget_forces_sharding_and_recomputation():
    model = load(MODEL)
    result = plan(model, "h100-sxm", devices=8, global_batch=32, seq=4096, memory_bytes=24 * 2**30, top=1)
    (best,) = result.best
    assert best.memory.total <= 24 * 2**30
    assert best.layout.zero >= 1 or best.layout.tensor > 1 or best.layout.pipeline > 1


def test_mixture_of_experts_layouts_use_expert_parallelism():
    model = load("qwen3-30b-a3b")
    c = enumerate_layouts(model, 16, 64)
    assert set(np.unique(c.expert)) >= {1, 2, 4, 8}
    assert np.all(c.data % c.expert == 0)


def test_mixture_of_experts_screen_shards_expert_states_as_the_exact_memory():
    """With ZeRO and expert parallelism the screen splits the routed experts' states over dp/ep ranks, as
    training_memory does: both agree on every sharded MoE layout."""
    model = load("qwen3-30b-a3b")
    c = enumerate_layouts(model, 16, 64, micro_batches=(1,), recompute=("full",))
    c = c.take((c.expert > 1) & (c.zero >= 1))
    memory = memory_per_device(model, c, seq=256, global_batch=64, precision="mixed", optimizer="adamw", flash=True)
    for i in np.random.default_rng(0).choice(len(c), 12, replace=False):
        layout, micro_batch, recompute = c.layout(int(i), 64)
        exact = training_memory(model, batch=micro_batch, seq=256, setup=Training(recompute=recompute, flash=True, layout=layout))
        assert memory[i] == pytest.approx(float(exact.total), rel=1e-12)


def test_no_layout_of_deepseek_v3_fits_where_its_states_alone_exceed_the_devices():
    """671,026,404,352 parameters × 16 bytes (mixed precision, AdamW) = 10.736e12 bytes against 128 × 80 GiB =
    10.995e12: even ZeRO-3 sharding every copy evenly leaves 2.0e9 bytes a device, less than one 4,096-token sequence's
    activations. Before expert states were divided twice over, 167 of these layouts 'fit'."""
    model = load("deepseek-v3")
    result = plan(model, "h800-sxm", devices=128, global_batch=256, seq=4096, flash=True, top=1)
    assert result.fitting == 0


def test_plan_cli_json(capsys):
    code = main(["plan", MODEL, "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "32", "--seq", "2048", "--top", "2", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    assert len(report["layouts"]) == 2
    first = report["layouts"][0]
    assert first["memory"]["total"] <= report["assumptions"]["memory_budget_bytes"]
    assert set(first["layout"]) == {"data", "tensor", "pipeline", "expert", "zero", "sequence"}


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", MODEL, "--gpu", "h100-sxm", "--gpus", "0", "--global-batch", "8", "--seq", "8"],
        ["plan", MODEL, "--gpu", "nope", "--gpus", "8", "--global-batch", "8", "--seq", "8"],
        ["plan", MODEL, "--gpu", "h100-sxm", "--gpus", "7", "--global-batch", "3", "--seq", "8"],
        ["plan", MODEL, "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "8", "--seq", "8", "--framework-version", "25.11"],
        ["plan", "--serve", MODEL, "--gpu", "h100-sxm", "--prompt", "512", "--output", "64", "--offline", "--no-sp"],
    ],
)
def test_bad_plan_input_is_one_line_and_exit_2(capsys, argv):
    code = main(argv)
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1


def test_no_even_layout_is_a_clear_error():
    with pytest.raises(EvaluationError, match="no layout of 7 devices"):
        plan(load(MODEL), "h100-sxm", devices=7, global_batch=3, seq=8)


@pytest.mark.parametrize(
    "setup",
    [dict(rank=16, targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), base_format="nf4-double"), dict(freeze=("embeddings", "layers:0-15"))],
    ids=["qlora", "frozen half"],
)
def test_fine_tuning_screen_equals_its_exact_memory_and_time(setup):
    """With adapters or frozen layers, the screen is finetune_memory's and training_time's own numbers, layout by layout."""
    from symform.analysis.memory.finetune import FineTune, finetune_memory

    model, tune = load(MODEL), FineTune(**setup)
    c = enumerate_layouts(model, 8, 16, finetune=tune)
    assert np.all(c.expert == 1) and np.all(c.zero < 3) and (np.all(c.pipeline == 1) or not tune.frozen_layers())
    memory = memory_per_device(model, c, seq=SEQ, global_batch=16, precision="mixed", optimizer="adamw", flash=True, finetune=tune)
    lower, upper = step_time_bounds(model, c, "h100-sxm", seq=SEQ, global_batch=16, precision="mixed", flash=True, dtype="bf16", node_size=None, finetune=tune)
    for i in np.random.default_rng(1).choice(len(c), 12, replace=False):
        layout, micro_batch, recompute = c.layout(int(i), 16)
        exact = finetune_memory(model, tune, batch=micro_batch, seq=SEQ, training=Training(recompute=recompute, flash=True, layout=layout))
        assert memory[i] == pytest.approx(float(exact.total), rel=1e-12)
        timed = training_time(model, "h100-sxm", global_batch=16, micro_batch=micro_batch, seq=SEQ, layout=layout, recompute=recompute, flash=True, finetune=tune)
        assert lower[i] == pytest.approx(timed.time_lower, rel=1e-9)
        assert upper[i] == pytest.approx(timed.time_upper, rel=1e-9)


@pytest.mark.parametrize(("framework", "name", "devices", "seq"), [("torchtitan", MODEL, 16, SEQ), ("maxtext", "mixtral-8x7b", 64, 4096)])
def test_screen_with_a_framework_equals_its_exact_memory(framework, name, devices, seq):
    """torchtitan's per-op selective recomputation, FSDP buffers, CUDA context and allocator reserve; maxtext's JAX
    policy and its buffers freed at their last use (a rebuilt layer charged less the loss's, head's and final norm's
    kept tensors with one stage): the vectorised screen and training_memory count the same bytes for every kind of layout."""
    model = load(name)
    c = enumerate_layouts(model, devices, GLOBAL_BATCH)
    memory = memory_per_device(model, c, seq=seq, global_batch=GLOBAL_BATCH, precision="mixed", optimizer="adamw", flash=True, framework=framework)
    for i in np.random.default_rng(1).choice(len(c), 20, replace=False):
        layout, micro_batch, recompute = c.layout(int(i), GLOBAL_BATCH)
        exact = training_memory(model, batch=micro_batch, seq=seq, setup=Training(recompute=recompute, flash=True, layout=layout, framework=framework))
        assert memory[i] == pytest.approx(float(exact.total), rel=1e-12)


@pytest.mark.parametrize(("framework", "name", "devices", "seq"), [(None, MODEL, 16, SEQ), ("torchtitan", MODEL, 16, SEQ), ("megatron", MODEL, 16, SEQ), ("maxtext", "mixtral-8x7b", 64, 4096)])
def test_screen_with_sequence_parallelism_equals_the_exact_memory_and_time(framework, name, devices, seq):
    """Sequence parallelism beside tensor parallelism: the screen splits every activation over the tensor ranks and
    times the gathers and scatters, as training_memory and training_time count the layout, row by row."""
    model = load(name)
    c = enumerate_layouts(model, devices, GLOBAL_BATCH, sequence_of=seq)
    memory = memory_per_device(model, c, seq=seq, global_batch=GLOBAL_BATCH, precision="mixed", optimizer="adamw", flash=True, framework=framework)
    lower, upper = step_time_bounds(model, c, "h100-sxm", seq=seq, global_batch=GLOBAL_BATCH, precision="mixed", flash=True, dtype="bf16", node_size=None, framework=framework)
    rows = np.random.default_rng(2).choice(np.flatnonzero(c.tensor > 1), 16, replace=False)
    for i in rows:
        layout, micro_batch, recompute = c.layout(int(i), GLOBAL_BATCH)
        assert layout.sequence
        exact = training_memory(model, batch=micro_batch, seq=seq, setup=Training(recompute=recompute, flash=True, layout=layout, framework=framework))
        assert memory[i] == pytest.approx(float(exact.total), rel=1e-12)
        timed = training_time(model, "h100-sxm", global_batch=GLOBAL_BATCH, micro_batch=micro_batch, seq=seq, layout=layout, recompute=frameworks.timed_recompute(framework, recompute), flash=True)
        assert lower[i] == pytest.approx(timed.time_lower, rel=1e-9)
        assert upper[i] == pytest.approx(timed.time_upper, rel=1e-9)
        without = training_memory(model, batch=micro_batch, seq=seq, setup=Training(recompute=recompute, flash=True, layout=replace(layout, sequence=False), framework=framework))
        assert exact.values["activations"] < without.values["activations"]  # the norms' and residuals' activations split too


def test_a_plan_runs_sequence_parallelism_as_its_framework_does():
    """torchtitan runs sequence parallelism with tensor parallelism (torchtitan.toml): its plan's tensor-parallel
    layouts do, unless the user says not; no framework runs none; tensor degrees must then divide the sequence."""
    model = load(MODEL)
    planned = {sp: plan(model, "h100-sxm", devices=16, global_batch=GLOBAL_BATCH, seq=SEQ, flash=True, top=8, framework="torchtitan", sequence=sp) for sp in (None, False)}
    assert {row.layout.sequence for row in planned[None].best if row.layout.tensor > 1} == {True}
    assert not any(row.layout.sequence for row in planned[False].best)
    assert not any(row.layout.sequence for row in plan(model, "h100-sxm", devices=16, global_batch=GLOBAL_BATCH, seq=SEQ, flash=True, top=8).best)
    c = enumerate_layouts(model, 16, GLOBAL_BATCH, sequence_of=2 * 1023)  # 2,046 tokens: only 1 and 2 split them
    assert set(c.tensor.tolist()) == {1, 2} and c.sequence
    assert set(enumerate_layouts(model, 16, GLOBAL_BATCH).tensor.tolist()) == {1, 2, 4, 8}
    odd = plan(model, "h100-sxm", devices=16, global_batch=GLOBAL_BATCH, seq=2046, flash=True, top=2, framework="torchtitan")
    assert "tensor degrees 4, 8 left out" in odd.assumptions["sequence_parallel"]  # the plan says what it did not search
    with pytest.raises(EvaluationError, match="give True, False or None"):
        plan(model, "h100-sxm", devices=16, global_batch=GLOBAL_BATCH, seq=SEQ, framework="torchtitan", sequence="no")


@pytest.mark.parametrize("headroom", [0, 2 * 2**30, 8 * 2**30])
def test_every_planned_layout_leaves_the_headroom_and_fits_its_static_memory(headroom):
    model = load("llama-3.1-70b")
    result = plan(model, "h100-sxm", devices=64, global_batch=512, seq=4096, flash=True, top=5, framework="torchtitan", headroom=headroom)
    assert result.best and result.assumptions["headroom_bytes"] == headroom
    for row in result.best:
        assert row.memory.total <= 80 * 2**30 - headroom
        static = sum(row.memory.values[k] for k in ("weights", "master_weights", "gradients", "optimizer"))
        assert static <= 80 * 2**30


def test_a_layout_whose_static_memory_overflows_the_device_is_never_counted_as_fitting():
    """Llama 3.1 70B on 8 devices without ZeRO: 70.6e9 parameters × 16 bytes over at most 8 tensor ranks is 141 GB
    a device, so no unsharded layout may fit an 80 GiB device, whatever its activations."""
    model = load("llama-3.1-70b")
    c = enumerate_layouts(model, 8, 8)
    static, _ = static_per_device(model, c, precision="mixed", optimizer="adamw")
    unsharded = c.zero == 0
    assert np.all(static[unsharded] > 80 * 2**30)
    result = plan(model, "h100-sxm", devices=8, global_batch=8, seq=1024, flash=True, top=3)
    assert all(row.layout.zero > 0 for row in result.best)


def test_bad_headroom_is_one_line():
    with pytest.raises(EvaluationError, match="headroom"):
        plan(load(MODEL), "h100-sxm", devices=8, global_batch=8, seq=128, headroom=-1)


def test_without_efficiency_data_the_plan_ranks_by_the_floor(capsys):
    """An L4 has no efficiency file, so no estimate: the floor, then the sum at peak, decide; the table says so."""
    result = plan(load(MODEL), "l4", devices=8, global_batch=32, seq=2048, flash=True, top=3)
    assert all(row.estimate is None for row in result.best)
    keys = [(row.time.time_lower, row.time.time_upper) for row in result.best]
    assert keys == sorted(keys)
    code = main(["plan", MODEL, "--gpu", "l4", "--gpus", "8", "--global-batch", "32", "--seq", "2048", "--top", "2"])
    out = capsys.readouterr().out
    assert code == 0 and "no efficiency data for an estimate" in out
