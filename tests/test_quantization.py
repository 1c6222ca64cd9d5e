"""Checkpoint weight formats: what symform reads from a quantisation config, and the bytes that follow."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from checks import one_line_error, run, run_json
from symform import ConfigError
from symform.analysis.memory.memory import checkpoint_size, weight_bytes_per_device, weight_format_for
from symform.analysis.memory.settings import Layout, recipes
from symform.analysis.memory.quantization import checkpoint_format, kept, module_segments
from symform.engine.language.families import Checkpoint, checkpoint_facts
from symform.engine.algebra.formula import Formula
from symform.engine.graph.model import Model

DATA = Path(__file__).parent / "data" / "hub"
FP8_CONFIG = json.loads((DATA / "qwen3-32b-fp8.config.json").read_text())


def with_checkpoint(model: Model, **facts) -> Model:
    return Model(replace(model.spec, checkpoint=Checkpoint(**facts)))


def weights(model: Model, fmt=None) -> int:
    stored = weight_format_for(model, fmt)
    return int(Formula(weight_bytes_per_device(model, stored.format, Layout(), stored.keep), model.vocabulary).evaluate(**model.values))


@pytest.mark.oracle
@pytest.mark.parametrize("sizes", [{}, {"hidden_size": 200, "intermediate_size": 300, "num_hidden_layers": 2, "vocab_size": 101}])
def test_fp8_blocks_match_transformers_own_fp8_layout(sizes):
    """transformers' FP8 linear layers (weight e4m3, weight_scale_inv float32 per 128×128 block), on the meta device."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.integrations.finegrained_fp8 import replace_with_fp8_linear

    config = {**FP8_CONFIG, **sizes}
    quantization = config.pop("quantization_config")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config))
        model = replace_with_fp8_linear(model, modules_to_not_convert=["lm_head"], quantization_config=transformers.FineGrainedFP8Config(weight_block_size=tuple(quantization["weight_block_size"])))
    expected = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    assert weights(Model.from_config({**config, "quantization_config": quantization})) == expected


def test_the_published_fp8_checkpoint_differs_only_by_its_bf16_scales():
    # Qwen/Qwen3-32B-FP8 safetensors: 1558406144 BF16 and 31205621760 F8_E4M3 elements (index id 68931636948)
    model = with_checkpoint(Model.from_config(FP8_CONFIG), quantization=FP8_CONFIG["quantization_config"], total_size=2 * 1558406144 + 31205621760)
    size = checkpoint_size(model, weight_format_for(model, None))
    blocks = 64 * sum(-(-o // 128) * -(-i // 128) for o, i in [(8192, 5120), (1024, 5120), (1024, 5120), (5120, 8192), (25600, 5120), (25600, 5120), (5120, 25600)])
    assert size.difference == -2 * blocks  # float32 → bf16: two bytes fewer per block scale
    assert size.explained == {"block scales stored in bf16, not float32": -2 * blocks} and size.unexplained == 0


def test_unquantised_presets_match_their_published_total_size():
    model = Model.load("qwen3-32b")  # index.toml: 65524246528, 17 shards
    size = checkpoint_size(model, weight_format_for(model, None))
    assert size.total_size == 65524246528 and size.difference == 0
    llama = Model.load("llama-2-7b")  # 8192 bytes more: 32 layers × 64 float32 inv_freq
    size = checkpoint_size(llama, weight_format_for(llama, None))
    assert size.difference == 8192 and size.unexplained == 0


def test_modules_kept_unquantised_stay_in_bf16():
    # gpt-oss's list: attention, router, embedding and head stay bf16; only the experts take MXFP4
    keep = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]
    moe = Model.load("qwen3-30b-a3b")
    model = with_checkpoint(moe, quantization={"quant_method": "mxfp4", "modules_to_not_convert": keep})
    v = moe.values
    experts = v["n_layers"] * v["n_experts"] * 3 * v["d_model"] * v["d_ff_expert"] if "d_ff_expert" in v else None
    expert_params = int(moe.evaluate_breakdown("params", depth=None)["layers/moe/mlp/experts/gate_proj"]) * 3
    if experts is not None:
        assert experts == expert_params
    total = moe.evaluate("params")
    # MXFP4: half a byte per value, one scale byte per 32 (d_model is a multiple of 32)
    assert weights(model) == 2 * (total - expert_params) + expert_params // 2 + expert_params // 32
    assert all(kept(path, tuple(keep)) for path in ("layers/moe/attn/q_proj", "layers/moe/mlp/router", "embed", "lm_head"))
    assert not kept("layers/moe/mlp/experts/gate_proj", tuple(keep))
    assert module_segments("re:.*mlp.gate$") == ("mlp", "router")


@pytest.mark.parametrize(
    "config, name, read",
    [
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8-block", "128×128"),
        ({"quant_method": "fp8"}, "fp8", "per tensor"),
        ({"quant_method": "mxfp4"}, "mxfp4", "E8M0"),
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "gptq-int4", "groups of 128"),
        ({"quant_method": "awq", "bits": 4, "group_size": 64}, "awq-int4", "groups of 64"),
        ({"quant_method": "gptq", "bits": 4, "group_size": -1}, "gptq-int4", "groups of the whole input"),  # GPTQ's per-channel scales
        ({"quant_method": "awq", "w_bit": 4, "q_group_size": 64}, "awq-int4", "groups of 64"),  # AutoAWQ's own spelling
        ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "nf4", "nf4"),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True}, "nf4-double", "double"),
        ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "int8-rowwise", "int8"),
        ({"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"], "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}}}}, "int4-packed", "groups of 128"),
        ({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}}, "fp8-channel", "channel"),
        ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}}}, "nvfp4", "nvfp4"),
    ],
)
def test_each_quantisation_config_names_its_format(config, name, read):
    stored = checkpoint_format(checkpoint_facts({"quantization_config": config}), recipes().weight_format)
    assert stored.name == name and read in stored.read
    assert "lm_head" in stored.keep


