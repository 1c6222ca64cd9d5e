"""A serving engine's memory: its defaults (hardware/serving/engine.toml: memory utilisation, block size, token budget), the lengths of the requests it serves, and the paged KV pool: blocks, their tokens, and how many sequences fit."""

from __future__ import annotations

from fractions import Fraction

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache

import sympy

from ...engine.store.data import read_toml
from ...engine.errors import ConfigError, EvaluationError
from ...engine.algebra.evaluate import compile_expression
from ...engine.graph.model import Model
from ..time import step_model
from ..time import efficiencies
from ..devices.hardware import Hardware
from ..memory.memory import Inference, inference_expressions, tensor_split
from ..memory.fitting import largest_fitting

Number = int | float | Fraction


@dataclass(frozen=True)
class Engine:
    """A serving engine's settings: memory share, paged-cache block, token budget per step, and where each comes from."""

    utilisation: float
    block_tokens: int
    token_budget: int
    sources: dict[str, str] = field(default_factory=dict)


@cache
def engine_defaults() -> Engine:
    data = read_toml(efficiencies.efficiency_dir() / "serving.toml")
    return Engine(
        utilisation=float(data["memory"]["utilisation"]),
        block_tokens=int(data["paged_cache"]["block_tokens"]),
        token_budget=int(data["chunked_prefill"]["token_budget"]),
        sources={"utilisation": data["memory"]["source"], "block_tokens": data["paged_cache"]["source"], "token_budget": data["chunked_prefill"]["source"]},
    )


def engine(*, utilisation: float | None = None, block_tokens: int | None = None, token_budget: int | None = None) -> Engine:
    """The defaults with the given settings replacing theirs (each then sourced as "given")."""
    base = engine_defaults()
    if utilisation is not None and not (isinstance(utilisation, (int, float)) and 0 < utilisation <= 1):
        raise ConfigError(f"memory utilisation is {utilisation!r}; give a fraction in (0, 1]")
    for name, value in (("block_tokens", block_tokens), ("token_budget", token_budget)):
        if value is not None:
            step_model._whole(name, value)
    given = {k: v for k, v in (("utilisation", utilisation), ("block_tokens", block_tokens), ("token_budget", token_budget)) if v is not None}
    return replace(base, **given, sources={**base.sources, **{k: "given" for k in given}})


@dataclass(frozen=True)
class Lengths:
    """Prompt and output tokens of the requests: a mean and a maximum of each (equal for fixed lengths)."""

    prompt_mean: float
    prompt_max: int
    output_mean: float
    output_max: int

    @classmethod
    def fixed(cls, prompt: int, output: int) -> "Lengths":
        step_model._whole("prompt", prompt), step_model._whole("output", output)
        return cls(prompt, prompt, output, output)

    @classmethod
    def spread(cls, prompt_mean: float, prompt_max: int, output_mean: float, output_max: int) -> "Lengths":
        step_model._whole("prompt maximum", prompt_max), step_model._whole("output maximum", output_max)
        for name, mean, top in (("prompt", prompt_mean, prompt_max), ("output", output_mean, output_max)):
            if isinstance(mean, bool) or not isinstance(mean, (int, float)) or not 1 <= mean <= top:
                raise ConfigError(f"{name} mean is {mean!r}; give a number from 1 to its maximum {top}")
        return cls(float(prompt_mean), prompt_max, float(output_mean), output_max)

    @property
    def is_fixed(self) -> bool:
        return self.prompt_mean == self.prompt_max and self.output_mean == self.output_max

    @property
    def longest(self) -> int:
        """The most tokens one sequence ever holds: its whole prompt and all but its last output token cached, that one being computed."""
        return self.prompt_max + self.output_max

    @property
    def mean_cached(self) -> float:
        """Tokens a live sequence holds on average over its life (prompt, then half its output)."""
        return self.prompt_mean + self.output_mean / 2

    @property
    def mean_past(self) -> float:
        """The cache length of a mean decode step: after the prompt and half of the output − 1 steps."""
        return self.prompt_mean + max(self.output_mean - 2, 0) / 2

    def describe(self) -> str:
        if self.is_fixed:
            return f"prompt {self.prompt_max}, output {self.output_max}"
        return f"prompt mean {self.prompt_mean:g} (max {self.prompt_max}), output mean {self.output_mean:g} (max {self.output_max})"

    def as_dict(self) -> dict[str, float]:
        return {"prompt_mean": self.prompt_mean, "prompt_max": self.prompt_max, "output_mean": self.output_mean, "output_max": self.output_max}


