"""Frameworks' time-side facts (formulas/frameworks/*.toml [[time.facts]]): each holds for the releases and models its
source names, and the estimate applies it without leaving its floor and ceiling."""

import dataclasses
import json

import pytest

import symform
import symform.interface.cli.cli
from symform.analysis.memory.settings import Layout
from symform.analysis.time import efficiencies, timing
from symform.analysis.time.estimate import training_estimate
from symform.engine.errors import ConfigError
from symform.engine.language.schema import SchemaError, build


def test_the_dropless_regression_holds_for_the_release_model_and_devices_its_issue_names():
    """Megatron-Bridge issue #1998: 'We have 2X slower performance in QWEN3 30B on H100 and B200 with the dropless
    schedule'; the 25.11 table's GB200 row is not slower than 25.09's (23,766 against 22,775 tokens/s/GPU)."""
    assert efficiencies.profile("megatron", "25.11", "qwen3-30b-a3b", device="h100-sxm").step_factor == 2.0
    assert efficiencies.profile("megatron", "25.11", "qwen3-30b-a3b", device="b200").step_factor == 2.0
    assert efficiencies.profile("megatron", "25.11", "qwen3-30b-a3b", device="gb200").step_factor == 1.0
    assert efficiencies.profile("megatron", "25.11", "qwen3-30b-a3b").step_factor == 1.0  # no device named: not the issue's
    assert efficiencies.profile("megatron", "25.09", "qwen3-30b-a3b", device="b200").step_factor == 1.0
    assert efficiencies.profile("megatron", "25.11", "gpt-oss-120b", device="b200").step_factor == 1.0
    assert efficiencies.profile("megatron", None, "qwen3-30b-a3b", device="h100-sxm").step_factor == 1.0  # Megatron-LM of 2021 names no release
    assert efficiencies.profile(None) is None


def test_the_qwen3_235b_b200_recipe_of_25_11_holds_the_overlap_regression_its_fix_measured():
    """Megatron-Bridge PR #1760: 'MXFP8 step time improved from 20.1s to 16.9s. BF16 step time improved from 17.2s to
    16s. Disable moe_a2a_overlap due to CPU overhead'. The facts hold for that release, model and device alone, and
    the FP8 one for FP8 alone."""
    fp8 = efficiencies.profile("megatron", "25.11", "qwen3-235b-a22b", device="b200", dtype="fp8")
    bf16 = efficiencies.profile("megatron", "25.11", "qwen3-235b-a22b", device="b200", dtype="bf16")
    assert fp8.ep_comm_overlap is False and bf16.ep_comm_overlap is False
    assert fp8.step_factor == pytest.approx(20.1 / 16.9, rel=1e-4) and bf16.step_factor == pytest.approx(17.2 / 16.0, rel=1e-4)
    for other in (("25.09", "b200"), ("25.11", "h100-sxm"), ("25.11", "gb200")):
        found = efficiencies.profile("megatron", other[0], "qwen3-235b-a22b", device=other[1], dtype="fp8")
        assert found.ep_comm_overlap is None and found.step_factor == 1.0
    assert efficiencies.profile("megatron", "25.11", "qwen3-235b-a22b", device="b200", dtype="fp16").step_factor == 1.0


def test_the_regressed_recipes_step_is_the_published_runs_step():
    """The PR's 20.1 s MXFP8 step is the 25.11 table's B200 row: 1,024 sequences of 4,096 tokens over 64 GPUs at
    3,269 tokens/s/GPU take 20.05 s, so the row ran the recipe the PR fixed (hardware/measured/megatron-bridge.toml)."""
    from symform.analysis.time.measured_runs import runs

    row = next(r for r in runs() if r.name == "mb-b200-qwen3-235b-a22b-fp8")
    s = row.setup
    step = s["global_batch"] * s["seq"] / s["gpus"] / row.measured[1]
    assert step == pytest.approx(20.1, rel=0.01) and s["ep_comm_overlap"] is True


