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
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..budget import HEADER_BYTES, check_nesting, check_plain_file, quoted
from .data import read_json
from ..errors import BudgetError, ConfigError, SymformError

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
    answered: bool = True  # False where the Hub did not answer this run: nothing more is asked of it

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
    """config.json and the optional checkpoint files of ``repo_id``: the cache first, the Hub only for what
    the cache lacks. Where config.json is cached and the Hub does not answer, the optional files are left
    unknown at once (one try, no retries: the docs promise cached files need no network), and a note says so."""
    hub = _import_hub()
    _check_repo_id(hub, repo_id)
    config_path = _cached(hub, repo_id, CONFIG, revision)
    from_cache = config_path is not None
    if config_path is None:
        config_path = _cached_or_download(hub, repo_id, CONFIG, revision, required=True)
    found = {name: _cached(hub, repo_id, name, revision) for name in OPTIONAL}
    missing = [name for name in OPTIONAL if found[name] is None and not _known_absent(hub, repo_id, name, revision)]
    answered = True
    if missing and not hub.constants.HF_HUB_OFFLINE:
        answered = not from_cache or _hub_answers(hub, repo_id, missing[0], revision)
        if not answered:
            _note(f"{repo_id}: config.json read from the Hugging Face cache; {' and '.join(missing)} not cached and the Hub does not answer, "
                  "so the checkpoint's stored size and quantisation file are unknown (connect once, or set HF_HUB_OFFLINE=1 to skip asking)")
        else:
            if from_cache:
                _note(f"{repo_id}: config.json read from the Hugging Face cache; fetching {' and '.join(missing)} from the Hub")
            found.update({name: _cached_or_download(hub, repo_id, name, revision, required=False) for name in missing})
    return HubFiles(
        repo_id=repo_id,
        revision=revision,
        config=_read_json(config_path, repo_id, CONFIG),
        quant_config=_read_json(found[QUANT_CONFIG], repo_id, QUANT_CONFIG) if found[QUANT_CONFIG] else None,
        index=_read_json(found[INDEX], repo_id, INDEX) if found[INDEX] else None,
        commit=_snapshot_commit(config_path),
        folder=config_path.parent,
        answered=answered,
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


def _check_repo_id(hub, repo_id: str) -> None:
    """The Hub's own rules for an id (at most 96 characters, no "--" or ".."), as one line before any lookup."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        reason = str(e).splitlines()[0].rstrip(".")
        raise HubError(f"{quoted(repo_id)} is not a Hugging Face Hub id ({quoted(reason)}); give org/name as on the Hub, a preset (symform models) or a path") from None


def _cached(hub, repo_id: str, filename: str, revision: str | None) -> Path | None:
    cached = hub.try_to_load_from_cache(repo_id, filename, revision=revision)
    return Path(cached) if isinstance(cached, str) else None


def _known_absent(hub, repo_id: str, filename: str, revision: str | None) -> bool:
    """The cache remembers that the repository has no such file."""
    cached = hub.try_to_load_from_cache(repo_id, filename, revision=revision)
    return cached is not None and not isinstance(cached, str)


def _hub_answers(hub, repo_id: str, filename: str, revision: str | None) -> bool:
    """One request for a file's metadata, without retries: whether the Hub answers at all (a 404 is an answer)."""
    from huggingface_hub import errors

    try:
        hub.get_hf_file_metadata(hub.hf_hub_url(repo_id, filename, revision=revision), timeout=hub.constants.HF_HUB_ETAG_TIMEOUT)
    except errors.HfHubHTTPError:
        return True
    except OSError:
        return False
    except Exception as e:
        if type(e).__module__.startswith("httpx"):  # the HTTP client's own connection and timeout errors
            return False
        raise
    return True


def _note(text: str) -> None:
    """What the reading of a Hub id did that the user did not see: on stderr, as the command line's notes."""
    print(f"symform: note: {text}", file=sys.stderr)


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
    budget = HeaderBudget()
    for path in files:
        try:
            check_plain_file(path, "a safetensors file")
            with path.open("rb") as f:
                headers.append(read_header(f.read, str(path), budget))
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
        noted = _kept_dtypes(kept)
        if noted is not None:
            return noted  # else a damaged note: read the headers again
    if hub.constants.HF_HUB_OFFLINE or not files.answered:
        return None
    found = remote_dtypes(files)
    if found is not _UNREACHABLE and kept is not None:
        try:
            kept.write_text(json.dumps({"dtypes": found}), encoding="utf-8")
        except OSError:
            pass  # a read-only assets folder: the headers are read again next time
    return None if found is _UNREACHABLE else found


_UNREACHABLE = object()


def _kept_dtypes(path: Path) -> dict[str, dict[str, int]] | None:
    """An earlier run's note of the headers' dtypes, where it is whole: dtype -> tensors, elements, bytes."""
    try:
        dtypes = read_json(path, "symform's note of a checkpoint's dtypes").get("dtypes")
    except (SymformError, AttributeError):
        return None
    whole = lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**64  # noqa: E731
    if not isinstance(dtypes, dict) or not all(
        isinstance(name, str) and isinstance(counts, dict) and counts.keys() == {"tensors", "elements", "bytes"} and all(map(whole, counts.values()))
        for name, counts in dtypes.items()
    ):
        return None
    return dtypes


def remote_dtypes(files: HubFiles):
    """Dtypes from the headers of the repository's safetensors files, one ranged read of each file's start, never its
    weights; None when it has none, _UNREACHABLE when the Hub cannot be asked (the facts are optional)."""
    hub = _import_hub()
    weight_map = (files.index or {}).get("weight_map")
    if isinstance(weight_map, Mapping) and not all(isinstance(s, str) for s in weight_map.values()):
        raise ConfigError(f"{files.repo_id}: model.safetensors.index.json maps tensors to something other than file names")
    shards = sorted(set(weight_map.values())) if isinstance(weight_map, Mapping) and weight_map else ["model.safetensors"]
    from concurrent.futures import ThreadPoolExecutor

    from huggingface_hub import errors

    revision = files.commit or files.revision
    budget = HeaderBudget()
    try:
        with ThreadPoolExecutor(max_workers=min(_SHARD_READERS, len(shards))) as pool:
            headers = list(pool.map(lambda shard: _remote_header(hub, files.repo_id, shard, revision, budget), shards))
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


def _remote_header(hub, repo_id: str, filename: str, revision: str | None, budget: "HeaderBudget") -> dict[str, Any]:
    """One file's header over HTTP: a range request whose body is read only as far as the header goes."""
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    url = hub.hf_hub_url(repo_id, filename, revision=revision)
    where = f"{repo_id}/{filename}"
    request = {**build_hf_headers(), "Range": f"bytes=0-{8 + MAX_HEADER - 1}"}
    with get_session().stream("GET", url, headers=request, timeout=hub.constants.HF_HUB_DOWNLOAD_TIMEOUT) as response:
        if response.status_code >= 400:
            response.read()  # an error's body is its message
            hf_raise_for_status(response)
        return read_header(_StreamReader(response.iter_bytes()).read, where, budget)


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


class HeaderBudget:
    """The header bytes one checkpoint's files may cost together (HEADER_BYTES): each file's own limit is the
    format's 100 MiB, and two such headers would take half a minute and gigabytes to read."""

    def __init__(self) -> None:
        self._left, self._lock = HEADER_BYTES, threading.Lock()

    def take(self, size: int, where: str) -> None:
        with self._lock:
            if size > self._left:
                raise BudgetError(
                    f"{where}: safetensors headers over {HEADER_BYTES // 2**20} MiB in all, past symform's budget "
                    "(symform.engine.budget.HEADER_BYTES); a real checkpoint's headers are far smaller: remove the file or fix the download"
                )
            self._left -= size


def read_header(read, where: str, budget: HeaderBudget | None = None) -> dict[str, Any]:
    """A safetensors header: a little-endian u64 length, then that many bytes of JSON (the format's specification,
    https://huggingface.co/docs/safetensors#format); ``read(n)`` gives the file's next n bytes. Its length is
    taken from ``budget`` (one checkpoint's) before it is read."""
    start = read(8)
    size = int.from_bytes(start, "little") if len(start) == 8 else 0
    if not 0 < size <= MAX_HEADER:
        raise ConfigError(f"{where}: not a safetensors file (header length {size if len(start) == 8 else 'missing'}); remove it or fix the download")
    (budget or HeaderBudget()).take(size, where)
    text = read(size)
    if len(text) < size:
        raise ConfigError(f"{where}: safetensors header cut short ({len(text)} of {size} bytes); remove it or fix the download")
    try:
        decoded = text.decode("utf-8")
        check_nesting(decoded, where)
        header = json.loads(decoded)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # a number past Python's digit limit is a ValueError
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
    whole = lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**64  # noqa: E731 (the format's u64)
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
    """A cached file through the one bounded JSON reader: a link to /dev/zero, a pipe, a 5,000-digit number or
    deep nesting is one line."""
    try:
        value = read_json(path, f"the cached {filename}", non_finite=filename == CONFIG)  # a config as a local one is read
    except SymformError as e:
        raise HubError(f"{repo_id}: the cached {filename} is unusable ({e}); delete it from the cache and retry") from None
    if not isinstance(value, Mapping):
        raise HubError(f"{repo_id}: {filename} is not a JSON object")
    return dict(value)


def _snapshot_commit(path: Path) -> str | None:
    """The commit a cached file belongs to: its snapshot folder's name."""
    parts = path.parts
    return parts[parts.index("snapshots") + 1] if "snapshots" in parts[:-1] else None
