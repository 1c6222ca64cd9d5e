"""Time: training step bounds, MFU and HFU, inference TTFT and TPOT, the CLI.

Expected values are computed here from Model.evaluate and the hardware files' own
numbers, never from symform.analysis.time.timing; nothing times this machine.
"""

import json
import tomllib
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symform
from symform.interface.cli.cli import main
from symform.analysis.memory.settings import Layout
from symform.analysis.time.timing import training_time
from symform.analysis.time.phase_time import decode_time, inference_time, prefill_time

HARDWARE = Path(__file__).resolve().parent.parent / "hardware"


def _device_file(name: str) -> dict:
    with open(HARDWARE / f"{name}.toml", "rb") as f:
        return tomllib.load(f)


H100 = _device_file("h100-sxm")
PEAK = H100["dense_flops_per_s"]["bf16"]
HBM = H100["hbm_bytes_per_s"]
NVLINK = H100["interconnect"]["scale_up"]["unidirectional_bytes_per_s"]


@pytest.fixture(scope="module")
def llama():
    return symform.load("llama-3-8b")


@pytest.fixture(scope="module")
def small():
    return symform.load("llama-3.2-1b")


# --- training on one device -------------------------------------------------------------------


def test_one_device_bounds_are_max_and_sum_of_math_and_memory(llama):
    result = training_time(llama, "h100-sxm", global_batch=8, micro_batch=2, seq=2048)
    flops = llama.evaluate("forward_flops", batch=8, seq=2048) + llama.evaluate("backward_flops", batch=8, seq=2048)
    # backward moves twice the forward's bytes; each of the 4 micro-batches reads the weights again
    moved = 3 * llama.evaluate("bytes_moved", batch=2, seq=2048) * 4
    assert result.flops_per_device == flops
    assert result.bytes_per_device == moved
    assert result.comm == {}
    assert result.time_lower == pytest.approx(max(flops / PEAK, moved / HBM), rel=1e-12)
    assert result.time_upper == pytest.approx(flops / PEAK + moved / HBM, rel=1e-12)
    assert result.mfu_high == pytest.approx(flops / (result.time_lower * PEAK), rel=1e-12)
    assert result.tokens_per_s_high == pytest.approx(8 * 2048 / result.time_lower)


def _core_forward(model, **workload) -> int:
    parts = model.evaluate_breakdown("forward_flops", depth=None, **workload)
    return sum(v for path, v in parts.items() if "/core/" in path or path.endswith("/core"))


def _layers_forward(model, **workload) -> int:
    parts = model.evaluate_breakdown("forward_flops", depth=None, **workload)
    return sum(v for path, v in parts.items() if path.startswith("layers/"))


@pytest.mark.parametrize("name", ["llama-3-8b", "gemma-2-2b"])
def test_selective_recompute_adds_exactly_the_attention_cores_forward(name):
    model = symform.load(name)
    workload = {"global_batch": 4, "micro_batch": 1, "seq": 1024}
    none = training_time(model, "h100-sxm", **workload)
    selective = training_time(model, "h100-sxm", recompute="selective", **workload)
    cores = _core_forward(model, batch=4, seq=1024)
    assert cores > 0
    assert selective.hardware_flops - none.hardware_flops == cores
    assert selective.model_flops == none.model_flops  # MFU does not count recomputation
    assert selective.flops_per_device - none.flops_per_device == cores


def test_full_recompute_adds_one_forward_of_the_layers(llama):
    workload = {"global_batch": 4, "micro_batch": 1, "seq": 1024}
    none = training_time(llama, "h100-sxm", **workload)
    full = training_time(llama, "h100-sxm", recompute="full", **workload)
    assert full.hardware_flops - none.hardware_flops == _layers_forward(llama, batch=4, seq=1024)
    assert full.hfu_high > full.mfu_high


# --- layouts and communication -----------------------------------------------------------------


