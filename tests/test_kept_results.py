"""Results kept between runs (symform.interface.cli, disk_cache.fingerprint): a command run again prints what
it printed, without building the model, and never a number an edit to symform's files or to the user's
own config has made stale. Each run is a fresh interpreter, as a user's is; the expected output is always
that of a run with nothing kept (SYMFORM_CACHE=off)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from symform.engine import disk_cache

ROOT = Path(__file__).resolve().parent.parent

# as `symform ...` run from a shell (results kept), then which heavy libraries the run loaded ("built":
# whether it built the declarations' library, which every model is made of)
_CHILD = """
import json, sys
from symform.interface.cli import main
code = main(sys.argv[1:], keep_results=True)
loaded = [m for m in ("sympy", "networkx", "pydantic") if m in sys.modules]
declarations = sys.modules.get("symform.engine.declarations")
if declarations is not None and declarations.default_library.cache_info().currsize:
    loaded.append("built")
print(json.dumps({"code": code, "loaded": loaded}))
"""


def _symform(*argv: str, cache: Path, root: Path = ROOT, off: bool = False) -> tuple[str, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(root), "SYMFORM_CACHE_DIR": str(cache)}
    env.pop("SYMFORM_CACHE", None)
    if off:
        env["SYMFORM_CACHE"] = "off"
    done = subprocess.run([sys.executable, "-c", _CHILD, *argv], env=env, cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    *printed, report = done.stdout.splitlines()
    child = json.loads(report)
    assert child["code"] == 0
    return "\n".join(printed) + done.stderr, child["loaded"]


def _checkout(tmp_path: Path) -> Path:
    """A copy of symform's code and bundled files, for editing."""
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT / "symform", copy / "symform", ignore=shutil.ignore_patterns("__pycache__"))
    for folder in ("formulas", "hardware"):
        shutil.copytree(ROOT / folder, copy / folder)
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


@pytest.mark.parametrize("argv", [["params", "qwen3-0.6b"], ["params", "Qwen/Qwen3-0.6B", "--json", "--set", "n_layers=3"]])
def test_a_command_run_again_prints_the_same_without_building_the_model(tmp_path, argv):
    fresh, _ = _symform(*argv, cache=tmp_path, off=True)
    first, loaded_first = _symform(*argv, cache=tmp_path)
    again, loaded_again = _symform(*argv, cache=tmp_path)
    assert first == fresh and again == fresh
    assert "sympy" in loaded_first and "built" in loaded_first and loaded_again == []
    assert list(tmp_path.glob("results-*.json"))


@pytest.mark.parametrize("argv", [["flops", "qwen3-0.6b", "--batch", "2", "--seq", "64", "--accounting", "eager"], ["flops", "gemma-3-1b", "--batch", "1", "--seq", "16", "--json", "--depth", "2"]])
def test_flops_run_again_prints_the_same_without_building_the_model(tmp_path, argv):
    fresh, _ = _symform(*argv, cache=tmp_path, off=True)
    first, loaded_first = _symform(*argv, cache=tmp_path)
    again, loaded_again = _symform(*argv, cache=tmp_path)
    assert first == fresh and again == fresh
    assert "built" in loaded_first and "built" not in loaded_again  # its options' help still loads the fine-tuning analysis


def test_nothing_is_kept_when_the_cache_is_off(tmp_path):
    _symform("params", "qwen3-0.6b", cache=tmp_path, off=True)
    _, loaded = _symform("params", "qwen3-0.6b", cache=tmp_path, off=True)
    assert "sympy" in loaded and not list(tmp_path.glob("results-*"))


def test_an_edited_bundled_file_or_source_is_not_answered_from_before(tmp_path):
    copy, cache = _checkout(tmp_path), tmp_path / "cache"
    before, _ = _symform("params", "qwen3-0.6b", cache=cache, root=copy)
    preset = copy / "formulas" / "presets" / "qwen3-0.6b.json"
    preset.write_text(preset.read_text().replace('"num_hidden_layers": 28', '"num_hidden_layers": 2'))
    edited, loaded = _symform("params", "qwen3-0.6b", cache=cache, root=copy)
    assert "sympy" in loaded and edited != before
    assert edited == _symform("params", "qwen3-0.6b", cache=cache, root=copy, off=True)[0]
    with open(copy / "symform" / "engine" / "model.py", "a") as source:  # any change to the code: another store
        source.write("\n# edited\n")
    _, loaded = _symform("params", "qwen3-0.6b", cache=cache, root=copy)
    assert "sympy" in loaded and len(list(cache.glob("results-*.json"))) == 3


def test_a_config_file_is_read_on_every_run(tmp_path):
    config, cache = tmp_path / "config.json", tmp_path / "cache"
    config.write_text((ROOT / "formulas" / "presets" / "qwen3-0.6b.json").read_text())
    before, _ = _symform("params", str(config), cache=cache)
    config.write_text(config.read_text().replace('"num_hidden_layers": 28', '"num_hidden_layers": 2'))
    edited, loaded = _symform("params", str(config), cache=cache)
    assert "sympy" in loaded and edited != before
    assert edited == _symform("params", str(config), cache=cache, off=True)[0]
    assert not list(cache.glob("results-*.json"))


def test_the_fingerprint_follows_every_source_and_data_file(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "data.toml").write_text("a = 1\n")
    seen = set()

    def now() -> str:
        disk_cache.fingerprint.cache_clear()
        return disk_cache.fingerprint(tmp_path / "pkg", tmp_path / "data.toml")

    seen.add(now())
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    seen.add(now())
    (tmp_path / "data.toml").write_text("a = 2\n")
    seen.add(now())
    (tmp_path / "pkg" / "b.json").write_text("{}")
    seen.add(now())
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"compiled")  # not a source: the same fingerprint
    (tmp_path / "pkg" / "notes.txt").write_text("not read")
    last = now()
    disk_cache.fingerprint.cache_clear()
    assert len(seen) == 4 and last in seen


def test_a_fine_tuning_setup_is_worked_out_on_every_run(tmp_path):
    argv = ["flops", "qwen3-0.6b", "--batch", "1", "--seq", "32", "--lora-rank", "8", "--lora-targets", "q_proj,v_proj", "--json"]
    first, _ = _symform(*argv, cache=tmp_path)
    again, loaded = _symform(*argv, cache=tmp_path)
    assert again == first and "built" in loaded and json.loads(first.splitlines()[0])["trainable_params"] > 0
