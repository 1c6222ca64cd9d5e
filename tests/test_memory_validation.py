"""Predicted peak memory against the peaks published runs measured (hardware/measured, kind measured_memory):
the measured figures are the sources' own numbers; symform's predictions must stay close and say every run fits."""

import pytest

from symform.analysis.time.memory_validation import median_abs_error, memory_cases, memory_runs, memory_sources


def test_median_error_on_measured_peaks_is_within_ten_percent():
    cases = memory_cases()
    assert len(cases) >= 10
    assert median_abs_error(cases) <= 0.10


def test_every_run_that_ran_is_predicted_to_fit_its_device():
    assert [c.run.name for c in memory_cases() if not c.fits] == []


def test_every_measured_peak_names_its_source_and_table():
    sources = memory_sources()
    for run in memory_runs():
        assert sources[run.source]["url"].startswith("https://")
        assert run.setup["table"]


def test_torchtitan_8b_on_8_and_128_gpus_differ_by_the_sharded_states():
    """Table 1 against Table 3 (same model, batch and policy): only FSDP's share of the fp32 parameters, gradients and
    two Adam states changes, 16 bytes × 8,030,261,248 × (1/8 - 1/128) = 15.06e9 bytes; measured 82.4 - 67.0 GiB."""
    by_name = {c.run.name: c for c in memory_cases()}
    eight, many = by_name["tt-llama3.1-8b-8xh100-fsdp"], by_name["tt-llama3.1-8b-128xh100-fsdp"]
    states = 16 * 8_030_261_248 * (1 / 8 - 1 / 128)
    reserve = 1 / 50  # the allocator's reserve on top (formulas/frameworks/torchtitan.toml)
    assert abs((eight.predicted_bytes - many.predicted_bytes) - states * (1 + reserve)) < 1e3
    assert abs(states / 2**30 - (82.4 - 67.0)) / (82.4 - 67.0) < 0.10


# --- the timed runs of docs/validation.md: each ran, so each must fit its devices --------------------------------


def test_every_timed_run_fits_the_devices_it_ran_on():
    """A published training run that ran fits its devices: symform's memory under the run's framework, layout,
    micro-batch and precision must say so for every one (a run predicted not to fit is a miss of the memory model)."""
    from symform.analysis.time.memory_validation import timed_run_fits

    fits = timed_run_fits()
    assert len(fits) >= 41
    assert [f.run.name for f in fits if not f.fits] == []


def test_a_timed_run_keeps_in_flight_what_its_schedule_keeps_at_its_own_micro_batch_count():
    """Megatron-Bridge 25.11's Llama 3 70B on 64 H100 (pipeline 8 × 5 chunks, 128 sequences on 2 data-parallel ranks:
    64 micro-batches): the interleaved schedule's first stage holds min(2·7 + 4·8 + 1, 5·64) = 47 chunks, 47/5 stages'
    worth of activations, where the same run cut to 8 micro-batches holds min(47, 5·8) = 40 chunks, 8 stages' worth.
    The peak is the larger by 7/5 stages' activations, never the default of as many micro-batches as stages: with c a
    chunk's activations, 8, 9 and 10 micro-batches hold 40c, 45c and min(47, 50)c = 47c, so the steps from 8 to 64
    and from 8 to 9 micro-batches stand as 7 : 5, and 10 already holds what 64 hold."""
    from dataclasses import replace

    from symform.analysis.time import measured_runs
    from symform.analysis.time.memory_validation import timed_run_fit

    run = next(r for r in measured_runs.runs() if r.name == "mb-h100-llama3-70b-fp8")
    peak = {n: timed_run_fit(replace(run, setup=run.setup | {"global_batch": 2 * n})).total_bytes for n in (8, 9, 10)}
    assert timed_run_fit(run).total_bytes == pytest.approx(peak[10], rel=1e-12)
    assert (peak[10] - peak[8]) * 5 == pytest.approx((peak[9] - peak[8]) * 7, rel=1e-12)
    assert peak[9] - peak[8] > 0


