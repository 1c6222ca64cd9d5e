"""Routed experts' GEMMs as grouped GEMMs, and the expert all-to-all, in symform's point estimates.

Expected values are derived by hand in each test from the model's published config (Qwen3-30B-A3B:
d_model 2048, 48 layers, 128 experts of inner size 768, 8 per token) and the factors the test sets
itself, never from symform.analysis.time.grouped_gemm.
"""

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import symform
from symform.analysis.time import estimate, grouped_gemm, timing
from symform.analysis.parallel import parallel_comm
from symform.analysis.memory.settings import Layout
from symform.engine.errors import SymformError

D_MODEL, LAYERS, EXPERTS, TOP_K, D_EXPERT = 2048, 48, 128, 8, 768


@pytest.fixture(scope="module")
def qwen():
    return symform.load("qwen3-30b-a3b")


def _expert_kernel(model, seq: int, micro_batch: int = 1, leaf: str = "gate_proj"):
    work = estimate.kernels(model, "train", workload={"batch": micro_batch, "seq": seq})
    return next(k for k in work if k.path.endswith(f"experts/{leaf}")), work


def _rows_efficiency(**given):
    """The H100's file under the rows model with the test's own factors."""
    return replace(estimate.efficiency("h100-sxm"), gemm_model="rows", tile_m=128, **given)


def test_routed_projections_know_their_experts_and_nothing_else_does(qwen):
    gate, work = _expert_kernel(qwen, seq=4096)
    assert gate.routed == (EXPERTS, TOP_K)
    assert all(k.routed is None for k in work if "/experts/" not in k.path)
    dense = estimate.kernels(symform.load("llama-3.2-1b"), "train", workload={"batch": 1, "seq": 128})
    assert all(k.routed is None for k in dense)


def test_tokens_per_expert_by_hand(qwen):
    """4,096 tokens on each of 8 expert-parallel ranks, 8 experts each: 4096·8·8 pairs over 128 experts = 2,048 per
    expert, 128 / 8 = 16 experts on each rank; without expert parallelism 4096·8 / 128 = 256 on all 128."""
    gate, _ = _expert_kernel(qwen, seq=4096)
    spread = grouped_gemm.at_expert_degree([gate], 8)[0]
    assert grouped_gemm.tokens_per_expert(spread) == 2048 and grouped_gemm.local_experts(spread) == 16
    alone = grouped_gemm.at_expert_degree([gate], 1)[0]
    assert grouped_gemm.tokens_per_expert(alone) == 256 and grouped_gemm.local_experts(alone) == 128


def test_grouped_fraction_by_hand(qwen):
    """Each call does 2·tokens·top_k·d·d_e FLOPs (forward, and the same for each gradient); 2,048 rows per expert
    fill whole 128-row tiles, so the rate is sustained × F / (F + half_flops); at 8 tokens per expert
    (128 tokens, no expert parallelism) each expert runs as a skinny kernel: sustained × F / (F + half·7/127)."""
    eff = _rows_efficiency(gemm_sustained=0.5, half_flops=1e10)
    gate, _ = _expert_kernel(qwen, seq=4096)
    spread = grouped_gemm.at_expert_degree([gate], 8)[0]
    flops = 2 * 4096 * TOP_K * D_MODEL * D_EXPERT
    assert spread.flops / spread.calls == pytest.approx(flops)
    assert grouped_gemm.grouped_fraction(eff, spread) == pytest.approx(0.5 * flops / (flops + 1e10))
    small = grouped_gemm.at_expert_degree([_expert_kernel(qwen, seq=128)[0]], 1)[0]
    flops = 2 * 128 * TOP_K * D_MODEL * D_EXPERT
    assert grouped_gemm.grouped_fraction(eff, small) == pytest.approx(0.5 * flops / (flops + 1e10 * 7 / 127))


