"""Point estimates, the published runs they are validated on, docs/validation.md, measured MFU and run duration.

Expected values come from the sources' own numbers (hardware/measured/*.toml) and the
efficiency files, never from symform.analysis.time.estimate itself; nothing times this machine.
"""

import json
import math
import tomllib
from fractions import Fraction
from pathlib import Path

import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symform
from symform.analysis.time import calibration, estimate
from symform.analysis.time import measured_runs
from symform.analysis.memory.settings import Layout
from symform.interface.reports.validation_report import markdown

from checks import one_line_error, run as _run

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cases():
    return calibration.validate()


def test_docs_validation_matches_what_the_code_predicts(cases):
    assert (ROOT / "docs" / "validation.md").read_text(encoding="utf-8") == markdown(cases), "regenerate: symform validate --markdown > docs/validation.md"


def test_every_narayanan_row_within_ten_percent(cases):
    rows = [c for c in cases if c.run.source == "narayanan2021"]
    assert len(rows) == 10
    assert max(abs(c.error) for c in rows) <= 0.10


def test_held_out_training_median_within_ten_percent(cases):
    held = [abs(c.error) for c in cases if c.run.kind == "training" and c.run.split == "check"]
    assert len(held) >= 10
    assert sorted(held)[len(held) // 2] <= 0.10


def test_enough_measured_runs_with_sources():
    runs = measured_runs.runs()
    assert sum(r.kind == "training" and r.source != "narayanan2021" for r in runs) >= 10
    assert sum(r.kind == "serving" for r in runs) >= 10
    for stem, source in measured_runs.sources().items():
        assert source["url"].startswith("https://") and source["counts_flops"], stem


def test_mpt_configs_have_the_parameter_count_the_table_lists():
    """llm-foundry's NumParams column, checked against symform's exact count of the gpt2-family config."""
    for run in measured_runs.runs():
        if "params" in run.setup:
            assert measured_runs.run_model(run).evaluate("params") == run.setup["params"], run.name


def test_narayanan_eq3_reproduces_the_table_aggregate():
    """Table 1's 1T row: 163 TFLOP/s per GPU on 3072 GPUs is 502 PFLOP/s aggregate; Eq. 3 gives the step's FLOPs."""
    run = next(r for r in measured_runs.runs() if r.name == "gpt-1008b")
    model = measured_runs.run_model(run)
    assert run.measured[1] * run.setup["gpus"] / 1e3 == pytest.approx(502, rel=0.01)
    # 1T parameters: Eq. 3 / (96·B·s) ≈ l·h² (1 + …) and 12·l·h² ≈ parameters
    assert 12 * 128 * 25600**2 == pytest.approx(1008e9, rel=0.01)
    assert calibration.narayanan_flops(model, 3072, 2048) > 72 * 3072 * 2048 * 128 * 25600**2


def test_efficiency_files_name_a_source_for_every_factor():
    for path in (ROOT / "hardware" / "efficiency").glob("*.toml"):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        if data["kind"] == "efficiency":
            for section in ("gemm", "attention", "memory"):
                assert data[section]["source"], (path.name, section)
            for name, link in data["links"].items():
                assert link["source"], (path.name, name)
            if "kernel" in data:
                assert data["kernel"]["source"], (path.name, "kernel")


@pytest.mark.parametrize("device", ["tpu-v4", "mi300x", "h200-sxm", "b200"])
def test_devices_of_published_runs_have_estimates(device):
    """Each has an efficiency file (most factors fall back, by name, to another device's) and so an estimate."""
    model = symform.load("llama-3.2-1b")
    found = estimate.serving_estimate(model, device, batch=1, prompt=64, output=4)
    assert found.factors["efficiency_file"] == device
    assert found.ttft.estimate > 0 and found.tpot.estimate > 0


def test_gb200_estimates_with_its_own_fitted_factors(capsys):
    """GB200 (the accelerator or its NVL72 rack) takes hardware/efficiency/gb200.toml, whose GEMM rate and MoE cost
    are fitted on GB200's own published runs, not the B200's borrowed factors, and not bounds only."""
    own, b200 = (tomllib.loads((ROOT / "hardware" / "efficiency" / f"{d}.toml").read_text(encoding="utf-8")) for d in ("gb200", "b200"))
    # each fitted on its own device's runs (their GEMM rates came out alike: 25.09's Llama 3 8B on each)
    assert "GB200 run" in own["gemm"]["source"] and "B200 run" in b200["gemm"]["source"] and own["moe"]["expert_s"] != b200["moe"]["expert_s"]
    assert {"gb200:gemm.sustained", "gb200:moe.expert_s"} <= {name for name, _, _ in calibration.FITTED}
    model = symform.load("qwen3-0.6b")
    for gpu in ("gb200", "gb200-nvl72"):
        found = estimate.training_estimate(model, gpu, global_batch=64, micro_batch=2, seq=2048, layout=Layout(data=8), dtype="fp8")
        assert found.factors["efficiency_file"] == "gb200"
        assert found.factors["gemm"]["sustained"] == own["gemm"]["sustained"]
        assert found.factors["moe"]["expert_s"] == own["moe"]["expert_s"]
    code, out, _ = _run(capsys, "time", "llama-3.2-1b", "--gpu", "gb200-nvl72", "--train", "--gpus", "8", "--global-batch", "64", "--seq", "2048", "--json")
    data = json.loads(out)
    assert code == 0 and "estimate_missing" not in data and data["estimate"]["factors"]["efficiency_file"] == "gb200"


def test_every_path_finds_a_system_s_data_through_its_accelerator(tmp_path):
    """One resolver: a bundled system (dgx-b200, hgx-h100-8gpu, a TPU slice) takes its accelerator's efficiency file
    in the API, the estimate, the fit's selectors and the band's notes alike; a system file of the user's own of 8
    B200s takes the B200's; an accelerator no file describes is still refused in one line."""
    from symform.analysis.time import efficiencies

    for system, accelerator in (("dgx-b200", "b200"), ("hgx-h100-8gpu", "h100-sxm"), ("gb200-nvl72", "gb200"), ("tpu-v5p-128", "tpu-v5p"), ("h800-sxm", "h100-sxm")):
        assert efficiencies.efficiency(system).device == accelerator
    own = tmp_path / "my-b200-box.toml"
    own.write_text((ROOT / "hardware" / "systems" / "dgx-b200.toml").read_text(encoding="utf-8").replace('title = "', 'title = "mine: ', 1), encoding="utf-8")
    model = symform.load("qwen3-0.6b")
    found = estimate.training_estimate(model, str(own), global_batch=64, micro_batch=2, seq=2048, layout=Layout(data=8))
    assert found.factors["efficiency_file"] == "b200"
    run = next(r for r in measured_runs.runs() if r.setup["gpu"] == "b200")
    on_b200 = next(select for name, select, _ in calibration.FITTED if name == "b200:gemm.sustained")
    assert on_b200(run) and on_b200(type(run)(**{**run.__dict__, "setup": run.setup | {"gpu": "dgx-b200"}}))
    with pytest.raises(symform.SymformError, match="^no efficiency data for 'h100-pcie'.*add hardware/efficiency/h100-pcie.toml$"):
        efficiencies.efficiency("h100-pcie")
    for wrong in (None, 5):
        with pytest.raises(symform.SymformError, match="^a device is named by a string or a path"):
            efficiencies.efficiency(wrong)


def test_l40s_estimates_with_its_own_fitted_factors():
    """The L40S takes hardware/efficiency/l40s.toml, fitted on its own published runs (TensorRT-LLM v0.5 FP8),
    not bounds only: batch-1 decode of Llama-2-7B in FP8 reads its ~6.6 GB of weights (the embedding's one row
    aside) at the file's fraction of the datasheet's 864 GB/s."""
    own = tomllib.loads((ROOT / "hardware" / "efficiency" / "l40s.toml").read_text(encoding="utf-8"))
    assert {"l40s:memory.fraction", "l40s:gemm.sustained"} <= {name for name, _, _ in calibration.FITTED}
    assert "fitted" in own["memory"]["source"] and "fitted" in own["gemm"]["source"]
    found = estimate.serving_estimate(symform.load("llama-2-7b"), "l40s", batch=1, prompt=64, output=4, dtype="fp8")
    assert found.factors["efficiency_file"] == "l40s"
    assert found.factors["memory"]["fraction"] == own["memory"]["fraction"]
    assert found.factors["gemm"]["sustained"] == own["gemm"]["sustained"]
    rate = 864e9 * own["memory"]["fraction"]
    assert 6.4e9 / rate < found.tpot.estimate < 1.1 * 6.8e9 / rate


def test_mi325x_estimates_with_its_own_fitted_factors(capsys):
    """The MI325X takes hardware/efficiency/mi325x.toml, whose GEMM rate is fitted on its own published run (Primus's
    single-node Llama 3.1 8B FP8, 16,224 tokens/s/GPU), not bounds only; the rest is the MI300X's (the same CDNA 3
    dies) as it is, and its GEMM roll-off the H100's fit, not the MI300X's figure scaled by a ratio of peaks."""
    own, mi300x, h100 = (tomllib.loads((ROOT / "hardware" / "efficiency" / f"{d}.toml").read_text(encoding="utf-8")) for d in ("mi325x", "mi300x", "h100-sxm"))
    assert "mi325x:gemm.sustained" in {name for name, _, _ in calibration.FITTED}
    assert "fitted" in own["gemm"]["source"] and "primus-mi325x.toml" in own["gemm"]["source"]
    assert own["attention"]["fraction"] == mi300x["attention"]["fraction"] and own["memory"]["fraction"] == mi300x["memory"]["fraction"]
    assert own["kernel"]["launch_s"] == mi300x["kernel"]["launch_s"] and own["links"]["scale_up"] == {**mi300x["links"]["scale_up"], "source": own["links"]["scale_up"]["source"]}
    assert own["gemm"]["half_flops"] == h100["gemm"]["half_flops"] != mi300x["gemm"]["half_flops"]
    found = estimate.training_estimate(symform.load("qwen3-0.6b"), "mi325x", global_batch=64, micro_batch=2, seq=2048, layout=Layout(data=8), dtype="fp8")
    assert found.factors["efficiency_file"] == "mi325x" and found.factors["gemm"]["sustained"] == own["gemm"]["sustained"]
    fitted = next(r for r in measured_runs.runs() if r.name == "primus-mi325x-llama3.1-8b-fp8-1node")
    assert fitted.split == "fit" and fitted.measured == ("tokens_per_s_per_gpu", 16224)
    assert abs(calibration.predict(fitted) / 16224 - 1) < 0.02
    code, out, _ = _run(capsys, "time", "llama-3.2-1b", "--gpu", "mi325x", "--train", "--gpus", "8", "--global-batch", "64", "--seq", "2048", "--json")
    data = json.loads(out)
    assert code == 0 and "estimate_missing" not in data and data["estimate"]["factors"]["efficiency_file"] == "mi325x"


def test_a_fitted_memory_fraction_reaches_the_estimate():
    """calibration's factor "<device>:memory.fraction" replaces the file's: a decode-bound run's tokens/s
    follows it (half the fraction, close to half the rate; the prefill's share keeps it above half)."""
    run = next(r for r in measured_runs.runs() if r.name == "l40s-llama-2-7b-b64-128-2048")
    own = tomllib.loads((ROOT / "hardware" / "efficiency" / "l40s.toml").read_text(encoding="utf-8"))["memory"]["fraction"]
    full = calibration.predict(run, {"l40s:memory.fraction": own})
    half = calibration.predict(run, {"l40s:memory.fraction": own / 2})
    assert full == calibration.predict(run, {})
    assert 0.5 < half / full < 0.6


def test_a_fitted_link_factor_reaches_only_the_runs_that_use_the_link():
    """"<device>:links.<link>.bus_efficiency" replaces the file's: the L40S's 70B run on 4 cards all-reduces
    over PCIe and slows with a lower efficiency; a one-card run has no all-reduce to slow."""
    found = {r.name: r for r in measured_runs.runs()}
    four, one = found["v08-l40s-llama-2-70b-tp4-b64-2048-2048"], found["l40s-llama-2-7b-b64-128-2048"]
    low = {"l40s:links.pcie.bus_efficiency": 0.2}
    assert calibration.predict(four, low) < calibration.predict(four, {})
    assert calibration.predict(one, low) == calibration.predict(one, {})


def test_tpu_v5p_estimates_with_its_own_fitted_factors():
    """TPU v5p (the chip or a slice of it) takes hardware/efficiency/tpu-v5p.toml, whose GEMM rate is fitted on MaxText's
    own v5p runs, not TPU v4's blog figure; a slice is one ICI domain, so FSDP inside it never leaves the torus."""
    own, v4 = (tomllib.loads((ROOT / "hardware" / "efficiency" / f"{d}.toml").read_text(encoding="utf-8")) for d in ("tpu-v5p", "tpu-v4"))
    assert "maxtext-v5p.toml" in own["gemm"]["source"] and own["gemm"]["sustained"] != v4["gemm"]["sustained"]
    assert {"tpu-v5p:gemm.sustained", "tpu-v5e:gemm.sustained", "tpu-v6e:gemm.sustained"} <= {name for name, _, _ in calibration.FITTED}
    model = symform.load("qwen3-0.6b")
    for gpu in ("tpu-v5p", "tpu-v5p-128"):
        found = estimate.training_estimate(model, gpu, global_batch=64, micro_batch=1, seq=2048, layout=Layout(data=64, zero=3))
        assert found.factors["efficiency_file"] == "tpu-v5p"
        assert found.factors["gemm"]["sustained"] == own["gemm"]["sustained"]
    fit = {r.setup["gpu"] for r in measured_runs.runs() if r.split == "fit" and r.source.startswith("maxtext")}
    assert {"tpu-v5p-128", "tpu-v5p-256", "tpu-v5e-256", "tpu-v6e-256"} == fit


def test_devices_past_one_system_say_how_many_systems_they_fill(capsys):
    """A slice's name counts TensorCores (Cloud TPU docs: v5p-128 is 64 chips), so 128 devices on tpu-v5p-128 are two
    slices joined by the data-center network, not one: time and plan say so in their first line; 8 B200s are one DGX."""
    args = ("--train", "--global-batch", "256", "--seq", "2048")
    _, out, _ = _run(capsys, "time", "qwen3-0.6b", "--gpu", "tpu-v5p-128", "--gpus", "128", *args)
    assert out.splitlines()[0].startswith("training step of qwen3-0.6b on 128 × tpu-v5p in 2 × tpu-v5p-128 of 64 each, the scale-out network between them")
    _, out, _ = _run(capsys, "time", "qwen3-0.6b", "--gpu", "tpu-v5p-128", "--gpus", "64", *args)
    assert out.splitlines()[0].startswith("training step of qwen3-0.6b on 64 × tpu-v5p of one tpu-v5p-128 (bf16)")
    _, out, _ = _run(capsys, "plan", "qwen3-0.6b", "--gpu", "dgx-b200", "--gpus", "24", "--global-batch", "48", "--seq", "2048")
    assert out.splitlines()[0].startswith("layouts of qwen3-0.6b on 24 × b200 in 3 × dgx-b200 of 8 each")
    _, out, _ = _run(capsys, "time", "qwen3-0.6b", "--gpu", "tpu-v5p-128", "--gpus", "96", "--global-batch", "96", "--seq", "2048", "--train")
    assert "on 96 × tpu-v5p in 2 × tpu-v5p-128 of 64 each (the last holding 32), the scale-out network between them" in out.splitlines()[0]
    _, out, _ = _run(capsys, "time", "qwen3-0.6b", "--gpu", "dgx-b200", "--gpus", "16", "--node-size", "4", *args)
    assert "on 16 × b200 in 2 × dgx-b200 of 8 each, the scale-out network between them, scale-up domains of 4 as given (bf16)" in out.splitlines()[0]
    _, out, _ = _run(capsys, "time", "qwen3-0.6b", "--gpu", "h100-sxm", "--gpus", "16", *args)
    assert out.splitlines()[0].startswith("training step of qwen3-0.6b on 16 × h100-sxm (bf16)")


def test_maxtext_tflops_become_tokens_per_chip_by_maxtexts_own_count():
    """MaxText at 76bd53b counts 6·N + 6·heads·layers·head_dim·s FLOPs a token (causal attention, no remat). Its 32B
    (d 10,240, 32 heads of 256, MLP 32,768, 32 layers, vocabulary 32,768, tied, one RMSNorm a layer) has by hand
    N = 32,768·10,240 + 32·(10,240 + 4·10,240·8,192 + 2·10,240·32,768) + 10,240 = 32,548,136,960; the arcee config
    counts a second RMSNorm a layer. The v5p table's 328 TFLOP/s/chip is then 1,652.3 tokens a second a chip."""
    run = next(r for r in measured_runs.runs() if r.name == "maxtext-32b-v5p-128")
    assert measured_runs.run_model(run).evaluate("params") - 32 * 10_240 == 32_548_136_960
    per_token = 6 * 32_548_136_960 + 6 * 32 * 32 * 256 * 2048
    assert run.measured == ("tokens_per_s_per_gpu", pytest.approx(328e12 / per_token, abs=0.05))
    peak = tomllib.loads((ROOT / "hardware" / "tpu-v5p.toml").read_text(encoding="utf-8"))["dense_flops_per_s"]["bf16"]
    assert 328e12 / peak == pytest.approx(0.7147, abs=5e-4)  # the table's MFU 71.47 % at the chip's bf16 peak (its TFLOP/s rounded)


def test_one_shot_all_reduce_makes_batch_one_decode_latency_flat_in_the_degree():
    """Within a node the engines' one-shot all-reduce costs one latency whatever the degree, so batch-1 decode
    of a small model gains from 2 to 8 GPUs (gpt-fast's Llama-2-7B: 168.84 → 328.43 tokens/s), where a
    log₂ p tree would give the gain back."""
    model = symform.load("llama-2-7b")
    tpot = {t: estimate.serving_estimate(model, "a100-sxm-80gb", batch=1, prompt=5, output=200, tensor=t).tpot.estimate for t in (2, 4, 8)}
    assert tpot[2] > tpot[4] > tpot[8]
    eff = tomllib.loads((ROOT / "hardware" / "efficiency" / "a100-sxm-80gb.toml").read_text())
    per_layer = 2  # the attention's and the MLP's all-reduce
    floor = 32 * per_layer * eff["links"]["scale_up"]["latency_s"]
    comm = {t: estimate.serving_estimate(model, "a100-sxm-80gb", batch=1, prompt=5, output=200, tensor=t).decode_comm_s for t in (2, 8)}
    assert floor < comm[2] and comm[8] < 1.5 * comm[2]


def test_fp8_cache_and_per_head_reads_of_decode_attention():
    """Decode attention reads the cache at kv_bytes; a kernel without grouped-query packing reads each key/value
    head once per query head (Llama-3.1-8B: 32 query heads over 8 key/value heads, head size 128)."""
    from symform.analysis.time.roofline import phase_work

    model = symform.load("llama-3.1-8b")
    def core_bytes(m, grouped):
        work = phase_work(m, "decode", depth=None, flash=True, grouped=grouped).components
        total = sum((w.bytes for p, w in work.items() if p.endswith("/core")), sympy.Integer(0))
        values = m.bindings(batch=1, past=4096)
        return float(total.xreplace({s: values[s.name] for s in total.free_symbols if s.name in values}))
    cache = 32 * 2 * 8 * 128 * 4097  # layers × (K, V) × kv heads × head size × cached tokens (the new one included)
    grouped, fp8 = core_bytes(model, True), core_bytes(model.with_conventions(kv_bytes=1), True)
    assert grouped - fp8 == pytest.approx(cache * 1, rel=1e-9)  # two bytes an element, then one
    assert core_bytes(model, False) - grouped == pytest.approx(cache * 2 * (32 / 8 - 1), rel=1e-9)


def test_band_contains_the_estimate_and_comm_slows_it():
    model = symform.load("llama-3.2-1b")
    one = estimate.training_estimate(model, "h100-sxm", global_batch=8, micro_batch=1, seq=1024)
    assert one.step.low < one.step.estimate < one.step.high
    tp = estimate.training_estimate(model, "h100-sxm", global_batch=8, micro_batch=1, seq=1024, layout=Layout(tensor=2))
    assert tp.exposed_comm_s["tensor"] > 0
    # two devices each doing half the GEMMs, plus exposed all-reduces: slower than half, faster than one
    assert one.compute_s / 2 < tp.step.estimate < one.step.estimate


def test_the_gradient_exchange_hides_under_the_last_micro_batchs_backward_only():
    """Megatron-Core (schedules.py: every micro-batch but the last under no_sync, then enable_grad_sync) and DDP's
    no_sync reduce the gradients once, beside the last micro-batch's backward: with M micro-batches the window is
    2/3 of one micro-batch's compute, not of the step's, so accumulation leaves more of the exchange exposed."""
    model = symform.load("llama-3.2-1b")
    layout = Layout(data=16)  # one device a node: the exchange crosses the network on one NIC each
    found = {}
    for microbatches in (1, 16):
        r = estimate.training_estimate(model, "h100-sxm", global_batch=16 * microbatches, micro_batch=1, seq=1024, layout=layout, node_size=1)
        window = r.compute_s * 2 / 3 / microbatches
        assert r.exposed_comm_s["data"] == pytest.approx(max(0.0, r.comm_s["data"] - window), rel=1e-12)
        found[microbatches] = r
    one, many = found[1], found[16]
    assert one.comm_s["data"] == pytest.approx(many.comm_s["data"], rel=1e-12)  # the same gradients, once a step
    # sixteen micro-batches' backward would hide it whole; the last one's leaves as much exposed as a lone one's
    assert many.comm_s["data"] < many.compute_s * 2 / 3
    assert one.exposed_comm_s["data"] > 0
    assert many.exposed_comm_s["data"] == pytest.approx(one.exposed_comm_s["data"], rel=1e-12)


@pytest.mark.parametrize("gpu", ["a100-sxm-80gb", "h100-sxm", "b200"])
@pytest.mark.parametrize("seq", [2048, 8192, 32768])
def test_flash_attention_in_training_runs_at_its_compute_rate(gpu, seq):
    """FlashAttention-2 and its successors re-read keys and values from the L2 cache the concurrent query tiles share,
    so a training step's attention core is bound by its FLOPs at the kernels' measured fraction (FlashAttention-2 and
    -3 reach 35-75 % of an H100's peak), never by HBM: on every fitted GPU its memory time stays below its compute time.
    With the paper's M (one A100 SM's 192 KiB), an 8k-token step's core was charged T_c re-reads of its queries and
    outputs from HBM and came out memory-bound."""
    from symform.analysis.time import efficiencies, flash_attention, step_model

    model = symform.load("llama-3.1-8b")
    place = step_model.placement(gpu)
    eff = efficiencies.efficiency(gpu)
    peak, hbm = estimate._device_rates(place, "bf16")
    fusion, head = estimate._fusion("training"), estimate._head_size(model)
    (core,) = [k for k in estimate.kernels(model, "train", workload={"batch": 1, "seq": seq}) if k.kind == "attention"]
    compute, memory, _ = estimate.kernel_parts(core, peak, hbm, eff, fusion, head)
    assert memory < compute
    # each head's queries, keys, values and outputs (and the backward's gradients) cross HBM about once: T_c = 1
    v = model.values
    assert flash_attention.column_passes(seq, v["d_head"], flash_attention.sram_elements(flash_attention.DEFAULT_SRAM_BYTES)) == 1
    assert flash_attention.column_passes(seq, v["d_head"], flash_attention.sram_elements(flash_attention.PAPER_SRAM_BYTES)) == -(-seq // 192)


def test_eager_attention_is_slower_than_sdpa_in_prefill():
    model = symform.load("llama-3.2-1b")
    sdpa = estimate.serving_estimate(model, "h100-sxm", batch=1, prompt=8192, output=2)
    eager = estimate.serving_estimate(model, "h100-sxm", batch=1, prompt=8192, output=2, attention="eager")
    assert eager.ttft.estimate > sdpa.ttft.estimate


def test_decode_reads_the_weights_at_the_sustained_bandwidth():
    """Batch-1 decode at a short context: about the weight bytes over the device's sustained HBM rate."""
    model = symform.load("llama-2-7b")
    found = estimate.serving_estimate(model, "a100-sxm-80gb", batch=1, prompt=1, output=2)
    eff = tomllib.loads((ROOT / "hardware" / "efficiency" / "a100-sxm-80gb.toml").read_text())
    hbm = tomllib.loads((ROOT / "hardware" / "a100-sxm-80gb.toml").read_text())["hbm_bytes_per_s"]
    weights = 2 * (model.evaluate("params") - model.values["vocab"] * model.values["d_model"])  # the embedding table: one row gathered
    read = weights / (hbm * eff["memory"]["fraction"])
    # the weights' read, plus a fixed cost for each kernel a fused engine launches: per layer the
    # seven projections (q, k, v, o, gate, up, down) and the attention core, then the LM head;
    # the embedding gather and the rotary table are two more, and the cache's attention is tiny
    launch = eff["kernel"]["launch_s"]
    assert read + (32 * 8 + 1) * launch < found.tpot.estimate < 1.02 * (read + (32 * 8 + 3) * launch)


def test_cli_measured_step_mfu_by_each_definition(capsys):
    code, out, _ = _run(capsys, "time", "llama-3.2-1b", "--gpu", "h100-sxm", "--gpus", "8", "--train", "--global-batch", "64", "--seq", "2048", "--measured-step", "2.0", "--tokens", "1e12", "--json")
    assert code == 0
    data = json.loads(out)
    model = symform.load("llama-3.2-1b")
    peak = tomllib.loads((ROOT / "hardware" / "h100-sxm.toml").read_text())["dense_flops_per_s"]["bf16"]
    exact = model.evaluate("forward_flops", batch=64, seq=2048) + model.evaluate("backward_flops", batch=64, seq=2048)
    assert data["measured"]["mfu_exact"] == pytest.approx(exact / (2.0 * 8 * peak))
    palm = (6 * model.evaluate("params") + 12 * 16 * 32 * 64 * 2048) * 64 * 2048
    assert data["measured"]["mfu_palm"] == pytest.approx(palm / (2.0 * 8 * peak))
    # a run of 1e12 tokens at 64 × 2048 tokens per 2 s step
    assert data["run"]["days"] == pytest.approx(1e12 / (64 * 2048) * 2.0 / 86400)
    assert data["run"]["gpu_hours"] == pytest.approx(1e12 / (64 * 2048) * 2.0 * 8 / 3600)
    assert data["estimate_s"]["low"] < data["estimate_s"]["estimate"] < data["estimate_s"]["high"]
    assert data["attention"] == "sdpa"


def test_cli_serving_json_carries_estimates_beside_bounds(capsys):
    code, out, _ = _run(capsys, "time", "llama-3.2-1b", "--gpu", "h100-sxm", "--infer", "--batch", "2", "--prompt", "512", "--output", "16", "--json")
    assert code == 0
    data = json.loads(out)
    for key in ("ttft_s", "tpot_s"):
        assert {"lower", "upper", "estimate", "low", "high"} <= set(data[key])
        assert data[key]["estimate"] >= data[key]["lower"]


def test_cli_serving_json_keeps_the_bounds_tokens_per_second(capsys):
    """tokens_per_s's high and low are the bounds' (batch × output over the request's lower and upper time), as the text
    prints them; the estimate's band sits under estimate. Its high and low had overwritten the bounds'."""
    code, out, _ = _run(capsys, "time", "llama-3.2-1b", "--gpu", "h100-sxm", "--infer", "--batch", "4", "--prompt", "128", "--output", "16", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["tokens_per_s"]["high"] == pytest.approx(4 * 16 / data["total_s"]["lower"], rel=1e-12)
    assert data["tokens_per_s"]["low"] == pytest.approx(4 * 16 / data["total_s"]["upper"], rel=1e-12)
    assert data["tokens_per_s"]["estimate"] == data["estimate"]["tokens_per_s"]["estimate"]
    assert data["estimate"]["tokens_per_s"]["low"] < data["tokens_per_s"]["estimate"] < data["estimate"]["tokens_per_s"]["high"]


def test_cli_device_without_efficiency_data_keeps_its_bounds(capsys):
    code, out, _ = _run(capsys, "time", "llama-3.2-1b", "--gpu", "l4", "--infer", "--batch", "1", "--prompt", "64", "--output", "4", "--json")
    assert code == 0
    assert "no efficiency data" in json.loads(out)["estimate_missing"]


@pytest.mark.parametrize("argv, phrase", [
    (["--measured-step", "-1"], "not a positive"),
    (["--measured-step", "2", "--measured-tokens-per-s", "5"], "not both"),
])
def test_cli_bad_measurements_are_refused(capsys, argv, phrase):
    code, _, err = _run(capsys, "time", "llama-3.2-1b", "--gpu", "h100-sxm", "--train", "--global-batch", "8", "--seq", "512", *argv)
    assert code == 2 and phrase in err and len(err.strip().splitlines()) == 1


def test_cli_validate_summary(capsys):
    code, out, _ = _run(capsys, "validate")
    assert code == 0 and "training" in out and "serving" in out


def test_fp8_drives_both_the_rate_and_the_weight_bytes():
    """--dtype fp8: the decode step reads 1-byte weights (the bytes drop by the weights' half) at the fp8 peak."""
    from symform.analysis.time.phase_time import decode_time

    model = symform.load("llama-3-8b")
    bf16 = decode_time(model, "h100-sxm", batch=1, context=0)
    fp8 = decode_time(model, "h100-sxm", batch=1, context=0, dtype="fp8")
    d = model.values["d_model"]
    # every weight read once at half the width; of the embedding table only the looked-up row
    weights = model.evaluate("params") - model.values["vocab"] * d + d
    assert bf16.bytes - fp8.bytes == weights
    fp8_peak = tomllib.loads((ROOT / "hardware" / "h100-sxm.toml").read_text())["dense_flops_per_s"]["fp8"]
    assert fp8.flops == bf16.flops and fp8.t_math == pytest.approx(fp8.flops / fp8_peak)


# --- mixture of experts: distinct experts touched per decode step ------------------------------


def test_expected_distinct_experts_uniform_and_skewed():
    from fractions import Fraction

    from symform import EvaluationError
    from symform.analysis.time.routing import expected_experts

    one_line_error(EvaluationError, lambda: expected_experts(8, 2, 8, skew=-1), "skew", "Zipf")
    assert expected_experts(8, 2, 1) == 2  # one token: exactly its top_k
    assert expected_experts(8, 2, 8) == 8 * (1 - Fraction(3, 4) ** 8)
    assert 7.99 < float(expected_experts(8, 2, 64)) <= 8
    assert float(expected_experts(8, 2, 8, skew=1.0)) < float(expected_experts(8, 2, 8))


def test_mixtral_decode_reads_every_touched_expert():
    """Batch 8 on Mixtral touches 8·(1 − (3/4)^8) ≈ 7.2 experts per layer, not top_k = 2.

    Per-token traffic comes from bytes_moved (which counts top_k experts' weights for any
    batch, so its weight terms cancel between batch 8 and batch 1).
    """
    from fractions import Fraction

    from symform.analysis.time.phase_time import decode_time

    model = symform.load("mixtral-8x7b")
    v = model.values
    one, eight = (decode_time(model, "h100-sxm", batch=b, context=0).bytes for b in (1, 8))
    inference = model.with_conventions(training=0)
    per_token = inference.evaluate("bytes_moved", batch=8, seq=1) - inference.evaluate("bytes_moved", batch=1, seq=1)
    expert_bytes = 3 * v["d_model"] * v["d_ff_expert"] * 2 * v["n_layers"]  # gate, up, down at 2 bytes
    distinct = 8 * (1 - Fraction(3, 4) ** 8)
    assert eight - one == per_token + (distinct - 2) * expert_bytes


# --- time --train checks the layout's memory ------------------------------------------------------


def test_time_train_reports_memory_fit_as_memory_counts_it(capsys):
    from symform.analysis.memory.memory import Training, training_memory
    from symform.analysis.memory.settings import Layout as L

    argv = ["time", "llama-3.2-1b", "--gpu", "h100-sxm", "--gpus", "8", "--train", "--global-batch", "16", "--seq", "2048", "--zero", "3", "--json"]
    code, out, _ = _run(capsys, *argv)
    assert code == 0
    memory = json.loads(out)["memory"]
    expected = training_memory(symform.load("llama-3.2-1b"), batch=1, seq=2048, setup=Training(flash=True, layout=L(data=8, zero=3), framework="torchtitan"))  # the default framework
    # whole bytes as `symform memory` prints them: a fraction of a byte (an average over ranks) still takes one
    assert memory["bytes_per_device"] == math.ceil(Fraction(str(expected.total))) and memory["fits"]


@pytest.mark.parametrize(
    ("timed", "counted", "gpus", "global_batch"),
    [(["--schedule", "gpipe"], ["--schedule", "gpipe"], 16, 64), (["--chunks", "2"], ["--chunks", "2", "--schedule", "interleaved"], 16, 64), ([], [], 8, 1)],
)
def test_time_memory_keeps_in_flight_what_the_step_s_micro_batches_do(capsys, timed, counted, gpus, global_batch):
    """The memory line counts the step's own micro-batches (global batch / (micro-batch × data ranks)): GPipe keeps
    all 32 in flight, 1F1B no more than there are (one, where the step has one), as `symform memory --microbatches`
    counts them."""
    argv = ["time", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", str(gpus), "--train", "--global-batch", str(global_batch), "--seq", "4096", "--tp", "4", "--pp", "2", *timed, "--json"]
    code, out, err = _run(capsys, *argv)
    assert code == 0, err
    found = json.loads(out)
    data = gpus // 8
    assert found["microbatches"] == global_batch // data
    layout = ["--dp", str(data), "--tp", "4", "--pp", "2", *counted, "--microbatches", str(global_batch // data)]
    code, out, err = _run(capsys, "memory", "llama-3.1-8b", "--train", "--batch", "1", "--seq", "4096", *layout, "--json")
    assert code == 0, err
    assert found["memory"]["bytes_per_device"] == json.loads(out)["total"]


def test_time_fit_only_refuses_a_layout_that_does_not_fit(capsys):
    code, _, err = _run(capsys, "time", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "8", "--train", "--global-batch", "8", "--seq", "4096", "--fit-only")
    assert code == 2 and "GB per device" in err and len(err.strip().splitlines()) == 1
    code, out, _ = _run(capsys, "time", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "8", "--train", "--global-batch", "8", "--seq", "4096")
    assert code == 0 and "DOES NOT FIT" in out


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tensor=st.sampled_from([1, 2, 4]), pipeline=st.sampled_from([1, 2]), micro=st.sampled_from([1, 2]), seq=st.sampled_from([256, 1024, 2048]), recompute=st.sampled_from(["none", "selective", "full"]))
def test_no_kernel_beats_the_datasheet(tensor, pipeline, micro, seq, recompute):
    """Every sustained fraction is at most 1: the estimate's compute never undercuts FLOPs / peak, and the step never
    undercuts the bounds' compute time stretched by the bubble."""
    model = _small()
    layout = Layout(data=2, tensor=tensor, pipeline=pipeline)
    found = estimate.training_estimate(model, "h100-sxm", global_batch=8 * micro, micro_batch=micro, seq=seq, layout=layout, recompute=recompute)
    from symform.analysis.time.timing import training_time

    bounds = training_time(model, "h100-sxm", global_batch=8 * micro, micro_batch=micro, seq=seq, layout=layout, recompute=recompute, flash=True)
    assert found.compute_s >= bounds.t_math * (1 - 1e-12)
    assert found.step.estimate >= bounds.t_math * (1 + bounds.bubble_ratio) * (1 - 1e-12)
    assert found.step.low < found.step.estimate < found.step.high


_SMALL = {}


def _small():
    if "m" not in _SMALL:
        _SMALL["m"] = symform.load("llama-3.2-1b")
    return _SMALL["m"]


# --- context parallelism in time ---------------------------------------------------------------------


def test_context_parallelism_splits_the_tokens_and_passes_keys_and_values_around_the_ring():
    from symform.analysis.time.timing import training_time

    model = _small()
    v = model.values
    one = training_time(model, "h100-sxm", global_batch=2, micro_batch=1, seq=4096, flash=True)
    cp = training_time(model, "h100-sxm", global_batch=2, micro_batch=1, seq=4096, layout=Layout(context=4), flash=True)
    assert cp.devices == 4
    assert cp.flops_per_device * 4 == one.flops_per_device  # every FLOP grows with the tokens
    assert cp.model_flops == one.model_flops
    # ring attention: 3 forward and 6 backward... per hop a key and a value chunk of s/4 tokens, in every layer and micro-batch
    chunk = 2 * 1 * (4096 // 4) * v["n_kv_heads"] * v["d_head"] * 2
    assert cp.comm["context"].bytes_per_rank == pytest.approx(2 * v["n_layers"] * (3 + 6) * chunk)
    assert cp.comm["data"].ranks == 4  # gradients reduce over the context ranks
    found = estimate.training_estimate(model, "h100-sxm", global_batch=2, micro_batch=1, seq=4096, layout=Layout(context=4))
    alone = estimate.training_estimate(model, "h100-sxm", global_batch=2, micro_batch=1, seq=4096)
    assert alone.compute_s / 4 < found.compute_s < alone.compute_s


def test_context_parallel_degree_must_split_the_sequence():
    from symform import ConfigError
    from symform.analysis.time.timing import training_time

    # two equal chunks per context rank (Megatron-Core's zigzag split: 'divisible by 2 * cp_size')
    one_line_error(ConfigError, lambda: training_time(_small(), "h100-sxm", global_batch=2, micro_batch=1, seq=1005, layout=Layout(context=3)), "1005", "6 equal chunks")


def test_a_measured_runs_context_degree_reaches_its_layout_memory_and_band():
    """Megatron-Bridge 25.11's Llama 3.1 405B on 128 B200 (tensor 4, pipeline 8, context 2, virtual 8; GBS 64, MBS 1,
    8,192 tokens): 128 / (4 · 8 · 2) = 2 data-parallel ranks, each running 64 / (2 · 1) = 32 micro-batches (the
    table's GA column), each rank's share of a sequence 8,192 / 2 = 4,096 tokens."""
    from symform.analysis.time.memory_validation import timed_layout

    run = next(r for r in measured_runs.runs() if r.name == "mb-b200-llama3.1-405b-fp8")
    layout = measured_runs.run_layout(run.setup)
    assert (layout.data, layout.tensor, layout.pipeline, layout.context, layout.chunks) == (2, 4, 8, 2, 8)
    prepared = calibration._prepared(run)
    assert prepared.bounds.microbatches == 32 and "context" in prepared.bounds.comm
    assert {k.rows for k in prepared.work} == {4096}
    memory = timed_layout(run)
    assert (memory.data, memory.context, memory.microbatches) == (2, 2, 32)
    s = run.setup
    found = estimate.training_estimate(prepared.model, s["gpu"], global_batch=64, micro_batch=1, seq=8192, layout=measured_runs.training_layout(run), dtype="fp8")
    assert "context parallelism 2 (no fitted run uses it)" in found.extrapolating
    assert not any("virtual pipeline" in note for note in found.extrapolating)  # a fitted run's own feature


def test_the_band_widens_only_for_layout_features_no_fitted_run_has():
    """The fit split's training runs include Megatron-Bridge 25.09's H100 Qwen3-30B-A3B with a virtual pipeline (the
    interleaved schedule) and expert parallelism; none runs sequence or context parallelism. A case with those two
    is no extrapolation in its layout; one adding context parallelism is, and says so."""
    fitted = [r.setup for r in measured_runs.runs() if r.kind == "training" and r.split == "fit"]
    assert any(s.get("chunks", 1) > 1 and s.get("expert", 1) > 1 for s in fitted)
    assert not any(s.get("context", 1) > 1 for s in fitted)
    model = symform.load("qwen3-0.6b")
    step = dict(global_batch=64, micro_batch=1, seq=2048)
    plain = estimate.training_estimate(model, "h100-sxm", **step, layout=Layout(data=2, pipeline=4, schedule="interleaved", chunks=7))
    assert not any("no fitted run uses it" in note for note in plain.extrapolating)
    wider = estimate.training_estimate(model, "h100-sxm", **step, layout=Layout(pipeline=4, context=2, schedule="interleaved", chunks=7))
    assert [n for n in wider.extrapolating if "no fitted run uses it" in n] == ["context parallelism 2 (no fitted run uses it)"]
    assert wider.step.high / wider.step.estimate > plain.step.high / plain.step.estimate


def test_a_measured_run_with_a_context_degree_that_does_not_split_its_gpus_is_refused(tmp_path, monkeypatch):
    from symform import ConfigError
    from symform.engine.errors import EvaluationError

    one_line_error(ConfigError, lambda: measured_runs.data_degree({"gpus": 128, "tensor": 4, "pipeline": 8, "context": 3}), "128 GPUs", "context 3")
    one_line_error(EvaluationError, lambda: measured_runs.data_degree({"gpus": 128, "context": 0}), "context", "0")
    one_line_error(EvaluationError, lambda: measured_runs.data_degree({"gpus": 128, "context": "2"}), "context", "'2'")
    folder = tmp_path / "hardware" / "measured"
    folder.mkdir(parents=True)
    (folder / "bad.toml").write_text('kind = "measured_training"\n[source]\n[[runs]]\nname = "bad-cp"\nsplit = "check"\npreset = "llama-3-8b"\ngpu = "h100-sxm"\ngpus = 8\ntensor = 2\ncontext = 3\n'
                                     'global_batch = 8\nmicro_batch = 1\nseq = 8192\nmeasured = { tokens_per_s_per_gpu = 1 }\n', encoding="utf-8")
    monkeypatch.setattr(measured_runs, "data_root", lambda: tmp_path)
    one_line_error(ConfigError, lambda: measured_runs.runs_in(measured_runs._timed_files.__wrapped__()), "bad.toml", "bad-cp", "context 3")


def test_plan_lists_no_layout_beaten_on_both_time_and_memory():
    from symform.analysis.plans.planner import plan

    found = plan(_small(), "h100-sxm", devices=8, global_batch=32, seq=2048, top=8)
    rows = [(p.estimate.step.estimate, p.memory.total) for p in found.best]
    for i, (t, m) in enumerate(rows):
        assert not any(t2 <= t and m2 <= m for t2, m2 in rows[:i]), rows


def test_whether_a_run_has_routed_experts_is_read_as_its_built_model_says():
    # a plan asks it of every published run: read from the run's config, never building the 70-odd models
    from symform.analysis.time import measured_runs

    runs = measured_runs.runs()
    assert any(measured_runs.is_moe(r) for r in runs) and not all(measured_runs.is_moe(r) for r in runs)
    for run in runs:
        assert measured_runs.is_moe(run) == ("n_experts" in measured_runs.run_model(run).values), run.name


TINY_LLAMA = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
}  # fmt: skip


def _xla_fused_bytes(batch: int, seq: int) -> int:
    """What XLA keeps out of HBM in one micro-batch of TINY_LLAMA's training step, from the primitives by hand
    (bf16): an element-wise op moves its inputs and its output, 2 bytes each; a training step moves three times the
    forward's bytes (forward, then backward's twice); the cache write is K and V of each token."""
    b_s, d, ff, heads, kv_heads, d_head, layers = batch * seq, 64, 96, 4, 2, 16, 2
    forward = (
        2 * 2 * b_s * (heads + kv_heads) * d_head  # rope on queries and keys: read, write
        + 2 * 2 * b_s * ff  # act (silu): read, write
        + 2 * 3 * b_s * ff  # gate_mul: two reads, a write
        + 2 * (2 * 3 * b_s * d)  # the two residual adds: two reads, a write each
        + 2 * b_s * 2 * kv_heads * d_head  # kv_cache: the keys and values written
    )
    return 3 * forward * layers


def test_xla_training_fusion_takes_the_fused_leaves_bytes_off_a_tpu_step():
    """A TPU's efficiency file names XLA's fusion for training ([fusion] training = "xla"): the pointwise leaves that
    join a product's fusion (rotary, the activation and gate product, residual adds, the cache write) cost no HBM
    time, norms and the rest as before. Against every leaf charged its own pass (eager), the step's compute is
    shorter by exactly those leaves' bytes at the file's memory fraction of the chip's HBM bandwidth."""
    model = symform.Model.from_config(TINY_LLAMA, name="tiny-llama")
    hbm = tomllib.loads((ROOT / "hardware" / "tpu-v5p.toml").read_text(encoding="utf-8"))["hbm_bytes_per_s"]
    own = tomllib.loads((ROOT / "hardware" / "efficiency" / "tpu-v5p.toml").read_text(encoding="utf-8"))
    assert own["fusion"]["training"] == "xla"
    rules = tomllib.loads((ROOT / "hardware" / "efficiency" / "rules.toml").read_text(encoding="utf-8"))["fusion"]["xla"]
    assert rules["fraction"] == 0.0 and {"rope", "act", "gate_mul", "attn_residual", "mlp_residual", "kv_cache"} <= set(rules["leaves"])
    assert not {"attn_norm", "mlp_norm", "final_norm", "embed", "loss"} & set(rules["leaves"])  # a reduction, a gather: their own passes
    batch, seq, steps = 2, 256, 4
    common = dict(global_batch=batch * steps, micro_batch=batch, seq=seq)
    xla = estimate.training_estimate(model, "tpu-v5p", **common)
    eager = estimate.training_estimate(model, "tpu-v5p", convention="eager", **common)
    assert xla.factors["fusion"]["convention"] == "xla" and "rules.toml [fusion.xla]" in xla.factors["fusion"]["compiler"]
    expected = steps * _xla_fused_bytes(batch, seq) / (hbm * own["memory"]["fraction"])
    assert eager.compute_s - xla.compute_s == pytest.approx(expected, rel=1e-9)
    # the fitted fraction of the eager frameworks' fusion is not a TPU's: a fit that moves it leaves a TPU run alone
    run = next(r for r in measured_runs.runs() if r.name == "maxtext-32b-v5p-128")
    assert calibration.predict(run, {"rules:fusion.training.fraction": 0.25}) == calibration.predict(run)


def test_gpu_training_keeps_the_eager_frameworks_fusion():
    """No GPU's efficiency file names a compiler's fusion: a GPU step takes rules.toml's fitted "training"
    convention, and the same step under a copy of its file that names XLA's drops the same leaves' bytes."""
    from dataclasses import replace

    from symform.analysis.time import efficiencies

    for path in sorted((ROOT / "hardware" / "efficiency").glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        if data.get("kind") == "efficiency":
            assert ("fusion" in data) == data["device"].startswith("tpu-"), path.name
    model = symform.Model.from_config(TINY_LLAMA, name="tiny-llama")
    hbm = tomllib.loads((ROOT / "hardware" / "h100-sxm.toml").read_text(encoding="utf-8"))["hbm_bytes_per_s"]
    batch, seq = 2, 256
    gpu = estimate.training_estimate(model, "h100-sxm", global_batch=batch, micro_batch=batch, seq=seq)
    assert gpu.factors["fusion"]["convention"] == "training" and "compiler" not in gpu.factors["fusion"]
    eff = efficiencies.efficiency("h100-sxm")
    assert eff.training_fusion is None and efficiencies.rules().fusion["training"][0] == 1.0  # fitted: all of it
    compiled = estimate.training_estimate(model, "h100-sxm", global_batch=batch, micro_batch=batch, seq=seq, efficiency_data=replace(eff, training_fusion="xla"))
    # a launch each saved too: the fused leaves' kernels run no more (three passes a layer each, six leaves)
    launches = eff.launch_s * 3 * 2 * 6
    assert gpu.compute_s - compiled.compute_s == pytest.approx(_xla_fused_bytes(batch, seq) / (hbm * eff.memory) + launches, rel=1e-9)


def test_a_device_file_naming_an_unknown_fusion_is_refused(tmp_path):
    from symform.analysis.time import efficiencies

    text = (ROOT / "hardware" / "efficiency" / "tpu-v5p.toml").read_text(encoding="utf-8").replace('training = "xla"', 'training = "magic"')
    own = tmp_path / "my-tpu.toml"
    own.write_text(text, encoding="utf-8")
    with pytest.raises(symform.SymformError, match=r"fusion\.training is 'magic'; name one of rules\.toml's fusion conventions: eager, fused, training, xla$"):
        efficiencies.efficiency(str(own))
