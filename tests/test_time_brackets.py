"""The bounds bracket the estimate: floor ≤ estimate ≤ ceiling, for training steps, first tokens and decode steps.

The floor is symform.analysis.time.timing's lower bound (datasheet peaks, everything overlapped, communication at the links'
full bandwidth); the ceiling is every kernel at the device's sustained rates with nothing overlapped. The
estimate overlaps a kernel's compute with its memory traffic and hides some communication, so it must lie
between them whatever the model, the device, the layout and the phase: a property, checked over random ones.
"""

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import symform
from symform.analysis.time.efficiencies import TimeProfile
from symform.analysis.time.estimate import serving_estimate, training_estimate
from symform.analysis.memory.settings import Layout
from symform.analysis.time.timing import training_time
from symform.analysis.time.phase_time import inference_time
from symform.analysis.memory.memory import stored_weights
from symform.engine.errors import SymformError

# dense MHA and GQA, sliding windows, mixtures of experts (Mixtral's 8, Qwen3's 128, DeepSeek's MLA with shared experts)
PRESETS = ("gpt2", "llama-3.2-1b", "qwen3-0.6b", "gemma-2-2b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite")
GPUS = ("a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200", "mi300x")
RELATIVE = 1e-9  # float rounding of the same sums taken in another order
# a framework's time facts (formulas/frameworks [[time.facts]]): none, its overlaps, a release's slowdown, no time per expert
FACTS = (None, TimeProfile("megatron", "25.11", tp_comm_overlap=True, p2p_overlap=True), TimeProfile("megatron", "25.11", step_factor=2.0), TimeProfile("automodel", ep_comm_overlap=True), TimeProfile("megatron", "25.11", ep_comm_overlap=False, step_factor=1.2))


@pytest.fixture(scope="module")
def models():
    return {name: symform.load(name) for name in PRESETS}


def _holds(floor: float, estimate: float, ceiling: float) -> None:
    assert floor <= estimate * (1 + RELATIVE), f"estimate {estimate} below the floor {floor}"
    assert estimate <= ceiling * (1 + RELATIVE), f"estimate {estimate} above the ceiling {ceiling}"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(PRESETS), gpu=st.sampled_from(GPUS), tensor=st.sampled_from((1, 2, 4, 8)), pipeline=st.sampled_from((1, 2, 4)),
    data=st.sampled_from((1, 2, 8)), expert=st.sampled_from((1, 2)), micro_batch=st.sampled_from((1, 2, 4)), microbatches=st.sampled_from((1, 4, 8)),
    seq=st.sampled_from((128, 1024, 4096)), recompute=st.sampled_from(("none", "selective", "full", "saved_ops", "saved_dots")), attention=st.sampled_from(("sdpa", "eager")),
    zero=st.sampled_from((0, 1, 3)), dtype=st.sampled_from(("bf16", "fp8")), schedule=st.sampled_from(("1f1b", "gpipe", "interleaved")),
    chunks=st.sampled_from((1, 2)), sequence=st.booleans(), overlap=st.booleans(), facts=st.sampled_from(FACTS), shift=st.sampled_from((None, 0, 1, 3)),
)
# the estimate hides the tensor-parallel all-gathers under the GEMMs and the all-to-all under the whole step at once:
# a floor that added the two kinds of communication lay above it (0.1133 s against 0.1121 s)
@example(name="mixtral-8x7b", gpu="h100-sxm", tensor=8, pipeline=1, data=2, expert=2, micro_batch=1, microbatches=1, seq=4096, recompute="none", attention="sdpa",
         zero=1, dtype="fp8", schedule="1f1b", chunks=1, sequence=True, overlap=True, facts=FACTS[3], shift=None)
def test_a_training_step_estimate_lies_between_its_floor_and_its_ceiling(models, name, gpu, tensor, pipeline, data, expert, micro_batch, microbatches, seq, recompute, attention, zero, dtype, schedule, chunks, sequence, overlap, facts, shift):
    model = models[name]
    try:
        stages = None if shift is None or pipeline == 1 else _uneven(model.values["n_layers"], pipeline * chunks, shift)
        layout = Layout(data=data, tensor=tensor, pipeline=pipeline, expert=expert if "n_experts" in model.values else 1, zero=zero, schedule=schedule, chunks=chunks, sequence=sequence, pipeline_layout=stages)
        setup = dict(global_batch=micro_batch * data * microbatches, micro_batch=micro_batch, seq=seq, layout=layout, recompute=recompute, dtype=dtype)
        bounds = training_time(model, gpu, flash=attention != "eager", **setup)
    except SymformError:
        assume(False)  # a degree that does not divide the model's sizes, a device without fp8, chunks without a pipeline
    found = training_estimate(model, gpu, attention=attention, bounds=bounds, tp_comm_overlap=overlap and sequence, profile=facts, **setup)
    _holds(bounds.time_lower, found.step.estimate, found.step.ceiling)
    assert found.step.floor <= found.step.low <= found.step.estimate <= found.step.high