def test_each_local_expert_adds_its_time_to_every_call(qwen):
    """16 local experts × 3 calls (forward and both gradients) × 48 layers × expert_s; the dense GEMMs pay none."""
    eff = _rows_efficiency(gemm_sustained=0.5, half_flops=0.0, expert_s=1e-5)
    gate, work = _expert_kernel(qwen, seq=4096)
    spread = grouped_gemm.at_expert_degree([gate], 8)[0]
    assert grouped_gemm.expert_seconds(eff, spread) == pytest.approx(1e-5 * 16 * 3 * LAYERS)
    peak, hbm = 989.4e12, 3.35e12
    compute, _, _ = estimate.kernel_parts(spread, peak, hbm, eff, (1.0, frozenset()), 128)
    assert compute == pytest.approx(spread.flops / (peak * 0.5) + 1e-5 * 16 * 3 * LAYERS)
    q_proj = next(k for k in work if k.path.endswith("attn/q_proj"))
    assert estimate.kernel_parts(q_proj, peak, hbm, eff, (1.0, frozenset()), 128)[0] == pytest.approx(q_proj.flops / (peak * 0.5))


def test_only_an_fp8_step_pays_the_time_per_local_expert(qwen):
    """Transformer Engine's GroupedLinear quantises each expert's weight in a call of its own under FP8 and uses a
    BF16 weight as it is: a BF16 step's estimate does not move with expert_s; an FP8 one's compute grows by
    16 local experts × 3 calls × 48 layers × 3 projections (gate, up, down) × expert_s per micro-batch, 8 of them."""
    eff = estimate.efficiency("h100-sxm")
    step = dict(global_batch=64, micro_batch=1, seq=4096, layout=Layout(data=8, expert=8))
    found = {(dtype, s): estimate.training_estimate(qwen, "h100-sxm", dtype=dtype, efficiency_data=replace(eff, expert_s=s), **step)
             for dtype in ("bf16", "fp8") for s in (0.0, 1e-3)}
    assert found["bf16", 0.0].compute_s == found["bf16", 1e-3].compute_s
    assert found["fp8", 1e-3].compute_s - found["fp8", 0.0].compute_s == pytest.approx(1e-3 * 16 * 3 * LAYERS * 3 * 8)


def test_serving_keeps_routed_gemms_as_one_gemm(qwen):
    """expert_s is a training framework's (fitted on training runs): a served request's estimate does not move with it."""
    served = dict(batch=8, prompt=512, output=16)
    eff = estimate.efficiency("h100-sxm")
    found = [estimate.serving_estimate(qwen, "h100-sxm", efficiency_data=replace(eff, expert_s=s), **served) for s in (0.0, 1e-3)]
    assert found[0].ttft.estimate == found[1].ttft.estimate and found[0].tpot.estimate == found[1].tpot.estimate


def test_all_to_all_bytes_per_layer_by_hand():
    """Dispatch and combine forward, their gradients backward: 4 all-to-alls of tokens·top_k·d·2 bytes each."""
    layer = parallel_comm.expert_parallel_layer(tokens=4096, top_k=TOP_K, d_model=D_MODEL, bytes_per_element=2, expert=8)
    assert len(layer) == 4 and all(t.collective == "all_to_all" and t.nbytes == 4096 * 8 * 2048 * 2 for t in layer)
    assert sorted(t.phase for t in layer) == ["backward", "backward", "forward", "forward"]


@pytest.mark.parametrize(("gpu", "expert", "link"), [("h100-sxm", 8, "scale_up"), ("h100-sxm", 16, "scale_out"), ("gb200-nvl72", 64, "scale_up")])
def test_the_all_to_all_runs_on_the_groups_real_link(qwen, gpu, expert, link):
    """Eight H100s share a node's NVLink; sixteen leave it; a GB200 NVL72's 72 GPUs are one NVLink domain."""
    comm = timing.expert_comm(qwen, timing.placement(gpu), Layout(data=expert, expert=expert), 1, 1, 4096, "none")
    assert comm.link == link and comm.ranks == expert