def test_modelopt_nvfp4_is_read_from_hf_quant_config():
    quant_file = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}}
    model = with_checkpoint(Model.load("qwen3-8b"), quant_file=quant_file)
    stored = weight_format_for(model, None)
    assert stored.name == "nvfp4" and "hf_quant_config.json" in stored.read
    # Qwen3-8B's projections [out, in], 36 layers: packed E2M1, an e4m3 scale per 16, two float32 scalars each
    d, q, kv, ff = 4096, 32 * 128, 8 * 128, 12288
    shapes = [(q, d), (kv, d), (kv, d), (d, q), (ff, d), (ff, d), (d, ff)]
    linear = 36 * sum(o * i for o, i in shapes)
    nvfp4 = 36 * sum(o * i // 2 + o * i // 16 + 8 for o, i in shapes)
    assert weights(model) == 2 * (model.evaluate("params") - linear) + nvfp4


def test_an_explicit_weight_format_overrides_the_checkpoint():
    model = with_checkpoint(Model.from_config(FP8_CONFIG), quantization=FP8_CONFIG["quantization_config"])
    assert weights(model, "bf16") == 2 * model.evaluate("params")


@pytest.mark.parametrize(
    "config, words",
    [
        ({"quant_method": "hqq"}, ("hqq", "--weight-format")),
        ({"quant_method": "fp8", "weight_block_size": [128]}, ("weight_block_size",)),
        ({"quant_method": "gptq", "bits": 3}, ("3 bits",)),
        ({"quant_method": "bitsandbytes"}, ("--weight-format",)),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": True}, ("both 4 and 8 bits",)),
    ],
)
def test_configs_symform_cannot_read_say_so_in_one_line(config, words):
    facts = checkpoint_facts({"quantization_config": config})
    one_line_error(ConfigError, lambda: checkpoint_format(facts, recipes().weight_format), *words)


GPT_OSS_TOTAL_SIZE = {
    # model.safetensors.index.json metadata.total_size: gpt-oss-20b quoted verbatim in index id 31112482743
    # (and 66618953322); gpt-oss-120b's tensor bytes in index id 59724567210
    "gpt-oss-20b": 13761264768,
    "gpt-oss-120b": 65248815744,
}


@pytest.mark.parametrize("name", sorted(GPT_OSS_TOTAL_SIZE))
def test_gpt_oss_mxfp4_weights_equal_the_published_size_to_the_byte(name):
    from symform.engine.language.families import supported_model_types

    if "gpt_oss" not in supported_model_types():
        pytest.skip("the gpt_oss family is not bundled in this checkout")
    config = json.loads((DATA / "gpt-oss-20b.config.json").read_text())
    if name == "gpt-oss-120b":  # the same fields but for 36 layers and 128 experts
        config = {**config, "num_hidden_layers": 36, "num_local_experts": 128, "layer_types": ["sliding_attention", "full_attention"] * 18}
    model = Model.from_config(config, name=name)
    model = with_checkpoint(model, quantization=config["quantization_config"], total_size=GPT_OSS_TOTAL_SIZE[name])
    stored = weight_format_for(model, None)
    assert stored.name == "mxfp4"
    size = checkpoint_size(model, stored)
    assert size.weight_bytes == GPT_OSS_TOTAL_SIZE[name] and size.difference == 0


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
def test_mxfp4_and_nvfp4_are_formats_users_choose(capsys, fmt):
    report = run_json(capsys, "memory", "qwen3-8b", "--infer", "--batch", "1", "--seq", "1", "--weight-format", fmt)
    assert report["assumptions"]["weight_format"] == fmt
    assert report["components"]["weights"] == weights(Model.load("qwen3-8b"), fmt)


def test_roofline_and_time_read_the_checkpoint_weights_at_their_rate(capsys):
    path = str(DATA / "qwen3-32b-fp8.config.json")
    workload = ("--gpu", "h100-sxm", "--phase", "decode", "--batch", "1", "--context", "1000")
    fp8 = run_json(capsys, "roofline", path, *workload)
    bf16 = run_json(capsys, "roofline", path, *workload, "--weight-format", "bf16")
    assert fp8["dtype"] == "fp8" and bf16["dtype"] == "bf16"
    assert any("128×128" in note for note in fp8["notes"])
    model = with_checkpoint(Model.from_config(FP8_CONFIG), quantization=FP8_CONFIG["quantization_config"])
    # decode reads every stored matrix once; the embedding and norms stay bf16 in both: the gap is what fp8 saves
    assert bf16["bytes"] - fp8["bytes"] == weights(model, "bf16") - weights(model)
    served = run_json(capsys, "time", path, "--infer", "--gpu", "h100-sxm", "--batch", "1", "--prompt", "100", "--output", "10")
    assert served["dtype"] == "fp8" and "128×128" in served["assumptions"]["weights"]


@pytest.mark.oracle
def test_a_saved_checkpoint_is_measured_from_its_safetensors_headers(tmp_path, capsys):
    """transformers' own save_pretrained of a tiny Qwen3 in bf16: symform reads the headers (never the weights)."""
    pytest.importorskip("transformers")
    from oracle import save_tiny_qwen3

    module = save_tiny_qwen3(tmp_path)
    stored = sum(p.numel() * p.element_size() for p in module.state_dict().values())
    report = run_json(capsys, "memory", str(tmp_path / "config.json"), "--infer", "--batch", "1", "--seq", "1")
    size = report["assumptions"]["checkpoint_size"]
    assert size["total_size"] == size["symform_weight_bytes"] == report["components"]["weights"] == stored
    elements = sum(p.numel() for p in module.state_dict().values())
    assert size["dtypes"] == {"BF16": {"tensors": len(module.state_dict()), "elements": elements, "bytes": stored}}


def test_a_broken_safetensors_file_beside_a_config_is_one_line(tmp_path, capsys):
    (tmp_path / "config.json").write_text((DATA / "qwen3-32b-fp8.config.json").read_text())
    (tmp_path / "model.safetensors").write_bytes((10**12).to_bytes(8, "little") + b"{}")
    code, out, err = run(capsys, "params", str(tmp_path / "config.json"))
    assert code == 2 and out == "" and err.count("\n") == 1 and "not a safetensors file" in err
