"""Training frameworks as data (formulas/frameworks): each one's selective recomputation, buffers and overheads,
derived by hand from the framework's own defaults; eager adds nothing to the exact accounting."""

from __future__ import annotations

import dataclasses

import pytest
import sympy

from checks import run, run_json
from symform import EvaluationError, load
from symform.analysis.memory.frameworks import frameworks
from symform.analysis.memory.memory import Training, training_memory
from symform.analysis.memory.settings import Layout

# Llama 3.1 8B: d 4096, 32 layers, 32 query and 8 key/value heads of 128, d_ff 14,336, vocabulary 128,256
EMBEDDING = 128_256 * 4096  # the largest FSDP unit: one decoder layer holds 218,112,000 parameters


def values(framework, *, recompute="selective", zero=3, data=8, batch=2, seq=8192, name="llama-3.1-8b", precision="mixed"):
    setup = Training(precision=precision, recompute=recompute, flash=True, layout=Layout(data=data, zero=zero), framework=framework)
    return training_memory(load(name), batch=batch, seq=seq, setup=setup)


def test_torchtitan_selective_keeps_the_layer_input_every_second_product_and_the_attention_kernels_results():
    """torchtitan's per-op policy (activation_checkpoint.py, _save_list, mm_count % 2): of the seven products of a
    Llama layer, wq (1st), wv (3rd), w1 (5th) and w2 (7th) are saved, wk, wo and w3 recomputed; the flash kernel's
    output and fp32 log-sum-exp are saved; the checkpoint keeps the layer's input. In bf16, per token and layer:
    2·(4096 input + 4096 wq + 1024 wv + 4096 attention output + 14336 w1 + 4096 w2) + 4·32 = 63,616 bytes."""
    report = values("torchtitan")
    assert 2 * (4096 + 4096 + 1024 + 4096 + 14336 + 4096) + 4 * 32 == 63_616
    assert report.activations_by_component["layers"] == 32 * 63_616 * 2 * 8192


def test_torchtitan_norms_keep_their_input_and_the_fp32_row_statistic():
    """torch.nn.RMSNorm on CUDA runs PyTorch's fused kernel, whose backward keeps the bf16 input and each row's fp32
    1/rms (FusedRmsNormBackward0: input, weight, rstd), not transformers' fp32 copy of the input and bf16 normalised
    values. Llama 3.1 8B at batch 1, seq 4096 without recomputation, per token and layer: two norms 2·(2·4096 + 4),
    the projections' input 2·4096, the kernel's Q 2·32·128, K and V 2·8·256 and log-sum-exp 4·32, the output
    projection's input 2·4096, the MLP's input 2·4096 and four d_ff-wide tensors 8·14,336: 168,072 bytes; eager
    PyTorch with transformers' modules keeps 4·4096 bytes more per norm."""
    per_token = 2 * (2 * 4096 + 4) + 2 * 4096 + 2 * 32 * 128 + 2 * 8 * 256 + 4 * 32 + 2 * 4096 + 2 * 4096 + 8 * 14336
    assert per_token == 168_072
    torchtitan, eager = (values(f, recompute="none", batch=1, seq=4096, zero=0, data=1) for f in ("torchtitan", "eager"))
    assert torchtitan.activations_by_component["layers"] == 32 * 4096 * per_token
    assert eager.activations_by_component["layers"] - torchtitan.activations_by_component["layers"] == 32 * 4096 * 2 * 4 * 4096


def test_megatron_selective_recomputes_only_the_attention_core():
    """Megatron's selective recomputation under FlashAttention keeps what the kernel reads (Q, K, V) and drops only its
    log-sum-exp; its layers keep far more than torchtitan's per-op policy."""
    megatron, torchtitan = values("megatron"), values("torchtitan")
    none = values("megatron", recompute="none")
    assert none.activations_by_component["layers"] - megatron.activations_by_component["layers"] == 32 * 4 * 2 * 32 * 8192
    assert megatron.activations_by_component["layers"] > torchtitan.activations_by_component["layers"]