def test_the_all_to_all_shows_unless_overlapped_and_then_only_what_outlasts_the_compute(qwen):
    step = dict(global_batch=64, micro_batch=1, seq=4096, layout=Layout(data=8, expert=8), dtype="bf16")
    exposed = estimate.training_estimate(qwen, "h100-sxm", **step)  # Megatron-Core's default
    assert exposed.exposed_comm_s["expert"] == exposed.comm_s["expert"]
    found = estimate.training_estimate(qwen, "h100-sxm", ep_comm_overlap="dualpipe", **step)
    assert found.exposed_comm_s["expert"] == pytest.approx(max(0.0, found.comm_s["expert"] - found.compute_s))
    beyond = estimate.training_estimate(qwen, "h100-sxm", **(step | {"layout": Layout(data=64, expert=64), "global_batch": 64}))
    assert beyond.comm_s["expert"] > found.comm_s["expert"]  # 64 ranks leave the node for the slower network


def test_a_mixture_of_experts_case_names_its_calibration(qwen):
    found = estimate.training_estimate(qwen, "h100-sxm", global_batch=64, micro_batch=1, seq=4096, layout=Layout(data=8, expert=8))
    assert any("MoE" in r and "h100-sxm" in r for r in found.extrapolating)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gpu=st.sampled_from(("h100-sxm", "b200", "a100-sxm-80gb")), expert=st.sampled_from((1, 2, 4, 8, 16)), micro_batch=st.sampled_from((1, 2)),
       seq=st.sampled_from((128, 1024, 4096)), dtype=st.sampled_from(("bf16", "fp8")), pipeline=st.sampled_from((1, 2)))
def test_bounds_bracket_a_mixture_of_experts_step_at_any_expert_degree(qwen, gpu, expert, micro_batch, seq, dtype, pipeline):
    layout = Layout(data=16, expert=expert, pipeline=pipeline)
    setup = dict(global_batch=micro_batch * 16 * 4, micro_batch=micro_batch, seq=seq, layout=layout, dtype=dtype)
    try:
        bounds = timing.training_time(qwen, gpu, flash=True, **setup)
    except SymformError:
        assume(False)  # a device without fp8
    found = estimate.training_estimate(qwen, gpu, bounds=bounds, **setup)
    assert bounds.time_lower <= found.step.estimate * (1 + 1e-9) <= found.step.ceiling * (1 + 1e-9)


def test_an_expert_repeat_that_reads_a_convention_is_bound_to_the_models_value(capsys):
    """Llama 4's routed experts repeat by a convention (every_expert: transformers' eager module runs every expert on
    every token); the grouped GEMMs read the repeat at the model's value instead of refusing for want of one."""
    from checks import run

    for workload in (["--infer", "--batch", "4", "--prompt", "512", "--output", "64"], ["--train", "--gpus", "8", "--micro-batch", "1", "--global-batch", "8", "--seq", "1024"]):
        code, out, err = run(capsys, "time", "llama-4-scout", "--gpu", "h100-sxm", *workload)
        assert code == 0, err
        assert "estimate" in out


def test_with_sequence_parallelism_each_rank_dispatches_its_share_of_the_sequence(qwen):
    """Megatron-Core runs experts beside tensor parallelism only with sequence parallelism, each rank holding seq / TP
    tokens at the router. By hand, per rank: 4 all-to-alls × tokens · top_k · d · 2 bytes × 7/8 leaving the rank ×
    48 layers × 8 micro-batches (64 sequences over 8 data-parallel ranks): 4096 tokens give 180,388,626,432 bytes,
    and under TP 2 with sequence parallelism 2048 tokens give half."""
    step = dict(global_batch=64, micro_batch=1, seq=4096, dtype="bf16", flash=True)
    sent = {sp: timing.training_time(qwen, "h100-sxm", layout=Layout(data=8, tensor=2, expert=8, sequence=sp), **step).comm["expert"].bytes_per_rank for sp in (False, True)}
    whole = 4 * 4096 * TOP_K * D_MODEL * 2 * 7 / 8 * LAYERS * 8
    assert sent[False] == pytest.approx(whole) and whole == 180_388_626_432
    assert sent[True] == pytest.approx(whole / 2)
    with pytest.raises(SymformError, match="do not split evenly"):  # 4,097 tokens over 2 ranks: no rank's share is whole
        timing.training_time(qwen, "h100-sxm", layout=Layout(data=8, tensor=2, expert=8, sequence=True), **(step | {"seq": 4097}))
