"""The wheel carries every declaration and device file, and symform reads them from there."""

import json
import re
import tomllib
from pathlib import Path

import pytest

import symform
from symform.engine.store.data import bundled_files, data_root
from symform.engine.language.declarations import check_library, default_library
from symform.engine.language.families import all_families, families, presets

REPO = Path(__file__).resolve().parent.parent


def test_every_bundled_file_parses():
    files = bundled_files()
    assert any(f.parts[:2] == ("formulas", "components") for f in files)
    for relative in files:
        path = data_root() / relative
        if path.suffix == ".toml":
            assert isinstance(tomllib.loads(path.read_text()), dict)
        else:
            assert isinstance(json.loads(path.read_text()), dict)


def test_the_bundled_declarations_fit_together():
    """Every part against the component it uses, every slot's default, no cycles (commands check only what they use)."""
    check_library(default_library())


def test_every_bundled_declaration_is_used_somewhere():
    assert default_library().components
    assert set(all_families()) == {p.stem for p in (data_root() / "formulas" / "families").glob("*.toml")}
    listed = {entry.file for entry in presets().values()}
    assert listed == {p.name for p in (data_root() / "formulas" / "presets").glob("*.json")}


@pytest.mark.parametrize("name", list(presets()))
def test_every_preset_loads(name):
    assert symform.load(name).evaluate("params") > 0


def test_the_installed_package_carries_every_data_file():
    package = Path(symform.__file__).resolve().parent
    if package.parent == REPO:
        pytest.skip("symform imported from a checkout; .ci/run installs it non-editable and runs this test")
    assert data_root() == package / "_data"
    in_repo = sorted(
        p.relative_to(REPO) for d in ("formulas", "hardware") for p in (REPO / d).rglob("*") if p.is_file() and p.suffix in {".toml", ".json"}
    )
    assert bundled_files() == in_repo


def test_every_list_of_layer_kinds_names_the_kinds_it_may_hold():
    """A count over a list of kinds (layer_types) counts the kinds it names and treats the rest as the other kind:
    an entry the family's code does not know would be counted as a guess, so each such list declares its kinds
    (`one_of`), and every kind a count names is among them."""
    for name, family in all_families().items():
        for count_name, count in family.spec.counts.items():
            for field in count.lists():
                spec = family.spec.fields[field]
                if spec.type not in ("str_list", "pattern"):
                    continue
                assert spec.one_of, f"{name}: {field} (read by count {count_name}) declares no one_of"
                kinds = count.kinds() or set()
                assert kinds & set(spec.one_of) or not kinds, f"{name}: count {count_name} names none of {field}'s kinds"


ODD_KINDS = [  # (preset, the field, a kind the family's code does not know)
    ("gemma-3-1b", "layer_types", "chunked_attention"),
    ("qwen3-next-80b-a3b", "layer_types", "sliding_attention"),
    ("gpt-oss-20b", "layer_types", "bogus"),
    ("nemotron-h-8b", "hybrid_override_pattern", "X"),
    ("deepseek-v3.2", "mlp_layer_types", "moe"),
]


@pytest.mark.parametrize("preset, field, odd", ODD_KINDS)
def test_a_layer_kind_the_family_does_not_know_is_refused(preset, field, odd, tmp_path, capsys):
    from symform.engine.language.families import preset_config
    from symform.engine.errors import ConfigError
    from symform.interface.cli.cli import main

    config, _ = preset_config(preset)
    section = config.get("text_config", config) if field not in config else config
    layers = section.get("num_hidden_layers") or len(section.get(field) or "")
    if field == "hybrid_override_pattern":
        section[field] = "M" * (layers - 1) + odd
        section.pop("layers_block_type", None)
    else:
        section[field] = [odd] * layers
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=f"{field}.*{re.escape(repr(odd))}.*correct the entry"):
        symform.load(path)
    assert main(["params", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
