"""A hybrid stack's serving memory, fit and decode roofline: the recurrent mixers' state is constant in the
context, the KV cache grows only for the attention layers, and a decode step runs the one-step update.

Qwen3-Next-80B-A3B: 48 layers, every fourth full attention (12 layers of 2 KV heads of 256), the other 36
Gated DeltaNet (a conv of kernel 4 caching its last 3 inputs over 2·16·128 + 32·128 channels in bf16, as serving
engines keep it, and 32 fp32 state matrices of 128×128).
"""

from __future__ import annotations

import pytest
from checks import one_line_error, run, run_json

import symform
from symform.analysis.time.roofline import phase_work

KV_PER_TOKEN = 12 * 2 * 2 * 256 * 2  # attention layers × (K, V) × heads × head width × bf16
STATE = 36 * ((2 * 16 * 128 + 32 * 128) * 3 * 2 + 32 * 128 * 128 * 4)  # per sequence


@pytest.mark.parametrize("past", [0, 4095, 262143])
def test_serving_memory_keeps_the_state_constant_and_grows_the_cache_with_attention_layers_only(capsys, past):
    report = run_json(capsys, "memory", "qwen3-next-80b-a3b", "--infer", "--batch", "8", "--seq", "1", "--past", str(past))
    assert report["components"]["recurrent_state"] == 8 * STATE
    assert report["components"]["kv_cache"] == 8 * (past + 1) * KV_PER_TOKEN
    assert report["total"] == sum(report["components"].values())
    assert report["assumptions"]["state_bytes"] == 4


def test_models_without_recurrent_layers_report_no_state(capsys):
    report = run_json(capsys, "memory", "qwen3-0.6b", "--infer", "--batch", "1", "--seq", "1", "--past", "10")
    assert "recurrent_state" not in report["components"]


def test_fit_solves_for_the_context_past_the_constant_state(capsys):
    budget = 180 * 10**9
    report = run_json(capsys, "fit", "qwen3-next-80b-a3b", "--infer", "--memory", str(budget), "--solve", "past", "--batch", "8")
    largest, at = report["largest"], report["at_largest"]["components"]
    assert at["recurrent_state"] == 8 * STATE
    assert at["kv_cache"] == 8 * (largest + 1) * KV_PER_TOKEN
    # one more cached token per sequence would not fit
    rest = report["at_largest"]["total"] - at["kv_cache"]
    assert rest + 8 * (largest + 2) * KV_PER_TOKEN > budget >= report["at_largest"]["total"]


@pytest.fixture(scope="module")
def phases():
    model = symform.load("qwen3-next-80b-a3b")
    return model, {phase: phase_work(model, phase, depth=None).components for phase in ("prefill", "decode")}


def running(components, suffix: str) -> bool:
    return any(path.endswith(suffix) and (work.flops != 0 or work.bytes != 0) for path, work in components.items())


def test_decode_runs_the_recurrent_update_not_the_chunked_scan(phases):
    _, work = phases
    assert running(work["decode"], "mixer/step/update") and not running(work["decode"], "mixer/chunked/state_update")
    assert running(work["prefill"], "mixer/chunked/state_update") and not running(work["prefill"], "mixer/step/update")


def test_roofline_decode_reads_the_state_once_and_writes_it_once(capsys, phases):
    code, out, err = run(capsys, "roofline", "qwen3-next-80b-a3b", "--phase", "decode", "--batch", "8", "--context", "4096", "--gpu", "h100-sxm", "--depth", "4")
    assert code == 0, err
    assert "layers/linear/mixer/delta_state" in out
    model, work = phases
    (delta,) = [w for path, w in work["decode"].items() if path.endswith("mixer/delta_state")]
    moved = delta.bytes.subs({model.vocabulary[k]: v for k, v in {**model.values, "batch": 8, "past": 4096}.items()})
    assert moved == 2 * 8 * 36 * 32 * 128 * 128 * 4  # 36 layers, read and written once, fp32


def test_stacks_symform_cannot_read_yet_are_refused_in_one_line():
    """Nemotron-H experts behind a 0-wide latent projection, unknown pattern characters or block types and Qwen3-Next
    stacks that mix dense and expert layers: a one-line ConfigError naming the cause, never a silently wrong count."""
    import json

    from symform.engine.store.data import formulas_dir

    nemotron = json.loads((formulas_dir() / "presets" / "nemotron-3-nano-30b-a3b.json").read_text())
    latent = {**nemotron, "moe_latent_size": 0}
    unknown = {**nemotron, "hybrid_override_pattern": nemotron["hybrid_override_pattern"][:-1] + "X"}
    unknown_type = {**nemotron, "layers_block_type": ["mamba", "moe", "sliding_attention"]}
    qwen = json.loads((formulas_dir() / "presets" / "qwen3-next-80b-a3b.json").read_text())
    mixed = {**qwen, "mlp_only_layers": [0, 1]}
    cases = ((latent, "moe_latent_size"), (unknown, "'X' (entry 51)"), (unknown_type, "'sliding_attention' (entry 2)"), (mixed, "mlp_only_layers"))
    for config, words in cases:
        one_line_error(symform.ConfigError, lambda c=config: symform.Model.from_config(c), words)
