"""The cheapest serving layouts that meet latency targets: tensor degree, scheduling (continuous,
chunked prefill, disaggregated pools) and concurrency, ranked by output tokens/s per GPU.

For each layout the largest concurrency whose TTFT and TPOT meet the targets is found by
bisection (both grow with concurrency), up to what the paged KV cache holds; at a given
request rate, replicas follow. See docs/serving.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...engine.errors import ConfigError
from ...engine.graph.model import Model
from ..time import step_model
from ..serving.serving import Replica, ServingPoint, Setup, check_lengths
from ..serving.kv_pool import Lengths


@dataclass(frozen=True)
class Targets:
    ttft_s: float
    tpot_s: float

    def met(self, point: ServingPoint) -> bool:
        return point.ttft_s <= self.ttft_s and point.tpot_s <= self.tpot_s

    @classmethod
    def offline(cls) -> "Targets":
        """No latency target (batch inference): every layout saturates, at the most requests its cache holds."""
        return cls(math.inf, math.inf)

    @property
    def is_offline(self) -> bool:
        return math.isinf(self.ttft_s) and math.isinf(self.tpot_s)


@dataclass(frozen=True)
class ServingLayout:
    mode: str
    tensor: int
    prefill_tensor: int | None
    point: ServingPoint
    largest: int  # the most the cache holds
    replicas: int | None  # decode replicas for the asked rate
    prefill_replicas: int | None
    gpus: int | None  # for the asked rate
    context_note: str | None = None

    @property
    def name(self) -> str:
        if self.mode == "disaggregated":
            return f"disaggregated: prefill TP {self.prefill_tensor}, decode TP {self.tensor}"
        return f"{self.mode}, TP {self.tensor}"

    def as_dict(self) -> dict[str, object]:
        return {
            "layout": self.name, "mode": self.mode, "tensor": self.tensor, "prefill_tensor": self.prefill_tensor, "largest_concurrency": self.largest,
            "replicas": self.replicas, "prefill_replicas": self.prefill_replicas, "gpus": self.gpus, **self.point.as_dict(),
        }  # fmt: skip


@dataclass(frozen=True)
class ServingPlan:
    model: str
    gpu: str
    lengths: Lengths
    targets: Targets
    rate: float | None
    best: list[ServingLayout]
    refused: dict[str, str]
    best_by_mode: dict[str, ServingLayout] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    assumptions: dict[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model, "gpu": self.gpu, "lengths": self.lengths.as_dict(), "offline": self.targets.is_offline,
            "ttft_max_s": None if self.targets.is_offline else self.targets.ttft_s, "tpot_max_s": None if self.targets.is_offline else self.targets.tpot_s,
            "rate_requests_per_s": self.rate, "layouts": [b.as_dict() for b in self.best], "refused": self.refused, "notes": self.notes, "assumptions": self.assumptions,
        }  # fmt: skip


def tensor_degrees(node_size: int, limit: int | None = None) -> list[int]:
    """Powers of two up to one node (tensor parallelism stays inside its fabric)."""
    top = min(node_size, limit or node_size)
    return [1 << i for i in range(top.bit_length()) if 1 << i <= top]


def best_concurrency(replica: Replica, targets: Targets) -> ServingPoint | None:
    """The point at the largest concurrency meeting the targets (None if not even one request does)."""
    low, high = 1, replica.largest
    if high < 1:
        return None
    first = replica.point(1)
    if not targets.met(first):
        return None
    found = first
    top = replica.point(high)
    if targets.met(top):
        return top
    while high - low > 1:
        middle = (low + high) // 2
        point = replica.point(middle)
        low, high, found = (middle, high, point) if targets.met(point) else (low, middle, found)
    return found


def plan_serving(
    model: Model,
    gpu: str,
    lengths: Lengths,
    targets: Targets,
    *,
    setup: Setup | None = None,
    modes: tuple[str, ...] = ("continuous", "chunked", "disaggregated"),
    rate: float | None = None,
    max_tensor: int | None = None,
    top: int = 5,
) -> ServingPlan:
    """Every tensor degree and scheduling, each at its best concurrency under the targets, ranked by tokens/s per GPU
    (with a ``rate`` in requests/s: by the GPUs it takes, then tokens/s per GPU)."""
    setup = setup or Setup()
    for name, value in (("TTFT target", targets.ttft_s), ("TPOT target", targets.tpot_s)):
        if not value > 0:
            raise ConfigError(f"{name} is {value!r}; give a positive number of seconds")
    if rate is not None and not rate > 0:
        raise ConfigError(f"rate is {rate!r}; give a positive number of requests per second")
    place = step_model.placement(gpu, setup.node_size)
    check_lengths(model, lengths)
    degrees = tensor_degrees(place.node_size, max_tensor)
    found: list[ServingLayout] = []
    refused: dict[str, str] = {}
    notes: list[str] = []
    evidence: set[str] = set()
    layouts = [(m, t, None) for m in modes if m != "disaggregated" for t in degrees]
    if "disaggregated" in modes:
        layouts += [("disaggregated", t, p) for t in degrees for p in degrees]
    for mode, tensor, prefill in layouts:
        label = f"{mode} TP {tensor}" + (f" (prefill TP {prefill})" if prefill else "")
        try:
            replica = Replica(model, gpu, lengths, mode, tensor, setup, prefill)
        except ConfigError as e:
            refused[label] = str(e)
            continue
        if replica.largest < 1:
            refused[label] = replica.no_room()
            continue
        evidence.add(replica.steps.evidence)
        point = best_concurrency(replica, targets)
        if point is None:
            single = replica.point(1)
            refused[label] = f"even one request misses the targets: TTFT {single.ttft_s * 1e3:.1f} ms, TPOT {single.tpot_s * 1e3:.2f} ms"
            continue
        replicas = prefill_replicas = gpus = None
        if rate is not None:
            per_replica = point.tokens_per_s / lengths.output_mean
            replicas = math.ceil(rate / per_replica)
            prefill_replicas = math.ceil(replicas * point.prefill_replicas_per_decode) if mode == "disaggregated" else None
            gpus = replicas * tensor + (prefill_replicas or 0) * (prefill or 0)
        found.append(ServingLayout(mode, tensor, prefill, point, replica.largest, replicas, prefill_replicas, gpus, replica.pool.context_note()))
    key = (lambda r: (r.gpus, -r.point.tokens_per_s_per_gpu)) if rate is not None else (lambda r: -r.point.tokens_per_s_per_gpu)
    found.sort(key=key)
    if found and found[0].context_note:
        notes.append(f"{found[0].name}: {found[0].context_note}")
    by_mode: dict[str, ServingLayout] = {}
    for layout in found:
        by_mode.setdefault(layout.mode, layout)
    return ServingPlan(model.name, place.name, lengths, targets, rate, found[:top], refused, by_mode, notes, _assumptions(setup, rate, targets.is_offline) | {"evidence": sorted(evidence) + ["hardware/efficiency/serving.toml (engine settings)"]})


def _assumptions(setup: Setup, rate: float | None, offline: bool = False) -> dict[str, object]:
    at = "saturated: the most requests the paged cache holds without preemption (offline, no latency target)" if offline else "the largest concurrency meeting both targets (bisection), up to what the paged cache holds without preemption"
    return {
        "search": f"tensor degrees 1, 2, 4, … within one node; continuous and chunked scheduling on one pool; disaggregated with every prefill and decode degree; each at {at}",
        "ranking": "GPUs for the rate, then output tokens/s per GPU" if rate else "output tokens/s per GPU (disaggregated: the decode replica and its share of the prefill pool)",
        "kv_link": setup.kv_link,
        "engine": {"utilisation": setup.settings.utilisation, "block_tokens": setup.settings.block_tokens, "token_budget": setup.settings.token_budget, "sources": setup.settings.sources},
    }
