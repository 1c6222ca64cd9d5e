"""Offload to host memory and NVMe (symform.analysis.memory.offload, `symform memory --offload/--kv-offload`).

Expected values follow the papers' per-parameter byte accounting for mixed-precision Adam
(Ψ parameters): ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840) keeps the 2Ψ bytes of
16-bit weights on the GPU and moves the 2Ψ of 16-bit gradients and the 12Ψ of fp32 master
weights, momentum and variance to the CPU (16Ψ → 2Ψ on the GPU, 8×), communicating 4Ψ bytes
per step (2Ψ of gradients down, 2Ψ of weights up). Link speeds are read from the data files.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import symform
from symform.analysis.devices.hardware import load_device
from symform.analysis.memory.memory import Inference, Training, inference_memory, training_memory
from symform.analysis.memory.settings import Layout
from symform.analysis.memory.offload import Offload, load_drive, parse_offload, place, with_times
from symform.interface.cli.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _toml(path: Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


PCIE_H100 = _toml(ROOT / "hardware" / "h100-pcie.toml")["interconnect"]["pcie"]["unidirectional_bytes_per_s"]
PM1743 = _toml(ROOT / "hardware" / "storage" / "samsung-pm1743.toml")


@pytest.fixture(scope="module")
def model():
    return symform.load("llama-3.2-1b")


@pytest.fixture(scope="module")
def psi(model):
    return model.evaluate("params")


@pytest.fixture(scope="module")
def training(model):
    return training_memory(model, batch=1, seq=64, setup=Training(precision="mixed", optimizer="adamw"))


def test_zero_offload_keeps_2_bytes_per_parameter_on_the_gpu_and_14_on_the_cpu(training, psi):
    placed = place(training, Offload(optimizer="cpu"))
    model_states = {k: v for k, v in placed.device.values.items() if k not in ("activations", "recompute_buffer", "backward_peak")}
    assert model_states == {"weights": 2 * psi}
    assert placed.tier_total("cpu") == 14 * psi
    assert set(placed.offloaded["cpu"]) == {"gradients", "master_weights", "optimizer"}
    # the paper's 8x: 16Ψ of model states on the GPU without offload, 2Ψ with it
    before = sum(v for k, v in training.values.items() if k not in ("activations", "recompute_buffer", "backward_peak"))
    assert before == 16 * psi and before / sum(model_states.values()) == 8


def test_zero_offload_moves_4_bytes_per_parameter_over_pcie_per_step(training, psi):
    placed = with_times(place(training, Offload(optimizer="cpu")), load_device("h100-pcie"))
    pcie = [t for t in placed.transfers if t.link.startswith("pcie")]
    assert sum(t.bytes for t in pcie) == 4 * psi
    assert {t.link: t.bytes for t in pcie} == {"pcie device→host": 2 * psi, "pcie host→device": 2 * psi}
    for t in pcie:
        assert t.seconds == pytest.approx(2 * psi / PCIE_H100, rel=1e-12)


def test_zero_infinity_nvme_holds_the_12_bytes_of_optimizer_state_and_the_weights(training, psi):
    placed = place(training, Offload(optimizer="nvme", params="nvme"))
    assert placed.tier_total("nvme") == 12 * psi + 2 * psi
    assert placed.offloaded["cpu"] == {"gradients": 2 * psi}
    assert "weights" not in placed.device.values


def test_nvme_times_use_the_drives_sequential_rates(training, psi):
    drive = load_drive("samsung-pm1743")
    placed = with_times(place(training, Offload(optimizer="nvme")), load_device("h100-pcie"), drive, drives=4)
    reads = [t for t in placed.transfers if t.link == "nvme read"]
    writes = [t for t in placed.transfers if t.link == "nvme write"]
    assert [t.bytes for t in reads] == [12 * psi] and [t.bytes for t in writes] == [12 * psi]
    assert reads[0].seconds == pytest.approx(12 * psi / (4 * PM1743["sequential_read_bytes_per_s"]), rel=1e-12)
    assert writes[0].seconds == pytest.approx(12 * psi / (4 * PM1743["sequential_write_bytes_per_s"]), rel=1e-12)


def test_params_offload_fetches_the_weights_twice_per_micro_batch(training, psi):
    placed = place(training, Offload(optimizer="cpu", params="cpu"))
    up = [t for t in placed.transfers if t.link == "pcie host→device"]
    assert [(t.bytes, t.every) for t in up] == [(4 * psi, "micro-batch")]  # 2 bytes, forward and backward


def test_kv_offload_moves_the_cache_to_the_host_and_reads_it_each_decode_step(model):
    report = inference_memory(model, batch=4, seq=1, past=1024, setup=Inference())
    placed = with_times(place(report, Offload(kv="cpu")), load_device("h100-pcie"))
    kv = report.values["kv_cache"]
    # llama-3.2-1b: 16 layers, 8 KV heads of 64, bf16: 2·16·8·64·2 bytes per token, 4 × 1025 tokens
    assert kv == 2 * 16 * 8 * 64 * 2 * 4 * 1025
    assert placed.offloaded == {"cpu": {"kv_cache": kv}}
    assert placed.device.total == report.total - kv
    [t] = placed.transfers
    assert (t.every, t.bytes) == ("decode step", kv) and t.seconds == pytest.approx(kv / PCIE_H100, rel=1e-12)


TIER = st.sampled_from(("device", "cpu", "nvme"))


@settings(max_examples=25, deadline=None)
@given(optimizer=TIER, params=TIER, zero=st.sampled_from((0, 1, 2, 3)), dp=st.sampled_from((1, 2, 4)))
def test_every_byte_lives_in_exactly_one_place(training, model, optimizer, params, zero, dp):
    report = training_memory(model, batch=1, seq=32, setup=Training(layout=Layout(data=dp, zero=zero)))
    placed = place(report, Offload(optimizer=optimizer, params=params))
    assert placed.device.total + placed.tier_total("cpu") + placed.tier_total("nvme") == report.total
    found = [c for c in placed.device.values] + [c for tier in placed.offloaded.values() for c in tier]
    assert sorted(found) == sorted(report.values)


@pytest.mark.parametrize(
    "text",
    ["optimizer", "optimiser=cpu", "optimizer=gpu", "kv=nvme", "gradients=cpu", "optimizer=cpu,optimizer=nvme", "optimizer=cpu,gradients=nvme"],
)
def test_bad_offload_specs_are_one_line_errors(text):
    with pytest.raises(symform.SymformError) as caught:
        parse_offload(text)
    assert "\n" not in str(caught.value)


def test_cli_training_offload_json(capsys, psi):
    assert main(["memory", "llama-3.2-1b", "--train", "--batch", "1", "--seq", "64", "--gpu", "h100-pcie", "--offload", "optimizer=cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["components"]["weights"] == 2 * psi and "optimizer" not in out["components"]
    assert out["offload"]["totals"]["cpu"] == 14 * psi
    assert sum(t["bytes"] for t in out["offload"]["transfers"]) == 4 * psi


def test_cli_table_says_where_bytes_live(capsys):
    assert main(["memory", "llama-3.2-1b", "--infer", "--batch", "1", "--seq", "1", "--past", "512", "--gpu", "h100-pcie", "--kv-offload", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "host memory" in out and "each decode step" in out and "64 GB/s each way" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--infer", "--batch", "1", "--seq", "1", "--offload", "optimizer=cpu"],
        ["--train", "--batch", "1", "--seq", "8", "--kv-offload", "cpu"],
        ["--train", "--batch", "1", "--seq", "8", "--offload", "optimizer=cpu", "--nvme", "samsung-pm1743"],
        ["--train", "--batch", "1", "--seq", "8", "--offload", "optimizer=nvme", "--nvme", "no-such-drive"],
        ["--train", "--batch", "1", "--seq", "8", "--nvme", "samsung-pm1743"],
    ],
)
def test_cli_bad_offload_exits_2_with_one_line(capsys, argv):
    assert main(["memory", "llama-3.2-1b", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("symform: error:")


def test_a_drive_file_with_a_unit_in_a_string_is_refused(tmp_path):
    bad = tmp_path / "my-drive.toml"
    bad.write_text('title = "x"\nvendor = "x"\nsequential_read_bytes_per_s = "7 GB/s"\nsequential_write_bytes_per_s = 5e9\n[source]\ntitle = "x"\ndate = 2024\n')
    with pytest.raises(symform.SymformError) as caught:
        load_drive(str(bad))
    assert "\n" not in str(caught.value) and "sequential_read_bytes_per_s" in str(caught.value)


def test_cli_time_counts_what_stays_and_times_the_transfers_per_step(capsys, psi):
    argv = ["time", "llama-3.2-1b", "--gpu", "h100-pcie", "--train", "--global-batch", "4", "--seq", "64", "--offload", "optimizer=cpu", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    memory = out["memory"]
    assert memory["offload"]["totals"]["cpu"] == 14 * psi
    # 4 micro-batches each send 2Ψ of gradients down; one optimizer step sends 2Ψ of weights up
    assert memory["offload"]["transfer_s_per_step"] == pytest.approx((4 * 2 * psi + 2 * psi) / PCIE_H100, rel=1e-12)
    assert main(argv[:-3] + ["--json"]) == 0
    plain = json.loads(capsys.readouterr().out)["memory"]
    assert plain["bytes_per_device"] - memory["bytes_per_device"] == pytest.approx(14 * psi, abs=1)


def test_cli_time_refuses_offload_when_serving(capsys):
    assert main(["time", "llama-3.2-1b", "--gpu", "h100-pcie", "--infer", "--batch", "1", "--prompt", "4", "--output", "2", "--offload", "optimizer=cpu"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_gradients_kept_on_the_device_still_reach_the_host_step_once(training, psi):
    placed = place(training, Offload(optimizer="cpu", gradients="device"))
    down = [(t.bytes, t.every) for t in placed.transfers if t.link == "pcie device→host"]
    assert down == [(2 * psi, "optimizer step")]
    assert placed.device.values["gradients"] == 2 * psi and placed.tier_total("cpu") == 12 * psi


def test_cli_time_serving_kv_offload_reads_the_cache_back_each_decode_step(capsys):
    argv = ["time", "llama-3.2-1b", "--gpu", "h100-pcie", "--infer", "--batch", "2", "--prompt", "100", "--output", "4", "--kv-offload", "cpu", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)["offload"]
    per_token = 2 * 16 * 8 * 64 * 2  # K and V, 16 layers, 8 KV heads of 64, bf16
    # the step at past P holds P + 1 tokens (the new one included), for each of the 2 sequences
    assert out["first_decode"]["transfer_s"] == pytest.approx(2 * 101 * per_token / PCIE_H100, rel=1e-12)
    assert out["last_decode"]["transfer_s"] == pytest.approx(2 * 104 * per_token / PCIE_H100, rel=1e-12)
    assert out["last_decode"]["totals"]["cpu"] == 2 * 104 * per_token


def test_cli_fit_with_offload_solves_against_what_stays_on_the_device(capsys, psi):
    budget = 8 * psi  # more than the 2Ψ of weights, less than the 16Ψ of model states
    common = ["--train", "--seq", "256", "--recompute", "full", "--flash"]
    assert main(["fit", "llama-3.2-1b", *common, "--memory", str(budget), "--solve", "batch", "--offload", "optimizer=cpu", "--json"]) == 0
    largest = json.loads(capsys.readouterr().out)["largest"]
    assert largest >= 1
    for batch, fits in ((largest, True), (largest + 1, False)):
        assert main(["memory", "llama-3.2-1b", *common, "--batch", str(batch), "--offload", "optimizer=cpu", "--json"]) == 0
        assert (json.loads(capsys.readouterr().out)["total"] <= budget) is fits
    assert main(["fit", "llama-3.2-1b", *common, "--memory", str(budget), "--solve", "batch", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["largest"] == 0
