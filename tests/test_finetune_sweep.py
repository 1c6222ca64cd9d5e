"""Sweeps of a fine-tuning step: ``symform sweep ... --lora-targets ...`` and ``symform.sweep(training=FineTuneStep(...))``.

The peft/PyTorch oracle of a swept rank and target sets is in tests/test_finetune_cli.py; here, the
adapters' sizes by hand from Qwen3-0.6B's config, the sweep against the one-point reports at every
drawn point, and the combinations refused in one line.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

import symform
from checks import run, run_json
from symform.analysis.memory.finetune import FineTune, FineTuneStep, finetune_counts, finetune_memory
from symform.analysis.memory.memory import Training
from symform.engine.errors import EvaluationError

QWEN3 = "qwen3-0.6b"
# Qwen3-0.6B (config.json): hidden 1024, 16 query heads and 8 KV heads of 128, 28 layers; a rank-r adapter on
# q_proj is r·(1024 + 2048) weights, on v_proj r·(1024 + 1024): 5120·r per layer
QV_PER_RANK = 28 * (1024 + 2048 + 1024 + 1024)
SMALL = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 101}


def test_a_swept_rank_gives_the_adapters_parameters_and_their_bytes_by_hand(capsys):
    ranks = [8, 16, 64]
    found = run_json(capsys, "sweep", QWEN3, "trainable-params", "memory.trained_weights", "memory.master_weights", "memory.gradients", "memory.optimizer",
                     "--grid", "lora_rank=8,16,64", "--fix", "batch=1", "--fix", "seq=2048", "--lora-targets", "q_proj,v_proj")  # fmt: skip
    columns = found["columns"]
    assert columns["trainable_params"] == [QV_PER_RANK * r for r in ranks]
    # mixed precision (formulas/memory.toml): bf16 weights and gradients, an fp32 master copy, AdamW's two fp32 states
    for category, per_param in (("trained_weights", 2), ("master_weights", 4), ("gradients", 2), ("optimizer", 8)):
        assert columns[f"memory.{category}"] == [per_param * QV_PER_RANK * r for r in ranks]
    assert found["fine_tuning"] == {"method": "lora", "targets": ["q_proj", "v_proj"], "base_weights_frozen": True}


SETUPS = st.sampled_from([
    (("q_proj", "v_proj"), "lora", None, ()),
    (("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), "lora", "nf4-double", ()),
    (("v_proj", "down_proj"), "dora", None, ("layers:0-1",)),
])  # fmt: skip


@settings(max_examples=4, deadline=None)
@given(setup=SETUPS, ranks=st.lists(st.integers(0, 96), min_size=1, max_size=2, unique=True), seq=st.integers(1, 4096), batch=st.integers(1, 4),
       recompute=st.sampled_from(["none", "full"]), precision=st.sampled_from(["mixed", "bf16-fp32-states"]))  # fmt: skip
def test_a_sweep_of_the_rank_gives_at_every_point_what_the_one_point_reports_give(setup, ranks, seq, batch, recompute, precision):
    model = symform.Model.from_config(SMALL, name="small")
    targets, method, base_format, freeze = setup
    training = Training(precision=precision, recompute=recompute)
    step = FineTuneStep(FineTune(targets=targets, method=method, base_format=base_format, freeze=freeze), training)
    categories = ["frozen_weights", "trained_weights", "gradients", "optimizer", "activations", "recompute_buffer", "total"]
    quantities = ["params", "trainable_params", "frozen_params", "forward_flops", "backward_flops", "train_step_flops", *(f"memory.{c}" for c in categories)]
    result = symform.sweep(model, quantities, grid={"lora_rank": ranks}, fixed={"batch": batch, "seq": seq}, training=step, exact=True)
    for i, rank in enumerate(ranks):
        tune = FineTune(rank=rank, targets=targets, method=method, base_format=base_format, freeze=freeze)
        counts = finetune_counts(model, tune, batch=batch, seq=seq)
        report = finetune_memory(model, tune, batch=batch, seq=seq, training=training)
        for name in ("params", "trainable_params", "frozen_params", "forward_flops", "backward_flops", "step_flops"):
            assert result["train_step_flops" if name == "step_flops" else name][i] == getattr(counts, name)
        for category in categories[:-1]:
            assert result[f"memory.{category}"][i] == report.values.get(category, 0), category
        assert result["memory.total"][i] == report.total


def test_the_rank_may_be_fixed_instead_of_swept():
    model = symform.load(QWEN3)
    step = FineTuneStep(FineTune(targets=("q_proj", "v_proj")))
    result = symform.sweep(model, "trainable_params", grid={"seq": [1, 2]}, fixed={"batch": 1, "lora_rank": 4}, training=step)
    assert list(result["trainable_params"]) == [4 * QV_PER_RANK] * 2


def test_train_flops_is_the_declared_tokens_per_step_scaling_of_the_step():
    model = symform.load(QWEN3)
    step = FineTuneStep(FineTune(rank=16, targets=("q_proj", "v_proj")))
    result = symform.sweep(model, ["train_flops"], grid={"seq": [2048]}, fixed={"batch": 1, "tokens": 2048 * 10}, training=step, exact=True)
    assert result["train_flops"][0] == 10 * finetune_counts(model, FineTune(rank=16, targets=("q_proj", "v_proj")), batch=1, seq=2048).step_flops


@pytest.mark.parametrize(
    ("step", "quantity", "grid", "words"),
    [
        (FineTuneStep(FineTune(rank=8, targets=("q_proj",))), "trainable_params", {"lora_rank": [4, 8]}, ("lora_rank", "one place")),
        (FineTuneStep(FineTune(freeze=("embeddings",))), "trainable_params", {"lora_rank": [4, 8]}, ("lora_rank", "--lora-targets")),
        (FineTuneStep(FineTune(rank=8, targets=("q_proj",))), "kv_cache", {"seq": [1]}, ("kv_cache", "fine-tuning")),
        (FineTuneStep(FineTune(rank=8, targets=("q_proj",))), "training_bytes", {"seq": [1]}, ("training_bytes", "memory.NAME")),
        (FineTuneStep(FineTune(rank=8, targets=("q_proj",))), "memory.kv_cache", {"seq": [1]}, ("kv_cache", "frozen_weights")),
    ],
    ids=["rank twice", "rank without adapters", "inference quantity", "full training's bytes", "unknown category"],
)
def test_a_sweep_refuses_what_a_fine_tuning_step_does_not_have(step, quantity, grid, words):
    with pytest.raises(EvaluationError) as caught:
        symform.sweep(symform.load(QWEN3), quantity, grid=grid, fixed={"batch": 1, "seq": 8} if "seq" not in grid else {"batch": 1}, training=step)
    assert "\n" not in str(caught.value)
    for word in words:
        assert word in str(caught.value), caught.value


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("--grid", "lora_rank=8,16", "--lora-rank", "4", "--lora-targets", "q_proj"), ("--lora-rank 4", "one place")),
        (("--grid", "lora_rank=8,16"), ("lora_rank", "--lora-targets")),
        (("--fix", "lora_rank=8", "--freeze", "embeddings"), ("lora_rank", "--lora-targets")),
        (("--lora-rank", "8"), ("--lora-targets",)),
        (("--lora-targets", "q_proj"), ("--lora-rank", "--grid lora_rank")),
        (("--lora-rank", "8", "--lora-targets", "q_proj", "--lora-targets", "q_proj"), ("q_proj", "twice")),
        (("--lora-rank", "8", "--lora-targets", "qkv"), ("qkv", "q_proj")),
        (("--lora-rank", "8", "--lora-targets", "q_proj", "--qlora", "--quantity-is", "kv-cache"), ("kv-cache", "fine-tuning")),
    ],
    ids=["rank twice", "swept rank alone", "fixed rank with freezing", "rank alone", "targets without rank", "a set twice", "unknown target", "inference quantity"],
)
def test_the_command_refuses_combinations_that_make_no_sense_in_one_line(capsys, argv, words):
    quantity = "memory.total"
    if "--quantity-is" in argv:
        quantity, argv = argv[-1], argv[:-2]
    code, out, err = run(capsys, "sweep", QWEN3, quantity, "--grid", "seq=8,16", "--fix", "batch=1", *argv)
    assert code == 2 and not out and err.count("\n") == 1, err
    for word in words:
        assert word in err, err


def test_several_target_sets_are_one_axis_of_the_table(capsys):
    code, out, err = run(capsys, "sweep", QWEN3, "trainable-params", "--grid", "lora_rank=1,2", "--fix", "batch=1", "--fix", "seq=1",
                         "--lora-targets", "q_proj,v_proj", "--lora-targets", "v_proj", "--csv")  # fmt: skip
    assert code == 0, err
    v_per_rank = 28 * (1024 + 1024)
    assert out.splitlines() == [
        "lora_targets,lora_rank,trainable_params",
        f'"q_proj,v_proj",1,{QV_PER_RANK}',
        f'"q_proj,v_proj",2,{2 * QV_PER_RANK}',
        f"v_proj,1,{v_per_rank}",
        f"v_proj,2,{2 * v_per_rank}",
    ]
