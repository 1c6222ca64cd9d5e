"""The tile-and-wave GEMM model: hand-counted tiles and waves, its bounds, and the GEMM shapes the kernels carry.

Expected values are hand arithmetic (tiles, waves, split-K) or read from a preset's config JSON, never from
symform.analysis.time.estimate itself.
"""

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import symform
from symform import DeclarationError
from symform.analysis.time import calibration, estimate
from symform.analysis.time import efficiencies
from symform.analysis.time.efficiencies import best_tile_efficiency, wave_efficiency
from symform.analysis.memory.finetune import FineTune
from symform.engine.language.declarations import default_library, parse_components

from checks import run as _run

ROOT = Path(__file__).resolve().parent.parent


def test_a_square_gemm_on_132_sms_runs_eight_waves_the_last_of_100_tiles():
    # 4096/128 = 32 tiles a side: 1,024 tiles; 7 full waves of 132 and a last one of 1,024 - 7·132 = 100 tiles
    assert wave_efficiency(1, 4096, 4096, 128, 128, 132) == pytest.approx(1024 / (8 * 132), rel=1e-15)


def test_a_grid_under_one_wave_splits_its_reduction():
    # 128 × 4096 output: 32 tiles; split-K over ⌊132/32⌋ = 4 SMs each: 128 of 132 slots busy in one wave
    assert wave_efficiency(1, 128, 4096, 128, 128, 132) == pytest.approx(128 / 132, rel=1e-15)
    # 200 rows pad to 2 tiles of 128 (256 rows): split 66 ways, 132 slots, one wave, 200/256 of each tile useful
    assert wave_efficiency(1, 200, 128, 128, 128, 132) == pytest.approx(200 / 256, rel=1e-15)


def test_batches_of_products_share_the_waves():
    # 64 products of 512 × 512 on 108 SMs, 128 × 256 tiles: 64·4·2 = 512 tiles, ⌈512/108⌉ = 5 waves
    assert wave_efficiency(64, 512, 512, 128, 256, 108) == pytest.approx(512 / (5 * 108), rel=1e-15)


def test_the_library_takes_the_tile_that_fills_the_sms_best():
    # 128 × 8192 on 108 SMs: 128 × 128 tiles give 64 (one wave, no split: 64/108 busy); 128 × 256 give 32,
    # split-K 3 ways: 96/108; 64 × 128 give 128 tiles, 2 waves: 128/216
    tiles = ((128, 128), (128, 256), (64, 128))
    assert wave_efficiency(1, 128, 8192, 128, 128, 108) == pytest.approx(64 / 108, rel=1e-15)
    assert wave_efficiency(1, 128, 8192, 64, 128, 108) == pytest.approx(128 / 216, rel=1e-15)
    assert best_tile_efficiency(1, 128, 8192, tiles, 108) == pytest.approx(96 / 108, rel=1e-15)


def _waves_eff(sms: int, tile_m: int, tile_n: int, sustained: float):
    base = efficiencies.efficiency("h100-sxm")
    return replace(base, gemm_model="waves", sms=sms, tile_m=tile_m, tiles=((tile_m, tile_n),), gemm_sustained=sustained, half_flops=0.0)


@settings(max_examples=60, deadline=None)
@given(
    sms=st.integers(1, 160),
    tile_m=st.sampled_from([64, 128, 256]),
    tile_n=st.sampled_from([64, 128, 256]),
    rows=st.integers(1, 20000),
    width=st.integers(1, 20000),
    batches=st.integers(1, 64),
    sustained=st.floats(0.05, 1.0),
)
def test_a_gemm_never_beats_the_sustained_fraction(sms, tile_m, tile_n, rows, width, batches, sustained):
    eff = _waves_eff(sms, tile_m, tile_n, sustained)
    rows = max(rows, tile_m)  # fewer rows than one tile run as skinny kernels, outside the wave model
    fraction = eff.gemm_fraction(rows, 2.0 * batches * rows * width * 4096, ((batches, rows, width),))
    assert 0 < fraction <= sustained * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(sms=st.integers(1, 160), tile_m=st.sampled_from([64, 128]), tile_n=st.sampled_from([128, 256]), a=st.integers(1, 12), waves=st.integers(1, 6), sustained=st.floats(0.05, 1.0))