def test_data_parallel_gradient_all_reduce_over_nvlink(small):
    """Two data-parallel ranks in one node: one all-reduce of every bf16 gradient.

    For p = 2 ring and tree cost the same: 2·α + 2·(p − 1)/p·n / bandwidth.
    """
    result = training_time(small, "h100-sxm", global_batch=4, micro_batch=1, seq=512, layout=Layout(data=2))
    n = 2 * small.evaluate("params")
    assert result.comm["data"].link == "scale_up"
    assert result.comm["data"].seconds == pytest.approx(2 * 5e-6 + n / NVLINK, rel=1e-12)
    assert result.comm["data"].bytes_per_rank == pytest.approx(n)
    one = training_time(small, "h100-sxm", global_batch=2, micro_batch=1, seq=512)
    # each rank does the work of one device with half the batch; the lower bound hides the exchange
    assert result.flops_per_device == one.flops_per_device
    assert result.time_lower == pytest.approx(max(one.time_lower, result.comm["data"].seconds))
    assert result.time_upper == pytest.approx(one.time_upper + result.comm["data"].seconds)


def test_a_card_without_a_scale_up_fabric_talks_to_its_node_over_pcie(small):
    """An RTX 4090's device file has PCIe and no NVLink: tensor and data groups inside a node run over PCIe."""
    assert "scale_up" not in _device_file("rtx-4090")["interconnect"]
    result = training_time(small, "rtx-4090", global_batch=8, micro_batch=1, seq=256, layout=Layout(data=2, tensor=2))
    assert result.comm["tensor"].link == result.comm["data"].link == "pcie"
    assert result.assumptions["links"]["data"]["bytes_per_s"] == _device_file("rtx-4090")["interconnect"]["pcie"]["unidirectional_bytes_per_s"]


def test_groups_leave_the_node_for_scale_out(small):
    result = training_time(small, "h100-sxm", global_batch=8, micro_batch=1, seq=256, layout=Layout(data=4, tensor=8))
    assert result.devices == 32
    assert result.comm["tensor"].link == "scale_up"  # 8 consecutive ranks: one node
    assert result.comm["data"].link == "scale_out"  # spans 32 ranks
    assert result.assumptions["links"]["data"]["bytes_per_s"] == _device_file("h100-sxm")["interconnect"]["scale_out"]["unidirectional_bytes_per_s"]


def test_tensor_parallelism_splits_flops_evenly(small):
    one = training_time(small, "h100-sxm", global_batch=2, micro_batch=1, seq=512)
    four = training_time(small, "h100-sxm", global_batch=2, micro_batch=1, seq=512, layout=Layout(tensor=4))
    assert four.flops_per_device * 4 == one.flops_per_device  # no element-wise FLOPs counted by default
    assert four.comm["tensor"].seconds > 0


def test_pipeline_bubble_is_scalings_ratio(small):
    result = training_time(small, "h100-sxm", global_batch=4, micro_batch=1, seq=512, layout=Layout(pipeline=4, schedule="gpipe"))
    assert result.microbatches == 4
    assert result.bubble_ratio == pytest.approx(3 / 4)  # (K − 1)/M
    inside = max(result.t_math, result.t_mem, result.comm["pipeline"].seconds)
    assert result.time_lower == pytest.approx(inside * (1 + 3 / 4))


@pytest.mark.parametrize(("context", "sequence", "held"), [(1, False, 4096), (1, True, 1024), (2, False, 2048), (2, True, 512)])
def test_a_stage_sends_the_activations_its_ranks_hold(context, sequence, held):
    """Megatron-Core sends (seq / context [/ tensor with sequence parallelism], micro-batch, hidden) between stages
    (pipeline_parallel/schedules.py get_tensor_shapes): each rank its share of the sequence, forward and back, once per
    micro-batch. Llama 3.1 8B: d_model 4,096, bf16 activations; 8 micro-batches of 2 on tensor 4 × pipeline 2."""
    model = symform.load("llama-3.1-8b")
    layout = Layout(tensor=4, pipeline=2, context=context, sequence=sequence)
    result = training_time(model, "h100-sxm", global_batch=16, micro_batch=2, seq=4096, layout=layout)
    assert result.comm["pipeline"].bytes_per_rank == 8 * 2 * (2 * held * 4096 * 2)  # micro-batches · (send + its gradient) · b·s·d·2


