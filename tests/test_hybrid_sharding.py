"""Hybrid sharding (Layout.replicate: PyTorch FSDP2's HSDP, torchtitan's dp_replicate × dp_shard, MaxText's DCN data
parallelism over ICI FSDP): the states divide by one replica's data ranks, the ZeRO collectives run inside a replica,
and each rank's gradient shard is all-reduced across the replicas.

Expected values are derived here from the parameter counts and the hardware files' own numbers (the ZeRO paper's
per-parameter bytes, the ring all-reduce's 2·(p − 1)/p·n), never from symform.analysis.time.timing.
"""

import tomllib
from pathlib import Path

import pytest

import symform
from symform import ConfigError, EvaluationError, Model, load
from symform.analysis.memory.memory import Training, training_memory
from symform.analysis.memory.settings import Layout
from symform.analysis.time import measured_runs, memory_validation
from symform.analysis.time.estimate import training_estimate
from symform.analysis.time.timing import training_time

from checks import one_line_error, run, run_json

HARDWARE = Path(__file__).resolve().parent.parent / "hardware"
H100 = tomllib.loads((HARDWARE / "h100-sxm.toml").read_text())
NIC = H100["interconnect"]["scale_out"]["unidirectional_bytes_per_s"]
SCALE_OUT_LATENCY = 10e-6  # symform.analysis.parallel.collectives.DEFAULT_LATENCY_S

P = 16_000_000  # a model of P parameters and nothing else
STATIC = ("weights", "master_weights", "gradients", "optimizer")


def _static(layout: Layout) -> dict[str, int]:
    model = Model.from_component("parameters", count=P)
    values = training_memory(model, batch=1, seq=1, setup=Training(precision="mixed", layout=layout)).values
    return {k: values[k] for k in STATIC}


