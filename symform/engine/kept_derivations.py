"""What analyses derive from a kept graph, kept between runs beside it.

A memory budget, a roofline or a plan derives expressions from a model's graph (each phase's work per
component, the activations each recomputation keeps, the parameters on one rank), once per graph and what
the derivation's key names (``ComponentGraph.derived``). For a graph kept between runs (kept_graphs) they
follow from the same things the graph does and from the key alone, so they are kept too: under a hash of
the graph's key and the derivation's, as a table of expressions and the values around them (kept_tables),
written when the run ends (by then a value has worked out what it caches, such as a phase's total) and only
where it reads back equal to what was derived, type for type and tree for tree. A key or value that a kept
document cannot hold (an instance of a class not declared ``keepable``, a Dummy symbol) is
derived every run, as is anything whose entry is damaged or written by another version: the cache only
saves time.
"""

from __future__ import annotations

import atexit
import json
from functools import cache
from typing import Any, Hashable

from . import disk_cache
from .data import bundled_fingerprint
from .declarations import default_library
from .kept_tables import NotKept, Reader, Writer, key_text, rebuilt_table, same_value

FORMAT = 2  # 2: mappings by name as JSON objects
_MAX_STORE_BYTES = 2 * 2**20  # every run that loads a kept graph reads the file: a plan of DeepSeek-V3 keeps 50 KB
_MAX_PENDING = 256  # derivations one run keeps (written, and checked to read back, when it ends)
_MAX_RUN_BYTES = _MAX_STORE_BYTES // 2  # and their bytes: a long session's derivations do not make every run read more


@cache
def _store() -> disk_cache.Store:
    return disk_cache.Store("derived", disk_cache.digest(str(FORMAT), bundled_fingerprint()), max_bytes=_MAX_STORE_BYTES)


class Derivations:
    """The keeper of one kept graph's derivations (``graph_key``: the graph's own key in kept_graphs)."""

    def __init__(self, graph_key: str):
        self.graph_key = graph_key

    def recall(self, key: Hashable) -> tuple[bool, Any]:
        entry = self._entry(key)
        if entry is None:
            return False, None
        try:
            document = _store().get(entry)
            return (True, _read(document)) if document is not None else (False, None)
        except Exception:  # noqa: BLE001: deriving it again is always right
            return False, None

    def remember(self, key: Hashable, value: Any) -> None:
        pending = _pending()
        if len(pending) >= _MAX_PENDING:
            return
        entry = self._entry(key)
        if entry is not None and _store().get(entry) is None:
            pending.append((entry, value))

    def _entry(self, key: Hashable) -> str | None:
        """The store's key for a derivation's: None where the key holds something a document cannot."""
        try:
            return disk_cache.digest(self.graph_key, key_text(key))
        except (NotKept, RecursionError):
            return None


@cache
def _pending() -> list[tuple[str, Any]]:
    atexit.register(keep_pending)
    return []


def keep_pending() -> None:
    """Keep what this run derived and no earlier run kept, in the order derived, up to _MAX_RUN_BYTES (at
    exit; tests call it to stand for a run's end)."""
    pending = _pending()
    taken, pending[:] = list(pending), []
    left = _MAX_RUN_BYTES
    for entry, value in taken:
        document, size = _written(value)
        if document is not None and size <= left:
            _store().put(entry, document)
            left -= size
    if left < _MAX_RUN_BYTES:
        _store().save()


def _written(value: Any) -> tuple[dict[str, Any] | None, int]:
    """``value``'s document and its size as JSON, where it reads back equal to ``value``; else None."""
    writer = Writer(default_library())
    try:
        document = {"table": writer.table, "value": writer.value(value)}
        text = json.dumps(document)
        return (document, len(text)) if same_value(_read(json.loads(text)), value) else (None, 0)
    except Exception:  # noqa: BLE001: keeping is optional; the value derived stands
        return None, 0


def _read(document: Any) -> Any:
    return Reader(rebuilt_table(document["table"]), default_library()).value(document["value"])
