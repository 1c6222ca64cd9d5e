"""The command line: JSON contracts, numbers from outside, and bad input ending in one line and exit 2."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from checks import run, run_json

from symform.engine.store.data import formulas_dir
from symform.engine.language.families import preset_config, presets, supported_model_types


def test_params_json_matches_the_qwen3_32b_checkpoint(capsys):
    report = run_json(capsys, "params", "qwen3-32b")
    # the published checkpoint's model.safetensors.index.json: total_size 65,524,246,528 bytes of bf16
    assert report["total"] == 65_524_246_528 // 2
    assert report["active"] == report["total"]
    assert report["model"] == "qwen3-32b"
    assert sum(report["components"].values()) == report["total"]
    assert set(report["components"]) == {"embed", "layers", "final_norm", "lm_head"}


@pytest.mark.parametrize("name", [n for n, e in presets().items() if getattr(e, "checkpoint_total_size_bytes", None)])
def test_presets_match_their_published_checkpoint_sizes(capsys, name):
    entry = presets()[name]
    total = run_json(capsys, "params", name)["total"]
    stored = entry.checkpoint_total_size_bytes
    if name == "llama-2-7b":
        # Llama 2's checkpoint also stores rotary_emb.inv_freq, a non-parameter fp32 buffer
        # of d_head/2 = 64 values in each of 32 layers: 32 × 64 × 4 bytes = 8192 bytes.
        stored -= 32 * 64 * 4
    config = preset_config(name)[0]
    stored_as = config.get("torch_dtype", config.get("dtype", "bfloat16"))  # OLMo 2 13B's checkpoint is float32
    assert {"float32": 4, "bfloat16": 2, "float16": 2}[stored_as] * total == stored


def test_flops_json_shape_and_conventions(capsys):
    report = run_json(capsys, "flops", "qwen3-32b", "--batch", "8", "--seq", "4096")
    assert set(report) >= {"forward", "backward", "train", "components", "conventions"}
    assert report["train"] == report["forward"] + report["backward"] == 3 * report["forward"]
    assert sum(report["components"].values()) == report["forward"]
    assert report["conventions"] == {
        "flops_per_mac": 2, "causal": 1, "bwd_mult": 2, "count_elementwise": 0, "windowed": 1, "kv_broadcast": 0, "full_conv_window": 0,
        "fp8_index_keys": 1, "dropout": 0, "upcast": 1,
        "weight_bytes": 2, "act_bytes": 2, "kv_bytes": 2, "kv_block": 1, "stat_bytes": 4, "mask_bytes": 1, "index_bytes": 8, "loss_bytes": 4,
        "state_bytes": 4, "grad_bytes": 2, "optimizer_bytes": 4,
        "views": 0, "cpu_kernels": 0, "loss_chunks": 0, "every_expert": 0, "fp8_linears": 0, "fused_glu": 0, "fused_loss": 0, "fused_norms": 0, "grouped_experts": 0,
    }


def test_conventions_can_be_changed(capsys):
    full = run_json(capsys, "flops", "qwen3-0.6b", "--batch", "1", "--seq", "512")
    half = run_json(capsys, "flops", "qwen3-0.6b", "--batch", "1", "--seq", "512", "--convention", "causal=1/2")
    assert half["conventions"]["causal"] == 0.5
    assert half["forward"] < full["forward"]


def test_derive_params_gives_12_n_d_squared(capsys):
    report = run_json(capsys, "derive", "params", "qwen3-32b", "--assume", "standard", "--leading")
    assert report["expression"] == "12*d_model**2*n_layers"
    assert report["latex"] == "12 d^{2} n"
    # error against the checkpoint's count: 12·64·5120² / 32,762,123,264 − 1
    assert report["relative_error"] == pytest.approx(12 * 64 * 5120**2 / 32_762_123_264 - 1, rel=1e-12)


def test_derive_train_flops_gives_6_n_d(capsys):
    report = run_json(capsys, "derive", "train-flops", "qwen3-32b", "--assume", "standard", "--leading")
    assert report["expression"] == "72*d_model**2*n_layers*tokens"
    assert report["in_terms_of_params"] == "6*n_params*tokens"
    assert report["params_leading"] == "12*d_model**2*n_layers"
    assert report["relative_error"] is None and report["missing"] == ["seq", "tokens"]
    with_seq = run_json(capsys, "derive", "train-flops", "qwen3-32b", "--assume", "standard", "--leading", "--seq", "4096")
    assert isinstance(with_seq["relative_error"], float)


def test_human_outputs(capsys):
    code, out, _ = run(capsys, "params", "qwen3-32b")
    assert code == 0 and "32,762,123,264" in out and "layers/global/attn/q_proj" in out  # Qwen3 layers are global or windowed
    code, out, _ = run(capsys, "derive", "train-flops", "qwen3-32b", "--assume", "standard", "--leading")
    assert code == 0 and "6*n_params*tokens" in out
    code, out, _ = run(capsys, "latex", "params", "qwen3-32b")
    assert code == 0 and "d_{ff}" in out and "h_{kv}" in out
    code, out, _ = run(capsys, "models")
    assert code == 0 and "qwen3-32b" in out


def write(tmp_path, config, name="config.json"):
    path = tmp_path / name
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    return str(path)


def preset_json(name):
    return json.loads((formulas_dir() / "presets" / presets()[name].file).read_text())


BAD_CONFIGS = [
    ("{not json", "not valid JSON"),
    ("[]", "must be a JSON object"),
    ({"hidden_size": 8}, "no 'model_type'"),
    # an unknown architectures class too: a known one (Qwen3ForCausalLM) is now read in place of the model_type
    ({**preset_json("qwen3-0.6b"), "model_type": "fancy_net", "architectures": ["FancyNetForCausalLM"]}, f"model_type 'fancy_net' is not supported ({len(supported_model_types())} are: symform models lists them); symform import writes a declaration"),
    ({**preset_json("qwen3-0.6b"), "hidden_size": "1024"}, "field 'hidden_size' is '1024'; it must be a positive integer"),
    ({**preset_json("qwen3-0.6b"), "hidden_size": 0}, "field 'hidden_size' is 0"),
    ({**preset_json("qwen3-0.6b"), "num_hidden_layers": -2}, "field 'num_hidden_layers' is -2"),
    ({**preset_json("qwen3-0.6b"), "intermediate_size": 3072.5}, "field 'intermediate_size' is 3072.5"),
    ({**preset_json("qwen3-0.6b"), "tie_word_embeddings": "yes"}, "must be a boolean"),
    ({**preset_json("qwen3-0.6b"), "num_key_value_heads": 5}, "n_heads % n_kv_heads == 0 does not hold (n_heads=16, n_kv_heads=5)"),
    ({k: v for k, v in preset_json("qwen3-0.6b").items() if k != "vocab_size"}, "field 'vocab_size' is missing"),
]


@pytest.mark.parametrize("config, message", BAD_CONFIGS)
def test_bad_configs_end_in_one_line_and_exit_2(capsys, tmp_path, config, message):
    code, out, err = run(capsys, "params", write(tmp_path, config))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("symform: error: ")
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["params", "no-such-model"], "neither a bundled preset nor a file"),
        (["params", "/no/such/config.json"], "no such file"),
        (["flops", "qwen3-0.6b", "--batch", "0", "--seq", "8"], "must be positive"),
        (["flops", "qwen3-0.6b", "--batch", "two", "--seq", "8"], "not a whole number"),
        (["flops", "qwen3-0.6b", "--seq", "8"], "--batch"),
        (["derive", "paramz", "qwen3-0.6b"], "unknown quantity 'paramz'"),
        (["derive", "params", "qwen3-0.6b", "--assume", "nonsense"], "unknown assumption set 'nonsense'"),
        (["derive", "params", "qwen3-0.6b", "--large", "d_modl"], "unknown symbol 'd_modl'"),
        (["params", "qwen3-0.6b", "--convention", "causal=half"], "not a number"),
        (["params", "qwen3-0.6b", "--convention", "speed=2"], "unknown convention 'speed'"),
        (["params", "qwen3-0.6b", "--set", "d_model=0"], "d_model must be positive"),
        (["params", "qwen3-0.6b", "--set", "wings=2"], "has no argument 'wings'"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_end_in_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_argument_errors_also_exit_2_with_one_line():
    for argv in (["frobnicate"], ["flops", "qwen3-0.6b", "--batch", "0", "--seq", "8"], ["flops", "qwen3-0.6b", "--seq", "8"]):
        done = subprocess.run([sys.executable, "-m", "symform", *argv], capture_output=True, text=True)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("symform: error: ")


@pytest.mark.skipif(shutil.which("symform") is None, reason="the console script is installed with the package")
def test_the_console_script_runs_the_main_job():
    done = subprocess.run(["symform", "params", "qwen3-32b", "--json"], capture_output=True, text=True)
    assert done.returncode == 0 and json.loads(done.stdout)["total"] == 32_762_123_264


def test_hardware_json_contract(capsys):
    listing = run_json(capsys, "hardware")
    assert "h100-sxm" in listing["accelerators"] and "gb200-nvl72" in listing["systems"]
    device = run_json(capsys, "hardware", "h100-sxm")
    assert {"name", "memory_bytes", "hbm_bytes_per_s", "dense_flops_per_s"} <= set(device)
    # NVIDIA's H100 datasheet: 989.4 dense BF16 TFLOP/s (1,979 only with 2:4 sparsity), 3.35 TB/s
    assert device["dense_flops_per_s"]["bf16"] == pytest.approx(989.4e12, rel=1e-3)
    assert device["hbm_bytes_per_s"] == pytest.approx(3.35e12, rel=1e-3)
    code, out, err = run(capsys, "hardware", "no-such-gpu")
    assert code == 2 and out == "" and err.count("\n") == 1


def test_version_is_the_projects(capsys):
    import tomllib

    declared = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]["version"]  # the checkout's, installed or not
    code, out, err = run(capsys, "--version")
    assert (code, out.strip(), err) == (0, f"symform {declared}", "")
    import symform

    assert symform.__version__ == declared


def test_models_json_lists_every_preset_and_model_type(capsys):
    report = run_json(capsys, "models")
    assert list(report["presets"]) == list(presets())
    assert report["model_types"] == list(supported_model_types())
    for name, entry in report["presets"].items():
        assert entry["hub"] == presets()[name].hub
        assert entry["model_type"] == preset_json(name)["model_type"] in report["model_types"]


def test_set_on_a_preset_says_which_sizes_keep_the_configs_values(capsys):
    config = preset_json("qwen3-8b")
    code, out, err = run(capsys, "params", "qwen3-8b", "--set", "d_model=12288", "--json")
    assert code == 0 and json.loads(out)["values"]["d_ff"] == config["intermediate_size"]
    assert err.count("\n") == 1 and err.startswith("symform: note: --set d_model changes that size alone;")
    kept = {"d_ff": "intermediate_size", "n_heads": "num_attention_heads", "n_kv_heads": "num_key_value_heads", "d_head": "head_dim", "n_layers": "num_hidden_layers"}
    for name, field in kept.items():
        assert f"{name}={config[field]:,}" in err
    assert "d_model=" not in err
    code, _, err = run(capsys, "params", "qwen3-8b", "--set", "attention=gqa_attention")
    assert code == 0 and err == ""  # a slot, not a size: nothing kept by surprise
    code, _, err = run(capsys, "params", "qwen3-8b", "--set", "n_kv_heads=3")
    assert code == 2 and err.count("\n") == 1 and "note" not in err  # bad input: the one line of the error only