def test_fsdp_buffers_are_two_gathered_units_and_one_unit_of_fp32_gradients():
    """FSDP2 prefetches one unit while another computes: two of the largest unit (here the embedding, 525,336,576
    parameters, larger than a layer) in bf16, and that unit's fp32 gradients before its reduce-scatter."""
    report = values("torchtitan")
    assert report.values["fsdp_gathered_params"] == 2 * EMBEDDING * 2
    assert report.values["fsdp_unsharded_grads"] == EMBEDDING * 4
    assert report.values["cuda_context"] == 400_000_000
    held = report.total - report.values["cuda_context"] - report.values["allocator_reserve"]
    assert report.values["allocator_reserve"] == held / 50


def test_deepspeed_buckets_at_the_config_defaults():
    """DeepSpeedZeroConfig: reduce_bucket_size = allgather_bucket_size = 5e8 elements, stage3_prefetch_bucket_size =
    5e7, stage3_max_live_parameters = 1e9. In bf16 (2 bytes), a bucket of 5e8 elements is 1e9 bytes."""
    zero2 = values("deepspeed", zero=2).values
    assert zero2["zero_reduce_bucket"] == zero2["zero_allgather_bucket"] == 10**9
    zero3 = values("deepspeed", zero=3).values
    assert zero3["zero3_live_params"] == (EMBEDDING + 5 * 10**7) * 2 and "zero_allgather_bucket" not in zero3
    small = values("deepspeed", zero=2, name="gpt2").values  # 124,439,808 parameters: a bucket holds them all
    assert small["zero_reduce_bucket"] == 124_439_808 * 2


def test_megatron_accumulates_gradients_in_fp32():
    """With bf16, Megatron-LM accumulates and reduces gradients in fp32 main_grad buffers: 2 more bytes a parameter
    than the mixed recipe's bf16 gradients, none more with mixed-fp32-grads."""
    assert values("megatron", zero=0, data=1).values["fp32_grad_buffer"] == 2 * 8_030_261_248
    assert "fp32_grad_buffer" not in {k for k, v in values("megatron", zero=0, data=1, precision="mixed-fp32-grads").values.items() if v}


def test_megatron_gradient_buffers_in_bf16_where_grad_reduce_fp32_is_off():
    """Megatron-Core's main_grad buffers take the parameters' dtype where grad_reduce_in_fp32 is off (Megatron-Bridge's
    performance recipes): Llama 3.1 8B (8,030,261,248 parameters) on one rank holds 2 bytes of gradient buffer a
    parameter, 16,060,522,496 bytes, not 4 (32,121,044,992); the total falls by those 2 bytes a parameter and the
    allocator's reserve on them (1/50), 16,060,522,496 × 51/50. Sharded over 8 ranks by Megatron-FSDP, 1/8 of each."""
    params = 8_030_261_248
    for zero, data in ((0, 1), (3, 8)):
        fp32 = values("megatron", zero=zero, data=data)
        bf16 = training_memory(load("llama-3.1-8b"), batch=2, seq=8192, setup=Training(recompute="selective", layout=Layout(data=data, zero=zero), framework="megatron", grad_reduce_fp32=False))
        buffers = lambda report: report.values["gradients"] + report.values.get("fp32_grad_buffer", 0)
        assert buffers(fp32) == params * 4 // data and buffers(bf16) == params * 2 // data
        assert "fp32_grad_buffer" not in bf16.values and bf16.assumptions["framework"]["settings"] == {"grad_reduce_fp32": False}
        assert fp32.total - bf16.total == sympy.Rational(params * 2 * 51, data * 50)


def test_the_megatron_default_keeps_fp32_gradient_buffers_and_says_where_it_comes_from():
    """Unchanged by the setting: the default is the fp32 buffers Megatron-LM's --bf16 turns on, stated with its source;
    --grad-reduce-fp32 given is the default."""
    megatron = frameworks()["megatron"]
    assert megatron.defaults.grad_reduce_fp32.value is True and "accumulate_allreduce_grads_in_fp32" in megatron.defaults.grad_reduce_fp32.source
    on = training_memory(load("llama-3.1-8b"), batch=2, seq=8192, setup=Training(recompute="selective", layout=Layout(data=1), framework="megatron", grad_reduce_fp32=True))
    assert on.values == values("megatron", zero=0, data=1).values


def test_grad_reduce_fp32_under_a_framework_without_it_is_refused():
    with pytest.raises(EvaluationError, match="framework 'torchtitan' has no grad reduce fp32 setting"):
        training_memory(load("gpt2"), batch=1, seq=16, setup=Training(framework="torchtitan", grad_reduce_fp32=False))


