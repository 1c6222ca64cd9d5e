"""Start-up pays only for what a command uses: listing verbs or presets builds no expression, so loads no sympy.

Each command runs in a fresh interpreter (an import already made by the test process would hide one),
then the child reports which of the heavy libraries it loaded. No timing is asserted here; the
seconds are measured in benchmarks/bench_startup.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("sympy", "networkx", "pydantic")

_CHILD = """
import contextlib, io, json, sys
from symform.interface.cli.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "out": out.getvalue(), "loaded": [m for m in %r if m in sys.modules]}))
""" % (HEAVY,)


def _run_fresh(*argv: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("argv", [["--help"], ["--version"]])
def test_help_loads_none_of_the_heavy_libraries(argv):
    child = _run_fresh(*argv)
    assert child["code"] == 0 and ("usage: symform" in child["out"] or child["out"].startswith("symform "))
    assert child["loaded"] == [], f"symform {' '.join(argv)} imported {child['loaded']}"


def test_top_level_help_lists_every_verb():
    child = _run_fresh("--help")
    for verb in ("params", "flops", "derive", "plan", "memory", "sweep", "models", "hardware"):
        assert verb in child["out"]


@pytest.mark.parametrize("argv", [["models"], ["models", "--json"]])
def test_listing_the_models_builds_no_expression(argv):
    child = _run_fresh(*argv)
    assert child["code"] == 0 and "qwen3-32b" in child["out"]
    assert "sympy" not in child["loaded"] and "networkx" not in child["loaded"], f"symform models imported {child['loaded']}"


def test_importing_symform_loads_no_sympy_until_a_name_needs_it():
    code = "import sys, symform\nbefore = 'sympy' in sys.modules\nsymform.Model\nprint(before, 'sympy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "True"], done.stderr


def test_the_lazy_names_are_the_engines_objects():
    import symform
    from symform.engine.graph import derive, model
    from symform.engine.language import vocabulary

    assert symform.load == model.Model.load and symform.Model is model.Model
    assert symform.derive is derive.derive and symform.vocabulary is vocabulary.default_vocabulary
    assert set(symform.__all__) <= set(dir(symform))


def test_a_model_command_imports_neither_networkx_nor_pydantic():
    # the component graph is symform's own (symform.engine.digraph): networkx costs a third of import sympy; the
    # declaration, family and symbol tables are checked by symform.engine.language.schema: pydantic costs another third
    child = _run_fresh("params", "qwen3-32b", "--json")
    assert child["code"] == 0 and child["loaded"] == ["sympy"], f"symform params imported {child['loaded']}"


@pytest.mark.parametrize("argv", [
    ["plan", "qwen3-0.6b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "32", "--seq", "1024", "--flash"],
    ["time", "qwen3-0.6b", "--gpu", "h100-sxm", "--train", "--global-batch", "32", "--seq", "1024", "--framework", "megatron", "--offload", "optimizer=nvme", "--nvme", "samsung-pm1743"],
    ["memory", "qwen3-0.6b", "--train", "--batch", "1", "--seq", "512", "--framework", "torchtitan"],
])
def test_a_plan_time_or_training_memory_command_imports_no_pydantic(argv):
    # the hardware, recipe, framework, weight-format and time-fact tables are schema dataclasses too: pydantic and
    # its model classes cost about a third of import sympy on every such command
    child = _run_fresh(*argv)
    assert child["code"] == 0 and "pydantic" not in child["loaded"], f"symform {argv[0]} imported {child['loaded']}"


def test_the_version_is_read_only_when_asked_for():
    """Building the command line reads no pyproject.toml and imports no importlib.metadata (an installed copy's
    version lookup): --version alone pays for it."""
    done = subprocess.run([sys.executable, "-c", "import sys; from symform.interface.cli.cli import build_parser; build_parser('params');"
                           " print(sorted(m for m in ('tomllib', 'importlib.metadata') if m in sys.modules))"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
