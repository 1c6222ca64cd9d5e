"""Checks the test modules share: running the CLI in-process, and one-line errors."""

from __future__ import annotations

import json

import pytest

from symform import SymformError
from symform.interface.cli.cli import main


def run(capsys, *argv):
    """The CLI's exit status, stdout and stderr."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def one_line_error(error_type, call, *words):
    """``call()`` raises ``error_type``, a SymformError with a one-line message naming each of ``words``."""
    with pytest.raises(error_type) as caught:
        call()
    message = str(caught.value)
    assert isinstance(caught.value, SymformError) and "\n" not in message
    for word in words:
        assert word in message, message


def preset_dict(name: str) -> dict:
    """A preset's config.json as plain JSON (not through symform's loader)."""
    from symform.engine.store.data import formulas_dir
    from symform.engine.language.families import presets

    return json.loads((formulas_dir() / "presets" / presets()[name].file).read_text(encoding="utf-8"))