def test_expert_parallel_all_to_all_only_for_moe():
    moe = symform.load("qwen1.5-moe-a2.7b")
    result = training_time(moe, "h100-sxm", global_batch=4, micro_batch=1, seq=256, layout=Layout(data=4, expert=4))
    assert result.comm["expert"].seconds > 0
    assert result.comm["expert"].ranks == 4


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.sampled_from([1, 2, 4]),
    tensor=st.sampled_from([1, 2, 8]),
    pipeline=st.sampled_from([1, 2]),
    micro=st.sampled_from([1, 2]),
    steps=st.integers(1, 4),
    seq=st.sampled_from([128, 1024, 4096]),
    recompute=st.sampled_from(["none", "selective", "full"]),
    flash=st.booleans(),
)
def test_mfu_at_most_hfu_at_most_one(small, data, tensor, pipeline, micro, steps, seq, recompute, flash):
    layout = Layout(data=data, tensor=tensor, pipeline=pipeline)
    result = training_time(small, "h100-sxm", global_batch=micro * data * steps, micro_batch=micro, seq=seq, layout=layout, recompute=recompute, flash=flash)
    assert 0 < result.mfu_high <= result.hfu_high <= 1 + 1e-12
    assert result.mfu_low <= result.mfu_high
    assert result.time_lower <= result.time_upper


# --- inference ------------------------------------------------------------------------------------


def test_decode_at_batch_one_reads_the_weights(llama):
    """Memory-bound: about the weights' bytes over HBM bandwidth, plus the KV cache and the activations' share."""
    step = decode_time(llama, "h100-sxm", batch=1, context=4096)
    weights = 2 * llama.evaluate("params")
    cache = llama.evaluate("kv_cache", batch=1, seq=1, past=4096)
    assert step.bound == "memory"
    assert step.time_lower >= (weights + cache) / HBM
    assert step.time_lower == pytest.approx(weights / HBM, rel=0.1)
    assert step.t_math == pytest.approx(llama.evaluate("forward_flops", batch=1, seq=1, past=4096) / PEAK)


def test_ttft_grows_with_the_prompt(llama):
    times = [prefill_time(llama, "h100-sxm", batch=1, prompt=p).time_lower for p in (128, 512, 2048, 8192)]
    assert times == sorted(times) and len(set(times)) == 4


def test_request_sums_prefill_and_decode_steps(small):
    result = inference_time(small, "h100-sxm", batch=2, prompt=100, output=4)
    steps = [decode_time(small, "h100-sxm", batch=2, context=c) for c in (100, 101, 102)]
    assert result.ttft_lower == prefill_time(small, "h100-sxm", batch=2, prompt=100).time_lower
    assert result.tpot_lower == pytest.approx(sum(s.time_lower for s in steps) / 3, rel=1e-9)
    assert result.tpot_upper == pytest.approx(sum(s.time_upper for s in steps) / 3, rel=1e-9)
    assert result.tokens_per_s_high == pytest.approx(2 * 4 / (result.ttft_lower + 3 * result.tpot_lower))


def test_tensor_parallel_decode_halves_the_weights_and_adds_comm(llama):
    one = decode_time(llama, "h100-sxm", batch=1, context=1024)
    two = decode_time(llama, "h100-sxm", batch=1, context=1024, tensor=2)
    assert two.t_comm > 0 and two.link == "scale_up"
    assert two.bytes < Fraction(one.bytes, 2) * Fraction(11, 10)
    assert two.flops * 2 == one.flops


def test_tensor_parallel_decode_comm_takes_the_faster_algorithm(llama):
    """Eight ranks over NVLink: a tree all-reduce (6 latencies) beats the ring's 14 on small messages.

    Per layer two all-reduces of b·d bf16 values, one more for the embedding, and an
    all-gather (ring: 7 latencies) of the last position's b·V logits.
    """
    alpha, batch = 5e-6, 4
    step = decode_time(llama, "h100-sxm", batch=batch, context=256, tensor=8)
    values = llama.values
    hidden, logits = 2 * batch * values["d_model"], 2 * batch * values["vocab"]
    all_reduce = 6 * alpha + 2 * 7 / 8 * hidden / NVLINK
    all_gather = 7 * alpha + 7 / 8 * logits / NVLINK
    assert step.t_comm == pytest.approx((2 * values["n_layers"] + 1) * all_reduce + all_gather, rel=1e-12)


