"""Serving as engines run it: the paged KV pool against hand arithmetic from the config, engine steps
against the validated serving estimate, speculative decoding's limits, the knee, the planner's choice
meeting its targets and being the largest that does, and the CLI's refusals."""

import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from checks import run
from symform import ConfigError, load
from symform.analysis.time import estimate
from symform.analysis.serving import serving
from symform.analysis.serving import kv_pool
from symform.analysis.serving.serving import Setup
from symform.analysis.serving.kv_pool import Lengths, engine_defaults
from symform.analysis.plans.serving_planner import Targets, best_concurrency, plan_serving

MODEL = "llama-3.2-1b"  # 16 layers, 8 KV heads of 64, bf16: small enough to build quickly
GPU = "h100-sxm"


@pytest.fixture(scope="module")
def model():
    return load(MODEL)


@pytest.fixture(scope="module")
def steps(model):
    return serving.StepModel(model, GPU)


# --- speculative decoding -----------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(alpha=st.floats(0, 1), k=st.integers(0, 12))
def test_expected_tokens_is_the_geometric_sum_of_acceptances(alpha, k):
    # Leviathan et al. 2023: token i + 1 is kept when all i before it were accepted; E = Σ_{i=0..k} α^i
    assert serving.expected_tokens(alpha, k) == pytest.approx(sum(alpha**i for i in range(k + 1)), rel=1e-9, abs=1e-12)
    assert 1 <= serving.expected_tokens(alpha, k) <= k + 1 + 1e-12


@settings(max_examples=20, deadline=None)
@given(k=st.integers(0, 16))
def test_no_acceptance_is_one_token_and_full_acceptance_is_k_plus_one(k):
    assert serving.expected_tokens(0.0, k) == 1
    assert serving.expected_tokens(1.0, k) == k + 1


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 64), past=st.integers(1, 4000), alpha=st.floats(0, 1))
def test_speculation_without_drafts_is_plain_decoding(steps, batch, past, alpha):
    plain = serving.decode_seconds(steps, batch, past)
    spec = serving.Speculation(0, alpha, "free")
    assert serving.decode_seconds(steps, batch, past, spec) == plain


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 64), past=st.integers(1, 4000), k=st.integers(1, 8))
def test_free_draft_accepted_always_gives_k_plus_one_tokens_per_pass(steps, batch, past, k):
    seconds, tokens = serving.decode_seconds(steps, batch, past, serving.Speculation(k, 1.0, "free"))
    assert tokens == k + 1
    assert seconds == steps.step(decoding=batch, past=past, queries=k + 1)
    # rejected drafts still cost the wider verification: never faster than plain decoding
    rejected, one = serving.decode_seconds(steps, batch, past, serving.Speculation(k, 0.0, "free"))
    assert one == 1 and rejected >= steps.step(decoding=batch, past=past)


def test_mtp_drafts_only_for_a_model_that_declares_them(model):
    with pytest.raises(ConfigError, match="multi-token-prediction"):
        serving.speculation(model, GPU, k=1, alpha=0.8, draft="mtp")


def test_a_draft_step_costs_time_and_speeds_decoding_when_accepted(model):
    spec = serving.speculation(model, GPU, k=2, alpha=0.9, draft="eagle")
    steps = serving.StepModel(model, GPU)
    assert spec.draft_step(1, 1000) > 0
    plain, _ = serving.decode_seconds(steps, 1, 1000)
    seconds, tokens = serving.decode_seconds(steps, 1, 1000, spec)
    assert seconds / tokens < plain


# --- engine steps ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch,prompt,output,tensor", [(1, 512, 64, 1), (16, 2048, 130, 2)])
def test_steps_equal_the_validated_serving_estimate(model, batch, prompt, output, tensor):
    """The composed engine step equals symform.analysis.time.estimate's TPOT (docs/validation.md) for the same decode."""
    steps = serving.StepModel(model, GPU, tensor=tensor)
    found = estimate.serving_estimate(model, GPU, batch=batch, prompt=prompt, output=output, tensor=tensor)
    assert steps.step(decoding=batch, past=prompt + (output - 2) / 2) == pytest.approx(found.tpot.estimate, rel=1e-12)
    assert steps.prefill(prompt) == pytest.approx(estimate.serving_estimate(model, GPU, batch=1, prompt=prompt, output=2, tensor=tensor).ttft.estimate, rel=1e-3)


def test_a_step_reads_the_weights_once_for_all_rows(steps):
    one, many = steps.step(decoding=1, past=100), steps.step(decoding=64, past=100)
    assert one < many < 64 * one


