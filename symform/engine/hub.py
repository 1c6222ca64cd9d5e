"""Models named by their Hugging Face Hub id (``Qwen/Qwen3-8B``).

The files a cost model needs are small: ``config.json``, and where a repository
has them ``hf_quant_config.json`` (the checkpoint's quantisation, as NVIDIA's
ModelOpt writes it) and ``model.safetensors.index.json`` (the checkpoint's own
size). They are fetched with ``huggingface_hub`` into the standard Hugging Face
cache, so ``HF_HOME``, ``HF_HUB_CACHE``, ``HF_HUB_OFFLINE`` and ``HF_TOKEN``
mean what they mean everywhere else, and read from that cache without any
network access once there. ``huggingface_hub`` is imported only here, only
when an id is resolved: start-up stays light.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import ConfigError

CONFIG = "config.json"
QUANT_CONFIG = "hf_quant_config.json"
INDEX = "model.safetensors.index.json"
OPTIONAL = (QUANT_CONFIG, INDEX)

_REPO_ID = re.compile(r"[A-Za-z0-9][\w.\-]*/[A-Za-z0-9][\w.\-]*")


class HubError(ConfigError):
    """A model id could not be resolved: unknown, gated, or not reachable."""


@dataclass(frozen=True)
class HubFiles:
    """What a repository says about its checkpoint, as read from the cache."""

    repo_id: str
    revision: str | None
    config: dict[str, Any]
    quant_config: dict[str, Any] | None = None
    index: dict[str, Any] | None = None
    commit: str | None = None
    folder: Path | None = None  # the cached snapshot: its *.safetensors, where downloaded, give dtypes from their headers

    @property
    def origin(self) -> str:
        at = f"@{self.revision}" if self.revision else ""
        return f"{self.repo_id}{at} (Hugging Face Hub)"


def looks_like_repo_id(text: str) -> bool:
    """``org/name``, and not a file on disk: ``./my-org/config`` stays a path."""
    return bool(_REPO_ID.fullmatch(text)) and not Path(text).exists() and not text.endswith((".json", ".toml"))


def close_names(text: str, names: list[str]) -> list[str]:
    """Near misses of ``text`` among ``names``, for a "did you mean"."""
    lowered = {n.lower(): n for n in names}
    return [lowered[m] for m in difflib.get_close_matches(text.lower(), list(lowered), n=3, cutoff=0.6)]


def fetch(repo_id: str, *, revision: str | None = None) -> HubFiles:
    """config.json and the optional checkpoint files of ``repo_id``, from the cache or downloaded into it."""
    hub = _import_hub()
    config_path = _cached_or_download(hub, repo_id, CONFIG, revision, required=True)
    found = {name: _cached_or_download(hub, repo_id, name, revision, required=False) for name in OPTIONAL}
    return HubFiles(
        repo_id=repo_id,
        revision=revision,
        config=_read_json(config_path, repo_id, CONFIG),
        quant_config=_read_json(found[QUANT_CONFIG], repo_id, QUANT_CONFIG) if found[QUANT_CONFIG] else None,
        index=_read_json(found[INDEX], repo_id, INDEX) if found[INDEX] else None,
        commit=_snapshot_commit(config_path),
        folder=config_path.parent,
    )


def _import_hub():
    try:
        import huggingface_hub
        from huggingface_hub.utils import logging as hub_logging
    except ImportError:
        raise HubError("reading a model by its Hub id needs huggingface_hub: pip install huggingface_hub (or give a path to a config.json)") from None
    # its retry warnings would come before symform's one-line answer; failures are reported as that line
    hub_logging.set_verbosity_error()
    return huggingface_hub


def _cached_or_download(hub, repo_id: str, filename: str, revision: str | None, *, required: bool) -> Path | None:
    """The cached file when the cache has it (no network at all), else a download into the cache."""
    cached = hub.try_to_load_from_cache(repo_id, filename, revision=revision)
    if isinstance(cached, str):
        return Path(cached)
    if cached is not None and not required:
        return None  # the cache remembers that the repository has no such file
    from huggingface_hub import errors

    try:
        return Path(hub.hf_hub_download(repo_id, filename, revision=revision))
    except errors.GatedRepoError:
        raise HubError(f"{repo_id} is gated: accept its terms on https://huggingface.co/{repo_id} and set HF_TOKEN (or run `hf auth login`)") from None
    except errors.RepositoryNotFoundError:
        raise HubError(f"{repo_id}: no such model on the Hugging Face Hub, or a private one (set HF_TOKEN); check the id (symform models lists the presets)") from None
    except errors.RevisionNotFoundError:
        raise HubError(f"{repo_id}: no revision {revision!r}; give a branch, tag or commit that exists (--revision)") from None
    except errors.LocalEntryNotFoundError:
        if not required:
            return None  # offline and never fetched: the checkpoint's extra facts are simply not known
        raise HubError(
            f"{repo_id}: {filename} is not in the Hugging Face cache and the Hub cannot be reached"
            f"{' (HF_HUB_OFFLINE is set)' if hub.constants.HF_HUB_OFFLINE else ''}; connect once to download it, or give a path to a config.json"
        ) from None
    except errors.EntryNotFoundError:
        if required:
            raise HubError(f"{repo_id} has no {filename}; symform reads a transformers model's config.json") from None
        return None
    except (errors.HfHubHTTPError, OSError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise HubError(f"{repo_id}: cannot fetch {filename} ({reason}); check the network, HF_TOKEN, or give a path to a config.json") from None


MAX_HEADER = 100 * 2**20  # a safetensors header longer than this is not one


def safetensors_dtypes(folder: Path) -> dict[str, dict[str, int]] | None:
    """Tensors and bytes per dtype of the *.safetensors files in ``folder``, read from their headers only
    (eight bytes of length, then JSON); None when the folder has none."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    found: dict[str, dict[str, int]] = {}
    for path in files:
        for name, entry in _header(path).items():
            if name == "__metadata__":
                continue
            try:
                start, end = entry["data_offsets"]
                dtype = str(entry["dtype"])
            except (KeyError, TypeError, ValueError):
                raise ConfigError(f"{path}: tensor {name!r} has no dtype and data_offsets in its header; the file is not safetensors") from None
            counts = found.setdefault(dtype, {"tensors": 0, "bytes": 0})
            counts["tensors"] += 1
            counts["bytes"] += int(end) - int(start)
    return found


def _header(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            size = int.from_bytes(f.read(8), "little")
            if not 0 < size <= MAX_HEADER:
                raise ConfigError(f"{path}: not a safetensors file (header length {size}); remove it or fix the download")
            header = json.loads(f.read(size))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: unreadable safetensors header ({type(e).__name__}); remove it or fix the download") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{path}: a safetensors header must be a JSON object")
    return header


def _read_json(path: Path, repo_id: str, filename: str) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HubError(f"{repo_id}: the cached {filename} is unreadable ({type(e).__name__}); delete it from the cache ({path}) and retry") from None
    if not isinstance(value, Mapping):
        raise HubError(f"{repo_id}: {filename} is not a JSON object")
    return dict(value)


def _snapshot_commit(path: Path) -> str | None:
    """The commit a cached file belongs to: its snapshot folder's name."""
    parts = path.parts
    return parts[parts.index("snapshots") + 1] if "snapshots" in parts[:-1] else None
