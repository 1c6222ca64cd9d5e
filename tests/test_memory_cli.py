"""symform memory and symform fit: the JSON contract, the human table's units, bad input."""


import pytest
from checks import run, run_json


def test_memory_json_contract_for_training(capsys):
    report = run_json(capsys, "memory", "llama-3-8b", "--train", "--batch", "2", "--seq", "1024", "--zero", "1", "--dp", "8")
    assert set(report) >= {"total", "components", "assumptions"}
    assert set(report["components"]) >= {"weights", "gradients", "optimizer", "activations"}
    assert report["total"] == sum(report["components"].values())
    params = 8_030_261_248  # llama-3-8b's numel()
    assert report["components"]["weights"] == 2 * params
    assert report["components"]["optimizer"] == 8 * params // 8  # two fp32 states, sharded over 8 ranks
    assert report["assumptions"]["layout"]["zero"] == 1
    assert report["assumptions"]["workload"] == {"batch": 2, "seq": 1024}


def test_memory_json_contract_for_serving(capsys):
    report = run_json(capsys, "memory", "qwen3-8b", "--infer", "--batch", "4", "--seq", "1", "--past", "4095", "--kv-dtype", "fp8")
    assert set(report["components"]) == {"weights", "kv_cache", "activations"}
    assert report["components"]["kv_cache"] == 4 * 4096 * 36 * 2 * 8 * 128  # fp8: 1 byte per K and V value
    assert report["assumptions"]["activations_rule_of_thumb_bytes"] > 0


def test_memory_table_labels_its_units(capsys):
    code, out, _ = run(capsys, "memory", "qwen3-0.6b", "--train", "--batch", "1", "--seq", "512", "--gpu", "a100-sxm-80gb")
    assert code == 0
    assert "GB (10^9)" in out and "GiB (2^30)" in out and "fits" in out


def test_fit_solves_for_the_batch_and_reports_the_memory_there(capsys):
    report = run_json(capsys, "fit", "qwen3-0.6b", "--train", "--precision", "bf16", "--memory", "80e9", "--solve", "batch", "--seq", "512")
    largest = report["largest"]
    assert report["at_largest"]["total"] <= 80 * 10**9
    over = run_json(capsys, "memory", "qwen3-0.6b", "--train", "--precision", "bf16", "--batch", str(largest + 1), "--seq", "512")
    assert over["total"] > 80 * 10**9
    assert report["closed_form"] is not None


def test_fit_the_longest_context_a_decode_batch_can_cache(capsys):
    report = run_json(capsys, "fit", "llama-3-8b", "--infer", "--gpu", "h100-sxm", "--solve", "past", "--batch", "8")
    budget = report["budget_bytes"]
    assert budget == 80 * 2**30
    at = report["at_largest"]
    assert at["total"] <= budget and at["assumptions"]["workload"]["past"] == report["largest"]


