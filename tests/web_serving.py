"""`symform web` as its users start it: a child process on a free loopback port, stopped after the test."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(*, env: dict[str, str] | None = None, prefix: str = "") -> Iterator[str]:
    """The base URL of a running `symform web`; ``prefix``: Python run before the CLI (a network guard)."""
    port = free_port()
    code = prefix + "\nimport sys\nfrom symform.interface.cli.cli import main\nsys.exit(main(sys.argv[1:]))"
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    child = subprocess.Popen([sys.executable, "-c", code, "web", "--port", str(port)], env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(base, child)
        yield base
    finally:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        for stream in (child.stdout, child.stderr):
            stream.close()


def _wait_until_up(base: str, child: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(f"symform web exited with {child.returncode}: {child.stderr.read()}")
        try:
            with urllib.request.urlopen(base + "/api/options", timeout=2):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    raise RuntimeError("symform web did not answer within 30 s")


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
