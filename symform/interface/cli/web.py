"""``symform web``: a local page and a JSON API over the analyses the command line runs.

Every API route runs the CLI itself: the query becomes an argv (``/api/memory?model=qwen3-32b&train=1&batch=1``
is ``symform memory qwen3-32b --train --batch=1 --json``), the CLI's parser checks it and its command prints the
JSON the route answers with. So the page and the command line cannot disagree, and a bad value gets the CLI's own
one-line message (HTTP 400, ``{"error": ...}``).

The server reads no file the request names: a model given as a config.json or a TOML declaration is uploaded
(the request body), written into a private temporary folder for that one request and removed after it. Hub ids
resolve from the local Hugging Face cache only (HF_HUB_OFFLINE). It binds to loopback unless told otherwise.
Starlette and uvicorn are an optional extra, web (``pip install starlette uvicorn``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import sys
import tempfile
import threading
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from functools import cache
from pathlib import Path
from typing import Iterator

from ...engine.errors import SymformError

INSTALL = "pip install starlette uvicorn"  # the web extra's packages: works from a clone and from an index alike
STATIC = Path(__file__).with_name("web_static")
MAX_BODY_BYTES = 1 << 20  # an uploaded config.json or TOML declaration: a few kilobytes; a megabyte is generous
ERROR_PREFIX = "symform: error: "

# The commands the API answers, and the positional arguments each takes, in the CLI's order.
POSITIONALS: dict[str, tuple[str, ...]] = {
    "params": ("model",), "flops": ("model",), "memory": ("model",), "fit": ("model",), "time": ("model",),
    "roofline": ("model",), "plan": ("model",), "latex": ("quantity", "model"), "derive": ("quantity", "model"),
    "models": (), "hardware": ("name",),
}  # fmt: skip

# Options the API refuses, with why: they write files, print no JSON, or are added by the API itself.
REFUSED = {
    "plot": "writes a chart file on the server; the page draws its own charts",
    "out": "writes files on the server",
    "formulas": "reads its own list of models; ask /api/latex once per model",
    "help": "prints usage, not JSON; see symform COMMAND --help",
    "h": "prints usage, not JSON; see symform COMMAND --help",
    "version": "prints the version, not JSON",
    "json": "is always given: every answer is the command's --json",
    "standalone": "prints a whole .tex document, not JSON; run symform latex --standalone",
}

UPLOAD_SUFFIXES = (".json", ".toml")


class WebError(SymformError):
    """A request the API refuses before the CLI sees it; ``status`` is its HTTP status."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class WebMissing(SymformError):
    """Starlette or uvicorn is not installed."""


# --- the command line's arguments ----------------------------------------------------------------


def web_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_port, default=8000, help="port to listen on (default 8000)")


def _port(text: str) -> int:
    from ..options.cli_args import non_negative_int

    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)")
    return value


