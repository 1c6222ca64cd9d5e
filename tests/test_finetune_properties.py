"""Properties of fine-tuning setups (symform.analysis.memory.finetune), checked on random setups of a small llama.

The adapter sizes are hand arithmetic from the LoRA and DoRA papers: A is d_in × r, B is r × d_out, DoRA adds a
magnitude per output feature.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from symform import Model
from symform.analysis.memory.finetune import FineTune, finetune_counts, finetune_memory, finetune_saved_activations
from symform.analysis.memory.memory import Training, inference_memory, saved_activations
from symform.engine.errors import EvaluationError

LAYERS, D, HEADS, KV, HEAD, FF, VOCAB = 4, 64, 4, 2, 16, 96, 101
CONFIG = {
    "model_type": "llama", "hidden_size": D, "intermediate_size": FF, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
    "num_key_value_heads": KV, "head_dim": HEAD, "vocab_size": VOCAB, "max_position_embeddings": 64,
}  # fmt: skip
# (d_in, d_out) of each projection of a layer
SHAPES = {"q_proj": (D, HEADS * HEAD), "k_proj": (D, KV * HEAD), "v_proj": (D, KV * HEAD), "o_proj": (HEADS * HEAD, D), "gate_proj": (D, FF), "up_proj": (D, FF), "down_proj": (FF, D)}
MODEL = Model.from_config(CONFIG)

targets = st.sets(st.sampled_from(sorted(SHAPES)), min_size=1).map(lambda s: tuple(sorted(s)))
frozen_layers = st.one_of(st.just(()), st.integers(0, LAYERS - 1).map(lambda k: (f"layers:0-{k}",)))
workload = st.tuples(st.integers(1, 4), st.integers(1, 32))


def _value(expr, **values):
    return expr.xreplace({s: {**MODEL.values, **values}[s.name] for s in expr.free_symbols})


@settings(max_examples=15, deadline=None)
@given(rank=st.integers(0, 64), targets=targets, frozen=frozen_layers, method=st.sampled_from(["lora", "dora"]))
def test_trainable_plus_frozen_is_the_base_plus_the_adapters(rank, targets, frozen, method):
    counts = finetune_counts(MODEL, FineTune(rank=rank, targets=targets, freeze=frozen, method=method))
    adapted_layers = LAYERS - (int(frozen[0].split("-")[1]) + 1 if frozen else 0)
    per_layer = sum(rank * (d_in + d_out) + (d_out if method == "dora" else 0) for d_in, d_out in (SHAPES[t] for t in targets))
    assert counts.trainable_params == adapted_layers * per_layer
    assert counts.frozen_params == MODEL.evaluate("params")
    assert counts.trainable_params + counts.frozen_params == counts.params


@settings(max_examples=10, deadline=None)
@given(targets=targets, batch_seq=workload)
def test_rank_zero_lora_adds_nothing(targets, batch_seq):
    batch, seq = batch_seq
    counts = finetune_counts(MODEL, FineTune(rank=0, targets=targets), batch=batch, seq=seq)
    assert counts.params == MODEL.evaluate("params") and counts.trainable_params == 0
    assert counts.forward_flops == MODEL.evaluate("forward_flops", batch=batch, seq=seq)


@settings(max_examples=10, deadline=None)
@given(rank=st.integers(0, 64), targets=targets, batch_seq=workload)
def test_adapters_in_frozen_layers_only_cost_what_inference_costs(rank, targets, batch_seq):
    """Every target sits in a frozen layer: nothing trains, so the step is one forward and keeps nothing."""
    batch, seq = batch_seq
    setup = FineTune(rank=rank, targets=targets, freeze=(f"layers:0-{LAYERS - 1}",))
    counts = finetune_counts(MODEL, setup, batch=batch, seq=seq)
    assert counts.trainable_params == 0 and counts.backward_flops == 0
    assert counts.forward_flops == MODEL.evaluate("forward_flops", batch=batch, seq=seq)
    memory = finetune_memory(MODEL, setup, batch=batch, seq=seq)
    assert memory.values["activations"] == 0
    assert memory.values["gradients"] == memory.values["optimizer"] == memory.values["master_weights"] == 0
    assert memory.values["frozen_weights"] == inference_memory(MODEL, batch=batch, seq=seq).values["weights"]


@settings(max_examples=10, deadline=None)
@given(batch_seq=workload)
def test_nothing_frozen_is_full_training(batch_seq):
    batch, seq = batch_seq
    counts = finetune_counts(MODEL, FineTune(), batch=batch, seq=seq)
    assert counts.trainable_params == MODEL.evaluate("params") and counts.frozen_params == 0
    assert counts.backward_flops == MODEL.evaluate("backward_flops", batch=batch, seq=seq)
    ours, _, _ = finetune_saved_activations(MODEL, FineTune())
    full, _, _ = saved_activations(MODEL)
    assert _value(ours, batch=batch, seq=seq) == _value(full, batch=batch, seq=seq)


@settings(max_examples=10, deadline=None)
@given(k=st.integers(0, LAYERS - 2), batch_seq=workload)
def test_freezing_one_more_layer_trains_and_computes_less(k, batch_seq):
    batch, seq = batch_seq
    fewer = finetune_counts(MODEL, FineTune(freeze=("embeddings", f"layers:0-{k}")), batch=batch, seq=seq)
    more = finetune_counts(MODEL, FineTune(freeze=("embeddings", f"layers:0-{k + 1}")), batch=batch, seq=seq)
    assert more.trainable_params < fewer.trainable_params
    assert more.backward_flops < fewer.backward_flops
    assert more.forward_flops == fewer.forward_flops


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (dict(rank=-1), "whole number"),
        (dict(method="ia3"), "unknown adapter method"),
        (dict(freeze=("layers:3-1",)), "runs backwards"),
        (dict(base_format="nf5"), "nf5"),
    ],
)
def test_bad_setups_name_the_problem(setup, message):
    with pytest.raises(EvaluationError, match=message):
        FineTune(**setup)


# LLaMA-65B as published (Touvron et al. 2023, Table 2: d 8192, 64 heads, 80 layers; the FFN width 22016 is
# 2/3·4·8192 rounded up to a multiple of 256, as the reference code does; a 32,000-token vocabulary)
LLAMA_65B = {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 22016, "num_attention_heads": 64, "num_hidden_layers": 80, "vocab_size": 32000, "max_position_embeddings": 2048}
QLORA = FineTune(rank=64, targets=tuple(SHAPES), base_format="nf4-double")  # QLoRA §4: r 64 on every linear layer


def test_qlora_fits_a_65b_model_on_one_48_gb_gpu():
    """QLoRA (Dettmers et al. 2023): "finetune a 65B parameter model on a single 48GB GPU", with NF4 double-quantised
    weights, bf16 adapters, 32-bit AdamW and gradient checkpointing, one sequence of 512 tokens."""
    model = Model.from_config(LLAMA_65B, name="llama-65b")
    training = Training(precision="bf16-fp32-states", recompute="full")
    report = finetune_memory(model, QLORA, batch=1, seq=512, training=training)
    assert report.assumptions["trainable_params"] == 80 * 64 * (4 * 2 * 8192 + 3 * (8192 + 22016))
    assert report.total <= 48 * 10**9
    assert 48 * 10**9 - report.total > 2 * 10**9  # the margin docs/fine-tuning.md shows: about 2.9 GB
    # without gradient checkpointing the activations alone take ~22 GB: it does not fit
    assert finetune_memory(model, QLORA, batch=1, seq=512, training=Training(precision="bf16-fp32-states")).total > 48 * 10**9


# --- the command line ----------------------------------------------------------------------------


def test_memory_with_lora_reports_the_trainable_parameters(capsys):
    from checks import run, run_json

    result = run_json(capsys, "memory", "qwen3-0.6b", "--train", "--batch", "1", "--seq", "64", "--lora-rank", "16", "--lora-targets", "q_proj,v_proj")
    # 28 layers × 16 × ((1024 + 2048) + (1024 + 1024)): q_proj is 1024 → 16·128, v_proj 1024 → 8·128
    assert result["assumptions"]["trainable_params"] == 28 * 16 * (3072 + 2048)
    assert result["components"]["gradients"] == 2 * result["assumptions"]["trainable_params"]
    code, out, _ = run(capsys, "memory", "qwen3-0.6b", "--train", "--batch", "1", "--seq", "64", "--freeze", "embeddings,layers:0-20", "--qlora", "--lora-rank", "8", "--lora-targets", "q_proj")
    assert code == 0 and "trainable parameters 172,032 of" in out  # 7 layers × 8 × (1024 + 2048)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--infer", "--lora-rank", "8", "--lora-targets", "q_proj"), "add --train"),
        (("--train", "--lora-rank", "8"), "need both"),
        (("--train", "--lora-rank", "8", "--lora-targets", "qkv"), "no projection named 'qkv'"),
        (("--train", "--freeze", "layers:0-99"), "has 28 layers"),
        (("--train", "--freeze", "attention"), "cannot freeze"),
        (("--train", "--lora-rank", "8", "--lora-targets", "q_proj", "--ep", "2"), "drop --ep"),
    ],
)
def test_bad_fine_tuning_options_exit_2_with_one_line(capsys, argv, message):
    from checks import run

    code, _, err = run(capsys, "memory", "qwen3-0.6b", "--batch", "1", "--seq", "8", *argv)
    assert code == 2 and message in err and err.count("\n") == 1, err


# --- a step's time (symform.analysis.time.timing, symform.analysis.time.estimate) ------------------------------------------------


def _step(setup, **layout):
    from symform.analysis.time.estimate import training_estimate
    from symform.analysis.memory.settings import Layout

    return training_estimate(MODEL, "h100-sxm", global_batch=8, micro_batch=1, seq=32, layout=Layout(**layout), finetune=setup)


def test_fine_tuning_that_freezes_nothing_times_as_full_training():
    full, same = _step(None, data=2, pipeline=2), _step(FineTune(), data=2, pipeline=2)
    assert same.model_flops == full.model_flops and same.hardware_flops == full.hardware_flops
    assert same.step.estimate == pytest.approx(full.step.estimate) and same.comm_s == pytest.approx(full.comm_s)
    assert same.optimizer_s == pytest.approx(full.optimizer_s)


# ranks well below the widths (64): a rank near them costs the adapters more than freezing saves
@pytest.mark.parametrize(("rank", "targets", "frozen"), [(4, ("q_proj", "v_proj"), ()), (2, tuple(sorted(SHAPES)), ("layers:0-1",))])
def test_adapters_make_the_step_cheaper_and_update_only_what_trains(rank, targets, frozen):
    setup = FineTune(rank=rank, targets=targets, freeze=frozen)
    full, tuned = _step(None, data=2), _step(setup, data=2)
    counts = finetune_counts(MODEL, setup, batch=8, seq=32)
    assert tuned.model_flops == counts.step_flops < full.model_flops
    assert tuned.step.estimate < full.step.estimate
    # the optimizer's update reads and writes the trainable weights' bytes only (the base model's params are full training's)
    assert tuned.optimizer_s == pytest.approx(full.optimizer_s * counts.trainable_params / MODEL.evaluate("params"))