def test_every_result_names_its_assumptions(llama):
    train = training_time(llama, "h100-sxm", global_batch=16, micro_batch=1, seq=128, layout=Layout(data=2, tensor=2, pipeline=2))
    for key in ("peak", "overlap", "links", "latency", "collective_algorithm", "node_size", "balance", "mfu"):
        assert key in train.assumptions
    serve = inference_time(llama, "h100-sxm", batch=1, prompt=16, output=2, tensor=2)
    for key in ("peak", "overlap", "link", "tpot", "tensor_parallel"):
        assert key in serve.assumptions
    json.dumps(train.as_dict()), json.dumps(serve.as_dict())


# --- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda m: training_time(m, "h100-sxm", global_batch=7, micro_batch=2, seq=8),
        lambda m: training_time(m, "h100-sxm", global_batch=8, micro_batch=1, seq=8, recompute="some"),
        lambda m: training_time(m, "h100-sxm", global_batch=8, micro_batch=1, seq=8, layout=Layout(tensor=3)),
        lambda m: training_time(m, "h100-sxm", global_batch=8, micro_batch=1, seq=8, layout=Layout(data=2, expert=4)),
        lambda m: training_time(m, "no-such-gpu", global_batch=8, micro_batch=1, seq=8),
        lambda m: training_time(m, "h100-sxm", global_batch=8, micro_batch=1, seq=8, dtype="fp4"),
        lambda m: inference_time(m, "h100-sxm", batch=1, prompt=8, output=0),
        lambda m: inference_time(m, "h100-sxm", batch=1, prompt=8, output=2, tensor=16),
    ],
)
def test_bad_input_is_one_line_symform_error(llama, call):
    with pytest.raises(symform.SymformError) as caught:
        call(llama)
    assert "\n" not in str(caught.value)


# --- the command line -------------------------------------------------------------------------------


