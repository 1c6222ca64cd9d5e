"""symform check's tiny configs are ones transformers runs, and the census blames transformers, not symform, where its
own module cannot run a config.

A config transformers writes (save_pretrained, or its config class's to_dict as the census writes one) holds sizes the
config class derives from its fields beside the fields themselves (DeepSeek-V3's head_dim = qk_rope_head_dim and
qk_head_dim = qk_nope_head_dim + qk_rope_head_dim). Shrunk apart, the derived sizes must be derived again: transformers
takes a saved value over the one it derives, and its rotary embedding (head_dim wide) then misses the rotated part
(qk_rope_head_dim wide).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from family_checks import check_saved_activations, check_tiny_params  # noqa: E402

from symform.engine.graph.model import Model  # noqa: E402

pytestmark = pytest.mark.oracle

CENSUS = Path(__file__).resolve().parent.parent / "benchmarks" / "model_types.py"


def _census():
    spec = importlib.util.spec_from_file_location("model_types_census", CENSUS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_saved_deepseek_v3_config_with_its_derived_head_sizes_checks_exact():
    from symform.analysis.memory.oracle_check import check

    config = transformers.DeepseekV3Config().to_dict()  # head_dim 64 and qk_head_dim 192 saved beside their fields
    assert (config["head_dim"], config["qk_head_dim"]) == (64, 192)
    report = check(Model.from_config(config, name="deepseek_v3 as saved"))
    assert report.tiny_config["head_dim"] == report.tiny_config["qk_rope_head_dim"]
    assert report.tiny_config["qk_head_dim"] == report.tiny_config["qk_nope_head_dim"] + report.tiny_config["qk_rope_head_dim"]
    assert [r for r in report.differences if r.quantity in ("params", "forward_flops", "kv_cache")] == []


# Glm4MoeConfig's defaults: hidden 4096 over 96 heads, head_dim 42 (no head_dim field), half of it rotated: 21. Its
# rotary embedding makes inv_freq = arange(0, 21, 2), 11 frequencies, cos and sin 22 wide, and rotates 22 dimensions.
ODD_ROTARY = dict(
    model_type="glm4_moe", vocab_size=101, hidden_size=84, intermediate_size=48, num_attention_heads=2, num_key_value_heads=1,
    num_hidden_layers=2, max_position_embeddings=64, moe_intermediate_size=12, n_routed_experts=4, num_experts_per_tok=2,
    first_k_dense_replace=1,
)  # fmt: skip


def test_glm4_moe_with_an_odd_rotated_half_head_is_read():
    assert Model.from_config(ODD_ROTARY).evaluate("params") > 0  # refused before: rotary_dim 21 is odd
    check_tiny_params(ODD_ROTARY)


def test_glm4_moe_with_an_odd_rotated_half_head_keeps_cos_and_sin_22_wide():
    """The saved cos and sin tables are 2 x seq x 22 floats: the rotary width transformers rounds 21 up to."""
    check_saved_activations(ODD_ROTARY, torch.float32)


def test_a_config_transformers_cannot_build_is_named_as_transformers_refusal():
    from symform.analysis.memory.oracle_check import transformers_refusal

    hunyuan = transformers.AutoConfig.for_model("hunyuan_v1_dense").to_dict()  # head_dim null: its attention cannot be built
    assert "cannot build" in transformers_refusal(hunyuan, "hunyuan_v1_dense")
    assert transformers_refusal(transformers.AutoConfig.for_model("llama").to_dict(), "llama") is None


@pytest.mark.parametrize(
    "model_type, status",
    [
        ("hunyuan_v1_dense", "no oracle"),  # transformers' attention cannot be built with head_dim null
        ("deepseek_v2", "no oracle"),  # num_experts_per_tok null: transformers' router cannot pick experts
        ("bamba", "no oracle"),  # the defaults have no attention layer: transformers' cache cannot say its length
        ("deepseek_v3", "exact"),
        ("glm4_moe", "exact"),
    ],
)
def test_the_census_names_what_transformers_cannot_run(model_type, status):
    census = _census()
    transformers.logging.set_verbosity_error()
    result = census.census_of(model_type, transformers)
    assert result["status"] == status, result