# --- the paged KV pool ------------------------------------------------------------------------------------------


def _kv_bytes_per_token(config_values):
    # keys and values, every layer, every KV head, bf16 (Kwon et al. 2023, sec. 2)
    return 2 * config_values["n_layers"] * config_values["n_kv_heads"] * config_values["d_head"] * 2


@settings(max_examples=10, deadline=None)
@given(prompt=st.integers(1, 3000), output=st.integers(2, 1000), block=st.sampled_from([1, 8, 16, 32]))
def test_pool_holds_whole_blocks_and_the_largest_concurrency(model, prompt, output, block):
    pool = kv_pool.paged_pool(model, GPU, Lengths.fixed(prompt, output), settings=kv_pool.engine(block_tokens=block), step_tokens=2048)
    per_token = _kv_bytes_per_token(model.values)
    tokens = prompt + output
    assert pool.sequence_bytes_max == math.ceil(tokens / block) * block * per_token
    assert pool.waste_bytes_max == (math.ceil(tokens / block) * block - tokens) * per_token
    assert pool.max_concurrency * pool.sequence_bytes_max <= pool.pool_bytes < (pool.max_concurrency + 1) * pool.sequence_bytes_max
    assert pool.steady_concurrency >= pool.max_concurrency
    if block == 1:
        assert pool.fragmentation == 0


def test_pool_is_the_engine_share_less_weights_and_activations(model):
    pool = kv_pool.paged_pool(model, GPU, Lengths.fixed(1000, 200), step_tokens=2048)
    assert pool.usable_bytes == pytest.approx(80 * 2**30 * engine_defaults().utilisation)
    # bf16 weights: 2 bytes × the parameters (tied embedding counted once)
    assert pool.weights_bytes == 2 * model.evaluate("params")
    assert pool.pool_bytes == pytest.approx(pool.usable_bytes - pool.weights_bytes - pool.activations_bytes)


def test_requests_past_the_models_context_are_refused_and_memory_beyond_it_is_named(model):
    limit = model.context_limit.tokens
    with pytest.raises(ConfigError, match="max_position_embeddings"):
        kv_pool.paged_pool(model, GPU, Lengths.fixed(limit, 2))
    pool = kv_pool.paged_pool(model, GPU, Lengths.fixed(1000, 200))
    if pool.memory_tokens > limit:
        assert "reads at most" in pool.context_note()


def test_spread_lengths_need_means_within_their_maxima():
    with pytest.raises(ConfigError, match="mean"):
        Lengths.spread(3000, 2000, 10, 10)
    spread = Lengths.spread(500, 2000, 100, 400)
    assert spread.longest == 2400 and spread.mean_cached == 550


# --- the curve and its knee ----------------------------------------------------------------------------------------


def test_knee_is_the_point_farthest_above_the_chord():
    # normalised: x (0, 0.5, 1), y (0, 0.9, 1): gaps 0, 0.4, 0 → the middle point
    assert serving.knee([1.0, 2.0, 3.0], [0.0, 0.9, 1.0]) == 1
    assert serving.knee([1.0, 2.0, 3.0], [0.0, 0.5, 1.0]) is None  # a straight line has no knee
    assert serving.knee([1.0, 2.0], [0.0, 1.0]) is None


def test_concurrency_grid_doubles_up_to_the_largest():
    assert serving.concurrency_grid(10) == [1, 2, 4, 8, 10]
    assert serving.concurrency_grid(8) == [1, 2, 4, 8]
    assert serving.concurrency_grid(1) == [1]


@pytest.mark.parametrize("mode", serving.MODES)
def test_curve_throughput_and_latency_grow_with_concurrency(model, mode):
    curve = serving.serving_curve(model, GPU, Lengths.fixed(512, 128), mode=mode)
    tpot = [p.tpot_s for p in curve.points]
    assert tpot == sorted(tpot)
    assert curve.points[-1].tokens_per_s > curve.points[0].tokens_per_s
    assert curve.points[-1].concurrency <= curve.pool.max_concurrency
    assert "evidence" in curve.assumptions


def test_disaggregated_first_token_waits_for_its_cache_over_the_link(model):
    replica = serving.Replica(model, GPU, Lengths.fixed(1024, 64), "disaggregated", 1, Setup(kv_link="scale_out"))
    transfer = replica.transfer
    assert transfer.bytes_per_device == 1024 * _kv_bytes_per_token(model.values)
    point = replica.point(8)
    assert point.ttft_s == pytest.approx(replica.prefill_steps.prefill(1024) + transfer.seconds)
    assert point.gpus > 1  # its share of the prefill pool