def test_an_overlap_that_hides_nothing_times_the_all_to_alls_exposed():
    """A release whose all-to-all overlap hides nothing (a fact with value false) times a run that asks for the
    overlap as one that does not."""
    model = symform.load("qwen3-30b-a3b")
    step = dict(global_batch=64, micro_batch=1, seq=1024, layout=Layout(data=8, expert=8))
    exposed = training_estimate(model, "h100-sxm", **step)
    asked = training_estimate(model, "h100-sxm", ep_comm_overlap=True, **step)
    refused = training_estimate(model, "h100-sxm", ep_comm_overlap=True, profile=efficiencies.TimeProfile("megatron", "25.11", ep_comm_overlap=False), **step)
    assert asked.step.estimate < exposed.step.estimate
    assert refused.step.estimate == pytest.approx(exposed.step.estimate)
    assert refused.exposed_comm_s["expert"] == pytest.approx(exposed.exposed_comm_s["expert"])


def test_a_facts_dtypes_are_symforms_and_the_default_is_a_training_steps():
    base = {"name": "step_factor", "value": 1.1, "doc": "d", "source": "s"}
    for bad, message in ((["FP8"], "not a matmul dtype"), (["mxfp8"], "not a matmul dtype"), ([], "holds for no run")):
        with pytest.raises(ValueError, match=message):
            build(efficiencies.Fact, base | {"dtypes": bad})
    assert efficiencies.profile("megatron", "25.11", "qwen3-235b-a22b", device="b200").step_factor == pytest.approx(17.2 / 16.0, rel=1e-4)


def test_megatron_bridge_releases_overlap_their_tensor_and_pipeline_communication():
    """comm_overlap.py: a virtual pipeline sets overlap_p2p_comm; the recipes' Userbuffers configurations overlap TP."""
    found = efficiencies.profile("megatron", "25.11", "llama-3.1-70b")
    assert found.p2p_overlap and found.tp_comm_overlap and found.step_factor == 1.0
    assert all(source for _, source in found.facts)
    old = efficiencies.profile("megatron", None, "llama-3.1-70b")
    assert not old.p2p_overlap and not old.tp_comm_overlap


STEP = dict(global_batch=64, micro_batch=1, seq=2048, layout=Layout(data=2, tensor=2, pipeline=2, schedule="interleaved", chunks=2, sequence=True))


@pytest.fixture(scope="module")
def model():
    return symform.load("qwen3-0.6b")


def test_a_virtual_pipelines_overlapped_sends_leave_less_exposed(model):
    plain = training_estimate(model, "h100-sxm", **STEP)
    overlapped = training_estimate(model, "h100-sxm", profile=efficiencies.TimeProfile("megatron", "25.11", p2p_overlap=True), **STEP)
    assert plain.exposed_comm_s["pipeline"] > 0
    assert overlapped.exposed_comm_s["pipeline"] < plain.exposed_comm_s["pipeline"]
    assert overlapped.step.floor <= overlapped.step.estimate <= overlapped.step.ceiling


def test_a_releases_slowdown_scales_the_estimate_and_its_ceiling(model):
    plain = training_estimate(model, "h100-sxm", **STEP)
    slower = training_estimate(model, "h100-sxm", profile=efficiencies.TimeProfile("megatron", "25.11", step_factor=2.0), **STEP)
    assert slower.step.estimate == pytest.approx(2 * plain.step.estimate)
    assert slower.step.ceiling == pytest.approx(2 * plain.step.ceiling)
    assert slower.step.floor == plain.step.floor  # the datasheet floor is no release's


def test_a_release_no_fitted_run_ran_widens_the_band(model):
    """25.11: every row held out; 25.09: fitted rows (hardware/measured/megatron-bridge-2509.toml)."""
    unseen = training_estimate(model, "h100-sxm", profile=efficiencies.TimeProfile("megatron", "25.11"), **STEP)
    seen = training_estimate(model, "h100-sxm", profile=efficiencies.TimeProfile("megatron", "25.09"), **STEP)
    assert any("megatron 25.11" in r for r in unseen.extrapolating) and not any("megatron 25.09" in r for r in seen.extrapolating)
    assert unseen.step.high / unseen.step.estimate > seen.step.high / seen.step.estimate


def test_a_misspelt_fact_is_refused_in_one_line(monkeypatch):
    from symform.analysis.memory import frameworks

    real = frameworks.framework("megatron")
    broken = dataclasses.replace(real, time={"facts": [{"name": "tp_overlap", "doc": "", "source": ""}]})
    monkeypatch.setattr(efficiencies, "memory_framework", lambda name: broken)
    with pytest.raises(ConfigError, match=r"\[\[time.facts\]\]") as e:
        efficiencies.profile("megatron", "25.11")
    assert "\n" not in str(e.value)


