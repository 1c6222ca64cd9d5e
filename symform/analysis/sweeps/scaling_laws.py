"""Compute-optimal model size and data for a FLOP budget, and what a budget costs on a fleet.

The loss model is Chinchilla's parametric fit (Hoffmann et al. 2022, eq. 10):

    L(N, D) = E + A / N**alpha + B / D**beta

with N parameters and D training tokens. Minimising L on the budget C = 6·N·D
(the constraint the fit was made with) gives, derived here with sympy,

    N_opt = G · (C/6)**a,   D_opt = (C/6)**b / G,   G = (alpha·A / (beta·B))**(1/(alpha+beta)),
    a = beta/(alpha+beta),  b = alpha/(alpha+beta).

The optimum uses the 6·N·D closed form on purpose: the coefficients were
fitted against it, so symform's fuller count (attention, logits) would move the
optimum away from what the fit predicts. Where a concrete model is given,
symform's own ``train_flops`` is used instead: :func:`tokens_for_budget` and
:func:`model_training_flops` count what that model really costs.

Coefficients are inputs (:class:`LossFit`). Two fits ship:

* ``HOFFMANN_2022`` (the default): E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28,
  as printed in the paper. These rounded values imply about 50–120 tokens per
  parameter at 10**21–10**25 FLOPs (93 at Chinchilla's 5.76·10**23), not the ~20
  of the paper's approaches 1 and 2.
* ``BESIROGLU_2024``: the replication by Besiroglu et al. 2024 (arXiv 2404.10102),
  E=1.8172, A=482.01, B=2085.43, alpha=0.3478, beta=0.3658; it gives 17–22 tokens
  per parameter over that range (18 at 5.76·10**23), in line with approaches 1 and 2.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cache

import sympy

from ...engine.errors import EvaluationError
from ..devices.hardware import Device, load_device

FLOPS_PER_PARAM_TOKEN = 6  # forward 2·N·D plus backward 4·N·D
SECONDS_PER_HOUR = 3600
SECONDS_PER_DAY = 86400


@dataclass(frozen=True)
class LossFit:
    """Coefficients of L(N, D) = E + A/N**alpha + B/D**beta (loss in nats per token, the fit's own data)."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("A", "B", "alpha", "beta"):
            if not getattr(self, name) > 0:
                raise EvaluationError(f"loss fit {name} must be positive, got {getattr(self, name)!r}")

    def loss(self, n_params: float, tokens: float) -> float:
        return self.E + self.A / n_params**self.alpha + self.B / tokens**self.beta

    @property
    def a(self) -> float:
        """Exponent of N_opt in C: beta/(alpha+beta)."""
        return self.beta / (self.alpha + self.beta)

    @property
    def b(self) -> float:
        """Exponent of D_opt in C: alpha/(alpha+beta)."""
        return self.alpha / (self.alpha + self.beta)

    @property
    def G(self) -> float:
        return (self.alpha * self.A / (self.beta * self.B)) ** (1 / (self.alpha + self.beta))

    def with_(self, **changes: float) -> "LossFit":
        return LossFit(**{**asdict(self), **changes})


HOFFMANN_2022 = LossFit(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28, source="Hoffmann et al. 2022, eq. 10 (approach 3, rounded as printed)")
BESIROGLU_2024 = LossFit(E=1.8172, A=482.01, B=2085.43, alpha=0.3478, beta=0.3658, source="Besiroglu et al. 2024, arXiv 2404.10102 (replication of approach 3)")
FITS = {"hoffmann-2022": HOFFMANN_2022, "besiroglu-2024": BESIROGLU_2024}


# --- the closed form, derived ----------------------------------------------------------------------

N, D, C = sympy.symbols("N D C", positive=True)
E_, A_, B_, ALPHA, BETA = sympy.symbols("E A B alpha beta", positive=True)


def loss_expression() -> sympy.Expr:
    return E_ + A_ * N**-ALPHA + B_ * D**-BETA


@cache
def optimum() -> dict[str, sympy.Expr]:
    """N_opt, D_opt and L_opt as sympy expressions in C, E, A, B, alpha, beta.

    Derived, not typed in: substitute D = C/(6N) into L, set dL/dN = 0, solve for N.
    """
    on_budget = loss_expression().subs(D, C / (FLOPS_PER_PARAM_TOKEN * N))
    roots = sympy.solve(sympy.diff(on_budget, N), N)
    if len(roots) != 1:  # L is convex in log N on the budget: exactly one stationary point
        raise EvaluationError(f"expected one stationary point, sympy found {len(roots)}")
    n_opt = roots[0]
    d_opt = C / (FLOPS_PER_PARAM_TOKEN * n_opt)
    return {"N": n_opt, "D": d_opt, "L": loss_expression().subs({N: n_opt, D: d_opt})}


def closed_form() -> dict[str, sympy.Expr]:
    """The textbook form: N_opt = G·(C/6)**a, D_opt = (C/6)**b / G (equal to :func:`optimum`)."""
    g = (ALPHA * A_ / (BETA * B_)) ** (1 / (ALPHA + BETA))
    a = BETA / (ALPHA + BETA)
    b = ALPHA / (ALPHA + BETA)
    per = C / FLOPS_PER_PARAM_TOKEN
    return {"N": g * per**a, "D": per**b / g, "G": g, "a": a, "b": b}


# --- numbers -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ComputeOptimal:
    budget_flops: float
    n_params: float
    tokens: float
    loss: float
    fit: LossFit

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.n_params


def compute_optimal(budget_flops: float, fit: LossFit = HOFFMANN_2022) -> ComputeOptimal:
    """N_opt, D_opt and the predicted loss for a budget of ``budget_flops`` = 6·N·D."""
    if not budget_flops > 0:
        raise EvaluationError(f"the FLOP budget must be positive, got {budget_flops!r}")
    per = budget_flops / FLOPS_PER_PARAM_TOKEN
    n = fit.G * per**fit.a
    d = per / n  # exactly on the budget, whatever the rounding of G
    return ComputeOptimal(float(budget_flops), n, d, fit.loss(n, d), fit)


def budget_for_loss(target_loss: float, fit: LossFit = HOFFMANN_2022) -> float:
    """The smallest 6·N·D budget whose compute-optimal loss reaches ``target_loss`` (bisection in log C)."""
    if not target_loss > fit.E:
        raise EvaluationError(f"loss {target_loss} is not above the fit's irreducible E={fit.E}: no budget reaches it")
    low, high = 1e10, 1e40
    if compute_optimal(high, fit).loss > target_loss:
        raise EvaluationError(f"loss {target_loss} needs more than 1e40 FLOPs under this fit")
    for _ in range(200):  # the optimal loss falls monotonically with C
        mid = (low * high) ** 0.5
        if compute_optimal(mid, fit).loss > target_loss:
            low = mid
        else:
            high = mid
    return high


# --- a concrete model: symform's own FLOPs ------------------------------------------------------------


def model_training_flops(model, tokens: int, *, seq: int, batch: int = 1) -> int:
    """symform's exact training FLOPs of ``model`` on ``tokens`` tokens (attention and logits included)."""
    return model.evaluate("train_flops", tokens=tokens, seq=seq, batch=batch)


def tokens_for_budget(model, budget_flops: float, *, seq: int, batch: int = 1) -> float:
    """Tokens ``model`` can train on within ``budget_flops``, by symform's count (train_flops is linear in tokens)."""
    per_token = model.evaluate("train_flops", tokens=1, seq=seq, batch=batch)
    return budget_flops / float(per_token)


# --- a fleet ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingRun:
    flops: float
    device: str
    devices: int
    mfu: float
    peak_flops_per_s: float
    seconds: float
    device_hours: float
    cost: float | None

    @property
    def days(self) -> float:
        return self.seconds / SECONDS_PER_DAY


def _accelerator(device: str | Device) -> Device:
    hardware = load_device(device) if isinstance(device, str) else device
    return hardware.device if hasattr(hardware, "device") and not isinstance(hardware, Device) else hardware


def training_run(flops: float, *, device: str | Device = "h100-sxm", devices: int = 1, mfu: float = 0.4, dtype: str = "bf16", price_per_device_hour: float | None = None) -> TrainingRun:
    """Wall time and cost of ``flops`` on ``devices`` accelerators at model FLOPs utilisation ``mfu``.

    seconds = flops / (devices · peak dense FLOP/s for ``dtype`` · mfu); cost = device-hours · price.
    """
    if not 0 < mfu <= 1:
        raise EvaluationError(f"mfu is a fraction of peak in (0, 1], got {mfu!r}")
    if devices < 1:
        raise EvaluationError(f"devices must be 1 or more, got {devices!r}")
    if not flops > 0:
        raise EvaluationError(f"flops must be positive, got {flops!r}")
    accelerator = _accelerator(device)
    peak = float(accelerator.flops_per_s(dtype))
    seconds = float(flops) / (devices * peak * mfu)
    hours = seconds * devices / SECONDS_PER_HOUR
    cost = None if price_per_device_hour is None else hours * price_per_device_hour
    name = accelerator.name or accelerator.title
    return TrainingRun(float(flops), name, devices, mfu, peak, seconds, hours, cost)


def compute_optimal_run(budget_flops: float, *, fit: LossFit = HOFFMANN_2022, **fleet) -> tuple[ComputeOptimal, TrainingRun]:
    """The compute-optimal N and D for a budget, and what training it takes on a fleet (``training_run``'s options)."""
    return compute_optimal(budget_flops, fit), training_run(budget_flops, **fleet)