def _uneven(layers: int, stages: int, shift: int) -> str:
    """A Megatron-Core layout of ``layers`` over ``stages``, as even as they split, then ``shift`` layers moved from the
    first stage to the last (the embedding first, the loss last)."""
    counts = [layers // stages + (i < layers % stages) for i in range(stages)]
    moved = min(shift, counts[0])
    counts[0] -= moved
    counts[-1] += moved
    return "|".join(("E" if i == 0 else "") + "t" * n + ("L" if i == stages - 1 else "") for i, n in enumerate(counts))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(PRESETS), gpu=st.sampled_from(GPUS), tensor=st.sampled_from((1, 2, 4, 8)), batch=st.sampled_from((1, 3, 16, 64, 512)),
    prompt=st.sampled_from((1, 128, 2048)), output=st.sampled_from((1, 2, 200)), attention=st.sampled_from(("sdpa", "eager", "fused_per_head")),
    dtype=st.sampled_from(("bf16", "fp8")), weight_format=st.sampled_from((None, "awq-int4", "int8", "nf4")),
)
def test_a_served_request_estimate_lies_between_its_floor_and_its_ceiling(models, name, gpu, tensor, batch, prompt, output, attention, dtype, weight_format):
    """The first token (prefill) and the mean decode step (TPOT), each between the bounds, and the band above the
    floor, whatever the weights' storage."""
    model = models[name]
    setup = dict(batch=batch, prompt=prompt, output=output, tensor=tensor, dtype=dtype)
    try:
        _, weight_bytes = stored_weights(model, weight_format, conventions={})
        bounds = inference_time(model, gpu, flash=attention != "eager", grouped=attention != "fused_per_head", weight_bytes=weight_bytes, **setup)
    except SymformError:
        assume(False)
    found = serving_estimate(model, gpu, attention=attention, weight_bytes=weight_bytes, bounds=bounds, **setup)
    _holds(bounds.ttft_lower, found.ttft.estimate, found.ttft.ceiling)
    _holds(bounds.tpot_lower, found.tpot.estimate, found.tpot.ceiling)
    for band in (found.ttft, found.tpot, found.total):
        assert band.floor <= band.low <= band.estimate <= band.high


@pytest.mark.parametrize("weight_format", ["awq-int4", "int8", "fp8"])
def test_a_served_estimate_reads_the_weights_as_stored(models, weight_format):
    """One decode step at batch 1 reads little but the weights: whatever their storage, the estimate stands to its
    floor as the bf16 model's does (the memory bandwidth's sustained fraction). An estimate that read the weights at
    the model's own width, where the floor reads them as stored, stood 3.8 times its floor under int4."""
    model, setup = models["llama-3.2-1b"], dict(batch=1, prompt=16, output=32)
    ratios = []
    for chosen in (None, weight_format):
        _, weight_bytes = stored_weights(model, chosen, conventions={})
        bounds = inference_time(model, "h100-sxm", flash=True, weight_bytes=weight_bytes, **setup)
        found = serving_estimate(model, "h100-sxm", weight_bytes=weight_bytes, bounds=bounds, **setup)
        ratios.append(found.tpot.estimate / bounds.tpot_lower)
    assert ratios[1] == pytest.approx(ratios[0], rel=0.05)


def test_the_issues_two_cases_lie_between_their_bounds(models):
    """DeepSeek-V3's batch-1 decode on 8 H200s (its one-shot all-reduces beat the default latency the floor
    used to charge: estimate 2.2 ms under a 3.7 ms floor) and the README's 70B step on 64 H100s (47 s over the
    32 s sum at peak, which is no ceiling once kernels run below peak)."""
    deepseek = symform.load("deepseek-v3")
    served = dict(batch=1, prompt=1024, output=256, tensor=8, dtype="fp8")
    bounds, found = inference_time(deepseek, "h200-sxm", flash=True, **served), serving_estimate(deepseek, "h200-sxm", **served)
    _holds(bounds.tpot_lower, found.tpot.estimate, found.tpot.ceiling)
    llama = symform.load("llama-3.1-70b")
    step = dict(global_batch=512, micro_batch=1, seq=4096, layout=Layout(data=2, tensor=8, pipeline=4))
    bounds = training_time(llama, "h100-sxm", flash=True, **step)
    found = training_estimate(llama, "h100-sxm", bounds=bounds, **step)
    _holds(bounds.time_lower, found.step.estimate, found.step.ceiling)
    assert found.step.estimate > bounds.time_upper  # the sum at peak is not a ceiling


def test_a_case_beyond_the_published_runs_says_so_and_widens_its_band(models):
    """The band's widenings are data (rules.toml [band_widen]); a MoE on a device no run was measured on gets both."""
    import tomllib
    from pathlib import Path

    widen = tomllib.loads((Path(__file__).resolve().parent.parent / "hardware" / "efficiency" / "rules.toml").read_text())["band_widen"]
    base = tomllib.loads((Path(__file__).resolve().parent.parent / "hardware" / "efficiency" / "rules.toml").read_text())["band"]["serving"]["above"]
    setup = dict(batch=64, prompt=128, output=128, tensor=2)
    calibrated = serving_estimate(models["llama-3.2-1b"], "a100-sxm-80gb", **setup)
    assert calibrated.extrapolating == ()
    assert calibrated.tpot.high / calibrated.tpot.estimate - 1 == pytest.approx(base)
    far = serving_estimate(models["mixtral-8x7b"], "b200", **setup)
    assert any("MoE" in r for r in far.extrapolating) and any("b200" in r for r in far.extrapolating)
    assert far.tpot.high / far.tpot.estimate == pytest.approx((1 + base) * (1 + widen["moe"]["widen"] + widen["device"]["widen"]))
    assert 0 < far.tpot.low < far.tpot.estimate


