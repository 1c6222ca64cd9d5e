"""Activation offload (Megatron-Core's cpu_offloading_num_layers): the offloaded layers' saved activations leave the
device, one offloaded layer stays in flight, and the bytes cross the host link twice per micro-batch.

One layer's saved bytes are measured without the code under test: the activations of a model with one more
identical layer, less those of the same model without it (every other component is the same).
"""

from __future__ import annotations

import pytest

from checks import run, run_json
from symform import ConfigError, EvaluationError, Model, load
from symform.analysis.memory.activation_offload import check_offload
from symform.analysis.memory.memory import Training, training_memory
from symform.analysis.memory.settings import Layout
from symform.analysis.time.estimate import training_estimate
from symform.analysis.time.timing import training_time

TINY = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
}  # fmt: skip
H100_PCIE = 64e9  # hardware/h100-sxm.toml: PCIe Gen5 x16, 128 GB/s both directions


def tiny(layers: int) -> Model:
    return Model.from_config({**TINY, "num_hidden_layers": layers}, name=f"tiny-llama-{layers}")


def memory(layers: int, offloaded: int = 0, **setup):
    return training_memory(tiny(layers), batch=2, seq=64, setup=Training(offload_layers=offloaded, **setup))


def one_layer(**setup) -> int:
    return memory(4, **setup).values["activations"] - memory(3, **setup).values["activations"]


@pytest.mark.parametrize("offloaded", [1, 2, 3])
def test_offloaded_layers_leave_the_device_and_one_stays_in_flight(offloaded):
    layer, whole = one_layer(), memory(3)
    assert layer > 0
    part = memory(3, offloaded)
    assert part.values["activations"] == whole.values["activations"] - offloaded * layer
    assert part.values["offload_buffer"] == layer
    assert part.total == whole.total - offloaded * layer + layer
    assert part.assumptions["activation_offload_host_bytes"] == offloaded * layer
    assert part.assumptions["offload_layers"] == offloaded


def test_with_recomputation_an_offloaded_layer_is_its_kept_input():
    layer = one_layer(recompute="full")
    assert layer == 2 * 2 * 64 * 64  # full recomputation keeps each layer's bf16 input: batch × seq × d_model
    assert memory(3, 3, recompute="full").assumptions["activation_offload_host_bytes"] == 3 * layer


def test_no_layer_offloaded_is_the_report_without_offload():
    plain = training_memory(tiny(3), batch=2, seq=64)
    zero = memory(3, 0)
    assert zero.as_dict() == plain.as_dict()
    assert "offload_buffer" not in zero.values


@pytest.mark.parametrize("bad", [-1, 4, 2.0, True])
def test_a_layer_count_outside_the_model_is_refused(bad):
    with pytest.raises(EvaluationError):
        memory(3, bad)


def test_offload_with_a_pipeline_is_refused():
    with pytest.raises(ConfigError, match="pipeline"):
        memory(3, 1, layout=Layout(pipeline=3))


def test_each_micro_batch_sends_the_offloaded_bytes_out_and_back_over_the_host_link():
    layer = one_layer()
    model = tiny(3)
    step = dict(global_batch=8, micro_batch=2, seq=64, flash=True)  # four micro-batches on one device, as Training() counts them
    plain = training_time(model, "h100-sxm", **step)
    timed = training_time(model, "h100-sxm", offload_layers=2, **step)
    assert "offload" not in plain.comm
    offload = timed.comm["offload"]
    assert offload.bytes_per_rank == 4 * 2 * 2 * layer
    assert offload.seconds == pytest.approx(4 * 2 * 2 * layer / H100_PCIE)
    assert timed.time_upper == pytest.approx(plain.time_upper + offload.seconds)  # nothing overlapped: added
    assert timed.time_lower == pytest.approx(max(plain.time_lower, offload.seconds))  # overlapped: the longest


def test_the_estimate_charges_only_what_outlasts_the_compute():
    model = tiny(3)
    step = dict(global_batch=8, micro_batch=2, seq=64)
    found = training_estimate(model, "h100-sxm", offload_layers=2, **step)
    copies = found.comm_s["offload"]
    assert copies == pytest.approx(training_time(model, "h100-sxm", offload_layers=2, flash=True, **step).comm["offload"].seconds)
    assert found.exposed_comm_s["offload"] == pytest.approx(max(0.0, copies - found.compute_s))
    # no fitted run offloads: the band widens for it and says so
    plain = training_estimate(model, "h100-sxm", **step)
    assert "activation offload of 2 layers (no fitted run uses it)" in found.extrapolating
    assert found.step.high / found.step.estimate > plain.step.high / plain.step.estimate


