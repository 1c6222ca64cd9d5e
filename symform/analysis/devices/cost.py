"""Money and energy of a training run or of serving, from a time and a device's data.

Prices are the user's: symform ships none, since what a device-hour costs depends on
the provider, the contract and the month. Power is the device file's TDP
(``tdp_watts``, from its datasheet) under one named model:

- **TDP upper bound**: every accelerator draws its TDP for the whole time. TDP is the
  board's maximum sustained power, so this bounds the accelerators' energy from
  above; the host (CPUs, DRAM, NICs, storage) and the data centre's cooling
  (its PUE) are not counted.

Every result lists these assumptions beside its numbers.
"""

from __future__ import annotations

import math

from ...engine.errors import EvaluationError

SECONDS_PER_HOUR = 3600
JOULES_PER_KWH = 3.6e6
POWER_MODEL = "TDP upper bound: each accelerator draws its datasheet TDP (tdp_watts in its hardware file) the whole time; host, network and cooling (PUE) not counted"
PRICE_ORIGIN = "price per device-hour given by the user (symform ships no prices)"


def _positive(name: str, value: float | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0):
        raise EvaluationError(f"{name} is {value!r}; give a positive finite number")


def run_cost(*, seconds: float, devices: int, tokens: float, price_per_hour: float | None = None, tdp_watts: float | None = None) -> dict[str, object]:
    """Device-hours, dollars and energy of ``devices`` accelerators busy for ``seconds`` that process ``tokens`` tokens.

    Dollars need ``price_per_hour`` (per device); energy needs ``tdp_watts``; each is left out without it,
    and the assumptions say why."""
    for name, value in (("seconds", seconds), ("tokens", tokens), ("price_per_hour", price_per_hour), ("tdp_watts", tdp_watts)):
        _positive(name, value)
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise EvaluationError(f"devices is {devices!r}; give a whole number of 1 or more")
    device_hours = seconds * devices / SECONDS_PER_HOUR
    found: dict[str, object] = {"seconds": seconds, "devices": devices, "tokens": tokens, "device_hours": device_hours}
    assumptions = []
    if price_per_hour is not None:
        dollars = device_hours * price_per_hour
        found |= {"price_per_device_hour": price_per_hour, "dollars": dollars, "dollars_per_million_tokens": dollars / tokens * 1e6}
        assumptions.append(PRICE_ORIGIN)
    if tdp_watts is not None:
        joules = tdp_watts * devices * seconds
        found |= {"tdp_watts": tdp_watts, "energy_kwh": joules / JOULES_PER_KWH, "joules_per_token": joules / tokens}
        assumptions.append(POWER_MODEL)
    else:
        assumptions.append("energy left out: the device file gives no tdp_watts")
    found["assumptions"] = assumptions
    return found


def serving_cost(*, tokens_per_s: float, devices: int, price_per_hour: float | None = None, tdp_watts: float | None = None) -> dict[str, object]:
    """Dollars and energy per million output tokens of ``devices`` accelerators producing ``tokens_per_s`` tokens/s together."""
    _positive("tokens_per_s", tokens_per_s)
    return run_cost(seconds=1e6 / tokens_per_s, devices=devices, tokens=1e6, price_per_hour=price_per_hour, tdp_watts=tdp_watts)
