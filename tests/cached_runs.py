"""Two runs of one command in fresh interpreters that share a cache directory: what the first keeps, the
second reads (symform.engine.store.disk_cache and the stores built on it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_CODE = """
import importlib, json, sys
from symform.interface.cli.cli import main
module = importlib.import_module({module!r})
calls = []
original = getattr(module, {function!r})
setattr(module, {function!r}, lambda *a, **k: calls.append(repr(a[1])) or original(*a, **k))
status = main({argv!r})
print(json.dumps({{"status": status, "calls": calls}}), file=sys.stderr)
"""


def two_runs(cache: Path, counted: str, argv: list[str]) -> list[dict]:
    """Each run's exit status, what it printed, and the second argument of every call it made to ``counted``
    ("module:function", replaced in the module before the command runs)."""
    module, function = counted.split(":")
    env = {**os.environ, "SYMFORM_CACHE_DIR": str(cache)}
    env.pop("SYMFORM_CACHE", None)
    code = _CODE.format(module=module, function=function, argv=argv)
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300) for _ in range(2)]
    found = []
    for run in runs:
        assert run.returncode == 0, run.stderr
        found.append({**json.loads(run.stderr.strip().splitlines()[-1]), "printed": run.stdout})
    return found