def test_a_device_without_a_host_link_figure_cannot_time_offload():
    with pytest.raises(ConfigError, match="host link"):
        training_time(tiny(3), "tpu-v5e", global_batch=2, micro_batch=2, seq=64, offload_layers=1)


def test_tpu_v6e_copies_at_its_32_gbs_each_way():
    """How to Scale Your Model (TPU specs): 'PCIe bandwidth is typically around 1.6e10 bytes / second per TPU (3.2e10
    for TPU v6e)', one way as its TPU v4 figure ('16GB / second each way')."""
    layer = one_layer()
    timed = training_time(tiny(3), "tpu-v6e", global_batch=2, micro_batch=2, seq=64, offload_layers=2, flash=True)
    assert timed.comm["offload"].seconds == pytest.approx(2 * 2 * layer / 32e9)


TINY_MOE = {**TINY, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}


def tiny_moe(layers: int) -> Model:
    return Model.from_config({**TINY_MOE, "num_hidden_layers": layers}, name=f"tiny-mixtral-{layers}")


def test_a_mixture_of_experts_offloads_its_layers_as_a_dense_model_does():
    """Mixture-of-experts families declare their layers as stacks under one group (Mixtral's one stack of MoE layers):
    its layers are offloaded like any, one layer's bytes again the model with one more layer less the model."""
    def moe_memory(layers: int, offloaded: int = 0):
        return training_memory(tiny_moe(layers), batch=2, seq=64, setup=Training(offload_layers=offloaded))

    layer = moe_memory(4).values["activations"] - moe_memory(3).values["activations"]
    assert layer > 0
    part, whole = moe_memory(3, 2), moe_memory(3)
    assert part.values["activations"] == whole.values["activations"] - 2 * layer
    assert part.values["offload_buffer"] == layer
    assert part.assumptions["activation_offload_host_bytes"] == 2 * layer
    with pytest.raises(EvaluationError, match="at most 3"):
        moe_memory(3, 4)


@pytest.mark.parametrize(("preset", "layers", "d_model"), [("mixtral-8x7b", 32, 4096), ("deepseek-v3", 61, 7168)])
def test_every_layer_of_stacks_of_several_kinds_goes_to_the_host(preset, layers, d_model):
    """DeepSeek-V3's 3 dense and 58 MoE layers are two stacks under one group: offloading all 61 under full
    recomputation sends each layer's bf16 input, batch × seq × d_model × 2 bytes, as Mixtral's 32 do."""
    setup = Training(recompute="full", offload_layers=layers)
    report = training_memory(load(preset), batch=1, seq=1024, setup=setup)
    assert report.assumptions["activation_offload_host_bytes"] == layers * 1024 * d_model * 2


def test_megatron_dense_mlps_keep_the_fused_swiglu_input_alone():
    """Megatron-Core's bias_swiglu_impl keeps fc1's output (gate and up) and not silu's output: one batch × seq ×
    d_ff tensor in bf16 fewer per layer than the activation and the product run apart (fused_glu = 0)."""
    setup = Training(framework="megatron", layout=Layout(data=8, zero=3))
    fused = training_memory(load("llama-3.1-8b"), batch=2, seq=8192, setup=setup)
    apart = training_memory(load("llama-3.1-8b").with_conventions(fused_glu=0), batch=2, seq=8192, setup=setup)
    assert apart.activations_by_component["layers"] - fused.activations_by_component["layers"] == 32 * 2 * 2 * 8192 * 14336


def test_cli_memory_and_time_take_the_offloaded_layer_count(capsys):
    code, out, _ = run(capsys, "memory", "llama-3.1-8b", "--train", "--batch", "1", "--seq", "1024", "--offload-layers", "16")
    assert code == 0 and "offload_buffer" in out and "activation offload:" in out
    data = run_json(capsys, "time", "llama-3.1-8b", "--train", "--gpu", "h100-sxm", "--global-batch", "8", "--seq", "1024", "--offload-layers", "16")
    assert data["comm"]["offload"]["link"] == "pcie"
    assert data["estimate"]["comm_s"]["offload"] > 0


def test_cli_refuses_more_offloaded_layers_than_the_model_has(capsys):
    code, _, err = run(capsys, "memory", "llama-3.1-8b", "--train", "--batch", "1", "--seq", "1024", "--offload-layers", "33")
    assert code != 0 and "at most 32" in err


