"""Where the bundled declarations and device data live.

In an installed wheel they sit inside the package (``symform/_data``). In a
development checkout the same files are read from the repository's top level,
which is recognised by its ``pyproject.toml``.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from ..budget import check_nesting, read_bounded
from .disk_cache import Store, plain_json
from ..errors import ConfigError, DeclarationError, FileBudgetError

_TABLES = Store("tables")  # a bundled TOML file's text -> its table

_DATA_DIRS = ("formulas", "hardware")


@cache
def data_root() -> Path:
    packaged = Path(__file__).resolve().parents[2] / "_data"  # symform/engine/store/data.py; importlib.resources costs more to import
    if (packaged / "formulas").is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[3]  # symform/engine/store/data.py
    if (checkout / "pyproject.toml").is_file() and (checkout / "formulas").is_dir():
        return checkout
    raise DeclarationError("symform's bundled formulas are missing: reinstall symform (pip install --force-reinstall symform)")


@cache
def version() -> str:
    """symform's version: a checkout's ``pyproject.toml`` when running from one, else the installed metadata."""
    checkout = Path(__file__).resolve().parents[3] / "pyproject.toml"
    if checkout.is_file():  # the code running is this checkout's, whatever version pip recorded elsewhere
        import tomllib

        try:
            project = tomllib.loads(checkout.read_text(encoding="utf-8")).get("project", {})
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            project = {}
        if project.get("name") == "symform" and isinstance(project.get("version"), str):
            return project["version"]
    from importlib import metadata  # only here: importing it costs more than the rest of start-up needs

    try:
        return metadata.version("symform")
    except metadata.PackageNotFoundError:
        return "unknown (neither installed nor a checkout)"


def formulas_dir() -> Path:
    return data_root() / "formulas"


def accountings_table() -> dict[str, Any]:
    """formulas/accountings.toml as written: the named convention sets (engine.model.accountings validates them;
    their names alone are what the command line offers, read without building the engine)."""
    return read_toml(formulas_dir() / "accountings.toml")


def bundled_files() -> list[Path]:
    """Every data file shipped with symform, relative paths sorted."""
    root = data_root()
    return sorted(
        p.relative_to(root)
        for d in _DATA_DIRS
        if (root / d).is_dir()
        for p in (root / d).rglob("*")
        if p.is_file() and p.suffix in {".toml", ".json"}
    )


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file as a dict: at most FILE_BYTES, nested at most NESTING_DEPTH, every failure one line.
    A bundled file's table is kept in the user's cache as JSON (which reads many times faster), by the
    hash of the file's text."""
    text = read_text(path, "a TOML file")
    check_nesting(text, path)
    bundled = _is_bundled(path)
    if bundled:
        key = Store.key("tomllib.loads", text)
        kept = _TABLES.get(key)
        if isinstance(kept, str):  # each caller gets tables of its own, as from tomllib
            try:
                table = json.loads(kept)
            except ValueError:
                table = None
            if isinstance(table, dict):
                return table
    import tomllib  # only where a table is parsed: a kept one is JSON

    try:
        table = tomllib.loads(text)
        if bundled and plain_json(table):
            _TABLES.put(key, json.dumps(table, separators=(",", ":")))
        return table
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML ({e}); fix the syntax") from None
    except RecursionError:
        raise FileBudgetError(f"{path}: nested too deep to read; flatten the file") from None
    except ValueError as e:  # an integer past Python's digit limit
        raise ConfigError(f"{path}: {e}; fix the file") from None


def _is_bundled(path: Path) -> bool:
    try:
        return Path(path).resolve().is_relative_to(data_root())
    except (OSError, DeclarationError, ValueError):
        return False


def read_json(path: Path, what: str = "a UTF-8 JSON file", *, non_finite: bool = False) -> Any:
    """A JSON file as read from a user or the Hub cache: at most FILE_BYTES, nested at most NESTING_DEPTH,
    numbers of at most Python's digit limit, finite unless ``non_finite`` (a config.json may hold NaN and
    Infinity as Python's json and transformers read them: the fields symform reads refuse them); every
    failure one line. (A link to /dev/zero, a pipe, a 5,000-digit number and 10,000 nested lists end here.)"""
    text = read_text(path, what)
    check_nesting(text, path)
    try:
        return json.loads(text, **({} if non_finite else {"parse_constant": _no_constant}))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); fix the file") from None
    except ValueError as e:  # NaN and Infinity, or an integer past Python's digit limit
        raise ConfigError(f"{path}: {e}; fix the file") from None
    except RecursionError:
        raise FileBudgetError(f"{path}: nested too deep to read; flatten the file") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON (sizes are finite numbers)")


def read_text(path: Path, what: str) -> str:
    """A UTF-8 text file, read with a bound on its size; filesystem errors as one line."""
    try:
        data = read_bounded(path, what)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; check the path") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory; give {what}") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror or e.__class__.__name__}); give a readable file") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; give {what}") from None
