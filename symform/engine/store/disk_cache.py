"""What symform works out the same way every time, kept between runs: the one module for the disk cache.

A store is one JSON object in the user's cache directory (``$SYMFORM_CACHE_DIR``, else
``$XDG_CACHE_HOME/symform``, else ``~/.cache/symform``; ``SYMFORM_CACHE=off`` turns it
off). Its first line is the SHA-256 of the rest, so a file cut short or damaged is not
read; nor is one that another user owns or could have written (``_trusted``): the cache
is trusted as far as the user's own files are, no further. It holds plain JSON only,
never code or pickles: what it gives back is rebuilt by symform's own code through an
allow-list of node types, within the same budgets as parsing (see ``safe_expr``).

One key discipline: an entry's key is ``Store.key(what, *inputs)``, the hash of the name of
what was worked out and of every input it was worked out from (a file's text, an expression's
text and what each name in it stands for); the store itself is named by ``code_fingerprint()``,
a hash of symform's code and sympy's release, so that a value never outlives the code that
made it. Anything that goes wrong (a missing, unreadable, corrupt, foreign or unwritable
cache) falls back silently to working the value out again: the cache only ever saves time.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import stat
import sys
from functools import cache
from pathlib import Path
from typing import Any

FORMAT = 1
MAX_ENTRIES = 50_000  # past this a store starts afresh rather than grow without bound
MAX_BYTES = 32 * 2**20  # a store larger than this is not read (symform's own are well under 1 MiB)


def enabled() -> bool:
    """Whether SYMFORM_CACHE leaves the cache on: cache_dir's first test alone, for callers that ask before
    every expression they parse (the directory itself is looked up once per store)."""
    return os.environ.get("SYMFORM_CACHE", "").lower() not in ("off", "0", "no", "false")


def cache_dir() -> Path | None:
    """The cache directory, always an absolute path; None where the cache is off or no such path is given."""
    return _where()[0]


def _where() -> tuple[Path | None, str]:
    """The cache directory and how it was chosen (or why there is none)."""
    if not enabled():
        return None, "off (SYMFORM_CACHE)"
    try:
        chosen = os.environ.get("SYMFORM_CACHE_DIR")
        if chosen:  # a relative path would put the cache wherever the command happens to run
            path = Path(chosen).expanduser()
            return (path, "SYMFORM_CACHE_DIR") if path.is_absolute() else (None, f"off: SYMFORM_CACHE_DIR={chosen!r} is not an absolute path")
        base = os.environ.get("XDG_CACHE_HOME")
        if base and Path(base).is_absolute():  # the XDG specification ignores a relative one
            return Path(base) / "symform", "XDG_CACHE_HOME"
        return Path.home() / ".cache" / "symform", "the home directory"
    except RuntimeError:  # no home directory to be found: nothing kept
        return None, "off: no home directory"


def digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


@cache
def code_fingerprint() -> str:
    """A hash of symform's code and sympy's release: what every kept value was worked out by, besides the
    inputs its key names (any edit, or another sympy, names other stores)."""
    import importlib.util

    package = Path(__file__).resolve().parents[2]  # symform/engine/store/disk_cache.py
    spec = importlib.util.find_spec("sympy")  # its release file, found without importing sympy
    release = (Path(spec.origin).with_name("release.py"),) if spec is not None and spec.origin else ()
    return fingerprint(package, *release)


@cache
def fingerprint(*roots: Path) -> str:
    """A hash of every source and data file (.py, .toml, .json) under ``roots`` (a file among them is hashed
    itself): what a result worked out from symform's code and bundled files depends on. Any edit to one of
    them, or a file added or removed, gives another fingerprint."""
    h = hashlib.sha256()
    for root in roots:
        for path in sorted(_files_under(root)):
            h.update(f"{path}\0".encode())
            try:
                h.update(path.read_bytes())
            except OSError:
                h.update(b"unreadable")
            h.update(b"\0")
    return h.hexdigest()


def _files_under(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    found = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [d for d in subfolders if d != "__pycache__"]
        found += [Path(folder) / n for n in names if n.endswith((".py", ".toml", ".json"))]
    return found


# what Store names its files, and its temporary files (mkstemp's eight random characters): all clear() removes
_STORE_FILE = re.compile(r"[a-z]+-[0-9a-f]{16}\.json")
_TEMPORARY = re.compile(r"\.[a-z]+-[a-z0-9_]{8}\.tmp")


class Store:
    """One JSON object of ``name``'s entries, read on first use and written back at exit when it grew."""

    def __init__(self, name: str, *, max_bytes: int = MAX_BYTES):
        self.kind = name
        self.max_bytes = min(max_bytes, MAX_BYTES)  # every run reads the whole file: past this it starts afresh
        self._entries: dict[str, Any] | None = None
        self._added: dict[str, Any] = {}
        self._where: Path | None = None  # the file read, and written back: the directory as it was at first use

    @property
    def name(self) -> str:
        """The file's name: the kind of entry, and the format, Python's version and code_fingerprint()."""
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        return f"{self.kind}-{digest(str(FORMAT), version, code_fingerprint())[:16]}.json"

    @staticmethod
    def key(what: str, *inputs: str | bytes) -> str:
        """The one way an entry's key is made: what was worked out, and every input it was worked out from."""
        return digest(what, *inputs)

    def _path(self) -> Path | None:
        self._load()
        return self._where

    def _load(self) -> dict[str, Any]:
        if self._entries is None:
            where = cache_dir()
            self._where = where / self.name if where is not None else None
            self._entries = _read(self._where)
        return self._entries

    def get(self, key: str) -> Any:
        return self._load().get(key)

    def put(self, key: str, value: Any) -> None:
        entries = self._load()
        if key in entries or self._path() is None:
            return
        entries[key] = value
        if not self._added:
            atexit.register(self.save)
        self._added[key] = value

    def save(self) -> None:
        """Write what this process added, merged with what the file holds now (another process may have added too)."""
        path, added = self._path(), self._added
        self._added = {}
        if path is None or not added:
            return
        entries = _read(path)
        if len(entries) + len(added) > MAX_ENTRIES:
            entries = {}
        entries.update(added)
        temporary = None
        try:
            body = json.dumps(entries, separators=(",", ":"), allow_nan=False)
            if len(body) > self.max_bytes:  # what this run added is kept; the rest is worked out again when asked for
                body = json.dumps(added, separators=(",", ":"), allow_nan=False)
            if len(body) > self.max_bytes:
                return
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # a new file of a name no one can guess, created exclusively (0600): a link planted in a shared
            # directory is never opened, and os.replace swaps the store's name itself, never a link's target
            import tempfile  # only a run that adds entries writes (tempfile imports random, shutil and the compressors)

            handle, temporary = tempfile.mkstemp(prefix=f".{self.kind}-", suffix=".tmp", dir=path.parent)
            with open(handle, "w", encoding="utf-8") as out:
                out.write(f"{digest(body)}\n{body}")
            os.replace(temporary, path)  # whole or not at all: a reader never sees half a file
        except (OSError, ValueError, TypeError, RecursionError):
            try:
                if temporary is not None:
                    os.unlink(temporary)
            except OSError:
                pass