def test_chunked_budget_caps_the_running_sequences(model):
    lengths = Lengths.fixed(2048, 64)
    steps = serving.StepModel(model, GPU)
    point = serving.chunked_point(steps, lengths, 500, 2048)
    assert point.running == math.floor(2048 / (1 + 2048 / 63))
    assert point.queue_s > 0
    # a prompt far longer than the budget: prefill-bound, fewer than one sequence decoding on average
    long_prompt = serving.chunked_point(steps, Lengths.fixed(60000, 8), 4, 2048)
    assert long_prompt.running < 1 and long_prompt.tokens_per_s > 0


# --- the planner ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plan(model):
    return plan_serving(model, GPU, Lengths.fixed(1024, 128), Targets(0.15, 0.01), modes=("chunked", "disaggregated"), max_tensor=2, rate=50.0)


def test_every_offered_layout_meets_the_targets_and_is_the_largest_that_does(model, plan):
    assert plan.best
    for layout in plan.best:
        assert layout.point.ttft_s <= 0.15 and layout.point.tpot_s <= 0.01
        replica = serving.Replica(model, GPU, plan.lengths, layout.mode, layout.tensor, Setup(), layout.prefill_tensor)
        if layout.point.concurrency < replica.largest:
            assert not plan.targets.met(replica.point(layout.point.concurrency + 1))


def test_the_rate_sets_replicas_and_gpus(plan):
    for layout in plan.best:
        per_replica = layout.point.tokens_per_s / 128
        assert layout.replicas == math.ceil(50 / per_replica)
        assert layout.gpus >= layout.replicas * layout.tensor
    assert [r.gpus for r in plan.best] == sorted(r.gpus for r in plan.best)


def test_steady_admission_takes_more_requests_of_spread_lengths(model):
    lengths = Lengths.spread(300, 4000, 100, 1000)
    longest = serving.Replica(model, GPU, lengths, "continuous", 1, Setup())
    steady = serving.Replica(model, GPU, lengths, "continuous", 1, Setup(admit="steady"))
    assert longest.largest == longest.pool.max_concurrency < steady.largest == steady.pool.steady_concurrency
    with pytest.raises(ConfigError, match="admission"):
        serving.Replica(model, GPU, lengths, "continuous", 1, Setup(admit="all"))


def test_best_concurrency_is_none_when_one_request_misses(model):
    replica = serving.Replica(model, GPU, Lengths.fixed(1024, 128), "chunked", 1, Setup())
    assert best_concurrency(replica, Targets(1e-6, 1e-6)) is None


def test_offline_saturates_every_layout_and_does_no_worse_than_any_latency_target(model, plan):
    """Batch inference (no latency target): each layout runs at the most requests its cache holds, and dropping the
    targets can only raise the best tokens/s per GPU."""
    offline = plan_serving(model, GPU, Lengths.fixed(1024, 128), Targets.offline(), modes=("chunked", "disaggregated"), max_tensor=2)
    assert offline.best and offline.as_dict()["offline"] is True and offline.as_dict()["ttft_max_s"] is None
    for layout in offline.best:
        assert layout.point.concurrency == layout.largest
    assert offline.best[0].point.tokens_per_s_per_gpu >= max(r.point.tokens_per_s_per_gpu for r in plan.best)
    assert "saturated" in offline.assumptions["search"]


def test_offline_and_latency_targets_exclude_each_other_in_one_line(capsys):
    base = ("plan", MODEL, "--serve", "--gpu", GPU, "--prompt", "512", "--output", "64")
    code, _, err = run(capsys, *base, "--offline", "--tpot-max", "50ms")
    assert code == 2 and err.strip() == "symform: error: --offline plans with no latency target; drop --tpot-max or --offline"
    code, _, err = run(capsys, *base)
    assert code == 2 and "--offline for batch inference" in err and len(err.strip().splitlines()) == 1
    code, out, _ = run(capsys, *base, "--offline", "--tp-max", "1", "--mode", "continuous")
    assert code == 0 and "offline: no latency target" in out


# --- the command line -----------------------------------------------------------------------------------------------------