def test_a_training_step_past_the_runs_scale_says_how_far(models):
    step = dict(global_batch=4096, micro_batch=1, seq=1024, layout=Layout(data=256, tensor=8), dtype="bf16")
    found = training_estimate(models["qwen3-0.6b"], "h100-sxm", **step)
    assert any("2,048 GPUs" in r and "fitted training runs reach" in r for r in found.extrapolating)


def test_four_in_five_published_runs_lie_inside_their_band():
    """The measured values of hardware/measured (the sources' numbers), training and serving alike."""
    from symform.analysis.time import calibration

    cases = calibration.validate()
    for kind in ("training", "serving"):
        chosen = [c for c in cases if c.run.kind == kind]
        assert sum(c.inside for c in chosen) >= 0.8 * len(chosen), kind


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(("gpt2", "llama-3.2-1b", "qwen3-0.6b")), gpu=st.sampled_from(("a100-sxm-80gb", "h100-sxm", "b200")),
    devices=st.sampled_from((4, 8, 16)), per_device=st.sampled_from((1, 4)), seq=st.sampled_from((512, 2048)),
)
def test_a_plans_rows_show_bounds_that_bracket_their_estimate(models, name, gpu, devices, per_device, seq):
    """symform plan used to print the sum at peak as each layout's "upper" bound beside an estimate above it
    (gpt2 on 8 A100s: estimate 0.054 s, "upper" 0.041 s); the range it prints must hold the estimate."""
    from symform.analysis.plans.planner import plan
    from symform.interface.reports.planner_report import _table

    result = plan(models[name], gpu, devices=devices, global_batch=devices * per_device, seq=seq, flash=True, top=3)
    lines = _table(result).splitlines()
    rows = lines[lines.index(next(l for l in lines if l.lstrip().startswith("#"))) + 1 :][: len(result.best)]
    for row, line in zip(result.best, rows):
        shown = line.split()
        estimate, floor, ceiling = float(shown[9]), float(shown[10]), float(shown[12])
        assert floor <= estimate <= ceiling, line
        _holds(row.time.time_lower, row.estimate.step.estimate, row.estimate.step.ceiling)


def test_the_plan_of_the_issue_shows_its_estimate_inside_its_range(models):
    """gpt2, global batch 64 × 1,024 on 8 A100s: the best layout's estimate (0.054 s) against what its row prints."""
    from symform.analysis.plans.planner import plan
    from symform.interface.reports.planner_report import _range_text

    best = plan(models["gpt2"], "a100-sxm-80gb", devices=8, global_batch=64, seq=1024, flash=True, top=1).best[0]
    floor, _, ceiling = _range_text(best).split()
    assert float(floor) <= round(best.estimate.step.estimate, 3) <= float(ceiling)


def test_a_serving_engine_release_no_fitted_run_ran_widens_the_band():
    """TensorRT-LLM's pages gather several releases' tables: each run carries its table's release, and a release no
    fitted serving run ran (v0.9.0) widens the band by rules.toml's framework width, the estimate unchanged."""
    from symform.analysis.time import measured_runs
    from symform.analysis.time.efficiencies import rules

    named = {r.name: r for r in measured_runs.runs()}
    assert measured_runs.run_framework(named["h100-llama-2-7b-ttft-128"]) == ("tensorrt-llm", "0.5.0")  # Low Latency: "data is from v0.5"
    assert measured_runs.run_framework(named["h100-llama-2-7b-b768-128-128"]) == ("tensorrt-llm", "0.6.1")
    assert ("tensorrt-llm", "0.6.1") in measured_runs.fitted_releases("serving")
    assert ("tensorrt-llm", "0.9.0") not in measured_runs.fitted_releases("serving")
    model = symform.load("llama-2-7b")
    setup = dict(batch=64, prompt=128, output=128, tensor=1, dtype="fp8")
    fitted = serving_estimate(model, "h100-sxm", release=("tensorrt-llm", "0.6.1"), **setup)
    newer = serving_estimate(model, "h100-sxm", release=("tensorrt-llm", "0.9.0"), **setup)
    assert newer.total.estimate == fitted.total.estimate
    widen = 1 + rules().widen["framework"]
    assert newer.total.high / newer.total.estimate == pytest.approx(fitted.total.high / fitted.total.estimate * widen)
    assert any("tensorrt-llm 0.9.0" in text for text in newer.extrapolating)
    assert not any("tensorrt-llm" in text for text in fitted.extrapolating)