def test_16_bit_gradient_buffers_under_an_fp32_gradient_precision_are_refused(capsys):
    """mixed-fp32-grads keeps fp32 gradients: asking for 16-bit buffers with it is a contradiction, not a silent pick."""
    from symform import ConfigError
    from symform.interface.cli.cli import main

    with pytest.raises(ConfigError, match="grad_reduce_fp32 off keeps the gradient buffers at the parameters' 16 bits"):
        training_memory(load("gpt2"), batch=1, seq=16, setup=Training(framework="megatron", precision="mixed-fp32-grads", grad_reduce_fp32=False))
    assert training_memory(load("gpt2"), batch=1, seq=16, setup=Training(framework="megatron", precision="mixed-fp32-grads", grad_reduce_fp32=True)).total > 0
    assert main(["memory", "gpt2", "--train", "--batch", "1", "--seq", "16", "--framework", "megatron", "--no-grad-reduce-fp32", "--precision", "mixed-fp32-grads"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_cli_turns_the_fp32_gradient_buffers_off(capsys):
    args = ("memory", "llama-3.1-8b", "--train", "--batch", "1", "--seq", "1024", "--framework", "megatron")
    default, off = run_json(capsys, *args), run_json(capsys, *args, "--no-grad-reduce-fp32")
    assert default["components"]["fp32_grad_buffer"] == 2 * 8_030_261_248 and "fp32_grad_buffer" not in off["components"]
    assert off["assumptions"]["framework"]["settings"] == {"grad_reduce_fp32": False}
    code, out, _ = run(capsys, *args, "--no-grad-reduce-fp32")
    assert code == 0 and "given: grad_reduce_fp32 off" in out
    code, _, err = run(capsys, "memory", "llama-3.1-8b", "--train", "--batch", "1", "--seq", "1024", "--no-grad-reduce-fp32")
    assert code == 2 and "no grad reduce fp32 setting" in err


def test_the_eager_framework_is_the_declared_tensors_alone():
    plain = training_memory(load("llama-3.1-8b"), batch=1, seq=512, setup=Training(recompute="selective"))
    eager = training_memory(load("llama-3.1-8b"), batch=1, seq=512, setup=Training(recompute="selective", framework="eager"))
    assert eager.values == plain.values
    assert "CUDA context" in eager.assumptions["framework"]["not_modelled"]


def test_every_framework_field_names_its_source():
    for fw in frameworks().values():
        assert fw.source and (fw.selective is None or fw.selective.source) and (fw.loss is None or fw.loss.source)
        assert all(o.source for o in fw.overheads) and all(c.source for c in fw.conventions.values())
        given = [getattr(fw.defaults, f.name) for f in dataclasses.fields(fw.defaults)]
        assert all(d.source for d in given if d is not None)


def test_unknown_framework_is_one_line():
    with pytest.raises(EvaluationError, match="unknown framework 'jax'"):
        training_memory(load("gpt2"), batch=1, seq=16, setup=Training(framework="jax"))


def test_cli_names_the_framework_and_applies_its_layout_defaults(capsys):
    report = run_json(capsys, "memory", "llama-3.1-8b", "--train", "--batch", "1", "--seq", "1024", "--tp", "2", "--framework", "megatron")
    assert report["assumptions"]["framework"]["name"] == "megatron"
    assert report["assumptions"]["layout"]["sequence"] is True and report["assumptions"]["layout"]["distributed_optimizer"] is True
    default = run_json(capsys, "memory", "llama-3.1-8b", "--train", "--batch", "1", "--seq", "1024")
    assert default["assumptions"]["framework"]["name"] == "torchtitan"
    eager = run_json(capsys, "memory", "llama-3.1-8b", "--train", "--batch", "1", "--seq", "1024", "--accounting", "eager")
    assert eager["assumptions"]["framework"]["name"] == "eager"
    off = run_json(capsys, "memory", "llama-3.1-8b", "--train", "--batch", "1", "--seq", "1024", "--tp", "2", "--framework", "megatron", "--no-sp")
    assert off["assumptions"]["layout"]["sequence"] is False
    code, out, _ = run(capsys, "memory", "llama-3.1-8b", "--train", "--batch", "1", "--seq", "1024")
    assert code == 0 and "framework torchtitan:" in out


def test_cli_refuses_an_unknown_framework(capsys):
    code, _, err = run(capsys, "memory", "gpt2", "--train", "--batch", "1", "--seq", "16", "--framework", "jax")
    assert code == 2 and "jax" in err


def test_the_readme_training_time_examples_fit(capsys):
    """Defect 4: the README's own `symform time ... --train` examples are runs that ran (Llama 3.1 70B with TP 8 and
    PP 4, as Megatron-style frameworks run it with sequence parallelism; Llama 3.1 8B under FSDP with selective
    recomputation); their memory check must not say DOES NOT FIT."""
    import shlex
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    commands = [line.split("#")[0].strip() for line in readme.splitlines() if line.startswith("symform time ") and " --train" in line]
    assert len(commands) >= 2
    for command in commands:
        code, out, err = run(capsys, *shlex.split(command)[1:])
        assert code == 0, err
        assert "DOES NOT FIT" not in out and "memory/device" in out, command


def test_a_framework_on_a_symbolic_model_asks_for_its_sizes():
    from symform import Model

    with pytest.raises(EvaluationError, match="buffers need the model's sizes"):
        training_memory(Model.from_component("optional_cross_attention_lm"), batch=1, seq=16, setup=Training(framework="torchtitan"))


def test_fit_under_a_framework_solves_with_its_buffers(capsys):
    report = run_json(capsys, "fit", "llama-3.1-8b", "--train", "--gpu", "h100-sxm", "--solve", "batch", "--seq", "8192", "--zero", "3", "--dp", "8", "--recompute", "selective", "--framework", "deepspeed")
    assert report["largest"] >= 1 and report["at_largest"]["total"] <= 80 * 2**30
    assert report["at_largest"]["components"]["zero3_live_params"] == (EMBEDDING + 5 * 10**7) * 2


def test_a_framework_without_selective_recomputation_says_so_in_one_line():
    with pytest.raises(EvaluationError, match="framework 'llm-foundry' has no selective recomputation; choose --recompute none or full"):
        training_memory(load("gpt2"), batch=1, seq=16, setup=Training(recompute="selective", framework="llm-foundry"))


def test_a_malformed_framework_file_is_one_line_from_the_cli(tmp_path, monkeypatch, capsys):
    """The frameworks' names are read while the command line is parsed: a malformed file there is one line, exit 2."""
    import shutil

    from symform.analysis.memory import frameworks as module
    from symform.engine.store import data
    from symform.interface.cli.cli import main

    shutil.copytree(data.formulas_dir(), tmp_path / "formulas")
    (tmp_path / "formulas" / "frameworks" / "broken.toml").write_text('doc = "no source"\n')
    monkeypatch.setattr(data, "data_root", lambda: tmp_path)
    module.frameworks.cache_clear()
    try:
        code = main(["plan", "gpt2", "--gpu", "a100-sxm-80gb", "--gpus", "8", "--global-batch", "64", "--seq", "1024"])
    finally:
        monkeypatch.undo()
        module.frameworks.cache_clear()
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("symform: error: frameworks/broken.toml:") and len(err.strip().splitlines()) == 1


def test_a_convention_the_user_sets_wins_over_the_frameworks(capsys):
    """Megatron's fused cross-entropy sets loss_chunks = 1; a user's --convention loss_chunks=4 must hold: the loss's
    backward then holds one bf16 gradient of a quarter of the logits, 512·128,256·2 / 4 bytes for llama-3.1-8b."""
    args = ("memory", "llama-3.1-8b", "--train", "--batch", "1", "--seq", "512", "--framework", "megatron")
    framework = run_json(capsys, *args)
    chosen = run_json(capsys, *args, "--convention", "loss_chunks=4")
    assert framework["components"]["backward_peak"] == 512 * 128256 * 2
    assert chosen["components"]["backward_peak"] == 512 * 128256 * 2 // 4
    assert chosen["assumptions"]["conventions"]["loss_chunks"] == 4
    assert run_json(capsys, *args, "--convention", "upcast=1")["assumptions"]["conventions"]["upcast"] == 1


def test_conventions_given_at_load_are_kept_under_a_framework():
    from symform.analysis.memory.frameworks import framework, under

    model = under(load("llama-3.1-8b", conventions={"loss_chunks": 3}), framework("megatron"), 2)
    assert model.conventions[model.vocabulary["loss_chunks"]] == 3
    assert under(load("llama-3.1-8b"), framework("megatron"), 2).conventions[model.vocabulary["loss_chunks"]] == 1
