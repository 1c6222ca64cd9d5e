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
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import ConfigError, SymformError

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


MAX_HEADER = 100 * 2**20  # a safetensors header longer than this is not one: the most any header read may cost
DTYPES_FILE = "safetensors-dtypes.json"  # what the headers said, kept beside the Hub cache (huggingface_hub's assets folder)
_SHARD_READERS = 8


def safetensors_dtypes(folder: Path) -> dict[str, dict[str, int]] | None:
    """Tensors, elements and bytes per dtype of the *.safetensors files in ``folder``, read from their headers
    only (eight bytes of length, then JSON); None when the folder has none."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    headers = []
    for path in files:
        try:
            with path.open("rb") as f:
                headers.append(read_header(f.read, str(path)))
        except OSError as e:
            raise ConfigError(f"{path}: unreadable safetensors file ({e.strerror or type(e).__name__}); remove it or fix the download") from None
    return tally(headers)


def checkpoint_dtypes(files: HubFiles) -> dict[str, dict[str, int]] | None:
    """The checkpoint's dtypes from its safetensors headers: the weights in the cache where they are there, else
    what an earlier run read, else (online) the headers alone over HTTP range reads, kept for the runs after."""
    local = safetensors_dtypes(files.folder) if files.folder else None
    if local is not None:
        return local
    hub = _import_hub()
    kept = _kept_dtypes_path(hub, files)
    if kept is not None and kept.is_file():
        try:
            return json.loads(kept.read_text(encoding="utf-8"))["dtypes"]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
            pass  # a damaged note: read the headers again
    if hub.constants.HF_HUB_OFFLINE:
        return None
    found = remote_dtypes(files)
    if found is not _UNREACHABLE and kept is not None:
        try:
            kept.write_text(json.dumps({"dtypes": found}), encoding="utf-8")
        except OSError:
            pass  # a read-only assets folder: the headers are read again next time
    return None if found is _UNREACHABLE else found


_UNREACHABLE = object()


def remote_dtypes(files: HubFiles):
    """Dtypes from the headers of the repository's safetensors files, one ranged read of each file's start, never its
    weights; None when it has none, _UNREACHABLE when the Hub cannot be asked (the facts are optional)."""
    hub = _import_hub()
    weight_map = (files.index or {}).get("weight_map")
    shards = sorted(set(weight_map.values())) if isinstance(weight_map, Mapping) and weight_map else ["model.safetensors"]
    if not all(isinstance(s, str) for s in shards):
        raise ConfigError(f"{files.repo_id}: model.safetensors.index.json maps tensors to something other than file names")
    from concurrent.futures import ThreadPoolExecutor

    from huggingface_hub import errors

    revision = files.commit or files.revision
    try:
        with ThreadPoolExecutor(max_workers=min(_SHARD_READERS, len(shards))) as pool:
            headers = list(pool.map(lambda shard: _remote_header(hub, files.repo_id, shard, revision), shards))
    except errors.EntryNotFoundError:
        return None  # no model.safetensors: weights in another format
    except SymformError:
        raise
    except (errors.HfHubHTTPError, OSError):
        return _UNREACHABLE
    except Exception as e:
        if type(e).__module__.startswith("httpx"):  # the HTTP client's own connection and timeout errors
            return _UNREACHABLE
        raise
    return tally(headers)


def _remote_header(hub, repo_id: str, filename: str, revision: str | None) -> dict[str, Any]:
    """One file's header over HTTP: a range request whose body is read only as far as the header goes."""
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    url = hub.hf_hub_url(repo_id, filename, revision=revision)
    where = f"{repo_id}/{filename}"
    request = {**build_hf_headers(), "Range": f"bytes=0-{8 + MAX_HEADER - 1}"}
    with get_session().stream("GET", url, headers=request, timeout=hub.constants.HF_HUB_DOWNLOAD_TIMEOUT) as response:
        if response.status_code >= 400:
            response.read()  # an error's body is its message
            hf_raise_for_status(response)
        return read_header(_StreamReader(response.iter_bytes()).read, where)


class _StreamReader:
    """``read(n)`` over an HTTP body: at most n bytes, fewer only at its end; what is not asked for is never fetched
    (a server that ignores the range sends the whole file, and the connection closes after the header)."""

    def __init__(self, chunks):
        self._chunks, self._buffer = chunks, bytearray()

    def read(self, size: int) -> bytes:
        while len(self._buffer) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buffer += chunk
        data, self._buffer = bytes(self._buffer[:size]), self._buffer[size:]
        return data


def read_header(read, where: str) -> dict[str, Any]:
    """A safetensors header: a little-endian u64 length, then that many bytes of JSON (the format's specification,
    https://huggingface.co/docs/safetensors#format); ``read(n)`` gives the file's next n bytes."""
    start = read(8)
    size = int.from_bytes(start, "little") if len(start) == 8 else 0
    if not 0 < size <= MAX_HEADER:
        raise ConfigError(f"{where}: not a safetensors file (header length {size if len(start) == 8 else 'missing'}); remove it or fix the download")
    text = read(size)
    if len(text) < size:
        raise ConfigError(f"{where}: safetensors header cut short ({len(text)} of {size} bytes); remove it or fix the download")
    try:
        header = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{where}: unreadable safetensors header ({type(e).__name__}); remove it or fix the download") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{where}: a safetensors header must be a JSON object; remove it or fix the download")
    for name, entry in header.items():
        if name != "__metadata__" and not _tensor_entry(entry):
            raise ConfigError(f"{where}: tensor {name!r} has no dtype, shape and data_offsets in its header; the file is not safetensors")
    return header


def _tensor_entry(entry: object) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("dtype"), str):
        return False
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    whole = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0  # noqa: E731
    return (isinstance(shape, list) and all(whole(d) for d in shape)
            and isinstance(offsets, list) and len(offsets) == 2 and all(whole(o) for o in offsets) and offsets[0] <= offsets[1])


def tally(headers: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Tensors, elements and bytes per dtype over some files' headers."""
    found: dict[str, dict[str, int]] = {}
    for header in headers:
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            counts = found.setdefault(entry["dtype"], {"tensors": 0, "elements": 0, "bytes": 0})
            counts["tensors"] += 1
            counts["elements"] += math.prod(entry["shape"])
            counts["bytes"] += entry["data_offsets"][1] - entry["data_offsets"][0]
    return dict(sorted(found.items()))


def _kept_dtypes_path(hub, files: HubFiles) -> Path | None:
    """Where this commit's header facts are kept: only a pinned commit's, since a branch moves."""
    if files.commit is None:
        return None
    try:
        return hub.cached_assets_path(library_name="symform", namespace=files.repo_id, subfolder=files.commit) / DTYPES_FILE
    except (OSError, ValueError):
        return None  # a read-only or damaged assets folder: the facts are read each time


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
