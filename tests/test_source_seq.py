"""--source-seq: the tokens an encoder-decoder's encoder reads, on every command. Without it flops, memory and time
on T5 or BART stopped at "no value for source_seq; give one (e.g. --set source_seq=...)", and --set refused it.
Expected values are flan-t5-xxl's sizes worked by hand: d_model 4,096, 64 heads of 64, 24 encoder and 24 decoder
layers."""

from __future__ import annotations

import pytest

from checks import run, run_json

import symform
from symform.engine.errors import EvaluationError

LAYERS, INNER = 24, 64 * 64


def test_without_it_the_error_names_the_option_that_gives_it(capsys):
    code, _, err = run(capsys, "flops", "flan-t5-xxl", "--batch", "1", "--seq", "128")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no value for source_seq" in err and "--source-seq" in err and "--set" not in err


def test_the_encoder_reads_source_seq_tokens_and_the_decoder_seq(capsys):
    """Each encoder layer's query projection: 2 · batch · source_seq · d_model · inner FLOPs; the decoder's at seq."""
    found = run_json(capsys, "flops", "flan-t5-xxl", "--batch", "1", "--seq", "128", "--source-seq", "512", "--depth", "3")
    assert found["source_seq"] == 512
    assert found["components"]["encoder/layers/attn"] > 0
    code, out, _ = run(capsys, "flops", "flan-t5-xxl", "--batch", "1", "--seq", "128", "--source-seq", "512")
    assert code == 0 and "source 512 tokens (the encoder's)" in out.splitlines()[0]
    assert f"{2 * 512 * 4096 * INNER * LAYERS:,}" in out  # encoder/layers/attn/q
    assert f"{2 * 128 * 4096 * INNER * LAYERS:,}" in out  # decoder/layers/self_attn/q


def test_the_cache_holds_the_decoder_s_keys_and_the_encoder_s_for_cross_attention(capsys):
    """Self-attention keys and values of the seq decoder tokens, cross-attention ones of the source_seq encoder tokens."""
    found = run_json(capsys, "memory", "flan-t5-xxl", "--infer", "--batch", "1", "--seq", "128", "--source-seq", "512")
    assert found["components"]["kv_cache"] == 2 * LAYERS * (128 + 512) * INNER * 2 == 251_658_240


def test_time_and_roofline_take_it(capsys):
    code, out, err = run(capsys, "time", "pegasus-large", "--gpu", "h100-sxm", "--infer", "--batch", "8", "--prompt", "128", "--output", "64", "--source-seq", "512")
    assert code == 0 and "TTFT" in out, err
    code, out, err = run(capsys, "roofline", "mt5-xxl", "--gpu", "h100-sxm", "--phase", "decode", "--batch", "1", "--past", "64", "--source-seq", "256")
    assert code == 0 and "total" in out, err


def test_a_model_without_an_encoder_refuses_it(capsys):
    code, _, err = run(capsys, "flops", "qwen3-0.6b", "--batch", "1", "--seq", "128", "--source-seq", "12")
    assert code == 2 and "qwen3-0.6b has no encoder" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["0", "-3", "1.5", "x"])
def test_a_size_that_is_not_a_whole_positive_number_is_refused(capsys, value):
    code, _, err = run(capsys, "flops", "flan-t5-xxl", "--batch", "1", "--seq", "128", "--source-seq", value)
    assert code == 2 and "--source-seq" in err


def test_the_model_carries_it_as_an_evaluation_takes_it():
    model = symform.load("flan-t5-xxl")
    assert model.with_conventions(source_seq=512).evaluate("forward_flops", batch=1, seq=128) == model.evaluate("forward_flops", batch=1, seq=128, source_seq=512)
    with pytest.raises(EvaluationError, match="source_seq must be positive"):
        model.with_conventions(source_seq=0)


def test_derive_keeps_it_a_symbol_and_reads_the_option_for_its_errors(capsys):
    """derive writes the encoder's blocks in source_seq, as the decoder's in seq (the encoder is not dropped from the
    leading order as a constant), asks for --source-seq where it lacks it, and with it reports the error."""
    found = run_json(capsys, "derive", "forward_flops", "flan-t5-xxl", "--leading", "--batch", "1", "--seq", "128")
    encoder = {b["name"]: b for b in found["structure"]["blocks"]}["encoder"]
    assert "source_seq" in encoder["expression"] and "seq" not in encoder["expression"].replace("source_seq", "")
    code, out, _ = run(capsys, "derive", "forward_flops", "flan-t5-xxl", "--leading", "--batch", "1", "--seq", "128")
    assert code == 0 and "(give --source-seq to see the relative error at flan-t5-xxl)" in out
    code, out, _ = run(capsys, "derive", "forward_flops", "flan-t5-xxl", "--leading", "--batch", "1", "--seq", "128", "--source-seq", "512")
    assert code == 0 and "give --source-seq" not in out and "relative error at flan-t5-xxl" in out
    assert "source_seq" in out  # still a symbol in the forms: the option is a value for the errors alone


def test_roofline_runs_the_encoder_s_attention_over_the_source_and_cross_attention_against_it():
    """Under flash, each encoder layer's kernel runs source_seq queries against source_seq keys, each decoder layer's
    cross-attention seq queries against them (FlashAttention's bytes, Dao et al. 2022 Algorithm 1, per head)."""
    from symform.analysis.time import flash_attention as fa
    from symform.analysis.time.roofline import roofline

    batch, seq, source, head, heads = 2, 2048, 512, 64, 64
    sram = fa.DEFAULT_SRAM_BYTES // 2  # bf16 elements
    model = symform.load("flan-t5-xxl").with_conventions(source_seq=source)
    cores = roofline(model, "h100-sxm", phase="prefill", batch=batch, seq=seq, depth=None, flash=True).components
    assert cores["encoder/layers/attn/core"].bytes == 2 * batch * LAYERS * heads * fa.flash_forward(source, source, head, sram)
    assert cores["decoder/layers/cross_attn/core"].bytes == 2 * batch * LAYERS * heads * fa.flash_forward(seq, source, head, sram)


def test_a_latex_table_puts_it_into_the_models_that_read_it(capsys):
    """A table of an encoder-decoder beside a decoder-only model: the source's tokens go to the one that has an
    encoder; a table of decoder-only models alone refuses them, in one line."""
    code, out, _ = run(capsys, "latex", "forward_flops", "flan-t5-xxl", "--table", "--and", "llama-3.1-8b", "--batch", "1", "--seq", "128", "--source-seq", "512")
    assert code == 0 and "total" in out
    code, _, err = run(capsys, "latex", "forward_flops", "llama-3.1-8b", "--table", "--and", "qwen3-8b", "--batch", "1", "--seq", "128", "--source-seq", "512")
    assert code == 2 and "no encoder" in err and len(err.strip().splitlines()) == 1


def test_latex_compare_names_the_option_it_does_not_take(capsys):
    """--compare evaluates an encoder-decoder with a source as long as --seq; --source-seq is not one of its
    options, and the refusal names it (it named --compare)."""
    code, _, err = run(capsys, "latex", "--compare", "flan-t5-xxl", "llama-3.1-8b", "--source-seq", "512")
    assert code == 2 and "'--source-seq'" in err and "'--compare'" not in err
