"""The fine-tuning options on every command that counts a training step, against peft and PyTorch.

``symform flops``, ``symform roofline --phase train`` and ``symform time --train`` give the FLOPs of a step with LoRA adapters or frozen layers,
equal to FlopCounterMode's count of a peft model's forward and backward; ``time`` exchanges only the
trainable weights' gradients (peft's count, at 2 bytes each, over a ring all-reduce); ``memory`` under
tensor parallelism holds each adapter split as peft's LoraParallelLinear splits it on Megatron's layers.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from checks import run, run_json  # noqa: E402
from oracle import TINY, build_for_training, input_ids  # noqa: E402
from test_finetune import peft_model, step_flops  # noqa: E402

pytestmark = [pytest.mark.oracle, pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")]

LLAMA = {**TINY, "model_type": "llama", "vocab_size": 102}  # an even vocabulary: it splits over two tensor ranks
TARGETS = ("q_proj", "v_proj", "o_proj", "down_proj")
EAGER = ("--accounting", "eager", "--convention", "cpu_kernels=1")
ROW_PARALLEL = ("o_proj", "down_proj")  # Megatron's RowParallelLinear; q, k, v, gate and up are column-parallel


@pytest.fixture
def config_path(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    return str(path)


def lora_options(targets=TARGETS, rank=4):
    return ("--lora-rank", str(rank), "--lora-targets", ",".join(targets))


def trainable(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_flops_of_a_lora_step_equal_pytorch(capsys, config_path):
    expected = step_flops(peft_model(LLAMA, TARGETS, "lora"), input_ids(LLAMA, 2, 7))
    found = run_json(capsys, "flops", config_path, "--batch", "2", "--seq", "7", *EAGER, *lora_options())
    assert found["train"] == expected
    assert found["full_training"]["train"] > expected  # the frozen weights' gradients are gone


def test_flops_with_frozen_layers_equal_pytorch(capsys, tmp_path):
    config = {**LLAMA, "num_hidden_layers": 3, "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    model = build_for_training(config, torch.float32)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(not ("embed_tokens" in name or ".layers.0." in name))
    found = run_json(capsys, "flops", str(path), "--batch", "2", "--seq", "5", *EAGER, "--freeze", "embeddings,layers:0-0")
    assert found["train"] == step_flops(model, input_ids(config, 2, 5))
    assert found["trainable_params"] == trainable(model)


@pytest.mark.parametrize("tp", [1, 2])
def test_time_counts_the_lora_step_pytorch_counts(capsys, config_path, tp):
    expected = step_flops(peft_model(LLAMA, TARGETS, "lora"), input_ids(LLAMA, 4, 7))
    found = run_json(capsys, "time", config_path, "--gpu", "h100-sxm", "--train", "--global-batch", "4", "--seq", "7", "--tp", str(tp), "--attention", "eager", *EAGER, *lora_options())
    assert found["model_flops"] == expected
    assert found["hardware_flops"] == expected  # no recomputation, eager attention


def test_roofline_of_a_dora_step_counts_what_pytorch_counts(capsys, config_path):
    expected = step_flops(peft_model(LLAMA, TARGETS, "dora"), input_ids(LLAMA, 2, 7))
    found = run_json(capsys, "roofline", config_path, "--gpu", "h100-sxm", "--phase", "train", "--batch", "2", "--seq", "7", "--attention", "eager", *EAGER, *lora_options(), "--dora")
    assert found["flops"] == expected


def test_data_parallel_ranks_exchange_only_the_adapters_gradients(capsys, config_path):
    dp = 4
    found = run_json(capsys, "time", config_path, "--gpu", "h100-sxm", "--train", "--global-batch", "4", "--seq", "7", "--dp", str(dp), *lora_options())
    # a ring all-reduce sends 2(d-1)/d of the buffer from each rank; bf16 gradients of the trainable weights
    assert found["comm"]["data"]["bytes_per_rank"] == pytest.approx(trainable(peft_model(LLAMA, TARGETS, "lora")) * 2 * 2 * (dp - 1) / dp)


def test_tensor_parallel_adapters_split_as_peft_splits_them_on_megatron_layers(capsys, config_path):
    model = peft_model(LLAMA, TARGETS, "lora")
    tp, per_rank = 2, 0
    for name, parameter in model.named_parameters():
        if "lora_" not in name:
            continue
        row = any(f".{t}." in name for t in ROW_PARALLEL)
        split = ("lora_A" in name and row) or ("lora_B" in name and not row)  # lora_A by rows on row-parallel, lora_B by columns on column-parallel
        per_rank += parameter.numel() // (tp if split else 1)
    one = run_json(capsys, "memory", config_path, "--train", "--batch", "1", "--seq", "8", *lora_options())
    two = run_json(capsys, "memory", config_path, "--train", "--batch", "1", "--seq", "8", "--tp", str(tp), *lora_options())
    assert one["components"]["trained_weights"] == 2 * trainable(model)
    assert two["components"]["trained_weights"] == 2 * per_rank


def test_pipeline_stages_hold_equal_shares_of_the_adapters(capsys, config_path):
    one = run_json(capsys, "memory", config_path, "--train", "--batch", "1", "--seq", "8", *lora_options())
    two = run_json(capsys, "memory", config_path, "--train", "--batch", "1", "--seq", "8", "--pp", "2", *lora_options())
    assert two["components"]["trained_weights"] * 2 == one["components"]["trained_weights"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("memory", "--train", "--batch", "1", "--seq", "8", "--ep", "2", *lora_options()), ("expert parallelism", "--ep")),
        (("memory", "--train", "--batch", "1", "--seq", "8", "--cp", "2", *lora_options()), ("context parallelism", "--cp")),
        (("memory", "--train", "--batch", "1", "--seq", "8", "--tp", "2", "--sp", *lora_options()), ("sequence parallelism", "--sp")),
        (("memory", "--train", "--batch", "1", "--seq", "8", "--pp", "2", "--freeze", "layers:0-0"), ("pipeline stages", "--freeze")),
        (("time", "--gpu", "h100-sxm", "--train", "--global-batch", "2", "--seq", "8", "--dp", "2", "--zero", "3", *lora_options()), ("ZeRO-3", "--zero 2")),
        (("time", "--gpu", "h100-sxm", "--infer", "--batch", "1", "--prompt", "8", "--output", "2", *lora_options()), ("--train",)),
        (("flops", "--batch", "1", "--seq", "8", "--qlora"), ("--lora-rank", "--lora-targets")),
        (("roofline", "--gpu", "h100-sxm", "--phase", "decode", "--batch", "1", "--context", "8", *lora_options()), ("--phase train",)),
    ],
    ids=["ep", "cp", "sp", "frozen layers with pp", "zero-3 time", "infer", "qlora alone", "roofline decode"],
)
def test_layouts_and_options_fine_tuning_does_not_model_are_refused_in_one_line(capsys, config_path, argv, words):
    code, out, err = run(capsys, argv[0], config_path, *argv[1:])
    assert code == 2 and not out and err.count("\n") == 1, err
    for word in words:
        assert word in err, err


def test_sweep_over_ranks_and_target_sets_counts_what_peft_and_pytorch_count(capsys, config_path):
    target_sets = (("q_proj", "v_proj"), TARGETS)
    ranks = (1, 2, 4)
    found = run_json(
        capsys, "sweep", config_path, "trainable-params", "train-step-flops", "--grid", "lora_rank=" + ",".join(map(str, ranks)),
        "--fix", "batch=2", "--fix", "seq=7", *EAGER, *(a for t in target_sets for a in ("--lora-targets", ",".join(t))),
    )  # fmt: skip
    columns = found["columns"]
    assert found["shape"] == [2, 3] and columns["lora_targets"] == [",".join(t) for t in target_sets for _ in ranks]
    ids = input_ids(LLAMA, 2, 7)
    for i, (targets, rank) in enumerate((t, r) for t in target_sets for r in ranks):
        model = peft_model(LLAMA, targets, "lora", rank=rank)
        assert columns["lora_rank"][i] == rank
        assert columns["trainable_params"][i] == trainable(model)
        assert columns["train_step_flops"][i] == step_flops(model, ids)
