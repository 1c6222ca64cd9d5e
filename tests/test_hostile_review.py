"""Findings of a hostile review (tests/hostile_table.py runs the whole table): one test per class of finding.

Each bad input ends in one line naming the problem and the fix (exit 2, a SymformError from the API),
never a traceback, a message that echoes a huge value back, or a silent number for an impossible layout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import symform
from symform import ConfigError, EvaluationError
from symform.engine.errors import BudgetError
from symform.analysis.memory.memory import Training, training_memory
from symform.analysis.memory.settings import Layout

from checks import one_line_error, run

PRESETS = Path(__file__).resolve().parent.parent / "formulas" / "presets"
QWEN = json.loads((PRESETS / "qwen3-0.6b.json").read_text())


@pytest.mark.parametrize(
    "field, value",
    [
        ("num_hidden_layers", list(range(200_000))),  # a layer_types-sized list where a size belongs
        ("hidden_size", "M*-" * 100_000),  # a pattern-sized string
        ("model_type", "x" * 100_000),
        ("rope_scaling", "y" * 100_000),
    ],
)
def test_a_huge_bad_value_is_quoted_short_not_echoed_whole(tmp_path, field, value):
    path = tmp_path / "config.json"
    config = dict(QWEN, **{field: value})
    if field == "model_type":
        config.pop("architectures")  # else the class name finds the family: the type is never looked up
    path.write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        symform.load(str(path))
    message = str(caught.value)
    assert "\n" not in message and len(message) < 600 + len(str(path)), message[:300]


def test_more_pipeline_stages_than_layers_is_refused_not_a_fractional_layer_per_stage():
    model = symform.load("qwen3-0.6b")  # 28 layers
    setup = Training(layout=Layout(pipeline=1000))
    one_line_error(EvaluationError, lambda: training_memory(model, batch=1, seq=8, setup=setup), "1000 pipeline stages", "28 layers", "at most 28")
    assert training_memory(model, batch=1, seq=8, setup=Training(layout=Layout(pipeline=28))).total > 0


def test_more_pipeline_stages_than_layers_in_the_cli(capsys):
    for argv in (
        ["memory", "qwen3-0.6b", "--train", "--batch", "1", "--seq", "8", "--pp", "29"],
        ["time", "qwen3-0.6b", "--gpu", "h100-sxm", "--train", "--global-batch", "64", "--seq", "512", "--gpus", "64", "--pp", "64"],
    ):
        code, out, err = run(capsys, *argv)
        assert code == 2 and err.count("\n") == 1 and "a stage holds at least one layer" in err, err


def test_a_plan_past_int64_tokens_is_refused_by_its_budget(capsys):
    from symform.analysis.plans.planner import plan

    model = symform.load("qwen3-0.6b")
    one_line_error(BudgetError, lambda: plan(model, "h100-sxm", devices=8, global_batch=10**30, seq=128), "STEP_TOKENS")
    code, _, err = run(capsys, "plan", "qwen3-0.6b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", str(10**30), "--seq", "128")
    assert code == 2 and "STEP_TOKENS" in err and err.count("\n") == 1


def test_an_adapter_of_rank_zero_is_refused_on_the_command_line(capsys):
    code, _, err = run(capsys, "flops", "qwen3-0.6b", "--batch", "1", "--seq", "8", "--lora-rank", "0", "--lora-targets", "q_proj")
    assert code == 2 and "--lora-rank" in err and "must be positive" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "preset, field, value",
    [
        ("qwen3-next-80b-a3b", "layer_types", ["linear_attention"] * 10**5),
        ("nemotron-h-8b", "hybrid_override_pattern", "M" * 10**5),
        ("gpt-oss-20b", "layer_types", ["full_attention"] * 10**5),
    ],
)
def test_a_per_layer_list_past_the_layer_budget_is_refused_before_it_is_read(tmp_path, preset, field, value):
    config = json.loads((PRESETS / f"{preset}.json").read_text())
    config[field] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    one_line_error(BudgetError, lambda: symform.load(str(path)), field, "LAYERS")


@pytest.mark.parametrize(
    "quantization, words",
    [
        ("x", "quantization_config is 'x'"),  # was read as no quantisation: bf16 bytes for a quantised checkpoint
        ([], "quantization_config is []"),
        ({"quant_method": "compressed-tensors", "config_groups": "x"}, "config_groups"),  # was an AttributeError traceback
        ({"quant_method": "fp8", "modules_to_not_convert": "lm_head"}, "list of module names"),  # was ignored: every module quantised
        ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [0, 128]}}}}, "block_structure"),
    ],
)
def test_a_malformed_quantization_config_is_one_line(tmp_path, capsys, quantization, words):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(QWEN, quantization_config=quantization)), encoding="utf-8")
    code, out, err = run(capsys, "memory", str(path), "--infer", "--batch", "1", "--seq", "8")
    assert code == 2 and err.count("\n") == 1 and words in err, err


def test_bert_heads_that_do_not_divide_the_width_are_refused_as_transformers_refuses_them():
    # BertSelfAttention raises on hidden_size % num_attention_heads != 0: no model exists to count
    config = json.loads((PRESETS / "bert-base-uncased.json").read_text())
    one_line_error(ConfigError, lambda: symform.Model.from_config(dict(config, hidden_size=770)), "multiple of num_attention_heads")
    assert symform.Model.from_config(dict(config, hidden_size=780)).evaluate("params") > 0  # 12 × 65


@pytest.mark.parametrize("name", ["config.json", "arch.toml"])
def test_a_named_pipe_is_refused_not_waited_on(tmp_path, capsys, name):
    import os

    pipe = tmp_path / name
    os.mkfifo(pipe)  # opening it for reading would wait for a writer: the run would never end
    code, out, err = run(capsys, "params", str(pipe))
    assert code == 2 and "pipe or socket" in err and err.count("\n") == 1, err


def test_a_deepseek_v32_indexer_head_narrower_than_its_rotary_part_is_refused():
    # DeepseekV32Indexer splits q and k into [qk_rope_head_dim, index_head_dim - qk_rope_head_dim]: a negative size fails
    config = json.loads((PRESETS / "deepseek-v3.2.json").read_text())
    one_line_error(ConfigError, lambda: symform.Model.from_config(dict(config, index_head_dim=config["qk_rope_head_dim"] - 1)), "index_head_dim")
    assert symform.Model.from_config(dict(config, index_head_dim=config["qk_rope_head_dim"])).evaluate("params") > 0


GROUPED = {  # a tiny DeepSeek-V3 whose group-limited router is consistent: 8 experts in 4 groups of 2, 2 groups kept
    "model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
    "vocab_size": 128, "intermediate_size": 96, "moe_intermediate_size": 32, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "n_group": 4, "topk_group": 2, "first_k_dense_replace": 1, "kv_lora_rank": 16, "q_lora_rank": 24,
    "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
}
BAD_GROUPS = [  # (changed fields, the values the message names)
    ({"n_group": 3}, "n_experts % n_groups == 0 does not hold (n_experts=8, n_groups=3)"),  # 8 experts in 3 equal groups
    ({"n_group": 8}, "2*n_groups <= n_experts does not hold (n_experts=8, n_groups=8)"),  # groups of one: no two best
    ({"topk_group": 5}, "topk_groups <= n_groups does not hold (n_groups=4, topk_groups=5)"),  # more groups kept than there are
]


@pytest.mark.parametrize("changed, words", BAD_GROUPS, ids=[next(iter(c)) + str(next(iter(c.values()))) for c, _ in BAD_GROUPS])
def test_a_group_limited_router_that_cannot_run_is_refused(tmp_path, capsys, changed, words):
    assert symform.Model.from_config(GROUPED).evaluate("params") > 0
    one_line_error(ConfigError, lambda: symform.Model.from_config({**GROUPED, **changed}), words)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**GROUPED, **changed}))
    code, _, err = run(capsys, "flops", str(path), "--batch", "1", "--seq", "8")
    assert code == 2 and err.count("\n") == 1 and words in err


@pytest.mark.oracle
@pytest.mark.parametrize("changed, words", BAD_GROUPS, ids=[next(iter(c)) + str(next(iter(c.values()))) for c, _ in BAD_GROUPS])
def test_transformers_router_fails_on_the_groups_symform_refuses(changed, words):
    """The refusals follow the oracle: DeepseekV3TopkRouter views the scores as n_group equal groups, takes each
    group's top two and then the top topk_group groups, so each of these configs raises in its forward."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from oracle import build

    good = build(GROUPED)
    ids = torch.zeros((1, 4), dtype=torch.long)
    good(input_ids=ids)  # the consistent router runs
    bad = build({**GROUPED, **changed})
    with pytest.raises(RuntimeError):
        bad(input_ids=ids)


