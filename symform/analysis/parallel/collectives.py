"""Alpha–beta cost models of collective operations, as sympy formulas and as numbers.

A message costs ``alpha`` seconds to start (latency) plus ``beta`` seconds per byte
(inverse bandwidth, one direction of one link); a collective over ``p`` ranks on ``n``
bytes costs ``latency_steps·alpha + bandwidth_bytes·beta``, where both coefficients
are read off the algorithm's critical path (Hockney's model as used by Thakur,
Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH",
IJHPCA 2005). Reductions' arithmetic (their gamma term) is not counted.

What ``n`` means follows nccl-tests (PERFORMANCE.md): the size of the buffer each rank
holds: the whole message for broadcast and reduce, the whole gathered output for
all-gather, the whole input of reduce-scatter, each rank's full send buffer for
all-to-all. ``bus_bytes`` is nccl-tests' bus-bandwidth factor times ``n``: the bytes
each rank must send whatever the algorithm (``2(p-1)/p·n`` for all-reduce), so that
``bus_bytes / time`` compares with a link's bandwidth while ``n / time`` (the
algorithm bandwidth) does not.

Rounds of tree and recursive algorithms are ⌈log₂ p⌉; the cited costs are exact for p a
power of two, and non-powers cost a little more in the real algorithms.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

import sympy

from ...engine.algebra._numeric import CeilLog2, Value, checked, settled
from ...engine.errors import ConfigError, EvaluationError
from ...engine.algebra.formula import to_latex
from ..devices.hardware import LINKS, Device, Hardware, System, load_device
from ...engine.language.vocabulary import make_symbol

P = make_symbol("p", "positive_integer")
"""Ranks taking part in the collective (the symbol p)."""
N = make_symbol("n", "nonnegative_integer")
"""Bytes of the collective's buffer (the symbol n; see the module docstring for which buffer)."""
ALPHA = make_symbol("alpha", "positive_rational")
"""Seconds to start one message: the link's latency (the symbol alpha)."""
BETA = make_symbol("beta", "positive_rational")
"""Seconds per byte in one direction of one link: 1 / (bytes/s)."""

DEFAULT_LATENCY_S: Mapping[str, float] = MappingProxyType(
    {"scale_up": 5e-6, "pcie": 6e-6, "scale_out": 10e-6}
)
"""Seconds per message assumed when the user gives no ``alpha``, per kind of link.

Device datasheets give no latency. These round figures sit in the range of NCCL's own
tuning model (src/graph/tuning.cc: a few microseconds per ring hop over NVLink and PCIe,
more over the network, depending on protocol and version). Pass ``alpha=`` to use a
measured figure (nccl-tests' time at small sizes).
"""

_SOURCES = {
    "thakur": "Thakur, Rabenseifner & Gropp, Optimization of Collective Communication Operations in MPICH, IJHPCA 19(1), 2005",
    "nccl": "NCCL documentation and nccl-tests PERFORMANCE.md (ring algorithms, pipelined)",
    "nccl_tree": "NCCL 2.4 double binary trees (NVIDIA blog, 2019): full ring bandwidth, latency logarithmic in p",
    "hockney": "Hockney, The communication challenge for MPP, Parallel Computing 20(3), 1994",
    "one_shot": "serving engines' custom all-reduce within an NVLink/NVSwitch node (NVIDIA TensorRT-LLM cpp/tensorrt_llm/kernels/customAllReduceKernels.cu, oneShotAllReduceKernel; vLLM csrc/custom_all_reduce.cuh, cross_device_reduce_1stage; PyTorch c10d intra-node comm, oneShotAllReduce): every rank reads every peer's whole buffer and reduces it locally, one synchronisation",
}


@dataclass(frozen=True)
class CostModel:
    """One algorithm of one collective: ``time = latency_steps·alpha + bandwidth_bytes·beta``."""

    collective: str
    algorithm: str
    latency_steps: sympy.Expr
    bandwidth_bytes: sympy.Expr
    source: str

    @property
    def time(self) -> sympy.Expr:
        """Seconds, as a formula in p, n, alpha and beta."""
        return self.latency_steps * ALPHA + self.bandwidth_bytes * BETA

    def evaluate(
        self, *, p: Value, n: Value, alpha: Value, beta: Value
    ) -> sympy.Expr | float:
        """Seconds for these values: exact (a sympy Rational) for exact inputs, a float otherwise, a formula for symbols."""
        return settled(
            self.time.xreplace(_checked_values(p=p, n=n, alpha=alpha, beta=beta))
        )

    def latex(self) -> str:
        return to_latex(self.time)

    def _repr_latex_(self) -> str:
        return f"${self.latex()}$"


@dataclass(frozen=True)
class Collective:
    """A collective operation: what its ``n`` is, the bytes each rank must send, and its algorithms."""

    name: str
    buffer: str
    bus_bytes: sympy.Expr
    algorithms: Mapping[str, CostModel]
    default: str


def _model(
    collective: str,
    algorithm: str,
    latency_steps: sympy.Expr,
    bandwidth_bytes: sympy.Expr,
    source: str,
) -> tuple[str, CostModel]:
    return algorithm, CostModel(
        collective,
        algorithm,
        sympy.sympify(latency_steps),
        sympy.sympify(bandwidth_bytes),
        _SOURCES[source],
    )