@pytest.mark.parametrize(
    "argv",
    [
        ["memory", "llama-3-8b", "--batch", "1", "--seq", "8"],  # neither --train nor --infer
        ["memory", "llama-3-8b", "--train", "--batch", "0", "--seq", "8"],
        ["memory", "llama-3-8b", "--train", "--batch", "1", "--seq", "8", "--tp", "3"],
        ["memory", "llama-3-8b", "--train", "--batch", "1", "--seq", "8", "--precision", "fp64"],
        ["memory", "llama-3-8b", "--train", "--batch", "1", "--seq", "8", "--sp"],
        ["memory", "llama-3-8b", "--infer", "--batch", "1", "--seq", "8", "--gpu", "hgx-h100-8gpu"],
        ["fit", "llama-3-8b", "--train", "--memory", "eighty", "--solve", "batch", "--seq", "8"],
        ["fit", "llama-3-8b", "--train", "--memory", "80GB", "--solve", "batch"],
        ["fit", "llama-3-8b", "--train", "--memory", "80GB", "--solve", "past", "--batch", "1", "--seq", "8"],
    ],
)
def test_bad_memory_input_is_one_line_and_exit_2(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err


SERVING = ["memory", "llama-3-8b", "--infer", "--batch", "2", "--seq", "1", "--past", "1023"]
KV_PER_BYTE = 2 * 1024 * 32 * 2 * 8 * 128  # batch 2 × 1024 tokens × 32 layers × K and V × 8 heads × 128: values cached


def test_an_explicit_kv_bytes_convention_is_not_overridden(capsys):
    assert run_json(capsys, *SERVING)["components"]["kv_cache"] == 2 * KV_PER_BYTE  # bf16 by default
    for extra in (["--convention", "kv_bytes=1"], ["--kv-dtype", "fp8"], ["--convention", "kv_bytes=1", "--kv-dtype", "int8"]):
        report = run_json(capsys, *SERVING, *extra)
        assert report["components"]["kv_cache"] == KV_PER_BYTE and report["assumptions"]["kv_bytes"] == 1, extra
    code, _, err = run(capsys, *SERVING, "--convention", "kv_bytes=1", "--kv-dtype", "bf16")
    assert code == 2 and err.count("\n") == 1 and "--kv-dtype" in err and "--convention kv_bytes=1" in err
    code, _, err = run(capsys, *SERVING, "--convention", "kv_block=16", "--kv-block", "8")
    assert code == 2 and err.count("\n") == 1 and "kv_block" in err
    report = run_json(capsys, *SERVING, "--convention", "kv_block=16")
    assert report["assumptions"]["kv_block_tokens"] == 16 and report["components"]["kv_cache"] == 2 * KV_PER_BYTE  # 1024 = 64 blocks


def test_any_bit_width_for_the_kv_cache_and_the_weights(capsys):
    from fractions import Fraction

    from symform import load
    from symform.analysis.memory.memory import Inference, inference_memory

    six = run_json(capsys, *SERVING, "--kv-dtype", "6bit", "--weight-format", "6bit")
    assert six["components"]["kv_cache"] == KV_PER_BYTE * 6 // 8  # exact: 3/4 of a byte per value
    assert six["assumptions"]["kv_bytes"] == 0.75 and six["assumptions"]["bytes_per_weight"] == 0.75
    params = 8_030_261_248  # llama-3-8b's numel()
    unquantised = (2 * 32 + 1) * 4096 + 128256 * 4096  # norms and the embedding stay in bf16
    assert six["components"]["weights"] == 2 * unquantised + (params - unquantised) * 6 // 8
    api = inference_memory(load("llama-3-8b").with_conventions(kv_bytes=Fraction(3, 4)), batch=2, seq=1, past=1023, setup=Inference())
    assert api.values["kv_cache"] == KV_PER_BYTE * Fraction(3, 4)  # the model's convention is kept by a default setup
    for bad in (["--kv-dtype", "0bit"], ["--kv-dtype", "6 bits"], ["--weight-format", "bf17"]):
        code, _, err = run(capsys, *SERVING, *bad)
        assert code == 2 and err.count("\n") == 1 and "bit width such as 6bit" in err, bad


def test_fit_past_reports_the_memory_limit_and_the_models_own_context(capsys):
    argv = ["fit", "llama-3.1-8b", "--infer", "--gpu", "h100-sxm", "--solve", "past", "--batch", "1"]
    report = run_json(capsys, *argv)
    # config.json of meta-llama/Llama-3.1-8B: max_position_embeddings 131072, rope_scaling llama3 ×8 over 8192
    assert report["context_limit"] == {"tokens": 131072, "field": "max_position_embeddings", "rope_scaling": {"type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}}
    assert report["largest"] > 131072  # 80 GiB holds far more cache than the model reads
    assert report["largest_within_context"] == 131072 - 1  # past + the one new token
    code, out, _ = run(capsys, *argv)
    assert code == 0 and f"{report['largest']:,}" in out
    assert "the model's own context: 131,072 tokens (max_position_embeddings; RoPE scaling llama3, factor 8 over 8,192)" in out
    assert "past ≤ 131,071 with seq 1" in out and "largest usable 131,071" in out


def test_fit_seq_where_memory_is_the_tighter_limit(capsys):
    report = run_json(capsys, "fit", "qwen3-8b", "--train", "--memory", "40GB", "--solve", "seq", "--batch", "1", "--zero", "3", "--dp", "8", "--flash", "--recompute", "full")
    assert report["context_limit"]["tokens"] == 40960 and report["context_limit"]["rope_scaling"] is None
    assert report["largest_within_context"] == report["largest"] < 40960


@pytest.mark.parametrize(("layout", "step"), [(["--tp", "4"], 4), (["--tp", "4", "--cp", "2"], 8), (["--tp", "4", "--no-sp"], 1), (["--cp", "2", "--tp", "2", "--no-sp"], 4), (["--cp", "3", "--tp", "2", "--no-sp"], 6)])
def test_fit_seq_answers_a_sequence_its_ranks_split_evenly(capsys, layout, step):
    """Context parallelism cuts each sequence into two equal chunks per rank (Megatron-Core's zigzag split), and with
    sequence parallelism (torchtitan's default beside --tp) each rank's share splits over the tensor ranks too. So
    fit answers the largest multiple of what splits it that fits: the next multiple does not, and memory (like time)
    refuses a sequence that does not split."""
    argv = ["llama-3.1-8b", "--train", "--batch", "1", "--gpu", "h100-sxm", *layout]
    report = run_json(capsys, "fit", *argv, "--solve", "seq")
    largest = report["largest"]
    assert largest > 0 and largest % step == 0 and report["at_largest"]["total"] <= 80 * 2**30
    assert run_json(capsys, "memory", *argv, "--seq", str(largest + step))["total"] > 80 * 2**30
    if step > 1:
        code, _, err = run(capsys, "memory", *argv, "--seq", str(largest + 1))
        assert code == 2 and ("do not split evenly" in err or "does not split into" in err)


def test_every_preset_states_its_context_as_its_config_does():
    import json

    from symform import load, presets
    from symform.engine.store.data import formulas_dir

    # files that leave it out: their config class's default (transformers' Gemma3TextConfig: max_position_embeddings
    # 131072; GemmaConfig, PaliGemma's text_config: 8192)
    unstated = {"gemma-3-4b": 131072, "gemma-3-12b": 131072, "gemma-3-27b": 131072, "paligemma-3b-pt-224": 8192}
    for name, entry in presets().items():
        config = json.loads((formulas_dir() / "presets" / entry.file).read_text())
        config = config.get("text_config", config)  # a nested config (Qwen3.5) states it in its text_config
        stated = config.get("max_position_embeddings", config.get("n_positions", unstated.get(name)))
        limit = load(name).context_limit
        if stated is None:  # no position table or limit at all (Mamba-2; T5's relative position buckets)
            assert limit is None, name
            continue
        # RoBERTa's positions start after its padding id (pad_token_id + 1 = 2): a 514-row table holds 512 tokens
        reserved = 2 if config.get("model_type") in ("roberta", "xlm-roberta", "camembert") else 0
        assert limit.tokens == stated - reserved, name
    assert load("docs/examples/linear_attention.toml").context_limit is None  # a declaration states no context


def test_memory_says_when_a_sequence_exceeds_the_models_context(capsys):
    code, out, _ = run(capsys, "memory", "gpt2", "--infer", "--batch", "1", "--seq", "1", "--past", "1024")
    assert code == 0 and "note: 1,025 tokens per sequence exceed the model's own context, 1,024 tokens (n_positions)" in out
    report = run_json(capsys, "memory", "gpt2", "--infer", "--batch", "1", "--seq", "1", "--past", "1023")
    assert report["context_limit"] == {"tokens": 1024, "field": "n_positions", "rope_scaling": None, "exceeded": False}
    code, out, _ = run(capsys, "memory", "gpt2", "--train", "--batch", "1", "--seq", "1024")
    assert code == 0 and "exceed" not in out
