"""Communication of parallel training layouts: which collectives run, on how many bytes, how often.

Each function describes one kind of parallelism for one transformer layer (or one
training step, or one pipeline boundary) as a list of ``Transfer`` records: a
collective from ``symform.analysis.parallel.collectives``, the group it runs over, the buffer size ``n``
in bytes and how many times it runs. The functions take sizes as numbers or sympy
expressions (``symform.vocabulary()["batch"]`` and so on), never architecture names, so
a formula comes back for symbols and a number for numbers.

Sizes: ``batch`` b and ``seq`` s are the micro-batch's sequences and tokens per
sequence, ``d_model`` d the hidden size, ``vocab`` V the vocabulary, and
``bytes_per_element`` the width of what is sent (2 for bf16 activations).
Degrees: ``tensor`` t, ``data`` d_p, ``pipeline`` stages, ``expert`` e.

Sources: Shoeybi et al. 2019 (Megatron-LM, the f/g operators), Korthikanti et al. 2022
(sequence parallelism), Rajbhandari et al. 2020 (ZeRO), Narayanan et al. 2021
(pipeline point-to-point), Lepikhin et al. 2021 and Fedus et al. 2022 (expert all-to-all).
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from functools import cache, lru_cache
from typing import Literal

import sympy

from ...engine.algebra._numeric import Value, checked, settled
from ...engine.algebra.multiplied import polynomial
from .collectives import ALPHA, BETA, N, P, collective, cost_model, link_bandwidth, link_latency
from ...engine.errors import ConfigError
from ...engine.algebra.formula import to_latex
from ..devices.hardware import Hardware

Phase = Literal["forward", "backward", "step"]
PHASES = ("forward", "backward", "step")


@dataclass(frozen=True)
class Transfer:
    """``count`` runs of one collective over ``ranks`` ranks on a buffer of ``nbytes`` bytes, in one phase."""

    what: str
    collective: str
    ranks: sympy.Expr
    nbytes: sympy.Expr
    count: int | Fraction  # runs (a mean where the layers it stands for run different numbers)
    phase: Phase

    def bytes_per_rank(self) -> sympy.Expr | float:
        """Bytes each rank sends for all ``count`` runs (the collective's bus bytes × count)."""
        return settled(
            self.count
            * collective(self.collective).bus_bytes.xreplace(
                {P: self.ranks, N: self.nbytes}
            )
        )

    def _repr_latex_(self) -> str:
        """In a notebook: this transfer's seconds as a formula in alpha and beta."""
        return f"$t = {to_latex(sympy.sympify(self.time()))}$"

    def time(
        self, *, alpha: Value = ALPHA, beta: Value = BETA, algorithm: str | None = None
    ) -> sympy.Expr | float:
        """Seconds for all ``count`` runs; a formula in alpha and beta unless numbers are given."""
        model = cost_model(self.collective, algorithm)
        values = {
            P: self.ranks,
            N: self.nbytes,
            ALPHA: checked("alpha", alpha),
            BETA: checked("beta", beta),
        }
        return settled(self.count * model.time.xreplace(values))


def _transfer(
    what: str,
    name: str,
    ranks: sympy.Expr,
    nbytes: sympy.Expr,
    count: int | Fraction,
    phase: Phase,
) -> Transfer:
    return Transfer(what, name, ranks, sympy.sympify(nbytes), count, phase)


def _degree(name: str, value: Value) -> sympy.Expr:
    return checked(
        name,
        value,
        minimum=1,
        whole=True,
        fix=f"a {name} degree of 1 means no {name} parallelism",
    )


def _size(name: str, value: Value, minimum: int = 1) -> sympy.Expr:
    return checked(
        name,
        value,
        minimum=minimum,
        fix=f"give {name} as a count or a sympy expression",
    )


def _runs(name: str, value: object) -> int | Fraction:
    """A number of runs of a collective in one layer: a whole number or a fraction (a mean over layers) from 0 to a
    layer's most (MOST_TENSOR_REDUCTIONS), as a Python, numpy or sympy number."""
    from ...engine.language.declarations import MOST_TENSOR_REDUCTIONS

    exact = Fraction(int(value.numerator), int(value.denominator)) if isinstance(value, numbers.Rational) and not isinstance(value, bool) else None
    if exact is None or not 0 <= exact <= MOST_TENSOR_REDUCTIONS:
        raise ConfigError(f"{name} is {value!r} ({type(value).__name__}); give a whole number or a fraction (a mean over layers) from 0 to {MOST_TENSOR_REDUCTIONS}: the collective's runs in one layer")
    return int(exact) if exact.denominator == 1 else exact


def _activation_bytes(
    batch: Value, seq: Value, d_model: Value, bytes_per_element: Value
) -> sympy.Expr:
    """b·s·d elements of the residual stream, in bytes."""
    return (
        _size("batch", batch)
        * _size("seq", seq)
        * _size("d_model", d_model)
        * _size("bytes_per_element", bytes_per_element)
    )


# --- tensor and sequence parallelism -----------------------------------------------

#: a layer's collectives of each kind under Megatron's split: one for each of its two blocks (attention, MLP), each
#: block's row-parallel output reduced on its own (Shoeybi et al. 2019, Fig. 3); a layer may declare fewer reductions
MEGATRON_REDUCTIONS = 2


def tensor_parallel_layer(
    *, batch: Value, seq: Value, d_model: Value, bytes_per_element: Value, tensor: Value, reductions: int | Fraction = MEGATRON_REDUCTIONS
) -> list[Transfer]:
    """Megatron tensor parallelism, one transformer layer: two all-reduces of b·s·d forward, two backward.

    The g operator all-reduces the row-parallel outputs of attention and of the MLP in
    the forward pass; the f operator all-reduces the input gradients of the
    column-parallel inputs in the backward pass (Shoeybi et al. 2019, Fig. 3 and 4).
    ``reductions``: the forward's all-reduces where the layers declare other than two (an engine that sums a
    parallel layer's attention and MLP outputs reduces once); the backward keeps two, one for each block's
    column-parallel input, as gpt-neox's parallel layers run them.
    """
    t, reductions = _degree("tensor", tensor), _runs("reductions", reductions)
    nbytes = _activation_bytes(batch, seq, d_model, bytes_per_element)
    return [
        _transfer(
            "g: all-reduce of the attention and MLP outputs",
            "all_reduce",
            t,
            nbytes,
            reductions,
            "forward",
        ),
        _transfer(
            "f: all-reduce of the attention and MLP input gradients",
            "all_reduce",
            t,
            nbytes,
            MEGATRON_REDUCTIONS,
            "backward",
        ),
    ]


def sequence_parallel_layer(
    *, batch: Value, seq: Value, d_model: Value, bytes_per_element: Value, tensor: Value, reductions: int | Fraction = MEGATRON_REDUCTIONS
) -> list[Transfer]:
    """Tensor plus sequence parallelism, one layer: each all-reduce becomes an all-gather and a reduce-scatter.

    Forward: all-gather of the sequence-sharded input before attention and before the
    MLP, reduce-scatter of their outputs; backward: the reverse (Korthikanti et al.
    2022, §4.2.2). Same bytes per rank as tensor parallelism alone; the activations
    outside the tensor-parallel region are sharded t ways. ``reductions``: the reduce-scatters of the blocks'
    outputs (and the all-gathers of their gradients) where the layers declare other than two, as
    tensor_parallel_layer's all-reduces; the inputs' all-gathers stay two.
    """
    t, reductions = _degree("tensor", tensor), _runs("reductions", reductions)
    nbytes = _activation_bytes(batch, seq, d_model, bytes_per_element)
    return [
        _transfer(
            "g: all-gather of the sequence-sharded inputs",
            "all_gather",
            t,
            nbytes,
            MEGATRON_REDUCTIONS,
            "forward",
        ),
        _transfer(
            "g-bar: reduce-scatter of the attention and MLP outputs",
            "reduce_scatter",
            t,
            nbytes,
            reductions,
            "forward",
        ),
        _transfer(
            "reduce-scatter of the input gradients",
            "reduce_scatter",
            t,
            nbytes,
            MEGATRON_REDUCTIONS,
            "backward",
        ),
        _transfer(
            "all-gather of the output gradients", "all_gather", t, nbytes, reductions, "backward"
        ),
    ]


def vocab_parallel_embedding(
    *, batch: Value, seq: Value, d_model: Value, bytes_per_element: Value, tensor: Value
) -> list[Transfer]:
    """The input embedding split by vocabulary rows: one all-reduce of the b·s·d looked-up vectors, forward only.

    Each rank looks up the tokens in its slice of the vocabulary (zeros elsewhere) and
    the all-reduce sums the slices; its backward is the identity (Shoeybi et al. 2019, §3).
    """
    t = _degree("tensor", tensor)
    nbytes = _activation_bytes(batch, seq, d_model, bytes_per_element)
    return [
        _transfer(
            "all-reduce of the vocabulary-parallel embedding",
            "all_reduce",
            t,
            nbytes,
            1,
            "forward",
        )
    ]


def vocab_parallel_output_head(
    *,
    batch: Value,
    seq: Value,
    d_model: Value,
    vocab: Value,
    bytes_per_element: Value,
    tensor: Value,
    fused_cross_entropy: bool = True,
    loss_bytes_per_element: Value = 4,
) -> list[Transfer]:
    """The output head split by vocabulary columns, with or without the fused cross-entropy.

    The head's input is copied to every rank (the f operator: an all-reduce of b·s·d
    input gradients in the backward pass). Unfused, the logits are all-gathered: b·s·V
    elements. Fused, each rank keeps its logits and the loss needs three all-reduces of
    b·s values (the maximum logit, the target's logit, the sum of exponentials; fp32 in
    Megatron-LM's vocab-parallel cross-entropy), b·s instead of b·s·V.
    """
    t = _degree("tensor", tensor)
    tokens = _size("batch", batch) * _size("seq", seq)
    head_input = _activation_bytes(batch, seq, d_model, bytes_per_element)
    transfers = [
        _transfer(
            "f: all-reduce of the output head's input gradients",
            "all_reduce",
            t,
            head_input,
            1,
            "backward",
        )
    ]
    if fused_cross_entropy:
        values = tokens * _size("loss_bytes_per_element", loss_bytes_per_element)
        transfers.append(
            _transfer(
                "fused cross-entropy: all-reduces of max logit, target logit, sum of exponentials",
                "all_reduce",
                t,
                values,
                3,
                "forward",
            )
        )
    else:
        logits = (
            tokens
            * _size("vocab", vocab)
            * _size("bytes_per_element", bytes_per_element)
        )
        transfers.append(
            _transfer(
                "all-gather of the b·s·V logits", "all_gather", t, logits, 1, "forward"
            )
        )
    return transfers


# --- data parallelism and ZeRO --------------------------------------------------------


def data_parallel_step(
    *, params: Value, bytes_per_element: Value, data: Value
) -> list[Transfer]:
    """Plain data parallelism, one step: one all-reduce of every gradient (params × bytes per gradient)."""
    d = _degree("data", data)
    nbytes = _size("params", params) * _size("bytes_per_element", bytes_per_element)
    return [
        _transfer("all-reduce of the gradients", "all_reduce", d, nbytes, 1, "step")
    ]


def zero3_step(
    *, params: Value, bytes_per_element: Value, data: Value
) -> list[Transfer]:
    """ZeRO stage 3, one step: parameters all-gathered before forward and again before backward, gradients reduce-scattered.

    Each rank sends 3·(d−1)/d·Ψ bytes against plain data parallelism's 2·(d−1)/d·Ψ: 1.5 times
    (Rajbhandari et al. 2020, §7.2.2). Counted per step over the whole model; frameworks
    issue it layer by layer.
    """
    d = _degree("data", data)
    nbytes = _size("params", params) * _size("bytes_per_element", bytes_per_element)
    return [
        _transfer(
            "all-gather of the parameters before forward",
            "all_gather",
            d,
            nbytes,
            1,
            "forward",
        ),
        _transfer(
            "all-gather of the parameters before backward",
            "all_gather",
            d,
            nbytes,
            1,
            "backward",
        ),
        _transfer(
            "reduce-scatter of the gradients",
            "reduce_scatter",
            d,
            nbytes,
            1,
            "backward",
        ),
    ]


# --- pipeline and expert parallelism --------------------------------------------------


def pipeline_boundary(
    *, batch: Value, seq: Value, d_model: Value, bytes_per_element: Value
) -> list[Transfer]:
    """One stage boundary, one micro-batch: b·s·d activations forward, their gradients backward, point to point.

    A step sends this once per micro-batch across each of the stages − 1 boundaries
    (interleaved schedules: chunks × stages − 1 boundaries).
    """
    nbytes = _activation_bytes(batch, seq, d_model, bytes_per_element)
    return [
        _transfer(
            "send of the activations to the next stage",
            "send_recv",
            sympy.Integer(2),
            nbytes,
            1,
            "forward",
        ),
        _transfer(
            "send of the activation gradients to the previous stage",
            "send_recv",
            sympy.Integer(2),
            nbytes,
            1,
            "backward",
        ),
    ]


def context_parallel_layer(
    *, batch: Value, seq: Value, kv_width: Value, bytes_per_element: Value, context: Value
) -> list[Transfer]:
    """One attention layer under ring context parallelism, one micro-batch, per rank.

    Each of the ``context`` ranks holds seq / context tokens of every sequence and passes
    its keys and values around the ring: context − 1 sends of 2·b·(s/c)·kv_width
    elements forward; backward passes the keys and values again and their gradients
    (Megatron-LM / Transformer Engine's p2p context parallelism, Liu et al. 2023, Ring Attention).
    """
    c = _degree("context", context)
    chunk = 2 * _size("batch", batch) * _size("seq", seq) / c * _size("kv_width", kv_width) * _size("bytes_per_element", bytes_per_element)
    hops = c - 1
    if hops == 0:
        return []
    return [
        _transfer("ring pass of the key and value chunks", "send_recv", sympy.Integer(2), chunk, int(hops), "forward"),
        _transfer("ring pass of the key and value chunks and their gradients", "send_recv", sympy.Integer(2), chunk, int(2 * hops), "backward"),
    ]


def expert_parallel_layer(
    *,
    tokens: Value,
    top_k: Value,
    d_model: Value,
    bytes_per_element: Value,
    expert: Value,
) -> list[Transfer]:
    """Expert parallelism, one mixture-of-experts layer: all-to-all dispatch and combine, forward and backward.

    ``tokens`` are one rank's tokens (b·s of its micro-batch); each is sent to ``top_k``
    experts, so each all-to-all moves a buffer of tokens·top_k·d elements, of which
    (e−1)/e leaves the rank when routing is uniform. The backward pass repeats both in
    reverse. No capacity factor or token dropping is modelled.
    """
    e = _degree("expert", expert)
    nbytes = (
        _size("tokens", tokens)
        * _size("top_k", top_k)
        * _size("d_model", d_model)
        * _size("bytes_per_element", bytes_per_element)
    )
    return [
        _transfer(
            "all-to-all dispatch of tokens to their experts",
            "all_to_all",
            e,
            nbytes,
            1,
            "forward",
        ),
        _transfer(
            "all-to-all combine of expert outputs",
            "all_to_all",
            e,
            nbytes,
            1,
            "forward",
        ),
        _transfer(
            "all-to-all of the combine's gradients",
            "all_to_all",
            e,
            nbytes,
            1,
            "backward",
        ),
        _transfer(
            "all-to-all of the dispatch's gradients",
            "all_to_all",
            e,
            nbytes,
            1,
            "backward",
        ),
    ]


# --- totals ---------------------------------------------------------------------------


def bytes_per_rank(
    transfers: Iterable[Transfer], phase: str | None = None
) -> sympy.Expr | float:
    """Bytes each rank sends over all transfers (optionally one phase: forward, backward or step)."""
    chosen = list(_in_phase(transfers, phase))
    exact = _exact_bytes_per_rank(chosen)
    if exact is not None:
        return exact
    return settled(
        sympy.Add(*(sympy.sympify(t.bytes_per_rank()) for t in chosen))
    )


def _exact_bytes_per_rank(transfers: list[Transfer]) -> sympy.Rational | None:
    """The same exact sum in Python fractions where every group and buffer is a number (None otherwise):
    the planner asks for thousands, and sympy builds an expression for each."""
    return _exact_sum(tuple((t.collective, t.ranks, t.nbytes, t.count) for t in transfers))


@lru_cache(maxsize=4096)
def _exact_sum(runs: tuple[tuple[str, sympy.Expr, sympy.Expr, int], ...]) -> sympy.Rational | None:
    """Once per list of runs: the planner's groups that differ only in degrees the transfers do not read send the same."""
    total = Fraction(0)
    for name, ranks, nbytes, count in runs:
        sent = _exact_bus_bytes(name, ranks, nbytes)
        if sent is None:
            return None
        total += count * sent
    return sympy.Rational(total.numerator, total.denominator)


@lru_cache(maxsize=4096)
def _exact_bus_bytes(name: str, ranks: sympy.Expr, nbytes: sympy.Expr) -> int | Fraction | None:
    """One run's bus bytes in Python fractions, None where a size is not a number; once per collective and
    sizes: the planner's groups repeat the same transfers."""
    if not (ranks.is_Rational and nbytes.is_Rational):
        return None
    at = {P: Fraction(int(ranks.p), int(ranks.q)), N: Fraction(int(nbytes.p), int(nbytes.q))}
    terms = _bus_bytes(name)
    if terms is None or not all(v in at for monomial in terms for v, _ in monomial):
        return None  # a float coefficient or a function of the sizes: sympy's route
    return sum((Fraction(c) * math.prod((at[v] ** e for v, e in monomial), start=Fraction(1)) for monomial, c in terms.items()), Fraction(0))


@cache
def _bus_bytes(name: str) -> dict | None:
    """A collective's bus bytes as monomials in p and n, summed in exact fractions (any order gives the same)."""
    return polynomial(collective(name).bus_bytes)



def comm_time(
    transfers: Iterable[Transfer],
    *,
    alpha: Value = ALPHA,
    beta: Value = BETA,
    algorithm: str | None = None,
    phase: str | None = None,
) -> sympy.Expr | float:
    """Seconds of all transfers one after another (no overlap with compute or with each other)."""
    return settled(
        sympy.Add(
            *(
                sympy.sympify(
                    t.time(
                        alpha=alpha, beta=beta, algorithm=_algorithm_for(t, algorithm)
                    )
                )
                for t in _in_phase(transfers, phase)
            )
        )
    )


def link_comm_time(
    transfers: Iterable[Transfer],
    hardware: Hardware | str | os.PathLike[str],
    *,
    link: str = "scale_up",
    alpha: Value | None = None,
    phase: str | None = None,
) -> sympy.Expr | float:
    """Seconds of all transfers over one kind of link of a device or system (``symform.analysis.parallel.collectives.link_time`` rules)."""
    latency = link_latency(link) if alpha is None else alpha
    return comm_time(
        transfers, alpha=latency, beta=1 / link_bandwidth(hardware, link), phase=phase
    )


def _algorithm_for(transfer: Transfer, algorithm: str | None) -> str | None:
    # one algorithm name may not exist for every collective in a mixed list: use it where it does
    return (
        algorithm if algorithm in collective(transfer.collective).algorithms else None
    )


def _in_phase(transfers: Iterable[Transfer], phase: str | None) -> list[Transfer]:
    if phase is not None and phase not in PHASES:
        raise ConfigError(
            f"unknown phase {phase!r}; use one of {', '.join(PHASES)} or None for all"
        )
    return [t for t in transfers if phase is None or t.phase == phase]