@dataclass(frozen=True)
class KVPool:
    """One replica's memory on each of its devices: what is fixed, the pool of KV blocks, and how many sequences it holds."""

    capacity_bytes: int
    usable_bytes: float
    weights_bytes: float
    activations_bytes: float
    draft_bytes: float
    pool_bytes: float
    block_tokens: int
    block_bytes: float
    sequence_bytes_max: float  # one sequence at its longest, whole blocks
    waste_bytes_max: float  # of it, the unused tail of its last block
    sequence_bytes_mean: float  # one sequence averaged over its life, half a block's tail included
    max_concurrency: int  # every sequence at its longest: no preemption ever
    steady_concurrency: int  # sequences at their mean occupancy: more fit, with preemption when many are long at once
    context_limit: int | None
    context_field: str | None
    memory_tokens: int  # the longest single sequence the pool holds

    @property
    def fragmentation(self) -> float:
        """Share of a longest sequence's cache its last block leaves unused."""
        return self.waste_bytes_max / self.sequence_bytes_max if self.sequence_bytes_max else 0.0

    def context_note(self) -> str | None:
        if self.context_limit is None:
            return None
        if self.memory_tokens > self.context_limit:
            return f"the memory would hold one sequence of {self.memory_tokens:,} tokens, but the model reads at most {self.context_limit:,} ({self.context_field}); sequences stop there"
        return f"the model reads up to {self.context_limit:,} tokens ({self.context_field}); the memory holds one sequence of at most {self.memory_tokens:,}"

    def as_dict(self) -> dict[str, object]:
        return {
            "capacity_bytes": self.capacity_bytes,
            "usable_bytes": self.usable_bytes,
            "weights_bytes": self.weights_bytes,
            "activations_bytes": self.activations_bytes,
            "draft_bytes": self.draft_bytes,
            "kv_pool_bytes": self.pool_bytes,
            "block_tokens": self.block_tokens,
            "block_bytes": self.block_bytes,
            "sequence_bytes_max": self.sequence_bytes_max,
            "fragmentation_bytes_max": self.waste_bytes_max,
            "fragmentation": self.fragmentation,
            "sequence_bytes_mean": self.sequence_bytes_mean,
            "max_concurrency": self.max_concurrency,
            "steady_concurrency": self.steady_concurrency,
            "context_limit": self.context_limit,
            "memory_tokens": self.memory_tokens,
            "context_note": self.context_note(),
        }


@dataclass(frozen=True)
class _MemoryForms:
    weights: float
    activations: Callable[[int], float]  # of a step over this many tokens
    kv: Callable[[float, int], float]  # one sequence holding this many tokens, at this block size


@cache
def _categories(model: Model, weight_format: str | None, kv_bytes: Number | None) -> dict[str, sympy.Expr]:
    """The serving memory's expressions on one device (no tensor split yet): built once per model, split per degree below."""
    categories, _ = inference_expressions(model, Inference(weight_format=weight_format, kv_bytes=kv_bytes, kv_block=1, flash=True), keep=("past", "kv_block"))
    return categories