def _collective(
    name: str, buffer: str, bus_bytes: sympy.Expr, *models: tuple, default: str
) -> Collective:
    algorithms = dict(_model(name, *model) for model in models)
    return Collective(
        name, buffer, sympy.sympify(bus_bytes), MappingProxyType(algorithms), default
    )


@cache
def _table() -> Mapping[str, Collective]:
    rounds = CeilLog2(P)
    share = (P - 1) / P  # the part of n that must leave (or reach) each rank
    any_peer = sympy.Min(
        1, P - 1
    )  # a pipelined chain moves n once when there is a peer at all
    table = [
        _collective(
            "send_recv",
            "the message, sent from one rank to one other (p is not used)",
            N,
            ("direct", 1, N, "hockney"),
            default="direct",
        ),
        _collective(
            "broadcast",
            "the message the root sends to every rank",
            N,
            ("ring", P - 1, any_peer * N, "nccl"),
            ("binomial_tree", rounds, rounds * N, "thakur"),
            ("scatter_allgather", rounds + P - 1, 2 * share * N, "thakur"),
            default="ring",
        ),
        _collective(
            "scatter",
            "the root's whole buffer; each rank receives n/p",
            share * N,
            ("binomial_tree", rounds, share * N, "thakur"),
            ("linear", P - 1, share * N, "thakur"),
            default="binomial_tree",
        ),
        _collective(
            "gather",
            "the root's whole buffer after the gather; each rank sends n/p",
            share * N,
            ("binomial_tree", rounds, share * N, "thakur"),
            ("linear", P - 1, share * N, "thakur"),
            default="binomial_tree",
        ),
        _collective(
            "reduce",
            "each rank's input, reduced into the root",
            N,
            ("ring", P - 1, any_peer * N, "nccl"),
            ("binomial_tree", rounds, rounds * N, "thakur"),
            ("reduce_scatter_gather", 2 * rounds, 2 * share * N, "thakur"),
            default="ring",
        ),
        _collective(
            "all_gather",
            "the gathered output on each rank; each rank contributes n/p",
            share * N,
            ("ring", P - 1, share * N, "nccl"),
            ("recursive_doubling", rounds, share * N, "thakur"),
            default="ring",
        ),
        _collective(
            "reduce_scatter",
            "each rank's input; each rank keeps n/p of the reduced result",
            share * N,
            ("ring", P - 1, share * N, "nccl"),
            ("recursive_halving", rounds, share * N, "thakur"),
            default="ring",
        ),
        _collective(
            "all_reduce",
            "each rank's buffer, reduced in place on every rank",
            2 * share * N,
            ("ring", 2 * (P - 1), 2 * share * N, "nccl"),
            ("tree", 2 * rounds, 2 * share * N, "nccl_tree"),
            ("recursive_halving", 2 * rounds, 2 * share * N, "thakur"),
            ("recursive_doubling", rounds, rounds * N, "thakur"),
            ("reduce_broadcast", 2 * rounds, 2 * rounds * N, "thakur"),
            ("one_shot", any_peer, (P - 1) * N, "one_shot"),
            default="ring",
        ),
        _collective(
            "all_to_all",
            "each rank's send buffer; n/p goes to each rank",
            share * N,
            ("pairwise", P - 1, share * N, "thakur"),
            ("bruck", rounds, rounds * N / 2, "thakur"),
            default="pairwise",
        ),
        _collective(
            "barrier",
            "no data (n is not used)",
            sympy.Integer(0),
            ("dissemination", rounds, 0, "thakur"),
            default="dissemination",
        ),
    ]
    return MappingProxyType({c.name: c for c in table})


# --- looking up models -------------------------------------------------------------


def collective_names() -> tuple[str, ...]:
    """The collectives symform models: send_recv, broadcast, scatter, gather, reduce, all_gather, reduce_scatter, all_reduce, all_to_all, barrier."""
    return tuple(_table())


def collective(name: str) -> Collective:
    """One collective by name, with its algorithms and the bytes each rank sends."""
    table = _table()
    if name not in table:
        raise ConfigError(f"unknown collective {name!r}; use one of {', '.join(table)}")
    return table[name]


def algorithm_names(name: str) -> tuple[str, ...]:
    """The algorithms modelled for one collective, the default first."""
    found = collective(name)
    return (found.default, *(a for a in found.algorithms if a != found.default))


def cost_model(name: str, algorithm: str | None = None) -> CostModel:
    """The alpha–beta model of a collective; ``algorithm=None`` takes the default (ring where NCCL uses one)."""
    found = collective(name)
    chosen = found.default if algorithm is None else algorithm
    if chosen not in found.algorithms:
        raise ConfigError(
            f"{name} has no algorithm {chosen!r}; use one of {', '.join(algorithm_names(name))}"
        )
    return found.algorithms[chosen]


# --- numbers -----------------------------------------------------------------------


