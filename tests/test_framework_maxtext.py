"""MaxText's framework file (formulas/frameworks/maxtext.toml): each value against a hand computation from MaxText's
own code at 76bd53b (scanned layers, bf16 products over fp32 parameters, jax.checkpoint policies)."""

from __future__ import annotations

from symform import load
from symform.analysis.memory.frameworks import frameworks
from symform.analysis.memory.memory import Training, training_memory
from symform.analysis.memory.settings import Layout
from symform.analysis.time import memory_validation, measured_runs

# Llama 3.1 8B: d 4096, 32 layers, 32 query and 8 key/value heads of 128, d_ff 14,336, vocabulary 128,256
EMBEDDING = 128_256 * 4096  # the largest FSDP unit (the untied embedding, larger than a 218,112,000-parameter layer)


def values(framework="maxtext", *, recompute="selective", zero=3, data=8, batch=2, seq=8192, name="llama-3.1-8b"):
    setup = Training(recompute=recompute, flash=True, layout=Layout(data=data, zero=zero), framework=framework)
    return training_memory(load(name), batch=batch, seq=seq, setup=setup)


def test_the_file_loads_with_its_sources():
    maxtext = frameworks()["maxtext"]
    assert "Google" in maxtext.runs_on.vendors and maxtext.selective.policy == "saved-dots"
    assert maxtext.defaults.sequence_parallel.value is True and "activation_embed" in maxtext.defaults.sequence_parallel.source
    assert all("76bd53b" in o.source for o in maxtext.overheads)
    assert maxtext.default("sequence_parallel", None, tensor=2) and not maxtext.default("sequence_parallel", None, tensor=1)


def test_one_scanned_layer_gathered_and_its_gradients_in_bf16():
    """The scan gathers one unit's weights cast to bf16 and writes that unit's gradients in bf16 before their
    reduce-scatter: 2 bytes a parameter of the largest unit each, where torchtitan's FSDP2 holds two units in bf16
    and one in fp32."""
    report = values()
    assert report.values["fsdp_gathered_params"] == EMBEDDING * 2 == 1_050_673_152
    assert report.values["fsdp_unsharded_grads"] == EMBEDDING * 2


def test_no_cuda_context_and_no_allocator_reserve():
    """XLA assigns the step's buffers when it compiles it: the total is the declared tensors and the two FSDP buffers."""
    report = values()
    assert "cuda_context" not in report.values and "allocator_reserve" not in report.values
    assert report.total == sum(report.values.values())


def test_no_fsdp_buffers_without_fsdp():
    assert not {"fsdp_gathered_params", "fsdp_unsharded_grads"} & set(values(zero=0, data=1).values)


def test_minimal_keeps_the_layer_input_and_the_products_backward_reads():
    """remat_policy minimal (checkpoint_dots_with_no_batch_dims) saves the outputs of weight products that are
    residuals: wq, wk, wv (read by RoPE and attention's backward), w1 and w3 (SiLU's and the gate product's); wo's and
    w2's outputs only enter the residual sum and are not residuals. The flash kernel's results are recomputed. In
    bf16, per token and layer: 2·(4096 input + 4096 wq + 1024 wk + 1024 wv + 14336 w1 + 14336 w3) = 77,824 bytes."""
    report = values()
    assert 2 * (4096 + 4096 + 1024 + 1024 + 14336 + 14336) == 77_824
    assert report.activations_by_component["layers"] == 32 * 77_824 * 2 * 8192


def test_the_v5e_32b_run_fits_with_its_layer_buffers_of_two_gigabytes():
    """MaxText's 32B on one v5e-256 (global_parameter_scale 32: d 10,240, 32 heads of 256, d_ff 32,768): a layer of the
    arcee config symform times it with holds 4·10240·8192 + 2·10240·32768 + 2·10240 = 1,006,653,440 parameters, so
    each buffer is 2,013,306,880 bytes, and the step fits the chip's 16 GiB."""
    run = next(r for r in measured_runs.runs() if r.name == "maxtext-32b-v5e-256")
    fit = memory_validation.timed_run_fit(run)
    assert fit.framework == "maxtext" and fit.fits
    s = run.setup
    setup = Training(recompute="full", layout=memory_validation.timed_layout(run), framework="maxtext")
    report = training_memory(measured_runs.run_model(run), batch=s["micro_batch"], seq=s["seq"], setup=setup)
    assert report.values["fsdp_gathered_params"] == report.values["fsdp_unsharded_grads"] == 2 * 1_006_653_440