def plain_json(value: Any) -> bool:
    """Whether JSON gives ``value`` back equal and of the same types (no NaN, tuples or datetimes)."""
    try:
        return _same(json.loads(json.dumps(value, allow_nan=False)), value)
    except (ValueError, TypeError, RecursionError):
        return False


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _trusted(path: Path) -> bool:
    """A store is read only when it is a plain file of at most MAX_BYTES that no one but this user could
    have written (owned by them, not writable by group or others): one left by someone else in a shared
    cache directory is ignored."""
    info = path.stat()
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
        return False
    if hasattr(os, "getuid") and (info.st_uid != os.getuid() or info.st_mode & 0o022):
        return False
    return True


def _read(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        if not _trusted(path):
            return {}
        text = path.read_text(encoding="utf-8")
        check, _, body = text.partition("\n")
        if check != digest(body):
            return {}
        entries = json.loads(body)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return {}
    return entries if isinstance(entries, dict) else {}


# --- symform cache info / clear -------------------------------------------------------------------


def info() -> dict[str, Any]:
    """Where the cache is, why, and each of symform's store files in it: its size and entries, and whether
    this version of symform reads it (a store named by another version's fingerprint is never read)."""
    where, chosen = _where()
    return {"directory": str(where) if where is not None else None, "chosen_by": chosen, **info_at(where)}


def info_at(where: Path | None) -> dict[str, Any]:
    """The store files in directory ``where`` (see info)."""
    current = {Store(kind).name for kind in STORES}
    files = []
    for path in _store_files(where):
        try:
            size = path.stat().st_size
        except OSError:
            continue
        entries = len(_read(path)) if path.name in current else None
        files.append({"file": path.name, "bytes": size, "entries": entries, "current": path.name in current})
    return {"files": files, "bytes": sum(f["bytes"] for f in files)}


def clear() -> list[str]:
    """Remove symform's store files (and temporary files it left) from the cache directory, nothing else:
    only plain files whose names symform gives its stores, never a link or what it points to."""
    removed = []
    for path in _store_files(_where()[0], temporary=True):
        try:
            os.unlink(path)
            removed.append(path.name)
        except OSError:
            pass
    return removed


def _store_files(where: Path | None, *, temporary: bool = False) -> list[Path]:
    if where is None:
        return []
    try:
        names = sorted(os.listdir(where))
    except OSError:
        return []
    found = []
    for name in names:
        ours = _STORE_FILE.fullmatch(name) or (temporary and _TEMPORARY.fullmatch(name))
        if ours and stat.S_ISREG(os.lstat(where / name).st_mode):
            found.append(where / name)
    return found


STORES = ("tables", "expressions")  # every store symform keeps: data.py's tables, safe_expr's expressions
