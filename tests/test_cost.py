"""Dollars and energy of training runs and of serving (symform.analysis.devices.cost, `symform time --price-per-hour --energy`).

Expected values are hand arithmetic: device-hours = seconds × devices / 3600, dollars = device-hours ×
price, energy = TDP × devices × seconds (the TDP upper bound), one kWh = 3.6e6 J.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import symform
from symform.analysis.devices.cost import run_cost, serving_cost
from symform.interface.cli.cli import main

HARDWARE = Path(__file__).resolve().parent.parent / "hardware"


def _tdp(name: str) -> float:
    with open(HARDWARE / f"{name}.toml", "rb") as f:
        return tomllib.load(f)["tdp_watts"]


def test_run_cost_by_hand():
    # 64 GPUs for 10 hours at $2.00/device-hour and 700 W: 640 device-hours, $1,280, 448 kWh
    found = run_cost(seconds=36_000, devices=64, tokens=1e9, price_per_hour=2.0, tdp_watts=700)
    assert found["device_hours"] == pytest.approx(640)
    assert found["dollars"] == pytest.approx(1280)
    assert found["dollars_per_million_tokens"] == pytest.approx(1.28)
    assert found["energy_kwh"] == pytest.approx(448)
    assert found["joules_per_token"] == pytest.approx(700 * 64 * 36_000 / 1e9)
    assert any("TDP upper bound" in a for a in found["assumptions"])


def test_serving_cost_by_hand():
    # 1,000 tokens/s on 2 devices: a million tokens take 1,000 s, 2,000 device-seconds = 5/9 device-hour
    found = serving_cost(tokens_per_s=1000, devices=2, price_per_hour=3.6, tdp_watts=350)
    assert found["dollars"] == pytest.approx(2.0)
    assert found["joules_per_token"] == pytest.approx(0.7)


def test_without_price_or_tdp_the_figure_is_left_out_and_said():
    found = run_cost(seconds=10, devices=1, tokens=100)
    assert "dollars" not in found and "energy_kwh" not in found
    assert any("no tdp_watts" in a for a in found["assumptions"])


@settings(max_examples=30, deadline=None)
@given(st.floats(1, 1e7), st.integers(1, 4096), st.floats(0.01, 100))
def test_dollars_scale_with_devices_and_time(seconds, devices, price):
    one = run_cost(seconds=seconds, devices=1, tokens=1e6, price_per_hour=price)["dollars"]
    many = run_cost(seconds=seconds, devices=devices, tokens=1e6, price_per_hour=price)["dollars"]
    assert many == pytest.approx(devices * one, rel=1e-12)


@pytest.mark.parametrize("bad", [{"seconds": 0}, {"devices": 0}, {"price_per_hour": -1.0}, {"tdp_watts": float("nan")}, {"tokens": float("inf")}])
def test_bad_input_is_one_line_error(bad):
    given = {"seconds": 1.0, "devices": 1, "tokens": 1.0} | bad
    with pytest.raises(symform.SymformError) as caught:
        run_cost(**given)
    assert "\n" not in str(caught.value)


def test_cli_serving_cost_follows_its_tokens_per_s(capsys):
    argv = ["time", "llama-3.2-1b", "--gpu", "h100-sxm", "--infer", "--batch", "4", "--prompt", "128", "--output", "16", "--price-per-hour", "2.5", "--energy", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    rate = out["estimate"]["tokens_per_s"]["estimate"]
    cost = out["cost"]
    assert cost["dollars"] == pytest.approx(1e6 / rate / 3600 * 2.5, rel=1e-12)
    assert cost["joules_per_token"] == pytest.approx(_tdp("h100-sxm") / rate, rel=1e-12)


def test_cli_training_run_cost_is_its_gpu_hours_times_price(capsys):
    argv = ["time", "llama-3.2-1b", "--gpu", "h100-sxm", "--gpus", "8", "--train", "--global-batch", "8", "--seq", "256", "--tokens", "1e9", "--price-per-hour", "2", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cost"]["dollars"] == pytest.approx(out["run"]["gpu_hours"] * 2, rel=1e-12)
    assert "energy_kwh" not in out["cost"]


def test_cli_table_lists_assumptions(capsys):
    assert main(["time", "llama-3.2-1b", "--gpu", "tpu-v5p", "--infer", "--batch", "1", "--prompt", "64", "--output", "4", "--energy"]) == 0
    out = capsys.readouterr().out
    assert "energy left out: the device file gives no tdp_watts" in out


def test_cli_bad_price_exits_2(capsys):
    assert main(["time", "llama-3.2-1b", "--gpu", "h100-sxm", "--infer", "--batch", "1", "--prompt", "4", "--output", "2", "--price-per-hour", "-3"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_serving_plan_prices_each_layout_at_its_tokens_per_s_per_gpu(capsys):
    argv = ["plan", "--serve", "llama-3-8b", "--gpu", "h100-sxm", "--prompt", "512", "--output", "128", "--ttft-max", "500ms", "--tpot-max", "50ms", "--tp-max", "1", "--mode", "continuous", "--price-per-hour", "2.5", "--energy", "--json"]
    assert main(argv) == 0
    layouts = json.loads(capsys.readouterr().out)["layouts"]
    assert layouts
    for layout in layouts:
        rate = layout["tokens_per_s_per_gpu"]  # one GPU for 1e6 / rate seconds makes a million tokens
        assert layout["cost_per_million_tokens"]["dollars"] == pytest.approx(2.5 * 1e6 / rate / 3600)
        assert layout["cost_per_million_tokens"]["joules_per_token"] == pytest.approx(_tdp("h100-sxm") / rate)


def test_pricing_options_belong_to_serving_plans(capsys):
    assert main(["plan", "llama-3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "8", "--seq", "2048", "--price-per-hour", "2"]) == 2
    assert "--price-per-hour is a serving option; add --serve" in capsys.readouterr().err
