"""MFU and HFU of a measured step by the PaLM, Megatron and exact definitions; a whole run's duration."""

from __future__ import annotations

from . import timing
from .step_model import utilisation

SECONDS_PER_DAY = 86400


def palm_flops_per_token(model, seq: int) -> float:
    """PaLM (Chowdhery et al. 2022, appendix B): 6·N + 12·L·H·Q·T per token, N the parameters."""
    v = model.values
    heads, head = v.get("n_heads", 1), v.get("d_head", v.get("d_model", 0) // max(v.get("n_heads", 1), 1))
    return 6 * float(model.evaluate("params")) + 12 * v.get("n_layers", 1) * heads * head * seq


def megatron_flops(model, batch: int, seq: int, recompute: bool) -> float:
    """Narayanan et al. 2021, Eq. 3 (with full recomputation, 96) and without it (72): 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))."""
    v = model.values
    h, layers, vocab = v.get("d_model", 1), v.get("n_layers", 1), v.get("vocab", 0)
    if recompute:
        return 96 * batch * seq * layers * h**2 * (1 + seq / (6 * h) + vocab / (16 * layers * h))
    return 72 * batch * seq * layers * h**2 * (1 + seq / (6 * h) + vocab / (12 * layers * h))


def measured(model, step: timing.TrainingTime, *, step_s: float | None = None, tokens_per_s: float | None = None) -> dict[str, float]:
    """MFU and HFU of a measured step (or throughput) of ``step``'s setup, by each definition."""
    seconds = step_s if step_s else step.tokens / tokens_per_s
    full = step.recompute == "full"

    def of_peak(flops) -> float:
        return utilisation(flops, seconds, step.devices, step.peak_flops_per_s)

    return {
        "step_s": seconds,
        "tokens_per_s": step.tokens / seconds,
        "mfu_palm": of_peak(palm_flops_per_token(model, step.seq) * step.tokens),
        "mfu_megatron": of_peak(megatron_flops(model, step.global_batch, step.seq, False)),
        "hfu_megatron": of_peak(megatron_flops(model, step.global_batch, step.seq, full)),
        "mfu_exact": of_peak(step.model_flops),
        "hfu_exact": of_peak(step.hardware_flops),
    }


def step_seconds(step: timing.TrainingTime, found, measured_figures: dict | None) -> tuple[float, str]:
    """The step time a run is counted at: the measured one, else the estimate, else the lower bound; and which."""
    if measured_figures:
        return measured_figures["step_s"], "measured step"
    if not isinstance(found, str):
        return found.step.estimate, "estimated step"
    return step.time_lower, "lower bound (no efficiency data)"


def duration(model, step: timing.TrainingTime, found, tokens: float, measured_figures: dict | None) -> dict[str, object]:
    """Days and GPU-hours of a run of ``tokens`` tokens at the measured step, else the estimate, else the lower bound;
    beside it Narayanan et al.'s Eq. 4, T = 8·tokens·P / (n·X), X the achieved FLOP/s per GPU of that same step."""
    seconds, origin = step_seconds(step, found, measured_figures)
    run_s = tokens / step.tokens * seconds
    achieved = megatron_flops(model, step.global_batch, step.seq, True) / (seconds * step.devices)
    eq4_s = 8 * tokens * float(model.evaluate("params")) / (step.devices * achieved)
    return {"tokens": tokens, "from": origin, "seconds": run_s, "days": run_s / SECONDS_PER_DAY, "gpu_hours": run_s * step.devices / 3600, "eq4_days": eq4_s / SECONDS_PER_DAY}