PHI3 = {  # a tiny Phi-3 (partial rotary): head_dim 16
    "model_type": "phi3", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 128, "intermediate_size": 96, "partial_rotary_factor": 0.5, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
}
BAD_ROTARY = [  # (partial_rotary_factor, what the message names)
    (1.5, "rotary_dim <= d_head does not hold (d_head=16, rotary_dim=24)"),  # more rotated dimensions than a head has
    (0.4375, "rotary_dim % 2 == 0 does not hold (rotary_dim=7)"),  # an odd number of them
]


@pytest.mark.parametrize("factor, words", BAD_ROTARY)
def test_a_rotary_width_no_head_can_have_is_refused(factor, words):
    assert symform.Model.from_config(PHI3).evaluate("params") > 0
    one_line_error(ConfigError, lambda: symform.Model.from_config({**PHI3, "partial_rotary_factor": factor}), words)


@pytest.mark.oracle
def test_transformers_rotary_widths_behind_the_refusals():
    """A factor above 1 makes cos and sin wider than the heads they turn: the forward raises. An odd width
    (7 of 16) gives cos and sin 8 wide (inverse frequencies for every second dimension, doubled), so a count
    of 7 rotated dimensions would be wrong, not just odd."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from oracle import build

    ids = torch.zeros((1, 4), dtype=torch.long)
    with pytest.raises(RuntimeError):
        build({**PHI3, "partial_rotary_factor": 1.5})(input_ids=ids)
    odd = build({**PHI3, "partial_rotary_factor": 0.4375})
    assert 2 * odd.model.rotary_emb.inv_freq.numel() == 8


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["params", "qwen3-0.6b", "--set", "d_model=1024", "--set", "d_model=2048"], "--set d_model"),
        (["flops", "qwen3-0.6b", "--batch", "1", "--seq", "8", "--convention", "causal=0", "--convention", "causal=1"], "--convention causal"),
        (["memory", "qwen3-0.6b", "--train", "--batch", "1", "--seq", "8", "--convention", "act_bytes=2", "--convention", "act_bytes=4"], "--convention act_bytes"),
        (["sweep", "qwen3-0.6b", "params", "--grid", "d_model=1024,2048", "--grid", "d_model=4096"], "--grid d_model"),
        (["sweep", "qwen3-0.6b", "forward_flops", "--zip", "seq=8,16", "--fix", "batch=1", "--fix", "batch=2"], "--fix batch"),
    ],
)
def test_a_name_given_twice_is_refused_not_overwritten(capsys, argv, flag):
    """The later value would win silently; which one the user meant is theirs to say."""
    code, out, err = run(capsys, *argv)
    assert code == 2 and not out and err == f"symform: error: {flag} is given more than once; give each name once\n"


def test_numpy_scalars_are_the_numbers_they_hold():
    """A size read from a numpy array (np.int64, np.int32, np.float32 holding a whole number) is that number;
    numpy's bool is not a size."""
    np = pytest.importorskip("numpy")
    model = symform.load("qwen3-0.6b")
    expected = model.evaluate("forward_flops", batch=2, seq=64)
    assert model.evaluate("forward_flops", batch=np.int32(2), seq=np.int64(64)) == expected
    assert model.evaluate("forward_flops", batch=2, seq=np.float32(64.0)) == expected
    assert model.with_arguments(n_layers=np.int64(3)).evaluate("params") == model.with_arguments(n_layers=3).evaluate("params")
    one_line_error(EvaluationError, lambda: model.evaluate("forward_flops", batch=2, seq=np.bool_(True)), "seq must be an integer")


@pytest.mark.parametrize("depth", [0, -1, "a", True, 1.5])
def test_a_breakdown_depth_that_is_no_number_of_segments_is_refused(depth):
    model = symform.load("qwen3-0.6b")
    one_line_error(EvaluationError, lambda: model.breakdown("params", depth=depth), "depth", "from 1")
    one_line_error(EvaluationError, lambda: model.evaluate_breakdown("params", depth=depth), "depth", "from 1")