@pytest.mark.parametrize(("preset", "layers", "d_model"), [("gemma-3-1b", 26, 1152), ("olmo-3-7b", 32, 4096)])
def test_a_part_present_whatever_the_layers_is_no_layer(preset, layers, d_model):
    """Gemma 3's and OLMo 3's second cos/sin pair is computed once when the model has both kinds of layer (a repeat of
    0 or 1 that reads n_layers): the 26 and 32 layers of their configs are the layers offload counts, each its input."""
    model = load(preset)
    with pytest.raises(EvaluationError, match=f"at most {layers}"):
        training_memory(model, batch=1, seq=256, setup=Training(recompute="full", offload_layers=layers + 1))
    report = training_memory(model, batch=1, seq=256, setup=Training(recompute="full", offload_layers=layers))
    assert report.assumptions["activation_offload_host_bytes"] == layers * 256 * d_model * 2
    assert f"{layers} of {layers} layers" in report.assumptions["activation_offload"]


TOY = """
[model]
name = "toy"
root = "toy"
doc = "a head of two parts beside the layers"
arguments = {{ d_model = 64, vocab = 100, n_layers = {n_layers} }}

[components.toy_layer]
doc = "A norm and a projection."
args = ["d_model"]

[[components.toy_layer.parts]]
name = "norm"
use = "rms_norm"
with = {{ width = "d_model" }}

[[components.toy_layer.parts]]
name = "proj"
use = "linear"
with = {{ d_in = "d_model", d_out = "d_model" }}

[components.toy_head]
doc = "A norm and the output head."
args = ["d_model", "vocab"]

[[components.toy_head.parts]]
name = "norm"
use = "rms_norm"
with = {{ width = "d_model" }}

[[components.toy_head.parts]]
name = "proj"
use = "linear"
with = {{ d_in = "d_model", d_out = "vocab" }}

[components.toy]
doc = "An embedding, the layers and a head."
args = ["d_model", "vocab", "n_layers"]

[[components.toy.parts]]
name = "embed"
use = "embedding"
with = {{ entries = "vocab", width = "d_model" }}

[[components.toy.parts]]
name = "layers"
use = "toy_layer"
repeat = "{layers}"
with = {{ d_model = "d_model" }}

[[components.toy.parts]]
name = "head"
use = "toy_head"
with = {{ d_model = "d_model", vocab = "vocab" }}
"""


def toy(tmp_path, layers: str, n_layers: int = 2) -> Model:
    path = tmp_path / f"toy-{n_layers}.toml"
    path.write_text(TOY.format(layers=layers, n_layers=n_layers), encoding="utf-8")
    return load(str(path))


def test_a_group_of_two_single_parts_is_not_two_layers(tmp_path):
    """A head of a norm and a projection, each once, beside a stack of 2 layers: the model has 2 layers, not 4."""
    def toy_memory(n_layers: int, offloaded: int = 0):
        return training_memory(toy(tmp_path, "n_layers", n_layers), batch=1, seq=16, setup=Training(offload_layers=offloaded))

    layer = toy_memory(3).values["activations"] - toy_memory(2).values["activations"]
    with pytest.raises(EvaluationError, match="at most 2"):
        toy_memory(2, 3)
    assert toy_memory(2, 2).assumptions["activation_offload_host_bytes"] == 2 * layer


def test_a_model_whose_layers_offload_cannot_find_says_so(tmp_path):
    """Layers repeated by a count other than n_layers (an encoder-decoder's two stacks, an architecture's own size):
    one line that says offload finds no layers to count, not that the model has 0 layers."""
    for model in (toy(tmp_path, "3"), load("flan-t5-xxl")):
        with pytest.raises(ConfigError, match="--offload-layers") as raised:
            check_offload(model, 1, Layout())
        assert "0 layers" not in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize(("preset", "layers"), [("qwen3-0.6b", 1), ("gpt2", 3), ("gemma-2b", 3), ("dbrx-base", 1)])
def test_few_layers_are_not_joined_by_the_head_or_the_embedding(preset, layers):
    """A model of 1 or 3 layers: its output head (one projection), its embedding (GPT-2's tokens, positions and
    dropout) or its final norm, each a group of that many parts present once, holds no layer."""
    model = load(preset).with_arguments(n_layers=layers)
    assert check_offload(model, layers, Layout()) == layers
    with pytest.raises(EvaluationError, match=f"at most {layers}"):
        check_offload(model, layers + 1, Layout())
