"""``symform check``: declarations against a tiny instance of the real PyTorch module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from checks import one_line_error, run
from symform import ConfigError, Model
from symform.engine.language.families import presets

DATA = Path(__file__).parent / "data" / "check"
ROOT = Path(__file__).resolve().parents[1]

# one preset of each bundled family
FAMILIES = {}
for _name in presets():
    FAMILIES.setdefault(Model.load(_name).spec.family, _name)

# Families whose preset's saved activations check does not yet match to the byte, with why; check reports
# the gap rather than hiding it. Every other family's agree (eager accounting on the CPU, as check counts).
SAVED_GAP = {
    "falcon_h1": "the μP-scaled Mamba-2 mixer (its μP vector is a buffer products keep, the gate without a norm) keeps tensors symform does not declare",
    "jamba": "transformers' torch scan runs token by token, keeping every step's state; symform declares the projections' inputs only",
    **{family: "T5's dropout sites and its fp32 RMS norms' tensors are not declared yet" for family in ("t5", "mt5")},
}

# Families that check cannot yet build or compare at tiny sizes, each with what is left undone.
# A family listed here is expected to fail, strictly: the day check handles it, the test says so.
CHECK_NOT_YET: dict[str, str] = {
    "llama4_vl": "transformers 5.24's Llama4ForConditionalGeneration fails in its own forward (it reads image_outputs "
    "from its language model's output, which has none); tests/test_family_llama4_vl.py patches that for its oracles",
}


@pytest.fixture(scope="module")
def check():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from symform.analysis.memory.oracle_check import check

    return check


@pytest.mark.oracle
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_agrees_with_its_real_module(check, family, request):
    if family in CHECK_NOT_YET:  # expected to fail, strictly: the day check handles the family this test says so
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"{family}: {CHECK_NOT_YET[family]}"))
    report = check(Model.load(FAMILIES[family]))
    rows = {(r.quantity, r.part): r for r in report.rows}
    assert rows[("params", "total")].pytorch > 0 and rows[("forward_flops", "total")].pytorch > 0
    for row in report.rows:
        if row.quantity != "saved_activations" or family not in SAVED_GAP:
            assert row.agrees, (family, row)
    if family in SAVED_GAP:  # strictly: the day a gap closes, this says so
        assert not rows[("saved_activations", "total")].agrees, f"{family} now agrees: take it out of SAVED_GAP"


@pytest.mark.oracle
def test_a_wrong_ffn_is_found_in_the_mlp_and_nowhere_else(check, capsys):
    report = check(Model.load(DATA / "wrong_ffn.toml"))
    wrong_parts = {(r.quantity, r.part) for r in report.differences if r.part != "total"}
    assert wrong_parts == {("params", "mlp"), ("forward_flops", "mlp")}
    rows = {(r.quantity, r.part): r for r in report.rows}
    assert rows[("params", "mlp")].pytorch - rows[("params", "mlp")].symform == 2 * 64 * 96  # one missing 64×96 projection per layer
    code, out, err = run(capsys, "check", str(DATA / "wrong_ffn.toml"))
    assert code == 0 and "look first at mlp" in out


@pytest.mark.oracle
def test_the_same_declaration_done_right_agrees(check):
    assert check(Model.load(DATA / "right_ffn.toml")).differences == []


def test_a_declaration_without_its_transformers_config_is_one_line(tmp_path, check):
    text = (DATA / "right_ffn.toml").read_text()
    path = tmp_path / "no_config.toml"
    path.write_text(text[: text.index("[model.transformers]")])
    one_line_error(ConfigError, lambda: check(Model.load(path)), "[model.transformers]")


def test_without_the_oracle_extra_check_names_it():
    code = "import sys\nsys.modules['torch'] = None\nfrom symform.interface.cli.cli import main\nsys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, "check", "qwen3-0.6b"], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert "pip install 'symform[oracle]'" in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.oracle
def test_sizes_a_config_leaves_to_transformers_defaults_are_shrunk_too(check):
    """A bare Llama 4 text config: transformers' defaults are a 5 GB expert tensor. The sizes the family reads are
    given check.toml's tiny values, so the module is as small as any other check's."""
    import tomllib

    tiny = tomllib.loads((ROOT / "formulas" / "check.toml").read_text())["tiny"]
    report = check(Model.from_config({"model_type": "llama4_text"}, name="bare llama4_text"))
    assert report.tiny_config["hidden_size"] == tiny["hidden_size"] and report.tiny_config["vocab_size"] == tiny["vocab_size"]
    assert [r for r in report.differences if r.quantity in ("params", "kv_cache")] == []


def test_a_declaration_too_large_to_build_is_refused_before_anything_is_allocated(tmp_path, check):
    """A user's declaration is checked at its own sizes: 32 layers of 4096 wide Llama (~6.7·10⁹ parameters, 27 GB
    in float32) would fill the machine. The count comes from the meta device, so nothing is allocated."""
    text = (DATA / "right_ffn.toml").read_text()
    big = {"hidden_size = 64": "hidden_size = 4096", "intermediate_size = 96": "intermediate_size = 11008", "num_hidden_layers = 2": "num_hidden_layers = 32", "vocab_size = 101": "vocab_size = 32000", "head_dim = 16": "head_dim = 128", "num_attention_heads = 4": "num_attention_heads = 32", "num_key_value_heads = 2": "num_key_value_heads = 32"}
    for small, large in big.items():
        text = text.replace(small, large)
    text = text.replace("arguments = { d_model = 64, n_layers = 2, vocab = 101, d_ff = 96, n_heads = 4, n_kv_heads = 2, d_head = 16 }", "arguments = { d_model = 4096, n_layers = 32, vocab = 32000, d_ff = 11008, n_heads = 32, n_kv_heads = 32, d_head = 128 }")
    path = tmp_path / "big.toml"
    path.write_text(text)
    one_line_error(ConfigError, lambda: check(Model.load(path)), "6,738,415,616 parameters", "budget")


@pytest.mark.oracle
def test_a_family_without_a_preset_is_checked_from_its_config(check):
    """Gemma 4's text stack (no published config is bundled): per-layer embeddings, full layers of their own
    head size and key/value heads; the sizes are shrunk by check.toml, the kinds of layers kept."""
    config = dict(
        model_type="gemma4_text", vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=12,
        num_attention_heads=8, num_key_value_heads=2, head_dim=32, global_head_dim=64, attention_k_eq_v=True,
        num_global_key_value_heads=1, sliding_window=128, hidden_size_per_layer_input=16, vocab_size_per_layer_input=4096,
    )  # fmt: skip
    report = check(Model.from_config(config, name="gemma4-like"))
    assert report.tiny_config["num_hidden_layers"] == 2  # transformers makes the last layer full: two layers keep both kinds
    assert report.differences == []
    assert {"ple_embed", "ple_projection"} <= {r.part for r in report.rows if r.quantity == "params"}


def _without_vision(config: dict) -> dict:
    return {k: v for k, v in config.items() if k != "vision_config"}


# vision-language configs, checked as text-only workloads: the whole class is built (the tower at check.toml's tiny
# sizes, its parameters one `visual` row) and its language model runs on tokens alone
VL_CHECKS = {
    "qwen3_vl defaults": ({"model_type": "qwen3_vl"}, "Qwen3VLForConditionalGeneration"),
    "qwen3_5_moe defaults, vision_config": ({"model_type": "qwen3_5_moe", "vision_config": {}}, "Qwen3_5MoeForConditionalGeneration"),
    "qwen3_5 text only (the 0.8B preset without its vision_config)": (None, "Qwen3_5ForCausalLM"),
    "gemma4 defaults, vision_config": ({"model_type": "gemma4", "vision_config": {}}, "Gemma4ForConditionalGeneration"),
}


def _llama4_forward_fails() -> bool:
    from transformers.modeling_outputs import MoeCausalLMOutputWithPast

    return not hasattr(MoeCausalLMOutputWithPast, "image_outputs")


@pytest.mark.oracle
def test_a_llama4_config_is_checked_against_the_whole_class(check, monkeypatch):
    """Llama4ForConditionalGeneration, its tower a `visual` row. Its eager experts run every expert on every token
    (tests/test_family_llama4.py), which the check's eager accounting counts: every row agrees.
    transformers 5.24's forward reads `image_outputs` from its language model's output, which has none: given one."""
    from transformers.modeling_outputs import MoeCausalLMOutputWithPast

    if _llama4_forward_fails():
        monkeypatch.setattr(MoeCausalLMOutputWithPast, "image_outputs", None, raising=False)
    report = check(Model.from_config({"model_type": "llama4"}, name="llama4 defaults"))
    assert report.transformers_class == "Llama4ForConditionalGeneration"
    assert [r for r in report.differences if r.quantity in ("params", "kv_cache")] == []
    assert report.differences == []
    assert [r.pytorch > 0 for r in report.rows if r.quantity == "params" and r.part == "visual"] == [True]


@pytest.mark.oracle
def test_a_module_whose_own_forward_fails_is_refused_in_one_line(check):
    if not _llama4_forward_fails():
        pytest.skip("this transformers' Llama4ForConditionalGeneration runs")
    one_line_error(ConfigError, lambda: check(Model.from_config({"model_type": "llama4"}, name="llama4")), "fails in its own forward", "image_outputs")


@pytest.mark.oracle
@pytest.mark.parametrize("case", VL_CHECKS)
def test_a_vision_language_config_is_checked_against_its_checkpoint_class(check, case):
    from symform.engine.language.families import preset_config

    config, cls = VL_CHECKS[case]
    config = config if config is not None else _without_vision(preset_config("qwen3.5-0.8b")[0])
    report = check(Model.from_config(config, name=case))
    assert report.transformers_class == cls
    assert report.differences == []
    tower = [r for r in report.rows if r.quantity == "params" and r.part == "visual"]
    assert bool(tower) == ("vision_config" in config or config["model_type"] == "qwen3_vl")  # Qwen3VLConfig's tower is not optional
    assert all(r.pytorch > 0 for r in tower)