def test_gpt_oss_120b_runs_take_the_layouts_and_dtypes_their_recipes_ran():
    """Megatron-Bridge 25.11's GPT-OSS 120B recipes (gpt_oss_workload_base_configs.py at the table's commit): H100
    micro-batch 1 (the table's MBS 4 with GA 2 on 16 data-parallel ranks would be 1,024 sequences, not its 512),
    B200 expert parallelism 64. NeMo Automodel's MoE benchmarks build their parameters in bf16 and train them with
    torch.optim.Adam: 2 + 2 + 2·2 = 8 bytes a parameter, no fp32 master copy."""
    from symform.analysis.time import measured_runs

    runs = {run.name: run.setup for run in measured_runs.runs()}
    assert runs["mb-h100-gpt-oss-120b"]["micro_batch"] * (64 // 4) * 32 == runs["mb-h100-gpt-oss-120b"]["global_batch"]
    assert runs["mb-b200-gpt-oss-120b"]["expert"] == 64
    assert all(setup.get("precision") == "bf16" for name, setup in runs.items() if name.startswith("am-"))


def test_llm_foundry_keeps_the_bf16_logits_and_one_gradient_of_them():
    """flash-attn's fused cross-entropy (llm-foundry's default loss) keeps the logits as they are plus one fp32
    log-sum-exp per row, and its backward writes one gradient of the logits in their dtype. By hand, for b·s rows and
    V classes in bf16: kept 2·b·s·V + 4·b·s + 4 (the count) + 8·b·s (int64 targets); backward 2·b·s·V."""
    from symform.analysis.memory.settings import Layout
    from symform.analysis.memory.memory import Training, training_memory
    from symform.engine.graph.model import Model

    model = Model.from_config({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 1000, "n_positions": 128, "embd_pdrop": 0, "attn_pdrop": 0, "resid_pdrop": 0})
    b, s, v = 3, 128, 1000
    report = training_memory(model, batch=b, seq=s, setup=Training(layout=Layout(), framework="llm-foundry"))
    assert report.activations_by_component["loss"] == 2 * b * s * v + 4 * b * s + 4 + 8 * b * s
    assert report.values["backward_peak"] == 2 * b * s * v
    torch_loss = training_memory(model, batch=b, seq=s, setup=Training(layout=Layout(), framework="torchtitan"))
    assert torch_loss.activations_by_component["loss"] > 4 * b * s * v  # fp32 log-probabilities: what the fused loss avoids


def test_megatron_fsdp_shards_the_fp32_gradient_buffer_over_the_data_ranks():
    """Megatron-Core's fp32 main_grad buffer beyond the bf16 gradients, (4 - 2) bytes per parameter: whole on every
    rank under DDP and the distributed optimizer, one data-parallel shard of it under Megatron-FSDP (--zero 3)."""
    from symform.analysis.memory.settings import Layout
    from symform.analysis.memory.memory import Training, training_memory
    from symform.engine.graph.model import Model

    model = Model.load("qwen3-0.6b")
    params = model.evaluate("params")
    whole = training_memory(model, batch=1, seq=256, setup=Training(layout=Layout(data=8, distributed_optimizer=True), framework="megatron"))
    sharded = training_memory(model, batch=1, seq=256, setup=Training(layout=Layout(data=8, zero=3), framework="megatron"))
    assert whole.values["fp32_grad_buffer"] == 2 * params
    assert sharded.values["fp32_grad_buffer"] == 2 * params / 8


def test_megatron_bridge_runs_keep_their_gradient_buffers_in_bf16_as_their_recipes_set():
    """Every Megatron-Bridge performance recipe of 25.09 and 25.11 sets grad_reduce_in_fp32 = False; each run says so.
    Megatron-Bridge 25.11's Llama 3 8B on 8 H100s (Megatron-FSDP over 8 ranks, 8,030,261,248 parameters) holds an
    eighth of a bf16 buffer, 2 bytes a parameter, where fp32 ones would add 2 more and the allocator's 1/50 on them:
    2 × 8,030,261,248 / 8 × 51/50 bytes."""
    from dataclasses import replace

    from symform.analysis.time import measured_runs
    from symform.analysis.time.memory_validation import timed_run_fit

    bridge = [r for r in measured_runs.runs() if "Megatron-Bridge" in measured_runs.sources()[r.source]["title"]]
    assert len(bridge) >= 30 and all(r.setup["grad_reduce_fp32"] is False for r in bridge)
    run = next(r for r in bridge if r.name == "mb-h100-llama3-8b-fp8")
    fp32 = timed_run_fit(replace(run, setup=run.setup | {"grad_reduce_fp32": True}))
    assert fp32.total_bytes - timed_run_fit(run).total_bytes == pytest.approx(2 * 8_030_261_248 / 8 * 51 / 50, rel=1e-12)