# --- memory ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zero", "expected"),
    [  # mixed-precision Adam: 2 bytes of weights, 2 of gradients, 4 of master weights, 2 × 4 of states (ZeRO §3.1)
        (1, {"weights": 2 * P, "gradients": 2 * P, "master_weights": 4 * P // 8, "optimizer": 8 * P // 8}),
        (2, {"weights": 2 * P, "gradients": 2 * P // 8, "master_weights": 4 * P // 8, "optimizer": 8 * P // 8}),
        (3, {"weights": 2 * P // 8, "gradients": 2 * P // 8, "master_weights": 4 * P // 8, "optimizer": 8 * P // 8}),
    ],
)
def test_sixteen_data_ranks_in_two_replicas_shard_over_eight(zero, expected):
    """16 data ranks, replicate 2: each replica of 8 ranks holds the sharded copies whole, so a rank holds 1/8 of them."""
    assert _static(Layout(data=16, zero=zero, replicate=2)) == expected
    assert _static(Layout(data=8, zero=zero)) == expected  # the same as ZeRO over one replica alone


def test_every_state_byte_is_held_once_per_replica():
    """ZeRO-3 over replicas of data / replicate ranks: one replica's ranks together hold 16 bytes a parameter, exactly."""
    for data, replicate in ((16, 2), (16, 4), (16, 16), (12, 3)):
        per_rank = sum(_static(Layout(data=data, zero=3, replicate=replicate)).values())
        assert per_rank * (data // replicate) == 16 * P


def test_context_ranks_join_the_shard_group_of_each_replica():
    """torchtitan shards FSDP over dp_shard × cp and replicates over dp_replicate: 8 data ranks in 2 replicas with 2
    context ranks each shard the weights 4 × 2 = 8 ways."""
    model = load("llama-3.2-1b")
    weights = training_memory(model, batch=1, seq=16, setup=Training(layout=Layout(data=8, context=2, zero=3, replicate=2))).values["weights"]
    assert weights * 8 == 2 * model.evaluate("params")


def test_the_experts_of_one_replica_are_held_once():
    """Qwen3-30B-A3B over 16 data ranks, 8 expert ranks, 2 replicas, ZeRO-3: each replica's 8 ranks hold every expert
    once (the expert-data group of 16 / 8 = 2 ranks spans the two replicas, which hold the same shard), and the
    dense weights split over the replica's 8 ranks: one replica holds the bf16 weights exactly once."""
    model = load("qwen3-30b-a3b")
    weights = training_memory(model, batch=1, seq=16, setup=Training(layout=Layout(data=16, expert=8, zero=3, replicate=2))).values["weights"]
    assert weights * 8 == 2 * model.evaluate("params")


# --- time --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small():
    return symform.load("llama-3.2-1b")


def test_the_all_reduce_across_replicas_has_the_shard_s_bytes_over_the_scale_out_network(small):
    """16 data ranks on 8-GPU H100 nodes, replicate 2, ZeRO-3: the shard group is a node's 8 consecutive ranks
    (NVLink); each rank's gradient shard, 2 bytes × params / 8, is all-reduced with the rank 8 places away, a group
    spanning both nodes (the NIC). For p = 2 ring and tree cost the same: 2·α + 2·(p − 1)/p·n / bandwidth."""
    layout = Layout(data=16, zero=3, replicate=2)
    result = training_time(small, "h100-sxm", global_batch=16, micro_batch=1, seq=512, layout=layout)
    shard = 2 * small.evaluate("params") / 8
    replicas = result.comm["replicate"]
    assert (replicas.link, replicas.ranks) == ("scale_out", 2)
    assert replicas.bytes_per_rank == pytest.approx(shard, rel=1e-12)
    assert replicas.seconds == pytest.approx(2 * SCALE_OUT_LATENCY + shard / NIC, rel=1e-12)
    # ZeRO-3 inside the node: two all-gathers and a reduce-scatter of the 2 · params bytes over 8 ranks, 7/8 each
    data = result.comm["data"]
    assert (data.link, data.ranks) == ("scale_up", 8)
    assert data.bytes_per_rank == pytest.approx(3 * 7 / 8 * 2 * small.evaluate("params"), rel=1e-12)
    assert result.assumptions["links"]["replicate"]["bytes_per_s"] == NIC
    assert "hybrid_sharding" in result.assumptions


def test_the_replicas_exchange_runs_once_per_step_after_the_gradients(small):
    """Both exchanges run once per step, one after the other: the lower bound hides their sum, the upper adds it."""
    result = training_time(small, "h100-sxm", global_batch=16, micro_batch=1, seq=512, layout=Layout(data=16, zero=3, replicate=2))
    exchange = result.comm["data"].seconds + result.comm["replicate"].seconds
    assert set(result.comm) == {"data", "replicate"}
    assert result.time_lower == pytest.approx(max(result.t_math, result.t_mem, exchange), rel=1e-12)
    assert result.time_upper == pytest.approx(result.t_math + result.t_mem + exchange, rel=1e-12)


def test_the_shard_group_leaves_the_node_when_its_span_does(small):
    """tensor 4 × a shard group of 4 data ranks spans 16 ranks: past an 8-GPU node, so the ZeRO collectives go over the NIC too."""
    result = training_time(small, "h100-sxm", global_batch=8, micro_batch=1, seq=512, layout=Layout(data=8, tensor=4, zero=1, replicate=2))
    assert (result.comm["data"].link, result.comm["data"].ranks) == ("scale_out", 4)
    inside = training_time(small, "h100-sxm", global_batch=8, micro_batch=1, seq=512, layout=Layout(data=4, tensor=2, zero=1, replicate=2))
    assert inside.comm["data"].link == inside.comm["replicate"].link == "scale_up"  # 2 × 2 and 2 × 4 ranks: one node


def test_the_estimate_hides_the_replicas_exchange_like_the_gradients_and_widens_its_band(small):
    layout = Layout(data=16, zero=3, replicate=2)
    result = training_estimate(small, "h100-sxm", global_batch=16, micro_batch=1, seq=512, layout=layout)
    assert set(result.comm_s) == set(result.exposed_comm_s) == {"data", "replicate"}
    assert 0 <= result.exposed_comm_s["replicate"] <= result.comm_s["replicate"]
    assert any("hybrid sharding over 2 replicas" in reason for reason in result.extrapolating)


def test_replicate_one_is_today_s_layout(small):
    plain, one = Layout(data=16, zero=3), Layout(data=16, zero=3, replicate=1)
    assert plain == one and "replicate" not in one.described()
    a = training_time(small, "h100-sxm", global_batch=16, micro_batch=1, seq=512, layout=one)
    assert "replicate" not in a.comm and "hybrid_sharding" not in a.assumptions
    assert a.as_dict() == training_time(small, "h100-sxm", global_batch=16, micro_batch=1, seq=512, layout=plain).as_dict()


# --- refusals ----------------------------------------------------------------------------------


def test_refusals_are_one_line():
    one_line_error(EvaluationError, lambda: Layout(data=16, zero=3, replicate=3), "replicate 3", "16 data-parallel ranks")
    one_line_error(EvaluationError, lambda: Layout(data=16, replicate=2), "ZeRO stage 0", "replicate 2")
    # Megatron's distributed optimizer shards the optimizer's states without ZeRO: its replicas are the same hybrid
    # sharding (--num-distributed-optimizer-instances), each replica's 8 ranks holding an eighth of them
    assert _static(Layout(data=16, distributed_optimizer=True, replicate=2))["optimizer"] == 8 * P // 8
    one_line_error(EvaluationError, lambda: Layout(data=16, zero=1, replicate=0), "replicate parallel degree")
    # 8 expert ranks do not fit in a replica of 4 data ranks
    layout = Layout(data=8, expert=8, zero=1, replicate=2)
    one_line_error(ConfigError, lambda: training_memory(load("qwen3-30b-a3b"), batch=1, seq=16, setup=Training(layout=layout)), "one replica's", "(4)")


# --- the command line and the measured runs ------------------------------------------------------


def test_time_and_memory_take_replicate(capsys):
    args = ("llama-3.2-1b", "--gpu", "h100-sxm", "--gpus", "16", "--train", "--global-batch", "16", "--seq", "512", "--zero", "3")
    report = run_json(capsys, "time", *args, "--replicate", "2")
    assert report["layout"]["replicate"] == 2 and report["comm"]["replicate"]["link"] == "scale_out"
    code, out, _ = run(capsys, "time", *args, "--replicate", "2")
    assert code == 0 and "ZeRO-3 sharded over 8 data ranks, replicated 2 times (hybrid sharding)" in out.splitlines()[0]
    assert "replicate" not in run_json(capsys, "time", *args)["layout"]
    memory = run_json(capsys, "memory", "llama-3.2-1b", "--train", "--batch", "1", "--seq", "512", "--dp", "16", "--zero", "3", "--replicate", "2")
    plain = run_json(capsys, "memory", "llama-3.2-1b", "--train", "--batch", "1", "--seq", "512", "--dp", "8", "--zero", "3")
    assert memory["components"]["weights"] == plain["components"]["weights"]
    code, _, err = run(capsys, "time", *args[:-2], "--replicate", "2")
    assert code == 2 and err.count("\n") == 1 and "ZeRO stage 0" in err


def test_a_measured_run_names_its_replicas():
    setup = {"gpus": 128, "tensor": 4, "zero": 3, "replicate": 2}
    assert measured_runs.run_layout(setup) == Layout(data=32, tensor=4, zero=3, replicate=2)
    run = next(r for r in measured_runs.runs() if r.name == "maxtext-32b-2x-v5p-128")
    assert run.split == "check"
    layout = memory_validation.timed_layout(run)
    assert (layout.data, layout.replicate, layout.shard_data) == (32, 2, 16)


def test_maxtext_two_slice_rows_count_tokens_by_maxtext_s_flops():
    """Each 2x row's tokens/s/chip is the README's TFLOP/s/chip over MaxText's FLOPs a token, 6·N + 6·heads·layers·256·2048
    (N in its comment), and its one-slice row's layout on twice the chips with the same per-chip batch."""
    text = (HARDWARE / "measured" / "maxtext-v5p.toml").read_text()
    rows = {r["name"]: r for r in tomllib.loads(text)["runs"]}
    readme = {"32b-2x-v5p-128": 319, "64b-2x-v5p-128": 309, "128b-2x-v5p-256": 305, "128b-2x-v5p-512": 274, "256b-2x-v5p-1024": 289, "512b-2x-v5p-1024": 282, "1024b-2x-v5p-2048": 237, "1024b-2x-v5p-4096": 279}
    counts = {"32b": 32_548_136_960, "64b": 64_760_719_360, "128b": 129_185_228_800, "256b": 258_370_457_600, "512b": 516_069_806_080, "1024b": 1_031_465_881_600}
    for name, tflops in readme.items():
        row, one = rows[f"maxtext-{name}"], rows[f"maxtext-{name.replace('-2x', '')}"]
        c = row["config"]
        per_token = 6 * counts[name.split("-")[0]] + 6 * c["num_attention_heads"] * c["num_hidden_layers"] * 256 * 2048
        assert row["measured"]["tokens_per_s_per_gpu"] == pytest.approx(tflops * 1e12 / per_token, abs=0.05)
        assert (row["gpus"], row["global_batch"], row["replicate"], row["split"]) == (2 * one["gpus"], 2 * one["global_batch"], 2, "check")
        assert {k: row[k] for k in ("config", "gpu", "tensor", "zero", "micro_batch", "seq", "recompute")} == {k: one[k] for k in ("config", "gpu", "tensor", "zero", "micro_batch", "seq", "recompute")}


def test_the_optimizer_step_reads_the_states_the_context_ranks_share():
    """ZeRO-1 over 8 data × 2 context ranks shards the optimizer's states 16 ways, as over 16 data ranks (static_shards):
    the estimate's optimizer step reads a rank's share, the same in both layouts."""
    model = load("llama-3.2-1b")
    step = dict(global_batch=16, micro_batch=1, seq=1024)
    wide = training_estimate(model, "h100-sxm", **step, layout=Layout(data=16, zero=1))
    context = training_estimate(model, "h100-sxm", **step, layout=Layout(data=8, context=2, zero=1))
    assert Layout(data=8, context=2, zero=1).optimizer_shards == 16
    assert context.optimizer_s == pytest.approx(wide.optimizer_s, rel=1e-12)

