"""What images and audio share as workload settings: a count and a size given together, set on the model
as conventions (so every command counts the tower the same way), and refused for a model no cost of which
depends on them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ...engine.errors import ConfigError

if TYPE_CHECKING:
    from ...engine.graph.model import Model


def with_media(model: "Model", count: int | None, size: object, *, settings: Callable[[], dict[str, int]], count_missing: str, size_missing: str, no_tower: str) -> "Model":
    """The model with ``settings()`` (a count and its size), both given or neither; refused where the model has no
    tower that reads them."""
    if count is None and size is None:
        return model
    if count is None:
        raise ConfigError(count_missing)
    if size is None:
        raise ConfigError(size_missing)
    changed = model.with_conventions(**settings())
    if changed.expression("forward_flops").expr == model.expression("forward_flops").expr:
        raise ConfigError(no_tower)
    return changed


def media_in(model: "Model", names: tuple[str, ...]) -> dict[str, int]:
    """The model's settings among ``names`` where the first of them (the count) is set, else none."""
    values = {s.name: int(v) for s, v in model.conventions.items() if s.name in names}
    return values if values.get(names[0]) else {}