def _checked_values(**values: Value) -> dict[sympy.Symbol, sympy.Expr]:
    rules = {
        "p": {
            "minimum": 1,
            "whole": True,
            "fix": "a collective needs at least one rank",
        },
        "n": {"minimum": 0, "fix": "give the buffer size in bytes"},
        "alpha": {"minimum": 0, "fix": "give the latency in seconds per message"},
        "beta": {"minimum": 0, "fix": "give seconds per byte, 1 / (bytes/s)"},
    }
    symbols = {"p": P, "n": N, "alpha": ALPHA, "beta": BETA}
    return {
        symbols[name]: checked(name, value, **rules[name])
        for name, value in values.items()
    }


def collective_time(
    name: str,
    *,
    p: Value,
    n: Value,
    alpha: Value,
    beta: Value,
    algorithm: str | None = None,
) -> sympy.Expr | float:
    """Seconds one collective takes over ``p`` ranks on ``n`` bytes at ``alpha`` s/message and ``beta`` s/byte."""
    return cost_model(name, algorithm).evaluate(p=p, n=n, alpha=alpha, beta=beta)


def bus_bytes(name: str, *, p: Value, n: Value) -> sympy.Expr | float:
    """Bytes each rank must send in the collective, whatever the algorithm (nccl-tests' bus-bandwidth factor × n)."""
    return settled(collective(name).bus_bytes.xreplace(_checked_values(p=p, n=n)))


def algorithm_bandwidth(*, n: Value, seconds: Value) -> sympy.Expr | float:
    """nccl-tests' algorithm bandwidth: n / time, in bytes/s."""
    return settled(checked("n", n) / _positive_seconds(seconds))


def bus_bandwidth(
    name: str, *, p: Value, n: Value, seconds: Value
) -> sympy.Expr | float:
    """nccl-tests' bus bandwidth: the bytes each rank sends / time, comparable with one link's bandwidth."""
    sent = collective(name).bus_bytes.xreplace(_checked_values(p=p, n=n))
    return settled(sent / _positive_seconds(seconds))


def _positive_seconds(seconds: Value) -> sympy.Expr:
    value = checked(
        "seconds", seconds, minimum=0, fix="give the measured time in seconds"
    )
    if value == 0:
        raise EvaluationError("seconds is 0; a bandwidth needs a positive time")
    return value


# --- links of real hardware -----------------------------------------------------------


def link_bandwidth(hardware: Hardware | str | os.PathLike[str], link: str) -> float:
    """Bytes/s in one direction for one accelerator over ``link`` (scale_up, pcie or scale_out).

    For a system, scale-out is its NIC bandwidth shared among its accelerators; the other
    links are its accelerator's.
    """
    found = _hardware(hardware)
    _check_link(link)
    if (
        isinstance(found, System)
        and link == "scale_out"
        and found.scale_out is not None
    ):
        return (
            found.scale_out.count
            * found.scale_out.unidirectional_bytes_per_s
            / found.accelerator_count
        )
    device = found.device if isinstance(found, System) else found
    if link not in device.interconnect:
        have = ", ".join(device.interconnect) or "none"
        raise ConfigError(
            f"{found.name} has no {link} link in its data (it has: {have}); choose one of those or add it to its device file"
        )
    return device.interconnect[link].unidirectional_bytes_per_s


def link_latency(link: str) -> float:
    """The latency (seconds per message) symform assumes for a kind of link when none is given."""
    _check_link(link)
    return DEFAULT_LATENCY_S[link]


def link_time(
    name: str,
    hardware: Hardware | str | os.PathLike[str],
    *,
    p: Value,
    n: Value,
    link: str = "scale_up",
    algorithm: str | None = None,
    alpha: Value | None = None,
) -> sympy.Expr | float:
    """Seconds a collective takes over one kind of link of a device or system from symform's hardware data.

    ``beta`` is 1 / the link's per-direction bandwidth; ``alpha`` defaults to
    ``DEFAULT_LATENCY_S[link]``. Every rank is assumed to drive its own link at full
    bandwidth (switched fabrics: NVSwitch, a non-blocking network).
    """
    found = _hardware(hardware)
    _check_domain(found, link, p)
    latency = link_latency(link) if alpha is None else alpha
    return collective_time(
        name,
        p=p,
        n=n,
        alpha=latency,
        beta=1 / link_bandwidth(found, link),
        algorithm=algorithm,
    )


def _hardware(hardware: Hardware | str | os.PathLike[str]) -> Hardware:
    return hardware if isinstance(hardware, (Device, System)) else load_device(hardware)


def _check_link(link: str) -> None:
    if link not in LINKS:
        raise ConfigError(f"unknown link {link!r}; use one of {', '.join(LINKS)}")


def _check_domain(found: Hardware, link: str, ranks: Value) -> None:
    domain = found.scale_up_domain if isinstance(found, System) else None
    if (
        link == "scale_up"
        and domain is not None
        and isinstance(ranks, (int, sympy.Integer))
        and ranks > domain.accelerators
    ):
        raise ConfigError(
            f"{ranks} ranks exceed {found.name}'s scale-up domain of {domain.accelerators}; use link='scale_out' for ranks across systems"
        )