def test_time_applies_a_named_release_and_says_which_facts(capsys):
    from symform.interface.cli.cli import main

    argv = ["time", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--gpus", "8", "--dp", "8", "--ep", "8", "--train", "--global-batch", "8", "--seq", "512"]
    assert main(argv) == 0
    plain = capsys.readouterr().out
    assert main([*argv, "--framework", "megatron", "--framework-version", "25.11"]) == 0
    named = capsys.readouterr().out
    assert "framework      megatron 25.11: " in named and "step_factor = 2.0" in named and "issues/1998" in named
    assert "framework      " not in plain
    rack = [*argv[:3], "gb200-nvl72", *argv[4:], "--framework", "megatron", "--framework-version", "25.11"]
    assert main(rack) == 0  # the system's own accelerator, which the issue does not name
    on_gb200 = capsys.readouterr().out
    assert "framework      megatron 25.11: " in on_gb200 and "step_factor" not in on_gb200
    assert main([*argv, "--framework-version", "25.11"]) == 2
    assert "give --framework too" in capsys.readouterr().err


def test_the_framework_counted_brings_its_sequence_parallelism_to_time(capsys):
    """torchtitan's tensor-parallel plan (the default framework's) and Megatron's recipes run sequence parallelism beside
    tensor parallelism (torchtitan.toml, megatron.toml): `time` with --tp 2 does too, named or not, so each rank
    dispatches half the tokens to the experts; `--no-sp` and the eager accounting (no framework) run tensor parallelism
    alone. The memory check counts the same layout as `symform memory` does, to the byte."""
    from symform.interface.cli.cli import main

    layout = ["--tp", "2", "--ep", "4", "--seq", "4096"]
    argv = ["time", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--gpus", "8", *layout, "--train", "--global-batch", "64", "--json"]
    found = {}
    for name, extra in (("default", []), ("megatron", ["--framework", "megatron", "--framework-version", "25.11"]), ("no-sp", ["--no-sp"]), ("eager", ["--accounting", "eager"]), ("eager-sp", ["--accounting", "eager", "--sp"])):
        assert main([*argv, *extra]) == 0
        data = json.loads(capsys.readouterr().out)
        found[name] = (data["layout"]["sequence"], data["comm"]["expert"]["bytes_per_rank"], data["memory"]["bytes_per_device"])
    assert [found[n][0] for n in found] == [True, True, False, False, True]
    assert found["default"][1] == found["megatron"][1] == found["eager-sp"][1] == found["no-sp"][1] / 2 == found["eager"][1] / 2
    for name, extra in (("default", []), ("no-sp", ["--no-sp"])):
        assert main(["memory", "qwen3-30b-a3b", "--train", *layout, "--dp", "4", "--batch", "1", "--flash", "--json", *extra]) == 0
        assert json.loads(capsys.readouterr().out)["total"] == found[name][2]
    assert found["default"][2] < found["no-sp"][2]  # sequence parallelism splits the norms' and residuals' activations too


def test_the_all_to_all_is_exposed_unless_the_run_overlaps_it():
    """rules.toml: Megatron-Core's default leaves the dispatch and combine on the critical path (overlap.expert,
    window none: all of it exposed); DeepSeek-V3's DualPipe hides them anywhere in the step's compute
    (overlap.expert_dualpipe, window step); Megatron-Core's combined 1F1B and NeMo Automodel's DeepEP pair micro-batches
    phase by phase (overlap.expert_overlapped, window paired), which hides less than the whole step would and
    leaves the unpaired first forward and last backward exposed. GPT-OSS-120B's B200 recipe, 64 experts over 8 nodes."""
    model = symform.load("gpt-oss-120b")
    setup = dict(global_batch=512, micro_batch=4, seq=4096, layout=Layout(data=64, expert=64))
    plain = training_estimate(model, "b200", **setup)
    assert plain.exposed_comm_s["expert"] == plain.comm_s["expert"] > plain.compute_s
    dualpipe = training_estimate(model, "b200", ep_comm_overlap="dualpipe", **setup)
    assert dualpipe.exposed_comm_s["expert"] == dualpipe.comm_s["expert"] - dualpipe.compute_s
    paired = training_estimate(model, "b200", ep_comm_overlap=True, **setup)
    assert paired.comm_s["expert"] == dualpipe.comm_s["expert"]
    assert dualpipe.exposed_comm_s["expert"] < paired.exposed_comm_s["expert"] < plain.exposed_comm_s["expert"]
    # 512 sequences over 64 ranks: 2 micro-batches of 4 each, the first forward and the last backward unpaired
    assert paired.exposed_comm_s["expert"] >= paired.comm_s["expert"] / 2
    assert paired.step.estimate < plain.step.estimate
    automodel = training_estimate(model, "b200", profile=efficiencies.profile("automodel", None, model.name), **setup)
    assert automodel.exposed_comm_s["expert"] == paired.exposed_comm_s["expert"]  # its own compute: no time per expert


def test_a_paired_all_to_all_hides_under_its_partners_phase_only():
    """Hand numbers: dense compute 3 s (forward 1 s, backward 2 s), routed experts 4 s, all-to-alls 8 s (2 s each):
    the backward's combine outlasts the forward's attention by 1 s, the two dispatches (4 s) fit the experts' 4 s, the
    forward's combine (2 s) fits the attention's backward; a quarter of the passes unpaired show their whole 8 s."""
    from symform.analysis.time.estimate import Pairing

    assert Pairing(3.0, 4.0, 0.0).exposed(8.0) == 1.0
    assert Pairing(3.0, 4.0, 0.25).exposed(8.0) == 0.75 * 1.0 + 0.25 * 8.0
    assert Pairing(30.0, 40.0, 0.0).exposed(8.0) == 0.0


@pytest.mark.parametrize("facts", [7, "tp_comm_overlap", {"name": "step_factor"}])
def test_time_facts_that_are_no_list_of_tables_are_refused_in_one_line(monkeypatch, facts):
    from symform.analysis.memory import frameworks

    broken = dataclasses.replace(frameworks.framework("megatron"), time={"facts": facts})
    monkeypatch.setattr(efficiencies, "memory_framework", lambda name: broken)
    with pytest.raises(ConfigError, match=r"time\.facts is \w+, not a list of tables") as e:
        efficiencies.profile("megatron", "25.11")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("fact", [
    {"name": "step_factor", "value": float("nan")}, {"name": "step_factor", "value": float("inf")}, {"name": "step_factor", "value": 0},
    {"name": "step_factor", "value": -1.5}, {"name": "step_factor", "value": True}, {"name": "tp_comm_overlap", "value": 2.5},
])
def test_a_fact_whose_value_means_nothing_is_refused_in_one_line(monkeypatch, fact):
    from symform.analysis.memory import frameworks

    broken = dataclasses.replace(frameworks.framework("megatron"), time={"facts": [fact | {"doc": "d", "source": "s"}]})
    monkeypatch.setattr(efficiencies, "memory_framework", lambda name: broken)
    with pytest.raises(ConfigError, match=r"\[\[time.facts\]\].*value") as e:
        efficiencies.profile("megatron", "25.11")
    assert "\n" not in str(e.value)


def test_an_unknown_overlap_schedule_is_refused():
    with pytest.raises(symform.SymformError, match="ep_comm_overlap is 'zero_bubble'"):
        training_estimate(symform.load("qwen3-30b-a3b"), "h100-sxm", global_batch=16, micro_batch=1, seq=1024, layout=Layout(data=8, expert=8), ep_comm_overlap="zero_bubble")


def test_time_takes_the_all_to_all_overlap_and_refuses_it_when_serving(capsys):
    argv = ["time", "qwen3-30b-a3b", "--train", "--gpu", "h100-sxm", "--gpus", "16", "--ep", "8", "--global-batch", "64", "--seq", "1024"]
    assert symform.interface.cli.cli.main([*argv, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert symform.interface.cli.cli.main([*argv, "--ep-comm-overlap", "--json"]) == 0
    hidden = json.loads(capsys.readouterr().out)
    assert hidden["estimate"]["exposed_comm_s"]["expert"] < plain["estimate"]["exposed_comm_s"]["expert"]
    assert symform.interface.cli.cli.main([*argv, "--dualpipe", "--json"]) == 0
    anywhere = json.loads(capsys.readouterr().out)
    assert anywhere["estimate"]["exposed_comm_s"]["expert"] <= hidden["estimate"]["exposed_comm_s"]["expert"]
    # the flag may stand before the model's name, as every flag may
    assert symform.interface.cli.cli.main(["time", "--ep-comm-overlap", *argv[1:], "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == hidden
    assert symform.interface.cli.cli.main(["time", "qwen3-30b-a3b", "--infer", "--gpu", "h100-sxm", "--batch", "1", "--prompt", "8", "--output", "8", "--ep-comm-overlap"]) == 2


def test_chunks_that_do_not_split_the_layers_evenly_are_balanced_like_stages(model):
    """Qwen3-0.6B's 28 layers in 2 stages × 3 chunks (Megatron-Core runs such splits with its pipeline layouts): the
    step is timed, each device holding half the work as with whole chunks, and the interleaved bubble is
    (stages − 1) / (chunks × micro-batches) = 1 / (3 · 32); more chunks than layers is refused in one line."""
    uneven = dict(STEP, layout=Layout(data=2, tensor=2, pipeline=2, schedule="interleaved", chunks=3, sequence=True))
    even = timing.training_time(model, "h100-sxm", **STEP)
    found = timing.training_time(model, "h100-sxm", **uneven)
    assert found.bubble_ratio == pytest.approx(1 / (3 * 32))
    assert found.flops_per_device == even.flops_per_device
    assert training_estimate(model, "h100-sxm", **uneven).step.estimate > 0
    with pytest.raises(ConfigError, match="a chunk holds at least one layer"):
        timing.training_time(model, "h100-sxm", **dict(STEP, layout=Layout(data=2, tensor=2, pipeline=2, schedule="interleaved", chunks=15, sequence=True)))


@pytest.mark.parametrize(("devices", "says"), [(["B200"], "'B200' is not a bundled accelerator"), (["gb200-nvl72"], "'gb200-nvl72' is not a bundled accelerator"), (5, "devices: Input should be a valid list")])
def test_a_fact_names_only_bundled_accelerators(devices, says):
    """A fact's devices are matched against the accelerator a --gpu names; a name that can never match (a system, a
    misspelling) is refused in one line rather than silently never applying."""
    from symform.engine.errors import describe_validation

    with pytest.raises(SchemaError) as e:
        build(efficiencies.Fact, {"name": "step_factor", "value": 2.0, "devices": devices, "doc": "d", "source": "s"})
    assert says in describe_validation(e.value) and "\n" not in describe_validation(e.value)


def test_memory_refuses_more_chunks_than_layers_as_time_does(capsys):
    """Qwen3-0.6B's 28 layers in 2 stages × 15 chunks: one rule (symform.analysis.memory.memory.check_pipeline) for
    `symform memory` and `symform time`, each a one-line refusal, exit 2."""
    from symform.interface.cli.cli import main

    layout = ["--pp", "2", "--schedule", "interleaved", "--chunks", "15"]
    assert main(["memory", "qwen3-0.6b", "--train", "--batch", "1", "--seq", "512", "--microbatches", "4", *layout]) == 2
    assert main(["time", "qwen3-0.6b", "--gpu", "h100-sxm", "--gpus", "2", "--train", "--global-batch", "8", "--seq", "512", *layout]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and all("a chunk holds at least one layer" in e for e in errors)


def test_a_framework_s_time_facts_hold_only_on_the_accelerators_it_runs_on(capsys):
    """Megatron's overlaps are Transformer Engine's and NCCL's (NVIDIA, and AMD through its ROCm port); NeMo Automodel's
    DeepEP is NVIDIA's: time and plan refuse them on a TPU or, for Automodel, an MI300X, in one line, exit 2, and
    take them on the vendors' own accelerators."""
    from symform.interface.cli.cli import main

    step = ["--train", "--global-batch", "64", "--seq", "512"]
    assert main(["time", "qwen3-0.6b", "--gpu", "tpu-v5p-128", "--gpus", "64", *step, "--framework", "megatron"]) == 2
    assert main(["plan", "qwen3-0.6b", "--gpu", "tpu-v5p", "--gpus", "8", "--global-batch", "64", "--seq", "512", "--framework", "megatron"]) == 2
    assert main(["time", "qwen3-0.6b", "--gpu", "mi300x", "--gpus", "8", *step, "--framework", "automodel"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert [e.split(" runs on ")[0] for e in errors] == ["symform: error: framework 'megatron'"] * 2 + ["symform: error: framework 'automodel'"]
    assert errors[0].endswith("tpu-v5p is Google's: name one of theirs, or drop --framework")
    assert errors[2].endswith("mi300x is AMD's: name one of theirs, or drop --framework")
    # serving applies no training framework's facts: the flag is refused, not dropped
    assert main(["time", "qwen3-0.6b", "--gpu", "tpu-v5p", "--infer", "--batch", "1", "--prompt", "16", "--output", "4", "--framework", "megatron"]) == 2
    assert capsys.readouterr().err.strip() == "symform: error: --framework does not apply to --infer; drop it"
    assert main(["time", "qwen3-0.6b", "--gpu", "mi300x", "--gpus", "8", *step, "--framework", "megatron"]) == 0
    assert main(["time", "qwen3-0.6b", "--gpu", "dgx-b200", "--gpus", "8", *step, "--framework", "automodel"]) == 0


def test_the_unpaired_share_is_the_first_stage_s_warm_up_and_one_more():
    """1F1B on 4 stages: the first stage's 3 warm-up forwards and one more of 16 micro-batches; without a pipeline the
    first forward; the naive and GPipe schedules pair nothing; interleaved with 2 chunks: 2·3 + 4 + 1 chunk passes of
    32, in whole-stage units 5.5 of 16."""
    from symform.analysis.time.estimate import _unpaired

    assert _unpaired(Layout(data=1, pipeline=4), 16) == 4 / 16
    assert _unpaired(Layout(data=8), 16) == 1 / 16
    assert _unpaired(Layout(pipeline=4, schedule="naive"), 16) == _unpaired(Layout(pipeline=4, schedule="gpipe"), 16) == 1.0
    assert _unpaired(Layout(pipeline=4, schedule="interleaved", chunks=2), 16) == 5.5 / 16


def test_a_recomputed_forward_joins_the_backward_s_window():
    """Full recomputation adds a third to the work: the forward's attention is a quarter of the dense compute."""
    from symform.analysis.time.estimate import Pairing

    assert Pairing(4.0, 100.0, 0.0, recomputed=1 / 3).exposed(8.0) == 1.0  # quarter 2 s under a forward of 1 s


def test_dualpipe_beside_a_release_whose_overlap_hides_nothing_is_refused_in_one_line():
    """The 25.11 facts for Qwen3-235B-A22B on B200 describe Megatron-Core's moe_a2a_overlap (PR #1760), and its step
    factor that schedule's CPU overhead: neither is DualPipe's, so the combination is refused, not timed."""
    model = symform.load("qwen3-30b-a3b")
    step = dict(global_batch=64, micro_batch=1, seq=1024, layout=Layout(data=8, expert=8))
    with pytest.raises(ConfigError, match="drop --dualpipe or --framework") as e:
        training_estimate(model, "h100-sxm", ep_comm_overlap="dualpipe", profile=efficiencies.TimeProfile("megatron", "25.11", ep_comm_overlap=False), **step)
    assert "\n" not in str(e.value)


def test_a_facts_presets_are_the_models_loaded_as_them_not_files_of_their_name(capsys, tmp_path):
    """A file named after the preset is not the preset: the facts measured on Qwen3-235B-A22B stay off a tiny model
    saved as qwen3-235b-a22b.json."""
    from symform.interface.cli.cli import main

    config = {"model_type": "llama", "vocab_size": 128, "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 256}
    path = tmp_path / "qwen3-235b-a22b.json"
    path.write_text(json.dumps(config))
    argv = ["--train", "--gpu", "b200", "--gpus", "8", "--global-batch", "8", "--micro-batch", "1", "--seq", "64", "--dtype", "fp8", "--framework", "megatron", "--framework-version", "25.11", "--json"]
    assert main(["time", str(path), *argv]) == 0
    facts = json.loads(capsys.readouterr().out)["estimate"]["factors"]["framework"]["facts"]
    assert facts and not any(key.startswith(("step_factor", "ep_comm_overlap")) for key in facts)
    assert main(["time", "qwen3-235b-a22b", *argv[:4], "64", "--pp", "8", "--ep", "8", *argv[5:]]) == 0
    preset = json.loads(capsys.readouterr().out)["estimate"]["factors"]["framework"]["facts"]
    assert any(key.startswith("step_factor = 1.1893") for key in preset) and any(key.startswith("ep_comm_overlap = False") for key in preset)