def test_plan_serve_prints_layouts_and_json(capsys):
    argv = ["plan", "--serve", MODEL, "--gpu", GPU, "--prompt", "512", "--output", "64", "--ttft-max", "150ms", "--tpot-max", "10ms", "--mode", "chunked", "--tp-max", "1"]
    code, out, err = run(capsys, *argv, "--curve")
    assert code == 0, err
    assert "chunked, TP 1" in out and "knee" in out and "tokens/s per GPU" in out
    code, out, err = run(capsys, *argv, "--json")
    data = json.loads(out)
    assert data["layouts"][0]["tokens_per_s_per_gpu"] > 0 and data["layouts"][0]["tpot_s"] <= 0.01


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--serve", "--prompt", "512", "--output", "64", "--ttft-max", "1"], "--tpot-max"),
        (["--serve", "--prompt", "512", "--output", "64", "--ttft-max", "1", "--tpot-max", "1", "--seq", "8"], "training option"),
        (["--gpus", "8", "--global-batch", "8", "--seq", "128", "--prompt", "5"], "--serve"),
        (["--gpus", "8"], "--global-batch"),
        (["--serve", "--prompt", "512", "--output", "64", "--ttft-max", "1", "--tpot-max", "1", "--speculate", "2"], "--acceptance"),
        (["--serve", "--prompt", "512", "--output", "64", "--ttft-max", "fast", "--tpot-max", "1"], "duration"),
    ],
)
def test_bad_serving_input_is_one_line_and_status_2(capsys, argv, words):
    code, out, err = run(capsys, "plan", MODEL, "--gpu", GPU, *argv)
    assert code == 2 and words in err and err.count("\n") == 1


def test_engine_defaults_name_their_sources():
    defaults = engine_defaults()
    assert set(defaults.sources) == {"utilisation", "block_tokens", "token_budget"}
    assert all(source and source != "given" for source in defaults.sources.values())
    assert kv_pool.engine(block_tokens=32).sources["block_tokens"] == "given"


def test_plot_writes_the_curves(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    target = tmp_path / "curve.png"
    code, out, err = run(capsys, "plan", "--serve", MODEL, "--gpu", GPU, "--prompt", "512", "--output", "64", "--ttft-max", "150ms", "--tpot-max", "10ms", "--mode", "chunked", "--mode", "continuous", "--tp-max", "1", "--plot", str(target))
    assert code == 0, err
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", ["llama-2-7b-tp1", "llama-2-7b-b384-128-128", "llama-2-7b-ttft-2048"])
def test_the_measured_table_in_the_docs_is_current(name):
    """docs/serving.md publishes the steps' error on each measured serving run; spot-check rows against the code."""
    from pathlib import Path

    from symform.analysis.time import calibration
    from symform.analysis.time import measured_runs

    table = (Path(__file__).resolve().parent.parent / "docs" / "serving.md").read_text(encoding="utf-8")
    row = next(line for line in table.splitlines() if line.startswith(f"| {name} |"))
    shown = float(row.split("|")[5].replace(",", ""))
    run = next(r for r in measured_runs.runs() if r.name == name)
    assert serving.measured_error(run)["predicted"] == pytest.approx(shown, rel=2e-3)


def test_steps_read_the_weights_as_stored(model):
    """fp8 weights: the step reads one byte a weight at the fp8 rate, as symform time --infer's estimate does."""
    steps = serving.StepModel(model, GPU, weight_format="fp8")
    found = estimate.serving_estimate(serving.step_model.at_dtype(model, "fp8"), GPU, batch=8, prompt=512, output=64, dtype="fp8")
    # the format keeps norms and other small leaves at 2 bytes where at_dtype takes every weight at 1
    assert steps.step(decoding=8, past=512 + 31) == pytest.approx(found.tpot.estimate, rel=1e-4)
    assert steps.step(decoding=8, past=543) < serving.StepModel(model, GPU).step(decoding=8, past=543)


def test_an_eagle_head_holds_one_more_layer_of_weights_and_cache(model):
    lengths = Lengths.fixed(1000, 200)
    plain = serving.Replica(model, GPU, lengths, "continuous", 1, Setup())
    eagle = serving.Replica(model, GPU, lengths, "continuous", 1, Setup(k=2, alpha=0.7, draft="eagle"))
    v = model.values
    layer_params = (v["n_heads"] + 2 * v["n_kv_heads"]) * v["d_head"] * v["d_model"] + v["n_heads"] * v["d_head"] * v["d_model"] + 3 * v["d_model"] * v["d_ff"] + 2 * v["d_model"]
    assert eagle.pool.weights_bytes - plain.pool.weights_bytes == 2 * layer_params  # bf16: q, k, v, o, gate, up, down, two norms
    assert eagle.pool.sequence_bytes_max == plain.pool.sequence_bytes_max * (v["n_layers"] + 1) / v["n_layers"]