def web_command(args: argparse.Namespace) -> str:
    try:
        import uvicorn
    except ImportError:
        raise WebMissing(f"symform web needs Starlette and uvicorn: {INSTALL}") from None
    app = create_app()
    print(f"symform web: http://{_url_host(args.host)}:{args.port}/ (Ctrl-C stops it)", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return "symform web: stopped"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


# --- a request as an argv, and the CLI's answer --------------------------------------------------


def _verb_parser(verb: str) -> argparse.ArgumentParser:
    """The CLI's own parser of one verb."""
    from .cli import build_parser

    parser = build_parser(verb)
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[verb]


@cache
def _option_kinds(verb: str) -> tuple[frozenset[str], frozenset[str]]:
    """The verb's option strings: those taking a value, and the flags (taking none)."""
    valued, flags = set(), set()
    for action in _verb_parser(verb)._actions:
        (flags if action.nargs == 0 else valued).update(s for s in action.option_strings if s.startswith("--"))
    return frozenset(valued), frozenset(flags)


def argv_for(verb: str, query: list[tuple[str, str]], *, model_path: str | None = None) -> list[str]:
    """The CLI's argv for a request: positional arguments by name, ``key=value`` as ``--key=value``, a flag as
    ``key=1`` (``key=0`` leaves it out, or gives ``--no-key`` where the option has that form: its default may be on),
    a key given twice as the option given twice (``set``, ``convention``)."""
    _known(verb)
    valued, flags = _option_kinds(verb)
    positional: dict[str, str] = {}
    options: list[str] = []
    for key, value in query:
        if key == "upload":
            continue
        if key in REFUSED:
            raise WebError(f"{key}: {REFUSED[key]}")
        if key in POSITIONALS[verb]:
            if key in positional:
                raise WebError(f"{key} is given more than once; give it once")
            positional[key] = _checked_value(key, value)
            continue
        option = "--" + key.replace("_", "-")
        if option in flags:
            if value.lower() in ("", "1", "true", "on", "yes"):
                options.append(option)
            elif value.lower() not in ("0", "false", "off", "no"):
                raise WebError(f"{key} is a switch: give {key}=1 or {key}=0, not {value!r}")
            elif "--no-" + option[2:] in flags:
                options.append("--no-" + option[2:])
        elif option in valued:
            options.append(f"{option}={_checked_value(key, value)}")
        else:
            options.append(option)  # unknown: the CLI's parser names it and the verb's --help
    if model_path is not None:
        positional["model"] = model_path
    return [verb, *(positional[name] for name in POSITIONALS[verb] if name in positional), *options, "--json"]


def _known(verb: str) -> None:
    if verb not in POSITIONALS:
        raise WebError(f"no command {verb!r}; the API answers {', '.join(POSITIONALS)}", 404)


def _checked_value(key: str, value: str) -> str:
    """Refuses what would read the server's own files (a path) or be read as an option (a leading dash)."""
    if value.startswith("-"):
        raise WebError(f"{key}: {value!r} starts with '-'; give a name or a number")
    if value.startswith(("/", "~", "\\")) or value.endswith(UPLOAD_SUFFIXES) or _exists(value):
        raise WebError(f"{key}: {value!r} names a file; the web API reads no files from the server's disk: upload a config.json or a .toml declaration instead")
    return value


def _exists(value: str) -> bool:
    try:
        return bool(value) and Path(value).exists()
    except (OSError, ValueError):  # a name too long, a NUL byte: no file of that name either
        return False


_CLI_LOCK = threading.Lock()  # the CLI prints to sys.stdout: one command at a time


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """The CLI run on ``argv`` in this process: exit status, what it printed, what it reported."""
    from .cli import main

    out, err = io.StringIO(), io.StringIO()
    with _CLI_LOCK, _hub_offline(), redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@contextmanager
def _hub_offline() -> Iterator[None]:
    """Hub ids from the local Hugging Face cache only, for this command: the server never reaches the network."""
    before = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"  # read when huggingface_hub is first imported
    constants = sys.modules.get("huggingface_hub.constants")
    kept = getattr(constants, "HF_HUB_OFFLINE", None)
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = before
        if constants is not None:
            constants.HF_HUB_OFFLINE = kept


def error_line(stderr: str) -> str:
    """The CLI's one-line message, without its ``symform: error:`` prefix."""
    lines = [line for line in stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    return (lines[-1] if lines else stderr.strip().splitlines()[-1] if stderr.strip() else "the command failed").removeprefix(ERROR_PREFIX)


def notes(stderr: str) -> list[str]:
    return [line.removeprefix("symform: note: ") for line in stderr.splitlines() if line.startswith("symform: note: ")]


@contextmanager
def uploaded(name: str | None, body: bytes) -> Iterator[tuple[str | None, str | None]]:
    """The uploaded model file in a private folder of its own while the command runs: its path as the CLI is
    given it, and the folder's prefix to take out of what the CLI prints (messages name the file as uploaded)."""
    if name is None:
        yield None, None
        return
    base = _upload_name(name)
    folder = Path(tempfile.mkdtemp(prefix="symform-web-"))
    try:
        # a config.json is named after its folder (as on the command line): the folder is "uploaded"
        target = folder / "uploaded" / base
        target.parent.mkdir()
        target.write_bytes(body)
        yield str(target), f"{folder}{os.sep}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _upload_name(name: str) -> str:
    base = re.sub(r"[^\w.\-]", "_", name.replace("\\", "/").rsplit("/", 1)[-1]).lstrip(".")
    if not base.endswith(UPLOAD_SUFFIXES) or base in UPLOAD_SUFFIXES:
        raise WebError(f"upload: {name!r} is neither a config.json nor a .toml declaration; upload one of those")
    return base


def answer(verb: str, query: list[tuple[str, str]], body: bytes = b"") -> tuple[int, str, list[str]]:
    """HTTP status, JSON text and the CLI's notes for one request."""
    _known(verb)
    upload = next((value for key, value in query if key == "upload"), None)
    if upload is None and body:
        raise WebError("a request body is an uploaded model: name it with upload=FILE (config.json or .toml)")
    if upload is not None and "model" not in POSITIONALS[verb]:
        raise WebError(f"{verb} takes no model: upload is for the commands that do")
    if upload is not None and not body:
        raise WebError(f"upload={upload}: the request has no body; send the file's contents")
    with uploaded(upload, body) as (path, folder):
        argv = argv_for(verb, query, model_path=path)
        try:
            code, out, err = run_cli(argv)
        except Exception as e:  # a bug, not bad input: one line, and the server goes on answering
            return 500, json.dumps({"error": f"internal error in symform {verb}: {type(e).__name__}: {e}"}), []
        if folder is not None:
            out, err = out.replace(folder, ""), err.replace(folder, "")
    if code != 0:
        return 400, json.dumps({"error": error_line(err)}), []
    if not _is_json(out):  # an option that makes the command print text whatever --json says: a bug to report, not a page to break
        return 500, json.dumps({"error": f"symform {verb} printed no JSON for these options; report it with the query"}), []
    return 200, out.strip(), notes(err)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@cache
def options() -> dict[str, object]:
    """The choices the page offers, read from the CLI's parsers (the same lists --help shows)."""

    def choices(verb: str, option: str) -> list[str]:
        action = next(a for a in _verb_parser(verb)._actions if option in a.option_strings)
        return [str(c) for c in action.choices]

    return {
        "precision": choices("memory", "--precision"),
        "weight_format": choices("time", "--weight-format"),
        "recompute": choices("memory", "--recompute"),
        "zero": choices("memory", "--zero"),
        "framework": choices("memory", "--framework"),
        "quantity": _quantities(),
    }


def _quantities() -> list[str]:
    from ...engine.graph.model import quantity_names

    return [q.replace("_", "-") for q in quantity_names()]


# --- the application -------------------------------------------------------------------------------


def create_app():
    """The Starlette application: the page, its static files, and /api/COMMAND."""
    try:
        from starlette.applications import Starlette
        from starlette.concurrency import run_in_threadpool
        from starlette.requests import Request
        from starlette.responses import FileResponse, JSONResponse, Response
        from starlette.routing import Mount, Route
        from starlette.staticfiles import StaticFiles
    except ImportError:
        raise WebMissing(f"symform web needs Starlette and uvicorn: {INSTALL}") from None

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    async def api_options(request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(options))

    async def api(request: Request) -> Response:
        try:
            body = await _body(request)
            status, text, found = await run_in_threadpool(answer, request.path_params["verb"], list(request.query_params.multi_items()), body)
        except WebError as e:
            return JSONResponse({"error": str(e)}, status_code=e.status)
        headers = {"X-Symform-Notes": json.dumps(found)} if found else None  # json.dumps: ASCII, as headers must be
        return Response(text, status_code=status, media_type="application/json", headers=headers)

    routes = [
        Route("/", page),
        Route("/api/options", api_options),
        Route("/api/{verb}", api, methods=["GET", "POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes)


async def _body(request) -> bytes:
    """The request body, refused (413) past MAX_BODY_BYTES whether or not it declared its length."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise WebError(f"the request body is over {MAX_BODY_BYTES:,} bytes; upload a config.json or .toml declaration, not more", 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise WebError(f"the request body is over {MAX_BODY_BYTES:,} bytes; upload a config.json or .toml declaration, not more", 413)
        chunks.append(chunk)
    return b"".join(chunks)