def test_cli_train_json(capsys, small):
    code = main(["time", "llama-3.2-1b", "--gpu", "h100-sxm", "--gpus", "4", "--train", "--global-batch", "8", "--micro-batch", "1", "--seq", "256", "--tp", "2", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["devices"] == 4 and out["layout"]["data"] == 2 and out["layout"]["tensor"] == 2
    assert out["time_lower_s"] <= out["time_upper_s"]
    assert out["mfu"]["high"] <= out["hfu"]["high"] <= 1
    assert set(out["comm"]) == {"tensor", "data"}


def test_cli_infer_table(capsys):
    code = main(["time", "llama-3-8b", "--gpu", "h100-sxm", "--infer", "--batch", "1", "--prompt", "512", "--output", "8"])
    assert code == 0
    out = capsys.readouterr().out
    assert "TTFT" in out and "TPOT" in out and "tokens/s" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--train", "--global-batch", "8", "--seq", "16", "--gpus", "6", "--tp", "4"],
        ["--train", "--global-batch", "8"],
        ["--train", "--global-batch", "8", "--seq", "16", "--prompt", "4"],
        ["--infer", "--batch", "1", "--prompt", "4"],
        ["--infer", "--batch", "1", "--prompt", "4", "--output", "2", "--gpus", "2", "--tp", "4"],
        ["--infer", "--train", "--batch", "1"],
        ["--train", "--global-batch", "0", "--seq", "16"],
        ["--train", "--global-batch", "8", "--seq", "16", "--recompute", "half"],
    ],
)
def test_cli_bad_input_exits_2_with_one_line(capsys, argv):
    assert main(["time", "llama-3.2-1b", "--gpu", "h100-sxm", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("symform: error:")


# --- groups that leave the node with several ranks in each -------------------------------------

NIC = H100["interconnect"]["scale_out"]["unidirectional_bytes_per_s"]


def test_a_data_group_with_eight_ranks_per_node_pools_their_nics(small):
    """64 data ranks over 8 nodes: a ring or tree crosses each node's boundary once per channel, and the node's 8
    ranks cross through 8 NICs, so the all-reduce runs at 8 NICs' bandwidth (400 GB/s), under NVLink's 450 GB/s."""
    result = training_time(small, "h100-sxm", global_batch=64, micro_batch=1, seq=256, layout=Layout(data=64))
    data = result.comm["data"]
    assert (data.link, data.ranks, data.per_node) == ("scale_out", 64, 8)
    n = 2 * small.evaluate("params")
    ring = 2 * 63 * 10e-6 + 2 * 63 / 64 * n / (8 * NIC)
    tree = 2 * 6 * 10e-6 + 2 * 63 / 64 * n / (8 * NIC)  # double binary trees: 2·⌈log₂ p⌉ steps, the ring's bytes
    assert data.seconds == pytest.approx(min(ring, tree), rel=1e-12)
    assert result.assumptions["links"]["data"]["ranks_per_node"] == 8


def test_one_rank_per_node_keeps_its_own_nic(small):
    """Tensor 8 fills each node: the data group has one rank per node and its NIC alone (NVIDIA/nccl#569: 8 DGX-2
    ranks take 363 ms for a 1.6 GB all-reduce at one rank per node, 173 ms at two)."""
    one = training_time(small, "h100-sxm", global_batch=8, micro_batch=1, seq=256, layout=Layout(data=4, tensor=8)).comm["data"]
    two = training_time(small, "h100-sxm", global_batch=8, micro_batch=1, seq=256, layout=Layout(data=8, tensor=4)).comm["data"]
    assert one.per_node == 1 and two.per_node == 2
    # the bytes over one NIC, or over two, plus a few tens of microseconds of latency
    assert one.seconds == pytest.approx(one.bytes_per_rank / NIC, abs=1e-4)
    assert two.seconds == pytest.approx(two.bytes_per_rank / (2 * NIC), abs=1e-4)


def test_a_pooled_ring_is_capped_by_the_nodes_fabric():
    """72 GB200s in one rack with 36 data ranks beyond it: 36 NICs would carry more than NVLink, so NVLink bounds it."""
    from symform.analysis.time.step_model import group_bandwidth, placement

    place = placement("gb200-nvl72")
    nvlink = _device_file("gb200")["interconnect"]["scale_up"]["unidirectional_bytes_per_s"]
    assert group_bandwidth(place, "scale_out", "all_gather", 64, 36) == nvlink
    assert group_bandwidth(place, "scale_out", "all_gather", 64, 1) == 50e9
    assert group_bandwidth(place, "scale_out", "send_recv", 64, 36) == 50e9  # a point-to-point send has one NIC


def test_an_all_to_all_sends_only_other_nodes_shares_over_the_network():
    """32 expert ranks, 8 per node: of each rank's 31 outgoing shares 24 leave the node over its NIC while 7 go
    over NVLink at once; the NIC's part is the longer."""
    from symform.analysis.time.step_model import group_bandwidth, placement

    rate = group_bandwidth(placement("h100-sxm"), "scale_out", "all_to_all", 32, 8)
    assert rate == pytest.approx(NIC * 31 / 24, rel=1e-12)
    assert group_bandwidth(placement("h100-sxm"), "scale_out", "all_to_all", 32, 1) == NIC


def test_a_tensor_group_beyond_a_node_pools_its_nics_too(small):
    """Tensor 8 over two nodes of 4: the all-reduces are rings over 4 ranks in each node, as a data group's."""
    result = training_time(small, "h100-sxm", global_batch=1, micro_batch=1, seq=256, layout=Layout(tensor=8), node_size=4)
    assert (result.comm["tensor"].link, result.comm["tensor"].per_node) == ("scale_out", 4)


def test_the_node_with_fewest_ranks_sets_the_pace_and_sends_pool_nothing(small):
    """Ranks 0, 3, 6 and 9 in nodes of 8: the second node holds one; a pipeline's point-to-point sends use one NIC."""
    from symform.analysis.time.step_model import placement

    assert placement("h100-sxm").per_node(12, 4) == 1
    assert placement("h100-sxm").per_node(64, 8) == 1 and placement("h100-sxm").per_node(64, 32) == 4
    result = training_time(small, "h100-sxm", global_batch=16, micro_batch=1, seq=256, layout=Layout(tensor=2, pipeline=8))
    assert result.comm["pipeline"].per_node == 1