def test_whole_tiles_in_whole_waves_run_at_the_sustained_fraction(sms, tile_m, tile_n, a, waves, sustained):
    # a·tile_m rows by (waves·sms/a)·tile_n columns when a divides waves·sms: exactly waves·sms whole tiles
    if (waves * sms) % a:
        a = 1
    rows, width = a * tile_m, (waves * sms // a) * tile_n
    eff = _waves_eff(sms, tile_m, tile_n, sustained)
    assert eff.gemm_fraction(rows, 1e12, ((1, rows, width),)) == pytest.approx(sustained, rel=1e-12)


def _config(name):
    return json.loads((ROOT / "formulas" / "presets" / f"{name}.json").read_text(encoding="utf-8"))


def test_kernels_carry_the_declared_shapes_split_over_tensor_ranks():
    c = _config("llama-3.2-1b")
    h, heads, kv, d_head, ff, vocab = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["intermediate_size"], c["vocab_size"]
    model = symform.load("llama-3.2-1b")
    found = {k.leaf: k for k in estimate.kernels(model, "train", workload={"batch": 2, "seq": 512}, tensor=2)}
    tokens = 2 * 512
    assert found["q_proj"].shape == (1, tokens, heads * d_head / 2, h)  # column-parallel: the width splits
    assert found["k_proj"].shape == (1, tokens, kv * d_head / 2, h)
    assert found["o_proj"].shape == (1, tokens, h, heads * d_head / 2)  # row-parallel: the reduction splits
    assert found["down_proj"].shape == (1, tokens, h, ff / 2)
    lm_head = next(k for k in found.values() if k.path.startswith("lm_head"))  # tied: lm_head/shared
    assert lm_head.shape == (1, tokens, vocab / 2, h)
    assert found["q_proj"].products == ((1, tokens, heads * d_head / 2), (1, tokens, h), (1, h, heads * d_head / 2))
    assert "rms_norm" not in {k.kind for k in found.values()} and found["attn_norm"].shape is None


def test_decode_and_eager_attention_shapes():
    c = _config("llama-3.2-1b")
    model = symform.load("llama-3.2-1b")
    decode = {k.leaf: k for k in estimate.kernels(model, "decode", workload={"batch": 8, "past": 100})}
    assert decode["q_proj"].shape == (1, 8, c["num_attention_heads"] * c["head_dim"], c["hidden_size"])  # one token per sequence
    assert decode["q_proj"].products == ((1, 8, c["num_attention_heads"] * c["head_dim"]),)
    eager = estimate.kernels(model, "prefill", workload={"batch": 2, "seq": 64}, attention="eager")
    assert next(k for k in eager if k.path.endswith("core/scores")).shape == (2 * c["num_attention_heads"], 64, 64, c["head_dim"])


def test_context_parallel_ranks_take_a_share_of_the_rows():
    model = symform.load("llama-3.2-1b")
    found = {k.leaf: k for k in estimate.kernels(model, "train", workload={"batch": 1, "seq": 4096}, context=4)}
    assert found["q_proj"].shape[1] == 1024


@pytest.mark.parametrize("gemm, phrase", [({"m": "d_in", "n": "d_out"}, "'k' is missing"), ({"m": "d_in", "n": "d_out", "k": "1", "q": "2"}, "not 'q'")])
def test_a_bad_gemm_declaration_is_refused_in_one_line(gemm, phrase):
    library = default_library()
    table = {"p": {"doc": "", "args": ["d_in", "d_out"], "params": "d_in*d_out", "forward_flops": "2*d_in*d_out", "bytes_moved": "0", "saved_activations": "0", "gemm": gemm}}
    with pytest.raises(DeclarationError, match=phrase) as info:
        library.merged(parse_components(table, library.vocabulary, "test", existing=library.components))
    assert "\n" not in str(info.value)


def test_the_other_gemm_model_needs_its_fit():
    eff = efficiencies.efficiency("b200")
    with pytest.raises(symform.SymformError, match=r"no \[gemm.waves\] fit"):
        eff.with_gemm_model("waves")
    waves = efficiencies.efficiency("h100-sxm").with_gemm_model("waves")
    assert (waves.gemm_model, waves.sms, (128, 128) in waves.tiles) == ("waves", 132, True)


def test_cli_validate_under_the_waves_model(capsys):
    code, out, _ = _run(capsys, "validate", "--gemm-model", "waves")
    assert code == 0 and out.splitlines()[0].startswith("kind")
    assert calibration.gemm_model_factors("waves") == {"a100-sxm-80gb:gemm.model": "waves", "h100-sxm:gemm.model": "waves"}


def test_models_of_one_architecture_keep_their_own_shapes():
    for name in ("llama-3.2-1b", "llama-3.2-3b", "llama-3.2-1b"):
        c = _config(name)
        found = {k.leaf: k for k in estimate.kernels(symform.load(name), "prefill", workload={"batch": 1, "seq": 256})}
        assert found["up_proj"].shape == (1, 256, c["intermediate_size"], c["hidden_size"])


def test_time_takes_the_waves_model_and_names_it(capsys):
    from checks import run_json

    rows = run_json(capsys, "time", "llama-3.2-1b", "--gpu", "h100-sxm", "--infer", "--batch", "1", "--prompt", "512", "--output", "8")
    waves = run_json(capsys, "time", "llama-3.2-1b", "--gpu", "h100-sxm", "--infer", "--batch", "1", "--prompt", "512", "--output", "8", "--gemm-model", "waves")
    assert "model" not in rows["estimate"]["factors"]["gemm"]
    gemm = waves["estimate"]["factors"]["gemm"]
    assert (gemm["model"], gemm["sms"], [128, 128] in gemm["tiles"]) == ("waves", 132, True)
    assert "model waves: fitted" in gemm["source"]
    assert waves["ttft_s"]["estimate"] != rows["ttft_s"]["estimate"]
    code, _, err = _run(capsys, "time", "llama-3.2-1b", "--gpu", "b200", "--infer", "--batch", "1", "--prompt", "512", "--output", "8", "--gemm-model", "waves")
    assert code == 2 and "no [gemm.waves] fit" in err and err.count("\n") == 1


def test_every_gemm_model_fit_names_its_source_and_the_sms_it_needs():
    import tomllib

    for path in (ROOT / "hardware" / "efficiency").glob("*.toml"):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        gemm = data.get("gemm", {})
        for model in efficiencies.GEMM_MODELS:
            if isinstance(gemm.get(model), dict):
                assert gemm[model]["source"], (path.name, model)
                assert gemm.get("sms") and gemm.get("tiles"), path.name


def test_an_efficiency_file_may_make_waves_its_default(tmp_path):
    text = (ROOT / "hardware" / "efficiency" / "h100-sxm.toml").read_text(encoding="utf-8")
    mine = tmp_path / "mine.toml"
    mine.write_text(text.replace("[gemm]\n", '[gemm]\nmodel = "waves"\n', 1), encoding="utf-8")
    assert efficiencies.efficiency(str(mine)).gemm_model == "waves"
    mine.write_text(text.replace("[gemm]\n", '[gemm]\nmodel = "waves"\n', 1).replace("tiles = [", "no_tiles = [", 1), encoding="utf-8")
    with pytest.raises(symform.SymformError, match="gemm.tiles") as info:
        efficiencies.efficiency(str(mine))
    assert "\n" not in str(info.value)
    mine.write_text(text.replace("[gemm]\n", '[gemm]\nmodel = "tiles"\n', 1), encoding="utf-8")
    with pytest.raises(symform.SymformError, match="choose one of rows, waves"):
        efficiencies.efficiency(str(mine))


def _k_proj(finetune=None):
    model = symform.load("llama-3.2-1b")
    found = estimate.kernels(model, "train", workload={"batch": 1, "seq": 1024}, finetune=finetune)
    return next(k for k in found if k.leaf == "k_proj")


@pytest.mark.parametrize(
    "finetune, weights, fraction",
    [
        # hand count, 128 × 128 tiles on 96 SMs, T = 1,024 tokens, k_proj 2,048 → 512 (llama-3.2-1b):
        # forward T × 512: 32 tiles split-K 3 ways, one full wave: 1; input gradient T × 2,048: 128 tiles
        # in 2 waves: 128/192 = 2/3; weight gradient 2,048 × 512: 64 tiles in one wave: 2/3
        (None, (1, 1, 1), 3 / (1 + 3 / 2 + 3 / 2)),
        # LoRA freezes every base weight: k_proj's weight gradient never runs
        (FineTune(rank=8, targets=("q_proj", "v_proj")), (1, 1), 2 / (1 + 3 / 2)),
        # half of the 16 layers frozen: half of the k_proj calls run a weight gradient
        (FineTune(freeze=("layers:0-7",)), (1, 1, 0.5), 2.5 / (1 + 3 / 2 + 0.5 * 3 / 2)),
        # embeddings and the first half frozen: autograd records nothing there, its k_proj runs forward only
        (FineTune(freeze=("embeddings", "layers:0-7")), (1, 0.5, 0.5), 2 / (1 + 0.5 * 3 / 2 + 0.5 * 3 / 2)),
    ],
)
def test_frozen_weights_run_no_weight_gradient_product_under_the_waves_model(finetune, weights, fraction):
    kernel = _k_proj(finetune)
    assert kernel.product_weights == weights
    assert kernel.calls == pytest.approx(sum(weights) * 16)
    eff = replace(_waves_eff(96, 128, 128, 0.5), tile_m=128)
    got = eff.gemm_fraction(kernel.rows, kernel.flops / kernel.calls, kernel.products, kernel.product_weights)
    assert got == pytest.approx(0.5 * fraction, rel=1e-12)