@cache
def _memory_forms(model: Model, tensor: int, weight_format: str | None, kv_bytes: Number | None) -> _MemoryForms:
    categories = _categories(model, weight_format, kv_bytes)
    split = tensor_split(model, tensor)  # refuses a degree that does not divide the heads
    values = {**model.values, "batch": 1}

    def bind(expr: sympy.Expr, **more: int) -> sympy.Expr:
        """The sizes put in, split ones divided by the degree, in one pass (as inference_expressions splits them, then evaluates)."""
        named = {**values, **more}
        expr = sympy.sympify(expr)
        return expr.xreplace({s: sympy.Integer(named[s.name]) / (tensor if s in split else 1) for s in expr.free_symbols if s.name in named})

    weights = float(bind(categories["weights"]))
    kv = bind(categories["kv_cache"] + categories.get("recurrent_state", sympy.Integer(0)), seq=0)
    kv_names = tuple(sorted(s.name for s in kv.free_symbols))
    if set(kv_names) - {"past", "kv_block"}:
        raise EvaluationError(f"{model.name}'s KV cache depends on {', '.join(sorted(set(kv_names) - {'past', 'kv_block'}))}; give them with --set")
    kv_function = compile_expression(kv, ("past", "kv_block"))
    act = bind(categories["activations"], past=0, kv_block=1)
    act_function = compile_expression(act, ("seq",))
    return _MemoryForms(weights, lambda tokens: float(act_function(tokens)), lambda tokens, block: float(kv_function(tokens, block)))


def paged_pool(
    model: Model,
    gpu: str | os.PathLike[str] | Hardware,
    lengths: Lengths,
    *,
    tensor: int = 1,
    settings: Engine | None = None,
    step_tokens: int | None = None,
    weight_format: str | None = None,
    kv_bytes: Number | None = None,
    draft: Model | None = None,
    node_size: int | None = None,
) -> KVPool:
    """How many sequences of ``lengths`` one replica on ``tensor`` devices holds in its paged KV cache.

    The pool is the engine's share of the device memory less the weights (and a draft
    model's) and the activations of the largest step (``step_tokens``: the token budget,
    or the longest prompt when prefills are not chunked).
    """
    settings = settings or engine_defaults()
    place = step_model.placement(gpu, node_size)
    step_model._whole("tensor", tensor)
    within_context(model, lengths)
    limit = model.context_limit
    forms = _memory_forms(model, tensor, weight_format, kv_bytes)
    draft_forms = _memory_forms(draft, tensor, weight_format, kv_bytes) if draft is not None else None
    capacity = int(place.device.memory_bytes)
    usable = capacity * settings.utilisation
    rows = step_tokens or lengths.prompt_max
    activations = forms.activations(rows)
    draft_bytes = draft_forms.weights if draft_forms else 0.0
    pool = usable - forms.weights - activations - draft_bytes
    block = settings.block_tokens

    def sequence(tokens: float, size: int) -> float:
        return forms.kv(tokens, size) + (draft_forms.kv(tokens, size) if draft_forms else 0.0)

    longest = sequence(lengths.longest, block)
    waste = longest - sequence(lengths.longest, 1)
    # on-demand allocation: a live sequence holds its tokens so far, and on average half a block unused
    mean = sequence(lengths.mean_cached, 1) + (sequence(block, 1) - sequence(0, 1)) * (block - 1) / (2 * block)
    mean = min(mean, longest)  # a short sequence's half block on average cannot outgrow the blocks its longest holds
    fits = int(pool // longest) if pool > 0 and longest > 0 else 0
    steady = int(pool // mean) if pool > 0 and mean > 0 else 0
    memory_tokens = largest_fitting(lambda n: sequence(n, block), pool, limit=1 << 34) if pool > 0 else 0
    return KVPool(
        capacity_bytes=capacity, usable_bytes=usable, weights_bytes=forms.weights, activations_bytes=activations, draft_bytes=draft_bytes,
        pool_bytes=pool, block_tokens=block, block_bytes=sequence(block, block), sequence_bytes_max=longest, waste_bytes_max=waste,
        sequence_bytes_mean=mean, max_concurrency=fits, steady_concurrency=steady,
        context_limit=None if limit is None else limit.tokens, context_field=None if limit is None else limit.field, memory_tokens=memory_tokens,
    )  # fmt: skip


def within_context(model: Model, lengths: Lengths) -> None:
    limit = model.context_limit
    if limit is not None and lengths.longest > limit.tokens:
        raise ConfigError(f"prompt + output = {lengths.longest:,} tokens is more than {model.name} reads ({limit.tokens:,}, {limit.field}); shorten the prompt or the output")