def _without_liveness(monkeypatch):
    """maxtext as it would read if it kept what forward saved through backward, as a caching allocator does."""
    import dataclasses

    from symform.analysis.memory import frameworks as module

    real = module.framework
    monkeypatch.setattr(module, "framework", lambda name: dataclasses.replace(real(name), liveness=None) if name == "maxtext" else real(name))


def test_the_loss_head_and_final_norm_are_free_before_a_layer_is_rebuilt(monkeypatch):
    """Mixtral 8x7B at 8 × 4,096 tokens a chip, full recomputation: XLA frees the loss's, the head's and the final norm's
    kept tensors once their backward has run, so the rebuilt layer is charged less them, and the step's peak is the
    larger of that and the loss's backward (one fused kernel's bf16 batch·seq·vocab gradient: 8 · 4,096 · 32,000 · 2 bytes)."""
    def lines():
        report = values(recompute="full", data=256, batch=8, seq=4096, name="mixtral-8x7b")
        return report.values, report.activations_by_component

    freed, parts = lines()
    _without_liveness(monkeypatch)
    held, _ = lines()
    tail = parts["final_norm"] + parts["lm_head"] + parts["loss"]
    loss_backward = 8 * 4096 * 32_000 * 2
    assert freed["recompute_buffer"] == held["recompute_buffer"] - tail > 0
    assert freed["recompute_buffer"] + freed["backward_peak"] == max(held["recompute_buffer"] - tail, loss_backward)
    assert held["recompute_buffer"] + held["backward_peak"] == max(held["recompute_buffer"], loss_backward)
    assert freed["activations"] == held["activations"]


def test_nothing_is_freed_with_pipeline_stages_or_without_recomputation(monkeypatch):
    """With pipeline stages the loss lives on the last one and the first holds the most; without recomputation no layer
    is rebuilt: the lines are a caching allocator's either way."""
    def lines():
        staged = training_memory(load("mixtral-8x7b"), batch=8, seq=4096, setup=Training(recompute="full", flash=True, layout=Layout(data=128, pipeline=2, zero=3), framework="maxtext"))
        kept = values(recompute="none", data=256, batch=1, seq=4096, name="mixtral-8x7b")
        return staged.values, kept.values

    freed = lines()
    _without_liveness(monkeypatch)
    assert freed == lines()


def test_the_loss_backward_writes_one_bf16_gradient_of_the_logits():
    """MaxText's cross_entropy_with_logits backward (g · (exp_shifted / sum_exp − targets), cast back to the head's
    bf16 product) is one XLA loop: one batch·seq·vocab gradient in bf16, where PyTorch's nll_loss and log_softmax
    backward hold two in fp32. Llama 3.1 8B at batch 4 and 8,192 tokens: 4 · 8,192 · 128,256 logits."""
    logits = 4 * 8192 * 128_256
    assert values(recompute="none", batch=4).values["backward_peak"] == 2 * logits == 8_405_385_216
    assert values("torchtitan", recompute="none", batch=4).values["backward_peak"] == 2 * 4 * logits
    assert values(None, recompute="none", batch=4).values["backward_peak"] == 2 * 4 * logits


def test_llama_3_1_8b_fits_a_v6e_as_its_recipe_ran_it():
    """tpu-recipes' Llama 3.1 8B on v6e-256 (per-device batch 4 at 8,192 tokens, every layer's input offloaded to
    host memory) ran on a 32 GiB chip; with the loss's two fp32 gradients (33.6 GB) it was predicted at 54.4 GB."""
    setup = Training(recompute="full", flash=True, layout=Layout(data=256, zero=3), framework="maxtext", offload_layers=32)
    report = training_memory(load("llama-3.1-8b"), batch=4, seq=8192, setup=setup)
    assert report.total <= 32 * 2**30
