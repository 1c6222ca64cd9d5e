"""``symform import`` beyond parameters: the attention's score and context products and the keys and values
transformers' cache keeps, for model types no bundled family reads. Expected values are PyTorch's: the
FlopCounterMode count of one eager forward of transformers' model on the CPU and the bytes its cache holds
after it (tests/oracle.py). What the import cannot map (a Mamba mixer's scan) is named, never claimed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checks import run
from symform import Model

_SIZES = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 101, "max_position_embeddings": 64}
CONFIGS = {
    "opt": {"hidden_size": 64, "ffn_dim": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 101, "max_position_embeddings": 64, "word_embed_proj_dim": 64},
    "gpt_neox": {**_SIZES, "rotary_pct": 0.5},
    "phi": {**_SIZES, "num_key_value_heads": 2},
    # multi-query Falcon: one key/value head whatever num_kv_heads says (transformers reads it only for the new
    # decoder architecture), so the heads are read from the module, not the config field
    "falcon": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_kv_heads": 2, "multi_query": True, "new_decoder_architecture": False, "vocab_size": 101},
    "cohere": {**_SIZES, "num_key_value_heads": 2},
    # a sliding window of 4 on the first layer: eager attention multiplies every score, the cache keeps 3 tokens
    "cohere2": {**_SIZES, "num_key_value_heads": 2, "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]},
}
SHAPES = ((2, 8), (1, 11))  # (batch, seq): a second length, so that no count is right by one coincidence


@pytest.fixture(scope="module")
def oracle():
    """tests/oracle.py's CPU models (torch and transformers, else the test is skipped)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import oracle as module

    return module


def _imported(capsys, tmp_path: Path, config: dict) -> tuple[Path, str]:
    source, out = tmp_path / "config.json", tmp_path / "imported.toml"
    source.write_text(json.dumps(config))
    code, stdout, stderr = run(capsys, "import", str(source), "--out", str(out))
    assert code == 0, stderr
    return out, stdout


def _eager(path: Path) -> Model:
    """The declaration counted as PyTorch's eager forward runs it (every score of a windowed layer multiplied)."""
    return Model.load(path).with_accounting("eager")


@pytest.mark.oracle
@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_an_imported_declaration_counts_pytorchs_forward_flops_and_cache(model_type, oracle, capsys, tmp_path):
    config = {"model_type": model_type, **CONFIGS[model_type]}
    out, stdout = _imported(capsys, tmp_path, config)
    assert "exact in params, forward_flops, kv_cache" in stdout and "not exact" not in stdout, stdout
    model, real = _eager(out), oracle.build(config)
    for batch, seq in SHAPES:
        counter = oracle.count_forward(real, oracle.input_ids(config, batch, seq))
        assert set(oracle.global_counts(counter)) <= oracle.MATMULS
        assert model.evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops(), (batch, seq)
        assert model.with_conventions(kv_bytes=4).evaluate("kv_cache", batch=batch, seq=seq) == oracle.cached_bytes(real, batch, seq), (batch, seq)


@pytest.mark.oracle
def test_the_attention_core_is_two_products_of_every_query_with_every_key(oracle, capsys, tmp_path):
    """GPT-NeoX at batch b = 2, seq s = 8, h = 4 heads of d = 16 over 2 layers: Q·Kᵀ and softmax·V are each
    2·b·h·s·s·d = 16,384 FLOPs per layer, 65,536 in all, beside the projections' 2·rows·d_in·d_out."""
    config = {"model_type": "gpt_neox", **CONFIGS["gpt_neox"]}
    out, _ = _imported(capsys, tmp_path, config)
    model = _eager(out)
    projections = 2 * 16 * (64 * 192 + 64 * 64 + 64 * 96 + 96 * 64) * 2 + 2 * 16 * 64 * 101  # 2 layers, then the head
    assert model.evaluate("forward_flops", batch=2, seq=8) == projections + 2 * 2 * (2 * 2 * 4 * 8 * 8 * 16)


@pytest.mark.oracle
def test_a_forward_without_a_cache_declares_none(oracle, capsys, tmp_path):
    """GPT-1's forward returns no past key values: the declaration keeps none, and its FLOPs are exact."""
    config = {"model_type": "openai-gpt", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 101, "n_positions": 64}
    out, stdout = _imported(capsys, tmp_path, config)
    assert "not exact" not in stdout, stdout
    model, real = _eager(out), oracle.build(config)
    assert model.evaluate("kv_cache", batch=2, seq=8) == 0
    assert model.evaluate("forward_flops", batch=2, seq=8) == oracle.count_forward(real, oracle.input_ids(config, 2, 8)).get_total_flops()


@pytest.mark.oracle
def test_an_unmapped_mixer_is_named_not_exact_by_import_and_by_check(oracle, capsys, tmp_path):
    """Mamba's selective scan has no symform primitive: the declaration is parameter-exact, and both the import
    and symform check say its forward FLOPs and recurrent state are not exact, naming the mixer."""
    from symform.analysis.memory.oracle_check import check

    config = {"model_type": "mamba", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 101, "state_size": 6, "time_step_rank": 8}
    out, stdout = _imported(capsys, tmp_path, config)
    assert "exact in params" in stdout and "not exact: forward_flops" in stdout and "MambaMixer" in stdout, stdout
    assert int(Model.load(out).evaluate("params")) == oracle.meta_params(config)
    report = check(Model.load(out))
    assert {"forward_flops", "recurrent_state"} <= set(report.not_exact) and "MambaMixer" in report.not_exact["forward_flops"]
    code, table, _ = run(capsys, "check", str(out))
    assert code == 0 and "forward_flops: not exact, as the declaration says" in table, table


@pytest.mark.oracle
def test_routed_experts_cost_top_k_products_a_token(oracle, capsys, tmp_path):
    """OLMoE routes each token to 2 of its 4 experts: eager experts run each token through those two only, so
    the experts' products are 2·rows·top_k·(d·2f + f·d) and the router's 2·rows·d·E, as PyTorch counts them."""
    config = {"model_type": "olmoe", **_SIZES, "num_key_value_heads": 2, "num_experts": 4, "num_experts_per_tok": 2}
    out, stdout = _imported(capsys, tmp_path, config)
    assert "exact in params, forward_flops, kv_cache" in stdout and "not exact" not in stdout, stdout
    model, real = _eager(out), oracle.build(config, eager_experts=True)
    for batch, seq in SHAPES:
        counter = oracle.count_forward(real, oracle.input_ids(config, batch, seq))
        assert model.evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops(), (batch, seq)
    text = out.read_text()
    assert 'top_k = "num_experts_per_tok"' in text and text.count('rows = "batch*seq*top_k"') == 2, text
